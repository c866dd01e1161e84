"""Manipulation functions: shapes, axes, joining and splitting, repeating.

Every function is differentiable in its floating-point inputs: reshapes, axis
moves and flips pass the gradient back rearranged, joins split it, broadcasts,
repeats and tiles sum the copies, rolls roll it back.
"""

from __future__ import annotations

import numbers
import operator

from .. import ops
from .._checks import broadcast_shapes, check_reshape, device_message, is_bool, normalize_axes, normalize_axis
from .._dtypes import dtype_name, promote
from .._graph.trace import note
from .._node import run, run1
from ..tensor import Tensor
from ._records import Method, methods_of, recorded
from ._util import asarray_like, flag, tensors

__all__ = [
    "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims", "repeat",
    "reshape", "roll", "squeeze", "stack", "tile", "unstack",
]


def _ints(values, what, op):
    """``values`` (an int or a sequence of ints) as a tuple of ints, or ``TypeError``."""
    many = isinstance(values, (tuple, list))
    items = tuple(values) if many else (values,)
    if any(is_bool(v) for v in items):
        raise TypeError(f"{op}: {what} must be integers, got {values!r}")
    try:
        return tuple(operator.index(v) for v in items)
    except TypeError:
        raise TypeError(f"{op}: {what} must be an integer or a tuple of integers, got {values!r}") from None


def _shape(shape, op):
    if isinstance(shape, (tuple, list)) or isinstance(shape, numbers.Integral):
        return _ints(shape, "shape entries", op)
    raise TypeError(f"{op}: shape must be a tuple of integers, got {shape!r}")


@recorded(ops.reshape, "manipulation", methods={"reshape": "*shape", "view": Method("*shape", note=(
              "PyTorch's name for ``reshape``; unlike PyTorch's ``view`` it also works where the data does not "
              "allow a view: it then copies, as ``reshape``."))})
def reshape(x, /, shape, *, copy=None):
    """The same data in another ``shape`` (one entry may be -1): a view where the
    data allows it, else a copy; ``copy=True`` always copies, ``copy=False`` raises
    ``ValueError`` where a copy would be needed."""
    x = asarray_like(x, "reshape")
    try:
        entries = tuple(shape)
        if any(is_bool(n) for n in entries):  # True is not 1 here, as in NumPy
            raise TypeError
        shape = tuple(operator.index(n) for n in entries)
    except TypeError:
        raise TypeError(f"reshape: shape must be a tuple of integers, got {shape!r}") from None
    if copy is not None:
        copy = flag("reshape", "copy", copy)
    check_reshape(x.shape, shape, "reshape")
    if copy is False:
        try:
            return run1(ops.reshape, x, shape, False)
        except (ValueError, AttributeError):  # array_api_strict says AttributeError
            raise ValueError(
                f"reshape: copy=False, but the tensor of shape {x.shape} cannot be viewed as shape {shape} "
                "without a copy"
            ) from None
    out = run1(ops.reshape, x, shape)
    return run1(ops.copy, out) if copy else out


@recorded(ops.permute_dims, "manipulation", methods={"permute": "*axes"})
def permute_dims(x, /, axes):
    """The axes of ``x`` in the order ``axes`` (a permutation of ``range(x.ndim)``)."""
    x = asarray_like(x, "permute_dims")
    axes = tuple(normalize_axis(a, x.ndim, "permute_dims") for a in _ints(axes, "axes", "permute_dims"))
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: axes {axes} are not a permutation of the axes of shape {x.shape}")
    return run1(ops.permute_dims, x, axes)


@recorded(ops.moveaxis, "manipulation", axes="pair",
          methods={"moveaxis": "source, destination", "movedim": "source, destination"})
def moveaxis(x, source, destination, /):
    """``x`` with the axes ``source`` moved to the positions ``destination`` (ints or
    tuples of equal length); the other axes keep their order."""
    x = asarray_like(x, "moveaxis")
    ndim = x.ndim
    src = tuple(normalize_axis(a, ndim, "moveaxis") for a in _ints(source, "axes", "moveaxis"))
    dst = tuple(normalize_axis(a, ndim, "moveaxis") for a in _ints(destination, "axes", "moveaxis"))
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source!r} and destination {destination!r} have different lengths")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"moveaxis: repeated axis in source {source!r} or destination {destination!r}")
    order = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return run1(ops.moveaxis, x, tuple(order))


@recorded(ops.expand_dims, "manipulation", axes="new", methods={"expand_dims": "axis", "unsqueeze": "axis"})
def expand_dims(x, /, axis):
    """``x`` with a new axis of size one at ``axis`` (in ``[-N-1, N]`` for ``N = x.ndim``)."""
    x = asarray_like(x, "expand_dims")
    axis = normalize_axis(axis, x.ndim + 1, "expand_dims")
    shape = x.shape
    return run1(ops.expand_dims, x, shape[:axis] + (1,) + shape[axis:])


