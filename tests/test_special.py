"""``lp.special``: values and gradients equal to ``torch.special``'s (float64, the special
points included), second derivatives, float32, broadcasting and Python numbers, and
the devices: the library's functions on cpu and cuda, a clear NotImplementedError on
strict, the standard-only ones (expit, logit, xlogy, xlog1py, sinc) everywhere. Also
the exact GELU, which needs erf."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import host, torch_or_skip

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend

special = lp.special
INF, NAN = math.inf, math.nan
POINTS = [0.0, -0.0, 1.0, -1.0, 0.5, 0.3, -0.7, 2.5, -2.5, 7.0, -7.0, INF, -INF, NAN, 30.0, -30.0, 1e300, -1e300]
FROM_LIBRARY = ["erf", "erfc", "erfinv", "ndtr", "log_ndtr", "gammaln", "digamma", "i0", "i1"]
STANDARD_ONLY = ["expit", "logit", "sinc"]


def has_special(device) -> bool:
    return get_backend(device).special.available


def skip_without_special(device):
    if not has_special(device):
        pytest.skip(f"{device} has no special functions")


def ours(fn, *xs, device="cpu", dtype="float64"):
    """``fn``'s value and the gradients of its sum (each as NumPy)."""
    tensors = [Tensor(np.asarray(x, dtype=dtype), device=device, dtype=dtype, requires_grad=True) for x in xs]
    y = fn(*tensors)
    y.backward(lp.ones_like(y))
    return host(y), [host(t.grad) for t in tensors]


def theirs(torch, fn, *xs):
    tensors = [torch.tensor(np.asarray(x, dtype="float64"), requires_grad=True) for x in xs]
    y = fn(*tensors)
    grads = torch.autograd.grad(y.sum(), tensors)
    return y.detach().numpy(), [g.numpy() for g in grads]


def agree(a, b, rtol=1e-12, atol=1e-300):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


# Where the libraries differ, and why (points left out of the comparison with torch):
# scipy.special is the more accurate at poles and in far tails, where torch's Cephes code
# gives a finite number or a rounded 0: polygamma(1, x) at the poles -1, -30 (and -7: a
# pole too) is inf in SciPy (torch: 6.6e32, 8.5e28), at -inf inf (torch: nan); ndtr(-30)
# is 4.9e-198 (torch: 0.0).
DIFFERENT = {
    "digamma": {-1.0, -7.0, -30.0, -1e300, -INF},  # the gradient, polygamma(1, x), at poles
    "ndtr": {-30.0, -1e300},
    "log_ndtr": {-1e300},
    "logit": {-0.0},  # torch's gradient there is inf or -inf, by the length of the tensor (its vector path)
}


@pytest.mark.parametrize("name", FROM_LIBRARY + STANDARD_ONLY)
def test_values_and_gradients_equal_torchs(device, name):
    if name in FROM_LIBRARY:
        skip_without_special(device)
    torch = torch_or_skip()
    points = [x for x in POINTS if x not in DIFFERENT.get(name, ())]
    value, (grad,) = ours(getattr(special, name), points, device=device)
    t_value, (t_grad,) = theirs(torch, getattr(torch.special, name), points)
    rtol = 1e-9 if name in ("digamma", "gammaln") else 1e-12  # torch's polygamma(1, 1) is off by 5e-10
    agree(value, t_value, rtol=1e-12, atol=1e-15)
    agree(grad, t_grad, rtol=rtol, atol=1e-15)


