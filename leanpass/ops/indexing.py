"""Indexing: ``a[key]`` in its three forms, ``take``, and writing with ``a[key] = v``.

Backward of a read is a scatter-add (repeated indices accumulate), through the
backend's ``index_add``: the standard has none.
"""

from __future__ import annotations

from ._op import op
from .manipulation import reshape


@op("getitem", saves=(), saves_out=False, view=True)
def index_basic(be, a, key, set_key, set_shape):
    """``a[key]`` with integers, slices, ``None`` and ``...`` (a view or copy).

    ``set_key`` is ``key`` without its ``None`` entries and ``set_shape`` the
    shape of ``a[set_key]`` (``None`` when ``key`` has no ``None``): the backward
    writes the gradient there.
    """
    xp = be.xp
    shape, dtype = a.shape, a.dtype
    out = a[key]
    if set_shape is None:
        set_shape = out.shape

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[set_key] = xp.reshape(g, set_shape)
        return (buf,)

    return out, backward


@op("getitem", saves=(), saves_out=False)
def index_mask(be, a, mask):
    """``a[mask]`` for a boolean mask over the leading axes."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[mask] = g
        return (buf,)

    return a[mask], backward


@op("take", saves=(), saves_out=False)
def take(be, a, index, axis):
    """``a`` at the (non-negative, in-range) 1-D integer ``index`` along ``axis``;
    repeated indices accumulate their gradients (a scatter-add)."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        return (be.index_add(be.zeros(shape, dtype), index, g, axis),)

    return be.xp.take(a, index, axis=axis), backward


getitem_take = take.renamed("getitem")
getitem_reshape = reshape.renamed("getitem")


@op("setitem", saves=(), saves_out=False, needs=True, fresh=True)
def setitem(be, a, v, kind, key, needs=(True, True)):
    """``a[key] = v`` in place (``kind`` of the key: ``"basic"``, ``"mask"`` or
    ``"integer"``); the overwritten part of ``a`` gets no gradient, ``v`` gets the
    gradient of the part it was written to."""
    be.index_set(a, kind, key, v)
    need_a, need_v = needs

    def backward(g):
        ga = gv = None
        if need_a:
            ga = be.copy(g)
            be.index_set(ga, kind, key, 0)
        if need_v:
            gv = be.index_get(g, kind, key)
        return ga, gv

    return a, backward
