"""The standard's utility functions: ``all`` and ``any`` (bool results, never requiring
grad) and ``diff`` (differentiable)."""

from __future__ import annotations

from .. import ops
from .._checks import integer, normalize_axes, normalize_axis
from .._dtypes import promote
from .._node import run, run1
from ._util import SCALARS, asarray_like, axis_method, flag, tensors
from .creation import full
from .searching import scalar_like

__all__ = ["all", "any", "diff"]


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Whether every element over ``axis`` (an int, a tuple, or ``None`` for all axes) is
    true (non-zero; NaN counts as true). ``True`` over nothing. A bool tensor."""
    x = asarray_like(x, "all")
    return run1(ops.all, x, normalize_axes(axis, x.ndim, "all"), flag("all", "keepdims", keepdims))


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    """Whether some element over ``axis`` (an int, a tuple, or ``None`` for all axes) is
    true (non-zero; NaN counts as true). ``False`` over nothing. A bool tensor."""
    x = asarray_like(x, "any")
    return run1(ops.any, x, normalize_axes(axis, x.ndim, "any"), flag("any", "keepdims", keepdims))


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    """The ``n``-th forward difference along ``axis``: ``out[i] = x[i+1] - x[i]``, applied
    ``n`` times, after ``prepend`` and ``append`` (tensors of ``x``'s shape except along
    ``axis``, or Python numbers, which count as one element) are joined to ``x``.

    The axis shrinks by ``n`` (to 0 if ``n`` exceeds its length, as in NumPy). Dtypes
    promote as the standard says. Gradient: into ``x``, ``prepend`` and ``append``."""
    name = "diff"
    x = asarray_like(x, name)
    if x.ndim == 0:
        raise ValueError(f"{name}: x must have at least one axis, got a 0-d tensor")
    if x.dtype.kind == "b":
        raise TypeError(f"{name}: x must have a numeric dtype, got bool; compare neighbours with != instead")
    axis = normalize_axis(axis, x.ndim, name)
    n = integer(n, name, "n")
    if n < 0:
        raise ValueError(f"{name}: n must be non-negative, got {n}")
    edges = []
    for label, edge in (("prepend", prepend), ("append", append)):
        if edge is not None:
            if isinstance(edge, SCALARS):
                shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape))
                edge = full(shape, edge, dtype=scalar_like(edge, x, name).dtype, device=x.device)
            _, edge = tensors(name, x, edge)
            if edge.ndim != x.ndim or [s for i, s in enumerate(edge.shape) if i != axis] != \
                    [s for i, s in enumerate(x.shape) if i != axis]:
                raise ValueError(
                    f"{name}: {label} of shape {edge.shape} must match x's shape {x.shape} except along axis {axis}"
                )
        edges.append(edge)
    promote(x.dtype, *(e.dtype for e in edges if e is not None), op=name)
    return run(ops.diff, [x, *edges], axis, n)


def _diff_method(self, n=1, axis=-1, prepend=None, append=None):
    return diff(self, axis=axis, n=n, prepend=prepend, append=append)


_diff_method.__name__ = _diff_method.__qualname__ = "diff"
_diff_method.__doc__ = ("``diff(t, n=n, axis=axis, prepend=prepend, append=append)``, with ``n`` then ``axis`` "
                        "positional as in ``numpy.diff`` and ``torch.diff``.")

# Tensor methods for these functions: {method name: function}.
METHODS: dict = {"all": axis_method(all), "any": axis_method(any), "diff": _diff_method}
