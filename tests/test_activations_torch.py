"""The activations of issue 28 (item 3) as PyTorch's: ``F.silu``/``nn.SiLU``,
``F.softplus``/``nn.Softplus``, ``F.elu``/``nn.ELU``, ``F.leaky_relu``/``nn.LeakyReLU``,
``F.mish``/``nn.Mish`` and ``F.hardtanh``/``nn.Hardtanh``: values, gradients (at the
kinks too) and second derivatives against torch in float64, gradcheck on every
device, no overflow warning at +-1e4, float32 kept, reprs, and bad input that
raises naming the function and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass as lp
from leanpass import Tensor, gradcheck, nn
from leanpass.nn import functional as F

RTOL = 1e-7

# name: (our function, its keyword arguments, torch's function name, the module and its arguments)
CASES = {
    "silu": (F.silu, {}, "silu", ("SiLU", {})),
    "softplus": (F.softplus, {}, "softplus", ("Softplus", {})),
    "softplus-beta": (F.softplus, {"beta": 2.0, "threshold": 3.0}, "softplus",
                      ("Softplus", {"beta": 2.0, "threshold": 3.0})),
    "softplus-negative-beta": (F.softplus, {"beta": -1.5}, "softplus", ("Softplus", {"beta": -1.5})),
    "elu": (F.elu, {}, "elu", ("ELU", {})),
    "elu-alpha": (F.elu, {"alpha": 0.7}, "elu", ("ELU", {"alpha": 0.7})),
    "leaky_relu": (F.leaky_relu, {}, "leaky_relu", ("LeakyReLU", {})),
    "leaky_relu-slope": (F.leaky_relu, {"negative_slope": 0.2}, "leaky_relu", ("LeakyReLU", {"negative_slope": 0.2})),
    "mish": (F.mish, {}, "mish", ("Mish", {})),
    "hardtanh": (F.hardtanh, {}, "hardtanh", ("Hardtanh", {})),
    "hardtanh-bounds": (F.hardtanh, {"min_val": -0.5, "max_val": 2.0}, "hardtanh",
                        ("Hardtanh", {"min_val": -0.5, "max_val": 2.0})),
}

# the kinks and edges: 0, hardtanh's bounds, softplus's threshold (beta * x = 3 at 1.5), large values
POINTS = np.array([-1e4, -40.0, -3.0, -2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 25.0, 1e4])


def _torch_fn(torch, name):
    return getattr(torch.nn.functional, name)


@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_are_torchs_at_every_point_kinks_included(case):
    torch = torch_or_skip()
    fn, kwargs, torch_name, _ = CASES[case]
    x = Tensor(POINTS, requires_grad=True)
    tx = torch.tensor(POINTS, requires_grad=True)
    y, ty = fn(x, **kwargs), _torch_fn(torch, torch_name)(tx, **kwargs)
    close(y, ty, rtol=RTOL, atol=0)
    g = np.linspace(0.5, 2.0, POINTS.size)
    y.backward(Tensor(g))
    ty.backward(torch.tensor(g))
    close(x.grad, tx.grad, rtol=RTOL, atol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_the_module_is_the_function_and_prints_as_torchs(case):
    torch = torch_or_skip()
    fn, kwargs, torch_name, (module, module_kwargs) = CASES[case]
    ours, theirs = getattr(nn, module)(**module_kwargs), getattr(torch.nn, module)(**module_kwargs)
    assert repr(ours) == repr(theirs)
    assert ours.state_dict() == {} and theirs.state_dict() == {}
    x = np.random.default_rng(0).normal(size=(3, 4)) * 3
    close(ours(Tensor(x)), theirs(torch.tensor(x)), rtol=RTOL, atol=0)
    np.testing.assert_array_equal(ours(Tensor(x)).numpy(), fn(Tensor(x), **kwargs).numpy())


def test_inplace_modules_print_as_torchs_and_leave_the_input():
    torch = torch_or_skip()
    for module, kwargs in (("SiLU", {}), ("Mish", {}), ("ELU", {"alpha": 2.0}), ("Hardtanh", {}), ("LeakyReLU", {})):
        ours = getattr(nn, module)(inplace=True, **kwargs)
        assert repr(ours) == repr(getattr(torch.nn, module)(inplace=True, **kwargs))
        x = Tensor([-2.0, 0.5, 3.0])
        ours(x)
        assert x.numpy().tolist() == [-2.0, 0.5, 3.0]


@pytest.mark.parametrize("case", list(CASES))
def test_second_derivatives_are_torchs(case):
    """A Hessian-vector product through backward(create_graph=True), away from the kinks."""
    torch = torch_or_skip()
    fn, kwargs, torch_name, _ = CASES[case]
    points = np.array([-30.0, -2.2, -1.3, -0.7, -0.1, 0.2, 0.6, 1.2, 1.9, 2.6, 30.0])
    v = np.linspace(-1.0, 1.0, points.size)
    x = Tensor(points, requires_grad=True)
    (gx,) = lp.autograd.grad((fn(x, **kwargs) ** 2).sum(), [x], create_graph=True)
    (gx * Tensor(v)).sum().backward()
    tx = torch.tensor(points, requires_grad=True)
    (tgx,) = torch.autograd.grad((_torch_fn(torch, torch_name)(tx, **kwargs) ** 2).sum(), [tx], create_graph=True)
    (tgx * torch.tensor(v)).sum().backward()
    close(gx, tgx, rtol=RTOL, atol=1e-300)
    close(x.grad, tx.grad, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_on_every_device(device, case):
    fn, kwargs, _, _ = CASES[case]
    x = Tensor([[-2.3, -0.8, -0.2], [0.3, 0.9, 2.4]], requires_grad=True, device=device)
    assert gradcheck(lambda t: fn(t, **kwargs), [x])


@pytest.mark.parametrize("case", list(CASES))
def test_no_overflow_warning_at_large_inputs_and_float32_stays_float32(device, case):
    """pytest turns warnings into errors: an overflow in exp would fail here."""
    fn, kwargs, _, _ = CASES[case]
    for dtype in ("float32", "float64"):
        x = Tensor([-1e4, -100.0, 0.0, 100.0, 1e4], requires_grad=True, device=device, dtype=dtype)
        y = fn(x, **kwargs)
        y.sum().backward()
        assert y.dtype == dtype and x.grad.dtype == x.data.dtype
        assert np.all(np.isfinite(host(y))) and np.all(np.isfinite(host(x.grad)))


def test_values_at_large_inputs_are_the_limits():
    x = Tensor([-1e4, 1e4])
    assert F.silu(x).numpy().tolist() == [-0.0, 1e4]
    assert F.mish(x).numpy().tolist() == [-0.0, 1e4]
    assert F.softplus(x).numpy().tolist() == [0.0, 1e4]
    assert F.elu(x).numpy().tolist() == [-1.0, 1e4]
    assert F.hardtanh(x).numpy().tolist() == [-1.0, 1.0]


def test_kinks_as_torch():
    """hardtanh passes 0 at its bounds, ELU takes alpha * exp(0) at 0, leaky_relu the
    slope at 0, softplus 1 above its threshold and e / (e + 1) at it; hardtanh passes
    the gradient at NaN."""
    x = Tensor([-1.0, 1.0, 0.0, float("nan")], requires_grad=True)
    F.hardtanh(x).sum().backward()
    assert x.grad.tolist()[:3] == [0.0, 0.0, 1.0] and x.grad[3] == 1.0
    for fn, expected in ((lambda t: F.elu(t, 2.0), 2.0), (lambda t: F.leaky_relu(t, 0.2), 0.2)):
        z = Tensor([0.0], requires_grad=True)
        fn(z).sum().backward()
        assert z.grad.tolist() == [expected]
    s = Tensor([10.0, 10.0 + 1e-9], requires_grad=True)
    F.softplus(s, beta=2.0, threshold=20.0).sum().backward()
    assert s.grad[1] == 1.0 and s.grad[0] == pytest.approx(np.exp(20.0) / (np.exp(20.0) + 1.0), rel=1e-15)


def test_integer_input_is_taken_as_the_default_float():
    x = lp.asarray([-2, 0, 3])
    for fn in (F.silu, F.softplus, F.elu, F.leaky_relu, F.mish, F.hardtanh):
        assert fn(x).dtype == "float64"


def test_relu_keeps_an_integer_dtype_as_torchs(device):
    """``relu`` (and ``relu_``) of an integer tensor is an integer tensor, as PyTorch's."""
    for dtype in ("int64", "int32", "uint8"):
        values = [-2, 0, 3] if dtype != "uint8" else [0, 1, 3]
        x = lp.asarray(values, dtype=dtype, device=device)
        torch = torch_or_skip()
        theirs = torch.relu(torch.tensor(values, dtype=getattr(torch, dtype)))
        for out in (F.relu(x), x.relu(), nn.ReLU()(x)):
            assert out.dtype == dtype
            np.testing.assert_array_equal(host(out), theirs.numpy())
        x.relu_()
        assert x.dtype == dtype
        np.testing.assert_array_equal(host(x), theirs.numpy())


