"""Property tests: broadcasting, reductions, softmax and dtype preservation.

Every property runs on the ``device`` fixture (cpu, strict, cuda) and compares
LeanPass's forward values and gradients with references computed in float64
NumPy on the host.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from leanpass import Tensor
from leanpass.backends import get_backend

# `device` is a function-scoped fixture that only returns a string, so sharing it
# between the examples of one test is safe.
SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

DTYPES = ("float64", "float32")

# ---- helpers ------------------------------------------------------------------------


def tol(dtype) -> dict:
    if np.dtype(dtype) == np.float32:
        return {"rtol": 1e-4, "atol": 1e-4}
    return {"rtol": 1e-6, "atol": 1e-9}


def host_grad(t: Tensor, device: str) -> np.ndarray:
    return get_backend(device).to_host(t.grad)


def unbroadcast(g: np.ndarray, shape: tuple) -> np.ndarray:
    """NumPy reference: sum a gradient of the broadcast result back to ``shape``."""
    g = np.asarray(g, dtype=np.float64)
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def float_arrays(shape, lo=-2.0, hi=2.0, away_from_zero=None):
    """float64 arrays of ``shape`` with elements in [lo, hi] (and |x| >= away_from_zero)."""
    if away_from_zero is None:
        elements = st.floats(lo, hi)
    else:
        elements = st.one_of(st.floats(lo, -away_from_zero), st.floats(away_from_zero, hi))
    return hnp.arrays(np.float64, shape, elements=elements)


def leaf(x: np.ndarray, dtype, device) -> Tensor:
    return Tensor(np.asarray(x, dtype=dtype), requires_grad=True, device=device)


def ref64(x: np.ndarray, dtype) -> np.ndarray:
    """``x`` rounded to ``dtype`` (as LeanPass sees it), back in float64 for the reference."""
    return np.asarray(x, dtype=dtype).astype(np.float64)


def check_close(actual, expected, dtype, what):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    np.testing.assert_allclose(actual.astype(np.float64), expected, err_msg=what, **tol(dtype))


# ---- 1. broadcasting of binary operations --------------------------------------------

# name -> (operator, operand strategies (a, b), forward reference, gradient references)
BINARY = {
    "+": (
        lambda a, b: a + b,
        ({}, {}),
        lambda a, b: a + b,
        lambda g, a, b: (g, g),
    ),
    "-": (
        lambda a, b: a - b,
        ({}, {}),
        lambda a, b: a - b,
        lambda g, a, b: (g, -g),
    ),
    "*": (
        lambda a, b: a * b,
        ({}, {}),
        lambda a, b: a * b,
        lambda g, a, b: (g * b, g * a),
    ),
    "/": (
        lambda a, b: a / b,
        ({}, {"away_from_zero": 0.5}),
        lambda a, b: a / b,
        lambda g, a, b: (g / b, -g * a / (b * b)),
    ),
    "**": (
        lambda a, b: a**b,
        ({"lo": 0.5, "hi": 2.0}, {"lo": -2.0, "hi": 2.0}),
        lambda a, b: a**b,
        lambda g, a, b: (g * b * a ** (b - 1.0), g * a**b * np.log(a)),
    ),
}


@pytest.mark.parametrize("op", list(BINARY))
@SETTINGS
@given(data=st.data())
def test_binary_broadcasting(device, op, data):
    fn, (a_kw, b_kw), forward_ref, grad_ref = BINARY[op]
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4), label="shapes")
    (a_shape, b_shape), out_shape = shapes.input_shapes, shapes.result_shape
    a_np = data.draw(float_arrays(a_shape, **a_kw), label="a")
    b_np = data.draw(float_arrays(b_shape, **b_kw), label="b")
    g_np = data.draw(float_arrays(out_shape), label="grad_out")

    a, b = leaf(a_np, dtype, device), leaf(b_np, dtype, device)
    out = fn(a, b)
    a64, b64, g64 = ref64(a_np, dtype), ref64(b_np, dtype), ref64(g_np, dtype)

    assert out.shape == out_shape
    check_close(out.numpy(), forward_ref(a64, b64), dtype, f"forward of a {op} b")

    out.backward(np.asarray(g_np, dtype=dtype))
    ga_full, gb_full = grad_ref(np.broadcast_to(g64, out_shape), a64, b64)
    ga, gb = host_grad(a, device), host_grad(b, device)
    assert ga.shape == a_shape, f"grad of a: shape {ga.shape} != {a_shape}"
    assert gb.shape == b_shape, f"grad of b: shape {gb.shape} != {b_shape}"
    check_close(ga, unbroadcast(np.broadcast_to(ga_full, out_shape), a_shape), dtype, f"grad of a in a {op} b")
    check_close(gb, unbroadcast(np.broadcast_to(gb_full, out_shape), b_shape), dtype, f"grad of b in a {op} b")


@pytest.mark.parametrize("op", ["+", "-"])
@SETTINGS
@given(data=st.data())
def test_binary_broadcasting_counts(device, op, data):
    """backward with ones through ``a + b`` / ``a - b``: each operand's gradient counts how
    often each of its elements was broadcast (negated for the subtrahend)."""
    fn = BINARY[op][0]
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4), label="shapes")
    (a_shape, b_shape), out_shape = shapes.input_shapes, shapes.result_shape
    a = leaf(np.zeros(a_shape), "float64", device)
    b = leaf(np.zeros(b_shape), "float64", device)
    fn(a, b).backward(np.ones(out_shape))
    n_out = int(np.prod(out_shape))
    count_a = np.full(a_shape, n_out / max(int(np.prod(a_shape)), 1))
    count_b = np.full(b_shape, n_out / max(int(np.prod(b_shape)), 1))
    check_close(host_grad(a, device), count_a, "float64", "broadcast count of a")
    sign = 1.0 if op == "+" else -1.0
    check_close(host_grad(b, device), sign * count_b, "float64", "broadcast count of b")


def _nonzero_scalars(lo=0.5, hi=3.0):
    return st.one_of(
        st.sampled_from([1, 2, 3, -1, -2, -3]),
        st.floats(lo, hi),
        st.floats(-hi, -lo),
    )


def _pow_exponents():
    return st.one_of(st.sampled_from([0, 1, 2, 3, -1, -2, 0.5, 2.0, -0.5]), st.floats(-2.5, 2.5))


# name -> (operator on (tensor, s), tensor kwargs, scalar strategy, forward ref, grad ref)
SCALAR = {
    "t+s": (lambda t, s: t + s, {}, None, lambda x, s: x + s, lambda g, x, s: g),
    "s+t": (lambda t, s: s + t, {}, None, lambda x, s: s + x, lambda g, x, s: g),
    "t-s": (lambda t, s: t - s, {}, None, lambda x, s: x - s, lambda g, x, s: g),
    "s-t": (lambda t, s: s - t, {}, None, lambda x, s: s - x, lambda g, x, s: -g),
    "t*s": (lambda t, s: t * s, {}, None, lambda x, s: x * s, lambda g, x, s: g * s),
    "s*t": (lambda t, s: s * t, {}, None, lambda x, s: s * x, lambda g, x, s: g * s),
    "t/s": (lambda t, s: t / s, {}, _nonzero_scalars(), lambda x, s: x / s, lambda g, x, s: g / s),
    "s/t": (
        lambda t, s: s / t,
        {"away_from_zero": 0.5},
        None,
        lambda x, s: s / x,
        lambda g, x, s: -g * s / (x * x),
    ),
    "t**s": (
        lambda t, s: t**s,
        {"lo": 0.5, "hi": 2.0},
        _pow_exponents(),
        lambda x, s: x**s,
        lambda g, x, s: g * s * x ** (s - 1.0),
    ),
    "s**t": (
        lambda t, s: s**t,
        {"lo": -2.0, "hi": 2.0},
        st.one_of(st.sampled_from([1, 2, 3]), st.floats(0.25, 3.0)),
        lambda x, s: s**x,
        lambda g, x, s: g * s**x * np.log(s),
    ),
}

_ANY_SCALAR = st.one_of(st.integers(-3, 3), st.floats(-3.0, 3.0))


@pytest.mark.parametrize("op", list(SCALAR))
@SETTINGS
@given(data=st.data())
def test_scalar_operand_either_side(device, op, data):
    fn, t_kw, s_strategy, forward_ref, grad_ref = SCALAR[op]
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, max_side=4), label="shape")
    x_np = data.draw(float_arrays(shape, **t_kw), label="x")
    s = data.draw(s_strategy if s_strategy is not None else _ANY_SCALAR, label="scalar")
    g_np = data.draw(float_arrays(shape), label="grad_out")

    t = leaf(x_np, dtype, device)
    out = fn(t, s)
    x64, g64 = ref64(x_np, dtype), ref64(g_np, dtype)
    assert out.shape == shape
    check_close(out.numpy(), forward_ref(x64, s), dtype, f"forward of {op} with s={s!r}")
    out.backward(np.asarray(g_np, dtype=dtype))
    g = host_grad(t, device)
    assert g.shape == shape
    check_close(g, np.broadcast_to(grad_ref(g64, x64, s), shape), dtype, f"grad of {op} with s={s!r}")


# ---- 2. reductions ---------------------------------------------------------------------


@st.composite
def shape_and_axis(draw, min_dims=0):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=4, max_side=4), label="shape")
    ndim = len(shape)
    kinds = ["none", "tuple"] + (["int"] if ndim else [])
    kind = draw(st.sampled_from(kinds), label="axis kind")
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-ndim, ndim - 1), label="axis")
    else:
        axes = draw(st.permutations(range(ndim)), label="axes order")
        n = draw(st.integers(0, ndim), label="number of axes")
        negate = draw(st.lists(st.booleans(), min_size=n, max_size=n), label="negate")
        axis = tuple(a - ndim if neg else a for a, neg in zip(axes[:n], negate))
    keepdims = draw(st.booleans(), label="keepdims")
    return shape, axis, keepdims


def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(a % ndim for a in axis)


def _expand_grad(g, shape, axis, keepdims):
    """The output gradient ``g`` reshaped to keepdims form and broadcast to ``shape``."""
    axes = _norm_axes(axis, len(shape))
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    return np.broadcast_to(np.reshape(g, kept), shape)


def _distinct(shape, perm):
    """Distinct values (a permutation), so that every max is unique."""
    return np.asarray(perm, dtype=np.float64).reshape(shape) * 0.25 - 3.0


@pytest.mark.parametrize("reduction", ["sum", "mean", "max"])
@SETTINGS
@given(data=st.data())
def test_reductions(device, reduction, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape, axis, keepdims = data.draw(shape_and_axis(), label="shape, axis, keepdims")
    size = int(np.prod(shape))
    perm = data.draw(st.permutations(range(size)), label="values")
    x_np = _distinct(shape, perm)
    x64 = ref64(x_np, dtype)

    t = leaf(x_np, dtype, device)
    out = getattr(t, reduction)(axis=axis, keepdims=keepdims)
    expected = getattr(np, reduction)(x64, axis=axis, keepdims=keepdims)
    assert out.shape == expected.shape, f"{reduction}(axis={axis}, keepdims={keepdims}) on {shape}"
    check_close(out.numpy(), expected, dtype, f"{reduction}(axis={axis}, keepdims={keepdims}) on {shape}")

    g_np = data.draw(float_arrays(expected.shape), label="grad_out")
    out.backward(np.asarray(g_np, dtype=dtype))
    g = host_grad(t, device)
    assert g.shape == shape
    g_full = _expand_grad(ref64(g_np, dtype), shape, axis, keepdims)
    if reduction == "sum":
        ref = g_full
    elif reduction == "mean":
        count = int(np.prod([shape[i] for i in _norm_axes(axis, len(shape))]))
        ref = g_full / count
    else:
        ref = np.where(x64 == np.max(x64, axis=axis, keepdims=True), g_full, 0.0)
    check_close(g, ref, dtype, f"grad of {reduction}(axis={axis}, keepdims={keepdims}) on {shape}")


@SETTINGS
@given(data=st.data())
def test_max_ties_share_gradient_equally(device, data):
    shape, axis, keepdims = data.draw(shape_and_axis(), label="shape, axis, keepdims")
    x_np = data.draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([0.0, 1.0, 2.0])), label="x")
    t = leaf(x_np, "float64", device)
    out = t.max(axis=axis, keepdims=keepdims)
    expected = np.max(x_np, axis=axis, keepdims=keepdims)
    check_close(out.numpy(), expected, "float64", "max with ties")
    g_np = data.draw(float_arrays(expected.shape), label="grad_out")
    out.backward(g_np)
    winners = (x_np == np.max(x_np, axis=axis, keepdims=True)).astype(np.float64)
    share = winners / winners.sum(axis=axis, keepdims=True)
    ref = share * _expand_grad(g_np, shape, axis, keepdims)
    check_close(host_grad(t, device), ref, "float64", f"grad of max(axis={axis}) with ties")


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@SETTINGS
@given(data=st.data())
def test_reductions_general_values(device, reduction, data):
    """sum/mean on arbitrary values (negative, repeated) still agree with NumPy."""
    shape, axis, keepdims = data.draw(shape_and_axis(), label="shape, axis, keepdims")
    x_np = data.draw(float_arrays(shape, -100.0, 100.0), label="x")
    t = leaf(x_np, "float64", device)
    out = getattr(t, reduction)(axis=axis, keepdims=keepdims)
    check_close(out.numpy(), getattr(np, reduction)(x_np, axis=axis, keepdims=keepdims), "float64", reduction)


# ---- 3. softmax / log_softmax ---------------------------------------------------------------


def _logsumexp(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return (m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))).squeeze(axis)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@SETTINGS
@given(data=st.data())
def test_softmax_along_random_axis(device, fn, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), label="shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    scale = data.draw(st.sampled_from([1.0, 30.0, 1e4]), label="scale")
    x_np = data.draw(float_arrays(shape, -1.0, 1.0), label="unit logits") * scale
    x64 = ref64(x_np, dtype)

    t = leaf(x_np, dtype, device)
    out = getattr(t, fn)(axis=axis)
    y = out.numpy()
    assert y.shape == shape
    assert np.all(np.isfinite(y)), f"{fn} of logits scaled by {scale} is not finite"
    log_p_ref = x64 - np.expand_dims(_logsumexp(x64, axis), axis)
    if fn == "softmax":
        assert np.all(y >= 0.0) and np.all(y <= 1.0 + 1e-6)
        check_close(
            np.sum(y.astype(np.float64), axis=axis),
            np.ones(np.delete(shape, axis % len(shape))),
            dtype,
            "softmax rows sum to 1",
        )
        check_close(y, np.exp(log_p_ref), dtype, "softmax values")
    else:
        assert np.all(y <= 1e-6)
        lse = _logsumexp(y.astype(np.float64), axis)
        np.testing.assert_allclose(
            lse, 0.0, atol=1e-4 if dtype == "float32" else 1e-9, err_msg="logsumexp of log_softmax is 0"
        )
        # Relative to the size of the logits: -2e4 in float32 is only good to ~2e-3.
        np.testing.assert_allclose(y, log_p_ref, rtol=tol(dtype)["rtol"], atol=tol(dtype)["atol"] * max(scale, 1.0))

    g_np = data.draw(float_arrays(shape), label="grad_out")
    out.backward(np.asarray(g_np, dtype=dtype))
    grad = host_grad(t, device)
    g64 = ref64(g_np, dtype)
    p = np.exp(log_p_ref)
    assert grad.shape == shape
    assert np.all(np.isfinite(grad)), f"gradient of {fn} of logits scaled by {scale} is not finite"
    if fn == "softmax":
        ref = p * (g64 - np.sum(g64 * p, axis=axis, keepdims=True))
    else:
        ref = g64 - p * np.sum(g64, axis=axis, keepdims=True)
    check_close(grad, ref, dtype, f"gradient of {fn}")


# ---- 4. float32 stays float32 -----------------------------------------------------------------

# name -> (function of (x, y, xpos) returning a Tensor, minimum ndim). ``x`` is any sign,
# ``xpos`` positive, ``y`` has the shape of ``x`` without its first axis (broadcast).
FLOAT32_OPS = {
    "t+t": (lambda x, y, p: x + y, 0),
    "t-t": (lambda x, y, p: x - y, 0),
    "t*t": (lambda x, y, p: x * y, 0),
    "t/t": (lambda x, y, p: x / y, 0),
    "t**t": (lambda x, y, p: p ** (y * 0.5), 0),
    "t+1.5": (lambda x, y, p: x + 1.5, 0),
    "1.5+t": (lambda x, y, p: 1.5 + x, 0),
    "t-1.5": (lambda x, y, p: x - 1.5, 0),
    "1.5-t": (lambda x, y, p: 1.5 - x, 0),
    "t*1.5": (lambda x, y, p: x * 1.5, 0),
    "1.5*t": (lambda x, y, p: 1.5 * x, 0),
    "t/1.5": (lambda x, y, p: x / 1.5, 0),
    "1.5/t": (lambda x, y, p: 1.5 / x, 0),
    "t*2(int)": (lambda x, y, p: x * 2 + 1 - 3, 0),
    "t**2": (lambda x, y, p: x**2, 0),
    "t**3": (lambda x, y, p: x**3, 0),
    "t**0": (lambda x, y, p: x**0, 0),
    "t**0.5": (lambda x, y, p: p**0.5, 0),
    "t**-1.5": (lambda x, y, p: p**-1.5, 0),
    "2.5**t": (lambda x, y, p: 2.5**x, 0),
    "neg": (lambda x, y, p: -x, 0),
    "matmul-2d": (lambda x, y, p: x @ Tensor(np.ones((x.shape[-1], 3), np.float32), requires_grad=True,
                                             device=x.device), 1),
    "matmul-1d": (lambda x, y, p: x @ Tensor(np.ones(x.shape[-1], np.float32), requires_grad=True, device=x.device), 1),
    "sum": (lambda x, y, p: x.sum(), 0),
    "sum-axis": (lambda x, y, p: x.sum(axis=0, keepdims=True), 1),
    "mean": (lambda x, y, p: x.mean(), 0),
    "mean-axis": (lambda x, y, p: x.mean(axis=-1), 1),
    "max": (lambda x, y, p: x.max(), 0),
    "max-axis": (lambda x, y, p: x.max(axis=(0,)), 1),
    "relu": (lambda x, y, p: x.relu(), 0),
    "exp": (lambda x, y, p: x.exp(), 0),
    "log": (lambda x, y, p: p.log(), 0),
    "sigmoid": (lambda x, y, p: x.sigmoid(), 0),
    "tanh": (lambda x, y, p: x.tanh(), 0),
    "leaky_relu": (lambda x, y, p: x.leaky_relu(), 0),
    "leaky_relu-0.2": (lambda x, y, p: x.leaky_relu(0.2), 0),
    "gelu": (lambda x, y, p: x.gelu(approximate="tanh"), 0),
    "softplus": (lambda x, y, p: x.softplus(), 0),  # public, though not in SPEC's list
    "abs": (lambda x, y, p: x.abs(), 0),
    "sqrt": (lambda x, y, p: p.sqrt(), 0),
    "clip": (lambda x, y, p: x.clip(-0.5, 0.5), 0),
    "clip-min": (lambda x, y, p: x.clip(a_min=0.1), 0),
    "clamp-max": (lambda x, y, p: x.clamp(max=0.3), 0),
    "clamp-min-int": (lambda x, y, p: x.clamp(min=0), 0),
    "softmax": (lambda x, y, p: x.softmax(), 1),
    "log_softmax": (lambda x, y, p: x.log_softmax(axis=0), 1),
    "reshape": (lambda x, y, p: x.reshape(-1), 0),
    "transpose": (lambda x, y, p: x.transpose(), 0),
    ".T": (lambda x, y, p: x.T, 0),
    "flatten": (lambda x, y, p: x.flatten(), 0),
    "getitem-int": (lambda x, y, p: x[0], 1),
    "getitem-slice": (lambda x, y, p: x[1:, ...], 1),
    "getitem-none": (lambda x, y, p: x[None], 0),
    "getitem-array": (lambda x, y, p: x[[0, 0, 1]], 1),
}


@pytest.mark.parametrize("op", list(FLOAT32_OPS))
@settings(SETTINGS, max_examples=6)
@given(data=st.data())
def test_float32_stays_float32(device, op, data):
    fn, min_dims = FLOAT32_OPS[op]
    shape = data.draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=2, max_side=4), label="shape")
    x_np = data.draw(float_arrays(shape, -2.0, 2.0, away_from_zero=0.25), label="x")
    x = leaf(x_np, np.float32, device)
    y = leaf(x_np[0] if shape else x_np, np.float32, device)
    p = leaf(np.abs(x_np) + 0.5, np.float32, device)
    backend = get_backend(device)

    out = fn(x, y, p)
    assert isinstance(out.data, backend.array_type), f"{op}: .data is {type(out.data).__name__}"
    assert out.numpy().dtype == np.float32, f"{op}: output is {out.numpy().dtype}"
    # a Python-float upstream gradient must not promote either
    out.backward(np.full(out.shape, 0.75, dtype=np.float32))
    for name, t in (("x", x), ("y", y), ("xpos", p)):
        grad = host_grad(t, device)
        assert grad.dtype == np.float32, f"{op}: gradient of {name} is {grad.dtype}"
        assert grad.shape == t.shape
        assert np.all(np.isfinite(grad)), f"{op}: gradient of {name} is not finite"
