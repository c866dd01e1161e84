"""Tensor methods named after namespace functions, where PyTorch or NumPy users look
for them: ``t.sin()``, ``t.sum(axis)``, ``t.argmax()``, ``t.transpose(0, 1)``...

Each is the namespace function itself (``t.sin()`` is ``leanpass.sin(t)``), or a
thin wrapper where the method's signature is the familiar one (positional axes).
"""

from __future__ import annotations

import numbers

from .. import ops
from .._checks import check_reshape, normalize_axis
from .._dtypes import DTYPES, dtype_name
from .._graph.modes import is_grad_enabled
from .._indexing import setitem
from .._node import run1
from ..ops import elementwise as table
from ..tensor import Tensor
from . import (
    creation,
    elementwise,
    indexing,
    linalg,
    manipulation,
    searching,
    sets,
    sorting,
    statistical,
    torch_names,
    utility,
)
from ._records import REGISTRY, attach  # noqa: F401 - REGISTRY: every method, by name
from ._util import floating, torch_axis

# Every method is attached one way: each module of the namespace lists its own in
# ``METHODS`` ({name: function of the tensor first}); the element-wise ones come from the
# op table's records (each entry's ``method`` names); this module's are below. The last
# lines attach them all (:func:`attach`), and tests/test_methods_registry.py checks that
# every public method of Tensor that calls into the namespace is in :data:`REGISTRY`.
ELEMENTWISE = {method: getattr(elementwise, entry.name)
               for entry in (*table.UNARY.values(), *table.BINARY.values()) for method in entry.method}
METHODS: dict = {}


# ---- activations and friends (not in the standard) --------------------------------------------


def relu(self):
    """max(x, 0). An integer tensor keeps its dtype, as PyTorch's (it carries no gradient)."""
    if DTYPES[dtype_name(self._data.dtype)].kind in "iu":
        return elementwise.maximum(self, 0)
    return run1(ops.relu, floating(self, "relu"))


def leaky_relu(self, negative_slope: float = 0.01):
    """x where x > 0, else ``negative_slope * x``."""
    return run1(ops.leaky_relu, floating(self, "leaky_relu"), float(negative_slope))


def gelu(self, approximate: str = "none"):
    """GELU: the exact ``x * ndtr(x) = 0.5 x (1 + erf(x / sqrt 2))`` (``approximate="none"``,
    PyTorch's default; erf comes from the device's special functions, so ``cpu`` and
    ``cuda`` only), or the tanh approximation ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    x^3)))`` (``approximate="tanh"``, GPT-2's, on every device)."""
    x = floating(self, "gelu")
    if approximate == "tanh":
        return run1(ops.gelu, x)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    special = x._backend.special
    if not special.available:
        raise NotImplementedError(
            f"gelu: the exact form (approximate='none', the default) needs erf, which {x._backend.device} does "
            f"not have ({special.why}); pass approximate='tanh' for the tanh approximation, which runs on every "
            "device"
        )
    return run1(ops.gelu_erf, x)


def sigmoid(self):
    """1 / (1 + exp(-x)), without overflow for any real input; complex input (whose
    gradient is holomorphic, as PyTorch's) through ``exp``."""
    x = floating(self)
    if x.dtype.kind == "c":
        return 1.0 / (1.0 + elementwise.exp(-x))
    return run1(ops.sigmoid, x)


def softplus(self):
    """``log(1 + exp(x))``, computed without overflow."""
    return run1(ops.softplus, floating(self, "softplus"))


def _zero_d_axis(axis, op):
    """A 0-d tensor takes axis 0 or -1 (or none), as in PyTorch."""
    if axis is None:
        return
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{op}: axis must be an integer, got {type(axis).__name__}")
    if axis not in (0, -1):
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of 0 dimensions")


