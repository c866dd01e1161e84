"""The standard's sorting functions: ``sort`` (differentiable) and ``argsort``."""

from __future__ import annotations

from typing import NamedTuple

from .. import ops
from .._checks import normalize_axis
from .._node import run, run1
from ..tensor import Tensor
from ._records import methods_of, recorded
from ._util import asarray_like, flag, orderable, torch_axis
from .indexing import take_along_axis

__all__ = ["argsort", "sort"]


def _check(x, axis, name):
    x = asarray_like(x, name)
    if x.dtype.kind == "c":
        raise TypeError(f"{name}: complex numbers have no order (dtype {x.dtype})")
    if x.ndim == 0:
        raise ValueError(f"{name}: x must have at least one axis, got a 0-d tensor")
    return x, normalize_axis(axis, x.ndim, name)


@recorded(ops.argsort, "sorting", dtype="index", axes="one",
          methods={"argsort": "axis=None, descending=False, *, stable=True"})
def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """The indices that sort ``x`` along ``axis`` (the last by default), ascending unless
    ``descending``. With ``stable`` (the default) equal values keep their relative order,
    in either direction. int64 of ``x``'s shape; never requires grad."""
    x, axis = _check(x, axis, "argsort")
    return run1(ops.argsort, orderable(x), axis, flag("argsort", "descending", descending),
                flag("argsort", "stable", stable))


@recorded(ops.sort, "sorting", axes="one")
def sort(x, /, *, axis=-1, descending=False, stable=True):
    """A sorted copy of ``x`` along ``axis`` (the last by default), ascending unless
    ``descending``; ``stable`` as for :func:`argsort`. NaNs go last when ascending.
    Gradient: each element of ``x`` gets the gradient of the place it was sorted to
    (with ties, the order ``argsort`` gives decides)."""
    x, axis = _check(x, axis, "sort")
    descending, stable = flag("sort", "descending", descending), flag("sort", "stable", stable)
    if x.dtype.kind == "b":  # never requires grad
        return run(ops.sort, [orderable(x)], axis, descending, stable).astype("bool")
    return run(ops.sort, [x], axis, descending, stable)


class SortResult(NamedTuple):
    """``t.sort()``'s result, as PyTorch's: the sorted values and the indices they came from."""

    values: Tensor
    indices: Tensor


def _sort_method(self, axis=None, descending=False, *, stable=True, dim=None):
    axis = torch_axis("sort", axis, dim)[0]  # dim=: PyTorch's name
    x, axis = _check(self, -1 if axis is None else axis, "sort")  # errors name sort, not argsort
    descending, stable = flag("sort", "descending", descending), flag("sort", "stable", stable)
    indices = argsort(x, axis=axis, descending=descending, stable=stable)
    # the values picked by the indices: one order for both, whatever the ties and NaNs
    return SortResult(take_along_axis(x, indices, axis=axis), indices)


_sort_method.__name__ = _sort_method.__qualname__ = "sort"
_sort_method.__doc__ = ("``(values, indices)`` along ``axis`` (the last by default; PyTorch's ``dim=`` too), "
                        "as PyTorch's ``t.sort()``: ``indices = t.argsort(axis, descending, stable=stable)`` and "
                        "the values they pick (gradient: to where each came from). Nothing is sorted in place "
                        "(NumPy's ``ndarray.sort`` sorts in place and returns None); ``lp.sort`` gives the "
                        "values alone.")

# Tensor methods for these functions: {method name: function}.
METHODS: dict = {**methods_of("sorting"), "sort": _sort_method}
