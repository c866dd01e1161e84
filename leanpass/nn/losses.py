"""Loss functions; each returns a 0-d tensor (the mean over the batch)."""

from __future__ import annotations

from .. import ops
from .._dtypes import as_dtype, dtype_name
from .._namespace._util import floating
from ..backends import get_backend, host_array
from ..tensor import Tensor, apply, as_tensor

__all__ = ["mse_loss", "cross_entropy_loss", "binary_cross_entropy_loss"]


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


def mse_loss(prediction: Tensor, target) -> Tensor:
    """Mean squared error."""
    _check_input(prediction, "mse_loss", "predictions")
    target = _target(prediction, target, "mse_loss")
    _same_shape(prediction, target, "mse_loss")
    diff = prediction - target
    return (diff * diff).mean()


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
    logits = floating(logits)
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
    index, bad = _class_indices(logits, target, logits_shape[axis])
    return apply(ops.cross_entropy_index, logits, index, axis=axis, bad=bad)


def _class_indices(logits: Tensor, target, classes: int):
    """``target``'s class indices as an integer Tensor on the logits' device (the
    target itself when it is one), and None once checked, or, where a check would
    make the device wait, a 0-d bool array on the device that says whether any
    index was invalid (invalid ones are then clipped into range)."""
    if isinstance(target, Tensor):
        device = target.device
        if device != logits.device:
            raise ValueError(
                f"cross_entropy_loss: logits are on {logits.device} but the class indices are on "
                f"{device}; move one with .to({logits.device!r})"
            )
        backend, data = get_backend(device), target.data
        kind = as_dtype(data.dtype).kind
    else:  # host data: checked here, for free, before it moves
        backend, data = None, host_array(target, "cross_entropy_loss")
        kind = data.dtype.kind
    if kind not in "iuf":
        raise TypeError(
            f"cross_entropy_loss: class indices must be integers or whole floats, got dtype {data.dtype}"
        )
    if backend is None:
        return _index_tensor(logits, _checked(get_backend("cpu"), data, kind, classes)), None
    if backend.syncs_cheaply:
        with backend.context():
            index = _checked(backend, data, kind, classes)
        return (target if index is data else _index_tensor(logits, index)), None
    xp = backend.xp
    with backend.context():  # a GPU: no check (it would wait for the device), but NaN for an invalid index
        bad = xp.any((data < 0) | (data >= classes))
        if kind == "f":
            index = xp.astype(data, xp.int64)
            bad = bad | xp.any(xp.astype(index, data.dtype) != data)
        return _index_tensor(logits, xp.clip(index if kind == "f" else data, 0, classes - 1)), bad


def _index_tensor(logits: Tensor, index) -> Tensor:
    return as_tensor(index, device=logits.device, dtype=dtype_name(index.dtype))


def _checked(backend, data, kind: str, classes: int):
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
        raise ValueError(
            f"cross_entropy_loss: class indices must be whole numbers in [0, {classes}), "
            f"got values from {float(xp.min(data))} to {float(xp.max(data))}"
        )
    return index


def binary_cross_entropy_loss(logits: Tensor, target) -> Tensor:
    """Binary cross-entropy of sigmoid(logits) against targets in [0, 1], from the logits:
    ``softplus(x) - x * y``, which never overflows (finite for logits of ±1e4)."""
    _check_input(logits, "binary_cross_entropy_loss", "logits")
    logits = floating(logits)
    target = _target(logits, target, "binary_cross_entropy_loss")
    _same_shape(logits, target, "binary_cross_entropy_loss")
    return (logits.softplus() - logits * target).mean()
