"""The standard's element-wise functions, made from the table in
:mod:`leanpass.ops.elementwise`: one function per entry, plus ``clip``.

A binary function takes Tensors, or a Tensor and a Python number on either side.
Functions the standard defines for floating-point input convert integer and bool
tensors to the default float dtype first (as PyTorch; NumPy would make float16 of
small integers); numeric functions refuse bool tensors. Tensors that require grad
are floating point already and skip these checks.
"""

from __future__ import annotations

import builtins

from .. import ops
from .._checks import broadcast_shapes, device_message
from .._dtypes import DTYPES, dtype_name, iinfo
from .._graph.trace import TRACER
from .._node import _guarded, leaf, make, run, run1, run2
from ..backends import get_default_dtype
from ..ops import Op
from ..ops import elementwise as table
from ..tensor import Tensor
from ._records import recorded
from ._util import SCALARS, asarray_like, operand, python_number

__all__ = ["clip"]


def kind_of(x: Tensor) -> str:
    """The kind of ``x``'s dtype: ``"b"``, ``"i"``, ``"u"``, ``"f"`` or ``"c"``."""
    return DTYPES[dtype_name(x._data.dtype)].kind


def as_floating(x):
    """An integer or bool tensor in the default float dtype; anything else as it is."""
    if isinstance(x, Tensor) and not x._rg and kind_of(x) in "biu":
        return x.astype(get_default_dtype())
    return x


def _admit(entry, x):
    """``x`` (a tensor that does not require grad) as ``entry`` takes it, and the
    complex forward to use instead of the op's, if any."""
    kind = kind_of(x)
    if kind == "c":
        return x, entry.complex
    if entry.accepts == "floating" and kind in "biu":
        return x.astype(get_default_dtype()), None
    if entry.accepts == "numeric" and kind == "b":
        raise TypeError(f"{entry.name}: not defined for a tensor of dtype bool (the standard defines it for numbers)")
    return x, None


def _complex(entry, fn, x):
    backend = x._backend
    with backend.context(), backend.quiet():
        return leaf(fn(backend.xp, x._data), backend, entry.op)


def _unary_function(entry):
    op = entry.op
    forward = op.fn
    name = entry.name
    checks = entry.accepts != "any" or entry.complex is not None
    complex_op = entry.complex if isinstance(entry.complex, Op) else None  # for every complex input

    if op.differentiable:

        def function(x, /):
            if type(x) is not Tensor:
                x = asarray_like(x, name)
            if complex_op is not None and kind_of(x) == "c":
                return run1(complex_op, x)
            if checks and not x._rg:
                x, special = _admit(entry, x)
                if special is not None:
                    return _complex(entry, special, x)
            backend = x._backend
            try:
                if backend.guard is None:
                    out, backward = forward(backend, x._data)
                else:
                    out, backward = _guarded(forward, backend, x._data)
            except TypeError as exc:
                raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None
            return make(out, backend, op, (x,), backward, x._rg, () if x._rg or TRACER[0] is not None else None)

    else:

        def function(x, /):
            if type(x) is not Tensor:
                x = asarray_like(x, name)
            if checks:
                x, special = _admit(entry, x)
                if special is not None:
                    return _complex(entry, special, x)
            try:
                out = _guarded(forward, x._backend, x._data)[0]
            except TypeError as exc:
                raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None
            return make(out, x._backend, op, (x,), None, False, () if TRACER[0] is not None else None)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = op.__doc__
    return function


def scalar_refused(entry, t: Tensor, s, reflected: bool, exc: Exception):
    """What a fast ``t (op) s`` that the library refused gives instead: an integer or
    bool tensor with a Python float computes in float64 on every device (NumPy's
    result, whatever the default dtype; array_api_strict refuses the mix); anything else raises
    the library's error as a ``TypeError`` (``OverflowError`` for an integer beyond
    the tensor's dtype) naming the function."""
    kind = kind_of(t)
    if type(s) is float and kind in "biu":
        try:
            return with_scalar(entry, t.astype("float64"), s, reflected)
        except (TypeError, ValueError, OverflowError):
            pass  # not defined for floats either (bitwise operators): the error names t's own dtype
    if isinstance(exc, OverflowError):
        raise OverflowError(f"{entry.name}: {s!r} does not fit the tensor's dtype {t.dtype}: {exc}") from None
    raise (ValueError if isinstance(exc, ValueError) else TypeError)(
        f"{entry.name}: not defined for a tensor of dtype {t.dtype} and the {type(s).__name__} {s!r}: {exc}"
    ) from None


