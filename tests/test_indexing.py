"""``t[index]`` on every device: forward values as NumPy indexes the same data,
gradients as a scatter-add (repeated indices accumulate), finite-difference checks,
and out-of-range / unsupported indices raising ``IndexError``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend

SHAPE = (3, 4, 5)
X = (np.arange(60.0).reshape(SHAPE) * 0.37) % 5.0 - 2.4  # no zeros, mixed signs, distinct values
W = np.random.default_rng(0).uniform(0.5, 1.5, size=200)


def host(device, array):
    return np.array(get_backend(device).to_host(array), copy=True)


def weights(shape):
    return W[: int(np.prod(shape))].reshape(shape)


def expected_grad(index, w):
    """d sum(x[index] * w) / dx, by NumPy's unbuffered scatter-add."""
    grad = np.zeros(SHAPE)
    np.add.at(grad, index, w)
    return grad


def check_forward_and_grad(device, device_index, numpy_index):
    """``t[device_index]`` equals ``X[numpy_index]`` and its gradient is the scatter-add."""
    t = Tensor(X, requires_grad=True, device=device)
    out = t[device_index]
    want = X[numpy_index]
    assert out.device == t.device
    assert out.shape == want.shape
    assert out.dtype == t.dtype
    np.testing.assert_array_equal(out.numpy(), want)
    w = weights(want.shape)
    (out * Tensor(w, device=device)).sum().backward()
    np.testing.assert_allclose(host(device, t.grad), expected_grad(numpy_index, w), rtol=1e-12, atol=1e-12)
    return out


def gradcheck_index(device, index):
    x = Tensor(X, requires_grad=True, device=device)
    assert lp.gradcheck(lambda z: z[index] * 1.0, (x,))


# ---- basic slicing ------------------------------------------------------------------------

BASIC = {
    "int": 1,
    "neg_int": -1,
    "neg_int_first": -3,
    "two_ints": (0, 2),
    "three_ints": (2, -1, -5),
    "int_then_slice": (1, slice(1, 3)),
    "slice": slice(1, 3),
    "reverse": slice(None, None, -1),
    "steps": (slice(None), slice(None, None, 2), slice(4, 0, -2)),
    "neg_slice_bounds": (slice(-2, None), slice(-3, -1)),
    "neg_steps_all": (slice(None, None, -2), slice(3, None, -3), slice(None, None, -1)),
    "empty_slice": slice(2, 2),
    "newaxis": None,
    "newaxis_then_int": (None, 0),
    "newaxis_middle": (slice(None), None, 1),
    "newaxis_twice": (None, 2, None, slice(None, None, 2)),
    "ellipsis": ...,
    "ellipsis_int": (..., 1),
    "int_ellipsis": (0, ...),
    "int_ellipsis_int": (-1, ..., 2),
    "ellipsis_newaxis": (..., None),
    "ellipsis_slice": (..., slice(1, None, 2)),
    "empty_tuple": (),
}


@pytest.mark.parametrize("index", list(BASIC.values()), ids=list(BASIC))
def test_basic_indexing(device, index):
    check_forward_and_grad(device, index, index)


@pytest.mark.parametrize("index", list(BASIC.values()), ids=list(BASIC))
def test_basic_indexing_gradcheck(device, index):
    gradcheck_index(device, index)


def test_basic_indexing_of_a_0d_tensor(device):
    t = Tensor(3.5, requires_grad=True, device=device)
    for index in ((), ..., None):
        out = t[index]
        assert out.shape == np.asarray(3.5)[index].shape
        out.sum().backward()
    np.testing.assert_array_equal(host(device, t.grad), 3.0)


def test_int_like_indices(device):
    """NumPy integers and 0-d integer arrays index like Python ints."""
    check_forward_and_grad(device, np.int64(2), 2)
    check_forward_and_grad(device, (np.int32(-1), 0), (-1, 0))
    check_forward_and_grad(device, np.array(1), np.array(1))


