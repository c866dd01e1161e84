"""The standard's utility functions: ``all`` and ``any`` (bool results, never requiring
grad) and ``diff`` (differentiable)."""

from __future__ import annotations

from .. import ops
from .._checks import integer, normalize_axis
from .._dtypes import promote
from .._node import run
from ._records import methods_of, recorded
from ._util import SCALARS, asarray_like, tensors
from .creation import full
from .searching import scalar_like
from .statistical import FUNCTIONS

__all__ = ["all", "any", "diff"]


all, any = FUNCTIONS["all"], FUNCTIONS["any"]  # noqa: A001 - the standard's names


@recorded(ops.diff, "utility", dtype="promote", axes="one", methods={"diff": "n=1, axis=-1, prepend=None, append=None"})
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


# Tensor methods for these functions: {method name: function}.
METHODS: dict = methods_of("utility")
