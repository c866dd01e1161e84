"""Searching, sorting and set functions of the namespace: argmax, argmin,
count_nonzero, nonzero, searchsorted, where, argsort, sort and unique_*.

Forward values against NumPy, int64 results that never require grad, gradients of
``where``, ``sort`` and the unique values against finite differences (gradcheck) on
every device, property tests, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor, gradcheck

RNG = np.random.default_rng(77)
SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def rand(*shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape)


def leaf(device, array):
    return Tensor(np.asarray(array, dtype=np.float64), requires_grad=True, device=device)


def grad(t):
    return lp.asarray(t.grad).numpy()


def other_device(device):
    return "strict:1" if device != "strict:1" and device.startswith("strict") else "strict"


# ---- argmax, argmin --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_match_numpy_with_ties(device, name, axis, keepdims):
    a = RNG.integers(0, 3, size=(3, 5)).astype(np.float64)  # many ties: the first index wins
    x = leaf(device, a)
    out = getattr(lp, name)(x, axis=axis, keepdims=keepdims)
    assert out.dtype == lp.int64
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a, axis=axis, keepdims=keepdims))
    method = getattr(x, name)(axis, keepdims)
    np.testing.assert_array_equal(method.numpy(), out.numpy())


def test_argmax_of_integers_and_0d(device):
    x = lp.asarray(np.array([[3, 9, 9], [1, 0, 0]], dtype=np.uint8), device=device)
    np.testing.assert_array_equal(lp.argmax(x, axis=1).numpy(), [1, 0])
    np.testing.assert_array_equal(lp.argmin(x, axis=0).numpy(), [1, 1, 1])
    assert int(lp.argmax(x)) == 1
    zero_d = lp.asarray(2.5, device=device)
    assert int(lp.argmax(zero_d)) == 0 and int(lp.argmin(zero_d, axis=-1)) == 0


# ---- count_nonzero, nonzero -----------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("keepdims", [False, True])
def test_count_nonzero_matches_numpy(device, axis, keepdims):
    a = RNG.integers(-1, 2, size=(2, 3, 4))
    for dtype in ("int32", "float64", "bool", "complex128"):
        data = a.astype(dtype)
        out = lp.count_nonzero(lp.asarray(data, device=device), axis=axis, keepdims=keepdims)
        assert out.dtype == lp.int64
        expected = np.count_nonzero(data, axis=axis, keepdims=keepdims) if axis != () else (data != 0)
        np.testing.assert_array_equal(out.numpy(), expected)


def test_count_nonzero_never_requires_grad(device):
    x = leaf(device, [[0.0, 1.0], [2.0, 3.0]])
    out = x.count_nonzero(1)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [1, 2])


def test_nonzero_matches_numpy(device):
    a = RNG.integers(-1, 2, size=(3, 4, 2)).astype(np.float64)
    x = leaf(device, a)
    out = lp.nonzero(x)
    assert isinstance(out, tuple) and len(out) == 3
    for ours, theirs in zip(out, np.nonzero(a)):
        assert ours.dtype == lp.int64 and not ours.requires_grad
        np.testing.assert_array_equal(ours.numpy(), theirs)
    flags = lp.asarray(np.array([True, False, True]), device=device)
    np.testing.assert_array_equal(flags.nonzero()[0].numpy(), [0, 2])
    assert lp.nonzero(lp.asarray(np.zeros((2, 2)), device=device))[0].shape == (0,)


# ---- searchsorted ---------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_numpy(device, side):
    a = np.array([1.0, 2.0, 2.0, 3.5, 7.0])
    v = np.array([[0.0, 2.0, 2.5], [3.5, 7.0, 9.0]])
    out = lp.searchsorted(lp.asarray(a, device=device), lp.asarray(v, device=device), side=side)
    assert out.dtype == lp.int64 and out.shape == v.shape
    np.testing.assert_array_equal(out.numpy(), np.searchsorted(a, v, side=side))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_with_sorter_and_scalars(device, side):
    a = np.array([3.0, -1.0, 7.0, 2.0])
    sorter = np.argsort(a)
    x1 = lp.asarray(a, device=device)
    s = lp.argsort(x1)
    np.testing.assert_array_equal(s.numpy(), sorter)
    v = np.array([2.0, 0.0, 8.0])
    out = lp.searchsorted(x1, lp.asarray(v, device=device), side=side, sorter=s)
    np.testing.assert_array_equal(out.numpy(), np.searchsorted(a, v, side=side, sorter=sorter))
    out = lp.searchsorted(x1, 2, side=side, sorter=s)
    assert out.shape == () and int(out) == np.searchsorted(a, 2.0, side=side, sorter=sorter)
    ints = lp.asarray(np.array([1, 5, 9], dtype=np.int16), device=device)
    assert int(lp.searchsorted(ints, lp.asarray(np.array(5, dtype=np.int8), device=device), side=side)) == (
        1 if side == "left" else 2)


def test_searchsorted_of_a_differentiable_tensor_never_requires_grad(device):
    x1 = leaf(device, [1.0, 2.0, 3.0])
    x2 = leaf(device, [2.5])
    out = lp.searchsorted(x1, x2)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), [2])


# ---- where --------------------------------------------------------------------------------------------

WHERE_SHAPES = [
    ((3, 4), (3, 4), (3, 4)),
    ((3, 1), (1, 4), (4,)),
    ((2, 1, 4), (3, 1), ()),
    ((), (2, 3), (3,)),
    ((4,), (2, 1, 1), (1, 4)),
]


@pytest.mark.parametrize("shapes", WHERE_SHAPES)
def test_where_matches_numpy_and_gradcheck(device, shapes):
    c_shape, a_shape, b_shape = shapes
    c = RNG.integers(0, 2, size=c_shape).astype(bool)
    a, b = rand(*a_shape), rand(*b_shape)
    cond = lp.asarray(c, device=device)
    x1, x2 = leaf(device, a), leaf(device, b)
    out = lp.where(cond, x1, x2)
    np.testing.assert_array_equal(out.numpy(), np.where(c, a, b))
    assert out.requires_grad
    assert gradcheck(lambda p, q: lp.where(cond, p, q), [x1, x2])


def test_where_gradients_go_to_the_chosen_side(device):
    cond = lp.asarray(np.array([[True, False, True]]), device=device)
    x1 = leaf(device, rand(2, 3))
    x2 = leaf(device, rand(3))
    lp.where(cond, x1, x2).backward(np.ones((2, 3)))
    np.testing.assert_array_equal(grad(x1), [[1.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    np.testing.assert_array_equal(grad(x2), [0.0, 2.0, 0.0])


def test_where_with_python_scalars(device):
    c = np.array([True, False, True])
    cond = lp.asarray(c, device=device)
    x = Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), requires_grad=True, device=device)
    out = lp.where(cond, x, 0.5)
    assert out.dtype == lp.float32
    np.testing.assert_array_equal(out.numpy(), [1.0, 0.5, 3.0])
    out.sum().backward()
    np.testing.assert_array_equal(grad(x), [1.0, 0.0, 1.0])
    assert gradcheck(lambda t: lp.where(cond, 0, t), [leaf(device, rand(3))])
    ints = lp.asarray(np.array([1, 2, 3], dtype=np.int8), device=device)
    out = lp.where(cond, -1, ints)
    assert out.dtype == lp.int8
    np.testing.assert_array_equal(out.numpy(), [-1, 2, -1])
    out = lp.where(cond, lp.asarray(np.array([True, True, True]), device=device), False)
    assert out.dtype == lp.bool


def test_where_promotes_and_casts_gradients_back(device):
    cond = lp.asarray(np.array([True, False]), device=device)
    i8 = lp.asarray(np.array([1, 2], dtype=np.int8), device=device)
    u8 = lp.asarray(np.array([3, 4], dtype=np.uint8), device=device)
    out = lp.where(cond, i8, u8)
    assert out.dtype == lp.int16
    np.testing.assert_array_equal(out.numpy(), [1, 4])
    x32 = Tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True, device=device)
    x64 = leaf(device, [3.0, 4.0])
    out = lp.where(cond, x32, x64)
    assert out.dtype == lp.float64
    out.sum().backward()
    assert x32.grad.dtype == x32.data.dtype
    np.testing.assert_array_equal(grad(x32), [1.0, 0.0])
    np.testing.assert_array_equal(grad(x64), [0.0, 1.0])


# ---- argsort, sort --------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_is_stable_in_both_directions(device, axis, descending):
    a = RNG.integers(0, 3, size=(6, 7)).astype(np.float64)
    out = lp.argsort(lp.asarray(a, device=device), axis=axis, descending=descending)
    assert out.dtype == lp.int64
    moved = np.moveaxis(a, axis, -1)
    expected = np.array([sorted(range(len(row)), key=row.__getitem__, reverse=descending)
                         for row in moved.reshape(-1, moved.shape[-1])]).reshape(moved.shape)
    np.testing.assert_array_equal(out.numpy(), np.moveaxis(expected, -1, axis))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("stable", [False, True])
def test_sort_matches_numpy(device, axis, descending, stable):
    a = rand(4, 5)
    a[1, 2] = np.nan
    out = lp.sort(lp.asarray(a, device=device), axis=axis, descending=descending, stable=stable)
    expected = np.sort(a, axis=axis)
    if descending:  # NaN first, then the values from the largest
        expected = np.flip(np.sort(a, axis=axis), axis=axis)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_sort_of_integers(device):
    a = np.array([[3, -1, 2], [0, 9, -5]], dtype=np.int32)
    x = lp.asarray(a, device=device)
    out = lp.sort(x)
    assert out.dtype == lp.int32
    np.testing.assert_array_equal(out.numpy(), np.sort(a))
    np.testing.assert_array_equal(lp.sort(x, axis=0, descending=True).numpy(), -np.sort(-a, axis=0))


@pytest.mark.parametrize("shape_axis", [((7,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((2, 3, 4), -1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_gradcheck(device, shape_axis, descending):
    shape, axis = shape_axis
    a = RNG.permutation(math.prod(shape)).reshape(shape) * 0.25 + rand(*shape, low=0.0, high=0.01)  # no ties
    x = leaf(device, a)
    assert gradcheck(lambda t: lp.sort(t, axis=axis, descending=descending), [x])
    assert not lp.argsort(x, axis=axis).requires_grad


def test_sort_gradient_follows_the_permutation(device):
    x = leaf(device, [3.0, 1.0, 2.0])
    lp.sort(x).backward(np.array([10.0, 20.0, 30.0]))
    np.testing.assert_array_equal(grad(x), [30.0, 10.0, 20.0])


def test_sort_methods_return_new_tensors(device):
    """t.sort() gives PyTorch's (values, indices), sorting nothing in place."""
    a = rand(3, 4)
    x = lp.asarray(a, device=device)
    values, indices = x.sort()
    np.testing.assert_array_equal(values.numpy(), np.sort(a))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(a, kind="stable"))
    np.testing.assert_array_equal(x.numpy(), a)  # unchanged: not in place
    out = x.sort(0, True)
    assert out.values is out[0] and out.indices is out[1]
    np.testing.assert_array_equal(out.values.numpy(), np.flip(np.sort(a, axis=0), axis=0))
    np.testing.assert_array_equal(x.sort(dim=0).indices.numpy(), np.argsort(a, axis=0, kind="stable"))
    np.testing.assert_array_equal(x.argsort(0).numpy(), np.argsort(a, axis=0, kind="stable"))
    np.testing.assert_array_equal(x.argsort(descending=True).numpy(), np.argsort(-a, axis=-1, kind="stable"))


