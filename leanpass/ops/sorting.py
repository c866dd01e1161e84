"""Operations of the standard's sorting section: ``argsort`` (not differentiable) and
``sort`` (differentiable: the gradient follows the permutation back)."""

from __future__ import annotations

from ._op import op


@op("argsort", differentiable=False)
def argsort(be, a, axis, descending, stable):
    """The int64 indices that sort ``a`` along ``axis``; with ``stable``, equal values
    keep their order (also when ``descending``)."""
    return be.xp.argsort(a, axis=axis, descending=descending, stable=stable), None


@op("sort", saves=(), saves_out=False, needs=True)
def sort(be, a, axis, descending, stable, needs=(True,)):
    """``a`` sorted along ``axis``. Gradient: ``g`` sent back through the permutation
    (each input element gets the gradient of the place it was sorted to)."""
    xp = be.xp
    if not needs[0]:
        return xp.sort(a, axis=axis, descending=descending, stable=stable), None
    order = xp.argsort(a, axis=axis, descending=descending, stable=stable)

    def backward(g):
        inverse = xp.argsort(order, axis=axis)  # the inverse permutation
        return (xp.take_along_axis(g, inverse, axis=axis),)

    return xp.take_along_axis(a, order, axis=axis), backward
