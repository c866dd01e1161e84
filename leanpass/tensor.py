"""The Tensor: an array of any array-API library, plus the links of the graph.

Operators and methods check their input here (devices, shapes, axes, indices)
and then apply an operation from :mod:`leanpass.ops` to the raw arrays.
"""

from __future__ import annotations

import math
import numbers
import operator

from . import ops
from .autograd import _state as _grad_state
from .autograd import run_backward, zero_graph_grads
from .autograd import sequence as _sequence
from .backends import (
    FLOAT_DTYPES,
    backend_of_array,
    dtype_name,
    float_dtype_name,
    get_backend,
    get_default_dtype,
    host_array,
    transfer,
)

__all__ = ["Tensor", "as_tensor", "apply"]


class Tensor:
    """An n-dimensional array that records the operations made on it.

    ``Tensor(data, requires_grad=False, name=None, *, device=None, dtype=None)``:
    ``data`` is a number, a (nested) list, an array of any registered library, or a
    Tensor. Host data (numbers, lists, NumPy arrays) goes to ``device`` (default:
    :func:`leanpass.get_default_device`); a CuPy or ``array_api_strict`` array keeps
    its device unless ``device`` asks otherwise. Integers and booleans become the
    default float dtype; float arrays keep theirs unless ``dtype`` is given.
    The tensor owns a copy of the data; :func:`as_tensor` shares memory instead.
    """

    __slots__ = ("_data", "_grad", "_backend", "_prev", "_backward", "_op", "_retain", "_seq",
                 "_read_zeros", "requires_grad", "name", "__weakref__")

    # NumPy and CuPy arrays on the left of an operator defer to the Tensor.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, data, requires_grad=False, name=None, *, device=None, dtype=None):
        _init(self, data, requires_grad, name, device, dtype, copy=True)

    # ---- attributes -------------------------------------------------------------
    @property
    def data(self):
        """The backend array (a ``numpy.ndarray`` on ``cpu``, a ``cupy.ndarray`` on ``cuda``)."""
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, Tensor):
            value = value._data
        backend = backend_of_array(value)
        if backend is None:  # a NumPy array: this tensor's device if it holds NumPy arrays, else cpu
            backend = self._backend if type(value) is self._backend.array_type else get_backend("cpu")
        if type(value) is not backend.array_type or dtype_name(value.dtype) not in FLOAT_DTYPES:
            raise TypeError(
                f"Tensor.data must be a float32 or float64 array, got {type(value).__name__}"
                + (f" of dtype {value.dtype}" if hasattr(value, "dtype") else "")
            )
        self._data = value
        self._backend = backend

    @property
    def grad(self):
        """The gradient (an array of ``data``'s shape), or ``None``.

        A leaf that requires grad reads zeros until a backward pass adds to it; the
        zeros are allocated only when read. A non-leaf has a gradient only after
        :meth:`retain_grad`.
        """
        g = self._grad
        if g is None and self.requires_grad and (self._retain or not self._prev):
            g = self._grad = self._backend.zeros(self._data.shape, self._data.dtype)
            self._read_zeros = True  # no gradient arrived yet: optimizers skip this tensor
        return g

    @grad.setter
    def grad(self, value):
        if value is not None:
            value = Tensor(value, device=self.device, dtype=self.dtype)._data
            if value.shape != self._data.shape:
                raise ValueError(
                    f"Tensor.grad: gradient of shape {value.shape} does not match the "
                    f"tensor's shape {self._data.shape}"
                )
        self._grad = value
        self._read_zeros = False

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def device(self) -> str:
        """The canonical device string: ``"cpu"``, ``"cuda:0"``, ``"strict:1"``..."""
        return self._backend.device

    @property
    def is_leaf(self) -> bool:
        return not self._prev

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def __repr__(self) -> str:
        text = f"Tensor(shape={self.shape}, requires_grad={self.requires_grad}"
        if self.name is not None:
            text += f", name={self.name}"
        if self._backend.device != "cpu":
            text += f", device={self._backend.device}"
        return text + ")"

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return self.item()

    # ---- conversions ------------------------------------------------------------
    def item(self) -> float:
        """The value of a one-element tensor as a Python float."""
        data = self._data
        if math.prod(data.shape) != 1:
            raise ValueError(f"item: only a tensor of one element converts to a number, got shape {self.shape}")
        return float(self._backend.xp.reshape(data, ()))

    def numpy(self):
        """A NumPy copy of the data on the host."""
        return self._backend.to_host(self._data)

    def tolist(self):
        return self.numpy().tolist()

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data, outside the graph."""
        return _make(self._data, self._backend, "leaf", (), None, False)

    def to(self, device=None, dtype=None) -> Tensor:
        """This tensor on another device and/or dtype (itself if nothing changes).
        Differentiable: the gradient flows back to the original device and dtype."""
        if dtype is None and device is not None and (
            device in FLOAT_DTYPES if isinstance(device, str) else not hasattr(device, "device_type")
        ):  # t.to("float32"), or a dtype object: a dtype given in the device's place
            device, dtype = None, device
        out = self
        if dtype is not None:
            out = out.astype(dtype)
        if device is not None:
            target = get_backend(device)
            if target is not out._backend:
                moved, backward = ops.to(out._backend, out._data, target)
                out = _make(moved, target, "to", (out,), backward, out.requires_grad)
        return out

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Tensor:
        return self.to(f"cuda:{index}")

    def astype(self, dtype) -> Tensor:
        """This tensor in another float dtype (differentiable; itself if unchanged)."""
        name = float_dtype_name(dtype, "astype")
        if dtype_name(self._data.dtype) == name:
            return self
        return _apply1(ops.astype, "astype", self, self._backend.dtype(name))

    # ---- autodiff ---------------------------------------------------------------
    def backward(self, gradient=None, *, retain_graph: bool = False) -> None:
        """Add d(self)/d(leaf) times ``gradient`` (default: ones) into every leaf's ``.grad``.

        The graph's saved arrays are freed afterwards unless ``retain_graph=True``.
        """
        if not self.requires_grad:
            raise RuntimeError(
                f"backward: the tensor {self!r} does not require grad and has no graph; "
                "create its inputs with requires_grad=True"
            )
        backend, data = self._backend, self._data
        if gradient is None:
            grad = backend.ones(data.shape, data.dtype)
        else:
            grad = as_tensor(gradient, device=backend.device, dtype=dtype_name(data.dtype))._data
            if grad.shape != data.shape:
                raise ValueError(
                    f"backward: gradient of shape {tuple(grad.shape)} does not match the "
                    f"tensor of shape {self.shape}"
                )
            grad = backend.copy(grad)
        run_backward(self, grad, retain_graph)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` during backward."""
        if self._prev:
            self._retain = True

    def zero_grad_all(self) -> None:
        """Reset ``.grad`` of every tensor in this tensor's graph (reads as zeros)."""
        zero_graph_grads(self)

    # ---- arithmetic: see _binary below -------------------------------------------
    def __matmul__(self, other):
        other = _operand(self, other)
        if other is NotImplemented or not isinstance(other, Tensor):
            return NotImplemented
        return _matmul(self, other)

    def __rmatmul__(self, other):
        other = _operand(self, other)
        if other is NotImplemented or not isinstance(other, Tensor):
            return NotImplemented
        return _matmul(other, self)

    def matmul(self, other) -> Tensor:
        """Matrix product, as the ``@`` operator (1-D and batched N-D operands)."""
        return self @ other

    def __neg__(self):
        return _apply1(ops.neg, "neg", self)

    def __pos__(self):
        return self

    # ---- reductions -------------------------------------------------------------
    def sum(self, axis=None, keepdims: bool = False) -> Tensor:
        return _apply1(ops.sum, "sum", self, _axes(axis, self._data.ndim, "sum"), keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> Tensor:
        return _apply1(ops.mean, "mean", self, _axes(axis, self._data.ndim, "mean"), keepdims)

    def max(self, axis=None, keepdims: bool = False) -> Tensor:
        if math.prod(self._data.shape) == 0:
            raise ValueError(f"max: the tensor of shape {self.shape} is empty")
        return _apply1(ops.max, "max", self, _axes(axis, self._data.ndim, "max"), keepdims)

    # ---- element-wise -----------------------------------------------------------
    def relu(self) -> Tensor:
        return _apply1(ops.relu, "relu", self)

    def leaky_relu(self, negative_slope: float = 0.01) -> Tensor:
        return _apply1(ops.leaky_relu, "leaky_relu", self, float(negative_slope))

    def gelu(self) -> Tensor:
        return _apply1(ops.gelu, "gelu", self)

    def exp(self) -> Tensor:
        return _apply1(ops.exp, "exp", self)

    def log(self) -> Tensor:
        return _apply1(ops.log, "log", self)

    def sigmoid(self) -> Tensor:
        return _apply1(ops.sigmoid, "sigmoid", self)

    def softplus(self) -> Tensor:
        """``log(1 + exp(x))``, computed without overflow."""
        return _apply1(ops.softplus, "softplus", self)

    def tanh(self) -> Tensor:
        return _apply1(ops.tanh, "tanh", self)

    def abs(self) -> Tensor:
        return _apply1(ops.abs, "abs", self)

    def __abs__(self):
        return self.abs()

    def sqrt(self) -> Tensor:
        return _apply1(ops.sqrt, "sqrt", self)

    def clip(self, a_min=None, a_max=None) -> Tensor:
        """Limit values to ``[a_min, a_max]`` (either may be None, not both)."""
        if a_min is None and a_max is None:
            raise ValueError("clip: give a_min, a_max or both")
        low = None if a_min is None else _bound(a_min, "clip")
        high = None if a_max is None else _bound(a_max, "clip")
        return _apply1(ops.clip, "clip", self, low, high)

    def clamp(self, min=None, max=None) -> Tensor:
        """PyTorch's name for :meth:`clip`."""
        return self.clip(min, max)

    # ---- along an axis ----------------------------------------------------------
    def softmax(self, axis: int = -1) -> Tensor:
        return _apply1(ops.softmax, "softmax", self, _axis(axis, self._data.ndim, "softmax"))

    def log_softmax(self, axis: int = -1) -> Tensor:
        return _apply1(ops.log_softmax, "log_softmax", self, _axis(axis, self._data.ndim, "log_softmax"))

    # ---- shape ------------------------------------------------------------------
    def reshape(self, *shape) -> Tensor:
        """A tensor of the same data in another shape (one entry may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(operator.index(n) for n in shape)
        _check_reshape(self.shape, shape, "reshape")
        return _apply1(ops.reshape, "reshape", self, shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge axes ``start_dim..end_dim`` (all, by default) into one."""
        ndim = self._data.ndim
        if ndim == 0:
            return _apply1(ops.reshape, "flatten", self, (1,))
        start = _axis(start_dim, ndim, "flatten")
        end = _axis(end_dim, ndim, "flatten")
        shape = self.shape
        new = shape[:start] + (-1,) + shape[end + 1:] if start <= end else shape
        return _apply1(ops.reshape, "flatten", self, new)

    def transpose(self, *axes) -> Tensor:
        """Permute axes: all reversed by default, as in NumPy; two axes of an N-D
        tensor (N > 2) are swapped, as in PyTorch."""
        ndim = self._data.ndim
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(range(ndim))[::-1]
        elif len(axes) == 2 and ndim > 2:
            i, j = (_axis(a, ndim, "transpose") for a in axes)
            perm = list(range(ndim))
            perm[i], perm[j] = perm[j], perm[i]
            axes = tuple(perm)
        else:
            axes = tuple(_axis(a, ndim, "transpose") for a in axes)
            if sorted(axes) != list(range(ndim)):
                raise ValueError(f"transpose: axes {axes} are not a permutation of the axes of shape {self.shape}")
        return _apply1(ops.transpose, "transpose", self, axes)

    def __getitem__(self, index) -> Tensor:
        with self._backend.context():  # index arrays are built and checked on this device
            return _getitem(self, index)


def as_tensor(data, *, device=None, dtype=None) -> Tensor:
    """A Tensor sharing ``data``'s memory where it can (same library, device and
    dtype), as ``torch.as_tensor``; ``Tensor(data)`` always copies."""
    t = _new(Tensor)
    _init(t, data, False, None, device, dtype, copy=False)
    return t


def _init(self, data, requires_grad, name, device, dtype, copy):
    if dtype is not None:
        dtype = float_dtype_name(dtype)
    if isinstance(data, Tensor):
        src, array = data._backend, data._data
    else:
        src, array = backend_of_array(data), data
    given = array
    if src is None:  # host data
        backend = get_backend(device)
        host = host_array(data)
        if dtype is None:
            name_ = dtype_name(host.dtype)
            from_array = hasattr(data, "dtype")  # NumPy arrays and scalars keep float dtypes
            dtype = name_ if from_array and name_ in FLOAT_DTYPES else get_default_dtype()
        array = backend.from_host(host, dtype)
    else:
        backend = src if device is None else get_backend(device)
        if dtype is None:
            name_ = dtype_name(array.dtype)
            dtype = name_ if name_ in FLOAT_DTYPES else get_default_dtype()
        if dtype_name(array.dtype) != dtype:
            with src.context():
                array = src.xp.astype(array, src.dtype(dtype))
        array = transfer(array, src, backend)
    if type(array) is not backend.array_type:
        array = backend.xp.asarray(array)
    elif copy and array is given:  # nothing converted it: take a copy the tensor owns
        array = backend.copy(array)
    self._data = array
    self._backend = backend
    self._grad = None
    self._prev = ()
    self._backward = None
    self._op = "leaf"
    self._retain = False
    self.requires_grad = bool(requires_grad)
    self.name = name


# ---- applying operations ---------------------------------------------------------

_new = object.__new__


def _make(data, backend, op, prev, backward, requires_grad):
    """Wrap an operation's output array as a Tensor linked into the graph."""
    t = _new(Tensor)
    if type(data) is not backend.array_type:  # NumPy returns scalars for 0-d results
        data = backend.xp.asarray(data)
    t._data = data
    t._backend = backend
    t._grad = None
    t._op = op
    t._retain = False
    t.name = None
    if requires_grad and _grad_state.enabled:
        t.requires_grad = True
        t._prev = prev
        t._backward = backward
        t._seq = next(_sequence)
    else:
        t.requires_grad = False
        t._prev = ()
        t._backward = None
    return t


def apply(fn, *inputs: Tensor, op: str | None = None, **params) -> Tensor:
    """Apply a custom operation to Tensors on one device.

    ``fn(backend, *arrays, **params)`` computes the output array with
    ``backend.xp`` and returns it with ``backward(grad_out) -> one gradient per
    input`` (arrays, or None); see :mod:`leanpass.ops` for examples. The result is
    linked into the graph under the name ``op`` (default: ``fn.__name__``).
    """
    if not inputs:
        raise TypeError("apply: give at least one input Tensor")
    backend = None
    arrays = []
    requires_grad = False
    for t in inputs:  # one plain loop: this runs for every layer of every step
        if not isinstance(t, Tensor):
            raise TypeError(f"apply: the inputs must be Tensors, got {type(t).__name__}")
        if backend is None:
            backend = t._backend
        elif t._backend is not backend:
            raise ValueError(_device_message(op or fn.__name__, inputs[0], t))
        arrays.append(t._data)
        requires_grad = requires_grad or t.requires_grad
    out, backward = _run(fn, backend, *arrays, **params)
    return _make(out, backend, op or fn.__name__, inputs, backward, requires_grad)


def _run(fn, backend, *args, **params):
    """``fn(backend, *args)`` with the backend's device made current where it needs
    that (``cuda:N`` on a machine of several GPUs); a plain call everywhere else."""
    guard = backend.guard
    if guard is None:
        return fn(backend, *args, **params)
    with guard:
        return fn(backend, *args, **params)


def _apply1(fn, op, a, *params):
    backend = a._backend
    out, backward = fn(backend, a._data, *params) if backend.guard is None else _run(fn, backend, a._data, *params)
    return _make(out, backend, op, (a,), backward, a.requires_grad)


def _apply2(fn, op, a, b):
    backend = a._backend
    if b._backend is not backend:
        raise ValueError(_device_message(op, a, b))
    try:
        if backend.guard is None:
            out, backward = fn(backend, a._data, b._data)
        else:
            out, backward = _run(fn, backend, a._data, b._data)
    except (ValueError, TypeError):
        _check_broadcast(op, a.shape, b.shape)
        raise
    return _make(out, backend, op, (a, b), backward, a.requires_grad or b.requires_grad)


def _binary(op, tensor_fn, scalar_fn, reflected=False):
    """The method for a binary operator: Tensor (op) Tensor, Tensor (op) Python number,
    and anything else ``_operand`` can turn into one of those."""

    def method(self, other):
        kind = type(other)
        if kind is float or kind is int:  # the hot path: no conversion, no second tensor
            backend = self._backend
            if backend.guard is None:
                out, backward = scalar_fn(backend, self._data, other)
            else:
                out, backward = _run(scalar_fn, backend, self._data, other)
            return _make(out, backend, op, (self,), backward, self.requires_grad)
        if kind is not Tensor:
            other = _operand(self, other)
            if other is NotImplemented:
                return NotImplemented
            if type(other) is not Tensor:  # a number in disguise (bool, NumPy scalar)
                return method(self, other)
        return _apply2(tensor_fn, op, other, self) if reflected else _apply2(tensor_fn, op, self, other)

    return method


Tensor.__add__ = _binary("+", ops.add, ops.add_scalar)
Tensor.__radd__ = _binary("+", ops.add, ops.add_scalar, reflected=True)
Tensor.__sub__ = _binary("-", ops.sub, ops.sub_scalar)
Tensor.__rsub__ = _binary("-", ops.sub, ops.rsub_scalar, reflected=True)
Tensor.__mul__ = _binary("*", ops.mul, ops.mul_scalar)
Tensor.__rmul__ = _binary("*", ops.mul, ops.mul_scalar, reflected=True)
Tensor.__truediv__ = _binary("/", ops.div, ops.div_scalar)
Tensor.__rtruediv__ = _binary("/", ops.div, ops.rdiv_scalar, reflected=True)
Tensor.__pow__ = _binary("**", ops.pow, ops.pow_scalar)
Tensor.__rpow__ = _binary("**", ops.pow, ops.rpow_scalar, reflected=True)


def _operand(like, other):
    """The other operand of a binary operator: a Tensor, a Python number, or NotImplemented.

    Host data (lists, NumPy arrays) goes to ``like``'s device in ``like``'s dtype;
    arrays of other libraries keep their device (and so may mismatch).
    """
    if isinstance(other, Tensor):
        return other
    if isinstance(other, bool) or isinstance(other, numbers.Real):
        if isinstance(other, numbers.Integral):
            return int(other)
        return float(other)
    if isinstance(other, (str, bytes, complex)) or other is None:
        return NotImplemented
    try:
        if backend_of_array(other) is None:
            return as_tensor(other, device=like._backend, dtype=dtype_name(like._data.dtype))
        return as_tensor(other, dtype=dtype_name(like._data.dtype))
    except TypeError:
        return NotImplemented


def _matmul(a, b):
    backend = a._backend
    if b._backend is not backend:
        raise ValueError(_device_message("matmul", a, b))
    if a._data.ndim == 0 or b._data.ndim == 0:
        raise ValueError(f"matmul: operands must have at least one axis, got shapes {a.shape} and {b.shape}")
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b._data.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} are not aligned: {k_a} (last axis of the "
            f"first) != {k_b} ({'second-to-last' if b._data.ndim > 1 else 'only'} axis of the second)"
        )
    try:
        out, backward = _run(ops.matmul, backend, a._data, b._data, a.requires_grad, b.requires_grad)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not broadcast: {exc}") from None
    return _make(out, backend, "@", (a, b), backward, a.requires_grad or b.requires_grad)


