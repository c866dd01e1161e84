"""2-D pooling over the last two axes, as PyTorch's ``max_pool2d`` and ``avg_pool2d``.

Both loop over the kernel's offsets, never over output pixels: the windows' elements
at one offset are one strided slice of the padded input. The backward rules add the
gradient back through the same slices, with ``xp`` alone, so they differentiate again
(on Tensors the scatter is one ``fold`` node: ``be.col2im``, which lp.compile records,
where adding into views of a buffer in place it would not).
The callers (``leanpass.nn.pooling``) check the arguments and give the output size.
"""

from __future__ import annotations

import math

from ._op import op
from .conv import _slices


def _extent(size, kernel, stride, dilation, out, padding):
    """The padded length along one axis: the input with its padding on both sides,
    longer where ``ceil_mode``'s last window reaches past it."""
    return max(size + 2 * padding, (out - 1) * stride + (kernel - 1) * dilation + 1)


def _keys(kernel, stride, dilation, out):
    """One slicing key per kernel offset, in row-major order: the offset's element
    of every window (:func:`leanpass.ops.conv._slices` over the last two axes)."""
    return [(..., *key[2:]) for key in _slices(kernel, stride, dilation, out)]


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


def _scatter(be, g_parts, keys, shape, dtype, inner, windows):
    """The sum of the parts, each added into a zero buffer of ``shape`` at its key,
    cropped to ``inner``. ``windows``: the ``(kernel, stride, dilation)`` the keys
    come from, for a backend that scatters patches as one operation (``be.col2im``:
    on Tensors, a second derivative)."""
    if be.col2im is not None:
        xp = be.xp
        parts = xp.stack(list(g_parts), axis=-3)  # (..., K, out_h, out_w)
        rows, cols = inner[-2], inner[-1]  # the input inside the buffer: the rest is padding
        padding = ((rows.start, shape[-2] - rows.stop), (cols.start, shape[-1] - cols.stop))
        lead = tuple(shape[:-2])
        patches = xp.reshape(parts, (1, math.prod(lead)) + tuple(parts.shape[-3:]))
        grad = be.col2im(patches, (rows.stop - rows.start, cols.stop - cols.start), *windows, padding)
        return xp.reshape(grad, lead + tuple(grad.shape[-2:]))
    buf = be.zeros(shape, dtype)
    for part, key in zip(g_parts, keys):
        buf[key] += part
    return buf[inner]


def _inside(be, padding, size, extent):
    """The bool mask over the padded buffer's last two axes of where the input is:
    one vector per axis, combined."""
    xp = be.xp
    axes = []
    for p, n, e in zip(padding, size, extent):
        i = be.arange(e, xp.int64)
        axes.append((i >= p) & (i < p + n))
    return xp.reshape(axes[0], (-1, 1)) & axes[1]


def _windows(be, a, kernel, stride, padding, dilation, out):
    """``a`` padded with its dtype's smallest value, the keys of the windows'
    elements in it, the key of ``a`` in it and the mask of where ``a`` is in it
    (``None`` without padding)."""
    xp = be.xp
    size = a.shape[-2:]
    extent = tuple(_extent(n, k, s, d, o, p) for n, k, s, d, o, p in zip(size, kernel, stride, dilation, out, padding))
    fill = -float("inf") if xp.isdtype(a.dtype, "real floating") else xp.iinfo(a.dtype).min
    buf, inner = _padded(be, a, padding, extent, fill)
    inside = None if buf is a else _inside(be, padding, size, extent)
    return buf, _keys(kernel, stride, dilation, out), inner, inside


def _winners(be, buf, best, keys, inside):
    """Per kernel offset, the bool mask of the windows whose maximum ``best`` it
    holds: the first maximum in row-major order, but the last NaN of a window with
    NaNs (a NaN counts as larger, as PyTorch's); padding never wins, even against
    an input of -inf. ``free``: the windows no offset has won yet."""
    xp = be.xp
    hits, free = [], None
    for key in keys:
        hit = buf[key] == best
        if inside is not None:
            hit = hit & inside[key[1:]]
        if free is None:
            free = ~hit
        else:
            hit = hit & free
            free = free ^ hit
        hits.append(hit)
    floating = xp.isdtype(best.dtype, "real floating")
    if floating and (not be.syncs_cheaply or bool(xp.any(xp.isnan(best)))):  # windows with a NaN are still free
        for k in reversed(range(len(keys))):
            nan = xp.isnan(buf[keys[k]]) & free
            free = free ^ nan
            hits[k] = hits[k] | nan
    return hits


def _maxima(be, buf, keys):
    """The windows' maxima: a chain of ``maximum`` over the kernel offsets (NaN where a
    window holds one)."""
    xp = be.xp
    if len(keys) == 1:
        return be.copy(buf[keys[0]])
    best = xp.maximum(buf[keys[0]], buf[keys[1]])
    for key in keys[2:]:
        best = xp.maximum(best, buf[key])
    return best


