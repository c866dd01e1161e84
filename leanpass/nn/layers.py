"""Layers: Linear, MLP, Sequential, Dropout and the activation modules."""

from __future__ import annotations

import math
import numbers

from .. import ops
from .._dtypes import as_dtype
from .._graph.trace import draw
from ..backends import get_backend, get_default_dtype
from ..serialization import transposed_copy
from ..tensor import Tensor, apply, as_tensor
from .module import _CHANGES, Module, Parameter, changed, report_members

__all__ = [
    "Linear", "MLP", "Sequential", "Dropout",
    "ReLU", "Sigmoid", "Tanh", "LeakyReLU", "GELU", "Softmax", "Identity", "Flatten",
]


def _parameter_dtype(dtype, layer: str) -> str:
    """The name of a real floating dtype for a layer's parameters (the default one
    for None); TypeError for a dtype outside the standard, ValueError for one
    that cannot carry gradients."""
    name = as_dtype(get_default_dtype() if dtype is None else dtype, layer).name
    if not name.startswith("float"):
        raise ValueError(f"{layer}: parameters must be floating-point to have gradients, got dtype {name}")
    return name


def _check_input(x, layer) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{type(layer).__name__}: expected a Tensor as input, got {type(x).__name__}; "
            "wrap it with leanpass.Tensor(...)"
        )