def test_special_points(device):
    """erfinv at ±1 (±inf, gradient inf), logit at 0 and 1 (∓inf... gradient inf, nan
    outside), sinc at 0 (1, gradient 0), i1's gradient 0.5 at 0, xlogy at x = 0."""
    if has_special(device):
        value, (grad,) = ours(special.erfinv, [1.0, -1.0], device=device)
        assert value.tolist() == [INF, -INF] and grad.tolist() == [INF, INF]
        value, (grad,) = ours(special.i1, [0.0], device=device)
        assert value.tolist() == [0.0] and grad.tolist() == [0.5]
        value, (grad,) = ours(special.i0, [0.0], device=device)
        assert value.tolist() == [1.0] and grad.tolist() == [0.0]
        value, (grad,) = ours(special.gammaln, [-INF, 1.0, 2.0], device=device)  # inf at -inf, as C's lgamma
        assert value.tolist() == [INF, 0.0, 0.0]
    value, (grad,) = ours(special.logit, [0.0, 1.0, -0.0, -0.5, 1.5, 0.5], device=device)
    assert value[:3].tolist() == [-INF, INF, -INF] and np.isnan(value[3:5]).all() and value[5] == 0.0
    assert grad[:3].tolist() == [INF, INF, INF] and np.isnan(grad[3:5]).all() and grad[5] == 4.0
    value, (grad,) = ours(lambda x: special.logit(x, eps=0.1), [0.0, 0.05, 0.1, 0.5, 0.95, 1.0], device=device)
    np.testing.assert_allclose(value, [math.log(1 / 9)] * 3 + [0.0] + [math.log(9)] * 2)
    np.testing.assert_allclose(grad, [0.0, 0.0, 1 / 0.09, 4.0, 0.0, 0.0])  # 0 where clamped
    value, (grad,) = ours(special.sinc, [0.0, -0.0, 1.0, 0.5], device=device)
    np.testing.assert_allclose(value, [1.0, 1.0, 0.0, 2 / math.pi], atol=1e-16)
    assert grad[:2].tolist() == [0.0, 0.0] and grad[2] == pytest.approx(-1.0)
    # xlogy at x = 0: value 0 (nan with y nan); d/dx log(y), and 0 where y <= 0; d/dy x / y
    x = [0.0, 0.0, 0.0, 0.0, 0.0, 2.0]
    y = [1.0, 3.0, 0.0, -1.0, NAN, 3.0]
    value, (gx, gy) = ours(special.xlogy, x, y, device=device)
    assert value[:4].tolist() == [0.0, 0.0, 0.0, 0.0] and math.isnan(value[4])
    np.testing.assert_allclose(gx, [0.0, math.log(3.0), 0.0, 0.0, NAN, math.log(3.0)])
    assert math.isnan(gy[2]) and gy[3] == 0.0 and gy[5] == pytest.approx(2 / 3)  # 0 / 0 at (0, 0), as torch


def test_xlogy_and_xlog1py_equal_torchs_with_python_numbers_and_broadcasting(device):
    torch = torch_or_skip()
    xs = np.array([[0.0], [0.0], [1.0], [2.0], [NAN], [INF], [-2.0]])
    ys = np.array([1.0, 0.0, -1.0, -2.0, NAN, INF, -INF, 3.0, 0.5])
    for name in ("xlogy", "xlog1py"):
        value, grads = ours(getattr(special, name), xs, ys, device=device)
        t_value, t_grads = theirs(torch, getattr(torch.special, name), xs, ys)
        agree(value, t_value)
        for g, tg in zip(grads, t_grads):
            agree(g, tg)
        y = Tensor(ys, device=device, requires_grad=True)
        for number in (0.0, 2.0, 0):
            agree(host(getattr(special, name)(number, y)),
                  getattr(torch.special, name)(number, torch.tensor(ys)).numpy())
            agree(host(getattr(special, name)(y, number)),
                  getattr(torch.special, name)(torch.tensor(ys), number).numpy())
        with pytest.raises(TypeError, match=f"special.{name}: at least one argument must be a Tensor"):
            getattr(special, name)(1.0, 2.0)


@pytest.mark.parametrize("name", ["erf", "expit", "gammaln", "erfinv", "digamma", "logit", "sinc", "i1",
                                  "log_ndtr", "xlogy"])
