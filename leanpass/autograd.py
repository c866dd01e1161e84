"""Grad mode (per thread) and the backward engine.

There is one engine, :func:`backprop`: ``t.backward()``, ``autograd.grad``,
``autograd.backward``, hooks and DDP's callbacks all go through it, first order and
``create_graph`` alike. It walks the graph with an explicit heap (no recursion, so
depth is unlimited), accumulates each node's gradient in a dict keyed by node, frees
it as soon as it has been passed on, and drops each node's backward function (and
so the arrays it saved) once it has run, unless ``retain_graph=True``. The one
thing that differs with ``create_graph`` is how a node's gradients are computed:
:func:`_graph_grads` records the node's rule as a graph of Tensors.

It knows tensors only by their attributes: ``_data``, ``_grad``, ``_backend``,
``_prev``, ``_backward``, ``_op``, ``_retain``, ``_seq``, ``_vc`` and ``_rg``
(requires grad).

Releasing a graph also cuts its links: each node's ``_prev`` becomes a
:class:`Released` that holds only the leaves the backward call wrote into (and,
weakly, the retained tensors), so a kept output (``losses.append(loss)``) keeps
no activation alive, yet ``zero_grad_all`` still reaches every gradient it wrote.

Threads: the gradients one backward call computes are added into ``.grad`` under
one lock (:data:`grad_lock`), taken once per call, so backward calls on several
threads into shared leaves lose no update.

Versions: a tensor whose array is changed in place gets a :class:`Version` (shared
with the tensors that view the same memory) holding how many changes it has had
and when (on the same clock as the nodes' creation numbers). A node whose
backward reads an input's array -- or its own output's -- that was changed after
the node was made raises ``RuntimeError`` instead of computing a wrong gradient.
A node whose input was changed in place *by a recorded operation* and does not
read it sends that input's gradient to the value it saw (the input's state
before the change).
"""

from __future__ import annotations

import functools
import heapq
import inspect
import itertools
import threading
import weakref
from collections import deque

from ._dtypes import dtype_name

__all__ = [
    "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled", "backward", "grad",
    "zero_graph_grads",
    "Version", "increment_version", "increment_versions", "Released", "grad_lock", "queue_callback",
]


# Creation order of graph nodes: a node's inputs always have smaller numbers.
sequence = itertools.count()


class _GradState(threading.local):
    enabled = True


_state = _GradState()

# Held while gradients are added into ``.grad`` (once per backward call, for all its
# leaves) and while ``.grad`` allocates its zeros: a read-modify-write of one
# tensor's gradient is never interleaved with another thread's.
grad_lock = threading.Lock()


# ---- hooks: code that runs when a backward call has written a leaf's gradient ---------------

# A leaf's post-accumulate-grad hooks live in its own ``_hooks`` slot (a list), so a hook
# that refers to its tensor makes an ordinary cycle the garbage collector frees. The
# engine looks at them only while some hook is registered (``_hooks_registered``).
_hooks_registered = 0
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
                else:
                    live[0] -= 1
                    _hooks_registered -= 1


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
    if tensor._prev or not tensor._rg:
        raise RuntimeError(
            "register_post_accumulate_grad_hook: only a leaf that requires grad gets its gradient written; "
            f"this tensor of shape {tuple(tensor._data.shape)} is "
            + ("not a leaf" if tensor._prev else "a leaf that does not require grad")
        )
    hooks = _hook_list(tensor)
    hooks.append(hook)
    hooks.live[0] += 1
    _hooks_registered += 1
    return RemovableHandle(hooks, hook)


# A tensor's gradient hooks (``t.register_hook``) live in its ``_hooks`` too, in the list's
# ``grad`` (``live[2]`` counts them); the engine looks for them only while some tensor
# has one (``_grad_hooks_registered``).
_grad_hooks_registered = 0


def add_grad_hook(tensor, hook) -> RemovableHandle:
    """See :meth:`leanpass.Tensor.register_hook`."""
    global _grad_hooks_registered
    if not callable(hook):
        raise TypeError(f"register_hook: the hook must be callable, got {type(hook).__name__}")
    if not tensor._rg:
        raise RuntimeError(f"register_hook: the tensor of shape {tuple(tensor._data.shape)} does not require grad, "
                           "so no gradient reaches a hook")
    hooks = _hook_list(tensor)
    hooks.grad.append(hook)
    hooks.live[2] += 1
    _grad_hooks_registered += 1
    return RemovableHandle(hooks, hook, gradient=True)