# ---- checks at the boundary -----------------------------------------------------------


def _device_message(op, a, b):
    return (
        f"{op}: operands are on different devices, {a.device} and {b.device} "
        f"(shapes {a.shape} and {b.shape}); move one with .to({a.device!r})"
    )


def broadcast_shapes(op, *shapes):
    """The broadcast of ``shapes`` (NumPy rules), or ``ValueError`` naming them and ``op``."""
    ndim = max(len(s) for s in shapes)
    result = []
    for i in range(ndim):
        size = 1
        for shape in shapes:
            n = shape[i - ndim + len(shape)] if i - ndim + len(shape) >= 0 else 1
            if n != 1:
                if size != 1 and size != n:
                    raise ValueError(
                        f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast"
                    )
                size = n
        result.append(size)
    return tuple(result)


def _check_broadcast(op, *shapes):
    broadcast_shapes(op, *shapes)


def _axis(axis, ndim, op):
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {type(axis).__name__}") from None
    if not -ndim <= axis < ndim:
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of {ndim} dimensions")
    return axis % ndim


def _axes(axis, ndim, op):
    """Normalise ``axis`` (None, an int or a tuple of ints) to a tuple of non-negative axes.
    A 0-d tensor takes axis 0 or -1 too, reducing nothing (as in PyTorch)."""
    if axis is None:
        return tuple(range(ndim))
    many = isinstance(axis, (tuple, list))
    axes = tuple(axis) if many else (axis,)
    if ndim == 0:
        for a in axes:
            try:
                ok = operator.index(a) in (0, -1)
            except TypeError:
                raise TypeError(f"{op}: axis must be an integer, got {type(a).__name__}") from None
            if not ok:
                raise IndexError(f"{op}: axis {a} is out of range for a tensor of 0 dimensions")
        return ()
    axes = tuple(_axis(a, ndim, op) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {tuple(axis)}")
    return axes


def _bound(value, op):
    if isinstance(value, Tensor):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: bounds must be real numbers, got {type(value).__name__}")
    return float(value)


def _check_reshape(old, new, op):
    size = 1
    for n in old:
        size *= n
    known = 1
    unknown = 0
    for n in new:
        if n == -1:
            unknown += 1
        elif n < 0:
            unknown = 2
            break
        else:
            known *= n
    ok = (unknown == 0 and known == size) or (unknown == 1 and known and size % known == 0)
    if not ok:
        raise ValueError(f"{op}: cannot reshape a tensor of shape {tuple(old)} into shape {new}")


# ---- indexing ---------------------------------------------------------------------------


def _index_array(t, item):
    """An index array (integer or boolean) on ``t``'s device, from a Tensor, array or list."""
    backend = t._backend
    xp = backend.xp
    if isinstance(item, Tensor):
        if item._backend is not backend:
            raise ValueError(_device_message("getitem", t, item))
        array = item._data
        if bool(xp.any(xp.floor(array) != array)):
            raise IndexError("getitem: a float tensor used as an index must hold whole numbers")
        return xp.astype(array, xp.int64)
    src = backend_of_array(item)
    if src is None:
        host = host_array(item, "getitem")
        array = backend.from_host(host, "int64" if host.size == 0 else None)
    elif src is not backend:
        raise ValueError(
            f"getitem: the index array is on {src.device} but the tensor of shape {t.shape} is on {t.device}"
        )
    else:
        array = item
    kind = dtype_name(array.dtype)
    if kind == "bool" or kind.startswith(("int", "uint")):
        return array if kind == "bool" or kind == "int64" else xp.astype(array, xp.int64)
    raise IndexError(f"getitem: index arrays must hold integers or booleans, got dtype {kind}")


def _out_of_range(index, axis, size, shape):
    return IndexError(f"getitem: index {index} is out of range for axis {axis} with size {size} (tensor shape {shape})")


def _checked_positions(t, array, axis):
    """``array`` of indices into ``axis`` of ``t``, range-checked, negatives wrapped."""
    xp = t._backend.xp
    n = t.shape[axis]
    if math.prod(array.shape):
        low, high = int(xp.min(array)), int(xp.max(array))
        if low < -n or high >= n:
            raise _out_of_range(high if high >= n else low, axis, n, t.shape)
    return xp.where(array < 0, array + n, array)


def _getitem(t, index):
    items = index if isinstance(index, tuple) else (index,)
    parsed = []
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            parsed.append(item)
        elif isinstance(item, bool):
            raise IndexError("getitem: a bool is not an index; use a boolean array as a mask")
        elif isinstance(item, numbers.Integral):
            parsed.append(operator.index(item))
        elif isinstance(item, Tensor) and item.ndim == 0:
            value = item.item()
            if value != int(value):
                raise IndexError(f"getitem: a float tensor used as an index must hold whole numbers, got {value}")
            parsed.append(int(value))
        else:
            parsed.append(_index_array(t, item))
    arrays = [p for p in parsed if not (p is None or p is Ellipsis or isinstance(p, (int, slice)))]
    ndim = t._data.ndim
    if sum(1 for p in parsed if p is Ellipsis) > 1:
        raise IndexError("getitem: an index can only have a single ellipsis ('...')")
    used = sum(1 if isinstance(p, (int, slice)) else 0 if p is None or p is Ellipsis else
               (p.ndim if dtype_name(p.dtype) == "bool" else 1) for p in parsed)
    if used > ndim:
        raise IndexError(f"getitem: too many indices for a tensor of shape {t.shape}: {used} axes indexed")
    if not arrays:
        return _index_basic(t, parsed)
    if any(dtype_name(a.dtype) == "bool" for a in arrays):
        return _index_mask(t, parsed, arrays)
    return _index_integer(t, parsed)


def _expand(parsed, ndim):
    """The index with its ellipsis replaced by full slices (and missing trailing axes added)."""
    if any(p is Ellipsis for p in parsed):
        at = next(i for i, p in enumerate(parsed) if p is Ellipsis)
        rest = sum(1 for p in parsed if p is not None and p is not Ellipsis)
        return parsed[:at] + [slice(None)] * (ndim - rest) + parsed[at + 1:]
    rest = sum(1 for p in parsed if p is not None)
    return parsed + [slice(None)] * (ndim - rest)


def _in_bounds(s: slice, n: int) -> slice:
    """``s`` with its start and stop clamped into the axis, as NumPy does implicitly
    (the array API leaves out-of-bounds slices unspecified)."""
    start, stop, step = s.indices(n)
    if step > 0:
        return slice(start, max(stop, start), step)
    if start < 0:  # an empty reversed slice
        return slice(0, 0, 1)
    return slice(start, None if stop < 0 else stop, step)


def _index_basic(t, parsed):
    """Integers, slices, ``None`` and ``...``: a view of the data."""
    key = []
    axis = 0
    for p in _expand(parsed, t._data.ndim):
        if p is not None:
            n = t.shape[axis]
            if isinstance(p, int) and not -n <= p < n:
                raise _out_of_range(p, axis, n, t.shape)
            if isinstance(p, slice) and p != slice(None):
                p = _in_bounds(p, n)
            axis += 1
        key.append(p)
    key = tuple(key)
    set_key = tuple(p for p in key if p is not None)
    set_shape = t._data[set_key].shape if len(set_key) != len(key) else None
    return _apply1(ops.index_basic, "getitem", t, key, set_key, set_shape)


def _index_mask(t, parsed, arrays):
    rest = [p for p in parsed if not (p is Ellipsis or (isinstance(p, slice) and p == slice(None)))]
    mask = arrays[0]
    if len(rest) != 1 or rest[0] is not mask or parsed[0] is not mask:
        raise IndexError("getitem: a boolean mask must be the only index (optionally followed by '...')")
    if tuple(mask.shape) != t.shape[: mask.ndim]:
        raise IndexError(f"getitem: boolean mask of shape {tuple(mask.shape)} does not match tensor shape {t.shape}")
    return _apply1(ops.index_mask, "getitem", t, mask)


def _index_integer(t, parsed):
    """Integer-array indexing, as NumPy's whenever the arrays (and integers among
    them) stand on adjacent axes: ``t[idx]``, ``t[:, idx]``, ``t[rows, cols]``,
    ``t[1:, idx]``. Slices apply first; the arrays' axes then merge into one and
    a single ``take`` picks the linear positions (a scatter-add on backward)."""
    if any(p is None for p in parsed):
        raise IndexError("getitem: None (newaxis) cannot be combined with index arrays; reshape first")
    full = _expand(parsed, t._data.ndim)
    block = [i for i, p in enumerate(full) if not isinstance(p, slice)]
    first, last = block[0], block[-1]
    if last - first + 1 != len(block):
        raise IndexError(
            "getitem: index arrays (and integers among them) must stand on adjacent axes, as in "
            "t[idx], t[:, idx], t[rows, cols] or t[1:, idx]; NumPy would move their axes to the front here"
        )
    shapes = [() if isinstance(full[i], int) else tuple(full[i].shape) for i in block]
    try:
        index_shape = broadcast_shapes("getitem", *shapes)
    except ValueError:
        raise IndexError(
            f"getitem: index arrays of shapes {' and '.join(map(str, shapes))} do not broadcast"
        ) from None
    xp = t._backend.xp
    device = t._backend.xp_device
    linear = None
    for axis in block:
        p = full[axis]
        if isinstance(p, int):
            p = xp.asarray(p, dtype=xp.int64, device=device)
        p = _checked_positions(t, p, axis)
        linear = p if linear is None else linear * t.shape[axis] + p
    linear = xp.reshape(xp.broadcast_to(linear, index_shape), (-1,))
    if any(isinstance(p, slice) and p != slice(None) for p in full):
        t = _index_basic(t, [slice(None) if i in block else p for i, p in enumerate(full)])
    shape = t.shape
    if len(block) > 1:
        t = _apply1(ops.reshape, "reshape", t, shape[:first] + (-1,) + shape[last + 1:])
    out_shape = shape[:first] + index_shape + shape[last + 1:]
    if len(index_shape) == 1:
        return _apply1(ops.take, "getitem", t, linear, first)
    taken = _apply1(ops.take, "take", t, linear, first)
    return _apply1(ops.reshape, "getitem", taken, out_shape)
