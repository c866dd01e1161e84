"""Batch normalisation in training mode as one node: the forward with the batch's
statistics, and its closed-form backward."""

from __future__ import annotations

import math

from ._op import op


class Statistics(list):
    """A list an op fills with arrays it computes besides its output (batch norm's
    statistics), passed among its parameters. A replay of lp.compile's runs the op
    again, which fills it again: the tracer reads nothing in it as an input."""

    filled_by_the_op = True


@op("batch_norm", saves=(0, 1), saves_out=False, needs=True)
def batch_norm(be, x, weight=None, bias=None, axes=(0,), eps=1e-5, stats=None, needs=(True, True, True), relu=False):
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

    ``relu``: ReLU on the output too (:func:`batch_norm_relu`, whose gradient then
    enters the rule above where the output is not ``<= 0``).
    """
    xp = be.xp
    if x.ndim > 2 and _fused_rows(be, x, weight, bias):
        return _batch_norm_rows(be, x, weight, bias, eps, stats, needs, relu)
    shape, n, mean, centered, var, inv_std, scale = _statistics(xp, x, weight, axes, eps)
    channels = x.shape[1]
    out = centered * scale
    if bias is not None:  # in place where the dtypes agree: the product is fresh
        b = xp.reshape(bias, shape)
        if b.dtype == out.dtype:
            out += b
        else:
            out = out + b
    if relu:
        out = be.relu_fresh(out)  # (the affine map's result is this node's own)
    if stats is not None:
        stats[:] = (xp.reshape(mean, (channels,)), xp.reshape(var, (channels,)))
    need_x, need_w = needs[0], weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def backward(g):
        if relu:
            g = be.relu_mask(g, out)
        return _gradients(xp, g, centered, scale, inv_std, shape, axes, n, channels, weight is not None,
                          bias is not None, (need_x, need_w, need_b))

    return out, backward


def _statistics(xp, x, weight, axes, eps):
    """:func:`batch_norm`'s per-channel values, shaped to broadcast over ``x``: ``(shape,
    n, mean, centered, var, inv_std, scale)``."""
    channels = x.shape[1]
    shape = (1, channels) + (1,) * (x.ndim - 2)  # one value per channel, broadcasting over x
    n = math.prod(x.shape[a] for a in axes)
    mean = xp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = xp.reshape(_channel_dot(xp, centered, centered), shape) / n
    inv_std = 1.0 / xp.sqrt(var + eps)
    scale = inv_std if weight is None else inv_std * xp.reshape(weight, shape)
    return shape, n, mean, centered, var, inv_std, scale


def _gradients(xp, g, centered, scale, inv_std, shape, axes, n, channels, weighted, biased, needs):
    """:func:`batch_norm`'s backward (its docstring's rule): the input's gradient, then
    the weight's and the bias's where the node has them (None where not ``needs``)."""
    need_x, need_w, need_b = needs
    sum_g = xp.sum(g, axis=axes, keepdims=True) if need_x or need_b else None
    sum_gc = xp.reshape(_channel_dot(xp, g, centered), shape) if need_x or need_w else None
    gx = None
    if need_x:
        gx = g - sum_g / n
        gx *= scale
        gx -= centered * (scale * inv_std * inv_std * sum_gc / n)
    grads = [gx]
    if weighted:
        grads.append(xp.reshape(sum_gc * inv_std, (channels,)) if need_w else None)
    if biased:
        grads.append(xp.reshape(sum_g, (channels,)) if need_b else None)
    return tuple(grads)


def _batch_norm_relu_rule(xp, inputs, out, g, axes=(0,), eps=1e-5, stats=None, needs=None):
    """:func:`batch_norm_relu`'s backward on what the node saved (a ``create_graph``
    backward runs it, never the forward again): the statistics from the input, and the
    ReLU's mask from the node's own output, as the forward computed it. (The forward run
    again on a graph backend takes the generic path, which may round an output the row
    kernels made 0 to a few ulp above it: its mask would let a gradient through where the
    forward's ReLU stopped it.)"""
    x = inputs[0]
    weight = inputs[1] if len(inputs) > 1 else None
    shape, n, _, centered, _, inv_std, scale = _statistics(xp, x, weight, axes, eps)
    g = xp.where(out <= 0, 0.0, g)
    return _gradients(xp, g, centered, scale, inv_std, shape, axes, n, x.shape[1], weight is not None,
                      len(inputs) > 2, (True, weight is not None, len(inputs) > 2))


@op("batch_norm_relu", saves=(0, 1), saves_out=True, needs=True, rule=_batch_norm_relu_rule, saved_rule=True)
def batch_norm_relu(be, x, weight=None, bias=None, axes=(0,), eps=1e-5, stats=None, needs=(True, True, True)):
    """``relu(batch_norm(x, ...))`` in one node (``nn.Sequential`` runs a stock
    ``BatchNorm`` followed by a stock ``ReLU`` so): the same values as the two nodes,
    where the backend's row kernels take the ReLU into the affine map's pass and the
    ReLU's gradient into the backward's passes (up to the rounding of the sums, as
    :func:`batch_norm`'s). The output is saved (its positive entries pass the gradient),
    as PyTorch's ReLU saves its own: changing it in place makes backward raise, as it
    does after PyTorch's ``Sequential(BatchNorm2d, ReLU)``. A ``create_graph`` backward
    runs :func:`_batch_norm_relu_rule` on the saved values."""
    return batch_norm.fn(be, x, weight, bias, axes, eps, stats, needs, relu=True)


def _fused_rows(be, x, *others) -> bool:
    """Whether the backend has row kernels for ``x``'s dtype (and the other arrays, where
    given, have it too)."""
    fused = be.fused
    return (fused.affine_rows is not None and x.dtype in fused.row_dtypes
            and all(a is None or a.dtype == x.dtype for a in others))


def _batch_norm_rows(be, x, weight, bias, eps, stats, needs, relu=False):
    """:func:`batch_norm` of ``x`` of shape ``(N, C, *S)`` on the backend's row kernels
    (one pass each; rows of ``(sample, channel)``, as :func:`group_norm`'s): the row sums
    and the centred squares give each channel's mean and variance, the output is ``x *
    scale + shift`` per row, and the backward's sums (``sum(g)``, ``sum(g * (x - mean))``)
    and the input's gradient, ``g * scale + x * c + d``, are one pass each. With ``relu``
    the output is ``maximum(x * scale + shift, 0)`` and the backward's passes read the
    gradient through it, ``where(out <= 0, 0, g)``, where they read ``g``, where the
    backend has those kernels (else the ReLU is a pass of its own each way)."""
    xp = be.xp
    fused = be.fused
    n, c = x.shape[0], x.shape[1]
    size = math.prod(x.shape[2:])
    count = n * size
    rows = xp.reshape(x, (n * c, size))

    def per_channel(per_row):  # (N * C,) -> (C,): summed over the samples
        return xp.sum(xp.reshape(per_row, (n, c)), axis=0)

    def per_row(per_channel):  # (C,) -> (N * C,): the channel's value on each of its rows
        return xp.reshape(xp.broadcast_to(per_channel, (n, c)), (n * c,))

    mean = per_channel(xp.matmul(rows, be.ones((size,), x.dtype))) / count
    mean_rows = per_row(mean)
    var = per_channel(fused.centered_squares(rows, mean_rows)) / count
    inv_std = 1.0 / xp.sqrt(var + eps)
    scale = inv_std if weight is None else inv_std * weight
    shift = -mean * scale if bias is None else bias - mean * scale
    scale_rows = per_row(scale)
    masked = relu and fused.affine_relu_rows is not None  # the ReLU inside the passes
    if masked:
        out_rows = fused.affine_relu_rows(rows, scale_rows, per_row(shift))
        out = xp.reshape(out_rows, x.shape)
    else:
        out = xp.reshape(fused.affine_rows(rows, scale_rows, per_row(shift)), x.shape)
        if relu:
            out = be.relu_fresh(out)
    if stats is not None:
        stats[:] = (mean, var)
    need_x, need_w = needs[0], weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def backward(g):
        if relu and not masked:
            g = be.relu_mask(g, out)
        g_rows = xp.reshape(g, (n * c, size))
        if masked:  # the sums of the gradient through the ReLU, one pass
            g_rows = be.c_order(g_rows)  # (once for both kernels: a mean's gradient is a broadcast view)
            sums, dots = fused.masked_sums(g_rows, out_rows, rows, mean_rows)
            sum_g, sum_gxhat = per_channel(sums), per_channel(dots) * inv_std
        else:
            sum_g = per_channel(xp.matmul(g_rows, be.ones((size,), g.dtype)))
            sum_gxhat = per_channel(fused.centered_dot(g_rows, rows, mean_rows)) * inv_std if need_x or need_w else None
        gx = None
        if need_x:  # scale * (g - mean(g) - xhat * mean(g * xhat)) = g * scale + x * coef + offset
            coef = -scale * inv_std * sum_gxhat / count
            offset = -scale * sum_g / count - coef * mean
            if masked:
                gx = fused.affine2_masked_rows(g_rows, out_rows, scale_rows, rows, per_row(coef), per_row(offset))
            else:
                gx = fused.affine2_rows(g_rows, scale_rows, rows, per_row(coef), per_row(offset))
            gx = xp.reshape(gx, x.shape)
        grads = [gx]
        if weight is not None:
            grads.append(sum_gxhat if need_w else None)
        if bias is not None:
            grads.append(sum_g if need_b else None)
        return tuple(grads)

    return out, backward


def _channel_dot(xp, a, b):
    """``sum(a * b)`` over every axis but axis 1 of two arrays of one shape ``(N, C,
    ...)``, as dot products (no product array): shape ``(C,)``."""
    if a.ndim == 2:
        return xp.vecdot(a, b, axis=-2)
    flat = (a.shape[0], a.shape[1], -1)
    return xp.sum(xp.vecdot(xp.reshape(a, flat), xp.reshape(b, flat)), axis=0)


@op("group_norm", saves=(0, 1), saves_out=False, needs=True)
def group_norm(be, x, weight=None, bias=None, groups=1, eps=1e-5, needs=(True, True, True)):
    """Group normalisation of ``x`` of shape ``(N, C, ...)`` in one node: the channels
    split into ``groups`` groups, each group of each sample normalised by its mean
    and biased variance, ``xhat = (x - mean) / sqrt(var + eps)``, then ``xhat *
    weight + bias`` per channel (``weight``, ``bias``: shape ``(C,)``, optional;
    ``bias`` only with ``weight``). PyTorch's kernel, pass for pass: the mean is one
    matrix-vector product, the variance sums the squares of the centred values (no
    precision lost to a large mean), and the output is one affine map per (sample,
    channel) row, ``x * scale + shift``. The backward keeps ``x``, the means and the
    inverse deviations, never a normalised copy.

    With ``gw = g * weight``, ``P`` values per group and the group means ``m1 =
    mean(gw)``, ``m2 = mean(gw * xhat)``, the gradients are ``x: (gw - m1 - xhat * m2)
    / std``, ``weight: sum(g * xhat)`` and ``bias: sum(g)`` over the samples and the
    positions. The sums over a row are a matrix-vector product (``sum(g)``) and a
    ``vecdot`` (``sum(g * x)``, from which ``sum(g * xhat)`` follows), and the input's
    gradient is again one affine map per row, ``g * scale + x * c + d``.

    The three row maps are the backend's fused kernels where it has them (one pass
    each: Numba on ``cpu``, the ``fuse`` extra), else the same arithmetic in ``xp``."""
    xp = be.xp
    dtype = x.dtype
    if weight is not None:  # one dtype for all (x float32 with float64 weights gives float64, as a product would)
        dtype = xp.result_type(x, weight) if bias is None else xp.result_type(x, weight, bias)
        x, weight = xp.astype(x, dtype, copy=False), xp.astype(weight, dtype, copy=False)
        bias = None if bias is None else xp.astype(bias, dtype, copy=False)
    n, c = x.shape[0], x.shape[1]
    size = math.prod(x.shape[2:])
    members = c // groups
    per = members * size
    affine, affine2, squares, centered_dot = _row_maps(be, dtype)
    x_rows = xp.reshape(x, (n * c, size))  # one row per (sample, channel)
    x_groups = xp.reshape(x, (n * groups, per))  # one row per (sample, group)
    mean = xp.matmul(x_groups, be.ones((per,), dtype)) / per
    inv_std = 1.0 / xp.sqrt(squares(x_groups, mean) / per + eps)
    by_group = (n, groups, 1)  # a (sample, group) value over that group's channels
    mean3, inv3 = xp.reshape(mean, by_group), xp.reshape(inv_std, by_group)
    w = None if weight is None else xp.reshape(weight, (groups, members))
    scale = xp.broadcast_to(inv3, (n, groups, members)) if w is None else inv3 * w
    shift = -mean3 * scale if bias is None else xp.reshape(bias, (groups, members)) - mean3 * scale
    scale = xp.reshape(scale, (n * c,))
    out = xp.reshape(affine(x_rows, scale, xp.reshape(shift, (n * c,))), x.shape)
    need_x, need_w = needs[0], weight is not None and needs[1]
    need_b = bias is not None and needs[2]

    def group_mean(per_channel):  # (n, groups, members) -> each group's mean, per value
        return xp.sum(per_channel, axis=2, keepdims=True) / per

    def backward(g):
        g_rows = xp.reshape(g, (n * c, size))
        sum_g = xp.reshape(xp.matmul(g_rows, be.ones((size,), dtype)), (n, groups, members))  # sum(g) per row
        sum_gxhat = None  # sum(g * xhat) per row, from the centred values (no precision lost to a large mean)
        if need_x or need_w:
            mean_rows = xp.reshape(xp.broadcast_to(mean3, (n, groups, members)), (n * c,))
            sum_gxhat = xp.reshape(centered_dot(g_rows, x_rows, mean_rows), (n, groups, members)) * inv3
        grads = [None]
        if need_x:
            m1 = group_mean(sum_g if w is None else sum_g * w)
            m2 = group_mean(sum_gxhat if w is None else sum_gxhat * w)
            coef = -m2 * inv3 * inv3  # gx = g * scale + x * coef + (-mean * coef - m1 * inv_std)
            offset = -mean3 * coef - m1 * inv3
            rows = (n * c,)
            coef = xp.reshape(xp.broadcast_to(coef, (n, groups, members)), rows)
            offset = xp.reshape(xp.broadcast_to(offset, (n, groups, members)), rows)
            grads[0] = xp.reshape(affine2(g_rows, scale, x_rows, coef, offset), x.shape)
        if weight is not None:
            grads.append(xp.reshape(xp.sum(sum_gxhat, axis=0), (c,)) if need_w else None)
        if bias is not None:
            grads.append(xp.reshape(xp.sum(sum_g, axis=0), (c,)) if need_b else None)
        return tuple(grads)

    return out, backward


def _row_maps(be, dtype):
    """``(affine, affine2, squares, centered_dot)`` on rows of a 2-D array, with per-row
    vectors: ``affine(x, a, b) = x * a + b``, ``affine2(g, a, x, c, d) = g * a + (x * c
    + d)``, ``squares(x, m) = sum((x - m) ** 2)`` and ``centered_dot(g, x, m) = sum(g *
    (x - m))`` per row. The backend's fused kernels where it offers them for ``dtype``,
    else the same arithmetic in ``xp``."""
    fused = be.fused
    if fused.affine_rows is not None and dtype in fused.row_dtypes:
        return fused.affine_rows, fused.affine2_rows, fused.centered_squares, fused.centered_dot
    xp = be.xp


    def column(v):
        return xp.reshape(v, (-1, 1))

    def affine(x, a, b):
        out = x * column(a)
        out += column(b)
        return out

    def affine2(g, a, x, c, d):
        out = g * column(a)
        part = x * column(c)
        part += column(d)
        out += part
        return out

    def squares(x, m):
        centered = x - column(m)
        return xp.vecdot(centered, centered)

    def centered_dot(g, x, m):
        return xp.vecdot(g, x - column(m))

    return affine, affine2, squares, centered_dot