def softmax(self, axis: int | None = None, *, dim=None):
    """exp(x) / sum(exp(x)) along ``axis`` (or PyTorch's ``dim=``; the last by default),
    shifted by the max (no overflow)."""
    axis = torch_axis("softmax", axis, dim)[0]
    self = floating(self, "softmax")
    if self.ndim == 0:  # one value (axis 0 or -1, as PyTorch): softmax over it, through a 1-element axis
        _zero_d_axis(axis, "softmax")
        return manipulation.reshape(manipulation.reshape(self, (1,)).softmax(0), ())
    return run1(ops.softmax, self, normalize_axis(-1 if axis is None else axis, self.ndim, "softmax"))


def log_softmax(self, axis: int | None = None, *, dim=None):
    """log(softmax(x)) along ``axis`` (or ``dim=``; the last by default), computed as
    ``z - log(sum(exp(z)))``, ``z = x - max(x)``."""
    axis = torch_axis("log_softmax", axis, dim)[0]
    self = floating(self, "log_softmax")
    if self.ndim == 0:  # one value: log_softmax over it (0), as PyTorch
        _zero_d_axis(axis, "log_softmax")
        return manipulation.reshape(manipulation.reshape(self, (1,)).log_softmax(0), ())
    return run1(ops.log_softmax, self, normalize_axis(-1 if axis is None else axis, self.ndim, "log_softmax"))