def _has_grad_hooks(tensor) -> bool:
    hooks = getattr(tensor, "_hooks", None)
    return hooks is not None and bool(hooks.grad)


def _with_grad_hooks(tensor, grad):
    """``grad`` (an array, or a Tensor with ``create_graph``) of ``tensor`` after its
    gradient hooks, in the order they were registered: each gets the gradient as a
    Tensor and may return a Tensor of its shape, dtype and device to use instead, or
    None to keep it. Anything else raises before any ``.grad`` is written."""
    hooks = getattr(tensor, "_hooks", None)
    if hooks is None or not hooks.grad:
        return grad
    from ._node import leaf
    from .tensor import Tensor

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


def is_grad_enabled() -> bool:
    """Whether operations on this thread record a graph for backward."""
    return _state.enabled


class _GradMode:
    """Context manager and decorator setting grad mode on the current thread."""

    _enabled: bool

    def __new__(cls, func=None):
        self = super().__new__(cls)
        if func is not None:  # used bare as a decorator: @no_grad
            return self(func)
        return self

    def __enter__(self):
        self._prev = _state.enabled
        _state.enabled = self._enabled
        return self

    def __exit__(self, *exc_info):
        _state.enabled = self._prev
        return False

    def _fresh(self):
        """A new context manager of this mode (one per call of a decorated function)."""
        return type(self)()

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"{type(self).__name__}() decorates a function, got {type(func).__name__}")
        mode = self._fresh
        if inspect.isgeneratorfunction(func):
            return functools.wraps(func)(_generator_in_mode(func, mode))

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with mode():
                return func(*args, **kwargs)

        return wrapper


