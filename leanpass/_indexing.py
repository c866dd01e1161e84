"""Indexing: ``t[index]`` and ``t[index] = value``, as the array API standard (and
NumPy, where they agree) define them.

An index is parsed once (:func:`parse`) into one of three forms:

- basic: integers, slices, ``None`` and ``...`` -- a view of the data;
- a boolean mask over the leading axes;
- integer arrays, with integers, slices, ``None`` and ``...`` around them, placed
  as NumPy places them (the result's axes where the arrays stand when they stand
  side by side, else first).

Reads are operations of :mod:`leanpass.ops.indexing` (a scatter-add on backward);
writes change the tensor in place through :func:`leanpass._node.inplace`, recorded
in the graph when it needs to be.
"""

from __future__ import annotations

import math
import numbers
import operator

from . import ops
from ._checks import broadcast_shapes, device_message
from ._dtypes import DTYPES, dtype_name, iinfo
from ._graph.above import above
from ._graph.trace import check, raised, read
from ._node import as_tensor, inplace, run1
from .backends import backend_of_array, host_array

__all__ = ["getitem", "setitem", "parse"]


class Parsed:
    """A parsed index: ``kind`` is ``"basic"``, ``"mask"`` or ``"integer"``."""

    __slots__ = ("kind", "items", "mask")

    def __init__(self, kind, items, mask=None):
        self.kind, self.items, self.mask = kind, items, mask


def _index_array(t, item, op):
    """An index array (integer or boolean) on ``t``'s device, from a Tensor, array or list."""
    backend = t._backend
    xp = backend.xp
    made = False  # whether array is a new one (not the caller's)
    if isinstance(item, above.tensor):
        if item._backend is not backend:
            raise ValueError(device_message(op, t, item))
        read(item)  # (lp.compile: its array is a parameter of the operation, and checked, from a tensor it knows)
        array = item._data
    else:
        src = backend_of_array(item)
        if src is None:
            host = host_array(item, op)
            array = backend.from_host(host, "int64" if host.size == 0 and host.dtype.kind in "iuf" else None)
            made = isinstance(item, (list, tuple))  # anything else may share the caller's memory
        elif src is not backend:
            raise ValueError(
                f"{op}: the index array is on {src.device} but the tensor of shape {t.shape} is on {t.device}"
            )
        else:
            array = item
    kind = dtype_name(array.dtype)
    if kind == "bool":
        # backward rules keep the mask: a copy, so that changing the caller's mask
        # afterwards (reusing it) cannot change a gradient
        return array if made else backend.copy(array)
    if kind == "int64":
        return array
    if kind.startswith(("int", "uint")):
        if kind == "uint64" and math.prod(array.shape) and int(xp.max(array)) > 2**63 - 1:  # would wrap in int64
            raise IndexError(f"{op}: index {int(xp.max(array))} is out of range for the tensor of shape {t.shape}")
        return xp.astype(array, xp.int64)
    if kind.startswith("float") and isinstance(item, above.tensor):
        if bool(xp.any(~xp.isfinite(array) | (xp.floor(array) != array))):
            raise IndexError(f"{op}: a float tensor used as an index must hold whole numbers")
        return xp.astype(array, xp.int64)
    raise IndexError(f"{op}: index arrays must hold integers or booleans, got dtype {kind}")


def _out_of_range(op, index, axis, size, shape):
    return IndexError(f"{op}: index {index} is out of range for axis {axis} with size {size} (tensor shape {shape})")


def parse(t, index, op="getitem") -> Parsed:
    items = index if isinstance(index, tuple) else (index,)
    parsed = []
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            parsed.append(item)
        elif isinstance(item, bool):
            raise IndexError(f"{op}: a bool is not an index; use a boolean array as a mask")
        elif isinstance(item, numbers.Integral):
            parsed.append(operator.index(item))
        elif isinstance(item, above.tensor) and item.ndim == 0 and dtype_name(item._data.dtype) != "bool":
            if item._backend is not t._backend:
                raise ValueError(device_message(op, t, item))
            value = item.item()
            if isinstance(value, complex) or not math.isfinite(value) or value != int(value):
                raise IndexError(f"{op}: a float tensor used as an index must hold whole numbers, got {value}")
            parsed.append(int(value))
        else:
            parsed.append(_index_array(t, item, op))
    arrays = [p for p in parsed if not (p is None or p is Ellipsis or isinstance(p, (int, slice)))]
    ndim = t._data.ndim
    if sum(1 for p in parsed if p is Ellipsis) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    used = sum(1 if isinstance(p, (int, slice)) else 0 if p is None or p is Ellipsis else
               (p.ndim if dtype_name(p.dtype) == "bool" else 1) for p in parsed)
    if used > ndim:
        raise IndexError(f"{op}: too many indices for a tensor of shape {t.shape}: {used} axes indexed")
    if not arrays:
        return Parsed("basic", _basic_key(t, parsed, op))
    if any(dtype_name(a.dtype) == "bool" for a in arrays):
        rest = [p for p in parsed if not (p is Ellipsis or (isinstance(p, slice) and p == slice(None)))]
        if len(rest) == 1 and parsed[0] is rest[0]:  # the mask alone (then '...' or ':'): the standard's case
            return Parsed("mask", parsed, _mask(t, parsed, arrays[0], op))
        parsed = _masks_as_positions(t, parsed, ndim - used, op)
    return Parsed("integer", parsed)


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


