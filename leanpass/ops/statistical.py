"""Reductions and other statistics along axes.

``axes`` is always a tuple of non-negative axes, normalised by the caller.
"""

from __future__ import annotations

import math

from ._op import op


def kept_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as 1 (the ``keepdims=True`` shape)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


@op("sum", saves=(), saves_out=False, fresh=False)
def sum(be, a, axes, keepdims, dtype=None):
    xp = be.xp
    shape = a.shape

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept_shape(shape, axes))
        return (xp.broadcast_to(g, shape),)

    return xp.sum(a, axis=axes, keepdims=keepdims, dtype=dtype), backward


@op("mean", saves=(), saves_out=False, fresh=False)
def mean(be, a, axes, keepdims):
    xp = be.xp
    shape = a.shape
    count = math.prod(shape[i] for i in axes)

    def backward(g):
        if not keepdims:
            g = xp.reshape(g, kept_shape(shape, axes))
        return (xp.broadcast_to(g / count, shape),)

    with be.quiet():  # the mean of nothing is nan, without a warning
        return xp.mean(a, axis=axes, keepdims=keepdims), backward


def _extremum(name, reduce):
    @op(name, saves=(0,), saves_out=True)
    def extremum(be, a, axes, keepdims):
        """The largest (smallest) value; the gradient is shared equally between ties (``torch.amax``)."""
        xp = be.xp
        kept = getattr(xp, reduce)(a, axis=axes, keepdims=True)
        out = kept if keepdims else xp.reshape(kept, tuple(n for i, n in enumerate(a.shape) if i not in axes))

        def backward(g):
            if not keepdims:
                g = xp.reshape(g, kept.shape)
            winners = xp.astype(a == kept, g.dtype)
            return (winners * (g / xp.sum(winners, axis=axes, keepdims=True)),)

        return out, backward

    return extremum


max = _extremum("max", "max")
min = _extremum("min", "min")
