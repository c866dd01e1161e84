"""Loss functions: LeanPass's own (``mse_loss``, ``cross_entropy_loss``,
``binary_cross_entropy_loss``: each returns a 0-d tensor, the mean over the batch),
and PyTorch's function forms and modules with their arguments (``reduction``,
``weight``, ``ignore_index``, ``label_smoothing``, ...): ``cross_entropy``/
``CrossEntropyLoss``, ``nll_loss``/``NLLLoss``, ``mse_loss``/``MSELoss``,
``l1_loss``/``L1Loss``, ``binary_cross_entropy_with_logits``/``BCEWithLogitsLoss``,
``smooth_l1_loss``/``SmoothL1Loss`` and ``huber_loss``/``HuberLoss``."""

from __future__ import annotations

import math
import numbers

from .. import ops
from .._checks import broadcast_shapes
from .._dtypes import as_dtype, dtype_name
from .._graph.trace import check, note, raised
from .._namespace import abs as _abs
from .._namespace import expand_dims, minimum, reshape, squeeze, take, take_along_axis, where
from .._namespace import sum as _sum
from .._namespace._util import floating
from ..backends import get_backend, host_array
from ..tensor import Tensor, apply, as_tensor
from .module import Module

__all__ = [
    "mse_loss", "cross_entropy_loss", "binary_cross_entropy_loss",
    "cross_entropy", "nll_loss", "l1_loss", "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss",
]


def _check_input(value, op: str, what: str) -> None:
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{op}: expected a Tensor of {what}, got {type(value).__name__}; wrap it with leanpass.Tensor(...)"
        )


def _target(prediction: Tensor, target, op: str) -> Tensor:
    """The target as a constant Tensor on the prediction's device and dtype."""
    if isinstance(target, Tensor):
        if target.device != prediction.device:
            raise ValueError(
                f"{op}: prediction is on {prediction.device} but target is on {target.device}; "
                f"move one with .to({prediction.device!r})"
            )
        return target if target.dtype == prediction.dtype else target.astype(prediction.dtype)
    try:
        return as_tensor(target, device=prediction.device, dtype=prediction.dtype)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{op}: the target cannot be read: {exc}") from None


def _same_shape(prediction: Tensor, target: Tensor, op: str) -> None:
    if prediction.shape != target.shape:
        raise ValueError(
            f"{op}: prediction of shape {prediction.shape} and target of shape {target.shape} differ "
            "(LeanPass does not broadcast a loss's target)"
        )


def mse_loss(prediction: Tensor, target, size_average=None, reduce=None, reduction: str = "mean",
             weight=None) -> Tensor:
    """Mean squared error; with PyTorch's arguments, ``torch.nn.functional.mse_loss``:
    ``reduction`` "mean" (default), "sum" or "none" (the squared errors), and a
    ``weight`` of the prediction's shape that multiplies each squared error (then
    "mean" divides by the sum of the weights, as PyTorch's). ``size_average`` and
    ``reduce`` are PyTorch's deprecated forms of ``reduction``."""
    _check_input(prediction, "mse_loss", "predictions")
    floating(prediction, "mse_loss")  # complex: refused, as PyTorch's (d * d is not |d|**2)
    reduction = _reduction(reduction, size_average, reduce, "mse_loss")
    target = _target(prediction, target, "mse_loss")
    _same_shape(prediction, target, "mse_loss")
    weight = _elementwise_weight(prediction, weight, "mse_loss")
    diff = prediction - target
    if reduction == "mean" and weight is None:
        return (diff * diff).mean()
    return _weighted(diff * diff, weight, reduction, by_weight=True)