def with_scalar(entry, t: Tensor, s, reflected: bool):
    """``t (op) s`` (or ``s (op) t`` when ``reflected``) for a Python number ``s``."""
    kind = type(s)
    if kind is bool and kind_of(t) in "iuf":  # a bool counts as 0 or 1 with numbers (NumPy, PyTorch)
        s, kind = int(s), int
    if kind is int or kind is float:
        fast = entry.rscalar_op if reflected else entry.scalar_op
        if fast is not None:
            try:
                return run1(fast, t, s)
            except (TypeError, ValueError, OverflowError) as exc:
                return scalar_refused(entry, t, s, reflected, exc)
    op = entry.op
    if not (op.differentiable and t._rg):
        backend = t._backend
        try:
            if TRACER[0] is not None:  # lp.compile records it: an operation with the number as a parameter
                return run(op, [s, t] if reflected else [t, s])
            out = _guarded(op.fn, backend, *((s, t._data) if reflected else (t._data, s)))[0]
        except (TypeError, ValueError, OverflowError) as exc:
            return scalar_refused(entry, t, s, reflected, exc)
        return leaf(out, backend, op)
    return run(op, [s, t] if reflected else [t, s])


def binary(entry, a, b):
    """``entry``'s function of two operands (Tensors or a Tensor and a number)."""
    name = entry.name
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        if isinstance(a, SCALARS) and isinstance(b, SCALARS):
            raise TypeError(f"{name}: at least one argument must be a Tensor, got two Python numbers")
        if not isinstance(a, SCALARS):
            a = asarray_like(a, name)
        else:
            b = asarray_like(b, name)
    if not isinstance(b, Tensor):
        b2 = operand(a, b)
        if b2 is NotImplemented:
            raise TypeError(f"{name}: cannot combine a Tensor with {type(b).__name__}")
        b = b2
    elif not isinstance(a, Tensor):
        a2 = operand(b, a)
        if a2 is NotImplemented:
            raise TypeError(f"{name}: cannot combine {type(a).__name__} with a Tensor")
        a = a2
    if entry.accepts == "floating":
        a, b = as_floating(a), as_floating(b)
    if not isinstance(b, Tensor):
        return with_scalar(entry, a, b, False)
    if not isinstance(a, Tensor):
        return with_scalar(entry, b, a, True)
    return run2(entry.op, a, b)


def _binary_function(entry):
    def function(x1, x2, /):
        return binary(entry, x1, x2)

    function.__name__ = function.__qualname__ = entry.name
    function.__doc__ = entry.op.__doc__
    return function


for _entry in table.UNARY.values():
    globals()[_entry.name] = _unary_function(_entry)
    __all__.append(_entry.name)
for _entry in table.BINARY.values():
    globals()[_entry.name] = _binary_function(_entry)
    __all__.append(_entry.name)
del _entry


@recorded(table.clip, "element-wise")
def clip(x, /, min=None, max=None):  # noqa: A002 - the standard's names
    """Clamp ``x`` to ``[min, max]``; either bound may be ``None``, a number or a
    Tensor (the three broadcast together). Gradients: to ``x`` inside the range, to
    the bound that was taken outside it (PyTorch's ``clamp``); where ``min > max``
    the result is ``max``. The result has ``x``'s dtype (the standard's rule; NumPy
    and PyTorch promote): a tensor bound of another dtype is cast to it, an integer
    bound beyond its range first clamped to the range."""
    x = asarray_like(x, "clip")
    kind = x.dtype.kind
    if kind not in "iuf":
        raise TypeError(f"clip: x must have a real numeric dtype, got {x.dtype}")
    bounds = []
    shapes = [x.shape]
    for bound in (min, max):
        if isinstance(bound, Tensor):
            if bound._backend is not x._backend:
                raise ValueError(device_message("clip", x, bound))
        elif isinstance(bound, SCALARS):  # (a NumPy scalar, numpy.float64 a float too: as its Python number,
            bound = python_number(bound)  # which keeps x's dtype, as the operators and PyTorch's clamp)
        elif bound is not None:
            bound = asarray_like(bound, "clip")
        if isinstance(bound, Tensor):
            bound_kind = bound.dtype.kind
            if bound_kind != kind and not (bound_kind in "iu" and kind in "iuf"):
                raise TypeError(f"clip: a bound of dtype {bound.dtype} does not mix with x of dtype {x.dtype}")
            if bound.dtype != x.dtype:  # the result has x's dtype (the standard): so does each bound
                if kind != "f":  # an integer bound beyond x's range is no bound there, not a wrapped value
                    own, limits = iinfo(bound.dtype), iinfo(x.dtype)
                    bound = clip(bound, builtins.max(limits.min, own.min), builtins.min(limits.max, own.max))
                bound = bound.astype(x.dtype)
            shapes.append(bound.shape)
        elif bound is not None:
            if isinstance(bound, bool):  # 0 or 1, as with_scalar takes a bool with numbers
                bound = int(bound)
            if isinstance(bound, complex) or (isinstance(bound, float) and kind != "f"):
                raise TypeError(f"clip: a Python {type(bound).__name__} bound does not mix with x of dtype {x.dtype}")
            if kind != "f":  # an integer bound beyond the dtype's range: clamped to the range
                limits = iinfo(x.dtype)
                bound = limits.min if bound < limits.min else limits.max if bound > limits.max else bound
        bounds.append(bound)
    if all(b is None for b in bounds):
        return run1(ops.copy, x)
    broadcast_shapes("clip", *shapes)
    return run(table.clip, [x, *bounds])