def test_basic_index_is_a_new_node(device):
    t = Tensor(X, requires_grad=True, device=device)
    out = t[1:, 0]
    assert out._node._prev == (t,) and out.requires_grad
    with lp.no_grad():
        assert not t[1:, 0].requires_grad


OUT_OF_BOUNDS_SLICES = {
    "stop_past_end": slice(1, 10),
    "start_before_begin": slice(-10, None),
    "both": slice(-10, 10),
    "start_past_end": slice(5, 10),
    "reverse_from_past_end": slice(10, None, -1),
    "reverse_to_before_begin": slice(None, -10, -1),
    "inner_axis": (slice(None), slice(2, 99), slice(-99, 3)),
}


@pytest.mark.parametrize("index", list(OUT_OF_BOUNDS_SLICES.values()), ids=list(OUT_OF_BOUNDS_SLICES))
def test_out_of_bounds_slices_clamp_like_numpy(device, index):
    """Slices never raise: their bounds clamp to the axis, as in NumPy and PyTorch, on every device."""
    check_forward_and_grad(device, index, index)


# ---- integer-array indexing ------------------------------------------------------------------

# (index with lists / NumPy arrays in it, a description)
INTEGER = {
    "list": [0, 2, 0],
    "neg_list": [-1, 0, -3],
    "repeated": [0, 0, 1],
    "single": [2],
    "uint8": np.array([2, 1], dtype=np.uint8),
    "int32": np.array([1, -2], dtype=np.int32),
    "zero_d_array": np.array(1),
    "empty_int_array": np.array([], dtype=np.int64),
    "axis1": (slice(None), [3, 0, 3, -1]),
    "axis0_with_trailing_slices": ([2, 2, 0], slice(None), slice(None)),
    "ellipsis_last_axis": (..., [4, 0, 4]),
    "ellipsis_middle_axis": (..., [1, 1], slice(None)),
    "two_d": np.array([[0, 1], [2, 0]]),
    "two_d_axis1": (slice(None), np.array([[0, 3], [3, -1], [2, 2]])),
    "two_d_last_axis": (..., np.array([[4], [0]])),
    "rows_cols": ([0, 2, 2], [1, -1, 1]),
    "rows_cols_broadcast": (np.array([[0], [2]]), np.array([1, 3, 1])),
    "rows_cols_depths": ([0, 2, 2], [1, 1, 3], [4, 0, -5]),
    "rows_cols_trailing_ellipsis": ([1, 0], [3, 3], ...),
    "int_then_array": (1, [0, 3, 3]),
    "array_then_int": ([2, 0, 2], -1),
    "int_array_int": (2, [1, 0], 4),
}


def on_device(index, device, kind):
    """``index`` with each list / NumPy array as ``kind``: "host" (as written), "device"
    (an integer array of the device's own library) or "tensor" (a float Tensor)."""

    def convert(item):
        if not isinstance(item, (list, np.ndarray)):
            return item
        if kind == "host":
            return item
        if kind == "device":
            return get_backend(device).from_host(np.asarray(item))
        return Tensor(np.asarray(item), device=device)

    if isinstance(index, tuple):
        return tuple(convert(item) for item in index)
    return convert(index)


def as_numpy(index):
    if isinstance(index, tuple):
        return tuple(np.asarray(i) if isinstance(i, list) else i for i in index)
    return np.asarray(index) if isinstance(index, list) else index


@pytest.mark.parametrize("kind", ["host", "device", "tensor"])
@pytest.mark.parametrize("index", list(INTEGER.values()), ids=list(INTEGER))
def test_integer_array_indexing(device, index, kind):
    check_forward_and_grad(device, on_device(index, device, kind), as_numpy(index))


@pytest.mark.parametrize("index", list(INTEGER.values()), ids=list(INTEGER))
def test_integer_array_indexing_gradcheck(device, index):
    gradcheck_index(device, index)


def test_tensor_index_gradcheck(device):
    gradcheck_index(device, Tensor([2.0, 0.0, 2.0], device=device))
    gradcheck_index(device, (slice(None), Tensor([[1.0], [3.0]], device=device)))