def cross_entropy_loss(logits: Tensor, target, axis: int = -1) -> Tensor:
    """Cross-entropy of softmax(logits) against ``target``, averaged over the batch.

    ``target`` is either one-hot rows / class probabilities of the logits' shape,
    or class indices of the logits' shape without the class ``axis``: integers, or
    floats holding whole numbers. Computed through ``log_softmax`` in one graph
    node, so it is finite for any finite logits and its gradient is
    ``(softmax - target) / batch``.

    A class index outside ``[0, classes)`` raises ``ValueError`` when the target is
    host data (a list, a NumPy array) or a tensor on a CPU device. For a target
    already on a GPU it makes the loss NaN instead, since checking would make the
    GPU wait for the host at every step.
    """
    if not isinstance(logits, Tensor):
        _check_input(logits, "cross_entropy_loss", "logits")
    logits = floating(logits, "cross_entropy_loss")
    logits_shape = logits.shape
    ndim = len(logits_shape)
    if ndim == 0:
        raise ValueError("cross_entropy_loss: logits must have a class axis, got a 0-d tensor")
    if not -ndim <= axis < ndim:
        raise IndexError(f"cross_entropy_loss: axis {axis} is out of range for logits of shape {logits_shape}")
    axis %= ndim
    if not isinstance(target, Tensor) and not hasattr(target, "shape"):  # Python data: read it once, here
        target = host_array(target, "cross_entropy_loss")
    shape = tuple(target.shape)
    if shape == logits_shape:  # probabilities, or one-hot rows
        target = _target(logits, target, "cross_entropy_loss")
        return apply(ops.cross_entropy, logits, target, axis=axis)
    expected = logits_shape[:axis] + logits_shape[axis + 1:]
    if shape != expected:
        raise ValueError(
            f"cross_entropy_loss: target of shape {shape} is neither the logits' shape "
            f"{logits_shape} (probabilities) nor {expected} (class indices)"
        )
    index, bad, _ = _class_indices(logits, target, logits_shape[axis])
    return apply(ops.cross_entropy_index, logits, index, axis=axis, bad=bad)


def _class_indices(logits: Tensor, target, classes: int, ignore_index=None, op: str = "cross_entropy_loss"):
    """``target``'s class indices as an integer Tensor on the logits' device (the
    target itself when it is one), and None once checked, or, where a check would
    make the device wait, a 0-d bool array on the device that says whether any
    index was invalid (invalid ones are then clipped into range).

    Third, for an ``ignore_index`` (PyTorch's: targets equal to it count for
    nothing): a bool Tensor, True where the target is ``ignore_index`` (there the
    index returned is 0), or None where no target is (known without waiting for a
    device; always None without ``ignore_index``)."""
    if isinstance(target, Tensor):
        device = target.device
        if device != logits.device:
            raise ValueError(
                f"{op}: logits are on {logits.device} but the class indices are on "
                f"{device}; move one with .to({logits.device!r})"
            )
        backend, data = get_backend(device), target._data
        kind = as_dtype(data.dtype).kind
    else:  # host data: checked here, for free, before it moves
        backend, data = None, host_array(target, op)
        kind = data.dtype.kind
    if kind not in "iuf":
        raise TypeError(
            f"{op}: class indices must be integers or whole floats, got dtype {data.dtype}"
        )
    ignored = None
    if backend is None or backend.syncs_cheaply:
        if ignore_index is not None and isinstance(target, Tensor):  # (lp.compile records what it does)
            with backend.context():
                some = _equal_to(backend.xp, data, ignore_index)
                some = some is not None and bool(backend.xp.any(some))
            if some:  # a replay of a trace that saw some must see some too
                check(lambda values: _some_ignored(backend.xp, values, ignore_index, op), target, branch=True)
                return _ignored_indices(target, kind, classes, ignore_index, op)
            # a replay of a trace that saw none must see none either
            check(lambda values: _none_ignored(backend.xp, values, ignore_index, op), target, branch=True)
        elif ignore_index is not None:  # (host data)
            with get_backend("cpu").context():
                data, ignored = _without_ignored(get_backend("cpu"), data, ignore_index)
            if ignored is not None:
                note(f"{op}: targets equal to ignore_index (read on the host)")
                ignored = as_tensor(ignored, device=logits.device, dtype="bool")
    if backend is None:
        return _index_tensor(logits, _checked(get_backend("cpu"), data, kind, classes, op)), None, ignored
    if backend.syncs_cheaply:
        with backend.context():
            index = _checked(backend, data, kind, classes, op)
        check(lambda values: _checked(backend, values, kind, classes, op), target)  # a replay checks again
        if ignored is None and index is data:
            return target, None, None
        if ignored is None and kind == "f":  # whole floats: the same cast as an operation (lp.compile records it)
            return target.astype("int64"), None, None
        return _index_tensor(logits, index), None, ignored
    xp = backend.xp
    with backend.context():  # a GPU: no check (it would wait for the device), but NaN for an invalid index
        ignored = None if ignore_index is None else _equal_to(xp, data, ignore_index)
        if ignored is not None:
            data = xp.where(ignored, xp.zeros_like(data), data)
            ignored = as_tensor(ignored, device=logits.device, dtype="bool")
        bad = xp.any((data < 0) | (data >= classes))
        if kind == "f":
            index = xp.astype(data, xp.int64)
            bad = bad | xp.any(xp.astype(index, data.dtype) != data)
        return _index_tensor(logits, xp.clip(index if kind == "f" else data, 0, classes - 1)), bad, ignored


