"""``pad`` and ``one_hot``: PyTorch's ``torch.nn.functional.pad`` (constant, reflect,
replicate and circular padding, differentiable) and ``one_hot`` (class indices to
int64 rows), on every device.

Padding is made of differentiable pieces: a constant pad is the input (cropped by
negative pads) concatenated with constant blocks; the other modes take the input's
values along each padded axis at host-computed indices (``take``, whose gradient
adds up where an index repeats), so their gradients are PyTorch's.
"""

from __future__ import annotations

import math
import numbers

from .._graph.trace import check, note, raised
from .._namespace import arange, asarray, concat, expand_dims, full, take
from ..backends import get_backend
from ..tensor import Tensor

__all__ = ["pad", "one_hot"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _tensor(x, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor as input, got {type(x).__name__}; wrap it with leanpass.Tensor(...)")
    return x


def _pads(pad, x: Tensor, mode: str) -> list:
    """``pad`` as a list of ints, checked against the input's rank and the mode."""
    if isinstance(pad, (str, bytes)) or not hasattr(pad, "__len__"):
        raise TypeError(f"pad: pad must be a sequence of integers (left, right, top, bottom, ...), got {pad!r}")
    pads = list(pad)
    for p in pads:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise TypeError(f"pad: pad must be a sequence of integers, got {pad!r}")
    pads = [int(p) for p in pads]
    if len(pads) % 2:
        raise ValueError(f"pad: the padding length must be divisible by 2, got {len(pads)} ({tuple(pads)})")
    if len(pads) // 2 > x.ndim:
        raise ValueError(f"pad: padding {tuple(pads)} pads {len(pads) // 2} axes but the input of shape {x.shape} "
                         f"has {x.ndim}")
    if mode != "constant":
        axes = len(pads) // 2
        if axes not in (1, 2, 3) or x.ndim not in (axes + 1, axes + 2):
            raise ValueError(f"pad: {mode} padding of {axes} axes (pad {tuple(pads)}) needs a "
                             f"{axes + 1}-D or {axes + 2}-D input, got shape {x.shape} (PyTorch pads the last "
                             "1, 2 or 3 axes of an input with one or two leading axes)")
    return pads


def _fill(value, dtype) -> object:
    """``value`` in the kind of ``dtype`` (a float into an integer tensor is truncated, as PyTorch casts)."""
    if dtype == "bool":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    if dtype.kind == "c":
        return complex(value)
    return float(value)


def _slice(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    return x[(slice(None),) * axis + (slice(start, stop),)]


def _constant(x: Tensor, pads: list, value) -> Tensor:
    fill = _fill(0 if value is None else value, x.dtype)
    for i in range(len(pads) // 2):
        axis = x.ndim - 1 - i
        left, right = pads[2 * i], pads[2 * i + 1]
        n = x.shape[axis]
        if n - max(-left, 0) - max(-right, 0) < 0:  # PyTorch crops first
            raise ValueError(f"pad: negative padding ({left}, {right}) of axis {axis} crops more than its size {n}")
        if left < 0 or right < 0:
            x = _slice(x, axis, max(-left, 0), n - max(-right, 0))
        if left > 0 or right > 0:
            pieces = []
            for count in (left, right):
                if count > 0:
                    shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
                    pieces.append(full(shape, fill, dtype=x.dtype, device=x.device))
                else:
                    pieces.append(None)
            x = concat([p for p in (pieces[0], x, pieces[1]) if p is not None], axis=axis)
    return x


def _indices(mode: str, n: int, left: int, right: int, axis: int):
    """The input positions along an axis of size ``n`` that the padded axis takes: a
    host array (the cpu backend's namespace), moved to the input's device by the caller."""
    xp = get_backend("cpu").xp
    out = n + left + right
    if out < 0:
        raise ValueError(f"pad: {mode} padding ({left}, {right}) of axis {axis} of size {n} leaves {out} values")
    if mode == "circular":  # PyTorch crops by negative pads first, then wraps around what is left
        start, size = max(-left, 0), n - max(-left, 0) - max(-right, 0)
        if left > size or right > size:  # PyTorch's check is against n: beyond size its copies overlap
            raise ValueError(f"pad: circular padding ({left}, {right}) of axis {axis} of size {n} wraps around "
                             f"more than once (at most {size} values remain to wrap)")
        return start + xp.arange(-max(left, 0), size + max(right, 0), dtype=xp.int64) % max(size, 1)
    if mode == "reflect" and (left >= n or right >= n):
        raise ValueError(f"pad: reflect padding ({left}, {right}) of axis {axis} must be less than its size {n}")
    if n < 1 < out + 1:
        raise ValueError(f"pad: {mode} padding ({left}, {right}) of an empty axis {axis}")
    j = xp.arange(-left, n + right, dtype=xp.int64)
    if mode == "reflect":
        j = xp.abs(j)
        return xp.where(j > n - 1, 2 * (n - 1) - j, j)
    return xp.clip(j, 0, n - 1)  # replicate


def pad(input: Tensor, pad, mode: str = "constant", value=None) -> Tensor:  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.pad``: ``pad = (left, right)`` pads the last axis, ``(left, right,
    top, bottom)`` the last two, and so on (negative values crop). ``mode``:
    "constant" (``value``, default 0, on any number of axes), "reflect" (mirrored
    about the edge, which is not repeated; pads smaller than the axis),
    "replicate" (the edge repeated) or "circular" (wrapped around), the last three
    on the last 1, 2 or 3 axes of an input with one or two more. Differentiable."""
    x = _tensor(input, "pad")
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"pad: unknown padding mode {mode!r} (one of {', '.join(_MODES)})")
    pads = _pads(pad, x, mode)
    if value is not None:
        if isinstance(value, (str, bytes)) or not isinstance(value, numbers.Number):
            raise TypeError(f"pad: value must be a number, got {value!r}")
        if mode != "constant" and value != 0:
            raise ValueError(f"pad: padding mode {mode!r} takes no value (got {value!r})")
    if mode == "constant":
        out = _constant(x, pads, value)
        return _copy(x) if out is x else out
    plans = []  # checked for every axis before anything is computed
    for i in range(len(pads) // 2):
        axis = x.ndim - 1 - i
        left, right = pads[2 * i], pads[2 * i + 1]
        if left or right:
            plans.append((axis, _indices(mode, x.shape[axis], left, right, axis)))
    for axis, index in plans:
        x = take(x, asarray(index, device=x.device), axis=axis)
    return x if plans else _copy(x)


def _copy(x: Tensor) -> Tensor:
    """A new tensor of ``x``'s values (nothing padded), in the graph where ``x`` is."""
    return x * 1 if x.requires_grad else asarray(x, copy=True)


def _classes_in_range(xp, data, num_classes: int) -> int:
    """The largest of the class indices ``data`` (-1 for none), after ValueError unless
    they lie in ``[0, num_classes)`` (``num_classes`` -1: any non-negative)."""
    low, high = (int(xp.min(data)), int(xp.max(data))) if math.prod(data.shape) else (0, -1)
    if low < 0:
        raise raised(ValueError(f"one_hot: class indices must be non-negative, got {low}"))
    if num_classes != -1 and high >= num_classes:
        raise raised(ValueError(f"one_hot: class indices must be smaller than num_classes {num_classes}, got {high}"))
    return high


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """PyTorch's ``F.one_hot``: int64 of shape ``tensor.shape + (num_classes,)``, 1 at
    each class index and 0 elsewhere; ``num_classes=-1`` is one more than the largest
    index (read on the host). The indices (integers of any width) must lie in
    ``[0, num_classes)``: checked on CPU devices and whenever ``num_classes`` is -1;
    on a GPU, with ``num_classes`` given, an index outside gives a row of zeros (a
    check would wait for the device)."""
    x = _tensor(tensor, "one_hot")
    if x.dtype.kind not in "iu":
        raise TypeError(f"one_hot: class indices must be integers, got dtype {x.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral):
        raise TypeError(f"one_hot: num_classes must be an integer, got {num_classes!r}")
    num_classes = int(num_classes)
    if num_classes < -1:
        raise ValueError(f"one_hot: num_classes must be -1 (inferred) or at least 0, got {num_classes}")
    backend = get_backend(x.device)
    xp = backend.xp
    data = x._data
    if num_classes == -1 or backend.syncs_cheaply:
        with backend.context():
            if num_classes == -1 and not x.size:
                raise ValueError(f"one_hot: cannot infer the number of classes from an empty tensor of shape "
                                 f"{x.shape}; give num_classes")
            high = _classes_in_range(xp, data, num_classes)
        if num_classes == -1:
            note("one_hot: num_classes inferred from the values (read on the host)")
            num_classes = high + 1
        else:  # (a replay checks them again)
            count = num_classes
            check(lambda values: _classes_in_range(xp, values, count), x)
    classes = arange(num_classes, dtype="int64", device=x.device)
    return (expand_dims(x.detach(), axis=-1) == classes).astype("int64")
