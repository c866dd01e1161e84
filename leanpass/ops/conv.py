"""Convolution: ``unfold`` (im2col), its adjoint ``fold`` (col2im), and ``conv``, a
convolution layer's forward in one node (``convolution``, named ``"conv"``), for inputs ``(N, C, *spatial)`` with any
number of spatial axes.

``padding`` is one ``(before, after)`` pair per spatial axis (zeros); ``kernel``,
``stride`` and ``dilation`` one int per axis. Patches are taken with one strided
slice per kernel offset (a loop over the kernel, never over output pixels), and
scattered back the same way, with ``xp`` only: run again on Tensors (backward with
``create_graph=True``) the rules differentiate themselves once more (second
derivatives); the scatter adds into a buffer in place, so a third derivative raises.
"""

from __future__ import annotations

import itertools
import math

from ._op import op


def _out_size(size, kernel, stride, dilation):
    return tuple((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(size, kernel, stride, dilation))


def _slices(kernel, stride, dilation, out):
    """The index of the input window of each kernel offset, in row-major order."""
    for offset in itertools.product(*(range(k) for k in kernel)):
        yield (slice(None), slice(None), *(
            slice(i * d, i * d + s * (o - 1) + 1, s) for i, s, d, o in zip(offset, stride, dilation, out)))


def _pad(be, x, padding):
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = x.shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding))
    out = be.zeros(shape, x.dtype)
    out[_interior(shape, padding)] = x
    return out


def _interior(shape, padding):
    return (slice(None), slice(None), *(slice(lo, n - hi) for n, (lo, hi) in zip(shape[2:], padding)))


def _unpad(x, padding):
    if not any(lo or hi for lo, hi in padding):
        return x
    return x[_interior(x.shape, padding)]


def _im2col(be, x, kernel, stride, dilation, axis=2):
    """``(A, B, *S)`` (padded) to patches with the ``K = prod(kernel)`` kernel offsets
    at ``axis``: ``(A, B, K, *O)`` (``axis=2``) or ``(A, K, B, *O)`` (``axis=1``)."""
    out = _out_size(x.shape[2:], kernel, stride, dilation)
    return be.xp.stack([x[index] for index in _slices(kernel, stride, dilation, out)], axis=axis)


def _col2im(be, cols, size, kernel, stride, dilation, axis=2):
    """The adjoint of :func:`_im2col`: patches summed back into ``(A, B, *size)`` (padded size)."""
    a, b = (cols.shape[0], cols.shape[1 if axis == 2 else 2])
    out = be.zeros((a, b, *size), cols.dtype)
    lead = (slice(None),) * axis
    for k, index in enumerate(_slices(kernel, stride, dilation, cols.shape[3:])):
        out[index] += cols[(*lead, k, ...)]
    return out


@op("unfold", saves=(), saves_out=False)
def unfold(be, x, kernel, stride, padding, dilation):
    """``torch.nn.functional.unfold`` for any number of spatial axes: ``(N, C, *S)`` to
    ``(N, C * prod(kernel), L)``, ``L`` the number of output positions. Its backward is :func:`fold`."""
    size = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding))
    cols = _im2col(be, _pad(be, x, padding), kernel, stride, dilation)
    n, c, k = cols.shape[:3]
    out_shape = cols.shape[3:]

    def backward(g):
        cols = be.xp.reshape(g, (n, c, k, *out_shape))
        return (_unpad(_col2im(be, cols, size, kernel, stride, dilation), padding),)

    return be.xp.reshape(cols, (n, c * k, math.prod(out_shape))), backward


@op("fold", saves=(), saves_out=False)
def fold(be, cols, size, kernel, stride, padding, dilation):
    """``torch.nn.functional.fold``, the adjoint of :func:`unfold`: ``(N, C * prod(kernel),
    L)`` summed back into ``(N, C, *size)``. Its backward is :func:`unfold`."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(size, padding))
    out_shape = _out_size(padded, kernel, stride, dilation)
    k = math.prod(kernel)
    n, c = cols.shape[0], cols.shape[1] // k
    patches = be.xp.reshape(cols, (n, c, k, *out_shape))
    out = _unpad(_col2im(be, patches, padded, kernel, stride, dilation), padding)

    def backward(g):
        grad = _im2col(be, _pad(be, g, padding), kernel, stride, dilation)
        return (be.xp.reshape(grad, cols.shape),)

    return out, backward


@op("conv", saves=(0, 1), saves_out=False, needs=True)
def convolution(be, x, w, b=None, *, stride, padding, dilation, groups, needs=(True, True, True)):
    """A convolution layer in one node: ``x`` of shape ``(N, C, *S)``, ``w`` of
    ``(out, C / groups, *kernel)`` (PyTorch's layout), ``b`` of ``(out,)`` or absent.

    The patches of each sample form a ``(C / groups * K, pixels)`` matrix per group,
    ``(N, groups, rows, pixels)`` in all, so the forward is one batched matrix product
    (one BLAS call per sample and group, never per pixel) whose result is already the
    output's ``(N, out, *O)`` layout: no transposed copy of the output, nor of its
    gradient in the backward. The weight's gradient is the per-sample products
    summed over the batch (one contraction over samples and pixels instead where
    the ``(N, *weight)`` products would outgrow the patches), the input's the
    weight's transpose times the gradient, then ``_col2im``'s scatter (:func:`fold`'s).
    The input is saved, as PyTorch's (an in-place change of it after the forward
    makes backward raise): a second derivative runs the forward on it again."""
    xp = be.xp
    kernel, spatial = w.shape[2:], tuple(range(2, x.ndim))
    size = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding))
    cols = _im2col(be, _pad(be, x, padding), kernel, stride, dilation)  # (N, C, K, *O)
    n, c, k = cols.shape[:3]
    out_shape = cols.shape[3:]
    pixels, channels, rows = math.prod(out_shape), w.shape[0], c // groups * k
    cols = xp.reshape(cols, (n, groups, rows, pixels))
    wm = xp.reshape(w, (groups, channels // groups, rows))
    out = wm @ cols  # (N, groups, out / groups, pixels)
    if b is not None:  # in place where the dtypes agree: the product is fresh
        bias = xp.reshape(b, (groups, channels // groups, 1))
        if b.dtype == out.dtype:
            out += bias
        else:
            out = out + bias
    need_x, need_w = needs[0], needs[1]
    need_b = b is not None and needs[2]
    if not need_w:
        cols = None  # not kept alive by the backward

    def backward(g):
        gm = xp.reshape(g, (n, groups, channels // groups, pixels))
        gx = gw = None
        if need_x:
            patches = xp.reshape(xp.matrix_transpose(wm) @ gm, (n, c, k, *out_shape))
            gx = _unpad(_col2im(be, patches, size, kernel, stride, dilation), padding)
        if need_w and channels // groups <= pixels:  # per-sample products summed: fast for small layers
            gw = xp.reshape(xp.sum(gm @ xp.matrix_transpose(cols), axis=0), w.shape)
        elif need_w:  # one contraction over samples and pixels: no (N, *weight) temporary
            gn = xp.reshape(xp.permute_dims(gm, (1, 2, 0, 3)), (groups, channels // groups, n * pixels))
            cn = xp.reshape(xp.permute_dims(cols, (1, 0, 3, 2)), (groups, n * pixels, rows))
            gw = xp.reshape(gn @ cn, w.shape)
        if b is None:
            return gx, gw
        return gx, gw, (xp.sum(g, axis=(0, *spatial)) if need_b else None)

    return xp.reshape(out, (n, channels, *out_shape)), backward
