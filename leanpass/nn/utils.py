"""``leanpass.nn.utils``: gradient clipping, as ``torch.nn.utils``.

Both functions change the gradients in place, on their devices, without reading a
value back to the host (no step waits for a GPU), and skip parameters that have
no gradient since it was last reset (``has_grad`` is False).
"""

from __future__ import annotations

from .._graph.trace import action
from .._namespace import clip, isfinite, stack, zeros
from ..autograd import no_grad
from ..linalg import vector_norm
from ..tensor import Tensor, as_tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(parameters, op: str) -> tuple[list[Tensor], list[Tensor]]:
    """The gradients of ``parameters`` (a Tensor or an iterable of them) that have
    one, as Tensors sharing the gradients' memory; and the parameters."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    params = list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"{op}: parameters must be Tensors, got {type(p).__name__}")
    grads = []
    for p in params:
        if p.has_grad:
            g = p.grad  # an array, or a Tensor after backward(create_graph=True)
            grads.append(g if isinstance(g, Tensor) else as_tensor(g, device=p.device))
    return grads, params


@action
def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of ``parameters`` so that their joint ``norm_type``-norm
    (the norm of the vector of every gradient's norm; ``float("inf")`` for the
    largest absolute value) is at most ``max_norm``: each is multiplied by
    ``min(1, max_norm / (total_norm + 1e-6))``, computed on the device.

    Returns the total norm before clipping, a 0-d Tensor on the first gradient's
    device; 0 when no parameter has a gradient, in the first parameter's dtype and
    on its device (PyTorch gives its default dtype's 0.0 on the CPU: here the norm
    keeps one dtype and device from step to step, which a compiled step that
    returns it needs), or 0.0 on the default device when there is no parameter. With
    ``error_if_nonfinite=True``, a total norm that is nan or infinite raises
    ``RuntimeError`` before anything changes; that check reads the norm on the
    host (a GPU synchronisation)."""
    try:
        max_norm, norm_type = float(max_norm), float(norm_type)
    except (TypeError, ValueError):
        raise ValueError(f"clip_grad_norm_: max_norm and norm_type must be numbers (or 'inf'), got {max_norm!r} "
                         f"and {norm_type!r}") from None
    grads, params = _grads(parameters, "clip_grad_norm_")
    if not grads:
        return zeros((), dtype=params[0].dtype, device=params[0].device) if params else Tensor(0.0)
    first = grads[0].device
    with no_grad():
        norms = [vector_norm(g, ord=norm_type).to(first) for g in grads]
        total = vector_norm(stack(norms), ord=norm_type)
        if error_if_nonfinite and not bool(isfinite(total)):
            raise RuntimeError(
                f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is non-finite "
                f"({total.item()}), so it cannot be clipped; pass error_if_nonfinite=False to scale them by it anyway"
            )
        scale = clip(max_norm / (total + 1e-6), max=1.0)
        scales = {}
        for g in grads:
            key = (g.device, g.dtype.name)
            if key not in scales:
                scales[key] = scale.to(g.device).astype(g.dtype)
            g *= scales[key]
    return total


@action
def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clip every gradient of ``parameters`` to ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    if not clip_value >= 0:
        raise ValueError(f"clip_grad_value_: clip_value must be >= 0, got {clip_value}")
    with no_grad():
        for g in _grads(parameters, "clip_grad_value_")[0]:
            g[...] = clip(g, -clip_value, clip_value)