@recorded(ops.squeeze, "manipulation", axes="many", methods={"squeeze": "axis=None"})
def squeeze(x, /, axis):
    """``x`` without the size-one ``axis`` (an int or a tuple); ``ValueError`` if one
    of them is not of size one. ``axis=None`` removes every size-one axis."""
    x = asarray_like(x, "squeeze")
    shape = x.shape
    if axis is None:
        axes = tuple(i for i, n in enumerate(shape) if n == 1)
    else:
        axes = normalize_axes(axis, x.ndim, "squeeze", zero_d_ok=False)
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of the tensor of shape {shape} has size {shape[a]}, not 1")
    return run1(ops.squeeze, x, tuple(n for i, n in enumerate(shape) if i not in axes))


@recorded(ops.broadcast_to, "manipulation", methods={"broadcast_to": "shape"})
def broadcast_to(x, /, shape):
    """``x`` broadcast to ``shape`` (a view: writing into it is not allowed on NumPy);
    the gradient is summed back over the broadcast axes."""
    x = asarray_like(x, "broadcast_to")
    shape = _shape(shape, "broadcast_to")
    ok = len(shape) >= x.ndim and all(n >= 0 for n in shape)
    if ok:
        try:
            ok = broadcast_shapes("broadcast_to", x.shape, shape) == shape
        except ValueError:
            ok = False
    if not ok:
        raise ValueError(f"broadcast_to: a tensor of shape {x.shape} cannot be broadcast to shape {shape}")
    return run1(ops.broadcast_to, x, shape)


@recorded(ops.broadcast_to, "manipulation", dtype="own")
def broadcast_arrays(*arrays):
    """The tensors broadcast against one another, as a list (views)."""
    ts = tensors("broadcast_arrays", *arrays)
    shape = broadcast_shapes("broadcast_arrays", *(t.shape for t in ts))
    return [t if t.shape == shape else run1(ops.broadcast_to, t, shape) for t in ts]


@recorded(ops.flip, "manipulation", axes="many", methods={"flip": "axis=None"})
def flip(x, /, *, axis=None):
    """``x`` reversed along ``axis`` (an int, a tuple, or ``None`` for every axis)."""
    x = asarray_like(x, "flip")
    return run1(ops.flip, x, normalize_axes(axis, x.ndim, "flip"))


@recorded(ops.roll, "manipulation", axes="flat", methods={"roll": "shift, axis=None"})
def roll(x, /, shift, *, axis=None):
    """``x`` shifted by ``shift`` places along ``axis``, elements leaving one end
    coming back at the other. ``axis=None`` rolls the flattened tensor; a tuple
    ``shift`` needs a tuple ``axis`` of the same length; an int ``shift`` with a
    tuple ``axis`` shifts every one of those axes."""
    x = asarray_like(x, "roll")
    shifts = _ints(shift, "shifts", "roll")
    if axis is None:
        if isinstance(shift, (tuple, list)):
            raise ValueError(f"roll: a tuple shift {tuple(shift)} needs a tuple axis of the same length")
        return run1(ops.roll, x, shifts[0], None)
    axes = tuple(normalize_axis(a, x.ndim, "roll") for a in _ints(axis, "axes", "roll"))
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: shift {shift!r} and axis {axis!r} have different lengths")
    return run1(ops.roll, x, shifts, axes)


def _joined(op, arrays):
    """The tensors to join, on one device and cast to their promoted dtype."""
    if isinstance(arrays, Tensor) or not isinstance(arrays, (tuple, list)):
        raise TypeError(f"{op}: arrays must be a tuple or list of tensors, got {type(arrays).__name__}")
    if not arrays:
        raise ValueError(f"{op}: need at least one tensor to join")
    ts = tensors(op, *arrays)
    dtype = promote(*(t.dtype for t in ts), op=op)
    return [t if dtype_name(t._data.dtype) == dtype.name else t.astype(dtype) for t in ts]


@recorded(ops.concat, "manipulation", dtype="promote", axes="flat")
def concat(arrays, /, *, axis=0):
    """The tensors joined along an existing ``axis`` (their shapes agree elsewhere);
    ``axis=None`` joins them flattened. Dtypes promote as the standard says."""
    ts = _joined("concat", arrays)
    if axis is None:
        ts = [run1(ops.reshape, t, (-1,)) for t in ts]
        axis = 0
    ndim = ts[0].ndim
    if ndim == 0 or any(t.ndim != ndim for t in ts):
        raise ValueError(
            f"concat: cannot join tensors of shapes {', '.join(str(t.shape) for t in ts)} along an axis; "
            "they need the same number of dimensions, at least one"
        )
    axis = normalize_axis(axis, ndim, "concat")
    first = ts[0].shape
    for t in ts[1:]:
        if any(a != b for i, (a, b) in enumerate(zip(first, t.shape)) if i != axis):
            raise ValueError(
                f"concat: shapes {first} and {t.shape} differ outside the joined axis {axis}"
            )
    return run(ops.concat, ts, axis=axis)


