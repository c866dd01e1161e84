"""Convolutions: ``Conv1d``, ``Conv2d`` and their functions ``conv1d``, ``conv2d``,
as PyTorch's (same arguments, same weight layout ``(out, in / groups, *kernel)``), and
the transposed ones, ``ConvTranspose1d``, ``ConvTranspose2d``, ``conv_transpose1d``,
``conv_transpose2d`` (weight ``(in, out / groups, *kernel)``)."""

from __future__ import annotations

import math
import numbers

from .. import ops
from .._namespace import broadcast_to, concat, flip
from ..backends import get_backend
from ..tensor import Tensor, apply
from .layers import _check_input, _parameter_dtype
from .module import Module, Parameter

__all__ = ["Conv1d", "Conv2d", "conv1d", "conv2d", "unfold", "fold", "ConvTranspose1d", "ConvTranspose2d",
           "conv_transpose1d", "conv_transpose2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ints(value, dims: int, what: str, name: str, low: int) -> tuple:
    """``value`` (an int, or a tuple of ``dims`` ints) as a tuple of ``dims`` ints ``>= low``."""
    values = (value,) * dims if isinstance(value, numbers.Integral) else value
    if (not isinstance(values, (tuple, list)) or len(values) != dims
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values)):
        raise TypeError(f"{name}: {what} must be an int or a tuple of {dims} ints, got {value!r}")
    if any(v < low for v in values):
        raise ValueError(f"{name}: {what} must be {'positive' if low else 'non-negative'}, got {value!r}")
    return tuple(int(v) for v in values)


def _padding(padding, kernel, stride, dilation, name: str) -> tuple:
    """One ``(before, after)`` pair per spatial axis; ``"same"`` puts the odd one after, as PyTorch."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * len(kernel)
        if padding != "same":
            raise ValueError(f"{name}: padding {padding!r} must be 'valid', 'same', an int or a tuple of ints")
        if any(s != 1 for s in stride):
            raise ValueError(f"{name}: padding='same' is not supported for strided convolutions (stride {stride})")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in _ints(padding, len(kernel), "padding", name, 0))


def _part(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    return x[(slice(None),) * axis + (slice(start, stop), ...)]


def _pad(x: Tensor, padding, mode: str) -> Tensor:
    """``x`` ``(N, C, *S)`` padded by ``mode`` ("reflect", "replicate", "circular") with Tensor operations."""
    for axis, (lo, hi) in enumerate(padding, start=2):
        n = x.shape[axis]
        if mode == "circular":
            pieces = [_part(x, axis, n - lo, n), x, _part(x, axis, 0, hi)]
        elif mode == "reflect":
            pieces = [flip(_part(x, axis, 1, lo + 1), axis=axis), x,
                      flip(_part(x, axis, n - 1 - hi, n - 1), axis=axis)]
        else:  # replicate
            pieces = [broadcast_to(_part(x, axis, i, i + 1), x.shape[:axis] + (count,) + x.shape[axis + 1:])
                      for i, count in ((0, lo), (n - 1, hi))]
            pieces.insert(1, x)
        x = concat([p for p in pieces if p.shape[axis]], axis=axis)
    return x


def _init_parameters(layer, backend, shape, out_channels, bias, dtype) -> None:
    """``layer.weight`` of ``shape`` and ``layer.bias`` (``(out_channels,)``, if ``bias``),
    as PyTorch's convolutions initialise them: kaiming_uniform_(a=sqrt(5)), that is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with ``fan_in = prod(shape[1:])``, the bias too."""
    bound = 1.0 / math.sqrt(math.prod(shape[1:]))
    layer.weight = Parameter(backend.init_uniform(shape, -bound, bound, dtype), name="weight", device=backend.device)
    layer.bias = (Parameter(backend.init_uniform((out_channels,), -bound, bound, dtype), name="bias",
                            device=backend.device) if bias else None)


def _check_operands(x, weight, bias, groups, dims: int, name: str, layout: str) -> str:
    """The checks a convolution and a transposed one share: Tensors, the axes of the
    weight (``layout`` names them) and of the input, and ``groups``. Returns the shapes,
    as their other messages name them."""
    for value, what in ((x, "input"), (weight, "weight")) + (((bias, "bias"),) if bias is not None else ()):
        if not isinstance(value, Tensor):
            raise TypeError(f"{name}: expected a Tensor as {what}, got {type(value).__name__}")
    shapes = f"input of shape {x.shape}, weight of shape {weight.shape}"
    if weight.ndim != dims + 2:
        raise ValueError(f"{name}: weight must have {dims + 2} axes ({layout}); {shapes}")
    if x.ndim not in (dims + 1, dims + 2):
        raise ValueError(f"{name}: input must have {dims + 1} (unbatched) or {dims + 2} (batched) axes; {shapes}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{name}: groups must be a positive int, got {groups!r}")
    return shapes