# ---- unique_* --------------------------------------------------------------------------------------------


def _numpy_unique(a):
    return np.unique(a, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)


def test_unique_all_matches_numpy_with_distinct_nans(device):
    a = np.array([[2.0, np.nan, 1.0], [2.0, -0.0, np.nan], [0.0, 1.0, 2.0]])
    out = lp.unique_all(lp.asarray(a, device=device))
    assert out._fields == ("values", "indices", "inverse_indices", "counts")
    values, indices, inverse, counts = _numpy_unique(a)
    np.testing.assert_array_equal(out.values.numpy(), values)
    np.testing.assert_array_equal(out.indices.numpy(), indices)
    np.testing.assert_array_equal(out.inverse_indices.numpy(), inverse.reshape(a.shape))
    np.testing.assert_array_equal(out.counts.numpy(), counts)
    assert out.inverse_indices.shape == a.shape
    assert int(lp.sum(lp.isnan(out.values))) == 2
    for t in out[1:]:
        assert t.dtype == lp.int64


def test_unique_counts_inverse_values(device):
    a = np.array([3, 1, 3, 3, -2, 1], dtype=np.int16)
    x = lp.asarray(a, device=device)
    counts = lp.unique_counts(x)
    assert counts._fields == ("values", "counts")
    assert counts.values.dtype == lp.int16 and counts.counts.dtype == lp.int64
    np.testing.assert_array_equal(counts.values.numpy(), [-2, 1, 3])
    np.testing.assert_array_equal(counts.counts.numpy(), [1, 2, 3])
    inverse = lp.unique_inverse(x)
    assert inverse._fields == ("values", "inverse_indices")
    np.testing.assert_array_equal(inverse.values.numpy()[inverse.inverse_indices.numpy()], a)
    values = lp.unique_values(x)
    np.testing.assert_array_equal(values.numpy(), [-2, 1, 3])
    flags = lp.unique_values(lp.asarray(np.array([True, False, True]), device=device))
    np.testing.assert_array_equal(flags.numpy(), [False, True])


