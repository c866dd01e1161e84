"""Recurrent layers as PyTorch's: ``RNN``, ``LSTM``, ``GRU`` and the single-step cells
``RNNCell``, ``LSTMCell``, ``GRUCell``, with PyTorch's arguments, parameter names
(``weight_ih_l0``, ``bias_hh_l1_reverse``, ...) and layouts, so a PyTorch state dict
loads as it is.

Each layer and direction is one graph node (:mod:`leanpass.ops.rnn`): the input
projections of all time steps in one product, the recurrence in a loop of raw array
operations, and backpropagation through time in one backward.
"""

from __future__ import annotations

import math
import numbers
import warnings

from .. import ops
from .._namespace import concat, permute_dims, stack, zeros
from ..backends import get_backend
from ..tensor import Tensor, apply
from .layers import _parameter_dtype, dropped
from .module import Module, Parameter

__all__ = ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNNCellBase"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _size(value, what: str, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: {what} must be an int, got {value!r}")
    if value < low:
        raise ValueError(f"{name}: {what} must be {'positive' if low else 'non-negative'}, got {value}")
    return int(value)


def _flag(value, what: str, name: str) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise TypeError(f"{name}: {what} must be a bool, got {value!r}")
    return bool(value)


def _nonlinearity(value, name: str) -> str:
    if value not in ("tanh", "relu"):
        raise ValueError(f"{name}: unknown nonlinearity {value!r}; select from 'tanh' or 'relu'")
    return value


def _op_and_params(mode: str, reverse: bool) -> tuple:
    if mode == "LSTM":
        return ops.lstm, {"reverse": reverse}
    if mode == "GRU":
        return ops.gru, {"reverse": reverse}
    return ops.elman, {"nonlinearity": "tanh" if mode == "RNN_TANH" else "relu", "reverse": reverse}


