"""The standard's searching functions: ``argmax``, ``argmin``, ``count_nonzero``,
``nonzero``, ``searchsorted`` (int64 results that never require grad) and ``where``
(differentiable in ``x1`` and ``x2``)."""

from __future__ import annotations

from .. import ops
from .._checks import broadcast_shapes
from .._dtypes import promote
from .._node import _guarded, leaf, run
from ..tensor import Tensor
from ._records import methods_of, recorded
from ._util import SCALARS, asarray_like, orderable, tensors
from .statistical import FUNCTIONS

__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]


argmax, argmin, count_nonzero = FUNCTIONS["argmax"], FUNCTIONS["argmin"], FUNCTIONS["count_nonzero"]


@recorded(ops.nonzero, "searching", dtype="index", methods={"nonzero": ""})
def nonzero(x, /):
    """The indices of the non-zero elements (``True`` for booleans): a tuple of 1-D int64
    tensors, one per axis, in row-major order. ``x`` must have at least one axis.
    The results never require grad."""
    x = asarray_like(x, "nonzero")
    if x.ndim == 0:
        raise ValueError("nonzero: x must have at least one axis, got a 0-d tensor")
    backend = x._backend
    arrays = _guarded(ops.nonzero.fn, backend, x._data)[0]
    return tuple(leaf(a, backend, ops.nonzero) for a in arrays)


@recorded(ops.searchsorted, "searching", dtype="index")
def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Indices where the elements of ``x2`` would be inserted into the 1-D ``x1`` to keep
    it sorted: ``side="left"`` gives the first such place, ``"right"`` the last.

    ``x1`` must be sorted in ascending order, unless ``sorter`` (integer indices that
    sort it, as :func:`argsort` gives) is given. ``x2`` is a tensor or a Python
    number (then the result is 0-d). The two are compared in their promoted dtype.
    int64 of ``x2``'s shape; never requires grad."""
    name = "searchsorted"
    x1 = asarray_like(x1, name)
    if x1.ndim != 1:
        raise ValueError(f"{name}: x1 must be 1-D, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"{name}: side must be 'left' or 'right', got {side!r}")
    if isinstance(x2, SCALARS):
        x2 = scalar_like(x2, x1, name)
    x1, x2 = tensors(name, x1, x2)
    if sorter is not None:
        _, sorter = tensors(name, x1, sorter)
        if sorter.dtype.kind not in "iu" or sorter.shape != x1.shape:
            raise ValueError(
                f"{name}: sorter must be integer indices of x1's shape {x1.shape}, got dtype {sorter.dtype} "
                f"and shape {sorter.shape}"
            )
        if not x1._backend.all_in_range(sorter._data, x1.shape[0]):
            raise ValueError(f"{name}: sorter has indices outside [0, {x1.shape[0]}), the positions of x1")
    for t in (x1, x2):
        if t.dtype.kind == "c":
            raise TypeError(f"{name}: complex numbers have no order (dtype {t.dtype})")
    common = promote(x1.dtype, x2.dtype, op=name)
    x1, x2 = (orderable(t if t.dtype == common else t.astype(common)) for t in (x1, x2))
    return run(ops.searchsorted, [x1, x2], side, None if sorter is None else sorter._data)


def scalar_like(value, like, name):
    """A Python number as a 0-d tensor on ``like``'s device, in ``like``'s dtype where the
    standard lets the number mix with it (an int with a float tensor, ...)."""
    kind = like.dtype.kind
    python = next(t for t in (bool, int, float, complex) if isinstance(value, t))
    if kind not in {bool: "b", int: "iuf", float: "fc", complex: "fc"}[python]:
        raise TypeError(f"{name}: a Python {python.__name__} does not mix with a tensor of dtype {like.dtype}")
    dtype = promote(like.dtype, "complex64") if python is complex else like.dtype
    try:
        return Tensor(python(value), device=like.device, dtype=dtype)
    except OverflowError:
        raise OverflowError(f"{name}: the Python int {value} is out of the range of dtype {like.dtype}") from None


@recorded(ops.where, "searching", dtype="promote")
def where(condition, x1, x2, /):
    """Elements of ``x1`` where ``condition`` (a bool tensor) is ``True``, of ``x2`` elsewhere.

    The three broadcast together; ``x1`` or ``x2`` (not both) may be a Python number,
    which takes the other's dtype as in the standard's mixing rules; two tensors
    promote. Gradient: ``g`` goes to ``x1`` where the condition holds and to ``x2``
    elsewhere (summed back over broadcast axes); the condition gets none."""
    name = "where"
    condition = asarray_like(condition, name)
    if condition.dtype != "bool":
        raise TypeError(f"{name}: condition must be a bool tensor, got dtype {condition.dtype}")
    s1, s2 = isinstance(x1, SCALARS), isinstance(x2, SCALARS)
    if s1 and s2:
        raise TypeError(f"{name}: x1 and x2 cannot both be Python numbers; make one a tensor")
    if s1:
        x2 = asarray_like(x2, name)
        x1 = scalar_like(x1, x2, name)
    elif s2:
        x1 = asarray_like(x1, name)
        x2 = scalar_like(x2, x1, name)
    condition, x1, x2 = tensors(name, condition, x1, x2)
    broadcast_shapes(name, condition.shape, x1.shape, x2.shape)
    promote(x1.dtype, x2.dtype, op=name)  # TypeError for dtypes that do not mix
    return run(ops.where, [condition, x1, x2])  # the library promotes as the standard says


# ---- Tensor methods ----------------------------------------------------------------------------


# Tensor methods for these functions: {method name: function}.
METHODS: dict = methods_of("searching")