def _basic_key(t, parsed, op):
    key = []
    axis = 0
    for p in _expand(parsed, t._data.ndim):
        if p is not None:
            n = t.shape[axis]
            if isinstance(p, int) and not -n <= p < n:
                raise _out_of_range(op, p, axis, n, t.shape)
            if isinstance(p, slice) and p != slice(None):
                if p.step == 0:
                    raise ValueError(f"{op}: slice step cannot be zero")
                p = _in_bounds(p, n)
            axis += 1
        key.append(p)
    return tuple(key)


def _masks_as_positions(t, parsed, ellipsis_axes, op):
    """``parsed`` with each boolean mask among other indices (``t[:, mask]``) replaced
    by the integer arrays of its true positions, one per axis it covers, as NumPy and
    PyTorch read it; the integer-array rules then place the result's axes."""
    out = []
    axis = 0
    for p in parsed:
        if p is Ellipsis:
            axis += ellipsis_axes
        elif p is None:
            pass
        elif isinstance(p, (int, slice)) or dtype_name(p.dtype) != "bool":
            axis += 1
        else:
            covered = t.shape[axis:axis + p.ndim]
            if p.ndim == 0:
                raise IndexError(f"{op}: a 0-d boolean index can only be the whole index (t[mask] or t[mask, ...])")
            if tuple(p.shape) != covered:
                raise IndexError(f"{op}: boolean mask of shape {tuple(p.shape)} does not match the axes {axis} to "
                                 f"{axis + p.ndim - 1} of the tensor of shape {t.shape}")
            out.extend(t._backend.xp.nonzero(p))
            axis += p.ndim
            continue
        out.append(p)
    return out


def _mask(t, parsed, mask, op):
    shape = t.shape[: mask.ndim]
    if tuple(mask.shape) != shape:
        if any(k not in (n, 0) for k, n in zip(mask.shape, shape)):
            raise IndexError(f"{op}: boolean mask of shape {tuple(mask.shape)} does not match tensor shape {t.shape}")
        mask = t._backend.zeros(shape, t._backend.xp.bool)  # a size-0 mask axis selects nothing (the standard)
    return mask


# ---- reading -------------------------------------------------------------------------------


def getitem(t, index):
    p = parse(t, index)
    if p.kind == "basic":
        key = p.items
        if all(isinstance(k, int) for k in key):  # integers alone give NumPy a copy; with ... a 0-d view
            key += (Ellipsis,)
        set_key = tuple(k for k in key if k is not None)
        set_shape = t._data[set_key].shape if len(set_key) != len(key) else None
        out = run1(ops.index_basic, t, key, set_key, set_shape)
        out._base = (t, key, *out._base[2:])  # a basic index: a change of the view is a setitem on t
        return out
    if p.kind == "mask":
        return run1(ops.index_mask, t, p.mask)
    return _index_integer(t, p.items)


def _check_positions(t, array, axis, op, wraps: bool = True, named=None) -> bool:
    """Check that the integer ``array`` indexes ``axis`` of ``t`` (``IndexError``
    otherwise), now and again at each replay of lp.compile's; whether any is negative.
    ``wraps``: the operation that takes ``array`` wraps negative positions itself (else a
    replay of a trace without any refuses one). ``named``: the tensor whose own array
    ``array`` is, which the replay's check reads (a tensor the function holds, that no
    operation read yet, is known to the trace by the tensor)."""
    xp = t._backend.xp
    n = t.shape[axis]
    if not math.prod(array.shape):
        return False
    low, high = int(xp.min(array)), int(xp.max(array))
    if low < -n or high >= n:
        raise raised(_out_of_range(op, high if high >= n else low, axis, n, t.shape))
    negative = low < 0
    shape = t.shape  # (the check keeps no Tensor: lp.compile's record holds it)
    check(lambda values: _in_range(xp, values, n, axis, shape, op, wraps or negative),
          array if named is None else named,
          branch=not (wraps or negative))  # (a negative index where the trace saw none: eager wraps it)
    return negative