def _generator_in_mode(func, mode):
    """A generator function whose every resume (next, send, throw, close) runs ``func``'s
    generator in ``mode``, and the caller's code between resumes in the caller's mode
    (as torch does)."""

    def generator(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with mode():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with mode():
                        gen.close()
                    raise
                except BaseException as exc:  # noqa: BLE001 - thrown in by the caller: passed on
                    with mode():
                        response = gen.throw(exc)
                else:
                    with mode():
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value

    return generator


class no_grad(_GradMode):
    """Disable graph recording on this thread: ``with no_grad(): ...`` or ``@no_grad()``."""

    _enabled = False


class enable_grad(_GradMode):
    """Re-enable graph recording on this thread, e.g. inside a ``no_grad`` block."""

    _enabled = True


class set_grad_enabled(_GradMode):
    """Set graph recording on this thread to ``mode``, as PyTorch's: called alone it
    sets the mode at once (``set_grad_enabled(False)``); as a context manager
    (``with set_grad_enabled(is_train):``) or a decorator it restores the previous
    mode afterwards."""

    def __new__(cls, mode):
        return object.__new__(cls)

    def __init__(self, mode):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {type(mode).__name__}")
        self._enabled = mode
        self._prev = _state.enabled
        _state.enabled = mode

    def __enter__(self):
        return self

    def _fresh(self):
        return set_grad_enabled(self._enabled)

    def __call__(self, func):
        _state.enabled = self._prev  # as a decorator it changes nothing until the function runs
        return super().__call__(func)


class inference_mode(_GradMode):
    """``inference_mode()`` (or ``inference_mode(True)``): no graph is recorded, as under
    :class:`no_grad` (PyTorch's name for evaluation code; LeanPass has no separate
    inference tensors, so tensors made here may later enter a graph).
    ``inference_mode(False)`` records one, as PyTorch's (also inside ``no_grad``)."""

    def __new__(cls, mode=True):
        if callable(mode):  # used bare as a decorator: @inference_mode
            return cls(True)(mode)
        return object.__new__(cls)

    def __init__(self, mode=True):
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode: mode must be a bool, got {type(mode).__name__}")
        self._mode = mode

    def __enter__(self):
        self._prev = _state.enabled
        _state.enabled = not self._mode
        return self

    def _fresh(self):
        return inference_mode(self._mode)


class Version:
    """The version counter of an array: ``count`` in-place changes so far, the last
    at ``last`` on the creation clock (``-1``: never), and the recent change times."""

    __slots__ = ("count", "changed", "last", "times", "views")

    def __init__(self):
        self.count = 0
        self.changed = -1  # when the array last changed in place
        self.last = -1  # when anything last happened: a change, or views made anew after one
        self.times = deque(maxlen=64)  # enough to name the version a node saw; the rest is history
        self.views = []  # weak references to the tensors that view this memory

    def remade(self) -> None:
        """The views of this memory were made anew (see ``leanpass._node``)."""
        self.last = next(sequence)

    def add_view(self, tensor) -> None:
        views = self.views
        views.append(weakref.ref(tensor))
        if len(views) > 32 and len(views) & (len(views) - 1) == 0:  # now and then: drop the dead
            views[:] = [r for r in views if r() is not None]

    def live_views(self) -> list:
        return [v for v in (r() for r in self.views) if v is not None]

    def bump(self) -> None:
        self.count += 1
        self.changed = self.last = now = next(sequence)
        self.times.append(now)

    def at(self, seq: int) -> str:
        """The version the array had when the node numbered ``seq`` was made."""
        later = sum(1 for t in self.times if t > seq)
        if later == len(self.times) and len(self.times) >= 32:
            return f"at most {self.count - later}"
        return str(self.count - later)


def version_of(tensor) -> Version:
    """The tensor's version counter, made on first need."""
    vc = tensor._vc
    if vc is None:
        vc = tensor._vc = Version()
    return vc


def increment_version(tensor) -> None:
    """Record that ``tensor``'s array was changed in place (as
    ``torch.autograd.graph.increment_version``): a backward that needs the old
    values then raises instead of computing a wrong gradient. In-place operators,
    ``t[i] = v``, optimizer steps and ``load_state_dict`` call it; code that writes
    into ``tensor.data`` itself can too."""
    version_of(tensor).bump()


def increment_versions(tensors) -> None:
    """:func:`increment_version` of each tensor (an optimizer's step): the same,
    written out (no call per tensor)."""
    for t in tensors:
        vc = t._vc
        if vc is None:
            vc = t._vc = Version()
        vc.count += 1
        vc.changed = vc.last = now = next(sequence)
        vc.times.append(now)


def _stale(node, parent, seq):
    """``parent`` (an input of ``node``) changed in place after ``node`` was made:
    raise if ``node``'s backward reads its array, else return the state of
    ``parent`` that ``node`` saw (a recorded in-place change keeps it as
    ``_older`` of the changed tensor). A recorded in-place change saves none of
    the arrays it read from the changed memory: it read copies (see ``leanpass._node``)."""
    op = node._op
    changed = parent._vc.changed > seq
    for position, p in enumerate(node._prev):
        if changed and p is parent and op.saved(position):
            raise RuntimeError(
                f"backward through {op!r}: its input {position} (shape {tuple(parent._data.shape)}) was "
                f"changed in place after {op!r} saved it: it is at version {parent._vc.count}, {op!r} needs "
                f"version {parent._vc.at(seq)}. Compute the graph again after the change, or change a copy "
                "instead (x = x + ... instead of x += ...)"
            )
    return _state_seen(parent, seq)


def _state_seen(parent, seq):
    """The state of ``parent`` that the node numbered ``seq`` saw: ``parent`` itself,
    or, if it changed in place (or was made anew) after that node, the earlier state
    a recorded change keeps as ``_older``."""
    state = parent
    while getattr(state, "_seq", -1) > seq:
        state = state._older
    return state


def _inputs_seen(node) -> list:
    """``node``'s inputs as it saw them (see :func:`_state_seen`). A recorded in-place
    change keeps the tensor's identity, so ``node._prev`` can name a tensor whose
    graph now runs through later operations (even through ``node`` itself)."""
    if not node._prev:  # a leaf
        return []
    seq = node._seq
    out = []
    for p in node._prev:
        vc = getattr(p, "_vc", None)
        out.append(_state_seen(p, seq) if vc is not None and vc.last > seq else p)
    return out


def _check_output(node, seq):
    if node._op.saves_out and node._vc.changed > seq:
        raise RuntimeError(
            f"backward through {node._op!r}: its output (shape {tuple(node._data.shape)}) was changed in "
            f"place after {node._op!r} saved it: it is at version {node._vc.count}, {node._op!r} needs "
            f"version {node._vc.at(seq)}. Change a copy instead (y = y + ... instead of y += ...)"
        )


_RELEASED = (
    "backward through a graph whose saved arrays were already freed (by an earlier "
    "backward call); pass retain_graph=True to the first backward call to "
    "backpropagate through the graph more than once"
)


def _unbroadcast(xp, grad, shape):
    """Sum a gradient of a broadcast result back to an operand's ``shape``."""
    lead = grad.ndim - len(shape)
    inner = tuple(lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    if not inner:  # only leading axes (a bias): one sum gives the shape
        return xp.sum(grad, axis=tuple(range(lead)))
    grad = xp.sum(grad, axis=tuple(range(lead)) + inner, keepdims=True)
    return xp.reshape(grad, shape)


def _store(tensor, grad, fresh: bool) -> None:
    """Add ``grad`` into ``tensor.grad`` (a leaf's, or a non-leaf's that asked to retain it)."""
    backend = tensor._backend
    data = tensor._data
    if grad.dtype != data.dtype:
        grad = backend.xp.astype(grad, data.dtype)
        fresh = True
    old = tensor._grad
    if old is not None:
        if type(old) is not backend.array_type:  # a Tensor, from backward(create_graph=True)
            from ._node import leaf

            tensor._grad = old + leaf(grad if fresh else backend.copy(grad), backend)
            tensor._read_zeros = False
            return
        grad = old + grad
    elif not fresh:
        grad = backend.copy(grad)
    if type(grad) is not backend.array_type:  # a NumPy scalar from a 0-d result
        grad = backend.as_array(grad)
    tensor._grad = grad
    tensor._read_zeros = False


def _check_devices(pairs) -> None:
    """Raise, before any ``.grad`` is written, for a gradient computed on another device
    than its tensor's: the tensor moved (``model.to``) after the graph was recorded."""
    from .backends import backend_of_array

    for tensor, grad in pairs:
        backend = tensor._backend
        if backend.one_device and type(grad) is backend.array_type:
            continue
        array, data = getattr(grad, "_data", grad), tensor._data  # a Tensor's array (create_graph)
        if type(array) is type(data) and getattr(array, "device", None) == getattr(data, "device", None):
            continue
        source = backend_of_array(array)
        if source is backend or (source is None and backend.one_device):  # NumPy's scalars for 0-d results
            continue
        raise ValueError(
            f"backward: a gradient on {source.device if source is not None else 'cpu'} for a "
            f"tensor of shape {tuple(tensor._data.shape)} on {tensor.device}: the tensor moved to another device "
            "after the graph was recorded (model.to(...) between forward and backward); run the forward again"
        )


class Released:
    """``_prev`` of a node after a backward call released its graph: not its inputs
    any more (they, and the arrays they hold, are freed unless someone else keeps
    them), but the leaves that backward call wrote gradients into and, weakly, the
    tensors that retained theirs -- what :func:`zero_graph_grads` resets. It is
    never empty (the node stays a non-leaf) and is shared by all the released nodes."""

    __slots__ = ("leaves", "retained")

    def __init__(self, leaves: tuple, retained: tuple):
        self.leaves = leaves
        self.retained = retained  # weak references: a retained tensor holds this too

    def __bool__(self) -> bool:
        return True

    def __iter__(self):
        yield from self.leaves
        for ref in self.retained:
            t = ref()
            if t is not None:
                yield t

    def __repr__(self) -> str:
        return f"<released graph: {len(self.leaves)} leaves, {len(self.retained)} retained>"


def backprop(roots, grads, *, create_graph: bool = False, retain_graph: bool = False, targets=None):
    """THE backward engine: backpropagate ``grads`` (one per root, owned by the engine:
    arrays, or Tensors with ``create_graph``) through the graph below ``roots``.

    Nodes are visited from a heap in decreasing creation order (``_seq``): every node
    was made after its inputs, so each one is reached after all the nodes it feeds,
    and its gradient is complete when popped; it is dropped once passed on. How a
    node's gradients are computed is the one thing that differs between first order
    and ``create_graph`` (Chainer's ``_backprop_to_all``): its backward rule on the
    arrays it saved, or :func:`_graph_grads`, which records the rule as a graph of
    Tensors. Either reads only values the node saw (``_stale`` raises for a saved one
    that changed since).

    With ``targets`` (a sequence of tensors) only the nodes on a path to one are
    visited, their gradients are returned (None for one that got none) and no
    ``.grad`` is written; without, the gradients are added into the leaves' (and
    retained tensors') ``.grad``, under :data:`grad_lock`, and only at the end: an
    error on the way (a released graph, a custom op's wrong gradient) leaves
    everything as it was. The graph is released unless ``retain_graph``.
    """
    wanted = needed = None
    if targets is not None:
        wanted = {id(t) for t in targets}
        needed = _needed(roots, wanted)
    hooked = _grad_hooks_registered  # read once: a local test per node below
    pending: dict = {}
    heap: list = []
    leaves: dict = {}  # leaf -> (gradient, fresh: the engine's own array, free to keep as .grad)
    found: dict = {}
    retained: list = []
    done: list = []
    push, pop = heapq.heappush, heapq.heappop
    for root, g in zip(roots, grads):
        if needed is not None and id(root) not in needed:
            continue
        if root._prev:
            old = pending.get(root)
            if old is None:
                pending[root] = g
                push(heap, (-root._seq, root))
            else:
                pending[root] = old + g
        else:
            old = leaves.get(root)
            leaves[root] = (g, True) if old is None else (old[0] + g, True)
    with enable_grad() if create_graph else no_grad():
        while heap:
            node = pop(heap)[1]
            grad = pending.pop(node)
            if wanted is not None and id(node) in wanted:
                found[id(node)] = grad  # as PyTorch's autograd.grad: before the input's own hooks
                if hooked:
                    grad = _with_grad_hooks(node, grad)
                if isinstance(node._prev, Released) or not any(id(p) in needed for p in _inputs_seen(node)):
                    continue  # nothing asked for lies below it
            elif hooked:  # its gradient is complete: the tensor's hooks see it (and may change it)
                grad = _with_grad_hooks(node, grad)
            backward = node._backward
            if backward is None:
                raise RuntimeError(_RELEASED)
            if node._retain and targets is None:
                retained.append((node, grad))
            done.append(node)
            seq = node._seq
            vc = node._vc
            if vc is not None and vc.last > seq:
                _check_output(node, seq)
            parents = node._prev
            changed = False  # an input's values changed in place since the node was made
            for parent in parents:
                pvc = parent._vc
                if pvc is not None and pvc.last > seq:
                    parents, changed = _states_seen(node, seq)
                    break
            if create_graph:
                parent_grads = _graph_grads(node, parents, grad, changed)
            else:
                guard = node._backend.guard
                if guard is None:
                    parent_grads = backward(grad)
                else:  # cuda:N on a machine of several GPUs: run where the data is
                    with guard:
                        parent_grads = backward(grad)
            fresh_op = node._op.fresh
            for parent, pgrad in zip(parents, parent_grads):
                if pgrad is None or not parent._rg or (needed is not None and id(parent) not in needed):
                    continue
                if parent._backend is not node._backend and not create_graph:  # moved (model.to) since
                    _check_devices(((parent, pgrad),))
                data = parent._data
                fresh = fresh_op
                if pgrad.shape != data.shape:
                    pgrad = _unbroadcast(_leaf_xp(parent, create_graph), pgrad, tuple(data.shape))
                    fresh = True
                if pgrad.dtype is not data.dtype and pgrad.dtype != data.dtype:  # a custom op's, a mixed in-place
                    pgrad = _leaf_xp(parent, create_graph).astype(pgrad, parent.dtype if create_graph else data.dtype)
                    fresh = True
                if parent._prev:
                    old = pending.get(parent)
                    if old is None:
                        pending[parent] = pgrad
                        push(heap, (-parent._seq, parent))
                    else:
                        pending[parent] = old + pgrad
                else:
                    old = leaves.get(parent)
                    leaves[parent] = (pgrad, fresh) if old is None else (old[0] + pgrad, True)
        if hooked:  # each leaf's gradient of this call, complete: through its hooks
            for leaf in leaves:
                if _has_grad_hooks(leaf):  # a hook may keep what it saw (or gave): .grad is a copy
                    leaves[leaf] = (_with_grad_hooks(leaf, leaves[leaf][0]), False)
    if targets is not None:
        for t, (g, _) in leaves.items():
            if id(t) in wanted:
                found[id(t)] = g
    else:
        if create_graph:
            _check_devices((t, g) for t, (g, _) in leaves.items())
        with grad_lock:
            for node, g in retained:
                _store_any(node, g, create_graph, fresh=False)
            for leaf, (g, fresh) in leaves.items():
                if (fresh and not create_graph and leaf._grad is None and type(g) is leaf._backend.array_type
                        and g.dtype == leaf._data.dtype):
                    leaf._grad = g  # the common case of _store, written out: a training step's every leaf
                    leaf._read_zeros = False
                else:
                    _store_any(leaf, g, create_graph, fresh)
    if not retain_graph:
        _release(done, leaves, retained)
    if targets is None:
        if _hooks_registered:
            _run_post_hooks(leaves)
        return None
    from ._node import leaf

    out = []
    for t in targets:  # raw arrays become Tensors outside any graph, owning their arrays
        g = found.get(id(t))
        out.append(g if g is None or create_graph else leaf(t._backend.copy(g), t._backend))
    return out


def _states_seen(node, seq):
    """``node``'s inputs as it saw them (see :func:`_stale`, which raises for one whose
    saved values changed since), and whether any of their values changed since."""
    states = []
    changed = False
    for parent in node._prev:
        pvc = parent._vc
        if pvc is not None and pvc.last > seq:
            changed = changed or pvc.changed > seq
            parent = _stale(node, parent, seq)
        states.append(parent)
    return states, changed


def _release(done, leaves, retained) -> None:
    """Free what the nodes ``done`` by a backward call saved: each keeps only a shared
    :class:`Released` record (the leaves written, the retained tensors weakly)."""
    released = Released(tuple(leaves), tuple(weakref.ref(n) for n, _ in retained) if retained else ())
    for node in done:
        node._backward = None
        node._replay = None  # it holds the inputs too
        node._prev = released


def zero_graph_grads(root) -> None:
    """Reset ``.grad`` of every tensor in ``root``'s graph (lazily: it reads as zeros).

    Through a released part of the graph it reaches what :class:`Released` keeps: the
    leaves the releasing backward call wrote into and the retained tensors still alive."""
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        node._grad = None
        node._read_zeros = False
        for parent in node._prev:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)


# ---- create_graph: backward rules recorded as graphs of Tensors ----------------------------
#
# With ``create_graph=True`` the engine asks :func:`_graph_grads` for a node's gradients:
# the node's operation runs again on Tensors (``_replay``, with a GraphBackend whose
# namespace is LeanPass's own), so that its backward rule -- the same code, written
# against ``xp`` -- records a graph that can be differentiated again; or, where an input
# changed since, its rule on saved values (``Op.rule``) runs on the node's output.


class GraphBackend:
    """What an operation's forward sees as ``be`` when it runs on Tensors: ``xp`` is
    LeanPass's own namespace, arrays are Tensors of ``base``'s device, and there are
    no fused kernels. Every other method is :class:`leanpass.backends.Backend`'s
    generic one, written against ``xp``."""

    def __init__(self, base):
        import leanpass

        from .backends._base import NO_FUSED, Backend
        from .tensor import Tensor

        self.base = base
        self.xp = leanpass
        self.linalg = leanpass.linalg
        self.fft = leanpass.fft
        self.device = self.xp_device = base.device
        self.fused = NO_FUSED
        self.guard = None
        self.syncs_cheaply = base.syncs_cheaply
        self.array_type = Tensor
        for name in ("zeros", "ones", "arange", "create", "matmul", "index_add", "index_set", "index_get",
                     "take_rows", "sub_at_rows", "all_in_range", "relu_fresh", "relu_mask",
                     "relu_mask_fresh", "scale_fresh", "sum_rows"):
            setattr(self, name, getattr(Backend, name).__get__(self))

    def copy(self, t):
        return t * 1 if t._rg else self.xp.asarray(t, copy=True)  # the copy stays in the graph

    def as_array(self, value):
        return self.xp.asarray(value, device=self.device)

    def context(self):
        return self.base.context()

    def quiet(self):
        return self.base.quiet()


_graph_backends: dict = {}


def graph_backend(base) -> GraphBackend:
    gb = _graph_backends.get(base)
    if gb is None:
        gb = _graph_backends[base] = GraphBackend(base)
    return gb


def _needed(roots, targets) -> set:
    """The ids of the nodes on a path from ``roots`` to a target (the targets included):
    the only ones :func:`backprop` visits when it computes gradients for ``targets``."""
    needed: set = set()
    done: set = set()
    stack = [(r, False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            if key in targets or any(id(p) in needed for p in _inputs_seen(node)):
                needed.add(key)
            continue
        if key in done:
            continue
        done.add(key)
        if isinstance(node._prev, Released):  # its part of the graph was freed by an earlier backward
            if key in targets:  # its own gradient is all that is asked of it
                needed.add(key)
            elif any(id(leaf) in targets for leaf in node._prev.leaves):
                raise RuntimeError(_RELEASED)
            continue
        if key in targets and not node._prev:
            needed.add(key)
            continue
        stack.append((node, True))
        stack.extend((p, False) for p in _inputs_seen(node) if p._rg and id(p) not in done)
    return needed


def _graph_grads(node, parents, grad, changed: bool):
    """The gradients of ``node``'s inputs as Tensors in a graph (``create_graph``).

    Its inputs are ``parents`` (each as the node saw it). Where none changed in place
    since the forward, the operation runs again on them with a :class:`GraphBackend`,
    and its own backward rule records the graph. Where one changed, the backward
    must not see a value computed from the changed one: ``_stale`` has already
    refused an input the rule reads, so the rule runs on what the node saved -- its
    unchanged inputs and its output, the node itself (``Op.rule``); an operation whose
    backward reads neither its output nor the changed input runs again, as the values
    computed from the changed input are never read."""
    op = node._op
    replay = getattr(node, "_replay", None)
    if replay is None:
        raise RuntimeError(
            f"backward with create_graph=True: {op!r} (output of shape {tuple(node._data.shape)}) cannot be "
            "differentiated twice: it is an in-place change or a custom operation without a replay; compute it "
            "out of place"
        )
    gb = graph_backend(node._backend)
    if changed and op.saves_out:
        if op.rule is None or not isinstance(replay, (tuple, dict)):
            raise RuntimeError(
                f"backward with create_graph=True through {op!r}: an input of {op!r} was changed in place after "
                f"{op!r} was computed, and its derivative cannot be formed from what {op!r} saved; compute the "
                "graph again after the change, or change a copy instead (x = x + ... instead of x += ...)"
            )
        with gb.quiet():
            if type(replay) is dict:
                return op.rule(gb.xp, parents, node, grad, **replay)
            if op.needs:
                return op.rule(gb.xp, parents, node, grad, *replay, needs=tuple(p._rg for p in parents))
            return op.rule(gb.xp, parents, node, grad, *replay)
    _, backward = _replayed(node, replay, gb, parents)
    return backward(grad)


def _replayed(node, replay, gb, prev):
    """``(out, backward)`` of ``node``'s operation run again on the Tensors ``prev`` (see
    :func:`leanpass._node.make` for the forms ``replay`` takes)."""
    op = node._op
    if type(replay) is tuple:
        if op.needs:
            return op.fn(gb, *prev, *replay, needs=tuple(p._rg for p in prev))
        return op.fn(gb, *prev, *replay)
    if type(replay) is dict:
        return op.fn(gb, *prev, **replay)
    return replay(gb, prev)


def _leaf_xp(tensor, create_graph: bool):
    return graph_backend(tensor._backend).xp if create_graph else tensor._backend.xp


def _store_any(tensor, grad, create_graph: bool, fresh: bool = False) -> None:
    """Add a gradient into ``tensor.grad``: an array as :func:`_store` does, or a Tensor
    (``create_graph``): a copy in the graph, as PyTorch's (the gradient Tensor may be
    another leaf's too, ``(a + b)``'s, or a read-only broadcast view, ``sum``'s), or
    the sum with the Tensor ``.grad`` held."""
    if not create_graph:
        _store(tensor, grad, fresh)
        return
    from . import ops
    from ._node import leaf, run1

    old = tensor._grad
    with enable_grad():  # the copy or the sum stays differentiable
        if old is None:
            grad = run1(ops.copy, grad)
        else:
            grad = (old if old.__class__ is grad.__class__ else leaf(old, tensor._backend)) + grad
    tensor._grad = grad
    tensor._read_zeros = False


def _seeds(name, what, given, outputs, grads, create_graph):
    """The engine's seed for each of ``outputs`` from ``grads`` (one per output: None
    is 1 for a one-element output, else a Tensor or array-like of its shape): arrays
    the engine owns, or Tensors with ``create_graph``."""
    from ._node import as_tensor, leaf
    from .tensor import Tensor

    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        backend = out._backend
        if g is None:
            if out.size != 1:
                raise RuntimeError(
                    f"{name}: grad can be implicitly created only for scalar outputs; {what}[{i}] has shape "
                    f"{out.shape}: pass {given}"
                )
            g = backend.ones(out._data.shape, out._data.dtype)
            seeds.append(leaf(g, backend) if create_graph else g)
            continue
        g = g if isinstance(g, Tensor) else as_tensor(g, device=out.device, dtype=str(out.dtype))
        if g.shape != out.shape:
            raise ValueError(f"{name}: {given}[{i}] has shape {g.shape}, {what}[{i}] {out.shape}")
        if g.device != out.device:
            raise ValueError(f"{name}: {given}[{i}] is on {g.device}, {what}[{i}] on {out.device}")
        if g.dtype != out.dtype:
            g = g.astype(out.dtype)
        seeds.append(g if create_graph else backend.copy(g._data))
    return seeds


def grad(outputs, inputs, grad_outputs=None, *, retain_graph=None, create_graph=False, allow_unused=None,
         materialize_grads=False):
    """The gradients of ``outputs`` with respect to ``inputs``, as ``torch.autograd.grad``.

    ``outputs`` and ``inputs``: a Tensor or a sequence of Tensors (``inputs`` may be
    non-leaf tensors of the graph). ``grad_outputs``: one per output (a Tensor,
    array-like or None; None is 1 for a one-element output). Returns a tuple with one
    gradient per input (a Tensor; None for an input that was not used, if
    ``allow_unused``; zeros of its shape with ``materialize_grads=True``, which implies
    ``allow_unused``, as PyTorch's). No ``.grad`` is written. With ``create_graph=True`` the
    gradients are Tensors in a graph (differentiable again, also with respect to
    ``grad_outputs``); ``retain_graph`` defaults to ``create_graph``.
    """
    from ._node import make
    from .tensor import Tensor

    if not isinstance(materialize_grads, bool):
        raise TypeError(f"grad: materialize_grads must be a bool, got {type(materialize_grads).__name__}")
    if allow_unused is None:
        allow_unused = materialize_grads
    elif materialize_grads and not allow_unused:
        raise ValueError("grad: materialize_grads=True needs allow_unused to be True or None (as PyTorch's)")
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for kind, group in (("outputs", outputs), ("inputs", inputs)):
        for i, t in enumerate(group):
            if not isinstance(t, Tensor):
                raise TypeError(f"grad: {kind}[{i}] must be a Tensor, got {type(t).__name__}")
    if not outputs or not inputs:
        raise ValueError("grad: give at least one output and one input")
    for i, t in enumerate(outputs):
        if not t._rg:
            raise RuntimeError(f"grad: outputs[{i}] (shape {t.shape}) does not require grad and has no graph")
    for i, t in enumerate(inputs):
        if not t._rg:
            raise RuntimeError(f"grad: inputs[{i}] (shape {t.shape}) does not require grad")
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    elif not isinstance(grad_outputs, (list, tuple)):  # an array or a number: the seed of the one output
        if len(outputs) != 1:
            raise TypeError(f"grad: grad_outputs must be a sequence of one gradient per output ({len(outputs)}), "
                            f"got {type(grad_outputs).__name__}")
        grad_outputs = [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(grad_outputs)} grad_outputs for {len(outputs)} outputs (a list holds one "
                         "gradient per output; give one output's as an array or Tensor)")
    seeds = _seeds("grad", "outputs", "grad_outputs", outputs, grad_outputs, create_graph)
    if not allow_unused:
        needed = _needed(outputs, {id(t) for t in inputs})
        for i, t in enumerate(inputs):
            if id(t) not in needed:
                raise RuntimeError(
                    f"grad: inputs[{i}] (shape {t.shape}) was not used to compute the outputs; pass "
                    "allow_unused=True to get None for it"
                )
    if retain_graph is None:
        retain_graph = create_graph
    grads = tuple(backprop(outputs, seeds, create_graph=create_graph, retain_graph=retain_graph, targets=inputs))
    if materialize_grads:  # zeros; with create_graph a leaf that requires grad, as PyTorch's
        grads = tuple(make(t._backend.xp.zeros_like(t._data), t._backend, "leaf", (), None, create_graph)
                      if g is None else g for t, g in zip(inputs, grads))
    if not allow_unused:  # reached, but no gradient arrived (a custom op's backward gave None)
        for i, (t, g) in enumerate(zip(inputs, grads)):
            if g is None:
                raise RuntimeError(
                    f"grad: inputs[{i}] (shape {t.shape}) received no gradient: the operations between it and "
                    "the outputs pass none; pass allow_unused=True to get None for it"
                )
    return grads


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False) -> None:
    """``torch.autograd.backward``: add the gradients of ``tensors`` (a Tensor or a
    sequence), seeded with ``grad_tensors`` (one per tensor; None is 1 for a
    one-element tensor), into the leaves' ``.grad``, in one pass over their graph:
    as ``tensors[0].backward(g0)``, ``tensors[1].backward(g1)``... with the graph
    kept between them."""
    from .tensor import Tensor

    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("backward: tensors must be a Tensor or a sequence of Tensors")
    if not tensors:  # nothing to differentiate, as PyTorch
        return
    if grad_tensors is None or isinstance(grad_tensors, Tensor) or not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors] * len(tensors) if grad_tensors is None else [grad_tensors]
    if len(grad_tensors) != len(tensors):
        raise ValueError(f"backward: {len(grad_tensors)} grad_tensors for {len(tensors)} tensors")
    if len(tensors) == 1:
        tensors[0].backward(grad_tensors[0], retain_graph=retain_graph, create_graph=create_graph)
        return
    for i, t in enumerate(tensors):
        if not t._rg:
            raise RuntimeError(f"backward: tensors[{i}] (shape {t.shape}) does not require grad and has no graph")
    seeds = _seeds("backward", "tensors", "grad_tensors", tensors, grad_tensors, create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    backprop(tensors, seeds, create_graph=create_graph, retain_graph=retain_graph)