def _check_tensor(value, what: str, name: str, like: Tensor) -> Tensor:
    """``value`` must be a Tensor of ``like``'s dtype and device (the parameters')."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}: expected a Tensor as {what}, got {type(value).__name__}; "
                        "wrap it with leanpass.Tensor(...)")
    if value.dtype != like.dtype:
        raise TypeError(f"{name}: {what} has dtype {value.dtype}, the parameters {like.dtype}: convert one "
                        f"(x.astype(...) or module.to(dtype))")
    if value.device != like.device:
        raise ValueError(f"{name}: {what} is on {value.device}, the parameters on {like.device}")
    return value


def _zeros(like: Tensor, shape) -> Tensor:
    """The initial state where none is given: a creation function's zeros (lp.compile
    records them as a constant of the step)."""
    return zeros(shape, dtype=like.dtype, device=like.device)


def _dropout(x: Tensor, p: float) -> Tensor:
    """Inverted dropout (``F.dropout``'s), drawn from the device's seeded generator."""
    return dropped(x, p)


class RNNBase(Module):
    """What :class:`RNN`, :class:`LSTM` and :class:`GRU` share (PyTorch's ``RNNBase``):
    ``mode`` is ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 *, device=None, dtype=None):
        name = type(self).__name__
        if mode not in _GATES:
            raise ValueError(f"{name}: unknown mode {mode!r}; one of {tuple(_GATES)}")
        input_size = _size(input_size, "input_size", name)
        hidden_size = _size(hidden_size, "hidden_size", name)
        num_layers = _size(num_layers, "num_layers", name)
        bias = _flag(bias, "bias", name)
        batch_first = _flag(batch_first, "batch_first", name)
        bidirectional = _flag(bidirectional, "bidirectional", name)
        if getattr(dropout, "shape", None) == () and getattr(getattr(dropout, "dtype", None), "kind", "") in "iuf":
            dropout = float(dropout)
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability of "
                             f"an element being zeroed, got {dropout!r}")
        proj_size = _size(proj_size, "proj_size", name, low=0)
        if proj_size:
            if proj_size >= hidden_size:
                raise ValueError(f"{name}: proj_size {proj_size} has to be smaller than hidden_size {hidden_size}")
            raise NotImplementedError(f"{name}: proj_size > 0 (an LSTM with projections, got proj_size="
                                      f"{proj_size}) is not supported")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{name}: dropout option adds dropout after all but last recurrent layer, so non-zero "
                          f"dropout expects num_layers greater than 1, but got dropout={dropout} and num_layers=1",
                          UserWarning, stacklevel=3)
        dtype = _parameter_dtype(dtype, name)
        backend = get_backend(device)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        self.dropout = float(dropout)
        self.proj_size = 0
        directions = 2 if bidirectional else 1
        width = _GATES[mode] * hidden_size
        bound = 1.0 / math.sqrt(hidden_size)  # PyTorch's reset_parameters: every parameter U(-k, k)
        names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (width, layer_input)), ("weight_hh", (width, hidden_size))]
                if bias:
                    shapes += [("bias_ih", (width,)), ("bias_hh", (width,))]
                for stem, shape in shapes:
                    setattr(self, stem + suffix, Parameter(backend.init_uniform(shape, -bound, bound, dtype),
                                                           name=stem + suffix, device=backend.device))
                names.append(tuple(stem + suffix for stem, _ in shapes))
        self._names = names

    @property
    def all_weights(self) -> list:
        """The parameters of each layer and direction, as PyTorch's ``all_weights``."""
        return [[getattr(self, n) for n in names] for names in self._names]

    def flatten_parameters(self) -> None:
        """PyTorch's cuDNN call, kept for its code: nothing to do here."""

    def _check_state(self, value, what: str, shape: tuple, batched: bool, like: Tensor) -> Tensor:
        name = type(self).__name__
        value = _check_tensor(value, what, name, like)
        if value.ndim != len(shape):
            kind = "batched 3-D" if batched else "unbatched 2-D"
            raise ValueError(f"{name}: for {kind} input, {what} should be {len(shape)}-D too, got shape "
                             f"{value.shape}")
        if value.shape != shape:
            raise ValueError(f"{name}: {what} must have shape {shape} (num_layers * num_directions, "
                             f"{'batch, ' if batched else ''}hidden_size), got {value.shape}")
        return value

    def forward(self, input: Tensor, hx=None):  # noqa: A002 - PyTorch's name
        """``(output, h_n)`` (``(output, (h_n, c_n))`` for the LSTM) as PyTorch's: ``input``
        ``(T, B, input_size)`` (``(B, T, input_size)`` with ``batch_first``) or unbatched
        ``(T, input_size)``; ``hx`` the initial state(s) ``(num_layers * directions, B,
        hidden_size)`` (unbatched: without ``B``), zeros when absent."""
        name = type(self).__name__
        like = self.weight_ih_l0
        x = _check_tensor(input, "input", name, like)
        if x.ndim not in (2, 3):
            raise ValueError(f"{name}: expected input to be 2-D (unbatched) or 3-D (batched), got shape {x.shape}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input.shape[-1] must be equal to input_size {self.input_size}, got input "
                             f"of shape {x.shape}")
        batched = x.ndim == 3
        if not batched:
            x = x.reshape((x.shape[0], 1, x.shape[1]))
        elif self.batch_first:
            x = permute_dims(x, (1, 0, 2))
        steps, batch = x.shape[:2]
        if steps == 0:
            raise ValueError(f"{name}: expected a sequence length larger than 0, got input of shape {input.shape}")
        directions = 2 if self.bidirectional else 1
        count = self.num_layers * directions
        shape = (count, batch, self.hidden_size) if batched else (count, self.hidden_size)
        lstm = self.mode == "LSTM"
        states = None
        if hx is not None:
            if lstm:
                if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                    raise TypeError(f"{name}: hx must be a tuple (h_0, c_0) of two Tensors, got "
                                    f"{type(hx).__name__}")
                states = [self._check_state(s, what, shape, batched, like) for s, what in zip(hx, ("h_0", "c_0"))]
            else:
                states = [self._check_state(hx, "hx", shape, batched, like)]
            if not batched:
                states = [s.reshape((count, 1, self.hidden_size)) for s in states]
        zeros = _zeros(like, (batch, self.hidden_size)) if states is None else None
        h_n, c_n = [], []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                k = layer * directions + direction
                weights = [getattr(self, n) for n in self._names[k]]
                initial = [zeros] * (2 if lstm else 1) if states is None else [s[k] for s in states]
                op, params = _op_and_params(self.mode, bool(direction))
                out = apply(op, layer_input, *initial, *weights, **params)
                last = 0 if direction else steps - 1
                if lstm:
                    outputs.append(out[:steps])
                    c_n.append(out[steps])
                else:
                    outputs.append(out)
                h_n.append(out[last])
            layer_input = outputs[0] if directions == 1 else concat(outputs, axis=2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = _dropout(layer_input, self.dropout)
        output, h_n = layer_input, stack(h_n)
        c_n = stack(c_n) if lstm else None
        if not batched:
            output = output.reshape((steps, output.shape[-1]))
            h_n = h_n.reshape((count, self.hidden_size))
            c_n = c_n.reshape((count, self.hidden_size)) if lstm else None
        elif self.batch_first:
            output = permute_dims(output, (1, 0, 2))
        return (output, (h_n, c_n)) if lstm else (output, h_n)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """``torch.nn.RNN``: an Elman RNN, ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T +
    b_hh)`` (or ReLU with ``nonlinearity="relu"``), ``num_layers`` deep, one or two
    directions; parameters ``weight_ih_l{k}`` ``(hidden_size, in)``, ``weight_hh_l{k}``
    ``(hidden_size, hidden_size)``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` (``..._reverse``
    for the second direction), drawn from ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 *, device=None, dtype=None):
        mode = "RNN_TANH" if _nonlinearity(nonlinearity, "RNN") == "tanh" else "RNN_RELU"
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """``torch.nn.LSTM``: gates ``i, f, g, o`` stacked in that order in ``weight_ih_l{k}``
    ``(4 * hidden_size, in)``, ``weight_hh_l{k}`` ``(4 * hidden_size, hidden_size)`` and
    the biases; ``forward(input, (h_0, c_0))`` returns ``(output, (h_n, c_n))``.
    ``proj_size > 0`` is not supported (``NotImplementedError``)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 *, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)