def _checked_positions(t, array, axis, op):
    """``array`` checked (:func:`_check_positions`), its negative positions wrapped."""
    if _check_positions(t, array, axis, op, wraps=False):
        return t._backend.xp.where(array < 0, array + t.shape[axis], array)
    return array


def _in_range(xp, values, n, axis, shape, op, negative) -> None:
    """lp.compile's check of indices in a replay: out of range raises as eagerly; a
    negative one, where the trace wrapped none (``negative`` False: its operation does
    not wrap), raises too."""
    if math.prod(values.shape):
        low, high = int(xp.min(values)), int(xp.max(values))
        if low < -n or high >= n:
            raise _out_of_range(op, high if high >= n else low, axis, n, shape)
        if low < 0 and not negative:
            raise IndexError(f"lp.compile: {op}: a negative index in a replay of a call traced without any; call "
                             "it eagerly, or pass indices of one sign")


def _integer_block(t, parsed, op):
    """Where the integer arrays (and the integers among them) stand, and their
    broadcast shape. Returns ``full`` (the index with its ellipsis expanded, ``None``
    entries kept), ``entries`` (one per axis of ``t``: ``full`` without ``None``),
    ``block`` (the axes of ``t`` they index), ``at`` (the position in ``full`` of
    the first of them when they stand side by side: NumPy keeps the result's axes
    there; ``None`` otherwise: they come first) and ``index_shape``."""
    full = _expand(parsed, t._data.ndim)
    entries = [p for p in full if p is not None]
    block = [i for i, p in enumerate(entries) if not isinstance(p, slice)]
    spots = [i for i, p in enumerate(parsed) if not (p is None or p is Ellipsis or isinstance(p, slice))]
    together = spots[-1] - spots[0] + 1 == len(spots)  # an ellipsis between them separates them (NumPy)
    at = next(i for i, p in enumerate(full) if not (p is None or isinstance(p, slice))) if together else None
    shapes = [() if isinstance(entries[i], int) else tuple(entries[i].shape) for i in block]
    try:
        index_shape = broadcast_shapes(op, *shapes)
    except ValueError:
        raise IndexError(f"{op}: index arrays of shapes {' and '.join(map(str, shapes))} do not broadcast") from None
    return full, entries, block, at, index_shape


def _result_shape(full, at, index_shape, sizes):
    """NumPy's shape of an integer-array index (see :func:`_integer_block`);
    ``sizes`` are the lengths of the axes the slices keep, in order."""
    sizes = iter(sizes)
    out = list(index_shape) if at is None else []
    for i, p in enumerate(full):
        if p is None:
            out.append(1)
        elif isinstance(p, slice):
            out.append(next(sizes))
        elif i == at:
            out.extend(index_shape)
    return tuple(out)


def _index_integer(t, parsed):
    """Integer-array indexing, as NumPy's: integer arrays and integers broadcast
    together and pick elements; slices apply first; ``None`` adds axes. The
    arrays' axes are moved side by side (to the front when they do not stand
    together, as NumPy puts the result's axes there), merged into one, and a
    single ``take`` picks the linear positions (a scatter-add on backward)."""
    full, entries, block, at, index_shape = _integer_block(t, parsed, "getitem")
    index = [entries[axis] for axis in block]  # the positions are the op's to compute (ops.take_at)
    for axis, p in zip(block, index):
        if isinstance(p, int):
            if not -t.shape[axis] <= p < t.shape[axis]:
                raise _out_of_range("getitem", p, axis, t.shape[axis], t.shape)
        else:
            _check_positions(t, p, axis, "getitem")
    lengths = tuple(t.shape[axis] for axis in block)
    if any(isinstance(p, slice) and p != slice(None) for p in entries):
        t = run1(ops.index_basic, t, *_basic_args(t, [slice(None) if i in block else p for i, p in enumerate(entries)]))
    sizes = [n for i, n in enumerate(t.shape) if i not in block]
    if at is None and block != list(range(len(block))):
        order = block + [i for i in range(t.ndim) if i not in block]
        t = run1(ops.getitem_permute, t, tuple(order))
        block = list(range(len(block)))
    first, last = block[0], block[-1]
    shape = t.shape
    if len(block) > 1:
        t = run1(ops.getitem_reshape, t, shape[:first] + (math.prod(shape[first:last + 1]),) + shape[last + 1:])
    out_shape = _result_shape(full, at, index_shape, sizes)
    taken = run1(ops.take_at, t, first, index_shape, lengths, *index)
    if len(index_shape) == 1 and out_shape == shape[:first] + index_shape + shape[last + 1:]:
        return taken
    return run1(ops.getitem_shape, taken, out_shape)  # the new array in the index's shape: not a view of t


def _basic_args(t, items):
    key = _basic_key(t, items, "getitem")
    set_key = tuple(k for k in key if k is not None)
    return key, set_key, None if len(set_key) == len(key) else t._data[set_key].shape