def test_repeated_indices_accumulate(device):
    t = Tensor(X, requires_grad=True, device=device)
    t[[0, 0, 1]].sum().backward()
    grad = host(device, t.grad)
    np.testing.assert_array_equal(grad[0], 2.0)
    np.testing.assert_array_equal(grad[1], 1.0)
    np.testing.assert_array_equal(grad[2], 0.0)


def test_repeated_indices_accumulate_on_inner_axes_and_pairs(device):
    t = Tensor(X, requires_grad=True, device=device)
    t[:, [1, 1, 1]].sum().backward()
    want = np.zeros(SHAPE)
    want[:, 1] = 3.0
    np.testing.assert_array_equal(host(device, t.grad), want)

    u = Tensor(X, requires_grad=True, device=device)
    u[[0, 0, 2], [1, 1, 1]].sum().backward()  # the pair (0, 1) twice
    want = np.zeros(SHAPE)
    want[0, 1] = 2.0
    want[2, 1] = 1.0
    np.testing.assert_array_equal(host(device, u.grad), want)

    v = Tensor(X, requires_grad=True, device=device)
    v[Tensor([2.0, 2.0, 2.0, 2.0], device=device)].sum().backward()
    want = np.zeros(SHAPE)
    want[2] = 4.0
    np.testing.assert_array_equal(host(device, v.grad), want)


def test_repeated_index_gradients_accumulate_across_backward_calls(device):
    t = Tensor(X, requires_grad=True, device=device)
    for _ in range(2):
        (t[[1, 1]] * 3.0).sum().backward()
    want = np.zeros(SHAPE)
    want[1] = 12.0
    np.testing.assert_array_equal(host(device, t.grad), want)


def test_index_arrays_are_not_modified(device):
    index = np.array([-1, 0, -1])
    t = Tensor(X, requires_grad=True, device=device)
    t[index].sum().backward()
    np.testing.assert_array_equal(index, [-1, 0, -1])
    tensor_index = Tensor([-1.0, 0.0], device=device)
    t[tensor_index].sum().backward()
    np.testing.assert_array_equal(tensor_index.numpy(), [-1.0, 0.0])


def test_empty_list_selects_nothing(device):
    """``t[[]]`` is an empty selection in NumPy and PyTorch, not an error."""
    t = Tensor(X, requires_grad=True, device=device)
    out = t[[]]
    assert out.shape == (0, 4, 5)
    out.sum().backward()
    np.testing.assert_array_equal(host(device, t.grad), np.zeros(SHAPE))


# ---- boolean masks ---------------------------------------------------------------------------


def device_mask(device, mask):
    """A boolean mask on ``device``: NumPy on cpu, the backend's own ``xp`` elsewhere."""
    if device == "cpu":
        return np.asarray(mask, dtype=bool)
    backend = get_backend(device)
    xp = backend.xp
    return xp.asarray(np.asarray(mask).tolist(), dtype=xp.bool, device=backend.xp_device)


def test_mask_from_the_tensors_own_data(device):
    t = Tensor(X, requires_grad=True, device=device)
    mask = t.data > 0
    out = t[mask]
    np.testing.assert_array_equal(out.numpy(), X[X > 0])
    out.sum().backward()
    np.testing.assert_array_equal(host(device, t.grad), (X > 0).astype(float))


MASKS = {
    "full": X > 0,
    "leading_axis": np.array([True, False, True]),
    "leading_two_axes": X[:, :, 0] < 0,
    "all_false": np.zeros(SHAPE, dtype=bool),
}


@pytest.mark.parametrize("mask", list(MASKS.values()), ids=list(MASKS))
def test_boolean_masks(device, mask):
    index = device_mask(device, mask)
    check_forward_and_grad(device, index, mask)
    check_forward_and_grad(device, (index, ...), (mask, ...))
    if mask.any():
        gradcheck_index(device, index)


