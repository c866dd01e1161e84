"""``take`` and ``take_along_axis`` on every device: forward values as NumPy,
gradients as a scatter-add (repeated indices accumulate), negative indices,
out-of-range indices raising ``IndexError`` everywhere, bad input, properties."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import other_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend

SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
X = np.random.default_rng(3).uniform(-2.0, 2.0, size=(3, 4, 5))


def host(device, array):
    return np.array(get_backend(device).to_host(array), copy=True)


def leaf(x, device, dtype="float64"):
    return Tensor(np.asarray(x, dtype=dtype), requires_grad=True, device=device)


def ints(x, device, dtype="int64"):
    return lp.asarray(np.asarray(x, dtype=dtype), device=device)


# ---- take -------------------------------------------------------------------------------------

TAKE = {
    "axis0": ([2, 0], 0),
    "axis1_repeated": ([1, 1, 3, 1], 1),
    "last_axis_negative": ([-1, 0, -5], -1),
    "middle_negative_axis": ([3, -4], -2),
    "empty": ([], 2),
}


@pytest.mark.parametrize("case", list(TAKE))
def test_take_forward_and_scatter_add_gradient(device, case):
    index, axis = TAKE[case]
    x = leaf(X, device)
    out = lp.take(x, ints(index, device), axis=axis)
    want = np.take(X, index, axis=axis)
    assert out.shape == want.shape and out.dtype == lp.float64
    np.testing.assert_array_equal(out.numpy(), want)
    w = np.random.default_rng(0).uniform(0.5, 1.5, size=want.shape)
    (out * Tensor(w, device=device)).sum().backward()
    grad = np.zeros(X.shape)
    np.add.at(grad, (slice(None),) * (axis % 3) + (np.asarray(index, dtype=np.int64),), w)
    np.testing.assert_allclose(host(device, x.grad), grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in TAKE if c != "empty"])
def test_take_gradcheck(device, case):
    index, axis = TAKE[case]
    x = leaf(X, device)
    idx = ints(index, device)
    assert lp.gradcheck(lambda z: lp.take(z, idx, axis=axis), (x,))


def test_take_of_a_1d_tensor_needs_no_axis_and_takes_any_integer_dtype(device):
    v = leaf([1.0, 2.0, 3.0], device)
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        out = lp.take(v, ints([2, 0, 2], device, dtype))
        np.testing.assert_array_equal(out.numpy(), [3.0, 1.0, 3.0])
    assert lp.gradcheck(lambda z: lp.take(z, ints([2, 0, 2, -1], device)), (v,))


def test_take_keeps_dtypes_and_integer_results_carry_no_grad(device):
    for dtype in ("int32", "uint8", "bool", "complex128", "float32"):
        x_np = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
        out = lp.take(lp.asarray(x_np, device=device), ints([3, 0], device), axis=1)
        assert out.dtype == getattr(lp, dtype)
        assert not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), np.take(x_np, [3, 0], 1))


def test_take_method_reads_a_tensor_flattened_without_axis(device):
    x = leaf(X, device)
    np.testing.assert_array_equal(x.take(ints([0, 59, 7], device)).numpy(), np.take(X, [0, 59, 7]))
    np.testing.assert_array_equal(x.take(ints([1, 0], device), 2).numpy(), np.take(X, [1, 0], 2))
    assert lp.gradcheck(lambda z: z.take(ints([5, 5, 1], device)), (x,))


# ---- take_along_axis ----------------------------------------------------------------------------

ALONG = {
    # id: (index shape and values drawn with this seed, axis)
    "last": ((3, 4, 6), -1),
    "first": ((2, 4, 5), 0),
    "middle_longer": ((3, 9, 5), 1),
    "broadcast_index": ((1, 4, 2), 2),
    "broadcast_x": ((3, 1, 5), 1),
    "empty": ((3, 0, 5), 1),
}


def _along(case, device, x_shape=X.shape):
    shape, axis = ALONG[case]
    n = x_shape[axis]
    index = np.random.default_rng(len(case)).integers(-n, n, size=shape)
    return index, axis


def _along_reference(x, index, axis):
    """NumPy's take_along_axis, with the other axes broadcast first."""
    axis %= x.ndim
    xs = list(np.broadcast_shapes(tuple(1 if i == axis else n for i, n in enumerate(x.shape)),
                                  tuple(1 if i == axis else n for i, n in enumerate(index.shape))))
    x_shape, i_shape = list(xs), list(xs)
    x_shape[axis], i_shape[axis] = x.shape[axis], index.shape[axis]
    xb, ib = np.broadcast_to(x, x_shape), np.broadcast_to(index, i_shape)
    out = np.take_along_axis(xb, ib, axis)
    ib = np.where(ib < 0, ib + x.shape[axis], ib)
    return out, xb.shape, ib


