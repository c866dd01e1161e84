"""Changing shapes and arranging arrays: reshape, permute and the rest."""

from __future__ import annotations

from ._op import op


@op("reshape", saves=(), saves_out=False, fresh=False, view=True)
def reshape(be, a, shape):
    xp = be.xp
    old = a.shape

    def backward(g):
        return (xp.reshape(g, old),)

    return xp.reshape(a, shape), backward


@op("transpose", saves=(), saves_out=False, fresh=False, view=True)
def permute_dims(be, a, axes):
    xp = be.xp
    inverse = tuple(sorted(range(len(axes)), key=axes.__getitem__))

    def backward(g):
        return (xp.permute_dims(g, inverse),)

    return xp.permute_dims(a, axes), backward