def test_second_derivatives(device, name):
    """Each backward rule is made of LeanPass functions, so it can be differentiated
    again (gradgradcheck, and torch's second derivative where torch has one)."""
    if name not in ("expit", "logit", "sinc", "xlogy"):
        skip_without_special(device)
    rng = np.random.default_rng(5)
    if name == "xlogy":
        inputs = [Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=True),
                  Tensor(rng.uniform(0.5, 3.0, size=3), device=device, requires_grad=True)]
    else:
        low, high = {"erfinv": (-0.9, 0.9), "logit": (0.1, 0.9), "gammaln": (0.5, 4.0), "digamma": (0.5, 4.0)}.get(
            name, (-2.0, 2.0))
        inputs = [Tensor(rng.uniform(low, high, size=(2, 3)), device=device, requires_grad=True)]
    fn = getattr(special, name)
    assert lp.gradcheck(fn, inputs)
    assert lp.gradgradcheck(fn, inputs)
    torch = torch_or_skip()
    x = inputs[-1]
    (g,) = lp.autograd.grad(fn(*inputs).sum(), [x], create_graph=True)
    (gg,) = lp.autograd.grad(g.sum(), [x])
    tx = [torch.tensor(host(t), requires_grad=True) for t in inputs]
    (tg,) = torch.autograd.grad(getattr(torch.special, name)(*tx).sum(), [tx[-1]], create_graph=True)
    (tgg,) = torch.autograd.grad(tg.sum(), [tx[-1]])
    np.testing.assert_allclose(host(gg), tgg.numpy(), rtol=1e-8)  # torch's polygamma(n, x) is good to ~1e-9


def test_polygamma(device):
    skip_without_special(device)
    torch = torch_or_skip()
    x = [0.5, 1.0, 2.5, 7.0]
    for n in (0, 1, 2, 3):
        value, (grad,) = ours(lambda t, n=n: special.polygamma(n, t), x, device=device)
        t_value, (t_grad,) = theirs(torch, lambda t, n=n: torch.special.polygamma(n, t), x)
        agree(value, t_value, rtol=1e-8)
        agree(grad, t_grad, rtol=1e-8)
    agree(host(special.polygamma(0, Tensor(x, device=device))), host(special.digamma(Tensor(x, device=device))))
    assert special.psi is special.digamma  # torch.special.psi, scipy.special.psi
    with pytest.raises(ValueError, match="polygamma: n must be >= 0"):
        special.polygamma(-1, Tensor(x, device=device))
    with pytest.raises(TypeError, match="polygamma: n must be an integer"):
        special.polygamma(1.5, Tensor(x, device=device))


@pytest.mark.parametrize("name", FROM_LIBRARY + STANDARD_ONLY + ["xlogy", "xlog1py", "polygamma"])
def test_float32_stays_float32_and_integers_become_the_default_float(device, name):
    if name in FROM_LIBRARY + ["polygamma"]:
        skip_without_special(device)
    fn = getattr(special, name)
    if name in ("xlogy", "xlog1py"):
        call = lambda t: fn(t, t)  # noqa: E731
    elif name == "polygamma":
        call = lambda t: fn(1, t)  # noqa: E731
    else:
        call = fn
    x = Tensor(np.array([0.25, 0.5, 0.75], dtype="float32"), device=device, dtype="float32", requires_grad=True)
    y = call(x)
    y.backward(lp.ones_like(y))
    assert y.dtype == "float32" and x.grad.dtype == get_backend(device).dtype("float32")
    assert call(lp.asarray([1, 2], device=device)).dtype == lp.get_default_dtype()
    with pytest.raises(TypeError, match=f"special.{name}: complex tensors are not supported"):
        call(lp.asarray([1 + 2j], device=device))


@pytest.mark.parametrize("name", FROM_LIBRARY + ["polygamma"])
def test_a_device_without_special_functions_says_so(device, name):
    """On strict each library function raises NotImplementedError naming itself, the
    device and the reason; on cpu and cuda it runs."""
    x = Tensor([0.5], device=device)
    call = (lambda: special.polygamma(1, x)) if name == "polygamma" else (lambda: getattr(special, name)(x))
    if has_special(device):
        call()
        return
    with pytest.raises(NotImplementedError, match=rf"lp\.special\.{name} is not available on {device}: "
                                                  r"array_api_strict has no special functions"):
        call()


def test_the_backends_special_functions():
    cpu, strict = get_backend("cpu"), get_backend("strict")
    assert cpu.special.available and not strict.special.available
    assert cpu.special is cpu.special  # made once
    out = cpu.special.polygamma(1, np.array([1.0], dtype="float32"))  # SciPy computes it in float64
    assert out.dtype == np.float32 and out[0] == pytest.approx(math.pi**2 / 6)
    assert "array_api_strict" in repr(strict.special)