@pytest.mark.parametrize("name", ["unique_all", "unique_counts", "unique_inverse", "unique_values"])
def test_unique_values_gradient_goes_to_first_occurrences(device, name):
    a = np.array([[2.0, 5.0, 1.0], [2.0, 1.0, 7.0]])
    x = leaf(device, a)
    out = getattr(lp, name)(x)
    values = out if name == "unique_values" else out.values
    np.testing.assert_array_equal(values.numpy(), [1.0, 2.0, 5.0, 7.0])
    assert values.requires_grad
    if name != "unique_values":
        assert not any(t.requires_grad for t in out[1:])
    values.backward(np.array([10.0, 20.0, 30.0, 40.0]))
    np.testing.assert_array_equal(grad(x), [[20.0, 30.0, 10.0], [0.0, 0.0, 40.0]])
    x2 = leaf(device, rand(2, 3))  # distinct values: gradcheck holds
    assert gradcheck(lambda t: getattr(lp, name)(t) if name == "unique_values" else getattr(lp, name)(t).values,
                     [x2])


def test_unique_under_no_grad(device):
    x = leaf(device, [2.0, 2.0, 1.0])
    with lp.no_grad():
        out = lp.unique_counts(x)
    assert not out.values.requires_grad
    np.testing.assert_array_equal(out.counts.numpy(), [1, 2])


