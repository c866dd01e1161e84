"""Loss functions; each returns a 0-d tensor (the mean over the batch)."""

from __future__ import annotations

import math

from .. import ops
from ..backends import get_backend
from ..tensor import Tensor, apply, as_tensor

__all__ = ["mse_loss", "cross_entropy_loss", "binary_cross_entropy_loss"]


def _target(prediction: Tensor, target, op: str) -> Tensor:
    """The target as a constant Tensor on the prediction's device and dtype."""
    if isinstance(target, Tensor):
        if target.device != prediction.device:
            raise ValueError(
                f"{op}: prediction is on {prediction.device} but target is on {target.device}; "
                f"move one with .to({prediction.device!r})"
            )
        return target if target.dtype == prediction.dtype else target.astype(prediction.dtype)
    return as_tensor(target, device=prediction.device, dtype=prediction.dtype)


def _same_shape(prediction: Tensor, target: Tensor, op: str) -> None:
    if prediction.shape != target.shape:
        raise ValueError(
            f"{op}: prediction of shape {prediction.shape} and target of shape {target.shape} differ "
            "(LeanPass does not broadcast a loss's target)"
        )


def mse_loss(prediction: Tensor, target) -> Tensor:
    """Mean squared error."""
    target = _target(prediction, target, "mse_loss")
    _same_shape(prediction, target, "mse_loss")
    diff = prediction - target
    return (diff * diff).mean()


def cross_entropy_loss(logits: Tensor, target, axis: int = -1) -> Tensor:
    """Cross-entropy of softmax(logits) against ``target``, averaged over the batch.

    ``target`` is either one-hot rows / class probabilities of the logits' shape,
    or integer class indices of the logits' shape without the class ``axis``.
    Computed through ``log_softmax`` in one graph node, so it is finite for any
    finite logits and its gradient is ``(softmax - target) / batch``.

    A class index outside ``[0, classes)`` raises ``ValueError`` on CPU devices; on
    a GPU it makes the loss NaN instead, since checking would make the GPU wait
    for the host at every step.
    """
    ndim = logits.ndim
    if ndim == 0:
        raise ValueError("cross_entropy_loss: logits must have a class axis, got a 0-d tensor")
    if not -ndim <= axis < ndim:
        raise IndexError(f"cross_entropy_loss: axis {axis} is out of range for logits of shape {logits.shape}")
    axis %= ndim
    target = _target(logits, target, "cross_entropy_loss")
    one_hot = target.shape != logits.shape
    if one_hot:
        classes = logits.shape[axis]
        expected = logits.shape[:axis] + logits.shape[axis + 1:]
        if target.shape != expected:
            raise ValueError(
                f"cross_entropy_loss: target of shape {target.shape} is neither the logits' shape "
                f"{logits.shape} (probabilities) nor {expected} (class indices)"
            )
        target = as_tensor(_one_hot(target, classes, axis), device=logits.device)
    return apply(ops.cross_entropy, logits, target, axis=axis, one_hot=one_hot)


def _one_hot(indices: Tensor, classes: int, axis: int):
    """One-hot rows (as an array) of integer class ``indices``, the class axis at ``axis``."""
    backend = get_backend(indices.device)
    with backend.context():
        return _one_hot_here(backend, indices.data, classes, axis)


def _one_hot_here(backend, data, classes, axis):
    xp = backend.xp
    shape = [1] * (data.ndim + 1)
    shape[axis] = classes
    labels = xp.reshape(backend.arange(classes, data.dtype), tuple(shape))
    column = list(data.shape)
    column.insert(axis, 1)
    match = xp.reshape(data, tuple(column)) == labels
    if backend.syncs_cheaply:  # every valid index matches exactly one class
        if int(xp.count_nonzero(match)) != math.prod(data.shape):
            raise ValueError(
                f"cross_entropy_loss: class indices must be whole numbers in [0, {classes}), "
                f"got values from {float(xp.min(data))} to {float(xp.max(data))}"
            )
        return xp.astype(match, data.dtype)
    # no check without a sync: a row that matches no class divides 0 by 0 and poisons the loss
    onehot = xp.astype(match, data.dtype)
    return onehot / xp.sum(onehot, axis=axis, keepdims=True)


def binary_cross_entropy_loss(logits: Tensor, target) -> Tensor:
    """Binary cross-entropy of sigmoid(logits) against targets in [0, 1], from the logits:
    ``softplus(x) - x * y``, which never overflows (finite for logits of ±1e4)."""
    target = _target(logits, target, "binary_cross_entropy_loss")
    _same_shape(logits, target, "binary_cross_entropy_loss")
    return (logits.softplus() - logits * target).mean()
