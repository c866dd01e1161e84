"""Hooks: gradient hooks (``t.register_hook``), post-accumulate-grad hooks, and the
callbacks a hook queues for the end of a backward call (DDP's bucketed all-reduce).

A tensor's hooks live in its own ``_hooks`` slot; the engine looks for them only
while some tensor has one (the counts ``_hooks_registered`` and
``_grad_hooks_registered``).
"""

from __future__ import annotations

import itertools
import threading
import weakref

from .._dtypes import dtype_name
from .above import above
from .trace import note

# ---- hooks: code that runs when a backward call has written a leaf's gradient ---------------

# A leaf's post-accumulate-grad hooks live in its own ``_hooks`` slot (a list), so a hook
# that refers to its tensor makes an ordinary cycle the garbage collector frees. The
# engine looks at them only while some hook is registered (``_hooks_registered``).
_hooks_registered = 0
# whether a non-leaf tensor ever retained its gradient (``retain_grad``): until one has,
# no node has a ``_tensor`` for the engine to look at
retaining = False
# post-accumulate-grad hooks added or removed so far: lp.compile replays the hooks there
# are, so a traced call that adds or removes one runs eagerly
post_hook_changes = [0]
_rounds = itertools.count(1)


class _Callbacks(threading.local):
    queue: list | None = None  # a list while a backward call runs its hooks
    round: int | None = None  # which backward call's hooks are running (a new number each)


_callbacks = _Callbacks()


class RemovableHandle:
    """What registering a hook returns: ``handle.remove()`` unregisters it (a
    post-accumulate-grad hook, or with ``gradient`` a gradient hook)."""

    __slots__ = ("_hooks", "_hook", "_gradient")

    def __init__(self, hooks: list, hook, gradient: bool = False):
        self._hooks, self._hook, self._gradient = hooks, hook, gradient

    def remove(self) -> None:
        global _hooks_registered, _grad_hooks_registered
        hooks, self._hooks = self._hooks, None
        if hooks is None:
            return
        kept = hooks.grad if self._gradient else hooks
        if self._hook in kept:
            kept.remove(self._hook)
            live = hooks.live
            if not live[1]:  # its tensor is alive: the hook counted till now
                if self._gradient:
                    live[2] -= 1
                    _grad_hooks_registered -= 1
                    note(_HOOKED_INSIDE)
                else:
                    live[0] -= 1
                    _hooks_registered -= 1
                    post_hook_changes[0] += 1


class _HookList(list):
    """A tensor's post-accumulate-grad hooks (the list) and gradient hooks (``grad``),
    with ``live = [how many post hooks count, whether its tensor was freed, how many
    gradient hooks count]``: the tensor's finalizer holds ``live`` only, never the
    hooks, which may refer to the tensor (that would keep it alive for good)."""

    __slots__ = ("live", "grad")


def _hook_list(tensor) -> _HookList:
    """``tensor._hooks``, made (with its finalizer) the first time."""
    hooks = getattr(tensor, "_hooks", None)
    if hooks is None:
        hooks = tensor._hooks = _HookList()
        hooks.live = [0, False, 0]
        hooks.grad = []
        weakref.finalize(tensor, _forget_hooks, hooks.live)
    return hooks


def _forget_hooks(live: list) -> None:
    """A tensor with hooks was freed: they no longer count (else every later backward
    call would look for hooks)."""
    global _hooks_registered, _grad_hooks_registered
    _hooks_registered -= live[0]
    _grad_hooks_registered -= live[2]
    live[0], live[1], live[2] = 0, True, 0


def add_post_accumulate_grad_hook(tensor, hook) -> RemovableHandle:
    """See :meth:`leanpass.Tensor.register_post_accumulate_grad_hook`."""
    global _hooks_registered
    if not callable(hook):
        raise TypeError(f"register_post_accumulate_grad_hook: the hook must be callable, got {type(hook).__name__}")
    if tensor._node is not None or not tensor._rg:
        raise RuntimeError(
            "register_post_accumulate_grad_hook: only a leaf that requires grad gets its gradient written; "
            f"this tensor of shape {tuple(tensor._data.shape)} is "
            + ("not a leaf" if tensor._node is not None else "a leaf that does not require grad")
        )
    hooks = _hook_list(tensor)
    hooks.append(hook)
    hooks.live[0] += 1
    _hooks_registered += 1
    post_hook_changes[0] += 1
    return RemovableHandle(hooks, hook)


