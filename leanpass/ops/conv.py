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
    """``x`` padded with zeros, a fresh array in C order; without padding, ``x`` in C
    order (a copy only where it is laid out otherwise: channels last, Fortran order),
    so that the patches, and so the product's rounding, do not depend on its layout."""
    if not any(lo or hi for lo, hi in padding):
        return be.c_order(x)
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


def _im2col(be, x, kernel, stride, dilation, padding):
    """``(A, B, *S)`` padded with zeros by ``padding`` to patches with the ``K =
    prod(kernel)`` kernel offsets at axis 2: ``(A, B, K, *O)``."""
    size = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding))
    out = _out_size(size, kernel, stride, dilation)
    fused = be.fused
    if fused.im2col2d is not None and len(kernel) == 2 and x.dtype in fused.row_dtypes:
        return fused.im2col2d(x, kernel, stride, dilation, out, padding)  # one pass, a row at a time
    x = _pad(be, x, padding)
    return be.xp.stack([x[index] for index in _slices(kernel, stride, dilation, out)], axis=2)


def _col2im(be, cols, size, kernel, stride, dilation, padding):
    """The adjoint of :func:`_im2col`: patches summed back into ``(A, B, *size)`` (``size``
    without the padding, which is cut off)."""
    fused = be.fused
    if fused.col2im2d is not None and len(kernel) == 2 and cols.dtype in fused.row_dtypes:
        return fused.col2im2d(cols, size, kernel, stride, dilation, padding)  # one pass, a row at a time
    if be.col2im is not None:  # on Tensors (a second derivative): one node
        return be.col2im(cols, size, kernel, stride, dilation, padding)
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(size, padding))
    out = be.zeros((cols.shape[0], cols.shape[1], *padded), cols.dtype)
    for k, index in enumerate(_slices(kernel, stride, dilation, cols.shape[3:])):
        out[index] += cols[:, :, k, ...]
    return _unpad(out, padding)


@op("unfold", saves=(), saves_out=False, complex="holomorphic")
def unfold(be, x, kernel, stride, padding, dilation):
    """``torch.nn.functional.unfold`` for any number of spatial axes: ``(N, C, *S)`` to
    ``(N, C * prod(kernel), L)``, ``L`` the number of output positions. Its backward is :func:`fold`."""
    size = x.shape[2:]
    cols = _im2col(be, x, kernel, stride, dilation, padding)
    n, c, k = cols.shape[:3]
    out_shape = cols.shape[3:]

    def backward(g):
        cols = be.xp.reshape(g, (n, c, k, *out_shape))
        return (_col2im(be, cols, size, kernel, stride, dilation, padding),)

    return be.xp.reshape(cols, (n, c * k, math.prod(out_shape))), backward


