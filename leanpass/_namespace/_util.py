"""What every namespace function needs: its arguments as Tensors on one device."""

from __future__ import annotations

import numbers

from .._checks import device_message, is_bool
from .._dtypes import DTYPES, dtype_name, iinfo
from .._node import as_tensor, init_tensor
from ..backends import backend_of_array, get_default_dtype, host_array
from ..tensor import Tensor

SCALARS = (bool, int, float, complex)
_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}  # kinds of dtypes, lowest first

_new = object.__new__


def floating(t, op: str | None = None):
    """``t``, or an integer or bool ``t`` as the default float dtype (the activations,
    softmax, normalisations and losses take such input so). With ``op``, a complex
    ``t`` is a ``TypeError`` naming it: the function is defined for real numbers only
    (PyTorch refuses complex input there too, where LeanPass's arithmetic would give
    a complex result that means nothing). The dtype is read through ``dtype_name``'s
    cache: this runs for every activation."""
    kind = DTYPES[dtype_name(t._data.dtype)].kind
    if kind == "f":
        return t
    if kind == "c":
        if op is not None:
            raise TypeError(f"{op}: not defined for complex input (a tensor of shape {t.shape} and dtype "
                            f"{t.dtype}); apply it to lp.real(x), lp.imag(x) or abs(x)")
        return t
    return t.astype(get_default_dtype())


def asarray_like(x, op):
    """``x`` as a Tensor: a Tensor as it is, an array of any library through
    ``asarray`` (its dtype kept); anything else is a ``TypeError`` naming ``op``."""
    if isinstance(x, Tensor):
        return x
    if backend_of_array(x) is not None or type(x).__module__.partition(".")[0] == "numpy" and hasattr(x, "shape"):
        t = _new(Tensor)
        init_tensor(t, x, False, None, None, None, copy=None, infer="standard")
        return t
    raise TypeError(
        f"{op}: expected a Tensor, got {type(x).__name__}; make one with leanpass.asarray(...)"
    )


def tensors(op, *xs):
    """``xs`` as Tensors, all on one device (``ValueError`` naming both otherwise)."""
    out = [asarray_like(x, op) for x in xs]
    first = out[0] if out else None
    for t in out[1:]:
        if t._backend is not first._backend:
            raise ValueError(device_message(op, first, t))
    return out


def pair(op, x1, x2):
    """``x1, x2`` as Tensors on one device. Host data (a list, a NumPy array) beside a
    Tensor goes to that Tensor's device, in its dtype, as an operator's operand does
    (:func:`operand`: ``A @ h`` and ``lp.linalg.solve(A, h)`` agree)."""
    if isinstance(x1, Tensor) and not isinstance(x2, Tensor) and backend_of_array(x2) is None:
        x2 = _host_operand(op, x1, x2)
    elif isinstance(x2, Tensor) and not isinstance(x1, Tensor) and backend_of_array(x1) is None:
        x1 = _host_operand(op, x2, x1)
    return tensors(op, x1, x2)


def _host_operand(op, like, data):
    found = operand(like, data)
    if not isinstance(found, Tensor):  # a Python number, a string...: not an array
        raise TypeError(f"{op}: expected a Tensor, got {type(data).__name__}; make one with leanpass.asarray(...)")
    return found


def python_number(value):
    """A NumPy scalar as the Python number it holds (NumPy and PyTorch take them where
    the standard says Python scalars); anything else as it is."""
    if type(value) in (bool, int, float, complex):  # not numpy.float64, a float subclass
        return value
    if is_bool(value) and getattr(value, "ndim", 0) == 0:  # numpy.True_
        return bool(value)
    if not isinstance(value, numbers.Number):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    # a number of no standard kind (decimal.Decimal): as it is, for the caller to refuse
    return complex(value) if isinstance(value, numbers.Complex) else value


