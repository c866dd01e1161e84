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


@op("group_norm", saves=(1,), saves_out=False, needs=True)
def group_norm(be, x, weight=None, bias=None, groups=1, eps=1e-5, needs=(True, True, True)):
    """Group normalisation of ``x`` of shape ``(N, C, ...)`` in one node: the channels
    split into ``groups`` groups, each group of each sample normalised by its mean
    and biased variance, ``xhat = (x - mean) / sqrt(var + eps)``, then ``xhat *
    weight + bias`` per channel (``weight``, ``bias``: shape ``(C,)``, optional;
    ``bias`` only with ``weight``). The statistics take two passes (the centred
    values are squared, so a large mean costs no precision); the centred values are
    kept for the backward, and ``xhat`` is never formed: the output is ``centred *
    (inv_std * weight) + bias``.

    With ``gw = g * weight``, ``P`` values per group and the group means ``m1 =
    mean(gw)``, ``m2 = mean(gw * xhat)``, the gradients are ``x: (gw - m1 - xhat * m2)
    / std``, ``weight: sum(g * xhat)`` and ``bias: sum(g)`` over the samples and the
    positions. The sums over positions are one matrix-vector product and one
    ``vecdot`` per (sample, channel), and the group means come from those; the
    input's gradient is ``g * (inv_std * weight) - centred * (inv_std**2 * m2) -
    inv_std * m1``."""
    xp = be.xp
    n, c = x.shape[0], x.shape[1]
    size = math.prod(x.shape[2:])
    per, rows, members = c // groups * size, n * groups, c // groups
    grouped = (n, groups, members, size)  # x's layout, group by group
    stat = (n, groups, 1, 1)  # one value per group of a sample, broadcasting over that layout
    mean = xp.reshape(xp.matmul(xp.reshape(x, (rows, per)), be.ones((per,), x.dtype)), stat) / per
    centered = xp.reshape(x, grouped) - mean  # fresh; the backward reads it, so never changed in place
    var = xp.reshape(xp.sum(xp.vecdot(centered, centered), axis=2), stat) / per
    inv_std = 1.0 / xp.sqrt(var + eps)
    scale = inv_std if weight is None else inv_std * xp.reshape(weight, (groups, members, 1))
    out = centered * scale
    if bias is not None:  # in place where the dtypes agree: the product is fresh
        b = xp.reshape(bias, (groups, members, 1))
        if b.dtype == out.dtype:
            out += b
        else:
            out = out + b
    out = xp.reshape(out, x.shape)
    need_x, need_w = needs[0], weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def group_mean(per_channel):  # (n, groups, members) sums -> the means over each group's values
        return xp.reshape(xp.sum(per_channel, axis=2), stat) / per

    def backward(g):
        g4 = xp.reshape(g, grouped)
        sum_g = sum_gx = None  # per (sample, channel): sum(g) and sum(g * xhat)
        if need_x or need_b:
            sum_g = xp.reshape(xp.matmul(xp.reshape(g, (n * c, size)), be.ones((size,), g.dtype)), grouped[:3])
        if need_x or need_w:
            sum_gx = xp.vecdot(g4, centered) * xp.reshape(inv_std, (n, groups, 1))
        grads = [None]
        if need_x:
            # fresh arrays changed in place, never views (a replay on Tensors refuses those)
            if weight is None:
                m1, m2 = group_mean(sum_g), group_mean(sum_gx)
            else:
                w = xp.reshape(weight, (groups, members))
                m1, m2 = group_mean(sum_g * w), group_mean(sum_gx * w)
            gx = g4 * scale
            gx -= centered * (m2 * inv_std * inv_std)
            gx -= m1 * inv_std
            grads[0] = xp.reshape(gx, x.shape)
        if weight is not None:
            grads.append(xp.reshape(xp.sum(sum_gx, axis=0), (c,)) if need_w else None)
        if bias is not None:
            grads.append(xp.reshape(xp.sum(sum_g, axis=0), (c,)) if need_b else None)
        return tuple(grads)

    return out, backward
