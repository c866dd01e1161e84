"""Statistical and utility functions of the namespace: sum, prod, mean, std, var, max,
min, cumulative_sum, cumulative_prod, all, any, diff.

Forward values against NumPy, dtypes as the standard says, gradients against finite
differences (gradcheck) on every device, property tests over random axes, and bad
input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor, gradcheck

RNG = np.random.default_rng(2024)
SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape)


def leaf(device, array, dtype=None):
    return Tensor(np.asarray(array), requires_grad=True, device=device, dtype=dtype)


def with_zeros(*shape, count=3):
    """Random values with ``count`` exact zeros (two of them in the first row)."""
    a = rand(*shape, low=0.5, high=1.5) * RNG.choice([-1.0, 1.0], size=shape)
    flat = a.reshape(-1)
    flat[[0, 1]] = 0.0
    flat[RNG.choice(np.arange(2, flat.size), size=count - 2, replace=False)] = 0.0
    return a


def close(actual, expected, **kw):
    kw.setdefault("rtol", 1e-10)
    kw.setdefault("atol", 1e-12)
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), **kw)


AXES = [None, 0, 1, -1, (0, 2), (), (0, 1, 2)]


# ---- forward values and dtypes ------------------------------------------------------------------

REDUCTIONS = {
    "sum": (lp.sum, np.sum, {}),
    "prod": (lp.prod, np.prod, {}),
    "mean": (lp.mean, np.mean, {}),
    "max": (lp.max, np.max, {}),
    "min": (lp.min, np.min, {}),
    "var": (lp.var, np.var, {}),
    "std": (lp.std, np.std, {}),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_forward_match_numpy(device, name, axis, keepdims):
    ours, theirs, _ = REDUCTIONS[name]
    a = rand(2, 3, 4)
    out = ours(lp.asarray(a, device=device), axis=axis, keepdims=keepdims)
    expected = theirs(a, axis=axis, keepdims=keepdims)
    assert out.shape == expected.shape
    assert out.dtype == lp.float64
    close(out.numpy(), expected)


@pytest.mark.parametrize("correction", [0, 1, 1.5, 2.0])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_correction_matches_numpy_ddof(device, name, correction):
    a = rand(4, 5)
    fn = getattr(lp, name)
    for axis in (None, 0, 1):
        out = fn(lp.asarray(a, device=device), axis=axis, correction=correction)
        close(out.numpy(), getattr(np, name)(a, axis=axis, ddof=correction))


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_without_degrees_of_freedom_are_nan(device, name):
    x = lp.asarray(rand(2, 3), device=device)
    out = getattr(lp, name)(x, axis=1, correction=3)
    assert np.isnan(out.numpy()).all()
    out = getattr(lp, name)(x, axis=0, correction=2.5)
    assert np.isnan(out.numpy()).all()


@pytest.mark.parametrize("name", ["var", "std", "sum", "prod", "mean", "max", "min"])
def test_float32_stays_float32(device, name):
    x = Tensor(rand(3, 4).astype(np.float32), requires_grad=True, device=device)
    out = getattr(lp, name)(x, axis=1)
    assert out.dtype == lp.float32
    out.sum().backward()
    assert x.grad.dtype == x.data.dtype


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("int8", "int64"), ("int32", "int64"), ("int64", "int64"), ("uint8", "uint64"), ("uint32", "uint64"),
     ("bool", "int64"), ("float32", "float32"), ("float64", "float64"), ("complex64", "complex64")],
)
@pytest.mark.parametrize("name", ["sum", "prod", "cumulative_sum", "cumulative_prod"])
def test_accumulation_dtypes(device, name, dtype, expected):
    a = np.array([[1, 2, 0], [3, 1, 1]]).astype(dtype)
    x = lp.asarray(a, device=device)
    kw = {"axis": 1}
    out = getattr(lp, name)(x, **kw)
    assert out.dtype == expected
    ref = {"sum": np.sum, "prod": np.prod, "cumulative_sum": np.cumsum, "cumulative_prod": np.cumprod}[name]
    close(out.numpy(), ref(a.astype(expected), axis=1))
    assert not out.requires_grad


@pytest.mark.parametrize("name", ["sum", "prod"])
def test_dtype_argument_casts_first(device, name):
    x = lp.asarray(np.array([200, 100], dtype=np.uint8), device=device)
    out = getattr(lp, name)(x, dtype=lp.uint8)
    assert out.dtype == lp.uint8
    assert int(out) == {"sum": 300 % 256, "prod": 20000 % 256}[name]
    out = getattr(lp, name)(x, dtype=lp.float32)
    assert out.dtype == lp.float32
    assert float(out) == {"sum": 300.0, "prod": 20000.0}[name]


def test_float32_with_float64_dtype_gives_float32_gradients(device):
    x = Tensor(rand(3, 4).astype(np.float32), requires_grad=True, device=device)
    for fn in (lp.sum, lp.prod):
        x.grad = None
        out = fn(x, axis=0, dtype=lp.float64)
        assert out.dtype == lp.float64 and out.requires_grad
        out.sum().backward()
        assert x.grad.dtype == x.data.dtype
    for fn in (lp.cumulative_sum, lp.cumulative_prod):
        x.grad = None
        fn(x, axis=1, dtype=lp.float64).sum().backward()
        assert x.grad.dtype == x.data.dtype


def test_integer_results_never_require_grad(device):
    x = leaf(device, rand(3, 4))
    for out in (lp.sum(x, dtype=lp.int64), lp.prod(x, axis=0, dtype=lp.int32),
                lp.cumulative_sum(x, axis=0, dtype=lp.int64), lp.cumulative_prod(x, axis=1, dtype=lp.int16)):
        assert not out.requires_grad
        assert out.dtype.kind == "i"


def test_empty_reductions(device):
    x = lp.asarray(np.zeros((0, 3)), device=device)
    assert lp.sum(x).item() == 0.0
    assert lp.prod(x).item() == 1.0
    close(lp.prod(x, axis=0).numpy(), np.ones(3))
    assert lp.prod(x, axis=1).shape == (0,)
    assert np.isnan(lp.var(x, axis=0).numpy()).all()


def test_mean_var_std_of_integers_give_the_default_float(device):
    x = lp.asarray([[1, 2, 3], [4, 6, 8]], device=device)
    assert lp.mean(x).dtype == lp.float64
    close(lp.mean(x, axis=0).numpy(), [2.5, 4.0, 5.5])
    flags = lp.asarray([True, False, True, True], device=device)
    assert float(lp.mean(flags)) == 0.75
    out = lp.var(x, axis=1)
    assert out.dtype == lp.float64
    close(out.numpy(), np.var([[1, 2, 3], [4, 6, 8]], axis=1))
    close(lp.std(x).numpy(), np.std([[1, 2, 3], [4, 6, 8]]))


@pytest.mark.parametrize("include_initial", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_running_totals_match_numpy(device, name, axis, include_initial):
    a = rand(3, 4, 2)
    out = getattr(lp, name)(lp.asarray(a, device=device), axis=axis, include_initial=include_initial)
    ref = np.cumsum(a, axis=axis) if name == "cumulative_sum" else np.cumprod(a, axis=axis)
    if include_initial:
        shape = list(a.shape)
        shape[axis] = 1
        ref = np.concatenate([np.full(shape, 0.0 if name == "cumulative_sum" else 1.0), ref], axis=axis)
    assert out.shape == ref.shape
    close(out.numpy(), ref)


def test_running_totals_of_1d_need_no_axis(device):
    x = lp.asarray([1.0, 2.0, 3.0], device=device)
    close(lp.cumulative_sum(x).numpy(), [1.0, 3.0, 6.0])
    close(lp.cumulative_prod(x, include_initial=True).numpy(), [1.0, 1.0, 2.0, 6.0])


# ---- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_prod_gradcheck(device, axis, keepdims):
    x = leaf(device, rand(2, 3, 4, low=0.5, high=1.5))
    assert gradcheck(lambda t: lp.prod(t, axis=axis, keepdims=keepdims), [x])


@pytest.mark.parametrize("axis", AXES)
def test_prod_gradcheck_with_zeros(device, axis):
    """One, two and three zeros in a group: the gradient is the product of the others
    (non-zero only at a lone zero), never nan."""
    x = leaf(device, with_zeros(2, 3, 4, count=4))
    assert gradcheck(lambda t: lp.prod(t, axis=axis), [x])
    lp.prod(x, axis=axis).sum().backward()
    assert np.isfinite(grad(x)).all()


def test_prod_gradient_with_zeros_is_the_product_of_the_others(device):
    a = np.array([[2.0, 0.0, 3.0, 4.0], [2.0, 0.0, 3.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    x = leaf(device, a)
    lp.prod(x, axis=1).sum().backward()
    expected = np.array([[0.0, 24.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [24.0, 12.0, 8.0, 6.0]])
    close(grad(x), expected)


@pytest.mark.parametrize("correction", [0, 1, 0.5])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_gradcheck(device, name, axis, correction):
    x = leaf(device, rand(3, 4, 2))
    fn = getattr(lp, name)
    assert gradcheck(lambda t: fn(t, axis=axis, correction=correction), [x])
    assert gradcheck(lambda t: fn(t, axis=axis, correction=correction, keepdims=True), [x])


def test_std_gradient_of_a_constant_is_zero(device):
    x = leaf(device, np.full((2, 3), 1.5))
    lp.std(x, axis=1).sum().backward()
    close(grad(x), np.zeros((2, 3)))


def grad(t):
    return lp.asarray(t.grad).numpy()


@pytest.mark.parametrize("include_initial", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumulative_sum_gradcheck(device, axis, include_initial):
    x = leaf(device, rand(3, 4, 2))
    assert gradcheck(lambda t: lp.cumulative_sum(t, axis=axis, include_initial=include_initial), [x])


@pytest.mark.parametrize("include_initial", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumulative_prod_gradcheck(device, axis, include_initial):
    x = leaf(device, rand(3, 4, 2, low=0.5, high=1.5))
    assert gradcheck(lambda t: lp.cumulative_prod(t, axis=axis, include_initial=include_initial), [x])


@pytest.mark.parametrize("include_initial", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumulative_prod_gradcheck_with_zeros(device, axis, include_initial):
    """Lines with no zero, one zero (first, middle, last) and two zeros."""
    a = rand(5, 5, low=0.5, high=1.5)
    a[0, 0] = a[1, 2] = a[2, 4] = a[3, 1] = a[3, 3] = a[4, 0] = a[4, 4] = 0.0
    x = leaf(device, a)
    assert gradcheck(lambda t: lp.cumulative_prod(t, axis=axis, include_initial=include_initial), [x])


def test_cumulative_prod_gradient_matches_torch_rule(device):
    x = leaf(device, [2.0, 0.0, 3.0, 0.0, 5.0])
    lp.cumulative_prod(x).backward(np.array([1.0, 1.0, 1.0, 1.0, 1.0]))
    # out = [2, 0, 0, 0, 0]; d/dx0 = 1; d/dx1 = 2 + 2*3 + 0 + 0; after the first zero: 0
    close(grad(x), [1.0, 8.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("axis", [None, 0, (1, 2)])
def test_sum_mean_max_min_gradcheck(device, axis):
    x = leaf(device, rand(2, 3, 4))
    for fn in (lp.sum, lp.mean, lp.max, lp.min):
        assert gradcheck(lambda t, fn=fn: fn(t, axis=axis), [x])


# ---- Tensor methods ------------------------------------------------------------------------------


def test_methods(device):
    a = rand(3, 4)
    x = lp.asarray(a, device=device)
    close(x.prod(1).numpy(), a.prod(1))
    close(x.prod(0, True).numpy(), a.prod(0, keepdims=True))
    close(x.std().numpy(), a.std())
    close(x.std(0, correction=1).numpy(), a.std(0, ddof=1))
    close(x.var(1, keepdims=True).numpy(), a.var(1, keepdims=True))
    close(x.cumsum(1).numpy(), a.cumsum(1))
    close(x.cumprod(0).numpy(), a.cumprod(0))
    close(lp.asarray(a[0], device=device).cumsum().numpy(), a[0].cumsum())
    with pytest.raises(ValueError, match="axis is required"):
        x.cumsum()


# ---- property tests --------------------------------------------------------------------------------


def _others_product(a, axes):
    """Reference: for each element, the product of the others of its reduced group."""
    out = np.empty_like(a)
    for index in np.ndindex(a.shape):
        group = tuple(slice(None) if i in axes else n for i, n in enumerate(index))
        values = np.array(a[group])
        position = tuple(index[i] for i in sorted(axes))
        values[position] = 1.0
        out[index] = np.prod(values)
    return out


@st.composite
def array_and_axes(draw, min_dims=0):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=1, max_side=4))
    a = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
    axes = draw(st.none() | st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True, max_size=len(shape))
                .map(tuple))
    return a, axes


@SETTINGS
@given(data=array_and_axes(), keepdims=st.booleans())
def test_prod_property(device, data, keepdims):
    a, axes = data
    x = leaf(device, a)
    out = lp.prod(x, axis=axes, keepdims=keepdims)
    close(out.numpy(), np.prod(a, axis=axes, keepdims=keepdims), rtol=1e-9)
    out.backward(np.ones(out.shape))
    full = tuple(range(a.ndim)) if axes is None else axes
    close(grad(x), _others_product(a, full), rtol=1e-9)


@SETTINGS
@given(data=array_and_axes(min_dims=1), correction=st.sampled_from([0, 1, 0.5]), name=st.sampled_from(["var", "std"]))
def test_var_std_property(device, data, correction, name):
    a, axes = data
    full = tuple(range(a.ndim)) if axes is None else axes
    n = math.prod(a.shape[i] for i in full)
    x = leaf(device, a)
    out = getattr(lp, name)(x, axis=axes, correction=correction, keepdims=True)
    if n - correction <= 0:
        assert np.isnan(out.numpy()).all()
        return
    ref = getattr(np, name)(a, axis=full, ddof=correction, keepdims=True)
    close(out.numpy(), ref, atol=1e-9)
    out.backward(np.ones(out.shape))
    d = a - a.mean(axis=full, keepdims=True)
    if name == "var":
        expected = 2 * d / (n - correction)
    else:
        with np.errstate(all="ignore"):
            expected = np.where(ref == 0, 0.0, d / ((n - correction) * ref))
    close(grad(x), expected, rtol=1e-7, atol=1e-7)


@SETTINGS
@given(data=array_and_axes(min_dims=1), include_initial=st.booleans(), name=st.sampled_from(["sum", "prod"]))
def test_running_total_property(device, data, include_initial, name):
    a, axes = data
    axis = 0 if not axes else axes[0]
    fn = getattr(lp, f"cumulative_{name}")
    out = fn(lp.asarray(a, device=device), axis=axis, include_initial=include_initial)
    ref = getattr(np, f"cum{name}")(a, axis=axis)
    if include_initial:
        ref = np.concatenate([np.full_like(np.take(a, [0], axis=axis), 0.0 if name == "sum" else 1.0), ref],
                             axis=axis)
    close(out.numpy(), ref, rtol=1e-9)
    # the last entry of a running total is the reduction
    last = lp.asarray(np.take(out.numpy(), [-1], axis=axis).squeeze(axis))
    close(last.numpy(), getattr(np, name)(a, axis=axis), rtol=1e-9)


# ---- utility: all, any, diff -----------------------------------------------------------------------


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_all_any_match_numpy(device, axis, keepdims):
    a = RNG.integers(0, 2, size=(2, 3, 4)).astype(bool)
    a[0] = True
    x = lp.asarray(a, device=device)
    for name in ("all", "any"):
        out = getattr(lp, name)(x, axis=axis, keepdims=keepdims)
        assert out.dtype == lp.bool
        np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a, axis=axis, keepdims=keepdims))


def test_all_any_of_numbers_and_nothing(device):
    x = leaf(device, [[1.0, math.nan], [0.0, -2.0]])
    out = lp.all(x, axis=1)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [True, False])
    np.testing.assert_array_equal(lp.any(x, axis=0).numpy(), [True, True])
    empty = lp.asarray(np.zeros((0, 2)), device=device)
    assert bool(lp.all(empty)) and not bool(lp.any(empty))
    np.testing.assert_array_equal(x.all(0).numpy(), [False, True])
    np.testing.assert_array_equal(x.any(1, True).numpy(), [[True], [True]])
    c = lp.asarray([0j, 1j], device=device)
    assert bool(lp.any(c)) and not bool(lp.all(c))


@pytest.mark.parametrize("n", [0, 1, 2, 3])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_diff_matches_numpy(device, n, axis):
    a = rand(3, 4, 5)
    out = lp.diff(lp.asarray(a, device=device), axis=axis, n=n)
    close(out.numpy(), np.diff(a, axis=axis, n=n))


def test_diff_with_prepend_and_append(device):
    a, p, q = rand(3, 4), rand(3, 2), rand(3, 1)
    x = lp.asarray(a, device=device)
    out = lp.diff(x, n=2, prepend=lp.asarray(p, device=device), append=lp.asarray(q, device=device))
    close(out.numpy(), np.diff(a, n=2, prepend=p, append=q))
    out = lp.diff(x, axis=0, prepend=0.5, append=1)
    close(out.numpy(), np.diff(a, axis=0, prepend=0.5, append=1))
    assert lp.diff(x, n=7).shape == (3, 0)


def test_diff_of_integers_keeps_the_dtype(device):
    x = lp.asarray(np.array([1, 4, 9, 16], dtype=np.int16), device=device)
    out = lp.diff(x)
    assert out.dtype == lp.int16
    np.testing.assert_array_equal(out.numpy(), [3, 5, 7])


@pytest.mark.parametrize("n", [1, 2, 3, 6])
@pytest.mark.parametrize("axis", [0, -1])
def test_diff_gradcheck(device, n, axis):
    x = leaf(device, rand(4, 5))
    p, q = leaf(device, rand(4, 5)[:, :2] if axis else rand(2, 5)), leaf(device, rand(4, 1) if axis else rand(1, 5))
    assert gradcheck(lambda t: lp.diff(t, axis=axis, n=n), [x])
    assert gradcheck(lambda t, a, b: lp.diff(t, axis=axis, n=n, prepend=a, append=b), [x, p, q])
    assert gradcheck(lambda t, b: lp.diff(t, axis=axis, n=n, append=b), [x, q])


def test_diff_method(device):
    a = rand(3, 4)
    x = lp.asarray(a, device=device)
    close(x.diff().numpy(), np.diff(a))
    close(x.diff(2, 0).numpy(), np.diff(a, 2, 0))


# ---- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "std", "var", "max", "min", "all", "any"])
def test_bad_axes(device, name):
    x = leaf(device, rand(2, 3))
    fn = getattr(lp, name)
    with pytest.raises(IndexError, match=f"{name}: axis 2 is out of range"):
        fn(x, axis=2)
    with pytest.raises(ValueError, match=f"{name}: repeated axis"):
        fn(x, axis=(0, -2))
    with pytest.raises(TypeError, match=f"{name}: axis must be an integer"):
        fn(x, axis=1.0)


def test_bad_running_totals(device):
    for fn in (lp.cumulative_sum, lp.cumulative_prod):
        name = fn.__name__
        with pytest.raises(ValueError, match=f"{name}: axis is required.*shape \\(2, 3\\)"):
            fn(lp.asarray(rand(2, 3), device=device))
        with pytest.raises(ValueError, match=f"{name}: x must have at least one axis"):
            fn(lp.asarray(1.0, device=device))
        with pytest.raises(IndexError, match=f"{name}: axis 2 is out of range"):
            fn(lp.asarray(rand(2, 3), device=device), axis=2)
        with pytest.raises(TypeError, match=f"{name}: .* is not a data type"):
            fn(lp.asarray(rand(3), device=device), dtype="float16")


def test_bad_correction_and_dtypes(device):
    x = lp.asarray(rand(3), device=device)
    with pytest.raises(ValueError, match="var: correction must be non-negative"):
        lp.var(x, correction=-1)
    with pytest.raises(TypeError, match="std: correction must be a real number"):
        lp.std(x, correction="1")
    with pytest.raises(TypeError, match="var: x must have a real dtype"):
        lp.var(lp.asarray([1j, 2j], device=device))
    with pytest.raises(TypeError, match="max: complex numbers have no order"):
        lp.max(lp.asarray([1j, 2j], device=device))
    with pytest.raises(TypeError, match="sum: expected a Tensor"):
        lp.sum([1.0, 2.0])


def test_bad_diff(device):
    a = rand(3, 4)
    x = leaf(device, a)
    with pytest.raises(ValueError, match="diff: n must be non-negative"):
        lp.diff(x, n=-1)
    with pytest.raises(TypeError, match="diff: n must be an integer"):
        lp.diff(x, n=1.5)
    with pytest.raises(ValueError, match="diff: x must have at least one axis"):
        lp.diff(lp.asarray(1.0, device=device))
    with pytest.raises(ValueError, match=r"diff: prepend of shape \(2, 1\) must match x's shape \(3, 4\)"):
        lp.diff(x, prepend=lp.asarray(rand(2, 1), device=device))
    with pytest.raises(TypeError, match="diff: x must have a numeric dtype, got bool"):
        lp.diff(lp.asarray([True, False], device=device))
    with pytest.raises(TypeError, match="diff: a Python float does not mix with a tensor of dtype int64"):
        lp.diff(lp.asarray([1, 2], device=device), prepend=0.5)
    with pytest.raises(IndexError, match="diff: axis 2 is out of range"):
        lp.diff(x, axis=2)
    with pytest.raises(TypeError, match="diff: .*no promotion of float64 with int64"):
        lp.diff(x, append=lp.asarray([[1]] * 3, device=device))
    other = "strict:1" if device.startswith("strict") and device != "strict:1" else "strict"
    with pytest.raises(ValueError, match=f"diff: operands are on different devices, {device} and {other}"):
        lp.diff(x, append=lp.asarray(rand(3, 1), device=other))
    close(x.numpy(), a)
    assert not grad(x).any()


def test_dtype_argument_never_drops_an_imaginary_part(device):
    """sum/prod/cumulative_* with a real dtype= of a complex tensor raise (as astype),
    instead of silently summing the real parts."""
    z = lp.asarray([1 + 5j, 2 - 1j], device=device)
    for f in (lp.sum, lp.prod, lp.cumulative_sum, lp.cumulative_prod):
        for dtype in (lp.float64, lp.float32, lp.int8):
            with pytest.raises(TypeError, match=f"{f.__name__}: dtype={dtype} would discard the imaginary part"):
                f(z, dtype=dtype)
    assert complex(lp.sum(z, dtype=lp.complex64)) == 3 + 4j


def test_max_min_of_bools_and_axis_nothing(device):
    """bool tensors have an order (False < True) on every device, as NumPy and PyTorch;
    axis=() reduces nothing, so an empty tensor is fine."""
    b = lp.asarray([[False, True], [False, False]], device=device)
    for f, want in ((lp.max, [True, False]), (lp.min, [False, False])):
        got = f(b, axis=1)
        assert got.dtype == lp.bool and got.numpy().tolist() == want
        assert f(b).dtype == lp.bool and b.max().numpy().tolist() is True
    empty = lp.zeros((0, 3), device=device)
    for f in (lp.max, lp.min):
        assert f(empty, axis=()).shape == (0, 3)
        with pytest.raises(ValueError, match=f"{f.__name__}: the tensor of shape"):
            f(empty, axis=0)


def test_max_of_a_row_with_nan_is_nan_without_warnings(device):
    import warnings

    x = Tensor([1.0, math.nan], device=device, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lp.max(x).backward()
    assert np.isnan(grad(x)).all()


def test_correction_takes_any_real_number(device):
    x = lp.asarray([1.0, 2.0, 4.0], device=device)
    assert float(lp.var(x, correction=np.int64(1))) == pytest.approx(7 / 3)
    with pytest.raises(TypeError, match="var: correction must be a real number"):
        lp.var(x, correction=True)