# ---- property tests ------------------------------------------------------------------------------------


@st.composite
def array_and_axis(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    a = draw(hnp.arrays(np.float64, shape, elements=st.integers(-3, 3).map(float)))
    return a, draw(st.integers(-len(shape), len(shape) - 1))


@SETTINGS
@given(data=array_and_axis(), descending=st.booleans())
def test_sort_and_argsort_property(device, data, descending):
    a, axis = data
    x = leaf(device, a)
    order = lp.argsort(x, axis=axis, descending=descending).numpy()
    values = lp.sort(x, axis=axis, descending=descending)
    taken = np.take_along_axis(a, order, axis=axis)
    np.testing.assert_array_equal(values.numpy(), taken)
    expected = np.sort(a, axis=axis)
    np.testing.assert_array_equal(taken, np.flip(expected, axis=axis) if descending else expected)
    # the gradient goes back through the permutation: a weighted sum recovers the weights at `order`
    w = RNG.uniform(size=a.shape)
    values.backward(w)
    expected_grad = np.zeros_like(a)
    np.put_along_axis(expected_grad, order, w, axis=axis)
    np.testing.assert_allclose(grad(x), expected_grad)


@SETTINGS
@given(data=array_and_axis(), keepdims=st.booleans(), name=st.sampled_from(["argmax", "argmin"]))
def test_argmax_argmin_property(device, data, keepdims, name):
    a, axis = data
    out = getattr(lp, name)(lp.asarray(a, device=device), axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(out.numpy(), getattr(np, name)(a, axis=axis, keepdims=keepdims))


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), data=st.data())
def test_where_property(device, shapes, data):
    (c_shape, a_shape, b_shape), out_shape = shapes.input_shapes, shapes.result_shape
    c = data.draw(hnp.arrays(bool, c_shape))
    a = data.draw(hnp.arrays(np.float64, a_shape, elements=st.floats(-2, 2)))
    b = data.draw(hnp.arrays(np.float64, b_shape, elements=st.floats(-2, 2)))
    x1, x2 = leaf(device, a), leaf(device, b)
    out = lp.where(lp.asarray(c, device=device), x1, x2)
    np.testing.assert_array_equal(out.numpy(), np.where(c, a, b))
    out.backward(np.ones(out_shape))
    ones = np.ones(out_shape)
    to_a = np.where(c, ones, 0.0)
    to_b = np.where(c, 0.0, ones)
    np.testing.assert_allclose(grad(x1), _unbroadcast(np.broadcast_to(to_a, out_shape), a_shape))
    np.testing.assert_allclose(grad(x2), _unbroadcast(np.broadcast_to(to_b, out_shape), b_shape))


