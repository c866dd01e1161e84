"""Changing shapes and arranging arrays: reshape, permute, joining, repeating, rolling.

Arguments arrive checked and normalised by :mod:`leanpass._namespace.manipulation`
(axes non-negative, shapes valid, one dtype for joined arrays). Operations whose
output is a view of their input (reshape, permute, flip, broadcast) are marked
``view=True``; those whose backward returns the gradient itself or a view of it are
marked ``fresh=False``.
"""

from __future__ import annotations

from ._op import op


@op("reshape", saves=(), saves_out=False, fresh=False, view=True, copies=True, complex="holomorphic")
def reshape(be, a, shape, copy=None):
    """``a`` in another ``shape``; ``copy=False`` raises rather than copy."""
    xp = be.xp
    old = a.shape

    def backward(g):
        return (xp.reshape(g, old),)

    return (xp.reshape(a, shape) if copy is None else xp.reshape(a, shape, copy=copy)), backward


# A new axis of size one, or size-one axes removed: reshapes under their own names.
expand_dims = reshape.renamed("expand_dims")
squeeze = reshape.renamed("squeeze")


@op("transpose", saves=(), saves_out=False, fresh=False, view=True, complex="holomorphic")
def permute_dims(be, a, axes):
    xp = be.xp
    inverse = tuple(sorted(range(len(axes)), key=axes.__getitem__))

    def backward(g):
        return (xp.permute_dims(g, inverse),)

    return xp.permute_dims(a, axes), backward


moveaxis = permute_dims.renamed("moveaxis")


@op("broadcast_to", saves=(), saves_out=False, fresh=False, view=True, complex="holomorphic")
def broadcast_to(be, a, shape):
    """``a`` broadcast to ``shape`` (a read-only view on NumPy); the engine sums the
    gradient back over the broadcast axes."""

    def backward(g):
        return (g,)

    return be.xp.broadcast_to(a, shape), backward


@op("flip", saves=(), saves_out=False, fresh=False, view=True, complex="holomorphic")
def flip(be, a, axes):
    """``a`` reversed along ``axes`` (a tuple; ``None``: all); the gradient is flipped back."""
    xp = be.xp
    if not axes:  # a 0-d tensor, or no axis named
        return a[...], _pass

    def backward(g):
        return (xp.flip(g, axis=axes),)

    return xp.flip(a, axis=axes), backward


def _pass(g):
    return (g,)


@op("roll", saves=(), saves_out=False, complex="holomorphic")
def roll(be, a, shift, axes):
    """``a`` rolled by ``shift`` along ``axes`` (tuples of equal length; ``axes=None``:
    the flattened array); the gradient is rolled back."""
    xp = be.xp
    back = tuple(-s for s in shift) if isinstance(shift, tuple) else -shift

    def backward(g):
        return (xp.roll(g, back, axis=axes),)

    return xp.roll(a, shift, axis=axes), backward


def _parts(xp, g, axis, sizes):
    """``g`` cut along ``axis`` into pieces of ``sizes`` (views)."""
    lead = (slice(None),) * axis
    parts = []
    start = 0
    for n in sizes:
        parts.append(g[lead + (slice(start, start + n), ...)])
        start += n
    return tuple(parts)


@op("concat", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def concat(be, *arrays, axis):
    """The ``arrays`` (one dtype) joined along an existing ``axis``; each gets its
    own slice of the gradient."""
    xp = be.xp
    sizes = [a.shape[axis] for a in arrays]

    def backward(g):
        return _parts(xp, g, axis, sizes)

    return xp.concat(arrays, axis=axis), backward


@op("stack", saves=(), saves_out=False, fresh=False, complex="holomorphic")
def stack(be, *arrays, axis):
    """The ``arrays`` (one dtype and shape) joined along a new ``axis``."""
    xp = be.xp
    lead = (slice(None),) * axis
    n = len(arrays)

    def backward(g):
        return tuple(g[lead + (i, ...)] for i in range(n))

    return xp.stack(arrays, axis=axis), backward


@op("unstack", saves=(), saves_out=False, view=True, complex="holomorphic")
def unstack_part(be, a, axis, i):
    """Part ``i`` of ``a`` along ``axis`` (a view); its gradient fills that part of a zero array."""
    shape, dtype = a.shape, a.dtype
    key = (slice(None),) * axis + (i, ...)

    def backward(g):
        buf = be.zeros(shape, dtype)
        buf[key] = g
        return (buf,)

    return a[key], backward


@op("repeat", saves=(), saves_out=False, complex="holomorphic")
def repeat(be, a, repeats, axis):
    """Each element of ``a`` repeated along ``axis`` (``a`` is already flat when the
    user asked for ``axis=None``). ``repeats`` is an int or a 1-D integer array of
    ``a.shape[axis]`` entries. The gradient sums the copies: a reshape and a
    sum for an int, a scatter-add for an array."""
    xp = be.xp
    shape = a.shape
    n = shape[axis]
    if isinstance(repeats, int):

        def backward(g):
            g = xp.reshape(g, shape[:axis] + (n, repeats) + shape[axis + 1:])
            return (xp.sum(g, axis=axis + 1),)

        return xp.repeat(a, repeats, axis=axis), backward
    # Which element each output slot copies: [2, 0, 3] -> [0, 0, 2, 2, 2] (CuPy's
    # repeat takes no array of counts; the standard's searchsorted does this).
    ends = xp.cumulative_sum(xp.astype(repeats, xp.int64))
    total = int(ends[-1]) if n else 0
    positions = xp.searchsorted(ends, be.arange(total, xp.int64), side="right")
    dtype = a.dtype

    def backward(g):
        return (be.index_add(be.zeros(shape, dtype), positions, g, axis),)

    return xp.take(a, positions, axis=axis), backward


@op("tile", saves=(), saves_out=False, complex="holomorphic")
def tile(be, a, reps):
    """``a`` tiled ``reps`` times along each axis (``reps`` has at least ``a.ndim``
    entries); the gradient sums the tiles."""
    xp = be.xp
    shape = a.shape
    padded = (1,) * (len(reps) - len(shape)) + tuple(shape)

    def backward(g):
        split = tuple(n for pair in zip(reps, padded) for n in pair)  # (r0, s0, r1, s1, ...)
        summed = xp.sum(xp.reshape(g, split), axis=tuple(range(0, 2 * len(reps), 2)))
        return (xp.reshape(summed, shape),)

    return xp.tile(xp.reshape(a, padded), reps), backward


@op("meshgrid", saves=(), saves_out=False, complex="holomorphic")
def meshgrid_part(be, a, axis, shape):
    """The 1-D ``a`` laid along ``axis`` of a grid of ``shape`` (an array of its own);
    the gradient sums over the other axes."""
    xp = be.xp
    line = tuple(-1 if i == axis else 1 for i in range(len(shape)))
    others = tuple(i for i in range(len(shape)) if i != axis)
    n = a.shape[0]

    def backward(g):
        return (xp.reshape(xp.sum(g, axis=others), (n,)),)

    return be.copy(xp.broadcast_to(xp.reshape(a, line), shape)), backward