class GRU(RNNBase):
    """``torch.nn.GRU``: gates ``r, z, n`` stacked in that order in ``weight_ih_l{k}``
    ``(3 * hidden_size, in)``, ``weight_hh_l{k}`` ``(3 * hidden_size, hidden_size)`` and
    the biases, ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z
    * h``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 *, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


class RNNCellBase(Module):
    """What the cells share: one time step of their layer (the same op, ``T = 1``);
    parameters ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` as PyTorch's."""

    mode = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, device=None, dtype=None):
        name = type(self).__name__
        self.input_size = _size(input_size, "input_size", name)
        self.hidden_size = _size(hidden_size, "hidden_size", name)
        self.bias = _flag(bias, "bias", name)
        dtype = _parameter_dtype(dtype, name)
        backend = get_backend(device)
        width = _GATES[self.mode] * self.hidden_size
        bound = 1.0 / math.sqrt(self.hidden_size)
        shapes = [("weight_ih", (width, self.input_size)), ("weight_hh", (width, self.hidden_size))]
        if self.bias:
            shapes += [("bias_ih", (width,)), ("bias_hh", (width,))]
        for stem, shape in shapes:
            setattr(self, stem, Parameter(backend.init_uniform(shape, -bound, bound, dtype), name=stem,
                                          device=backend.device))
        self._names = tuple(stem for stem, _ in shapes)

    def forward(self, input: Tensor, hx=None):  # noqa: A002 - PyTorch's name
        """One step: ``input`` ``(B, input_size)`` or unbatched ``(input_size,)``, ``hx``
        ``(B, hidden_size)`` (unbatched ``(hidden_size,)``; ``(h, c)`` for the LSTM
        cell), zeros when absent. Returns ``h'`` (``(h', c')`` for the LSTM cell)."""
        name = type(self).__name__
        like = self.weight_ih
        x = _check_tensor(input, "input", name, like)
        if x.ndim not in (1, 2):
            raise ValueError(f"{name}: expected input to be 1-D (unbatched) or 2-D (batched), got shape {x.shape}")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input.shape[-1] must be equal to input_size {self.input_size}, got input "
                             f"of shape {x.shape}")
        batched = x.ndim == 2
        batch = x.shape[0] if batched else 1
        shape = (batch, self.hidden_size) if batched else (self.hidden_size,)
        lstm = self.mode == "LSTM"
        if hx is None:
            states = [_zeros(like, (batch, self.hidden_size))] * (2 if lstm else 1)
        else:
            if lstm and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
                raise TypeError(f"{name}: hx must be a tuple (h, c) of two Tensors, got {type(hx).__name__}")
            states = []
            for s, what in zip(hx if lstm else (hx,), ("h", "c") if lstm else ("hx",)):
                s = _check_tensor(s, what, name, like)
                if s.shape != shape:
                    raise ValueError(f"{name}: {what} must have shape {shape} ({'batch, ' if batched else ''}"
                                     f"hidden_size) for input of shape {x.shape}, got {s.shape}")
                states.append(s if batched else s.reshape((1, self.hidden_size)))
        op, params = _op_and_params(self.mode, False)
        weights = [getattr(self, n) for n in self._names]
        out = apply(op, x.reshape((1, batch, self.input_size)), *states, *weights, **params)
        results = (out[0], out[1]) if lstm else (out[0],)
        if not batched:
            results = tuple(r.reshape((self.hidden_size,)) for r in results)
        return results if lstm else results[0]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity=relu"
        return s


class RNNCell(RNNCellBase):
    """``torch.nn.RNNCell``: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or ReLU)."""

    mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 *, device=None, dtype=None):
        if _nonlinearity(nonlinearity, "RNNCell") == "relu":
            self.mode = "RNN_RELU"
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device=device, dtype=dtype)


class LSTMCell(RNNCellBase):
    """``torch.nn.LSTMCell``: one step of :class:`LSTM`; ``forward(input, (h, c))``
    returns ``(h', c')``."""

    mode = "LSTM"


class GRUCell(RNNCellBase):
    """``torch.nn.GRUCell``: one step of :class:`GRU`."""

    mode = "GRU"
