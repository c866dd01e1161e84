"""``leanpass.nn.init``: fill a tensor in place, as ``torch.nn.init``.

Every function changes its tensor in place, on its device and outside the graph
(``no_grad``; the version counter is bumped, so a graph that saved the old values
refuses to backpropagate), and returns it. Random values are drawn on the host
from the generator :func:`leanpass.manual_seed` seeds, then moved, so one seed
gives the same numbers on every device.

Fans follow PyTorch's formula on the tensor's shape: ``fan_in = shape[1] *
receptive field``, ``fan_out = shape[0] * receptive field`` (the receptive field
is the product of ``shape[2:]``), which is right for the layers' layouts, all
PyTorch's (``Linear.weight`` is ``(out, in)``, ``Conv2d.weight`` ``(out, in, kh,
kw)``): ``mode="fan_in"`` of a ``Linear.weight`` is ``in_features``, as for a
``torch.nn.Linear``.
"""

from __future__ import annotations

import math
import numbers
import warnings

from .._graph.trace import draw
from ..autograd import no_grad
from ..backends import FLOAT_DTYPES, get_backend
from ..tensor import Tensor, as_tensor

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's table): 1 for linear,
    convolutions and sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 +
    slope**2)) for leaky_relu (``param`` is the slope, default 0.01), 3/4 for selu."""
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor: Tensor, op: str = "init") -> tuple[int, int]:
    """PyTorch's fans of a tensor of at least 2 axes (see the module's docstring)."""
    shape = _tensor(tensor, op).shape
    if len(shape) < 2:
        raise ValueError(f"{op}: fan in and fan out need a tensor of at least 2 axes, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fan(tensor: Tensor, mode: str, op: str) -> int:
    if not isinstance(mode, str) or mode.lower() not in ("fan_in", "fan_out"):
        raise ValueError(f"{op}: mode {mode!r} not supported, use 'fan_in' or 'fan_out'")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, op)
    return fan_in if mode.lower() == "fan_in" else fan_out


def _tensor(tensor, op: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    return tensor


def _write(tensor: Tensor, values) -> Tensor:
    with no_grad():
        tensor[...] = values
    return tensor


def _draw(tensor, op: str, kind: str, a: float, b: float) -> Tensor:
    """``tensor`` filled with U(a, b) or N(a, b) (``kind``), drawn on the host."""
    name = _tensor(tensor, op).dtype.name
    if name not in FLOAT_DTYPES:
        raise TypeError(f"{op}: needs a real floating-point tensor, got dtype {name}")
    values = draw(_values, get_backend(tensor.device), kind, tensor.shape, a, b, name)
    return _write(tensor, as_tensor(values, device=tensor.device))


def _values(backend, kind, shape, a, b, name):
    """The numbers of :func:`_draw` on ``backend``'s device (a compiled call draws them
    again at each replay, in eager's order)."""
    return (backend.init_uniform if kind == "uniform" else backend.init_normal)(shape, a, b, name)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with values drawn from U(a, b)."""
    a, b = float(a), float(b)
    if a > b:
        raise ValueError(f"uniform_: needs a <= b, got a={a}, b={b}")
    return _draw(tensor, "uniform_", "uniform", a, b)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with values drawn from N(mean, std**2)."""
    mean, std = float(mean), float(std)
    if not std >= 0:
        raise ValueError(f"normal_: needs std >= 0, got {std}")
    return _draw(tensor, "normal_", "normal", mean, std)


def constant_(tensor: Tensor, val) -> Tensor:
    """Fill with ``val`` (a number, or a tensor or array that broadcasts to its shape)."""
    _tensor(tensor, "constant_")
    try:
        return _write(tensor, val)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"constant_: cannot fill a tensor of shape {tensor.shape} with {val!r}: {exc}") from None


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    return _write(_tensor(tensor, "zeros_"), 0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return _write(_tensor(tensor, "ones_"), 1)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_uniform_")
    bound = math.sqrt(3.0) * (gain * math.sqrt(2.0 / float(fan_in + fan_out)))  # PyTorch's rounding
    return _draw(tensor, "xavier_uniform_", "uniform", -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot: N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor, "xavier_normal_")
    return _draw(tensor, "xavier_normal_", "normal", 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity, op) -> float | None:
    """He's standard deviation ``gain / sqrt(fan)``; None (with PyTorch's warning)
    for a tensor without elements."""
    fan = _fan(tensor, mode, op)
    gain = calculate_gain(nonlinearity, a)
    if 0 in tensor.shape:
        warnings.warn(f"{op}: initializing a zero-element tensor is a no-op", UserWarning, stacklevel=3)
        return None
    return gain / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He: U(-bound, bound) with ``bound = gain * sqrt(3 / fan)``, ``fan`` the fan of
    ``mode`` and ``gain = calculate_gain(nonlinearity, a)`` (``fan_in`` of a
    ``Linear.weight`` ``(out, in)`` is ``in``, as PyTorch's)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return _draw(tensor, "kaiming_uniform_", "uniform", -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """He: N(0, std**2) with ``std = gain / sqrt(fan)`` (see :func:`kaiming_uniform_`)."""
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_")
    if std is None:
        return tensor
    return _draw(tensor, "kaiming_normal_", "normal", 0.0, std)
