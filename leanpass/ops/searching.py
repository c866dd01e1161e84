"""Operations of the standard's searching section: indices of extrema, of non-zero
elements, of insertion points (none of them differentiable), and ``where``."""

from __future__ import annotations

from ._op import op


def _arg(name):
    @op(name, differentiable=False)
    def arg(be, a, axis, keepdims):
        """The index of the first largest (smallest) value along ``axis`` (``None``:
        of the flattened tensor), in int64."""
        return getattr(be.xp, name)(a, axis=axis, keepdims=keepdims), None

    return arg


argmax = _arg("argmax")
argmin = _arg("argmin")


@op("count_nonzero", differentiable=False)
def count_nonzero(be, a, axes, keepdims):
    """How many elements along ``axes`` are not zero (``True`` for booleans), in int64."""
    xp = be.xp
    if not axes:  # nothing reduced: 1 where non-zero
        return xp.astype(a != xp.zeros_like(a), xp.int64), None
    return xp.count_nonzero(a, axis=axes, keepdims=keepdims), None


@op("nonzero", differentiable=False)
def nonzero(be, a):
    """A tuple of int64 arrays, one per axis: the indices of the non-zero elements in
    row-major order."""
    return be.xp.nonzero(a), None


@op("searchsorted", differentiable=False)
def searchsorted(be, sorted_, values, side, sorter):
    """Where ``values`` would go into the 1-D ``sorted_`` (sorted by ``sorter`` when given)."""
    return be.xp.searchsorted(sorted_, values, side=side, sorter=sorter), None


@op("where", saves=(0,), saves_out=False, complex="holomorphic")
def where(be, condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (broadcast together; either may be a
    Python number). Gradient: ``g`` to ``a`` where the condition holds, to ``b`` elsewhere;
    none to the condition."""
    xp = be.xp

    def backward(g):
        return None, xp.where(condition, g, 0.0), xp.where(condition, 0.0, g)

    return xp.where(condition, a, b), backward