def test_list_of_bools_is_a_mask(device):
    check_forward_and_grad(device, [True, False, True], np.array([True, False, True]))


# ---- out-of-range indices -------------------------------------------------------------------------

OUT_OF_RANGE = {
    # id: (index, the bad value as it must appear in the message)
    "int_at_size": (3, "3"),
    "int_far": (7, "7"),
    "neg_int": (-4, "-4"),
    "neg_int_far": (-9, "-9"),
    "int_inner_axis": ((0, 6), "6"),
    "int_last_axis_neg": ((0, 0, -6), "-6"),
    "int_after_ellipsis": ((..., 8), "8"),
    "int_after_newaxis": ((None, slice(None), 9), "9"),
    "numpy_int": (np.int64(11), "11"),
    "zero_d_array": (np.array(12), "12"),
    "zero_d_tensor": ("tensor0d", "13"),
    "array": ([0, 7], "7"),
    "array_at_size": ([3], "3"),
    "array_neg": ([-8, 0], "-8"),
    "array_inner_axis": ((slice(None), [1, 9]), "9"),
    "array_after_ellipsis": ((..., [0, -7]), "-7"),
    "two_d_array": (np.array([[0, 1], [14, 0]]), "14"),
    "rows_cols_second": (([0, 1], [0, 17]), "17"),
    "rows_cols_neg": (([0, -10], [0, 1]), "-10"),
    "int_with_array": ((15, [0]), "15"),
    "array_with_int": (([0], -16), "-16"),
    "tensor_array": ("tensor1d", "18"),
    "device_array": ("device1d", "-19"),
}


def _resolve(index, device):
    if not isinstance(index, str):
        return index
    if index == "tensor0d":
        return Tensor(13.0, device=device)
    if index == "tensor1d":
        return Tensor([0.0, 18.0], device=device)
    if index == "device1d":
        return get_backend(device).from_host(np.array([-19, 0]))
    return index


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_out_of_range_index_raises_on_every_device(device, case):
    index, bad = OUT_OF_RANGE[case]
    index = _resolve(index, device)
    t = Tensor(X, requires_grad=True, device=device)
    with pytest.raises(IndexError) as info:
        t[index]
    message = str(info.value)
    assert "getitem" in message, message
    assert str(SHAPE) in message, message
    assert re.search(rf"(?<![\w-]){re.escape(bad)}(?![\d.])", message), f"index {bad} not named in {message!r}"
    assert t._grad is None
    np.testing.assert_array_equal(t.numpy(), X)


# ---- unsupported or invalid indices -----------------------------------------------------------------

# Forms NumPy accepts but LeanPass may leave out: each must either give NumPy's
# result (forward and gradient) or raise the IndexError written beside it -- never
# another exception or message, never a wrong answer. None: the form is supported.
MIXED_FORMS = {
    "array_then_newaxis": (([0, 1], None), None),
    "newaxis_then_array": ((None, [0, 1]), None),
    "int_slice_array": ((slice(None), 1, [0, 2]), None),
    "array_ellipsis_int": (([0], ..., 0), None),
    "partial_slice_then_array": ((slice(1, None), [0, 2]), None),
    "array_then_partial_slice": (([0, 1], slice(1, None)), None),
    "array_partial_slice_int": (([0, 1], slice(1, None), 0), None),
    "stepped_slice_then_array": ((slice(None, None, -1), [3, 0]), None),
    "mask_then_int": ((np.array([True, False, True]), 0), None),  # a mask among others: its true positions
    "int_then_mask": ((0, np.array([True, False, True, True])), None),
    "mask_and_array": ((np.array([True, False, True]), [0, 1]), None),
    "slice_then_mask": ((slice(None), np.array([True, False, True, True])), None),
    "ellipsis_then_mask": ((..., np.array([True, False, True, False, True])), None),
    "newaxis_then_2d_mask": ((None, np.array([[True, False, True, True]] * 3)), None),
    "slice_then_2d_mask": ((slice(1, None), np.ones((4, 5), dtype=bool)), None),
    "bool_scalar": (True, r"^getitem: a bool is not an index; use a boolean array as a mask$"),
}