def operand(like: Tensor, other):
    """The other operand of a binary operator or function: a Tensor, a Python number,
    or NotImplemented. Host data (lists, NumPy arrays) goes to ``like``'s device in
    ``like``'s dtype, unless it is of a higher kind (floats with an integer tensor:
    they keep their own dtype rather than being truncated) or holds integers that
    dtype cannot (they keep theirs, and promote); arrays of other libraries keep
    their device (and so may mismatch)."""
    if isinstance(other, Tensor):
        return other
    kind = type(other)
    if kind is int or kind is float or kind is bool or kind is complex:
        return other
    if isinstance(other, numbers.Number):  # NumPy scalars: as Python numbers, which do not promote
        other = python_number(other)
        return other if isinstance(other, SCALARS) else NotImplemented  # a Decimal, a Fraction...
    if isinstance(other, (str, bytes)) or other is None:
        return NotImplemented
    if type(other).__module__.startswith("numpy.ma"):  # not NotImplemented: numpy.ma would drop the mask
        host_array(other, "operand")  # raises TypeError: fill the masked values first
    try:
        if backend_of_array(other) is None:
            host = host_array(other, "operand")
            if _RANK[host.dtype.kind] > _RANK[like.dtype.kind]:  # its own dtype (not Tensor's float rule)
                return as_tensor(host, device=like._backend, dtype=dtype_name(host.dtype))
            if host.size and host.dtype.kind in "iu" and like.dtype.kind in "iu":
                limits = iinfo(like.dtype)
                if int(host.min()) < limits.min or int(host.max()) > limits.max:
                    # values the tensor's dtype cannot hold: no wrap-around, the data keeps its
                    # own dtype and the two promote (NumPy: int8 + [300] is int64 [344])
                    return as_tensor(host, device=like._backend, dtype=dtype_name(host.dtype))
            return as_tensor(host, device=like._backend, dtype=like.dtype)
        return as_tensor(other)
    except TypeError:
        return NotImplemented


def flag(name: str, key: str, value) -> bool:
    """``value`` of the bool argument ``key`` of ``name`` (``keepdims``, ``descending``
    ...): Python's or NumPy's bool; anything else (``"no"``, ``None``, ``1``) is a
    ``TypeError`` naming the function, rather than read by its truth."""
    if value is True or value is False:
        return value
    if is_bool(value) and getattr(value, "ndim", 0) == 0:  # a library's bool scalar
        return bool(value)
    raise TypeError(f"{name}: {key} must be a bool, got {type(value).__name__} {value!r}")


_VALUES_ONLY = ("max", "min")  # PyTorch's forms with dim= give (values, indices); these give values


def torch_axis(name, axis, dim, keepdims=False, keepdim=None):
    """``(axis, keepdims)`` of a method that also takes PyTorch's names ``dim=`` and
    ``keepdim=``. For ``max`` and ``min`` a ``dim=`` raises ``TypeError``:
    PyTorch's ``t.max(dim=1)`` gives values and indices, LeanPass's values only (the
    standard's and NumPy's rule), and an unpacking would silently take rows."""
    if dim is not None:
        if name in _VALUES_ONLY:
            raise TypeError(
                f"{name}: LeanPass's t.{name}(axis=...) gives the values only (as NumPy and the standard), not "
                f"PyTorch's (values, indices) of t.{name}(dim=...); call t.{name}(axis=...) and "
                f"t.arg{name}(axis=...)"
            )
        if axis is not None:
            raise TypeError(f"{name}: give axis or dim (PyTorch's name for it), not both")
        axis = dim
    if keepdim is not None:
        keepdims = keepdim
    return axis, keepdims


def refuse_positional(name, args, positional) -> None:
    """Raise ``TypeError`` for the method ``name`` given more positional ``args`` than
    the names ``positional`` it takes. For ``max`` and ``min`` (which take none) the
    message says why: NumPy's ``t.max(1)`` gives the values, PyTorch's ``(values,
    indices)``, and PyTorch's ``t.max(other)`` the element-wise maximum; read one way
    it would silently be wrong for the others (``t.max(1)[1]`` taking a row of values)."""
    if name in ("max", "min") and not positional:
        given = args[0] if isinstance(args[0], int) and not isinstance(args[0], bool) else "..."
        raise TypeError(
            f"{name}: give the axis by name, t.{name}(axis={given}) for the values (NumPy's "
            f"t.{name}({given})); PyTorch's t.{name}({given}) gives (values, indices) and its t.{name}(other) "
            f"the element-wise {name}imum, so a positional argument is refused rather than read one way: "
            f"use t.{name}(axis=...) and t.arg{name}(axis=...), or lp.{name}imum(t, other)"
        )
    taken = f"{len(positional)} positional argument{'s' if len(positional) != 1 else ''} ({', '.join(positional)})"
    raise TypeError(f"{name}() takes {taken if positional else 'no positional arguments'} but {len(args)} were given: "
                    "give the others by name")


def orderable(x):
    """``x`` ready for a function that orders values (max, sort, argmax...): a bool
    tensor as uint8 (False < True; NumPy orders bools, array_api_strict does not, so
    every device orders them this way), any other tensor as it is."""
    return x.astype("uint8") if x.dtype.kind == "b" else x

