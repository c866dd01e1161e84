"""Checks at the boundary: devices, shapes, axes. Each raises a standard exception
naming the operation, the shapes and the devices, before anything is changed."""

from __future__ import annotations

import operator

__all__ = [
    "integer", "device_message", "broadcast_shapes", "normalize_axis", "normalize_axes", "check_reshape",
]


def device_message(op, a, b):
    return (
        f"{op}: operands are on different devices, {a.device} and {b.device} "
        f"(shapes {a.shape} and {b.shape}); move one with .to({a.device!r})"
    )


def broadcast_shapes(op, *shapes):
    """The broadcast of ``shapes`` (NumPy rules), or ``ValueError`` naming them and ``op``."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for i in range(ndim):
        size = 1
        for shape in shapes:
            j = i - ndim + len(shape)
            n = shape[j] if j >= 0 else 1
            if n != 1:
                if size != 1 and size != n:
                    raise ValueError(
                        f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast"
                    )
                size = n
        result.append(size)
    return tuple(result)


def is_bool(value) -> bool:
    """Whether ``value`` is a bool, Python's or a library's (``numpy.True_``): never
    an index or an axis, though ``operator.index`` takes some of them."""
    return isinstance(value, bool) or getattr(value, "dtype", None) == "bool"


def integer(value, op, what, minimum=None, kind="an integer"):
    """``value`` as a Python int (``TypeError`` for a bool or a non-integer, naming
    ``op`` and ``what``; ``ValueError`` below ``minimum``)."""
    if is_bool(value):
        raise TypeError(f"{op}: {what} must be {kind}, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {what} must be {kind}, got {type(value).__name__} {value!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{op}: {what} must be {kind}, got {value}")
    return value


def normalize_axis(axis, ndim, op):
    """``axis`` as a non-negative int, or ``TypeError``/``IndexError`` naming ``op``."""
    axis = integer(axis, op, "axis")
    if not -ndim <= axis < ndim:
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of {ndim} dimensions")
    return axis % ndim


def normalize_axes(axis, ndim, op, *, zero_d_ok=True):
    """``axis`` (None, an int or a tuple of ints) as a tuple of non-negative axes.
    A 0-d tensor takes axis 0 or -1 too, reducing nothing (as in PyTorch)."""
    if axis is None:
        return tuple(range(ndim))
    many = isinstance(axis, (tuple, list))
    axes = tuple(axis) if many else (axis,)
    if ndim == 0 and zero_d_ok:
        for a in axes:
            if is_bool(a):
                raise TypeError(f"{op}: axis must be an integer, got bool")
            try:
                ok = operator.index(a) in (0, -1)
            except TypeError:
                raise TypeError(f"{op}: axis must be an integer, got {type(a).__name__}") from None
            if not ok:
                raise IndexError(f"{op}: axis {a} is out of range for a tensor of 0 dimensions")
        return ()
    axes = tuple(normalize_axis(a, ndim, op) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {tuple(axis)}")
    return axes


def check_reshape(old, new, op):
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
    ok = (unknown == 0 and known == size) or (unknown == 1 and known and size % known == 0) or (
        unknown == 1 and size == 0 and known != 0
    )
    if not ok:
        raise ValueError(f"{op}: cannot reshape a tensor of shape {tuple(old)} into shape {tuple(new)}")
