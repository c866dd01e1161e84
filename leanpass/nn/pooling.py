"""Pooling layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d`` and their function
forms, as PyTorch's, over inputs ``(N, C, H, W)`` or unbatched ``(C, H, W)``."""

from __future__ import annotations

import numbers

from .. import ops
from .._namespace import asarray
from ..tensor import Tensor, apply
from .conv import _ints
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]


def _check_tensor(x, op: str, floating: bool) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor as input, got {type(x).__name__}; wrap it with leanpass.Tensor(...)")
    if x.ndim not in (3, 4) or 0 in x.shape[-3:]:
        raise ValueError(f"{op}: expected an input of shape (N, C, H, W) or (C, H, W) with non-zero C, H, W, "
                         f"got shape {x.shape}")
    kind = x.dtype.kind
    if kind not in ("f" if floating else "fiu"):
        wanted = "a floating-point" if floating else "a real (integer or floating-point)"
        raise TypeError(f"{op}: expected {wanted} input, got dtype {x.dtype}")


def _out_size(size, kernel, stride, padding, dilation, ceil_mode) -> int:
    """PyTorch's ``pooling_output_shape``: with ``ceil_mode`` the last window must
    start inside the input or its left padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _geometry(x, op, kernel_size, stride, padding, dilation, ceil_mode):
    """The checked ``(kernel, stride, padding, dilation, out)`` pairs of a pooling of
    ``x``; ``dilation`` ``None`` (avg_pool2d's) is 1, left out of the messages."""
    kernel = _ints(kernel_size, 2, "kernel_size", op, 1)
    empty = stride is None or isinstance(stride, (tuple, list)) and not stride  # torch's default is []
    stride = kernel if empty else _ints(stride, 2, "stride", op, 1)
    padding = _ints(padding, 2, "padding", op, 0)
    dilated = dilation is not None
    dilation = _ints(dilation, 2, "dilation", op, 1) if dilated else (1, 1)
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ValueError(f"{op}: padding {padding} must be at most half of kernel_size {kernel} "
                         f"(input of shape {x.shape})")
    out = tuple(_out_size(n, k, s, p, d, ceil_mode)
                for n, k, s, p, d in zip(x.shape[-2:], kernel, stride, padding, dilation))
    if min(out) < 1:
        with_dilation = f" with dilation {dilation}" if dilated else ""
        raise ValueError(f"{op}: kernel_size {kernel}{with_dilation} is larger than the input of shape {x.shape} "
                         f"padded by {padding} (output size {out})")
    return kernel, stride, padding, dilation, out


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False, *, _op: str = "max_pool2d"):
    """The maximum of each ``kernel_size`` window over the last two axes, as
    ``torch.nn.functional.max_pool2d``: ``stride`` defaults to ``kernel_size``; the
    implicit ``padding`` never wins. The gradient of a window goes to its first
    maximum in row-major order (summed where windows overlap). With
    ``return_indices`` also the int64 flat indices of the maxima into ``H * W``."""
    _check_tensor(input, _op, floating=False)
    kernel, stride, padding, dilation, out = _geometry(input, _op, kernel_size, stride, padding, dilation,
                                                       bool(ceil_mode))
    geometry = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "out": out}
    result = apply(ops.max_pool2d, input, **geometry)
    if return_indices:
        return result, apply(ops.max_pool2d_indices, input, result, **geometry)
    return result


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None, *, _op: str = "avg_pool2d") -> Tensor:
    """The mean of each ``kernel_size`` window over the last two axes, as
    ``torch.nn.functional.avg_pool2d``: the zero ``padding`` counts in the divisor
    with ``count_include_pad``; ``divisor_override`` (a non-zero int) replaces it."""
    _check_tensor(input, _op, floating=True)
    if divisor_override is not None:
        if not isinstance(divisor_override, numbers.Integral) or isinstance(divisor_override, bool):
            raise TypeError(f"{_op}: divisor_override must be an int or None, got {divisor_override!r}")
        if divisor_override == 0:
            raise ValueError(f"{_op}: divisor_override must be a non-zero int or None, got {divisor_override!r}")
        divisor_override = int(divisor_override)
    kernel, stride, padding, _, out = _geometry(input, _op, kernel_size, stride, padding, None, bool(ceil_mode))
    return apply(ops.avg_pool2d, input, kernel=kernel, stride=stride, padding=padding, out=out,
                 count_include_pad=bool(count_include_pad), divisor_override=divisor_override)