@op("max_pool2d", saves=(0,), saves_out=False, needs=True)
def max_pool2d(be, a, kernel, stride, padding, dilation, out, needs=(True,)):
    """The maximum of each window over the last two axes (padding never wins); the
    gradient of a window goes to its first maximum in row-major order, summed where
    windows overlap, as PyTorch's. The forward is a running maximum alone; the
    backward finds the winners (:func:`_winners`) against a copy of the output. Over
    2 x 2 windows at stride 2 without padding (``MaxPool2d(2)``) the backend's kernels
    may do both in one pass each: where the gradient is needed, the forward keeps each
    window's winner and the backward reads those alone; else (or where the output holds
    a NaN) the backward finds the maxima again from the input."""
    xp = be.xp
    buf, keys, inner, inside = _windows(be, a, kernel, stride, padding, dilation, out)
    fused = be.fused
    two = buf is a and tuple(kernel) == tuple(stride) == (2, 2) and tuple(dilation) == (1, 1)
    best = winners = None
    if two and needs[0] and fused.max_pool_2x2_winners is not None and fused.max_pool_2x2_scatter is not None:
        found = fused.max_pool_2x2_winners(a)
        if found is not None:
            best, winners = found
    if best is None and two and fused.max_pool_2x2 is not None:
        best = fused.max_pool_2x2(a)
    if best is None:
        best = _maxima(be, buf, keys)
    kernel_back = fused.max_pool_2x2_backward if two else None
    # the output may be changed in place (the input may not: saves=(0,)), so the generic
    # backward reads a copy of it; the kernel needs none
    saved = be.copy(best) if kernel_back is None else None
    shape, dtype = buf.shape, a.dtype
    disjoint = all((k - 1) * d < s for k, d, s in zip(kernel, dilation, stride))
    tiled = disjoint and all(k == s and d == 1 and n == o * s
                             for k, s, d, n, o in zip(kernel, stride, dilation, shape[-2:], out))

    def backward(g):
        if winners is not None:  # one pass over the winners and g, the same values
            grad = fused.max_pool_2x2_scatter(winners, g, shape)
            if grad is not None:
                return (grad,)
        if kernel_back is not None:  # one pass, the same values
            grad = kernel_back(a, g)
            if grad is not None:
                return (grad,)
        maxima = saved if saved is not None else _maxima(be, buf, keys)  # (the kernel declined)
        parts = (g * xp.astype(hit, g.dtype) for hit in _winners(be, buf, maxima, keys, inside))
        if not disjoint:
            return (_scatter(be, parts, keys, shape, dtype, inner, (kernel, stride, dilation)),)
        grad = be.create("empty", shape, dtype=dtype) if tiled else be.zeros(shape, dtype)
        for part, key in zip(parts, keys):  # each input element is in one window at most
            grad[key] = part
        return (grad[inner],)

    return best, backward


@op("max_pool2d_indices", differentiable=False)
def max_pool2d_indices(be, a, best, kernel, stride, padding, dilation, out):
    """Where each window's maximum is (as :func:`max_pool2d` picks it): its flat
    index into the input's last two axes, as PyTorch's ``return_indices=True``.
    ``best``: :func:`max_pool2d`'s output for ``a``, the maxima not found again."""
    xp = be.xp
    buf, keys, _, inside = _windows(be, a, kernel, stride, padding, dilation, out)
    index = be.zeros(best.shape, xp.int64)
    for k, hit in enumerate(_winners(be, buf, best, keys, inside)):
        if k:
            index = index + xp.astype(hit, xp.int64) * k
    kw = kernel[1]
    rows = xp.reshape(be.arange(out[0], xp.int64) * stride[0] - padding[0], (-1, 1)) + (index // kw) * dilation[0]
    cols = be.arange(out[1], xp.int64) * stride[1] - padding[1] + (index % kw) * dilation[1]
    return rows * a.shape[-1] + cols, None


def _avg_scale(be, size, kernel, stride, padding, out, count_include_pad, divisor_override, dtype):
    """``1 / divisor`` per output pixel, as PyTorch's ``avg_pool2d`` counts: the
    window clipped to the padded input with ``count_include_pad``, to the input
    without (a window always holds one input element at least: the callers' checks);
    ``divisor_override`` replaces both. The count is the product of the window's
    extents along the two axes: one vector per axis, their outer product."""
    if divisor_override is not None:
        return 1.0 / divisor_override
    counts = []
    for n, k, s, p, o in zip(size, kernel, stride, padding, out):
        starts = [i * s - p for i in range(o)]
        ends = [min(start + k, n + p) for start in starts]
        if not count_include_pad:
            starts, ends = [max(start, 0) for start in starts], [min(end, n) for end in ends]
        counts.append(be.create("asarray", [end - start for start, end in zip(starts, ends)], dtype=dtype))
    return 1.0 / (be.xp.reshape(counts[0], (-1, 1)) * counts[1])


@op("avg_pool2d", saves=(), saves_out=False, complex="holomorphic")
def avg_pool2d(be, a, kernel, stride, padding, out, count_include_pad, divisor_override):
    """The mean of each window over the last two axes, with PyTorch's divisors
    (``count_include_pad``, ``divisor_override``, ``ceil_mode``'s clipped windows)."""
    size = a.shape[-2:]
    extent = tuple(_extent(n, k, s, 1, o, p) for n, k, s, o, p in zip(size, kernel, stride, out, padding))
    buf, inner = _padded(be, a, padding, extent, 0.0)
    keys = _keys(kernel, stride, (1, 1), out)
    scale = _avg_scale(be, size, kernel, stride, padding, out, count_include_pad, divisor_override, a.dtype)
    total = None
    for key in keys:
        total = buf[key] if total is None else total + buf[key]
    shape, dtype = buf.shape, a.dtype

    def backward(g):
        part = g * scale
        return (_scatter(be, (part for _ in keys), keys, shape, dtype, inner, (kernel, stride, (1, 1))),)

    return total * scale, backward
