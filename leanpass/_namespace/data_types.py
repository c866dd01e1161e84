"""Data type functions: ``astype``, ``can_cast``, ``finfo``, ``iinfo``, ``isdtype``,
``result_type``."""

from __future__ import annotations

from .. import _dtypes
from .._dtypes import DTYPES, as_dtype
from ..tensor import Tensor
from ._util import asarray_like

__all__ = ["astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]


def astype(x, dtype, /, *, copy=True, device=None):
    """``x`` in ``dtype`` (a copy unless ``copy=False`` and nothing changes).
    Float to float is differentiable; a cast to any other dtype leaves the graph."""
    return asarray_like(x, "astype").astype(dtype, copy=copy, device=device)


def _dtype_of(value, op):
    return value.dtype if isinstance(value, Tensor) else as_dtype(value, op)


def can_cast(from_, to, /):
    """Whether ``from_`` (a dtype or Tensor) casts to ``to`` by the standard's promotion rules."""
    return _dtypes.can_cast(_dtype_of(from_, "can_cast"), to)


def finfo(type, /):  # noqa: A002 - the standard's name
    """Limits of a floating-point dtype (or of a Tensor's)."""
    return _dtypes.finfo(_dtype_of(type, "finfo"))


def iinfo(type, /):  # noqa: A002
    """Limits of an integer dtype (or of a Tensor's)."""
    return _dtypes.iinfo(_dtype_of(type, "iinfo"))


def isdtype(dtype, kind):
    """Whether ``dtype`` is of ``kind`` ("bool", "signed integer", "unsigned integer",
    "integral", "real floating", "complex floating", "numeric", a dtype, or a tuple)."""
    return _dtypes.isdtype(dtype, kind)


def result_type(*arrays_and_dtypes):
    """The dtype the standard's promotion gives ``arrays_and_dtypes`` (Tensors, dtypes,
    and Python numbers, which take the type of the others)."""
    dtypes = []
    scalars = []
    for value in arrays_and_dtypes:
        if isinstance(value, Tensor):
            dtypes.append(value.dtype)
        elif isinstance(value, (bool, int, float, complex)):
            scalars.append(value)
        else:
            dtypes.append(as_dtype(value, "result_type"))
    if not dtypes:
        raise ValueError("result_type: at least one array or dtype is required")
    result = _dtypes.promote(*dtypes)
    for s in scalars:
        result = _with_scalar(result, s)
    return result


def _with_scalar(dtype, s):
    kind = dtype.kind
    if isinstance(s, bool):
        if kind == "b":
            return dtype
    elif isinstance(s, int):
        if kind in "iufc":
            return dtype
    elif isinstance(s, float):
        if kind in "fc":
            return dtype
    elif kind == "c":
        return dtype
    elif kind == "f":
        return DTYPES[f"complex{dtype.bits * 2}"]
    raise TypeError(f"result_type: the standard defines no promotion of {dtype.name} with a Python "
                    f"{type(s).__name__}")