def _adaptive_size(output_size, x, op: str) -> tuple:
    """``output_size`` (an int, ``None`` or a pair of them) as a pair of ints, ``None``
    the input's size; checked as :func:`leanpass.nn.conv._ints` checks its ints."""
    pair = output_size
    if output_size is None or isinstance(output_size, numbers.Integral):
        pair = (output_size, output_size)
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(v is None or isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair)):
        raise TypeError(f"{op}: output_size must be an int, None or a tuple of 2 of them, got {output_size!r}")
    if any(v is not None and v < 1 for v in pair):
        raise ValueError(f"{op}: output_size must be positive, got {output_size!r}")
    return tuple(n if v is None else int(v) for v, n in zip(pair, x.shape[-2:]))


# Bins of at most this many elements that tile the plane are avg_pool2d's windows, one
# strided slice added per element of a bin; larger ones are a mean along each axis
# (NumPy's mean over a short axis is slow: W5c's (64, 64, 14, 14) float32 into 7 x 7
# bins took 8.5 ms forward and backward as means, 3.4 as windows; into 2 x 2 bins of
# 7 x 7, 3.1 as means and 6.7 as windows). One bin per plane is one mean over the plane
# (3.1 -> 0.9 ms).
_FEW = 16


def _adaptive_axis(x: Tensor, axis: int, size: int) -> Tensor:
    """``x`` averaged into ``size`` bins along ``axis`` (-2 or -1), PyTorch's bins
    ``[floor(i n / size), ceil((i + 1) n / size))``: a reshape and a mean where they
    tile the axis, else a product with the bins' averaging matrix."""
    n = x.shape[axis]
    if n == size:
        return x
    if n % size == 0:
        shape = x.shape[:axis] + (size, n // size) + x.shape[axis:][1:]
        return x.reshape(shape).mean(axis=axis)
    weights = [[0.0] * n for _ in range(size)]
    for i in range(size):
        start, end = (i * n) // size, -((-(i + 1) * n) // size)
        weights[i][start:end] = [1.0 / (end - start)] * (end - start)
    matrix = asarray(weights, dtype=x.dtype, device=x.device)
    return matrix @ x if axis == -2 else x @ matrix.mT


def adaptive_avg_pool2d(input: Tensor, output_size, *, _op: str = "adaptive_avg_pool2d") -> Tensor:  # noqa: A002
    """The input averaged into an ``output_size`` grid over its last two axes, as
    ``torch.nn.functional.adaptive_avg_pool2d``: bin ``i`` of an axis of length ``n``
    covers ``[floor(i n / out), ceil((i + 1) n / out))``; ``None`` keeps that size."""
    _check_tensor(input, _op, floating=True)
    oh, ow = _adaptive_size(output_size, input, _op)
    h, w = input.shape[-2:]
    if (oh, ow) == (h, w):  # bins of one element: a new tensor, as PyTorch's (never the input itself)
        return input.clone()
    if (oh, ow) == (1, 1):  # global average pooling (a CNN's head): one mean over each plane
        return input.mean(axis=(-2, -1), keepdims=True)
    if h % oh == 0 and w % ow == 0 and (h // oh) * (w // ow) <= _FEW:  # small bins that tile: windows
        return avg_pool2d(input, (h // oh, w // ow), _op=_op)
    return _adaptive_axis(_adaptive_axis(input, -2, oh), -1, ow)


class MaxPool2d(Module):
    """:func:`max_pool2d` as a layer (no parameters), as ``torch.nn.MaxPool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.return_indices = bool(return_indices)
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x):
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                          self.return_indices, _op="MaxPool2d")

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """:func:`avg_pool2d` as a layer (no parameters), as ``torch.nn.AvgPool2d``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    def forward(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                          self.divisor_override, _op="AvgPool2d")

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """:func:`adaptive_avg_pool2d` as a layer (no parameters), as ``torch.nn.AdaptiveAvgPool2d``."""

    def __init__(self, output_size):
        self.output_size = output_size

    def forward(self, x):
        return adaptive_avg_pool2d(x, self.output_size, _op="AdaptiveAvgPool2d")

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
