"""PyTorch's further activations, as functions (``nn.functional``) and modules:
``silu``/``SiLU``, ``softplus``/``Softplus``, ``elu``/``ELU``, ``leaky_relu`` (the
module ``LeakyReLU`` is in :mod:`leanpass.nn.layers`), ``mish``/``Mish`` and
``hardtanh``/``Hardtanh``, with PyTorch's signatures and defaults.

Each is one graph node (:mod:`leanpass.ops.activations`) with PyTorch's gradient,
differentiable twice, on every device; an integer or bool input is taken as the
default float dtype, float32 stays float32. ``inplace=True`` is taken, as for
``ReLU``, and computes a new tensor, leaving the input as it was.
"""

from __future__ import annotations

import math
import numbers

from .._namespace._util import floating
from ..ops import activations as act
from ..tensor import Tensor, apply
from .layers import _check_input, _inplace
from .module import Module

__all__ = ["silu", "softplus", "elu", "leaky_relu", "mish", "hardtanh", "SiLU", "Softplus", "ELU", "Mish", "Hardtanh"]


def _input(x, op: str) -> Tensor:
    """``x`` as a real floating Tensor (integers and bools become the default float
    dtype); TypeError for anything else."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor as input, got {type(x).__name__}; wrap it with leanpass.Tensor(...)")
    x = floating(x)
    if x.dtype.kind == "c":
        raise TypeError(f"{op}: expected a real input, got dtype {x.dtype}")
    return x


def _real(value, name: str, op: str) -> float:
    """A real number argument as a float; TypeError naming it otherwise."""
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {value!r}")
    return float(value)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 - PyTorch's names
    """``x * sigmoid(x)`` (SiLU, also called swish), as ``torch.nn.functional.silu``."""
    _inplace("silu", inplace)
    return apply(act.silu, _input(input, "silu"))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``,
    as ``torch.nn.functional.softplus``; never overflows."""
    beta, threshold = _real(beta, "beta", "softplus"), _real(threshold, "threshold", "softplus")
    if beta == 0 or math.isnan(beta):
        raise ValueError(f"softplus: beta must be a nonzero number (it divides), got {beta}")
    x = _input(input, "softplus")
    return apply(act.softplus_threshold, x, beta=beta, threshold=threshold)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` where positive, else ``alpha * (exp(x) - 1)``, as ``torch.nn.functional.elu``."""
    alpha = _real(alpha, "alpha", "elu")
    _inplace("elu", inplace)
    return apply(act.elu, _input(input, "elu"), alpha=alpha)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` where positive, else ``negative_slope * x`` (the Tensor method
    ``leaky_relu``), as ``torch.nn.functional.leaky_relu``; the gradient at 0 is
    ``negative_slope``, as PyTorch's."""
    negative_slope = _real(negative_slope, "negative_slope", "leaky_relu")
    _inplace("leaky_relu", inplace)
    return _input(input, "leaky_relu").leaky_relu(negative_slope)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x * tanh(softplus(x))``, as ``torch.nn.functional.mish``."""
    _inplace("mish", inplace)
    return apply(act.mish, _input(input, "mish"))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x`` clipped to ``[min_val, max_val]``, as ``torch.nn.functional.hardtanh``: the
    gradient is 1 strictly inside and 0 at the bounds and beyond."""
    min_val, max_val = _real(min_val, "min_val", "hardtanh"), _real(max_val, "max_val", "hardtanh")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    _inplace("hardtanh", inplace)
    return apply(act.hardtanh, _input(input, "hardtanh"), min_val=min_val, max_val=max_val)


def _inplace_repr(module) -> str:
    return "inplace=True" if module.inplace else ""


class SiLU(Module):
    """``x * sigmoid(x)``, as ``torch.nn.SiLU``."""

    def __init__(self, inplace: bool = False):
        self.inplace = _inplace("SiLU", inplace)

    def forward(self, x):
        _check_input(x, self)
        return silu(x)

    def extra_repr(self):
        return _inplace_repr(self)


class Mish(Module):
    """``x * tanh(softplus(x))``, as ``torch.nn.Mish``."""

    def __init__(self, inplace: bool = False):
        self.inplace = _inplace("Mish", inplace)

    def forward(self, x):
        _check_input(x, self)
        return mish(x)

    def extra_repr(self):
        return _inplace_repr(self)


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta`` (``x`` above ``threshold``), as ``torch.nn.Softplus``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        self.beta, self.threshold = _real(beta, "beta", "Softplus"), _real(threshold, "threshold", "Softplus")
        if self.beta == 0 or math.isnan(self.beta):
            raise ValueError(f"Softplus: beta must be a nonzero number (it divides), got {self.beta}")

    def forward(self, x):
        _check_input(x, self)
        return softplus(x, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class ELU(Module):
    """``x`` where positive, else ``alpha * (exp(x) - 1)``, as ``torch.nn.ELU``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        self.alpha = _real(alpha, "alpha", "ELU")
        self.inplace = _inplace("ELU", inplace)

    def forward(self, x):
        _check_input(x, self)
        return elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Hardtanh(Module):
    """``x`` clipped to ``[min_val, max_val]``, as ``torch.nn.Hardtanh`` (``max_val`` must
    be above ``min_val``; ``min_value``/``max_value`` are PyTorch's old names for them)."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None):
        min_val = min_val if min_value is None else min_value
        max_val = max_val if max_value is None else max_value
        self.min_val, self.max_val = _real(min_val, "min_val", "Hardtanh"), _real(max_val, "max_val", "Hardtanh")
        if not self.max_val > self.min_val:
            raise ValueError(f"Hardtanh: max_val ({self.max_val}) must be greater than min_val ({self.min_val})")
        self.inplace = _inplace("Hardtanh", inplace)

    def forward(self, x):
        _check_input(x, self)
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")