def _none_ignored(xp, values, ignore_index, op) -> None:
    """lp.compile's check, in a replay of a trace whose targets had no ``ignore_index``."""
    if bool(xp.any(values == ignore_index)):
        raise ValueError(
            f"lp.compile: {op}: targets equal to ignore_index ({ignore_index}) in a replay of a call traced "
            "without any; nothing is ignored in a compiled step that never saw one (call it eagerly, or set "
            "LEANPASS_COMPILE=0 before the function is compiled)"
        )


def _some_ignored(xp, values, ignore_index, op) -> None:
    """lp.compile's check, in a replay of a trace whose targets had some ``ignore_index``."""
    if not bool(xp.any(values == ignore_index)):
        raise ValueError(f"lp.compile: {op}: no target equal to ignore_index ({ignore_index}) in a replay of a call "
                         "traced with some")


def _ignored_indices(target: Tensor, kind: str, classes: int, ignore_index: int, op: str):
    """:func:`_class_indices` of a target Tensor on a device that reads values cheaply,
    some of them ``ignore_index``: where they are, and the class indices with 0 there,
    as operations on Tensors (a compiled call replays them), the indices checked."""
    ignored = target == ignore_index
    index = where(ignored, 0, target)
    backend = get_backend(index.device)
    with backend.context():
        _checked(backend, index._data, kind, classes, op)
    check(lambda values: _checked(backend, values, kind, classes, op), index)  # a replay checks again
    if dtype_name(index.dtype) != "int64":  # (whole floats, int32: the cast as an operation, which the
        index = index.astype("int64")  # positions' own cast would be outside the recorded ones)
    return index, None, ignored


def _without_ignored(backend, data, ignore_index):
    """``(data, None)`` where no value is ``ignore_index``, else ``data`` with those
    values 0 and the bool array of where they were (reads one value on the host)."""
    xp = backend.xp
    ignored = _equal_to(xp, data, ignore_index)
    if ignored is None or not bool(xp.any(ignored)):
        return data, None
    return xp.where(ignored, xp.zeros_like(data), data), ignored


def _equal_to(xp, data, value: int):
    """``data == value``, or None where no value of ``data``'s integer dtype can be
    ``value`` (-100 in uint8: the standard refuses to compare them)."""
    if xp.isdtype(data.dtype, "integral"):
        info = xp.iinfo(data.dtype)
        if not info.min <= value <= info.max:
            return None
    return data == value


def _index_tensor(logits: Tensor, index) -> Tensor:
    return as_tensor(index, device=logits.device, dtype=dtype_name(index.dtype))