def _unbroadcast(g, shape):
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


# ---- bad input ------------------------------------------------------------------------------------------


def test_bad_searching_input(device):
    a = rand(2, 3)
    x = leaf(device, a)
    for name in ("argmax", "argmin"):
        fn = getattr(lp, name)
        with pytest.raises(IndexError, match=f"{name}: axis 2 is out of range"):
            fn(x, axis=2)
        with pytest.raises(TypeError, match=f"{name}: axis must be an integer"):
            fn(x, axis=(0, 1))
        with pytest.raises(ValueError, match=rf"{name}: the tensor of shape \(0, 3\) is empty"):
            fn(lp.asarray(np.zeros((0, 3)), device=device))
        with pytest.raises(TypeError, match=f"{name}: complex numbers have no order"):
            fn(lp.asarray([1j], device=device))
    with pytest.raises(ValueError, match="nonzero: x must have at least one axis"):
        lp.nonzero(lp.asarray(1.0, device=device))
    with pytest.raises(IndexError, match="count_nonzero: axis 5 is out of range"):
        lp.count_nonzero(x, axis=5)
    np.testing.assert_array_equal(x.numpy(), a)


def test_bad_searchsorted_input(device):
    x1 = lp.asarray([1.0, 2.0, 3.0], device=device)
    with pytest.raises(ValueError, match=r"searchsorted: x1 must be 1-D, got shape \(1, 3\)"):
        lp.searchsorted(lp.asarray([[1.0, 2.0, 3.0]], device=device), x1)
    with pytest.raises(ValueError, match="searchsorted: side must be 'left' or 'right'"):
        lp.searchsorted(x1, x1, side="middle")
    with pytest.raises(ValueError, match="searchsorted: sorter must be integer indices of x1's shape"):
        lp.searchsorted(x1, x1, sorter=lp.asarray([0, 1], device=device))
    with pytest.raises(TypeError, match="searchsorted: .*no promotion of float64 with int64"):
        lp.searchsorted(x1, lp.asarray([1, 2], device=device))
    with pytest.raises(TypeError, match="searchsorted: a Python float does not mix with a tensor of dtype int64"):
        lp.searchsorted(lp.asarray([1, 2], device=device), 1.5)
    other = other_device(device)
    with pytest.raises(ValueError, match=f"searchsorted: operands are on different devices, {device} and {other}"):
        lp.searchsorted(x1, lp.asarray([1.0], device=other))