@pytest.mark.parametrize("index, message", list(MIXED_FORMS.values()), ids=list(MIXED_FORMS))
def test_mixed_forms_are_right_or_a_clear_index_error(device, index, message):
    t = Tensor(X, requires_grad=True, device=device)
    try:
        t[index]
    except IndexError as exc:
        assert message is not None, f"a supported form raised {exc!r}"
        assert re.search(message, str(exc)), f"unclear message: {exc!r}"
        assert t._grad is None
        return
    check_forward_and_grad(device, index, index)


# index -> the IndexError's whole message (X has shape (3, 4, 5))
INVALID = {
    "float": (0.5, "index arrays must hold integers or booleans, got dtype float64"),
    "float_list": ([0.5, 1.0], "index arrays must hold integers or booleans, got dtype float64"),
    "float_array": (np.array([1.0, 2.0]), "index arrays must hold integers or booleans, got dtype float64"),
    "fractional_tensor": ("frac1d", "a float tensor used as an index must hold whole numbers"),
    "fractional_0d_tensor": ("frac0d", "a float tensor used as an index must hold whole numbers, got 0.5"),
    "two_ellipses": ((..., 0, ...), "an index can only have a single ellipsis ('...')"),
    "too_many_ints": ((0, 0, 0, 0), "too many indices for a tensor of shape (3, 4, 5): 4 axes indexed"),
    "too_many_slices": ((slice(None),) * 4, "too many indices for a tensor of shape (3, 4, 5): 4 axes indexed"),
    "mask_wrong_shape": (np.array([True, False]), "boolean mask of shape (2,) does not match tensor shape (3, 4, 5)"),
    "mask_wrong_inner_shape": (np.ones((3, 5), dtype=bool),
                               "boolean mask of shape (3, 5) does not match tensor shape (3, 4, 5)"),
    "mask_among_others_wrong_shape": ((slice(None), np.array([True, False])),
                                      "boolean mask of shape (2,) does not match the axes 1 to 1 of the tensor of "
                                      "shape (3, 4, 5)"),
    "int_out_of_range": (3, "index 3 is out of range for axis 0 with size 3 (tensor shape (3, 4, 5))"),
    "uint64_beyond_int64": ([2**63], "index 9223372036854775808 is out of range for the tensor of shape (3, 4, 5)"),
    "negative_out_of_range": ((0, -5), "index -5 is out of range for axis 1 with size 4 (tensor shape (3, 4, 5))"),
    "array_out_of_range": ((slice(None), slice(None), [0, 5]),
                           "index 5 is out of range for axis 2 with size 5 (tensor shape (3, 4, 5))"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_indices_raise_index_error(device, case):
    index, message = INVALID[case]
    if isinstance(index, str):
        index = Tensor([0.0, 1.5] if index == "frac1d" else 0.5, device=device)
    t = Tensor(X, requires_grad=True, device=device)
    with pytest.raises(IndexError) as info:
        t[index]
    assert str(info.value) == f"getitem: {message}"
    np.testing.assert_array_equal(t.numpy(), X)
    assert t._grad is None


def test_index_arrays_that_do_not_broadcast(device):
    """NumPy: IndexError "shape mismatch: indexing arrays could not be broadcast"."""
    t = Tensor(X, device=device)
    with pytest.raises(IndexError) as info:
        t[[0, 1], [0, 1, 2]]
    message = str(info.value)
    assert "(2,)" in message and "(3,)" in message, message


def test_string_index(device):
    t = Tensor(X, device=device)
    with pytest.raises((IndexError, TypeError)):
        t["a"]


# ---- NumPy's placement rules for integer arrays among slices, None and ... --------------------------

# Integer arrays that do not stand side by side (a slice, None or ... between them) put
# the result's axes first; side by side, where they stand. None adds an axis anywhere.
NUMPY_FORMS = {
    "arrays_apart": ([0, 2], slice(None), [1, 4]),
    "int_and_array_apart": (1, slice(None), [0, 4, 4]),
    "arrays_apart_2d": (np.array([[0], [2]]), slice(1, 3), np.array([1, 4])),
    "array_then_newaxis": ([0, 1], None),
    "newaxis_then_array": (None, [0, 1]),
    "newaxis_between_arrays": ([0, 2], None, [1, 3]),
    "newaxis_int_slice_array": (None, 0, slice(None), [0, 3]),
    "slice_newaxis_array": (slice(None), None, [0, 3, 3]),
    "ellipsis_between_arrays": ([2, 1], ..., [0, 4]),
    "empty_ellipsis_between": (slice(None), 0, ..., [0, 2]),
    "array_newaxis_slice_int": ([0, 1], None, slice(1, None), 0),
    "reversed_slice_between": ([0, 2], slice(None, None, -1), [[1], [4]]),
}


@pytest.mark.parametrize("index", list(NUMPY_FORMS.values()), ids=list(NUMPY_FORMS))
def test_integer_arrays_are_placed_as_numpy_places_them(device, index):
    check_forward_and_grad(device, index, as_numpy(index))
    gradcheck_index(device, index)


@pytest.mark.parametrize("index", list(NUMPY_FORMS.values()), ids=list(NUMPY_FORMS))
def test_setitem_with_integer_arrays_writes_where_numpy_writes(device, index):
    region = X[as_numpy(index)].shape
    value = np.arange(1.0, 1.0 + np.prod(region)).reshape(region)
    want = X.copy()
    want[as_numpy(index)] = value
    h = Tensor(X, device=device) * 1.0
    h[index] = Tensor(value, device=device)
    np.testing.assert_array_equal(h.numpy(), want)

    # the written values' gradient comes back in the value's own shape; where the index
    # repeats a position, only the value written last there (the one it holds) gets it
    v = Tensor(value, requires_grad=True, device=device)
    x = Tensor(X, requires_grad=True, device=device)
    y = x * 1.0
    y[index] = v * 2.0
    w = weights(SHAPE)
    (y * Tensor(w, device=device)).sum().backward()
    marks = np.full(SHAPE, -1)
    numbers = np.arange(value.size).reshape(region)
    marks[as_numpy(index)] = numbers
    held = marks[as_numpy(index)] == numbers
    np.testing.assert_allclose(host(device, v.grad), 2.0 * w[as_numpy(index)] * held, rtol=1e-12)
    kept = np.ones(SHAPE)
    kept[as_numpy(index)] = 0.0
    np.testing.assert_allclose(host(device, x.grad), w * kept, rtol=1e-12)


def test_setitem_value_may_carry_the_new_axes_of_none(device):
    t = Tensor(X, device=device)
    t[None, 0] = Tensor(np.ones((1, 4, 5)), device=device)
    t[1, None, :, [0, 2]] = Tensor(np.full((2, 1, 4), 2.0), device=device)
    want = X.copy()
    want[0] = 1.0
    want[1, :, [0, 2]] = 2.0
    np.testing.assert_array_equal(t.numpy(), want)
    with pytest.raises(ValueError, match="setitem"):
        t[None, 0] = Tensor(np.ones((2, 4, 5)), device=device)
    np.testing.assert_array_equal(t.numpy(), want)


def test_zero_sized_mask_axes_select_nothing(device):
    """The standard: each mask axis equals the tensor's or is 0 (a 0 selects nothing)."""
    t = Tensor(X, requires_grad=True, device=device)
    for shape, out_shape in (((0,), (0, 4, 5)), ((3, 0), (0, 5)), ((0, 4, 5), (0,))):
        out = t[get_backend(device).from_host(np.zeros(shape, dtype=bool))]
        assert out.shape == out_shape
        out.sum().backward()
    np.testing.assert_array_equal(host(device, t.grad), np.zeros(SHAPE))
    with pytest.raises(IndexError, match="getitem"):
        t[get_backend(device).from_host(np.zeros((2,), dtype=bool))]
    out = t[np.zeros((3, 0), dtype=bool)]  # a host mask
    assert out.shape == (0, 5)


def test_zero_d_masks_add_an_axis(device):
    t = Tensor(X, requires_grad=True, device=device)
    assert t[device_mask(device, np.asarray(True))].shape == (1,) + SHAPE
    assert t[device_mask(device, np.asarray(False))].shape == (0,) + SHAPE


def test_several_index_arrays_beside_an_empty_axis(device):
    """Two integer arrays (or an integer and an array) with a zero-length axis elsewhere
    (reshape by -1 could not tell its size): NumPy's shapes, on every device."""
    x = lp.zeros((2, 3, 0), device=device)
    assert x[[0, 1], [0, 2]].shape == (2, 0)
    y = lp.zeros((2, 3, 4), device=device)
    assert y[0:0, [0, 1], [0, 2]].shape == (0, 2)
    assert y[1, [0, 2], 0:0].shape == (2, 0)


def test_float_tensor_indices_must_be_finite_whole_numbers(device):
    import math

    t = lp.asarray([1.0, 2.0, 3.0], device=device)
    assert t[lp.Tensor([2, 0], device=device)].tolist() == [3.0, 1.0] and float(t[lp.Tensor(1, device=device)]) == 2.0
    for bad in (math.inf, math.nan, 1.5):
        for key in (lp.asarray(bad, device=device), lp.asarray([bad], device=device)):
            with pytest.raises(IndexError, match="must hold whole numbers"):
                t[key]


def test_setitem_with_a_mask_among_other_indices_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    a = np.arange(24.0).reshape(2, 3, 4)
    mask = [True, False, True]
    x = Tensor(a, device=device, requires_grad=True)
    v = Tensor(np.array([10.0, 20.0, 30.0, 40.0]), device=device, requires_grad=True)
    h = x * 1.0
    h[:, lp.asarray(mask, device=device)] = v
    (h * h).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    tv = torch.tensor([10.0, 20.0, 30.0, 40.0], dtype=torch.float64, requires_grad=True)
    th = tx * 1.0
    th[:, torch.tensor(mask)] = tv
    (th * th).sum().backward()
    np.testing.assert_array_equal(h.numpy(), th.detach().numpy())
    np.testing.assert_array_equal(host(device, x.grad), tx.grad.numpy())
    np.testing.assert_array_equal(host(device, v.grad), tv.grad.numpy())


def test_setitem_with_a_repeated_position_gives_the_gradient_to_the_value_written_last(device):
    """NumPy keeps the last of repeated writes: the earlier values were overwritten and
    get no gradient, which gradcheck confirms (PyTorch gives every one the gradient)."""
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    v = Tensor([10.0, 20.0], requires_grad=True, device=device)
    h = x * 1.0
    h[lp.asarray([0, 0], device=device)] = v
    (h * lp.asarray([1.0, 2.0, 3.0], device=device)).sum().backward()
    assert h.tolist() == [20.0, 2.0, 3.0]
    assert host(device, v.grad).tolist() == [0.0, 1.0] and host(device, x.grad).tolist() == [0.0, 2.0, 3.0]
    y = Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    u = Tensor([10.0, 20.0], requires_grad=True, device=device)
    h = y * 1.0
    h[lp.asarray([0, 0], device=device)] += u  # read twice, written twice: the last write holds
    (h * lp.asarray([1.0, 2.0, 3.0], device=device)).sum().backward()
    assert h.tolist() == [21.0, 2.0, 3.0]
    assert host(device, y.grad).tolist() == [1.0, 2.0, 3.0] and host(device, u.grad).tolist() == [0.0, 1.0]

    def written(a, b):
        h = a * 1.0
        h[lp.asarray([0, 2, 0], device=device)] = b
        return (h**2).sum()

    assert lp.gradcheck(written, [Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device),
                               Tensor([4.0, 5.0, 6.0], requires_grad=True, device=device)])
