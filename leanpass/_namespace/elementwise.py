"""The standard's element-wise functions, made from the table in
:mod:`leanpass.ops.elementwise`: one function per entry, plus ``clip``.

A binary function takes Tensors, or a Tensor and a Python number on either side.
"""

from __future__ import annotations

from .. import ops
from .._checks import device_message
from .._dtypes import dtype_name
from .._node import _guarded, leaf, make, run, run1, run2
from ..ops import elementwise as table
from ..tensor import Tensor
from ._util import SCALARS, asarray_like, operand

__all__ = ["clip"]


def _unary_function(entry):
    op = entry.op
    forward = op.fn
    name = entry.name

    if op.differentiable:

        def function(x, /):
            if type(x) is not Tensor:
                x = asarray_like(x, name)
            backend = x._backend
            try:
                if backend.guard is None:
                    out, backward = forward(backend, x._data)
                else:
                    out, backward = _guarded(forward, backend, x._data)
            except TypeError as exc:
                raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None
            return make(out, backend, op, (x,), backward, x._rg)

    else:

        def function(x, /):
            if type(x) is not Tensor:
                x = asarray_like(x, name)
            try:
                out = _guarded(forward, x._backend, x._data)[0]
            except TypeError as exc:
                raise TypeError(f"{name}: not defined for a tensor of dtype {x.dtype}: {exc}") from None
            return leaf(out, x._backend, op)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = op.__doc__
    return function


def with_scalar(entry, t: Tensor, s, reflected: bool):
    """``t (op) s`` (or ``s (op) t`` when ``reflected``) for a Python number ``s``."""
    kind = type(s)
    if kind is int or kind is float:
        fast = entry.rscalar_op if reflected else entry.scalar_op
        if fast is not None:
            return run1(fast, t, s)
    op = entry.op
    if isinstance(s, complex) and t._rg and op.differentiable and not dtype_name(t._data.dtype).startswith("complex"):
        raise TypeError(
            f"{entry.name}: a complex number with a tensor that requires grad would give a complex result, "
            "and complex gradients are not supported"
        )
    if not (op.differentiable and t._rg):
        backend = t._backend
        try:
            out = _guarded(op.fn, backend, *((s, t._data) if reflected else (t._data, s)))[0]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{entry.name}: not defined for a tensor of dtype {t.dtype} and a "
                            f"{type(s).__name__}: {exc}") from None
        return leaf(out, backend, op)
    return run(op, [s, t] if reflected else [t, s])


def binary(entry, a, b):
    """``entry``'s function of two operands (Tensors or a Tensor and a number)."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return run2(entry.op, a, b)
        b2 = operand(a, b)
        if b2 is NotImplemented:
            raise TypeError(f"{entry.name}: cannot combine a Tensor with {type(b).__name__}")
        return with_scalar(entry, a, b2, False) if not isinstance(b2, Tensor) else run2(entry.op, a, b2)
    if isinstance(b, Tensor):
        a2 = operand(b, a)
        if a2 is NotImplemented:
            raise TypeError(f"{entry.name}: cannot combine {type(a).__name__} with a Tensor")
        return with_scalar(entry, b, a2, True) if not isinstance(a2, Tensor) else run2(entry.op, a2, b)
    if isinstance(a, SCALARS) and isinstance(b, SCALARS):
        raise TypeError(f"{entry.name}: at least one argument must be a Tensor, got two Python numbers")
    return binary(entry, asarray_like(a, entry.name), b)


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


def clip(x, /, min=None, max=None):  # noqa: A002 - the standard's names
    """Clamp ``x`` to ``[min, max]``; either bound may be ``None``, a number or a
    Tensor (broadcast against ``x``). Gradients: to ``x`` inside the range, to the
    bound that was taken outside it (PyTorch's ``clamp``)."""
    x = asarray_like(x, "clip")
    bounds = []
    for bound in (min, max):
        if isinstance(bound, Tensor):
            if bound._backend is not x._backend:
                raise ValueError(device_message("clip", x, bound))
        elif bound is not None and not isinstance(bound, SCALARS):
            bound = asarray_like(bound, "clip")
        bounds.append(bound)
    if all(b is None for b in bounds):
        return run1(ops.copy, x)
    out = run(table.clip, [x, *bounds])
    if out.shape != x.shape:
        raise ValueError(f"clip: bounds of shapes {[getattr(b, 'shape', ()) for b in bounds]} would change the "
                         f"shape {x.shape} of x")
    return out