# A tensor's gradient hooks (``t.register_hook``) live in its ``_hooks`` too, in the list's
# ``grad`` (``live[2]`` counts them); the engine looks for them only while some tensor
# has one (``_grad_hooks_registered``).
_grad_hooks_registered = 0
# lp.compile replays a leaf's gradient hooks, those there are at each replay: a traced call
# that adds or removes one (a replay would not, nor hook a value it makes) runs eagerly
_HOOKED_INSIDE = "a gradient hook (register_hook) added or removed inside the function"


def add_grad_hook(tensor, hook) -> RemovableHandle:
    """See :meth:`leanpass.Tensor.register_hook`."""
    global _grad_hooks_registered
    if not callable(hook):
        raise TypeError(f"register_hook: the hook must be callable, got {type(hook).__name__}")
    if not tensor._rg:
        raise RuntimeError(f"register_hook: the tensor of shape {tuple(tensor._data.shape)} does not require grad, "
                           "so no gradient reaches a hook")
    # a non-leaf's hooks go on the node of its value now, as PyTorch's: after an in-place
    # change they see the gradient of the value they were registered on
    hooks = _hook_list(tensor if tensor._node is None else tensor._node)
    hooks.grad.append(hook)
    hooks.live[2] += 1
    _grad_hooks_registered += 1
    note(_HOOKED_INSIDE)
    return RemovableHandle(hooks, hook, gradient=True)


def hooked(tensor, post: bool = True) -> bool:
    """Whether ``tensor`` has gradient hooks, or (``post``) post-accumulate-grad hooks."""
    hooks = getattr(tensor, "_hooks", None)
    return hooks is not None and (bool(hooks.grad) or (post and len(hooks) > 0))


def _with_grad_hooks(tensor, grad):
    """``grad`` (an array, or a Tensor with ``create_graph``) of ``tensor`` after its
    gradient hooks, in the order they were registered: each gets the gradient as a
    Tensor and may return a Tensor of its shape, dtype and device to use instead, or
    None to keep it. Anything else raises before any ``.grad`` is written."""
    hooks = getattr(tensor, "_hooks", None)
    if hooks is None or not hooks.grad:
        return grad
    Tensor, leaf = above.tensor, above.leaf
    tensors = isinstance(grad, Tensor)
    shape = tuple(tensor._data.shape)
    for hook in tuple(hooks.grad):
        given = grad if tensors else leaf(grad, tensor._backend)
        got = hook(given)
        if got is None:
            continue
        name = getattr(hook, "__name__", type(hook).__name__)
        if not isinstance(got, Tensor):
            raise TypeError(f"register_hook: hook {name!r} of the tensor of shape {shape} returned "
                            f"{type(got).__name__}; return a Tensor (or None to keep the gradient)")
        if got._backend is not tensor._backend:
            raise ValueError(f"register_hook: hook {name!r} returned a gradient on {got.device} for the tensor on "
                             f"{tensor.device}")
        if dtype_name(got._data.dtype) != dtype_name(given._data.dtype):
            raise TypeError(f"register_hook: hook {name!r} changed the gradient's dtype from {given.dtype} to "
                            f"{got.dtype}")
        if tuple(got.shape) != shape:
            raise ValueError(f"register_hook: hook {name!r} of the tensor of shape {shape} returned a gradient of "
                             f"shape {tuple(got.shape)}")
        grad = got if tensors else got._data
    return grad


def queue_callback(callback) -> None:
    """Run ``callback()`` once the current backward call has run every leaf's hooks
    (as ``torch.autograd.Variable._execution_engine.queue_callback``): a hook that
    starts work for a group of gradients -- a bucket's all-reduce -- finishes it here.
    Only valid inside a hook that a backward call is running (``RuntimeError`` elsewhere)."""
    queue = _callbacks.queue
    if queue is None:
        raise RuntimeError("queue_callback: only a hook that a backward call is running can queue a callback")
    queue.append(callback)


def hook_round() -> int | None:
    """A number that identifies the backward call whose hooks are running now (a new
    one for each call), or None outside hooks: a hook tells a new call from the last."""
    return _callbacks.round


def _run_post_hooks(leaves) -> None:
    """Each leaf's post-accumulate-grad hooks, in the order the leaves' gradients were
    written, then the callbacks they queued; the gradients are all stored already.
    If a hook raises, the rest and the callbacks do not run."""
    outer = _callbacks.queue, _callbacks.round
    _callbacks.queue, _callbacks.round = [], next(_rounds)
    try:
        for leaf in leaves:
            hooks = getattr(leaf, "_hooks", None)
            if hooks:
                for hook in tuple(hooks):
                    hook(leaf)
        queue = _callbacks.queue
        while queue:
            queue.pop(0)()
    finally:
        _callbacks.queue, _callbacks.round = outer
