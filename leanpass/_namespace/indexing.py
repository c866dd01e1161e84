"""The standard's indexing functions: ``take`` and ``take_along_axis``.

Both are differentiable in ``x``: the gradient is a scatter-add into ``x``'s shape,
so repeated indices accumulate. Indices may be negative (counted from the end);
an index out of range raises ``IndexError`` on every device (CuPy would wrap).
"""

from __future__ import annotations

from .. import ops
from .._checks import broadcast_shapes, device_message, normalize_axis
from .._indexing import _check_positions
from .._node import run1
from ._records import recorded
from ._util import asarray_like

__all__ = ["take", "take_along_axis"]


def _indices(x, indices, op):
    """``indices`` as an int64 array on ``x``'s device (``TypeError`` for another dtype),
    and what a check of its values names: the tensor where the array is its own (one
    lp.compile's trace follows, held by the function or not), else the array."""
    indices = asarray_like(indices, op)
    if indices._backend is not x._backend:
        raise ValueError(device_message(op, x, indices))
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must have an integer dtype, got {indices.dtype}")
    xp = x._backend.xp
    data = indices._data
    if indices.dtype == "int64":
        return data, indices
    data = xp.astype(data, xp.int64)
    return data, data


@recorded(ops.take_positions, "indexing", axes="one")
def take(x, indices, /, *, axis=None):
    """The elements of ``x`` at the 1-D integer ``indices`` along ``axis`` (which
    may be left out for a 1-D ``x``): ``x[..., indices, ...]``."""
    x = asarray_like(x, "take")
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"take: axis is required for a tensor of shape {x.shape} (not 1-D)")
        axis = 0
    axis = normalize_axis(axis, x.ndim, "take")
    index, named = _indices(x, indices, "take")
    if index.ndim != 1:
        raise ValueError(f"take: indices must be 1-D, got shape {tuple(index.shape)}")
    _check_positions(x, index, axis, "take", named=named)  # (negative positions: wrapped by the operation)
    return run1(ops.take_positions, x, axis, tuple(index.shape), (x.shape[axis],), index)


@recorded(ops.take_along_axis, "indexing", axes="one")
def take_along_axis(x, indices, /, *, axis=-1):
    """The elements of ``x`` at ``indices`` along ``axis``: ``out[..., j, ...] =
    x[..., indices[..., j, ...], ...]``, ``indices`` of ``x``'s rank, the other axes
    broadcasting against each other (as ``numpy.take_along_axis``)."""
    x = asarray_like(x, "take_along_axis")
    index, named = _indices(x, indices, "take_along_axis")
    if index.ndim != x.ndim or x.ndim == 0:
        raise ValueError(
            f"take_along_axis: indices of shape {tuple(index.shape)} must have the rank of x, of shape {x.shape} "
            "(at least 1)"
        )
    axis = normalize_axis(axis, x.ndim, "take_along_axis")
    others = [n for i, n in enumerate(x.shape) if i != axis], [n for i, n in enumerate(index.shape) if i != axis]
    try:
        rest = broadcast_shapes("take_along_axis", *others)
    except ValueError:
        raise ValueError(
            f"take_along_axis: x of shape {x.shape} and indices of shape {tuple(index.shape)} do not broadcast "
            f"outside axis {axis}"
        ) from None
    shape = rest[:axis] + (x.shape[axis],) + rest[axis:]
    out_shape = rest[:axis] + (index.shape[axis],) + rest[axis:]
    _check_positions(x, index, axis, "take_along_axis", named=named)  # (the operation wraps negative positions)
    return run1(ops.take_along_axis, x, index, axis, shape, out_shape)


def _take(self, indices, axis=None):
    """``take(x, indices, axis=axis)``; without ``axis`` the tensor is read flattened
    (as NumPy's and PyTorch's ``take``). ``indices`` is 1-D, as the standard's
    ``take`` has it (NumPy and PyTorch also take other shapes)."""
    if axis is None and self.ndim != 1:
        self = run1(ops.reshape, self, (-1,))
    return take(self, indices, axis=axis)


_take.__name__ = _take.__qualname__ = "take"

# Tensor methods for these functions: {method name: function}.
METHODS: dict = {"take": _take}