def _checked(backend, data, kind: str, classes: int, op: str = "cross_entropy_loss"):
    """``data`` as integer class indices (itself if it is integer), raising
    ValueError unless every value is a whole number in ``[0, classes)``."""
    xp = backend.xp
    if kind == "f":
        valid = bool(xp.all((data >= 0) & (data < classes)))  # False for NaN
        index = xp.astype(data, xp.int64) if valid else data
        valid = valid and bool(xp.all(xp.astype(index, data.dtype) == data))
    else:
        index = data
        valid = backend.all_in_range(data, classes)
    if not valid:
        raise raised(ValueError(f"{op}: class indices must be whole numbers in [0, {classes}), "
                                f"got values from {float(xp.min(data))} to {float(xp.max(data))}"))
    return index


def binary_cross_entropy_loss(logits: Tensor, target, weight=None, size_average=None, reduce=None,
                              reduction: str = "mean", pos_weight=None) -> Tensor:
    """Binary cross-entropy of sigmoid(logits) against targets in [0, 1], from the logits:
    ``softplus(x) - x * y``, which never overflows (finite for logits of ±1e4). With
    PyTorch's arguments (``binary_cross_entropy_with_logits``): ``weight`` (broadcast
    to the logits' shape) multiplies each element's loss, ``pos_weight`` (broadcast
    along the last axes, one per class) the positive term:
    ``(1 - y) x + ((pos_weight - 1) y + 1) softplus(-x)``; ``reduction`` "mean",
    "sum" or "none"."""
    return _bce(logits, target, weight, size_average, reduce, reduction, pos_weight, "binary_cross_entropy_loss")