class Linear(Module):
    """``y = x @ weight.T + bias``, ``weight`` of shape ``(out_features, in_features)``
    as PyTorch's, drawn from ``U(-1/sqrt(in), 1/sqrt(in))`` on the host (so one seed
    gives the same weights on every device), ``bias`` zeros; both are Parameters.
    LeanPass 0.3 stored ``weight`` as ``(in, out)``: its files and pickles load
    transposed."""

    _v03_transposed = ("weight",)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, device=None, dtype=None):
        if in_features < 1 or out_features < 1:
            raise ValueError(f"Linear: sizes must be positive, got ({in_features}, {out_features})")
        dtype = _parameter_dtype(dtype, "Linear")
        backend = get_backend(device)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        bound = 1.0 / math.sqrt(in_features)
        # drawn as 0.3 drew its (in, out) weight, then transposed: one seed gives the model it gave
        weight = transposed_copy(backend.init_uniform((in_features, out_features), -bound, bound, dtype), backend)
        self.weight = Parameter(weight, name="weight", device=backend.device)
        self.bias = (
            Parameter(backend.zeros((out_features,), backend.dtype(dtype)), name="bias", device=backend.device)
            if bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        return self._forward(x, ops.linear)

    def _forward(self, x: Tensor, op) -> Tensor:
        """The layer as ``op`` (``ops.linear``, or ``ops.linear_relu`` for an MLP's
        hidden layers: one graph node for the layer and its ReLU)."""
        _check_input(x, self)
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Linear({self.in_features}, {self.out_features}): input of shape {x.shape} does not end "
                f"in {self.in_features} features"
            )
        if self.bias is None:  # one graph node for x @ w.T + b
            return apply(op, x, self.weight)
        return apply(op, x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _inplace(layer: str, inplace) -> bool:
    """PyTorch's ``inplace=`` option, taken for PyTorch code (``nn.ReLU(inplace=True)``):
    LeanPass computes a new tensor either way and leaves the input as it was; the
    result is the same."""
    if not isinstance(inplace, (bool, int)) or inplace not in (0, 1):
        raise TypeError(f"{layer}: inplace must be a bool, got {inplace!r}")
    return bool(inplace)


class ReLU(Module):
    """``max(x, 0)``. ``inplace=True`` (PyTorch's option) is taken and computes a new
    tensor, leaving the input as it was."""

    def __init__(self, inplace: bool = False):
        self.inplace = _inplace("ReLU", inplace)

    def forward(self, x):
        _check_input(x, self)
        return x.relu()

    def extra_repr(self):
        return "inplace=True" if getattr(self, "inplace", False) else ""  # not in pickles of 0.2


_RELU_FORWARD = ReLU.forward  # (replaced on the class, it is not the stock layer's any more)


class Sigmoid(Module):
    def forward(self, x):
        _check_input(x, self)
        return x.sigmoid()


class Tanh(Module):
    def forward(self, x):
        _check_input(x, self)
        return x.tanh()


def _gelu_form(approximate: str, op: str) -> str:
    """GELU's ``approximate`` option: "none" (the exact form) or "tanh", as PyTorch's."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate


class GELU(Module):
    """GELU, as PyTorch's ``GELU(approximate=...)``: the exact ``x * ndtr(x)`` by default
    (``approximate="none"``: it needs erf, so ``cpu`` and ``cuda`` only; on ``strict`` it
    raises naming the way out), or the tanh approximation (``approximate="tanh"``,
    GPT-2's, on every device)."""

    def __init__(self, approximate: str = "none"):
        self.approximate = _gelu_form(approximate, "GELU")

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"

    def forward(self, x):
        _check_input(x, self)
        return x.gelu(getattr(self, "approximate", "tanh"))  # one pickled before approximate= computed tanh


class LeakyReLU(Module):
    """``x`` where positive, else ``negative_slope * x``; ``inplace`` as :class:`ReLU`'s."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        self.negative_slope = float(negative_slope)
        self.inplace = _inplace("LeakyReLU", inplace)

    def forward(self, x):
        _check_input(x, self)
        return x.leaky_relu(self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if getattr(self, "inplace", False) else "")


class Softmax(Module):
    """Softmax along ``axis`` (or PyTorch's ``dim=``)."""

    def __init__(self, axis: int | None = None, *, dim: int | None = None):
        if axis is not None and dim is not None:
            raise TypeError("Softmax: give axis or dim (PyTorch's name for it), not both")
        self.axis = -1 if axis is None and dim is None else (axis if dim is None else dim)

    def forward(self, x):
        _check_input(x, self)
        return x.softmax(self.axis)

    def extra_repr(self):
        return f"axis={self.axis}"


class Identity(Module):
    """The input itself; takes and ignores any arguments, as PyTorch's."""

    def __init__(self, *args, **kwargs):
        pass

    def forward(self, x):
        return x


class Flatten(Module):
    """Axes ``start_dim`` to ``end_dim`` (inclusive) of the input merged into one, as
    ``torch.nn.Flatten``: ``(N, C, H, W)`` becomes ``(N, C * H * W)`` by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        self.start_dim = int(start_dim)
        self.end_dim = int(end_dim)

    def forward(self, x):
        _check_input(x, self)
        shape, ndim = x.shape, max(x.ndim, 1)  # a 0-d input counts as 1-d, as in PyTorch
        start, end = self.start_dim, self.end_dim
        if not (-ndim <= start < ndim and -ndim <= end < ndim):
            raise IndexError(f"Flatten: axes {start} to {end} are out of range for an input of shape {shape}")
        start, end = start % ndim, end % ndim
        if start > end:
            raise ValueError(f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} "
                             f"for an input of shape {shape}")
        if not shape:
            return x.reshape((1,))
        return x.reshape(shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


_ACTIVATIONS = {
    "relu": ReLU, "sigmoid": Sigmoid, "tanh": Tanh, "gelu": GELU, "leaky_relu": LeakyReLU, "identity": Identity,
}


def _callable(m):
    if not callable(m):
        raise TypeError(f"Sequential: {m!r} is not a module or function")
    return m


class Sequential(Module):
    """Modules applied one after another."""

    def __init__(self, *modules):
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = tuple(modules[0])
        self.layers = [_callable(m) for m in modules]

    def forward(self, x):
        layers = self.layers
        last = len(layers) - 1
        skip = False
        for i, layer in enumerate(layers):
            if skip:  # (a ReLU run with the layer before it)
                skip = False
                continue
            fuses = getattr(layer, "_then_relu", None)  # a stock BatchNorm: it and a stock ReLU after it in one node
            if (fuses is not None and i < last and type(layers[i + 1]) is ReLU and ReLU.forward is _RELU_FORWARD
                    and "forward" not in vars(layers[i + 1]) and isinstance(x, Tensor) and fuses()):
                report_members(layer)
                report_members(layers[i + 1])
                x = layer._forward(x, relu=True)
                skip = True
            else:
                x = layer(x)
        return x

    def __getitem__(self, i):
        """A module, or for a slice a Sequential of those modules (shared, as PyTorch's:
        ``model[:-1](x)`` runs all but the last)."""
        report_members(self)  # (lp.compile: a replay checks that the layers are still these)
        if isinstance(i, slice):
            return Sequential(self.layers[i])
        try:
            return self.layers[i]
        except IndexError:
            raise IndexError(f"Sequential: index {i} is out of range for {len(self.layers)} layers") from None

    def __setitem__(self, i, module):
        module = _callable(module)
        try:
            self.layers[i] = module
            changed(self)
        except IndexError:
            raise IndexError(f"Sequential: index {i} is out of range for {len(self.layers)} layers") from None

    def __delitem__(self, i):
        try:
            del self.layers[i]
            changed(self)
        except IndexError:
            raise IndexError(f"Sequential: index {i} is out of range for {len(self.layers)} layers") from None

    def __len__(self):
        report_members(self)
        return len(self.layers)

    def __iter__(self):
        report_members(self)
        return iter(self.layers)

    def append(self, module) -> Sequential:
        self.layers.append(_callable(module))
        changed(self)
        return self

    def insert(self, index: int, module) -> None:
        if not -len(self.layers) <= index <= len(self.layers):  # list.insert would clamp it
            raise IndexError(f"Sequential.insert: index {index} is out of range for {len(self.layers)} layers")
        self.layers.insert(index, _callable(module))
        changed(self)

    def extend(self, modules) -> Sequential:
        modules = [_callable(m) for m in modules]  # every one checked before any is added
        self.layers.extend(modules)
        changed(self)
        return self

    def pop(self, index: int = -1):
        if not -len(self.layers) <= index < len(self.layers):
            raise IndexError(f"Sequential.pop: index {index} is out of range for {len(self.layers)} layers")
        module = self.layers.pop(index)
        changed(self)
        return module

    def __add__(self, other) -> Sequential:
        if not isinstance(other, Sequential):
            return NotImplemented
        return Sequential(self.layers + other.layers)

    def __iadd__(self, other) -> Sequential:
        if not isinstance(other, Sequential):
            return NotImplemented
        return self.extend(other.layers)

    def _torch_key(self, key: str) -> str:  # torch.nn.Sequential: "0.weight"
        return key.partition(".")[2] if key.startswith("layers.") else key


class MLP(Module):
    """Linear layers of the given sizes with ``activation`` between them (none after
    the last): ``MLP([784, 256, 10])`` is Linear(784, 256), ReLU, Linear(256, 10).
    ``activation`` is a name (relu, tanh, sigmoid, gelu, leaky_relu) or a Module."""

    def __init__(self, layer_sizes, *, activation="relu", device=None, dtype=None):
        sizes = [int(n) for n in layer_sizes]
        if len(sizes) < 2:
            raise ValueError(f"MLP: give at least an input and an output size, got {list(layer_sizes)}")
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"MLP: unknown activation {activation!r}; choose from {sorted(_ACTIVATIONS)}")
            make = _ACTIVATIONS[activation]
        elif isinstance(activation, Module) or callable(activation):
            make = lambda: activation  # noqa: E731
        else:
            raise TypeError(f"MLP: activation must be a name or a Module, got {type(activation).__name__}")
        dtype = _parameter_dtype(dtype, "MLP")
        self.layer_sizes = sizes
        self.layers = [Linear(a, b, device=device, dtype=dtype) for a, b in zip(sizes[:-1], sizes[1:])]
        self.activations = [make() for _ in sizes[2:]]

    _fusion = None  # (changes seen, layers, activations, op, parameters, width) of the last check

    def forward(self, x):
        if not isinstance(x, Tensor):
            _check_input(x, self)
        layers = self.layers
        fusion = self._fusion
        if (fusion is None or fusion[0] != _CHANGES[0] or fusion[1] != layers
                or fusion[2] != self.activations):  # a member was set, added or replaced since
            fusion = self._check_fusion()
        if fusion[3] is not None and x.shape[-1:] == fusion[5]:
            # stock Linear + ReLU layers: the whole MLP is one graph node
            return apply(fusion[3], x, *fusion[4])
        last = len(layers) - 1
        for i, layer in enumerate(layers):
            if i == last:
                return layer(x)
            activation = self.activations[i]
            if type(layer) is Linear and type(activation) is ReLU:  # one node for both
                x = layer._forward(x, ops.linear_relu)
            else:
                x = activation(layer(x))

    def _check_fusion(self) -> tuple:
        """Whether this MLP can run as one graph node, kept with what it was decided
        from: every attribute set on any Module (``layer.weight = ...``) and every
        change of the two lists makes :meth:`forward` decide again. Not pickled."""
        seen = _CHANGES[0]  # before the members are read: a change meanwhile makes the next call check again
        params = self._fused_params()
        layers = self.layers
        fusion = (seen, list(layers), list(self.activations),
                  None if params is None else ops.nn.mlp(len(layers)), params,
                  None if params is None else (layers[0].in_features,))
        object.__setattr__(self, "_fusion", fusion)  # not a change of a member
        return fusion

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_fusion", None)  # decided again where it is loaded
        return state

    def _fused_params(self):
        """The weights then the biases, when this MLP can run as one ``mlp`` node: two
        or more stock ``Linear`` layers with biases, of matching sizes, and stock
        ``ReLU`` between them; else None."""
        layers, activations = self.layers, self.activations
        if len(layers) < 2 or len(activations) != len(layers) - 1:
            return None
        weights, biases = [], []
        width = layers[0].in_features
        for layer in layers:
            if type(layer) is not Linear or layer.bias is None or layer.in_features != width:
                return None
            width = layer.out_features
            weights.append(layer.weight)
            biases.append(layer.bias)
        for activation in activations:
            if type(activation) is not ReLU:
                return None
        return weights + biases

    def _torch_key(self, key: str) -> str:
        """As ``torch.nn.Sequential(Linear, act, Linear, ...)``: layer i is ``2i``,
        activation i is ``2i + 1``."""
        kind, _, index = key.partition(".")
        if kind == "layers":
            return str(2 * int(index))
        if kind == "activations":
            return str(2 * int(index) + 1)
        return key

    def extra_repr(self):
        return f"{self.layer_sizes}"


def dropout_probability(p) -> float:
    """Dropout's ``p`` as a float in [0, 1) (a 0-d array or tensor too); TypeError or ValueError naming Dropout."""
    if getattr(p, "shape", None) == () and getattr(getattr(p, "dtype", None), "kind", "") in "iuf":
        p = float(p)  # a 0-d array or tensor
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"Dropout: p must be a number in [0, 1), got {p!r}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
    return float(p)


def dropped(x: Tensor, p: float) -> Tensor:
    """``x`` times inverted dropout's mask of probability ``p`` (:class:`Dropout` in
    training, :func:`leanpass.nn.functional.dropout`, an RNN's dropout between layers)."""
    return x * as_tensor(draw(_dropout_mask, get_backend(x.device), x.shape, 1.0 - p, x.dtype), device=x.device)


def _dropout_mask(backend, shape, keep, dtype):
    """Inverted dropout's mask: ``1 / keep`` with probability ``keep``, else 0 (all 0 for
    ``keep`` 0: an RNN's dropout 1), drawn from the device's generator (a compiled call
    draws it again at each replay)."""
    with backend.context():
        mask = backend.bernoulli(shape, keep, dtype)
        return mask * (1.0 / keep) if keep else mask


class Dropout(Module):
    """Inverted dropout: in training, zero each element with probability ``p`` and
    scale the rest by ``1 / (1 - p)``; the identity in eval mode. ``training=``
    in the call overrides the module's mode (as in LeanPass 0.1)."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        self.p = dropout_probability(p)
        self.inplace = _inplace("Dropout", inplace)

    def forward(self, x: Tensor, training: bool | None = None) -> Tensor:
        _check_input(x, self)
        training = self.training if training is None else training
        if not training or self.p == 0.0:
            return x
        return dropped(x, self.p)

    def extra_repr(self):
        return f"p={self.p}" + (", inplace=True" if getattr(self, "inplace", False) else "")
