"""Batch normalisation in training mode as one node: the forward with the batch's
statistics, and its closed-form backward."""

from __future__ import annotations

import math

from ._op import op


@op("batch_norm", saves=(1,), saves_out=False, needs=True)
def batch_norm(be, x, weight=None, bias=None, axes=(0,), eps=1e-5, stats=None, needs=(True, True, True)):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` with the mean and the biased
    variance over ``axes`` (every axis but the channels, axis 1); ``weight`` and
    ``bias`` (optional; ``bias`` only with ``weight``) have one value per channel. With ``stats`` (a list) the
    per-channel mean and biased variance are put in it, for the running statistics.

    The forward is ``centered * scale (+ bias)`` with ``centered = x - mean`` and the
    per-channel ``scale = weight * inv_std``; ``centered`` is kept for the backward.
    With ``s_g = sum(g)`` and ``s_gc = sum(g * centered)`` over ``axes`` (dot products,
    no temporary) and ``n`` values per channel, the gradients are ``bias: s_g``,
    ``weight: s_gc * inv_std`` and ``x: scale * (g - s_g / n) - centered * (scale *
    inv_std**2 * s_gc / n)``.
    """
    xp = be.xp
    channels = x.shape[1]
    shape = (1, channels) + (1,) * (x.ndim - 2)  # one value per channel, broadcasting over x
    n = math.prod(x.shape[a] for a in axes)
    mean = xp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = xp.reshape(_channel_dot(xp, centered, centered), shape) / n
    inv_std = 1.0 / xp.sqrt(var + eps)
    scale = inv_std if weight is None else inv_std * xp.reshape(weight, shape)
    out = centered * scale
    if bias is not None:  # in place where the dtypes agree: the product is fresh
        b = xp.reshape(bias, shape)
        if b.dtype == out.dtype:
            out += b
        else:
            out = out + b
    if stats is not None:
        stats[:] = (xp.reshape(mean, (channels,)), xp.reshape(var, (channels,)))
    need_x, need_w = needs[0], weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def backward(g):
        sum_g = xp.sum(g, axis=axes, keepdims=True) if need_x or need_b else None
        sum_gc = xp.reshape(_channel_dot(xp, g, centered), shape) if need_x or need_w else None
        gx = None
        if need_x:
            gx = g - sum_g / n
            gx *= scale
            gx -= centered * (scale * inv_std * inv_std * sum_gc / n)
        grads = [gx]
        if weight is not None:
            grads.append(xp.reshape(sum_gc * inv_std, (channels,)) if need_w else None)
        if bias is not None:
            grads.append(xp.reshape(sum_g, (channels,)) if need_b else None)
        return tuple(grads)

    return out, backward


def _channel_dot(xp, a, b):
    """``sum(a * b)`` over every axis but axis 1 of two arrays of one shape ``(N, C,
    ...)``, as dot products (no product array): shape ``(C,)``."""
    if a.ndim == 2:
        return xp.vecdot(a, b, axis=-2)
    flat = (a.shape[0], a.shape[1], -1)
    return xp.sum(xp.vecdot(xp.reshape(a, flat), xp.reshape(b, flat)), axis=0)