@recorded(ops.stack, "manipulation", dtype="promote", axes="new")
def stack(arrays, /, *, axis=0):
    """The tensors (of one shape) joined along a new ``axis`` (in ``[-N-1, N]``)."""
    ts = _joined("stack", arrays)
    first = ts[0].shape
    for t in ts[1:]:
        if t.shape != first:
            raise ValueError(f"stack: tensors of shapes {first} and {t.shape} differ; stack needs one shape")
    axis = normalize_axis(axis, len(first) + 1, "stack")
    return run(ops.stack, ts, axis=axis)


@recorded(ops.unstack_part, "manipulation", axes="one", methods={"unbind": "axis=0"})
def unstack(x, /, *, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple of views (each carries the
    gradient of its own part)."""
    x = asarray_like(x, "unstack")
    axis = normalize_axis(axis, x.ndim, "unstack")
    return tuple(run1(ops.unstack_part, x, axis, i) for i in range(x.shape[axis]))


@recorded(ops.repeat, "manipulation", axes="flat")
def repeat(x, repeats, /, *, axis=None):
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (``None``:
    of the flattened tensor, giving a 1-D result). ``repeats`` is an int or a 1-D
    integer tensor of ``x.shape[axis]`` (or one) counts; an array of counts is read
    on the host to know the output's size."""
    x = asarray_like(x, "repeat")
    if axis is None:
        x = run1(ops.reshape, x, (-1,))
        axis = 0
    else:
        axis = normalize_axis(axis, x.ndim, "repeat")
    n = x.shape[axis]
    if is_bool(repeats):
        raise TypeError("repeat: repeats must be an int or an integer tensor, got bool")
    if isinstance(repeats, numbers.Integral):
        repeats = operator.index(repeats)
        if repeats < 0:
            raise ValueError(f"repeat: repeats must be non-negative, got {repeats}")
        return run1(ops.repeat, x, repeats, axis)
    counts = asarray_like(repeats, "repeat")
    if counts._backend is not x._backend:
        raise ValueError(device_message("repeat", x, counts))
    if counts.dtype.kind not in "iu":
        raise TypeError(f"repeat: repeats must be an int or an integer tensor, got dtype {counts.dtype}")
    if counts.ndim != 1 or counts.shape[0] not in (1, n):
        raise ValueError(
            f"repeat: repeats of shape {counts.shape} do not match axis {axis} of size {n} (need shape (1,) or ({n},))"
        )
    note("repeat with a tensor of counts (a shape read from values)")
    xp = x._backend.xp
    if counts.shape[0] and int(xp.min(counts._data)) < 0:
        raise ValueError("repeat: repeats must be non-negative")
    if counts.shape[0] == 1:
        return run1(ops.repeat, x, int(counts._data[0]), axis)
    return run1(ops.repeat, x, counts._data, axis)


@recorded(ops.tile, "manipulation", methods={"tile": "*repetitions"})
def tile(x, repetitions, /):
    """``x`` repeated ``repetitions[i]`` times along each axis ``i`` (the shorter of
    ``x.shape`` and ``repetitions`` is padded with leading ones)."""
    x = asarray_like(x, "tile")
    if not isinstance(repetitions, (tuple, list)):
        raise TypeError(f"tile: repetitions must be a tuple of integers, got {repetitions!r}")
    reps = _ints(repetitions, "repetitions", "tile")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions must be non-negative, got {reps}")
    reps = (1,) * (x.ndim - len(reps)) + reps
    return run1(ops.tile, x, reps)


# ---- Tensor methods of their own (PyTorch's), beside the records' --------------------------------


def expand(self, *shape):
    """PyTorch's ``t.expand(*sizes)``: ``x`` broadcast to ``sizes``, where -1 keeps
    the size of that axis."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = _ints(shape, "sizes", "expand")
    lead = len(shape) - self.ndim
    if lead < 0:
        raise ValueError(f"expand: {len(shape)} sizes given for a tensor of shape {self.shape}")
    shape = tuple(self.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
    return broadcast_to(self, shape)


def swapaxes(self, axis1, axis2):
    """``x`` with two axes swapped."""
    ndim = self.ndim
    i, j = normalize_axis(axis1, ndim, "swapaxes"), normalize_axis(axis2, ndim, "swapaxes")
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return run1(ops.permute_dims, self, tuple(perm))



METHODS = {**methods_of("manipulation"), "expand": expand, "swapaxes": swapaxes}