def test_ops_are_named_and_differentiate_twice_through_the_graph():
    x = Tensor([0.5], requires_grad=True)
    assert [f(x)._op for f in (F.silu, F.softplus, F.elu, F.mish, F.hardtanh)] == [
        "silu", "softplus", "elu", "mish", "hardtanh"]


# ---- bad input --------------------------------------------------------------------------------


def _unchanged(x, before):
    np.testing.assert_array_equal(x.numpy(), before)
    assert x.grad is None or not np.any(x.grad)


@pytest.mark.parametrize("call, error, parts", [
    (lambda x: F.silu([1.0]), TypeError, ["silu", "Tensor", "list"]),
    (lambda x: F.mish(np.ones(2)), TypeError, ["mish", "ndarray"]),
    (lambda x: F.softplus(x, beta=0), ValueError, ["softplus", "beta", "0"]),
    (lambda x: F.softplus(x, beta="2"), TypeError, ["softplus", "beta"]),
    (lambda x: F.softplus(x, threshold=None), TypeError, ["softplus", "threshold"]),
    (lambda x: F.elu(x, alpha=[1.0]), TypeError, ["elu", "alpha"]),
    (lambda x: F.elu(x, inplace="yes"), TypeError, ["elu", "inplace"]),
    (lambda x: F.leaky_relu(x, negative_slope=None), TypeError, ["leaky_relu", "negative_slope"]),
    (lambda x: F.hardtanh(x, 1.0, -1.0), ValueError, ["hardtanh", "min_val", "max_val", "1.0", "-1.0"]),
    (lambda x: F.silu(lp.asarray([1j])), TypeError, ["silu", "complex"]),
    (lambda x: nn.Hardtanh(1.0, 1.0), ValueError, ["Hardtanh", "max_val", "min_val"]),
    (lambda x: nn.Softplus(beta=0.0), ValueError, ["Softplus", "beta"]),
    (lambda x: nn.ELU(alpha="a"), TypeError, ["ELU", "alpha"]),
    (lambda x: nn.SiLU()([1.0]), TypeError, ["SiLU", "Tensor"]),
    (lambda x: nn.Mish(inplace=2), TypeError, ["Mish", "inplace"]),
])
def test_bad_input_raises_naming_the_function_and_changes_nothing(call, error, parts):
    x = Tensor([-1.0, 2.0], requires_grad=True)
    before = x.numpy().copy()
    with pytest.raises(error) as info:
        call(x)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))
    _unchanged(x, before)


@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_at_nan_and_infinities_are_torchs(case):
    """NaN and +-inf in, as PyTorch: ELU's gradient at NaN is the incoming one (it
    was NaN)."""
    torch = torch_or_skip()
    fn, kwargs, torch_name, _ = CASES[case]
    points = np.array([np.nan, np.inf, -np.inf, -1.0, 2.0])
    x, tx = Tensor(points, requires_grad=True), torch.tensor(points, requires_grad=True)
    y, ty = fn(x, **kwargs), _torch_fn(torch, torch_name)(tx, **kwargs)
    np.testing.assert_allclose(host(y), ty.detach().numpy(), rtol=RTOL, atol=0)
    y.backward(Tensor(np.full(points.size, 1.5)))
    ty.backward(torch.full((points.size,), 1.5, dtype=torch.float64))
    np.testing.assert_allclose(host(x.grad), tx.grad.numpy(), rtol=RTOL, atol=0)
