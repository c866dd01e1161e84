"""``LayerNorm``: normalisation over the last axes, as ``torch.nn.LayerNorm``;
``BatchNorm1d`` and ``BatchNorm2d``: per channel over the batch, as PyTorch's."""

from __future__ import annotations

import numbers

from ..autograd import no_grad
from ..backends import get_backend
from ..tensor import Tensor
from . import functional as F
from .layers import _check_input, _parameter_dtype
from .module import Module, Parameter

__all__ = ["LayerNorm", "BatchNorm1d", "BatchNorm2d", "GroupNorm"]


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` with the mean and the biased
    variance over the last ``len(normalized_shape)`` axes of the input, which must
    be ``normalized_shape``. ``weight`` (ones) and ``bias`` (zeros) are Parameters of
    that shape, absent without ``elementwise_affine`` (``bias`` also with ``bias=False``)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 device=None, dtype=None):
        shape = F._normalized_shape(normalized_shape, "LayerNorm")
        dtype = _parameter_dtype(dtype, "LayerNorm")
        backend = get_backend(device)
        self.normalized_shape = shape
        self.eps = float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = Parameter(backend.ones(shape, backend.dtype(dtype)), name="weight", device=backend.device)
            if bias:
                self.bias = Parameter(backend.zeros(shape, backend.dtype(dtype)), name="bias", device=backend.device)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self)
        shape = self.normalized_shape
        if x.shape[max(x.ndim - len(shape), 0):] != shape or x.ndim < len(shape):
            raise ValueError(f"LayerNorm: input of shape {x.shape} does not end in normalized_shape {shape}")
        return F.layer_norm(x, shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        no_bias = ", bias=False" if self.elementwise_affine and self.bias is None else ""
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}{no_bias}"


class _BatchNorm(Module):
    """Per-channel normalisation of ``(N, C, ...)`` inputs (see :func:`functional.batch_norm`).
    ``weight`` (ones) and ``bias`` (zeros) are Parameters of shape ``(C,)`` (absent
    without ``affine``). With ``track_running_stats`` the buffers ``running_mean``
    (zeros), ``running_var`` (ones) and ``num_batches_tracked`` (int64 0) are updated
    in place by every forward in training mode (``momentum=None``: the cumulative
    average) and used in eval mode; without, every forward uses the batch's statistics."""

    _ranks: tuple = ()
    _layout: str = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, device=None, dtype=None):
        name = type(self).__name__
        if not isinstance(num_features, numbers.Integral) or isinstance(num_features, bool) or num_features < 1:
            raise ValueError(f"{name}: num_features must be a positive integer, got {num_features!r}")
        num_features = int(num_features)  # a NumPy integer too
        dtype = _parameter_dtype(dtype, name)
        backend = get_backend(device)
        self.num_features = num_features
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        self.weight = self.bias = None
        shape, kind = (num_features,), backend.dtype(dtype)
        if affine:
            self.weight = Parameter(backend.ones(shape, kind), name="weight", device=backend.device)
            self.bias = Parameter(backend.zeros(shape, kind), name="bias", device=backend.device)
        tracked = (("running_mean", backend.zeros(shape, kind), dtype),
                   ("running_var", backend.ones(shape, kind), dtype),
                   ("num_batches_tracked", backend.zeros((), backend.dtype("int64")), "int64"))
        for key, array, kind in tracked:
            buffer = Tensor(array, device=backend.device, dtype=kind) if track_running_stats else None
            self.register_buffer(key, buffer)

    def forward(self, x: Tensor) -> Tensor:
        return self._forward(x)

    def _then_relu(self) -> bool:
        """Whether ``nn.Sequential`` may run this layer and a stock ReLU after it as one
        node (:meth:`_forward` with ``relu``): a stock BatchNorm, its ``forward`` not
        replaced on a subclass or on the instance."""
        return type(self).forward is _STOCK_FORWARD and "forward" not in vars(self)

    def _forward(self, x: Tensor, relu: bool = False) -> Tensor:
        """:meth:`forward`, with ``relu``: then ReLU on the result, in the same node
        (``nn.Sequential`` runs a stock BatchNorm followed by a stock ReLU so)."""
        _check_input(x, self)
        name = type(self).__name__
        if x.ndim not in self._ranks:
            raise ValueError(f"{name}: expected a {self._layout} input, got shape {x.shape}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{name}({self.num_features}): input of shape {x.shape} has {x.shape[1]} channels "
                             f"on axis 1, expected {self.num_features}")
        update = self.training and self.running_mean is not None
        momentum = self.momentum
        if update and momentum is None:  # the cumulative average, without reading the count on the host
            momentum = F._Cumulative(self.num_batches_tracked)  # (computed by the update: lp.compile replays it)
        y = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                         self.training or self.running_mean is None, momentum, self.eps, _op=name, _relu=relu)
        if update:
            with no_grad():
                self.num_batches_tracked += 1
        return y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


_STOCK_FORWARD = _BatchNorm.forward  # (replaced on the class, it is not the stock layer's any more)


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` inputs, as ``torch.nn.BatchNorm1d``."""

    _ranks = (2, 3)
    _layout = "2-D (N, C) or 3-D (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` inputs, as ``torch.nn.BatchNorm2d``."""

    _ranks = (4,)
    _layout = "4-D (N, C, H, W)"


class GroupNorm(Module):
    """:func:`functional.group_norm` as a layer, as ``torch.nn.GroupNorm``: ``num_channels``
    split into ``num_groups`` groups; ``weight`` (ones) and ``bias`` (zeros) are
    Parameters of shape ``(num_channels,)`` (absent without ``affine``; ``bias`` also
    with ``bias=False``)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, *,
                 bias: bool = True, device=None, dtype=None):
        for name, value in (("num_groups", num_groups), ("num_channels", num_channels)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"GroupNorm: {name} must be a positive integer, got {value!r}")
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        dtype = _parameter_dtype(dtype, "GroupNorm")
        backend = get_backend(device)
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps = float(eps)
        self.affine = bool(affine)
        self.weight = self.bias = None
        shape, kind = (self.num_channels,), backend.dtype(dtype)
        if affine:
            self.weight = Parameter(backend.ones(shape, kind), name="weight", device=backend.device)
            if bias:
                self.bias = Parameter(backend.zeros(shape, kind), name="bias", device=backend.device)

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm({self.num_groups}, {self.num_channels}): expected an input of shape "
                             f"(N, {self.num_channels}, ...), got {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