@pytest.mark.parametrize("case", list(ALONG))
def test_take_along_axis_forward_and_gradient(device, case):
    x_np = X[:, :1] if case == "broadcast_x" else X
    index, axis = _along(case, device, x_np.shape)
    x = leaf(x_np, device)
    out = lp.take_along_axis(x, ints(index, device), axis=axis)
    want, xb_shape, ib = _along_reference(x_np, index, axis)
    assert out.shape == want.shape and out.dtype == lp.float64
    np.testing.assert_array_equal(out.numpy(), want)
    w = np.random.default_rng(1).uniform(0.5, 1.5, size=want.shape)
    (out * Tensor(w, device=device)).sum().backward()
    grad = np.zeros(xb_shape)
    idx = np.indices(ib.shape)
    idx[axis % x_np.ndim] = ib
    np.add.at(grad, tuple(idx), w)
    grad = grad.sum(axis=tuple(i for i, n in enumerate(x_np.shape) if n == 1 and xb_shape[i] != 1), keepdims=True)
    np.testing.assert_allclose(host(device, x.grad), grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", [c for c in ALONG if c != "empty"])
def test_take_along_axis_gradcheck(device, case):
    x_np = X[:, :1] if case == "broadcast_x" else X
    index, axis = _along(case, device, x_np.shape)
    idx = ints(index, device)
    assert lp.gradcheck(lambda z: lp.take_along_axis(z, idx, axis=axis), (leaf(x_np, device),))


def test_take_along_axis_with_argsort_like_indices_sorts(device):
    x_np = X[0]
    order = np.argsort(x_np, axis=1)
    out = lp.take_along_axis(leaf(x_np, device), ints(order, device), axis=1)
    np.testing.assert_array_equal(out.numpy(), np.sort(x_np, axis=1))
    assert not lp.take_along_axis(ints([[3, 1]], device), ints([[1, 0, 1]], device)).requires_grad


def test_repeated_indices_accumulate_across_backward_calls(device):
    x = leaf([1.0, 2.0, 3.0], device)
    for _ in range(2):
        lp.take_along_axis(x, ints([0, 0, 2, 0], device), axis=0).sum().backward()
        lp.take(x, ints([1, 1], device)).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), [6.0, 4.0, 2.0])


# ---- bad input --------------------------------------------------------------------------------

BAD = {
    "take_no_axis": (lambda x, d: lp.take(x, ints([0], d)), ValueError, ["take", "axis", "(3, 4, 5)"]),
    "take_axis": (lambda x, d: lp.take(x, ints([0], d), axis=3), IndexError, ["take", "3"]),
    "take_2d_indices": (lambda x, d: lp.take(x, ints([[0]], d), axis=0), ValueError, ["take", "(1, 1)"]),
    "take_float_indices": (lambda x, d: lp.take(x, lp.asarray([0.0], device=d), axis=0), TypeError,
                           ["take", "float64"]),
    "take_out_of_range": (lambda x, d: lp.take(x, ints([0, 4], d), axis=1), IndexError, ["take", "4", "(3, 4, 5)"]),
    "take_negative_out_of_range": (lambda x, d: lp.take(x, ints([-6], d), axis=2), IndexError, ["take", "-6"]),
    "take_list": (lambda x, d: lp.take(x, [0, 1], axis=0), TypeError, ["take"]),
    "along_rank": (lambda x, d: lp.take_along_axis(x, ints([0], d)), ValueError, ["take_along_axis", "(1,)"]),
    "along_axis": (lambda x, d: lp.take_along_axis(x, ints(np.zeros((3, 4, 5)), d), axis=-4), IndexError,
                   ["take_along_axis", "-4"]),
    "along_shapes": (lambda x, d: lp.take_along_axis(x, ints(np.zeros((2, 4, 5)), d), axis=2), ValueError,
                     ["take_along_axis", "(3, 4, 5)", "(2, 4, 5)"]),
    "along_out_of_range": (lambda x, d: lp.take_along_axis(x, ints(np.full((3, 4, 1), 5), d), axis=2), IndexError,
                           ["take_along_axis", "5"]),
    "along_float_indices": (lambda x, d: lp.take_along_axis(x, x), TypeError, ["take_along_axis", "float64"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_a_clear_error_and_changes_nothing(device, case):
    call, kind, words = BAD[case]
    x = leaf(X, device)
    with pytest.raises(kind) as info:
        call(x, device)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    np.testing.assert_array_equal(x.numpy(), X)
    assert x._grad is None


@pytest.mark.parametrize("fn", [lambda x, i: lp.take(x, i), lambda x, i: lp.take_along_axis(x, i)],
                         ids=["take", "take_along_axis"])
def test_indices_on_another_device(device, fn):
    x, other = leaf([1.0, 2.0], device), other_device(device)
    with pytest.raises(ValueError) as info:
        fn(x, ints([0], other))
    assert x.device in str(info.value) and other in str(info.value)


# ---- properties -------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_take_along_axis_matches_numpy_and_scatters_back(device, data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), label="shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    n = shape[axis]
    m = data.draw(st.integers(0, 5), label="m")
    i_shape = list(shape)
    i_shape[axis] = m
    index = data.draw(hnp.arrays(np.int64, tuple(i_shape), elements=st.integers(-n, n - 1)), label="index")
    x_np = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-3, 3)), label="x")
    x = leaf(x_np, device)
    out = lp.take_along_axis(x, ints(index, device), axis=axis)
    want = np.take_along_axis(x_np, index, axis)
    np.testing.assert_array_equal(out.numpy(), want)
    g = data.draw(hnp.arrays(np.float64, want.shape, elements=st.floats(-3, 3)), label="g")
    out.backward(g)
    grad = np.zeros(shape)
    idx = list(np.indices(index.shape))
    idx[axis % len(shape)] = np.where(index < 0, index + n, index)
    np.add.at(grad, tuple(idx), g)
    np.testing.assert_allclose(host(device, x.grad), grad, rtol=1e-12, atol=1e-12)

    # take along the same axis is take_along_axis with the index broadcast
    flat = index.reshape(-1)[:4]
    np.testing.assert_array_equal(lp.take(x, ints(flat, device), axis=axis).numpy(), np.take(x_np, flat, axis))