def _conv(x, weight, bias, stride, padding, dilation, groups, dims: int, name: str, padding_mode="zeros"):
    """The checked convolution of ``x`` ``(N, C, *S)`` or ``(C, *S)`` with ``dims`` spatial axes."""
    shapes = _check_operands(x, weight, bias, groups, dims, name, "out, in / groups, *kernel")
    channels, kernel = weight.shape[0], weight.shape[2:]
    if channels % groups:
        raise ValueError(f"{name}: out channels {channels} are not divisible by groups {groups}; {shapes}")
    if x.shape[-dims - 1] != weight.shape[1] * groups:
        raise ValueError(f"{name}: input has {x.shape[-dims - 1]} channels, the weight expects "
                         f"{weight.shape[1] * groups} (in / groups {weight.shape[1]} times groups {groups}); {shapes}")
    if bias is not None and bias.shape != (channels,):
        raise ValueError(f"{name}: bias of shape {bias.shape} must be ({channels},); {shapes}")
    stride = _ints(stride, dims, "stride", name, 1)
    dilation = _ints(dilation, dims, "dilation", name, 1)
    pads = _padding(padding, kernel, stride, dilation, name)
    size = x.shape[-dims:]
    for n, k, d, (lo, hi) in zip(size, kernel, dilation, pads):
        if n + lo + hi < d * (k - 1) + 1:
            raise ValueError(f"{name}: the kernel (dilated: {d * (k - 1) + 1}) is larger than the padded input "
                             f"({n + lo + hi}); {shapes}, padding {padding!r}, dilation {dilation}")
        if padding_mode == "reflect" and max(lo, hi) >= n or padding_mode == "circular" and max(lo, hi) > n:
            raise ValueError(f"{name}: padding {padding!r} is too large for padding_mode {padding_mode!r} "
                             f"and an input of shape {x.shape}")
    batched = x.ndim == dims + 2
    if not batched:
        x = x.reshape((1, *x.shape))
    if padding_mode != "zeros":
        x, pads = _pad(x, pads, padding_mode), ((0, 0),) * dims
    inputs = (x, weight) if bias is None else (x, weight, bias)
    out = apply(ops.convolution, *inputs, stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    return out if batched else out.reshape(out.shape[1:])


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """``torch.nn.functional.conv1d``: ``x`` ``(N, C, L)`` or ``(C, L)``, ``weight``
    ``(out, C / groups, k)``; ``padding`` an int, a 1-tuple, ``"valid"`` or ``"same"``."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """``torch.nn.functional.conv2d``: ``x`` ``(N, C, H, W)`` or ``(C, H, W)``, ``weight``
    ``(out, C / groups, kH, kW)``; ``padding`` an int, a pair, ``"valid"`` or ``"same"``."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def _sliding(name: str, x, batched_ndim: int, kernel_size, dilation, padding, stride) -> tuple:
    """The checked arguments of :func:`unfold` and :func:`fold`: ``x`` must be a Tensor of
    ``batched_ndim`` or one fewer axes, no empty one but the batch; two ints per argument."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor as input, got {type(x).__name__}")
    if x.ndim not in (batched_ndim - 1, batched_ndim):
        raise ValueError(f"{name}: input must have {batched_ndim - 1} (unbatched) or {batched_ndim} (batched) "
                         f"axes, got shape {x.shape}")
    if not all(x.shape[x.ndim - batched_ndim + 1:]):
        raise ValueError(f"{name}: every axis of the input but the batch must be non-zero, got shape {x.shape}")
    kernel = _ints(kernel_size, 2, "kernel_size", name, 1)
    dilation = _ints(dilation, 2, "dilation", name, 1)
    pads = tuple((p, p) for p in _ints(padding, 2, "padding", name, 0))
    stride = _ints(stride, 2, "stride", name, 1)
    return kernel, dilation, pads, stride


def _blocks(name: str, size, kernel, dilation, pads, stride, what: str) -> tuple:
    """The number of sliding blocks along each axis of ``size`` (padded by ``pads``), at least one."""
    for n, k, d, (lo, hi) in zip(size, kernel, dilation, pads):
        if n + lo + hi < d * (k - 1) + 1:
            raise ValueError(f"{name}: the kernel {kernel} (dilation {dilation}) is larger than the padded {what} "
                             f"(size {tuple(size)}, padding {tuple(lo for lo, _ in pads)})")
    return tuple((n + lo + hi - d * (k - 1) - 1) // s + 1
                 for n, k, d, (lo, hi), s in zip(size, kernel, dilation, pads, stride))


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.unfold`` (im2col): the sliding ``kernel_size`` blocks of
    ``input`` ``(N, C, H, W)`` (or unbatched ``(C, H, W)``) as columns, ``(N, C * kH *
    kW, L)`` (or ``(C * kH * kW, L)``), ``L`` the number of blocks; zero ``padding`` on
    both sides of each axis. Each argument is an int or a pair. Its gradient is :func:`fold`."""
    kernel, dilation, pads, stride = _sliding("unfold", input, 4, kernel_size, dilation, padding, stride)
    _blocks("unfold", input.shape[-2:], kernel, dilation, pads, stride, "input")
    batched = input.ndim == 4
    x = input if batched else input.reshape((1, *input.shape))
    out = apply(ops.unfold, x, kernel=kernel, stride=stride, padding=pads, dilation=dilation)
    return out if batched else out.reshape(out.shape[1:])


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """``torch.nn.functional.fold`` (col2im), the adjoint of :func:`unfold`: columns
    ``(N, C * kH * kW, L)`` (or unbatched ``(C * kH * kW, L)``) summed back into ``(N, C,
    *output_size)`` (or ``(C, *output_size)``), where overlapping blocks add up. ``L``
    must be the number of blocks :func:`unfold` takes from that size."""
    kernel, dilation, pads, stride = _sliding("fold", input, 3, kernel_size, dilation, padding, stride)
    size = _ints(output_size, 2, "output_size", "fold", 1)
    rows, length = input.shape[-2:]
    if rows % math.prod(kernel):
        raise ValueError(f"fold: the input's axis -2 ({rows}, shape {input.shape}) must be divisible by the "
                         f"product of kernel_size {kernel}")
    blocks = _blocks("fold", size, kernel, dilation, pads, stride, "output")
    if length != math.prod(blocks):
        raise ValueError(f"fold: output_size {size}, kernel_size {kernel}, dilation {dilation}, padding "
                         f"{tuple(lo for lo, _ in pads)} and stride {stride} make {blocks[0]} * {blocks[1]} = "
                         f"{math.prod(blocks)} blocks, but the input (shape {input.shape}) has {length}")
    batched = input.ndim == 3
    cols = input if batched else input.reshape((1, *input.shape))
    out = apply(ops.fold, cols, size=size, kernel=kernel, stride=stride, padding=pads, dilation=dilation)
    return out if batched else out.reshape(out.shape[1:])


class _ConvNd(Module):
    """A convolution layer with ``dims`` spatial axes (see :class:`Conv2d`)."""

    dims = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", *, device=None, dtype=None):
        name, dims = type(self).__name__, self.dims
        sizes = (in_channels, out_channels, groups)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in sizes):
            raise ValueError(f"{name}: in_channels, out_channels and groups must be positive ints, got {sizes}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must both be "
                             f"divisible by groups {groups}")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{name}: padding_mode {padding_mode!r} must be one of {_PADDING_MODES}")
        kernel = _ints(kernel_size, dims, "kernel_size", name, 1)
        self.stride = _ints(stride, dims, "stride", name, 1)
        self.dilation = _ints(dilation, dims, "dilation", name, 1)
        _padding(padding, kernel, self.stride, self.dilation, name)  # checked here, applied per input
        dtype = _parameter_dtype(dtype, name)
        backend = get_backend(device)
        self.in_channels, self.out_channels, self.kernel_size = int(in_channels), int(out_channels), kernel
        self.padding = padding if isinstance(padding, str) else _ints(padding, dims, "padding", name, 0)
        self.groups = int(groups)
        self.padding_mode = padding_mode
        _init_parameters(self, backend, (out_channels, in_channels // groups, *kernel), out_channels, bias, dtype)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self)
        return _conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.dims,
                     type(self).__name__, self.padding_mode)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
             f"padding={self.padding!r}")
        if self.dilation != (1,) * self.dims:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s