def clip(self, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002
    """Limit values to ``[min, max]`` (numbers or tensors; either may be None, not
    both): the array method's and PyTorch's names, or NumPy's function's ``a_min``/``a_max``."""
    if (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise TypeError("clip: give min or a_min, max or a_max, not both")
    low, high = a_min if a_min is not None else min, a_max if a_max is not None else max
    if low is None and high is None:
        raise ValueError("clip: give min, max or both")
    for bound in (low, high):
        if bound is not None and not isinstance(bound, Tensor) and (
            isinstance(bound, (bool, str)) or not isinstance(bound, (int, float))
        ):
            raise TypeError(f"clip: bounds must be real numbers or tensors, got {type(bound).__name__}")
    return elementwise.clip(self, min=low, max=high)


def clamp(self, min=None, max=None):  # noqa: A002
    """PyTorch's name for :meth:`clip`."""
    return clip(self, min, max)


METHODS.update((f.__name__, f) for f in (relu, leaky_relu, gelu, sigmoid, softplus, softmax, log_softmax, clip,
                                          clamp))


# ---- shape ------------------------------------------------------------------------------------


def flatten(self, start_dim: int = 0, end_dim: int = -1):
    """Merge axes ``start_dim..end_dim`` (all, by default) into one."""
    ndim = self.ndim
    if ndim == 0:
        return run1(ops.reshape, self, (1,))
    start = normalize_axis(start_dim, ndim, "flatten")
    end = normalize_axis(end_dim, ndim, "flatten")
    if start > end:  # PyTorch: "flatten() has invalid args: start_dim cannot come after end_dim"
        raise ValueError(f"flatten: start_dim cannot come after end_dim, got start_dim={start_dim} "
                         f"and end_dim={end_dim} for a tensor of {ndim} dimensions")
    shape = self.shape
    new = shape[:start] + (-1,) + shape[end + 1:]
    check_reshape(shape, new, "flatten")
    return run1(ops.reshape, self, new)


def transpose(self, *axes):
    """``t.transpose()`` reverses the axes (NumPy); ``t.transpose(a, b)`` swaps two axes
    on any rank (PyTorch); ``t.transpose(axes)`` with a full permutation permutes."""
    ndim = self.ndim
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    if not axes:
        axes = tuple(range(ndim))[::-1]
    elif len(axes) == 2:
        i, j = (normalize_axis(a, ndim, "transpose") for a in axes)
        perm = list(range(ndim))
        perm[i], perm[j] = perm[j], perm[i]
        axes = tuple(perm)
    return manipulation.permute_dims(self, axes)


def _T(self):
    return manipulation.permute_dims(self, tuple(range(self.ndim))[::-1])


def _mT(self):
    if self.ndim < 2:
        raise ValueError(f"mT: a tensor of shape {self.shape} has fewer than 2 axes")
    perm = list(range(self.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return manipulation.permute_dims(self, tuple(perm))


METHODS.update((f.__name__, f) for f in (flatten, transpose))
Tensor.T = property(_T, doc="The tensor with its axes reversed.")
Tensor.mT = property(_mT, doc="The tensor with its last two axes swapped (a stack of matrices transposed).")


# ---- dtype shortcuts (PyTorch) ---------------------------------------------------------------


def _cast(name):
    def method(self):
        return self.astype(name)

    method.__name__ = method.__qualname__ = {"float32": "float", "float64": "double", "int64": "long",
                                              "int32": "int", "bool": "bool"}[name]
    method.__doc__ = f"This tensor as {name} (PyTorch's ``t.{method.__name__}()``)."
    return method


METHODS.update((m.__name__, m) for m in map(_cast, ("float32", "float64", "int64", "int32", "bool")))


def copy(self):
    """A copy with its own memory; differentiable (PyTorch's ``clone``)."""
    return run1(ops.copy, self)


METHODS.update(copy=copy, clone=copy)


# ---- more of PyTorch's everyday names ---------------------------------------------------------


def dim(self) -> int:
    """The number of axes (PyTorch's ``t.dim()``; ``t.ndim`` in the standard)."""
    return self.ndim


def pow(self, exponent):  # noqa: A001
    """``t ** exponent`` (PyTorch's ``t.pow``)."""
    return self ** exponent


def masked_fill(self, mask, value):
    """A copy with ``value`` where the bool tensor ``mask`` (broadcasting) is True
    (PyTorch's ``masked_fill``): ``lp.where(mask, value, t)`` in this tensor's dtype (a
    Python number is cast to it, as PyTorch: 2.5 into an integer tensor is 2; a 0-d
    tensor value is cast differentiably); the gradient passes where ``mask`` is False."""
    kind = self.dtype.kind
    if isinstance(value, Tensor):
        if value.dtype != self.dtype:
            value = value.astype(self.dtype)
    elif isinstance(value, (bool, int, float)) and not isinstance(value, complex):
        value = bool(value) if kind == "b" else int(value) if kind in "iu" else float(value)
    return searching.where(mask, value, self)


def zero_(self):
    """Set every element to 0, in place (PyTorch's ``zero_``; ``t[...] = 0``); returns ``t``."""
    with self._backend.context():  # as t[...] = v: on the tensor's GPU where there are several
        setitem(self, ..., 0, name="zero_")
    return self


def fill_(self, value):
    """Set every element to ``value``, in place (``t[...] = value``); returns ``t``."""
    with self._backend.context():  # as t[...] = v: on the tensor's GPU where there are several
        setitem(self, ..., value, name="fill_")
    return self


def copy_(self, src):
    """Write ``src`` (broadcasting, cast to this dtype) into this tensor, in place
    (``t[...] = src``; the gradient of ``src`` is recorded as for any setitem); returns ``t``."""
    with self._backend.context():  # as t[...] = v: on the tensor's GPU where there are several
        setitem(self, ..., src, name="copy_")
    return self


def add_(self, other, *, alpha=1):
    """``t += alpha * other``, in place (PyTorch's ``add_``); returns ``t``."""
    self += other if alpha == 1 else other * alpha
    return self


def sub_(self, other, *, alpha=1):
    """``t -= alpha * other``, in place (PyTorch's ``sub_``); returns ``t``."""
    self -= other if alpha == 1 else other * alpha
    return self


def mul_(self, other):
    """``t *= other``, in place; returns ``t``."""
    self *= other
    return self


def div_(self, other):
    """``t /= other``, in place; returns ``t``."""
    self /= other
    return self


METHODS.update((f.__name__, f) for f in (dim, pow, masked_fill, zero_, fill_, copy_, add_, sub_, mul_, div_))


# ---- PyTorch's in-place variants: ``t.exp_()``, ``t.clamp_(lo, hi)``... ---------------------------

def _kind(dtype) -> int:
    """A dtype's kind, in the order values may be cast in place: 0 bool, 1 integer, 2
    real floating, 3 complex."""
    name = str(dtype)
    return 0 if name == "bool" else 3 if name.startswith("complex") else 2 if name.startswith("float") else 1


def _write_result(self, result, name):
    """``result`` written into ``self`` in place (``t[...] = result``: recorded as any
    setitem, so gradients flow through it and a leaf that requires grad refuses it);
    ``TypeError`` where ``result``'s kind of dtype is above ``self``'s (floats into an
    integer tensor: PyTorch's "result type can't be cast"); a float64 result in a
    float32 tensor is cast, as PyTorch's."""
    if not isinstance(self, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(self).__name__}")
    if _kind(result.dtype) > _kind(self.dtype):
        raise TypeError(f"{name}: the result has dtype {result.dtype}, which cannot be written in place into a "
                        f"tensor of dtype {self.dtype} (shape {self.shape}); use {name[:-1]}() for a new tensor")
    if tuple(result.shape) != tuple(self.shape):
        raise ValueError(f"{name}: the result has shape {result.shape}, not the tensor's {self.shape} (in place, "
                         "the operands must broadcast to the tensor's shape)")
    with self._backend.context():  # as t[...] = v: on the tensor's GPU where there are several
        setitem(self, ..., result, name=name)
    return self


def _in_place(method_name, method):
    """The in-place variant of the method ``method_name`` (``method``)."""

    def in_place(self, *args, **kwargs):
        return _write_result(self, method(_before(self, *args, *kwargs.values()), *args, **kwargs),
                             f"{method_name}_")

    in_place.__name__ = in_place.__qualname__ = f"{method_name}_"
    in_place.__doc__ = (f"``t.{method_name}(...)`` written into ``t``, in place (PyTorch's ``{method_name}_``); "
                        "returns ``t``.")
    return in_place


def _before(t, *operands):
    """``t``'s value before the change, for the operation that computes the new one: a
    copy where a graph is recorded (``t`` or an operand requires grad: the operation may
    save ``t``, which the write then changes; PyTorch saves the original too), else
    ``t`` itself."""
    graph = is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in (t, *operands))
    return t.clone() if graph else t


def neg_(self):
    """``t = -t``, in place; returns ``t``."""
    return _write_result(self, -self, "neg_")  # (negation saves nothing)


def addcmul_(self, tensor1, tensor2, *, value=1):
    """``t += value * tensor1 * tensor2``, in place (PyTorch's ``addcmul_``); returns ``t``."""
    return _write_result(self, self + tensor1 * tensor2 * value if value != 1 else self + tensor1 * tensor2,
                         "addcmul_")  # (a sum saves neither term)


def addcdiv_(self, tensor1, tensor2, *, value=1):
    """``t += value * tensor1 / tensor2``, in place (PyTorch's ``addcdiv_``); returns ``t``."""
    return _write_result(self, self + tensor1 / tensor2 * value if value != 1 else self + tensor1 / tensor2,
                         "addcdiv_")


def lerp_(self, end, weight):
    """``t += weight * (end - t)``, in place (PyTorch's ``lerp_``); returns ``t``."""
    return _write_result(self, self + (end - self) * weight, "lerp_")  # (saves weight and end - t only)


def masked_fill_(self, mask, value):
    """:meth:`masked_fill` written into ``t``, in place; returns ``t``."""
    return _write_result(self, masked_fill(_before(self, value), mask, value), "masked_fill_")


_IN_PLACE = ("abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "clamp", "clip", "cos", "cosh", "exp",
             "expm1", "floor", "log", "log10", "log1p", "log2", "pow", "reciprocal", "relu", "round", "sigmoid",
             "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc")
METHODS.update((f.__name__, f) for f in (neg_, addcmul_, addcdiv_, lerp_, masked_fill_))


def _registry() -> dict:
    """Every Tensor method named after a namespace function, by name: the element-wise
    table's, then each module's ``METHODS``, then this module's (a later one replaces an
    earlier one of the same name: the familiar signature wins over the standard's)."""
    registry = dict(ELEMENTWISE)
    for module in (creation, indexing, linalg, manipulation, searching, sets, sorting, statistical, utility,
                   torch_names):
        registry.update(module.METHODS)
    registry.update(METHODS)
    registry.update((f"{name}_", _in_place(name, registry[name])) for name in _IN_PLACE)
    return registry


attach(_registry())
