"""The operators of the array object, attached to :class:`Tensor`: arithmetic,
comparisons, bitwise, ``@``, their reflected and in-place forms.

``t (op) number`` is the hot path: one call of the op's scalar variant and one
Tensor, no conversion. In-place forms change the tensor itself
(:func:`leanpass._node.inplace`).
"""

from __future__ import annotations

import operator

from .. import ops
from .._graph.trace import TRACER
from .._node import _guarded, inplace, make, run2
from ..ops import elementwise as table
from ..tensor import Tensor
from . import elementwise
from ._records import Method, recorded
from ._util import SCALARS, operand, pair
from .elementwise import as_floating, kind_of, scalar_refused, with_scalar

__all__ = ["matmul"]


def _operator(entry, reflected=False):
    op = entry.op
    fast = entry.rscalar_op if reflected else entry.scalar_op

    def method(self, other):
        kind = type(other)
        if fast is not None and (kind is float or kind is int):  # the hot path
            backend = self._backend
            try:
                if backend.guard is None:
                    out, backward = fast.fn(backend, self._data, other)
                else:
                    out, backward = _guarded(fast.fn, backend, self._data, other)
            except (TypeError, ValueError, OverflowError) as exc:  # int tensor with a float on strict, int8 + 300
                return scalar_refused(entry, self, other, reflected, exc)
            return make(out, backend, fast, (self,), backward, self._rg,
                        (other,) if self._rg or TRACER[0] is not None else None)
        if kind is not Tensor:
            other = operand(self, other)
            if other is NotImplemented:
                return NotImplemented
            if not isinstance(other, Tensor):
                return with_scalar(entry, self, other, reflected)
        return run2(op, other, self) if reflected else run2(op, self, other)

    return method


def _comparison(entry):
    op = entry.op

    def method(self, other):
        if not isinstance(other, Tensor):
            other = operand(self, other)
            if other is NotImplemented:
                return NotImplemented
            if not isinstance(other, Tensor):
                return with_scalar(entry, self, other, False)
        return run2(op, self, other)

    return method


def _in_place(entry, write):
    op, fast, name = entry.op, entry.scalar_op, entry.op + "="

    def method(self, other):
        if not isinstance(other, Tensor):
            other = operand(self, other)
            if other is NotImplemented:
                return NotImplemented
        if isinstance(other, Tensor):
            return inplace(self, op, [other], name=name, write=write)
        if type(other) is bool and kind_of(self) in "iuf":  # 0 or 1 with numbers, as out of place
            other = int(other)
        if fast is not None and type(other) in (int, float):
            return inplace(self, fast, [], other, name=name, write=write)
        if not isinstance(other, SCALARS):
            return NotImplemented
        return inplace(self, op, [other], name=name, write=write)

    return method


def _floating_operands(method):
    """``method`` with integer and bool Tensor operands converted to the default
    float dtype first (``/``: true division, as :func:`leanpass.divide`)."""

    def wrapped(self, other):
        return method(as_floating(self), as_floating(other))

    return wrapped


_ARITHMETIC = {
    "add": ("__add__", "__radd__", "__iadd__", operator.iadd),
    "subtract": ("__sub__", "__rsub__", "__isub__", operator.isub),
    "multiply": ("__mul__", "__rmul__", "__imul__", operator.imul),
    "divide": ("__truediv__", "__rtruediv__", "__itruediv__", operator.itruediv),
    "pow": ("__pow__", "__rpow__", "__ipow__", operator.ipow),
    "floor_divide": ("__floordiv__", "__rfloordiv__", "__ifloordiv__", operator.ifloordiv),
    "remainder": ("__mod__", "__rmod__", "__imod__", operator.imod),
    "bitwise_and": ("__and__", "__rand__", "__iand__", operator.iand),
    "bitwise_or": ("__or__", "__ror__", "__ior__", operator.ior),
    "bitwise_xor": ("__xor__", "__rxor__", "__ixor__", operator.ixor),
    "bitwise_left_shift": ("__lshift__", "__rlshift__", "__ilshift__", operator.ilshift),
    "bitwise_right_shift": ("__rshift__", "__rrshift__", "__irshift__", operator.irshift),
}
for _name, (_forward, _reflected, _inplace, _write) in _ARITHMETIC.items():
    _entry = table.BINARY[_name]
    _forward_method, _reflected_method = _operator(_entry), _operator(_entry, reflected=True)
    if _entry.accepts == "floating":
        _forward_method, _reflected_method = _floating_operands(_forward_method), _floating_operands(_reflected_method)
    setattr(Tensor, _forward, _forward_method)
    setattr(Tensor, _reflected, _reflected_method)
    # //= computes through the op, whose forward has the standard's special cases
    setattr(Tensor, _inplace, _in_place(_entry, None if _name == "floor_divide" else _write))

for _name, _dunder in (("equal", "__eq__"), ("not_equal", "__ne__"), ("less", "__lt__"),
                       ("less_equal", "__le__"), ("greater", "__gt__"), ("greater_equal", "__ge__")):
    setattr(Tensor, _dunder, _comparison(table.BINARY[_name]))
del _name, _dunder, _forward, _reflected, _inplace, _write, _entry, _forward_method, _reflected_method


def _neg(self):
    backend = self._backend
    out, backward = _guarded(ops.neg.fn, backend, self._data)
    return make(out, backend, ops.neg, (self,), backward, self._rg, () if self._rg or TRACER[0] is not None else None)


Tensor.__neg__ = _neg
Tensor.__pos__ = elementwise.positive
Tensor.__abs__ = elementwise.abs
Tensor.__invert__ = elementwise.bitwise_invert


# ---- matmul ---------------------------------------------------------------------------------


@recorded(ops.matmul, "linear algebra", dtype="promote",
          methods={"matmul": Method("other", {"other": "x2"}, "As the ``@`` operator.")})
def matmul(x1, x2, /):
    """Matrix product (1-D and batched N-D operands, as the ``@`` operator; host data
    beside a Tensor takes its device and dtype, as with ``@``)."""
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor):
        if isinstance(x1, SCALARS) or isinstance(x2, SCALARS):  # the standard's matmul takes no scalars
            raise TypeError(f"matmul: operands must be Tensors, got {type(x1).__name__} and {type(x2).__name__}")
        x1, x2 = pair("matmul", x1, x2)
    a, b = x1, x2
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
        return run2(ops.matmul, a, b)
    except ValueError as exc:
        if "different devices" in str(exc):
            raise
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not broadcast: {exc}") from None


def _matmul_operator(reflected):
    def method(self, other):
        other = operand(self, other)
        if other is NotImplemented or not isinstance(other, Tensor):
            return NotImplemented
        return matmul(other, self) if reflected else matmul(self, other)

    return method


def _imatmul(self, other):
    other = operand(self, other)
    if other is NotImplemented or not isinstance(other, Tensor):
        return NotImplemented
    return inplace(self, ops.matmul, [other], name="@=", write=operator.imatmul)


Tensor.__matmul__ = _matmul_operator(False)
Tensor.__rmatmul__ = _matmul_operator(True)
Tensor.__imatmul__ = _imatmul