class Conv1d(_ConvNd):
    """``torch.nn.Conv1d``: input ``(N, C, L)`` or ``(C, L)``, ``weight`` ``(out, in /
    groups, k)`` and ``bias`` ``(out,)`` drawn from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
    (``fan_in = in / groups * k``) on the host, as PyTorch's default initialisation."""

    dims = 1


class Conv2d(_ConvNd):
    """``torch.nn.Conv2d``: input ``(N, C, H, W)`` or ``(C, H, W)``, ``weight`` ``(out,
    in / groups, kH, kW)`` (PyTorch's layout: ``state_dict(layout="torch")`` needs no
    transpose) and ``bias`` ``(out,)``, both drawn from ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))`` (``fan_in = in / groups * kH * kW``) on the host, as PyTorch's
    default initialisation. ``padding``: an int, a pair, ``"valid"`` or ``"same"``
    (stride 1); ``padding_mode``: ``"zeros"``, ``"reflect"``, ``"replicate"`` or ``"circular"``."""

    dims = 2


# ---- transposed convolutions --------------------------------------------------------------------


def _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, dims: int, name: str):
    """The checked transposed convolution of ``x`` ``(N, C, *S)`` or ``(C, *S)`` with
    ``dims`` spatial axes and the weight ``(C, out / groups, *kernel)``."""
    shapes = _check_operands(x, weight, bias, groups, dims, name, "in, out / groups, *kernel")
    channels, kernel = weight.shape[0], weight.shape[2:]
    if x.shape[-dims - 1] != channels:
        raise ValueError(f"{name}: input has {x.shape[-dims - 1]} channels, the weight expects {channels} (its "
                         f"axis 0); {shapes}")
    if channels % groups:
        raise ValueError(f"{name}: in channels {channels} are not divisible by groups {groups}; {shapes}")
    out_channels = weight.shape[1] * groups
    if bias is not None and bias.shape != (out_channels,):
        raise ValueError(f"{name}: bias of shape {bias.shape} must be ({out_channels},) (weight.shape[1] times "
                         f"groups {groups}); {shapes}")
    if isinstance(padding, str):
        raise ValueError(f"{name}: padding must be an int or a tuple of {dims} ints, got {padding!r} (transposed "
                         "convolutions take no 'same' or 'valid')")
    stride = _ints(stride, dims, "stride", name, 1)
    dilation = _ints(dilation, dims, "dilation", name, 1)
    pads = _ints(padding, dims, "padding", name, 0)
    extra = _ints(output_padding, dims, "output_padding", name, 0)
    for e, s, d in zip(extra, stride, dilation):
        if e >= s and e >= d:
            raise ValueError(f"{name}: output_padding {extra} must be smaller than either stride {stride} or "
                             f"dilation {dilation}")
    size = x.shape[-dims:]
    out_size = tuple((n - 1) * s - 2 * p + d * (k - 1) + 1 + e
                     for n, s, p, d, k, e in zip(size, stride, pads, dilation, kernel, extra))
    if not all(n > 0 for n in size) or not all(n > 0 for n in out_size):
        raise ValueError(f"{name}: the output size {out_size} (from {shapes}, stride {stride}, padding {pads}, "
                         f"dilation {dilation}, output_padding {extra}) must be positive, and so must the input's "
                         "spatial axes")
    batched = x.ndim == dims + 2
    if not batched:
        x = x.reshape((1, *x.shape))
    inputs = (x, weight) if bias is None else (x, weight, bias)
    out = apply(ops.conv_transpose, *inputs, stride=stride, padding=tuple((p, p) for p in pads),
                output_padding=extra, dilation=dilation, groups=int(groups))
    return out if batched else out.reshape(out.shape[1:])


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """``torch.nn.functional.conv_transpose1d``: ``x`` ``(N, C, L)`` or ``(C, L)``,
    ``weight`` ``(C, out / groups, k)``; the output has length ``(L - 1) * stride - 2 *
    padding + dilation * (k - 1) + output_padding + 1``."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """``torch.nn.functional.conv_transpose2d``: ``x`` ``(N, C, H, W)`` or ``(C, H, W)``,
    ``weight`` ``(C, out / groups, kH, kW)``: the gradient of :func:`conv2d` with respect
    to its input, for the same ``stride``, ``padding``, ``dilation`` and ``groups``;
    ``output_padding`` adds entries after the last of each axis (it tells apart the
    input sizes a strided convolution maps to one output size)."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")


