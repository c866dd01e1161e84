"""Linear algebra in the main namespace: ``matmul``, ``matrix_transpose``,
``tensordot``, ``vecdot`` (the ``linalg`` extension is :mod:`leanpass.linalg`)."""

from __future__ import annotations

import operator

from .. import ops
from .._checks import broadcast_shapes, is_bool, normalize_axis
from .._node import run
from ..tensor import Tensor
from ._records import methods_of, recorded
from ._util import pair, tensors
from .manipulation import permute_dims
from .operators import matmul

__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot"]


@recorded(ops.permute_dims, "linear algebra", methods={})
def matrix_transpose(x, /):
    """A stack of matrices with each one transposed (the last two axes swapped)."""
    (x,) = tensors("matrix_transpose", x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: x must have at least 2 dimensions, got shape {x.shape}")
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return permute_dims(x, tuple(perm))


def call(name, op, args, *params):
    """``run(op, args, *params)`` with a failure of the array library (a singular matrix,
    dtypes it cannot combine) re-raised naming the function, shapes and dtypes."""
    try:
        return run(op, args, *params)
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(f"{name}: "):  # the graph layer's own check, which names the function already
            raise
        described = [f"{a.shape} {a.dtype}" for a in args if isinstance(a, Tensor)]
        raise type(exc)(f"{name}: {exc} (tensor{'s' if len(described) > 1 else ''} of shape and dtype "
                        f"{' and '.join(described)})") from None


@recorded(ops.tensordot, "linear algebra", dtype="promote")
def tensordot(x1, x2, /, *, axes=2):
    """Contract ``x1`` and ``x2`` over ``axes``: an int ``N`` (the last ``N`` axes of
    ``x1`` with the first ``N`` of ``x2``) or two sequences of axes, paired in order.
    The result's axes are ``x1``'s free axes then ``x2``'s. Contracted axes must have
    equal sizes (they do not broadcast)."""
    x1, x2 = pair("tensordot", x1, x2)
    if is_bool(axes):
        raise TypeError("tensordot: axes must be an int or a pair of sequences of ints, got bool")
    if isinstance(axes, (tuple, list)):
        if len(axes) != 2:
            raise ValueError(f"tensordot: axes must be an int or a pair of sequences of ints, got {axes!r}")
        try:  # an axis or a sequence of axes (NumPy's integers too) for each operand
            if any(is_bool(a) for a in axes):
                raise TypeError
            first, second = ([operator.index(a)] if not isinstance(a, (tuple, list)) else list(a) for a in axes)
        except TypeError:
            raise TypeError(f"tensordot: axes must be an int or a pair of sequences of ints, got {axes!r}") from None
        if len(first) != len(second):
            raise ValueError(f"tensordot: axes {axes!r} name {len(first)} axes of x1 but {len(second)} of x2")
        first = tuple(normalize_axis(a, x1.ndim, "tensordot") for a in first)
        second = tuple(normalize_axis(a, x2.ndim, "tensordot") for a in second)
        if len(set(first)) != len(first) or len(set(second)) != len(second):
            raise ValueError(f"tensordot: repeated axis in {axes!r}")
    else:
        try:
            n = operator.index(axes)
        except TypeError:
            raise TypeError(f"tensordot: axes must be an int or a pair of sequences of ints, got {axes!r}") from None
        if not 0 <= n <= min(x1.ndim, x2.ndim):
            raise ValueError(
                f"tensordot: axes={n} must be between 0 and the smaller rank of the shapes {x1.shape} and {x2.shape}"
            )
        first = tuple(range(x1.ndim - n, x1.ndim))
        second = tuple(range(n))
    for i, j in zip(first, second):
        if x1.shape[i] != x2.shape[j]:
            raise ValueError(
                f"tensordot: axis {i} of x1 (size {x1.shape[i]}) and axis {j} of x2 (size {x2.shape[j]}) "
                f"differ in size; shapes {x1.shape} and {x2.shape}"
            )
    return call("tensordot", ops.tensordot, [x1, x2], first, second)


@recorded(ops.vecdot, "linear algebra", dtype="promote", axes="last")
def vecdot(x1, x2, /, *, axis=-1):
    """Dot products ``sum(conj(x1) * x2)`` along ``axis`` (negative, counted from the end
    of the broadcast shape); the other axes broadcast, the contracted axis must have
    the same size in both."""
    x1, x2 = pair("vecdot", x1, x2)
    ndim = min(x1.ndim, x2.ndim)
    if ndim == 0:
        raise ValueError(f"vecdot: operands must have at least one axis, got shapes {x1.shape} and {x2.shape}")
    axis = normalize_axis(axis, ndim, "vecdot") - ndim
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(
            f"vecdot: the contracted axis {axis} has size {x1.shape[axis]} in x1 and {x2.shape[axis]} in x2 "
            f"(shapes {x1.shape} and {x2.shape})"
        )
    broadcast_shapes("vecdot", x1.shape, x2.shape)
    return call("vecdot", ops.vecdot, [x1, x2], axis)


# Tensor methods for these functions: {method name: function} (``t.matmul(other)``).
METHODS: dict = methods_of("linear algebra")