# ---- writing -------------------------------------------------------------------------------


def setitem(t, index, value, name="setitem"):
    """``t[index] = value``: ``value`` (a number, a Tensor or array data, broadcast to
    the indexed shape, cast to ``t``'s dtype) is written into ``t`` itself. ``name``
    is the operation errors name (``fill_`` and friends write through here)."""
    p = parse(t, index, name)
    perm = None
    if p.kind == "basic":
        key = tuple(k for k in p.items if k is not None)
        region = tuple(t._data[p.items].shape)
        stored = tuple(t._data[key].shape)
    elif p.kind == "mask":
        key = p.mask
        region = stored = None  # data-dependent: counted only when a non-scalar value must be checked
    else:
        full, entries, block, at, index_shape = _integer_block(t, p.items, name)
        key = tuple(_checked_positions(t, item, axis, name) if axis in block and not isinstance(item, int)
                    else item for axis, item in enumerate(entries))
        sizes = [len(range(*s.indices(t.shape[i]))) for i, s in enumerate(entries) if isinstance(s, slice)]
        region = _result_shape(full, at, index_shape, sizes)
        # The key written has no None or ellipsis: its arrays may stand together where
        # the user's did not; then the value's index axes move from the front to them.
        at_stored = _integer_block(t, entries, name)[3]
        stored = _result_shape(entries, at_stored, index_shape, sizes)
        if at is None and at_stored is not None:
            n, before = len(index_shape), sum(1 for i in range(block[0]) if isinstance(entries[i], slice))
            perm = (*range(n, n + before), *range(n), *range(n + before, n + len(sizes)))
    value = _value(t, value, region, key if p.kind == "mask" else None, name)
    if isinstance(value, above.tensor) and (stored != region or perm):
        value = run1(ops.broadcast_to, value, region)
        if perm:
            value = run1(ops.permute_dims, run1(ops.reshape, value, index_shape + tuple(sizes)), perm)
        value = run1(ops.reshape, value, stored)
    backend, kind = t._backend, p.kind  # (the write keeps no Tensor: lp.compile's record holds it)
    inplace(t, ops.setitem, [value], kind, key, name=name,
            write=lambda data, v, *_: backend.index_set(data, kind, key, v))


def _scalar_for(t, value, name):
    """A Python number to write into ``t``, as a number of ``t``'s kind: cast as NumPy
    and PyTorch cast it (a float into an integer tensor is truncated toward zero), on
    every device (array_api_strict refuses numbers of another kind). A complex number
    into a real tensor, or an integer beyond the dtype's range, raises."""
    kind = DTYPES[dtype_name(t._data.dtype)].kind
    if isinstance(value, complex) and kind != "c":
        raise TypeError(f"{name}: a complex number cannot be written into the tensor of dtype {t.dtype} (the "
                        "imaginary part would be lost); write its .real")
    if kind == "b":
        return bool(value)
    if kind == "f":
        return float(value)
    if kind == "c":
        return complex(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: {value} cannot be written into the tensor of integer dtype {t.dtype}")
    value = int(value)
    limits = iinfo(t.dtype)
    if not limits.min <= value <= limits.max:
        raise OverflowError(f"{name}: the Python int {value} is out of the range of dtype {t.dtype}")
    return value


def _value(t, value, region, mask=None, name="setitem"):
    """``value`` as a Tensor (or Python number) of ``t``'s dtype and device that
    broadcasts to the indexed ``region``."""
    if isinstance(value, (bool, int, float, complex)) and not isinstance(value, above.tensor):
        return _scalar_for(t, value, name)
    if region is None:  # a boolean mask: as many rows as it selects
        xp = t._backend.xp
        region = (int(xp.sum(xp.astype(mask, xp.int64))),) + t.shape[mask.ndim:]
    if not isinstance(value, above.tensor):
        try:
            value = as_tensor(value, device=t._backend, dtype=dtype_name(t._data.dtype))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: cannot write a value of type {type(value).__name__} into the tensor of "
                            f"shape {t.shape} and dtype {t.dtype}: {exc}") from None
    elif value._backend is not t._backend:
        raise ValueError(device_message(name, t, value))
    if value._data.dtype != t._data.dtype:
        value = value.astype(t.dtype)
    extra = value.ndim - len(region)
    if extra > 0 and all(n == 1 for n in value.shape[:extra]):  # leading axes of one: dropped, as NumPy
        value = value.reshape(value.shape[extra:])
    try:
        shape = broadcast_shapes(name, value.shape, region)
    except ValueError:
        shape = None
    if shape != tuple(region):
        raise ValueError(
            f"{name}: a value of shape {value.shape} does not broadcast to the indexed shape {tuple(region)} "
            f"of the tensor of shape {t.shape}"
        )
    return value