@op("fold", saves=(), saves_out=False, complex="holomorphic")
def fold(be, cols, size, kernel, stride, padding, dilation):
    """``torch.nn.functional.fold``, the adjoint of :func:`unfold`: ``(N, C * prod(kernel),
    L)`` summed back into ``(N, C, *size)``. Its backward is :func:`unfold`."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(size, padding))
    out_shape = _out_size(padded, kernel, stride, dilation)
    k = math.prod(kernel)
    n, c = cols.shape[0], cols.shape[1] // k
    patches = be.xp.reshape(cols, (n, c, k, *out_shape))
    out = _col2im(be, patches, tuple(size), kernel, stride, dilation, padding)

    def backward(g):
        grad = _im2col(be, g, kernel, stride, dilation, padding)
        return (be.xp.reshape(grad, cols.shape),)

    return out, backward


@op("conv", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
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
    makes backward raise): a second derivative runs the forward on it again.

    (*) The product's layout, chosen for BLAS: in float32 the weight's gradient is
    formed as ``(rows, out)`` products, then turned, where it has more rows than
    outputs (OpenBLAS's sgemm, one thread: 6.9 against 8.1 ms for W5c's second layer,
    and 5.7 against 9.0 for ``(16 out, 144 rows, 1024 pixels)``); float64 keeps
    ``(out, rows)``, faster there (13.3 against 14.0 ms). One product over every
    sample's pixels was tried and left out: its patches across samples cost more to
    gather than the product saves (CHANGELOG)."""
    xp = be.xp
    kernel, spatial = w.shape[2:], tuple(range(2, x.ndim))
    size = x.shape[2:]
    cols = _im2col(be, x, kernel, stride, dilation, padding)  # (N, C, K, *O)
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
            gx = _col2im(be, patches, size, kernel, stride, dilation, padding)
        if need_w and channels // groups <= pixels and xp.isdtype(g.dtype, xp.float32) and \
                rows >= channels // groups:  # per-sample products summed, as (rows, out) then turned (*)
            turned = xp.matrix_transpose(xp.sum(cols @ xp.matrix_transpose(gm), axis=0))
            gw = xp.reshape(xp.reshape(turned, (-1,)), w.shape)  # C-ordered (the flat reshape copies): an
            # optimizer's one-pass kernels take only such gradients
        elif need_w and channels // groups <= pixels:  # per-sample products summed: fast for small layers
            gw = xp.reshape(xp.sum(gm @ xp.matrix_transpose(cols), axis=0), w.shape)
        elif need_w:  # one contraction over samples and pixels: no (N, *weight) temporary
            gn = xp.reshape(xp.permute_dims(gm, (1, 2, 0, 3)), (groups, channels // groups, n * pixels))
            cn = xp.reshape(xp.permute_dims(cols, (1, 0, 3, 2)), (groups, n * pixels, rows))
            gw = xp.reshape(gn @ cn, w.shape)
        if b is None:
            return gx, gw
        return gx, gw, (xp.sum(g, axis=(0, *spatial)) if need_b else None)

    return xp.reshape(out, (n, channels, *out_shape)), backward


@op("conv_transpose", saves=(0, 1), saves_out=False, needs=True, complex="holomorphic")
def conv_transpose(be, x, w, b=None, *, stride, padding, output_padding, dilation, groups,
                   needs=(True, True, True)):
    """A transposed convolution layer in one node (``torch.nn.functional.conv_transpose1d``
    / ``2d``): the adjoint of :func:`convolution` with respect to its input. ``x`` of
    shape ``(N, C, *S)``, ``w`` of ``(C, out / groups, *kernel)`` (PyTorch's layout),
    ``b`` of ``(out,)`` or absent; ``padding`` one ``(p, p)`` pair per axis,
    ``output_padding`` one int per axis (added after the last entry of each axis).

    The pixels are laid out outside and ``(sample, group, channel)`` inside, so that
    every strided slice the kernel offsets need moves long contiguous runs (along an
    image row they would be a few values each, where NumPy's loops cost far more than
    the arithmetic):

    - forward: the input as rows ``(groups, S * N, C / groups)`` (one copy); one product
      per group and kernel offset with the weight, ``(groups, K, S * N, out / groups)``;
      each offset's block added into the padded output ``(*padded, N, groups, out /
      groups)`` through one strided slice (``_col2im``'s scatter); the bias added in
      place. The output is that buffer's interior seen as ``(N, out, *O)``: a view
      with the channels innermost in memory, as PyTorch's ``channels_last``;
    - backward: the gradient copied into a zero-padded buffer of the same layout (cheap
      when it has the output's layout, as the gradients of element-wise operations on
      the output do), its patches gathered with one strided slice per offset,
      ``(groups, S * N, K * out / groups)``; the input's gradient (a convolution of
      the gradient, seen as ``(N, C, *S)`` in the patches' pixel-major layout) and the
      weight's are one product each; the bias's is the gradient summed over samples
      and pixels.

    Where the backend offers patch kernels (NumPy with Numba) and the layer has one
    group and one or two spatial axes, :class:`_Planar` replaces both strided-slice
    loops: the forward is then one product for all kernel offsets (a band of input
    rows at a time) and a scatter, the backward's patches are gathered from the
    gradient as it is laid out."""
    xp = be.xp
    kernel, dims = tuple(w.shape[2:]), x.ndim - 2
    n, c = x.shape[:2]
    size = tuple(x.shape[2:])
    pixels, k = math.prod(size), math.prod(kernel)
    per_in, per_out = c // groups, w.shape[1]
    channels = per_out * groups
    # the output padded on both sides, output_padding included: where the scatter adds
    padded = tuple((m - 1) * s + d * (kk - 1) + 1 + extra
                   for m, kk, s, d, extra in zip(size, kernel, stride, dilation, output_padding))
    out_size = tuple(m - lo - hi for m, (lo, hi) in zip(padded, padding))
    spatial = tuple(range(dims))
    # rows[g, (s, n), i] = x[n, g * per_in + i, s]: one copy of the input
    rows = xp.reshape(xp.permute_dims(xp.reshape(x, (n, groups, per_in, *size)), (1, *(a + 3 for a in spatial), 0, 2)),
                      (groups, pixels * n, per_in))  # rows[g, (s, n), i] = x[n, g * per_in + i, s]: one copy
    w4 = xp.reshape(w, (groups, per_in, per_out, k))
    offsets = list(itertools.product(*(range(kk) for kk in kernel)))
    windows = [window[2:] for window in _slices(kernel, stride, dilation, size)]  # the spatial slices
    planar = _planar(be, x, w, b, groups)
    if planar is not None:  # the backend's patch kernels, on the layer seen as two-dimensional
        planar = _Planar(planar, size, kernel, stride, padding, dilation, n, channels)
        inside = planar.forward(be, rows, w4, b, out_size)
    elif be.col2im is not None:  # on Tensors (a second derivative): the offsets' blocks scattered as one node
        per_offset = xp.stack([w4[..., offset] for offset in range(k)])
        to_nc = (dims + 1, 0, dims + 2, *(a + 1 for a in spatial))  # (groups, *S, N, out/g) -> (N, groups, out/g, *S)
        blocks = [xp.reshape(xp.permute_dims(xp.reshape(rows @ per_offset[offset, ...], (groups, *size, n, per_out)),
                                             to_nc), (n, channels, *size)) for offset in range(k)]
        result = be.col2im(xp.stack(blocks, axis=2), out_size, kernel, stride, dilation, padding)
        if b is not None:
            result = result + xp.reshape(b, (1, channels) + (1,) * dims)
    else:
        spread = (*(a + 1 for a in spatial), dims + 1, 0, dims + 2)  # (groups, *S, N, out/g) -> (*S, N, groups, out/g)
        per_offset = xp.stack([w4[..., offset] for offset in range(k)])  # (K, groups, C / groups, out / groups)
        out = None
        for offset, window in enumerate(windows):  # each offset's block added while it is in the cache
            block = xp.permute_dims(xp.reshape(rows @ per_offset[offset, ...], (groups, *size, n, per_out)), spread)
            if out is None:
                out = be.zeros((*padded, n, groups, per_out), block.dtype)
            out[(*window, ...)] += block
        inside = out[(*(slice(lo, lo + m) for m, (lo, _) in zip(out_size, padding)), ...)]  # (*O, N, groups, out/g)
        if b is not None:  # in place where the dtypes agree: the buffer is this node's own
            bias = xp.reshape(b, (groups, per_out))
            if b.dtype == inside.dtype:
                inside += bias
            else:
                inside = inside + bias
    if planar is not None or be.col2im is None:
        result = xp.reshape(xp.permute_dims(inside, (dims, dims + 1, dims + 2, *spatial)), (n, channels, *out_size))
    need_x, need_w = needs[0], needs[1]
    need_b = b is not None and needs[2]
    if not need_w:
        rows = None  # not kept alive by the backward
    # the part of the padded output (output_padding cut off) that input pixels reach
    reached = tuple(m - extra for m, extra in zip(padded, output_padding))
    kept = tuple(min(m, r - lo) for m, r, (lo, _) in zip(out_size, reached, padding))
    inner = tuple(slice(lo, lo + m) for m, (lo, _) in zip(kept, padding))

    def backward(g):
        gx = gw = None
        if planar is None and (need_x or need_w):
            gp = xp.permute_dims(xp.reshape(g, (n, groups, per_out, *out_size)), (*(a + 3 for a in spatial), 0, 1, 2))
            gp = gp[(*(slice(0, m) for m in kept), ...)]
            buf = be.zeros((*reached, n, groups, per_out), g.dtype)
            if n > 1 and math.prod(kept) * channels >= 4096:  # a transpose per sample: its source stays in cache
                for i in range(n):
                    buf[(*inner, i, ...)] = gp[(*(slice(None),) * dims, i, ...)]
            else:
                buf[(*inner, ...)] = gp
        if need_x:
            w6 = xp.reshape(xp.permute_dims(w4, (0, 3, 2, 1)), (groups, k * per_out, per_in))
        parts = []
        first, rest = (size[0], pixels // size[0]) if planar is None else planar.size
        band = max(1, min(first, (1 << 18) // max(1, rest * n * channels * k)))  # patches of about 2**18 values
        for start in range(0, first if need_x or need_w else 0, band):  # the patches of a band of input rows
            stop = min(first, start + band)
            here = (stop - start) * rest * n
            if planar is not None:
                patches = planar.patches(g, start, stop)
            else:
                patches = xp.stack([buf[(slice(o[0] * dilation[0] + stride[0] * start,
                                               o[0] * dilation[0] + stride[0] * (stop - 1) + 1, stride[0]),
                                         *window[1:], ...)] for o, window in zip(offsets, windows)], axis=dims + 2)
            patches = xp.reshape(xp.permute_dims(xp.reshape(patches, (here, groups, k * per_out)), (1, 0, 2)),
                                 (groups, here, k * per_out))  # (groups, rows, K * out/g): a view where groups == 1
            if need_x:  # a convolution of the gradient: (groups, rows, C / groups)
                parts.append(patches @ w6)
            if need_w:  # rows.T @ patches: (groups, C / groups, K * out / groups)
                part = xp.matrix_transpose(rows[:, start * rest * n:stop * rest * n, :]) @ patches
                gw = part if gw is None else gw + part
        if need_x:  # (groups, *S, N, C / groups), seen as (N, C, *S) (a view where groups == 1)
            gx = xp.reshape(parts[0] if len(parts) == 1 else xp.concat(parts, axis=1), (groups, *size, n, per_in))
            gx = xp.reshape(xp.permute_dims(gx, (dims + 1, 0, dims + 2, *(a + 1 for a in spatial))), x.shape)
        if need_w:
            gw = xp.reshape(xp.permute_dims(xp.reshape(gw, (groups, per_in, k, per_out)), (0, 1, 3, 2)), w.shape)
        if b is None:
            return gx, gw
        return gx, gw, (xp.sum(g, axis=(0, *(a + 2 for a in spatial))) if need_b else None)

    return result, backward


def _planar(be, x, w, b, groups):
    """The backend's patch kernels where they serve this transposed convolution (one
    group, one or two spatial axes, one of their dtypes for every array), else ``None``."""
    fused = be.fused
    if fused.patches2d is None or groups != 1 or x.ndim not in (3, 4):
        return None
    if any(a is not None and a.dtype not in fused.row_dtypes or a is not None and a.dtype != x.dtype
           for a in (x, w, b)):
        return None
    return fused


class _Planar:
    """A transposed convolution with one or two spatial axes seen as two-dimensional
    (a unit axis after a single one: its rows are then the bands) and run through the
    backend's patch kernels: the forward's product one band of input rows at a time,
    each band's patches added into the output by ``scatter_add2d``; the backward's
    patches of the gradient by ``patches2d``, straight from its layout (no padded,
    transposed copy)."""

    def __init__(self, fused, size, kernel, stride, padding, dilation, n, channels):
        lift = (1,) * (2 - len(size))
        self.fused, self.n, self.channels = fused, n, channels
        self.size, self.kernel = tuple(size) + lift, tuple(kernel) + lift
        self.stride, self.dilation = tuple(stride) + lift, tuple(dilation) + lift
        self.padding = tuple(lo for lo, _ in padding) + (0,) * (2 - len(size))

    def forward(self, be, rows, w4, b, out_size):
        """The output ``(*out_size, N, 1, out)`` (bias included) from the input's rows ``(1, S * N, C)``."""
        xp, n, channels = be.xp, self.n, self.channels
        (first, rest), k = self.size, math.prod(self.kernel)
        wm = xp.reshape(xp.permute_dims(w4[0], (0, 2, 1)), (w4.shape[1], k * channels))  # (C, K * out)
        out = xp.empty(tuple(out_size) + (1,) * (2 - len(out_size)) + (n, channels), dtype=rows.dtype)
        out[...] = 0 if b is None else b
        band = max(1, min(first, (1 << 18) // max(1, rest * n * channels * k)))
        for start in range(0, first, band):
            stop = min(first, start + band)
            cols = rows[0, start * rest * n:stop * rest * n] @ wm
            cols = xp.reshape(cols, (stop - start, rest, n, *self.kernel, channels))
            self.fused.scatter_add2d(cols, start, self.stride, self.padding, self.dilation, out)
        return xp.reshape(out, (*out_size, n, 1, channels))

    def patches(self, g, start, stop):
        """The gradient's patches for the input rows ``start:stop``, ``(rows, width, N, *kernel, out)``."""
        g4 = g if g.ndim == 4 else g[:, :, :, None]
        return self.fused.patches2d(g4, start, (stop - start, self.size[1], *self.kernel),
                                    self.stride, self.padding, self.dilation)
