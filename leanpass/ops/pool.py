"""2-D pooling over the last two axes, as PyTorch's ``max_pool2d`` and ``avg_pool2d``.

Both loop over the kernel's offsets, never over output pixels: the windows' elements
at one offset are one strided slice of the padded input. The backward rules add the
gradient back through the same slices, with ``xp`` alone, so they differentiate again.
The callers (``leanpass.nn.pooling``) check the arguments and give the output size.
"""

from __future__ import annotations

from ._op import op


def _extent(size, kernel, stride, dilation, out, padding):
    """The padded length along one axis: the input with its padding on both sides,
    longer where ``ceil_mode``'s last window reaches past it."""
    return max(size + 2 * padding, (out - 1) * stride + (kernel - 1) * dilation + 1)


def _keys(kernel, stride, dilation, out):
    """One slicing key per kernel offset, in row-major order: the offset's element
    of every window."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out
    return [(..., slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))
            for i in range(kh) for j in range(kw)]


def _padded(be, a, padding, extent, fill):
    """``a`` inside a buffer of ``extent`` over its last two axes filled with ``fill``
    (``a`` itself without padding); also the key of ``a`` in the buffer."""
    (ph, pw), (h, w) = padding, a.shape[-2:]
    inner = (..., slice(ph, ph + h), slice(pw, pw + w))
    if extent == (h, w):
        return a, inner
    buf = be.create("full", tuple(a.shape[:-2]) + extent, fill, dtype=a.dtype)
    buf[inner] = a
    return buf, inner


def _scatter(be, g_parts, keys, shape, dtype, inner):
    """The sum of the parts, each added into a zero buffer of ``shape`` at its key,
    cropped to ``inner``."""
    buf = be.zeros(shape, dtype)
    for part, key in zip(g_parts, keys):
        buf[key] = buf[key] + part
    return buf[inner]


def _window_max(be, a, kernel, stride, padding, dilation, out):
    """The windows' maxima and, per window, the offset of its first maximum in
    row-major order (a NaN counts as larger, the last one winning, as PyTorch's)."""
    xp = be.xp
    size = a.shape[-2:]
    extent = tuple(_extent(n, k, s, d, o, p) for n, k, s, d, o, p in zip(size, kernel, stride, dilation, out, padding))
    floating = xp.isdtype(a.dtype, "real floating")
    fill = -float("inf") if floating else xp.iinfo(a.dtype).min
    buf, inner = _padded(be, a, padding, extent, fill)
    keys = _keys(kernel, stride, dilation, out)
    inside = None
    if buf is not a:  # padding never wins, even against an input of -inf
        rows = [padding[0] <= r < padding[0] + size[0] for r in range(extent[0])]
        cols = [padding[1] <= c < padding[1] + size[1] for c in range(extent[1])]
        inside = be.create("asarray", [[r and c for c in cols] for r in rows], dtype=xp.bool)
    best = index = padded_best = None
    for k, key in enumerate(keys):
        v = buf[key]
        if best is None:
            best, index = v, be.zeros(v.shape, xp.int32)
            if inside is not None:
                padded_best = ~inside[key[1:]]
            continue
        better = v > best
        if floating:
            better = better | xp.isnan(v)
        if inside is not None:
            better = better | (padded_best & inside[key[1:]])
            padded_best = padded_best & ~better
        best = xp.where(better, v, best)
        index = xp.where(better, k, index)
    return best, index, keys, buf.shape, inner


@op("max_pool2d", saves=(), saves_out=False)
def max_pool2d(be, a, kernel, stride, padding, dilation, out):
    """The maximum of each window over the last two axes (padding never wins); the
    gradient of a window goes to its first maximum in row-major order, summed where
    windows overlap, as PyTorch's."""
    xp = be.xp
    best, index, keys, shape, inner = _window_max(be, a, kernel, stride, padding, dilation, out)
    dtype = a.dtype

    def backward(g):
        parts = (g * xp.astype(index == k, g.dtype) for k in range(len(keys)))
        return (_scatter(be, parts, keys, shape, dtype, inner),)

    return best, backward


@op("max_pool2d_indices", differentiable=False)
def max_pool2d_indices(be, a, kernel, stride, padding, dilation, out):
    """Where each window's maximum is (as :func:`max_pool2d` picks it): its flat
    index into the input's last two axes, as PyTorch's ``return_indices=True``."""
    xp = be.xp
    _, index, _, _, _ = _window_max(be, a, kernel, stride, padding, dilation, out)
    index = xp.astype(index, xp.int64)
    kw = kernel[1]
    rows = xp.reshape(be.arange(out[0], xp.int64) * stride[0] - padding[0], (-1, 1)) + (index // kw) * dilation[0]
    cols = be.arange(out[1], xp.int64) * stride[1] - padding[1] + (index % kw) * dilation[1]
    return rows * a.shape[-1] + cols, None


def _avg_scale(size, kernel, stride, padding, out, count_include_pad, divisor_override):
    """``1 / divisor`` per output pixel (0 for a window wholly in the padding), as
    PyTorch's ``avg_pool2d`` counts: the window clipped to the padded input with
    ``count_include_pad``, to the input without; ``divisor_override`` replaces both."""
    if divisor_override is not None:
        return [[1.0 / divisor_override] * out[1] for _ in range(out[0])]
    counts = []
    for n, k, s, p, o in zip(size, kernel, stride, padding, out):
        axis = []
        for i in range(o):
            start = i * s - p
            end = min(start + k, n + p)
            axis.append((end - start, min(end, n) - max(start, 0)))
        counts.append(axis)
    scale = []
    for padded_h, real_h in counts[0]:
        row = []
        for padded_w, real_w in counts[1]:
            if real_h <= 0 or real_w <= 0:
                row.append(0.0)
            else:
                row.append(1.0 / (padded_h * padded_w if count_include_pad else real_h * real_w))
        scale.append(row)
    return scale


@op("avg_pool2d", saves=(), saves_out=False)
def avg_pool2d(be, a, kernel, stride, padding, out, count_include_pad, divisor_override):
    """The mean of each window over the last two axes, with PyTorch's divisors
    (``count_include_pad``, ``divisor_override``, ``ceil_mode``'s clipped windows)."""
    size = a.shape[-2:]
    extent = tuple(_extent(n, k, s, 1, o, p) for n, k, s, o, p in zip(size, kernel, stride, out, padding))
    buf, inner = _padded(be, a, padding, extent, 0.0)
    keys = _keys(kernel, stride, (1, 1), out)
    scale = be.create(
        "asarray", _avg_scale(size, kernel, stride, padding, out, count_include_pad, divisor_override), dtype=a.dtype
    )
    total = None
    for key in keys:
        total = buf[key] if total is None else total + buf[key]
    shape, dtype = buf.shape, a.dtype

    def backward(g):
        part = g * scale
        return (_scatter(be, (part for _ in keys), keys, shape, dtype, inner),)

    return total * scale, backward
