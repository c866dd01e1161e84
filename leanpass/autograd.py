"""Grad mode (per thread) and the backward engine.

The engine walks the graph with an explicit heap (no recursion, so depth is
unlimited), accumulates each node's gradient in a dict keyed by node, frees it
as soon as it has been passed on, and drops each node's backward function (and
so the arrays it saved) once it has run, unless ``retain_graph=True``.

It knows tensors only by their attributes: ``_data``, ``_grad``, ``_backend``,
``_prev``, ``_backward``, ``_op``, ``_retain``, ``_seq`` and ``requires_grad``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading

__all__ = ["no_grad", "enable_grad", "is_grad_enabled", "run_backward", "zero_graph_grads"]


# Creation order of graph nodes: a node's inputs always have smaller numbers.
sequence = itertools.count()


class _GradState(threading.local):
    enabled = True


_state = _GradState()


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

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"{type(self).__name__}() decorates a function, got {type(func).__name__}")
        mode = type(self)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with mode():
                return func(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Disable graph recording on this thread: ``with no_grad(): ...`` or ``@no_grad()``."""

    _enabled = False


class enable_grad(_GradMode):
    """Re-enable graph recording on this thread, e.g. inside a ``no_grad`` block."""

    _enabled = True


# Built-in operations whose backward returns new arrays. The first gradient a leaf
# gets from any other operation -- "+" hands on the incoming gradient itself,
# "reshape" or "sum" a view of it, and a user's operation may do either -- is
# copied, so that no two .grad arrays (or a .grad and a user's array) share memory.
_FRESH_OPS = frozenset({
    "*", "/", "**", "@", "linear", "neg", "relu", "leaky_relu", "exp", "log", "sigmoid", "softplus", "tanh",
    "gelu", "abs", "sqrt", "clip", "max", "softmax", "log_softmax", "getitem", "take", "to", "astype",
    "cross_entropy",
})

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
        grad = old + grad
    elif not fresh:
        grad = backend.copy(grad)
    if type(grad) is not backend.array_type:  # a NumPy scalar from a 0-d result
        grad = backend.xp.asarray(grad)
    tensor._grad = grad
    tensor._read_zeros = False


def run_backward(root, grad, retain_graph: bool = False) -> None:
    """Backpropagate ``grad`` (an array of ``root``'s shape, owned by the engine).

    Nodes are visited from a heap in decreasing creation order (``_seq``): every
    node was made after its inputs, so each one is reached after all the nodes it
    feeds, and its gradient is complete when popped. Gradients of leaves and of
    retained non-leaves are written, and saved arrays released, only at the end:
    an error on the way (a released graph) leaves everything as it was.
    """
    if not root._prev:  # a leaf: its gradient is the given one
        _store(root, grad, fresh=True)
        return
    grads = {root: grad}
    heap = [(-root._seq, root)]
    leaves = {}  # leaf -> (gradient, fresh)
    retained = []
    done = []
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        node = pop(heap)[1]
        grad = grads.pop(node)
        backward = node._backward
        if backward is None:
            raise RuntimeError(_RELEASED)
        if node._retain:
            retained.append((node, grad))
        done.append(node)
        guard = node._backend.guard
        if guard is None:
            parent_grads = backward(grad)
        else:  # cuda:N on a machine of several GPUs: run where the data is
            with guard:
                parent_grads = backward(grad)
        for parent, pgrad in zip(node._prev, parent_grads):
            if pgrad is None or not parent.requires_grad:
                continue
            shape = parent._data.shape
            if pgrad.shape != shape:
                pgrad = _unbroadcast(parent._backend.xp, pgrad, shape)
                fresh = True
            else:
                fresh = None  # decided below, for leaves only
            if parent._prev:
                old = grads.get(parent)
                if old is None:
                    grads[parent] = pgrad
                    push(heap, (-parent._seq, parent))
                else:
                    grads[parent] = old + pgrad
            else:
                old = leaves.get(parent)
                if old is None:
                    leaves[parent] = (pgrad, fresh or node._op in _FRESH_OPS)
                else:
                    leaves[parent] = (old[0] + pgrad, True)
    for node, g in retained:
        _store(node, g, fresh=False)
    for leaf, (g, fresh) in leaves.items():
        _store(leaf, g, fresh)
    if not retain_graph:
        for node in done:
            node._backward = None


def zero_graph_grads(root) -> None:
    """Reset ``.grad`` of every tensor in ``root``'s graph (lazily: it reads as zeros)."""
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
