"""Statistical functions: reductions along axes."""

from __future__ import annotations

import math

from .. import ops
from .._checks import normalize_axes
from .._dtypes import as_dtype
from .._node import run1
from ._util import asarray_like

__all__ = ["sum", "mean", "max", "min"]


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    """Sum over ``axis`` (all axes by default); integers sum in int64 (uint64), as the standard says."""
    x = asarray_like(x, "sum")
    axes = normalize_axes(axis, x.ndim, "sum")
    if dtype is not None:
        dtype = x._backend.dtype(as_dtype(dtype, "sum").name)
    return run1(ops.sum, x, axes, keepdims, dtype)


def mean(x, /, *, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (all axes by default)."""
    x = asarray_like(x, "mean")
    return run1(ops.mean, x, normalize_axes(axis, x.ndim, "mean"), keepdims)


def _extremum(name, op):
    def function(x, /, *, axis=None, keepdims=False):
        x = asarray_like(x, name)
        axes = normalize_axes(axis, x.ndim, name)
        if any(x.shape[i] == 0 for i in axes) or (not axes and x.ndim and math.prod(x.shape) == 0):
            raise ValueError(f"{name}: the tensor of shape {x.shape} is empty along the reduced axes")
        return run1(op, x, axes, keepdims)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = (f"The {'largest' if name == 'max' else 'smallest'} value over ``axis`` (all axes by default); "
                        "the gradient is shared equally among ties (``torch.amax``).")
    return function


max = _extremum("max", ops.max)  # noqa: A001
min = _extremum("min", ops.min)  # noqa: A001
