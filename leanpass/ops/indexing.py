"""Indexing: ``a[key]`` in its three forms, ``take``, and writing with ``a[key] = v``.

Backward of a read is a scatter-add (repeated indices accumulate), through the
backend's ``index_add``: the standard has none.
"""

from __future__ import annotations

import math

from ._op import Op, op
from .manipulation import permute_dims, reshape


@op("getitem", saves=(), saves_out=False, view=True, complex="holomorphic")
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


@op("getitem", saves=(), saves_out=False, complex="holomorphic")
def index_mask(be, a, mask):
    """``a[mask]`` for a boolean mask over the leading axes."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[mask] = g
        return (buf,)

    return a[mask], backward


def take(be, a, index, axis):
    """``a`` at the (non-negative, in-range) 1-D integer ``index`` along ``axis``, and
    its backward: repeated indices accumulate their gradients (a scatter-add). The
    forward of :func:`take_at`, which makes the positions."""
    shape, dtype = a.shape, a.dtype

    def backward(g):
        return (be.index_add(be.zeros(shape, dtype), index, g, axis),)

    return be.xp.take(a, index, axis=axis), backward


def flat_positions(be, shape, index, axis):
    """The positions, in the flattened array of ``shape``, that ``index`` (non-negative,
    in range, of ``shape`` except along ``axis``) picks along ``axis``."""
    xp = be.xp
    pre, n, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    index = xp.reshape(index, (pre, index.shape[axis], post))
    rows = xp.reshape(be.arange(pre, xp.int64) * (n * post), (pre, 1, 1))
    cols = xp.reshape(be.arange(post, xp.int64), (1, 1, post))
    return xp.reshape(rows + index * post + cols, (-1,))


@op("take_along_axis", saves=(), saves_out=False, complex="holomorphic")
def take_along_axis(be, a, index, axis, shape, out_shape):
    """``a`` (broadcast to ``shape``) at the integer ``index`` (in range, negative
    positions counted from the end, broadcast to ``out_shape``) along ``axis``: one
    ``take`` from the flattened array; repeated indices accumulate their gradients (a
    scatter-add). ``index % n`` wraps the negative positions here, from the index's
    values, so that a replay of lp.compile's follows new ones."""
    xp = be.xp
    dtype = a.dtype
    index = xp.broadcast_to(index, out_shape)
    positions = flat_positions(be, shape, index % shape[axis] if shape[axis] else index, axis)
    flat = xp.reshape(xp.broadcast_to(a, shape), (-1,))

    def backward(g):
        buf = be.index_add(be.zeros((math.prod(shape),), dtype), positions, xp.reshape(g, (-1,)), 0)
        return (xp.reshape(buf, shape),)

    return xp.reshape(xp.take(flat, positions, axis=0), out_shape), backward


@op("getitem", saves=(), saves_out=False, complex="holomorphic")
def take_at(be, a, axis, index_shape, sizes, *entries):
    """``a`` at an integer-array index, taken along ``axis`` as one 1-D index: the
    ``entries`` (integer arrays and ints, in range, for ``len(entries)`` axes the caller
    merged into ``axis``, of lengths ``sizes``) broadcast together to ``index_shape``
    and combined into positions here, from the index's values, so that a replay of
    lp.compile's follows new ones. ``p % n`` wraps negative positions and makes a new
    array: the backward keeps the positions, never the index's own memory (which may
    change in place afterwards)."""
    xp = be.xp
    linear = None
    for p, n in zip(entries, sizes):
        p = p % n
        linear = p if linear is None else linear * n + p
    return take(be, a, xp.reshape(xp.broadcast_to(linear, index_shape), (-1,)), axis)


take_positions = take_at.renamed("take")  # lp.take, a DataLoader's batches
getitem_reshape = reshape.renamed("getitem")
# the result of a take (a new array) given the index's shape: no view of the tensor
# indexed, so it can be changed in place like any result
getitem_shape = Op("getitem", reshape.fn, saves=(), saves_out=False, fresh=False, view=False, complex="holomorphic",
                   doc="An integer-array index's result in the index's shape (a new array).")
getitem_permute = permute_dims.renamed("getitem")


def _repeats(xp, shape, key) -> bool:
    """Whether an integer-array ``key`` (its arrays non-negative positions) names a
    position of a tensor of ``shape`` more than once: some combination of its arrays'
    values, broadcast together, repeats (slices and ints add no repeats)."""
    arrays = [(k, shape[axis]) for axis, k in enumerate(key) if not isinstance(k, (int, slice))]
    if not arrays:
        return False
    code = None
    for a, size in zip(xp.broadcast_arrays(*(a for a, _ in arrays)), (n for _, n in arrays)):
        code = a if code is None else code * size + a  # one number per combination
    flat = xp.reshape(code, (-1,))
    return xp.unique_values(flat).shape[0] < flat.shape[0]


def _written_last(be, shape, key, gv):
    """``gv`` (the value's gradient, in the indexed shape) where its element is the one
    an integer-array write left in place, 0 where a later element of the same write
    overwrote it: the write is done again with each element's number, so the
    library's own order of repeated writes decides."""
    xp = be.xp
    if not _repeats(xp, shape, key):  # the usual case: nothing overwritten, no work the size of the target
        return gv
    numbers = xp.reshape(xp.arange(math.prod(gv.shape), dtype=xp.int64, device=be.xp_device), gv.shape)
    marks = xp.full(shape, -1, dtype=xp.int64, device=be.xp_device)
    be.index_set(marks, "integer", key, numbers)
    return xp.where(be.index_get(marks, "integer", key) == numbers, gv, xp.zeros_like(gv))


@op("setitem", saves=(), saves_out=False, needs=True, fresh=True, complex="holomorphic")
def setitem(be, a, v, kind, key, needs=(True, True)):
    """``a[key] = v`` in place (``kind`` of the key: ``"basic"``, ``"mask"`` or
    ``"integer"``); the overwritten part of ``a`` gets no gradient, ``v`` gets the
    gradient of the part it was written to. Where integer arrays name a position
    more than once, only the value written last there (the one it holds) gets its
    gradient: the others were overwritten (PyTorch gives each of them the gradient,
    which gradcheck refutes)."""
    be.index_set(a, kind, key, v)
    need_a, need_v = needs
    shape = a.shape

    def backward(g):
        ga = gv = None
        if need_a:
            ga = be.copy(g)
            be.index_set(ga, kind, key, 0)
        if need_v:
            gv = be.index_get(g, kind, key)
            if kind == "basic":  # a view of g: the value's gradient must be an array of its own (fresh)
                gv = be.copy(gv)
            elif kind == "integer":
                gv = _written_last(be, shape, key, gv)
        return ga, gv

    return a, backward