def test_bad_where_input(device):
    cond = lp.asarray(np.array([True, False]), device=device)
    x = leaf(device, [1.0, 2.0])
    with pytest.raises(TypeError, match="where: condition must be a bool tensor, got dtype float64"):
        lp.where(x, x, x)
    with pytest.raises(TypeError, match="where: x1 and x2 cannot both be Python numbers"):
        lp.where(cond, 1.0, 2.0)
    with pytest.raises(ValueError, match=r"where: shapes \(2,\) and \(2,\) and \(3,\) do not broadcast"):
        lp.where(cond, x, leaf(device, [1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="where: a Python float does not mix with a tensor of dtype int64"):
        lp.where(cond, lp.asarray([1, 2], device=device), 0.5)
    other = other_device(device)
    with pytest.raises(ValueError, match=f"where: operands are on different devices, {device} and {other}"):
        lp.where(cond, x, lp.asarray([1.0, 2.0], device=other))
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    assert not grad(x).any()


def test_bad_sorting_input(device):
    x = leaf(device, rand(2, 3))
    for name in ("sort", "argsort"):
        fn = getattr(lp, name)
        with pytest.raises(IndexError, match=f"{name}: axis 2 is out of range"):
            fn(x, axis=2)
        with pytest.raises(ValueError, match=f"{name}: x must have at least one axis"):
            fn(lp.asarray(1.0, device=device))
        with pytest.raises(TypeError, match=f"{name}: complex numbers have no order"):
            fn(lp.asarray([1j, 2j], device=device))
    with pytest.raises(TypeError, match="unique_values: expected a Tensor"):
        lp.unique_values([1, 2])


def test_ordering_functions_take_bools_on_every_device(device):
    """argmax/argmin/sort/argsort/searchsorted order bools (False < True) alike on
    every device (array_api_strict refuses them; NumPy and PyTorch accept them)."""
    b = lp.asarray([True, False, True, False], device=device)
    assert int(lp.argmax(b)) == 0 and int(lp.argmin(b)) == 1
    s = lp.sort(b)
    assert s.dtype == lp.bool and s.numpy().tolist() == [False, False, True, True]
    assert lp.sort(b, descending=True).numpy().tolist() == [True, True, False, False]
    assert lp.argsort(b).numpy().tolist() == [1, 3, 0, 2]
    assert lp.searchsorted(s, b).numpy().tolist() == [2, 0, 2, 0]
    assert lp.searchsorted(s, b, side="right").numpy().tolist() == [4, 2, 4, 2]


def test_sort_method_matches_pytorchs_values_indices_and_gradient(device):
    torch = pytest.importorskip("torch")
    a = np.array([[3.0, 1.0, 3.0, np.nan, 2.0], [0.5, 0.5, -1.0, 4.0, 0.0]])
    w = np.arange(10.0).reshape(2, 5)
    for descending in (False, True):
        x = lp.Tensor(a, device=device, requires_grad=True)
        tx = torch.tensor(a, requires_grad=True)
        ours, theirs = x.sort(1, descending), tx.sort(stable=True, dim=1, descending=descending)
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.detach().numpy())
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
        (ours.values * lp.asarray(w, device=device)).sum().backward()
        (theirs.values * torch.tensor(w)).sum().backward()
        np.testing.assert_array_equal(grad(x), tx.grad.numpy())