def _bce(logits, target, weight, size_average, reduce, reduction, pos_weight, op):
    _check_input(logits, op, "logits")
    reduction = _reduction(reduction, size_average, reduce, op)
    logits = floating(logits, op)
    target = _target(logits, target, op)
    _same_shape(logits, target, op)
    weight = _broadcast_weight(logits, weight, "weight", op)
    pos_weight = _broadcast_weight(logits, pos_weight, "pos_weight", op)
    if pos_weight is None:
        if weight is None and reduction == "mean":
            return (logits.softplus() - logits * target).mean()
        loss = logits.softplus() - logits * target
    else:  # PyTorch's form: (1 - y) x + log_weight * softplus(-x)
        loss = (1.0 - target) * logits + ((pos_weight - 1.0) * target + 1.0) * (-logits).softplus()
    return _weighted(loss, weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target, weight=None, size_average=None, reduce=None,  # noqa: A002
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """``torch.nn.functional.binary_cross_entropy_with_logits``:
    :func:`binary_cross_entropy_loss` under PyTorch's name."""
    return _bce(input, target, weight, size_average, reduce, reduction, pos_weight,
                "binary_cross_entropy_with_logits")


# ---- PyTorch's arguments: reduction, weights -----------------------------------------------

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(reduction, size_average, reduce, op: str) -> str:
    """``reduction``, or PyTorch's deprecated ``size_average``/``reduce`` read as one
    (``legacy_get_string``: either given overrides it); ValueError for an unknown one."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "mean" if size_average and reduce else "sum" if reduce else "none"
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: {reduction!r} is not a valid value for reduction (one of 'none', 'mean', 'sum')")
    return reduction


def _weighted(loss: Tensor, weight, reduction: str, *, by_weight: bool = False) -> Tensor:
    """``loss * weight`` (no weight: ``loss``) reduced; "mean" with a weight divides by
    the sum of the weights where ``by_weight`` (PyTorch's mse_loss and l1_loss), by the
    count otherwise (its huber_loss and the binary cross-entropy)."""
    if weight is not None:
        loss = loss * weight
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if weight is not None and by_weight:
        return _ratio(loss.sum(), weight.sum())
    return loss.mean()


def _ratio(total: Tensor, count: Tensor) -> Tensor:
    """``total / count``, NaN where ``count`` is 0 (PyTorch's mean over nothing),
    without a floating-point warning, and no gradient through that NaN."""
    zero = count == 0
    return where(zero, math.nan, total / where(zero, 1.0, count))


def _operand(like: Tensor, value, name: str, op: str) -> Tensor:
    """A weight given as a Tensor on ``like``'s device or as host data, as a Tensor
    in ``like``'s dtype; TypeError or ValueError naming ``name`` and ``op``."""
    if isinstance(value, Tensor):
        if value.device != like.device:
            raise ValueError(f"{op}: the input is on {like.device} but {name} is on {value.device}; "
                             f"move one with .to({like.device!r})")
        if value.dtype.kind not in "iufb":
            raise TypeError(f"{op}: {name} must be real numbers, got dtype {value.dtype}")
        return value if value.dtype == like.dtype else value.astype(like.dtype)
    try:
        data = host_array(value, f"{op} {name}")
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{op}: {name} cannot be read: {exc}") from None
    if data.dtype.kind not in "iufb":
        raise TypeError(f"{op}: {name} must be real numbers, got dtype {data.dtype}")
    return as_tensor(data, device=like.device, dtype=dtype_name(like._data.dtype))


def _elementwise_weight(prediction: Tensor, weight, op: str):
    """PyTorch's ``weight`` of mse_loss, l1_loss and huber_loss: one per element, of the
    prediction's shape."""
    if weight is None:
        return None
    weight = _operand(prediction, weight, "weight", op)
    if weight.shape != prediction.shape:
        raise ValueError(f"{op}: weight of shape {weight.shape} and input of shape {prediction.shape} differ "
                         "(one weight per element)")
    return weight


def _broadcast_weight(logits: Tensor, weight, name: str, op: str):
    """A ``weight`` or ``pos_weight`` of the binary cross-entropy: broadcast to the
    logits' shape (ValueError naming both shapes otherwise)."""
    if weight is None:
        return None
    weight = _operand(logits, weight, name, op)
    try:
        if broadcast_shapes(op, weight.shape, logits.shape) != logits.shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"{op}: {name} of shape {weight.shape} does not broadcast to the input's shape "
                         f"{logits.shape}") from None
    return weight


def _number(value, name: str, op: str) -> float:
    if isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number, got {value!r}")
    return float(value)


# ---- element-wise losses ---------------------------------------------------------------------


def _pair(input, target, op: str):
    _check_input(input, op, "predictions")
    input = floating(input, None if op == "l1_loss" else op)  # |d| is defined for complex d (PyTorch's too)
    target = _target(input, target, op)
    _same_shape(input, target, op)
    return input, target


def l1_loss(input: Tensor, target, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
            weight=None) -> Tensor:
    """``|input - target|`` reduced, as ``torch.nn.functional.l1_loss`` (``weight``:
    one per element, "mean" then divides by their sum); the gradient at 0 is 0."""
    reduction = _reduction(reduction, size_average, reduce, "l1_loss")
    input, target = _pair(input, target, "l1_loss")
    weight = _elementwise_weight(input, weight, "l1_loss")
    return _weighted(_abs(input - target), weight, reduction, by_weight=True)


def _huber(input: Tensor, target: Tensor, delta: float) -> Tensor:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, ``d = input -
    target``, as ``m (|d| - 0.5 m)`` with ``m = min(|d|, delta)``: one expression
    (bit for bit PyTorch's values, and its gradient ``clip(d, -delta, delta)``, at
    ``|d| = delta`` too), and ``d**2`` is never formed, so it cannot overflow."""
    size = _abs(input - target)
    m = minimum(size, delta)
    return m * (size - 0.5 * m)


def smooth_l1_loss(input: Tensor, target, size_average=None, reduce=None, reduction: str = "mean",  # noqa: A002
                   beta: float = 1.0) -> Tensor:
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``d = input -
    target``), reduced, as ``torch.nn.functional.smooth_l1_loss``; ``beta=0`` is the
    L1 loss. ``beta`` must be at least 0."""
    beta = _number(beta, "beta", "smooth_l1_loss")
    if not beta >= 0:
        raise ValueError(f"smooth_l1_loss: beta must be at least 0, got {beta}")
    reduction = _reduction(reduction, size_average, reduce, "smooth_l1_loss")
    input, target = _pair(input, target, "smooth_l1_loss")
    loss = _abs(input - target) if beta == 0 else _huber(input, target, beta) / beta
    return _weighted(loss, None, reduction)


def huber_loss(input: Tensor, target, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:  # noqa: A002
    """``0.5 d**2`` where ``|d| <= delta``, else ``delta (|d| - 0.5 delta)`` (``d = input -
    target``), reduced, as ``torch.nn.functional.huber_loss`` (``weight``: one per
    element; "mean" is then the mean of the weighted losses, as PyTorch's).
    ``delta`` must be positive."""
    delta = _number(delta, "delta", "huber_loss")
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    reduction = _reduction(reduction, None, None, "huber_loss")
    input, target = _pair(input, target, "huber_loss")
    weight = _elementwise_weight(input, weight, "huber_loss")
    return _weighted(_huber(input, target, delta), weight, reduction)


# ---- PyTorch's cross-entropy and negative log-likelihood ----------------------------------------


def _class_axis(input: Tensor, axis, op: str) -> int:
    """PyTorch's class axis: 1 of ``(N, C, ...)``, 0 of ``(C,)`` (or ``axis``)."""
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have a class axis, (C,) or (N, C, ...), got a 0-d tensor")
    if axis is None:
        return 1 if input.ndim >= 2 else 0
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}")
    if not -input.ndim <= axis < input.ndim:
        raise IndexError(f"{op}: axis {axis} is out of range for input of shape {input.shape}")
    return int(axis) % input.ndim


def _class_weight(input: Tensor, weight, classes: int, op: str):
    if weight is None:
        return None
    weight = _operand(input, weight, "weight", op)
    if weight.shape != (classes,):
        raise ValueError(f"{op}: weight of shape {weight.shape} does not fit the {classes} classes of an input of "
                         f"shape {input.shape} (one weight per class: ({classes},))")
    return weight


def _ignore_index(ignore_index, op: str) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"{op}: ignore_index must be an integer, got {ignore_index!r}")
    return int(ignore_index)


def _index_shape(input: Tensor, target, axis: int, op: str):
    """The target as host data or a Tensor, with its shape, which must be the input's
    without the class axis (ValueError naming both shapes)."""
    if not isinstance(target, Tensor) and not hasattr(target, "shape"):
        target = host_array(target, op)
    shape = tuple(target.shape)
    expected = input.shape[:axis] + input.shape[axis + 1:]
    return target, shape, expected


def _nll(logp: Tensor, index: Tensor, ignored, bad, weight, axis: int, reduction: str, smoothing: float) -> Tensor:
    """PyTorch's ``nll_loss`` of the log-probabilities ``logp`` (classes along ``axis``)
    at the class ``index``, and, with ``smoothing`` > 0, ``cross_entropy``'s label
    smoothing: ``(1 - smoothing) * nll + smoothing / C * (-sum(weight * logp))``, each
    part reduced as PyTorch reduces it. ``ignored`` (a bool Tensor, or None): targets
    that count for nothing; ``bad``: see ``_class_indices`` (the loss is then NaN)."""
    classes = logp.shape[axis]
    picked = squeeze(take_along_axis(logp, expand_dims(index, axis=axis), axis=axis), axis=axis)
    w = None if weight is None else reshape(take(weight, reshape(index, (-1,))), index.shape)
    if ignored is not None:  # weight 0 where the target is ignored
        w = (~ignored).astype(logp.dtype) if w is None else where(ignored, 0.0, w)
    loss = -picked if w is None else -(picked * w)
    total = None  # the denominator of "mean": the weights of the targets that count
    if reduction == "mean":
        total = None if w is None else w.sum()
        loss = loss.mean() if total is None else _ratio(loss.sum(), total)
    elif reduction == "sum":
        loss = loss.sum()
    if smoothing:
        if weight is None:
            smooth = -_sum(logp, axis=axis)
        else:
            shape = [1] * logp.ndim
            shape[axis] = classes
            smooth = -_sum(logp * reshape(weight, tuple(shape)), axis=axis)
        if ignored is not None:
            smooth = where(ignored, 0.0, smooth)
        if reduction == "mean":
            smooth = smooth.mean() if total is None else _ratio(smooth.sum(), total)
        elif reduction == "sum":
            smooth = smooth.sum()
        loss = (1.0 - smoothing) * loss + (smoothing / classes) * smooth
    if bad is not None:
        loss = where(as_tensor(bad, device=logp.device, dtype="bool"), math.nan, loss)
    return loss


def nll_loss(input: Tensor, target, weight=None, size_average=None, ignore_index: int = -100,  # noqa: A002
             reduce=None, reduction: str = "mean") -> Tensor:
    """PyTorch's ``nll_loss``: ``-input[n, target[n]] * weight[target[n]]`` for
    log-probabilities ``input`` of shape ``(N, C, ...)`` or ``(C,)`` and class indices
    ``target`` of shape ``(N, ...)`` or ``()``; targets equal to ``ignore_index``
    count for nothing; "mean" divides by the sum of the weights of the targets that
    count (NaN when none does)."""
    op = "nll_loss"
    _check_input(input, op, "log-probabilities")
    reduction = _reduction(reduction, size_average, reduce, op)
    ignore_index = _ignore_index(ignore_index, op)
    input = floating(input, op)
    axis = _class_axis(input, None, op)
    classes = input.shape[axis]
    weight = _class_weight(input, weight, classes, op)
    target, shape, expected = _index_shape(input, target, axis, op)
    if shape != expected:
        raise ValueError(f"{op}: target of shape {shape} does not fit input of shape {input.shape}: class indices "
                         f"of shape {expected} expected (the input's without its class axis {axis})")
    index, bad, ignored = _class_indices(input, target, classes, ignore_index, op)
    return _nll(input, index, ignored, bad, weight, axis, reduction, 0.0)


def cross_entropy(input: Tensor, target, weight=None, size_average=None, ignore_index: int = -100,  # noqa: A002
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0, *, axis=None) -> Tensor:
    """PyTorch's ``F.cross_entropy``: the cross-entropy of ``softmax(input)`` along the
    class axis (1 of ``(N, C, ...)``, the only one of ``(C,)``; or ``axis``) against
    ``target``, which is **class indices** of the input's shape without that axis
    (integers, or floats holding whole numbers; those equal to ``ignore_index`` count
    for nothing) or **probabilities** of the input's shape. ``weight``: one per class;
    ``label_smoothing`` in [0, 1] mixes the target with the uniform distribution;
    ``reduction`` "mean" (with class indices and a weight: divided by the weights of
    the targets that count; with probabilities: by the number of rows), "sum" or
    "none". With the defaults it is :func:`cross_entropy_loss` along that axis, one
    graph node. (0.3's positional third argument, the axis, still works.)"""
    op = "cross_entropy"
    if isinstance(weight, numbers.Integral) and not isinstance(weight, bool):  # cross_entropy(x, t, axis), 0.3's
        axis, weight = weight, None
    _check_input(input, op, "logits")
    reduction = _reduction(reduction, size_average, reduce, op)
    ignore_index = _ignore_index(ignore_index, op)
    smoothing = _number(label_smoothing, "label_smoothing", op)
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be between 0.0 and 1.0, got {smoothing}")
    input = floating(input, op)
    axis = _class_axis(input, axis, op)
    classes = input.shape[axis]
    weight = _class_weight(input, weight, classes, op)
    target, shape, expected = _index_shape(input, target, axis, op)
    if shape == input.shape:  # probabilities (or one-hot rows)
        probs = _target(input, target, op)
        if weight is None and not smoothing and (reduction == "mean" or reduction == "sum" and probs.size):
            loss = apply(ops.cross_entropy, input, probs, axis=axis)
            return loss if reduction == "mean" else loss * math.prod(expected)
        logp = input.log_softmax(axis)
        if smoothing:
            probs = probs * (1.0 - smoothing) + smoothing / classes
        product = logp * probs
        if weight is not None:
            product = product * reshape(weight, tuple(classes if i == axis else 1 for i in range(input.ndim)))
        loss = -_sum(product, axis=axis)
        if reduction == "sum":
            return loss.sum()
        return loss.mean() if reduction == "mean" else loss
    if shape != expected:
        raise ValueError(f"{op}: target of shape {shape} is neither the input's shape {input.shape} (probabilities) "
                         f"nor {expected} (class indices: the input's without its class axis {axis})")
    index, bad, ignored = _class_indices(input, target, classes, ignore_index, op)
    if weight is None and not smoothing and reduction == "mean" and ignored is None:
        return apply(ops.cross_entropy_index, input, index, axis=axis, bad=bad)  # one node
    return _nll(input.log_softmax(axis), index, ignored, bad, weight, axis, reduction, smoothing)


# ---- the modules ---------------------------------------------------------------------------------


def _buffer(value, name: str, op: str):
    """A loss module's ``weight``/``pos_weight``: None, or a Tensor (host data becomes one
    of the default float dtype), kept as a buffer, as PyTorch's."""
    if value is None or isinstance(value, Tensor):
        return value
    try:
        return Tensor(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{op}: {name} cannot be read: {exc}") from None


class _Loss(Module):
    """A loss module: ``forward(input, target)`` calls its function with the module's
    arguments. ``reduction`` (or PyTorch's deprecated ``size_average``/``reduce``) is
    checked here, at construction."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        self.reduction = _reduction(reduction, size_average, reduce, type(self).__name__)


class CrossEntropyLoss(_Loss):
    """:func:`cross_entropy` as a module, as ``torch.nn.CrossEntropyLoss``; ``weight`` is a
    buffer (in the state dict when given)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(size_average, reduce, reduction)
        self.ignore_index = _ignore_index(ignore_index, "CrossEntropyLoss")
        self.label_smoothing = _number(label_smoothing, "label_smoothing", "CrossEntropyLoss")
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be between 0.0 and 1.0, "
                             f"got {self.label_smoothing}")
        self.register_buffer("weight", _buffer(weight, "weight", "CrossEntropyLoss"))

    def forward(self, input, target):  # noqa: A002
        return cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    """:func:`nll_loss` as a module, as ``torch.nn.NLLLoss``."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.ignore_index = _ignore_index(ignore_index, "NLLLoss")
        self.register_buffer("weight", _buffer(weight, "weight", "NLLLoss"))

    def forward(self, input, target):  # noqa: A002
        return nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class MSELoss(_Loss):
    """:func:`mse_loss` as a module, as ``torch.nn.MSELoss``."""

    def forward(self, input, target):  # noqa: A002
        return mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """:func:`l1_loss` as a module, as ``torch.nn.L1Loss``."""

    def forward(self, input, target):  # noqa: A002
        return l1_loss(input, target, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """:func:`binary_cross_entropy_with_logits` as a module, as
    ``torch.nn.BCEWithLogitsLoss``; ``weight`` and ``pos_weight`` are buffers."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight, "weight", "BCEWithLogitsLoss"))
        self.register_buffer("pos_weight", _buffer(pos_weight, "pos_weight", "BCEWithLogitsLoss"))

    def forward(self, input, target):  # noqa: A002
        return binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                pos_weight=self.pos_weight)


class SmoothL1Loss(_Loss):
    """:func:`smooth_l1_loss` as a module, as ``torch.nn.SmoothL1Loss``."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = _number(beta, "beta", "SmoothL1Loss")
        if not self.beta >= 0:
            raise ValueError(f"SmoothL1Loss: beta must be at least 0, got {self.beta}")

    def forward(self, input, target):  # noqa: A002
        return smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """:func:`huber_loss` as a module, as ``torch.nn.HuberLoss``."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(None, None, reduction)
        self.delta = _number(delta, "delta", "HuberLoss")
        if not self.delta > 0:
            raise ValueError(f"HuberLoss: delta must be positive, got {self.delta}")

    def forward(self, input, target):  # noqa: A002
        return huber_loss(input, target, reduction=self.reduction, delta=self.delta)
