"""``LayerNorm``: normalisation over the last axes, as ``torch.nn.LayerNorm``."""

from __future__ import annotations

from ..backends import get_backend
from ..tensor import Tensor
from . import functional as F
from .layers import _check_input, _parameter_dtype
from .module import Module, Parameter

__all__ = ["LayerNorm"]


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
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
