"""Edge cases of single operations where LeanPass follows PyTorch: the value and the
gradient at extreme and special inputs (1e308, denormals, infinities, NaN, -0.0).

Each test checks a closed-form expectation (so it means something without torch),
then the same numbers against PyTorch in float64 where torch is installed.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import leanpass as lp
from leanpass import Tensor

INF, NAN = math.inf, math.nan


def torch_or_skip():
    return pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")


def value_and_grad(fn, x, device, weight=None, dtype="float64"):
    """``fn(x)`` and the gradient of ``sum(weight * fn(x))`` w.r.t. ``x`` (NumPy arrays),
    computed with every warning an error (an overflow must not warn)."""
    t = Tensor(np.asarray(x, dtype=dtype), requires_grad=True, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = fn(t)
        w = lp.ones_like(y) if weight is None else Tensor(np.asarray(weight, dtype=dtype), device=device)
        y.backward(w)
    return lp.asarray(y).numpy(), lp.asarray(t.grad).numpy()


def torch_value_and_grad(fn, x, weight=None, dtype="float64"):
    torch = torch_or_skip()
    t = torch.tensor(np.asarray(x, dtype=dtype), requires_grad=True)
    y = fn(t)
    y.backward(torch.ones_like(y) if weight is None else torch.tensor(np.asarray(weight, dtype=dtype)))
    return y.detach().numpy(), t.grad.numpy()


def same(actual, expected, signs=False):
    """Equal element by element (NaN equals NaN); with ``signs``, zeros of the same sign too."""
    actual, expected = np.asarray(actual), np.asarray(expected, dtype=np.asarray(actual).dtype)
    np.testing.assert_array_equal(actual, expected)
    if signs:  # the sign of a NaN means nothing
        zero = actual == 0
        np.testing.assert_array_equal(np.signbit(actual[zero]), np.signbit(expected[zero]))


# ---- cumulative_prod --------------------------------------------------------------------


EXTREMES = [1e308, 5e-324, INF, -INF, NAN, 0.0, -2.5, 1e-310]
WEIGHTS = [0.3, 0.7, -1.5, 2.0, 0.1, 3.0, 0.25, 1e300]  # 0.7 * 5e-324 underflows to 0


@pytest.mark.parametrize("axis", [0, 1])
def test_cumulative_prod_over_a_length_one_axis_passes_the_weight_itself(device, axis):
    """Along an axis of length 1 the output is the input, so the gradient is the weight
    itself: not ``weight * x / x`` (inf at 1e308, 0 at 5e-324, NaN at inf)."""
    x = np.array(EXTREMES)[:, None] if axis == 1 else np.array(EXTREMES)[None, :]
    w = np.array(WEIGHTS).reshape(x.shape)
    value, grad = value_and_grad(lambda t: lp.cumulative_prod(t, axis=axis), x, device, w)
    same(value, x, signs=True)
    same(grad, w, signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.cumprod(t, dim=axis), x, w)
    same(value, torch_value, signs=True)
    same(grad, torch_grad, signs=True)


def test_cumulative_prod_over_a_length_one_axis_with_the_initial_one(device):
    x = np.array(EXTREMES)[:, None]
    w = np.stack([np.full(len(EXTREMES), 9.0), WEIGHTS], axis=1)  # the initial 1 gets no gradient
    value, grad = value_and_grad(lambda t: lp.cumulative_prod(t, axis=1, include_initial=True), x, device, w)
    same(value, np.concatenate([np.ones_like(x), x], axis=1), signs=True)
    same(grad, w[:, 1:], signs=True)


def _cumprod_grad(x, w):
    """The gradient of ``sum(w * cumprod(x))`` along the last axis by its definition:
    ``sum over i >= j of w[i] * prod(x[:i + 1] without x[j])`` (exact with zeros)."""
    grad = np.zeros_like(x)
    for row in np.ndindex(x.shape[:-1]):
        for j in range(x.shape[-1]):
            grad[row + (j,)] = sum(w[row + (i,)] * np.prod(np.delete(x[row][: i + 1], j))
                                   for i in range(j, x.shape[-1]))
    return grad


@pytest.mark.parametrize("axis", [0, 1])
def test_cumulative_prod_with_zeros_matches_the_definition_and_torch(device, axis):
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, size=(6, 5)) * rng.choice([-1.0, 1.0], size=(6, 5))
    x[0, 0] = 0.0  # a zero first
    x[1, 2] = 0.0  # one zero inside
    x[2, 1] = x[2, 3] = 0.0  # two zeros
    x[3, 4] = 0.0  # a zero last
    x[4, :3] = 0.0  # three zeros in a row
    w = rng.standard_normal(x.shape)
    if axis == 0:
        x, w = x.T.copy(), w.T.copy()
    value, grad = value_and_grad(lambda t: lp.cumulative_prod(t, axis=axis), x, device, w)
    moved = (lambda a: a) if axis == 1 else (lambda a: a.T)
    np.testing.assert_allclose(value, moved(np.cumprod(moved(x), axis=-1)), rtol=1e-14, atol=0)
    np.testing.assert_allclose(grad, moved(_cumprod_grad(moved(x), moved(w))), rtol=1e-12, atol=1e-15)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.cumprod(t, dim=axis), x, w)
    np.testing.assert_allclose(value, torch_value, rtol=1e-14, atol=0)
    np.testing.assert_allclose(grad, torch_grad, rtol=1e-12, atol=1e-15)


# ---- abs and the 1- and inf-norms at NaN ---------------------------------------------------


def test_abs_gradient_is_zero_at_nan(device):
    x = [NAN, -2.0, 0.0, -0.0, 3.0, INF, -INF]
    w = [5.0, 2.0, 3.0, 4.0, 0.5, 1.5, 2.5]
    value, grad = value_and_grad(lp.abs, x, device, w)
    same(value, [NAN, 2.0, 0.0, 0.0, 3.0, INF, INF], signs=True)
    same(grad, [0.0, -2.0, 0.0, 0.0, 0.5, 1.5, -2.5])
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(torch.abs, x, w)
    same(value, torch_value, signs=True)
    same(grad, torch_grad)


NORM_ROWS = [[NAN, 1.0, -2.0, 0.0], [3.0, -4.0, 1.0, 0.0], [-4.0, 4.0, 1.0, -0.5]]


@pytest.mark.parametrize("ord, expected", [
    (1, [[0.0, 1.0, -1.0, 0.0], [1.0, -1.0, 1.0, 0.0], [-1.0, 1.0, 1.0, -1.0]]),
    (INF, [[0.0, 0.0, -0.0, 0.0], [0.0, -1.0, 0.0, 0.0], [-0.5, 0.5, 0.0, -0.0]]),
    (-INF, [[0.0, 0.0, -0.0, 0.0], [0.0, -0.0, 0.0, 0.0], [-0.0, 0.0, 0.0, -1.0]]),  # sgn(0) is 0
])
def test_vector_norm_one_and_inf_gradients_are_zero_at_nan(device, ord, expected):
    """A row with a NaN has a NaN norm; PyTorch's gradient there is 0 at the NaN (its
    sign counts as 0) and, for ord +-inf, 0 at the other entries (the NaN is the only
    "maximum"). Other rows as usual: ties share the gradient."""
    value, grad = value_and_grad(lambda t: lp.linalg.vector_norm(t, ord=ord, axis=1), NORM_ROWS, device)
    assert np.isnan(value[0]) and not np.isnan(value[1:]).any()
    same(grad, expected, signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.linalg.vector_norm(t, ord=ord, dim=1), NORM_ROWS)
    np.testing.assert_allclose(value, torch_value, rtol=1e-15)
    same(grad, torch_grad, signs=True)


@pytest.mark.parametrize("ord", [2, 3, 0.5])
def test_vector_norm_other_orders_at_nan_are_nan_as_torch(device, ord):
    value, grad = value_and_grad(lambda t: lp.linalg.vector_norm(t, ord=ord), [NAN, 1.0, -2.0], device)
    assert np.isnan(value) and np.isnan(grad).all()
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.linalg.vector_norm(t, ord=ord), [NAN, 1.0, -2.0])
    assert np.isnan(torch_value) and np.isnan(torch_grad).all()


# ---- relu at NaN ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["method", "functional", "module"])
def test_relu_passes_the_gradient_at_nan(device, form):
    """PyTorch's ReLU backward is ``0 where result <= 0, else g``: NaN is not <= 0, so the
    gradient passes there (and not at 0)."""
    fn = {"method": lambda t: t.relu(), "functional": lp.nn.functional.relu, "module": lp.nn.ReLU()}[form]
    x = [NAN, 0.0, -0.0, -1.0, 2.0, INF, -INF]
    w = [5.0, 2.0, 3.0, 4.0, 0.5, 1.5, 2.5]
    value, grad = value_and_grad(fn, x, device, w)
    same(value, [NAN, 0.0, 0.0, 0.0, 2.0, INF, 0.0])
    same(grad, [5.0, 0.0, 0.0, 0.0, 0.5, 1.5, 0.0], signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(torch.relu, x, w)
    same(value, torch_value)
    same(grad, torch_grad, signs=True)


# ---- x ** 0.5 at -0.0 ------------------------------------------------------------------------

POWER_BASES = [-0.0, 0.0, 4.0, -INF, INF, -1.0]


@pytest.mark.parametrize("form", ["operator", "function"])
def test_power_one_half_by_a_number_is_sqrt_at_minus_zero(device, form):
    """``x ** 0.5`` for a Python 0.5 is PyTorch's sqrt: -0.0 at -0.0 and nan at -inf,
    with the gradient ``0.5 * rsqrt(x)``: -inf at -0.0, nan at -inf, 0 at inf."""
    fn = (lambda t: t**0.5) if form == "operator" else (lambda t: lp.pow(t, 0.5))
    value, grad = value_and_grad(fn, POWER_BASES, device)
    same(value, [-0.0, 0.0, 2.0, NAN, INF, NAN], signs=True)
    same(grad, [-INF, INF, 0.25, NAN, 0.0, NAN], signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.pow(t, 0.5), POWER_BASES)
    same(value, torch_value, signs=True)
    same(grad, torch_grad, signs=True)
    torch_value, torch_grad = torch_value_and_grad(lambda t: t**0.5, POWER_BASES)
    same(value, torch_value, signs=True)
    same(grad, torch_grad, signs=True)


def test_power_one_half_by_a_number_keeps_float32(device):
    value, grad = value_and_grad(lambda t: t**0.5, [4.0, -0.0], device, dtype="float32")
    assert value.dtype == grad.dtype == np.float32
    same(value, [2.0, -0.0], signs=True)
    same(grad, [0.25, -INF], signs=True)


@pytest.mark.parametrize("shape", [(), (1,), (6,)])
def test_power_one_half_by_a_tensor_follows_pow(device, shape):
    """With a tensor exponent PyTorch computes ``pow`` (C's special cases): +0 at -0.0,
    +inf at -inf, and the gradient ``0.5 * pow(x, -0.5)``: +inf at -0.0, 0 at -inf."""
    exponent = np.full(shape, 0.5)
    value, grad = value_and_grad(lambda t: lp.pow(t, Tensor(exponent, device=device)), POWER_BASES, device)
    same(value, [0.0, 0.0, 2.0, INF, INF, NAN], signs=True)
    same(grad, [INF, INF, 0.25, 0.0, 0.0, NAN], signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.pow(t, torch.tensor(exponent)), POWER_BASES)
    same(value, torch_value, signs=True)
    same(grad, torch_grad, signs=True)


# ---- gelu (tanh approximation) at huge inputs -------------------------------------------------


@pytest.mark.parametrize("dtype, x", [
    ("float64", [1e308, -1e308, 1e200, -1e200, 1e10, -1e10, 30.0, -30.0]),
    ("float32", [3e38, -3e38, 1e20, -1e20, 1e10, -1e10, 30.0, -30.0]),
])
def test_gelu_at_huge_inputs_is_finite_and_warns_nothing(device, dtype, x):
    """gelu(x) is x for large x (0.5 x (1 + tanh) with tanh = 1: never 2 x, which
    overflows) and -0.0 for large negative x; the gradient is 1 and 0 there."""
    for fn in (lambda t: t.gelu(approximate="tanh"), lambda t: lp.nn.functional.gelu(t, approximate="tanh"),
               lp.nn.GELU(approximate="tanh")):
        value, grad = value_and_grad(fn, x, device, dtype=dtype)
        same(value, np.where(np.array(x) > 0, x, -0.0), signs=True)
        same(grad, np.where(np.array(x) > 0, 1.0, 0.0), signs=True)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(
        lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x, dtype=dtype)
    same(value, torch_value, signs=True)
    # PyTorch's backward multiplies (1 - tanh^2) = 0 by c (1 + 3 k x^2), which overflows
    # to inf where x^2 does (|x| > 1e154 in float64, 1.8e19 in float32): NaN there. Where
    # its gradient is a number, LeanPass's is the same number.
    finite = np.isfinite(torch_grad)
    assert finite[-4:].all()
    same(grad[finite], torch_grad[finite], signs=True)


def test_gelu_matches_torch_at_ordinary_inputs(device):
    x = np.concatenate([np.random.default_rng(3).standard_normal(200) * 4, [0.0, -0.0, 5.5, -5.5, 9.0, -9.0]])
    value, grad = value_and_grad(lambda t: t.gelu(approximate="tanh"), x, device)
    c, k = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(c * (x + k * x**3))
    # tolerances: 1 + t and 1 - t^2 are tiny for x << 0, where an ulp of tanh is much of them
    np.testing.assert_allclose(value, 0.5 * x * (1 + t), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(grad, 0.5 * (1 + t) + 0.5 * c * x * (1 + 3 * k * x * x) * (1 - t * t),
                               rtol=1e-13, atol=1e-14)
    torch = torch_or_skip()
    torch_value, torch_grad = torch_value_and_grad(lambda t: torch.nn.functional.gelu(t, approximate="tanh"), x)
    np.testing.assert_allclose(value, torch_value, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(grad, torch_grad, rtol=1e-13, atol=1e-14)


# ---- copy= of asarray and from_dlpack -------------------------------------------------------


@pytest.mark.parametrize("copy", ["x", "False", 1, 0, 1.0, [True]])
@pytest.mark.parametrize("function", ["asarray", "from_dlpack"])
def test_copy_must_be_a_bool_or_none(device, function, copy):
    """The standard's ``copy`` is a bool or None; anything else (a truthy string would be
    taken as True, and ``copy="False"`` as a copy) is a TypeError naming the function."""
    make = getattr(lp, function)
    sources = [Tensor([1.0, 2.0], device=device), np.array([1.0, 2.0])]
    if function == "asarray":
        sources.append([1.0, 2.0])
    for source in sources:
        with pytest.raises(TypeError, match=rf"^{function}: copy must be True, False or None, got "):
            make(source, copy=copy)


@pytest.mark.parametrize("function", ["asarray", "from_dlpack"])
def test_copy_takes_bools_and_none(device, function):
    make = getattr(lp, function)
    t = Tensor([1.0, 2.0], device=device)
    for copy in (True, False, None, np.True_, np.False_):
        assert make(t, copy=copy).numpy().tolist() == [1.0, 2.0]
    assert make(t, copy=np.True_) is not t