class _ConvTransposeNd(Module):
    """A transposed convolution layer with ``dims`` spatial axes (see :class:`ConvTranspose2d`)."""

    dims = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", *, device=None,
                 dtype=None):
        name, dims = type(self).__name__, self.dims
        sizes = (in_channels, out_channels, groups)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in sizes):
            raise ValueError(f"{name}: in_channels, out_channels and groups must be positive ints, got {sizes}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must both be "
                             f"divisible by groups {groups}")
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode 'zeros' is supported, got {padding_mode!r}")
        if isinstance(padding, str):
            raise ValueError(f"{name}: padding must be an int or a tuple of {dims} ints, got {padding!r}")
        kernel = _ints(kernel_size, dims, "kernel_size", name, 1)
        self.stride = _ints(stride, dims, "stride", name, 1)
        self.padding = _ints(padding, dims, "padding", name, 0)
        self.dilation = _ints(dilation, dims, "dilation", name, 1)
        self.output_padding = _ints(output_padding, dims, "output_padding", name, 0)
        for e, s, d in zip(self.output_padding, self.stride, self.dilation):
            if e >= s and e >= d:
                raise ValueError(f"{name}: output_padding {self.output_padding} must be smaller than either stride "
                                 f"{self.stride} or dilation {self.dilation}")
        dtype = _parameter_dtype(dtype, name)
        backend = get_backend(device)
        self.in_channels, self.out_channels, self.kernel_size = int(in_channels), int(out_channels), kernel
        self.groups = int(groups)
        self.padding_mode = padding_mode
        # PyTorch's fan_in of this weight is out / groups * prod(kernel): its axis 1 and the kernel
        _init_parameters(self, backend, (in_channels, out_channels // groups, *kernel), out_channels, bias, dtype)

    def _output_padding(self, x: Tensor, output_size) -> tuple:
        """``output_padding``, or the one that gives ``output_size`` (PyTorch's rule: the
        spatial sizes, optionally after the batch and channel sizes)."""
        if output_size is None:
            return self.output_padding
        name, dims = type(self).__name__, self.dims
        size = tuple(output_size) if isinstance(output_size, (tuple, list)) else output_size
        if not isinstance(size, tuple) or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                  for v in size):
            raise TypeError(f"{name}: output_size must be a tuple of ints, got {output_size!r}")
        lead = x.ndim - dims
        if len(size) == lead + dims:
            size = size[lead:]
        if len(size) != dims:
            raise ValueError(f"{name}: for {x.ndim}-D input, output_size must have {dims} or {lead + dims} "
                             f"elements, got {output_size!r}")
        low = tuple((n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in
                    zip(x.shape[-dims:], self.stride, self.padding, self.dilation, self.kernel_size))
        high = tuple(m + s - 1 for m, s in zip(low, self.stride))
        if any(not lo <= v <= hi for v, lo, hi in zip(size, low, high)):
            raise ValueError(f"{name}: requested an output size of {size}, but valid sizes range from {low} to "
                             f"{high} (for an input of {x.shape[-dims:]})")
        return tuple(int(v) - lo for v, lo in zip(size, low))

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        _check_input(x, self)
        name = type(self).__name__
        if x.ndim not in (self.dims + 1, self.dims + 2):
            raise ValueError(f"{name}: input must have {self.dims + 1} (unbatched) or {self.dims + 2} (batched) "
                             f"axes, got shape {x.shape}")
        return _conv_transpose(x, self.weight, self.bias, self.stride, self.padding,
                               self._output_padding(x, output_size), self.groups, self.dilation, self.dims, name)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self.dims:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self.dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose1d(_ConvTransposeNd):
    """``torch.nn.ConvTranspose1d``: input ``(N, C, L)`` or ``(C, L)``, ``weight`` ``(in,
    out / groups, k)`` and ``bias`` ``(out,)`` drawn from ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))`` (``fan_in = out / groups * k``, PyTorch's for this layout);
    ``forward(input, output_size=None)``."""

    dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """``torch.nn.ConvTranspose2d``: the gradient of :class:`Conv2d` with respect to its
    input as a layer (upsampling in decoders and GANs). Input ``(N, C, H, W)`` or ``(C, H,
    W)``, ``weight`` ``(in, out / groups, kH, kW)`` (PyTorch's layout) and ``bias``
    ``(out,)``, drawn from ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (``fan_in = out / groups
    * kH * kW``); output size ``(H - 1) * stride - 2 * padding + dilation * (k - 1) +
    output_padding + 1`` per axis. ``forward(input, output_size=None)``: an
    ``output_size`` picks the ``output_padding`` that gives it, as PyTorch's."""

    dims = 2