# ---- the exact GELU ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_exact_gelu_equals_torchs(device, dtype):
    """Values, gradients and second derivatives of ``approximate="none"`` (the default
    of x.gelu(), F.gelu and nn.GELU) against torch's; huge |x| stays finite, warns of
    nothing and float32 stays float32."""
    skip_without_special(device)
    torch = torch_or_skip()
    big = 1e300 if dtype == "float64" else 1e38
    xs = np.array([-6, -3, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 3, 6, 40, -40, big, -big], dtype=dtype)
    tx = torch.tensor(xs, requires_grad=True)
    t_y = torch.nn.functional.gelu(tx)
    (t_g,) = torch.autograd.grad(t_y.sum(), tx, create_graph=True)
    (t_gg,) = torch.autograd.grad(t_g.sum(), tx)
    # float32: 1 + erf(x / sqrt 2) cancels for x < 0, where an ulp of erf (6e-8) is much of it
    rtol, atol = (1e-14, 1e-30) if dtype == "float64" else (1e-6, 1e-6)
    for fn in (lambda t: t.gelu(), lp.nn.functional.gelu, lp.nn.GELU(), lambda t: t.gelu(approximate="none")):
        x = Tensor(xs, device=device, dtype=dtype, requires_grad=True)
        y = fn(x)
        (g,) = lp.autograd.grad(y.sum(), [x], create_graph=True)
        (gg,) = lp.autograd.grad(g.sum(), [x])
        assert y.dtype == dtype and g.dtype == dtype
        np.testing.assert_allclose(host(y), t_y.detach().numpy(), rtol=rtol, atol=atol)
        np.testing.assert_allclose(host(g), t_g.detach().numpy(), rtol=rtol, atol=atol)
        # torch's second derivative is nan at huge |x| (x^2 inf times pdf 0): LeanPass's is 0, its limit
        np.testing.assert_allclose(host(gg)[:-2], t_gg.numpy()[:-2], rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-6 if dtype == "float32" else 1e-15)
        assert host(gg)[-2:].tolist() == [0.0, 0.0]
    x = Tensor(np.linspace(-3, 3, 7), device=device, requires_grad=True)
    assert lp.gradgradcheck(lambda t: t.gelu(), [x])
    assert host(Tensor([1, 2], device=device).gelu()).dtype == lp.get_default_dtype()


def test_exact_gelu_on_a_device_without_erf_names_the_way_out(device):
    x = Tensor([0.5, -1.0], device=device)
    if has_special(device):
        pytest.skip(f"{device} has erf")
    message = rf"gelu: the exact form \(approximate='none', the default\) needs erf, which {device} does not have.*" \
              r"pass approximate='tanh'"
    for fn in (lambda t: t.gelu(), lp.nn.functional.gelu, lp.nn.GELU(), lp.nn.MLP([2, 2, 1], activation="gelu",
                                                                                    device=device)):
        with pytest.raises(NotImplementedError, match=message):
            fn(x if not isinstance(fn, lp.nn.MLP) else x.reshape(1, 2))
    assert lp.nn.GELU(approximate="tanh")(x).shape == (2,)  # the way out works


def test_sinc_second_derivative_at_and_near_zero(device):
    """sinc''(0) = -pi**2/3: the rule's Taylor series near 0 is differentiable again
    (a constant 0 there gave 0; PyTorch's rule gives nan). Near 0, on both sides of the
    series' threshold, the first and second derivatives are the closed form's."""
    x = lp.asarray([0.0, 4e-4, -9e-4, 1.1e-3, 0.5], device=device)
    x = lp.Tensor(x, requires_grad=True)
    (g,) = lp.autograd.grad(lp.special.sinc(x).sum(), x, create_graph=True)
    (h,) = lp.autograd.grad(g.sum(), x)
    v = x.numpy()
    px = np.pi * v
    with np.errstate(all="ignore"):
        first = np.where(v == 0, 0.0, (px * np.cos(px) - np.sin(px)) / (np.pi * v * v))
        second = np.where(v == 0, -np.pi**2 / 3,
                          (-(px**2) * np.sin(px) - 2 * px * np.cos(px) + 2 * np.sin(px)) / (np.pi * v**3))
    np.testing.assert_allclose(g.numpy(), first, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), second, rtol=1e-5, atol=1e-9)
