"""THE backward engine: :func:`backprop`, for first order and ``create_graph`` alike.

``t.backward()``, ``autograd.grad``, ``autograd.backward``, hooks and DDP's callbacks
all go through it. It walks the graph with an explicit heap (no recursion, so depth
is unlimited), accumulates each node's gradient in a dict keyed by node, frees it as
soon as it has been passed on, and drops each node's backward function (and so the
arrays it saved) once it has run, unless ``retain_graph=True``. The one thing that
differs with ``create_graph`` is how a node's gradients are computed: the rules that
record them as a graph of Tensors (``above.graph``, from :mod:`leanpass.autograd`).

It walks :class:`~.node.Node` objects (``_prev``, ``_backward``, ``_op``, ``_seq``,
``_data``, ``_vc``, ``_tensor``) and knows tensors only by their attributes: ``_data``,
``_grad``, ``_backend``, ``_node``, ``_vc``, ``_retain`` and ``_rg`` (requires grad).

Releasing a graph also cuts its links: each node's ``_prev`` becomes a
:class:`Released` that holds only the leaves the backward call wrote into (and,
weakly, the retained tensors), so a kept output (``losses.append(loss)``) keeps
no activation alive, yet ``zero_grad_all`` still reaches every gradient it wrote.

Threads: the gradients one backward call computes are added into ``.grad`` under
one lock (:data:`grad_lock`), taken once per call, so backward calls on several
threads into shared leaves lose no update.

Saved values: a node whose backward reads an input's array -- or its own output's --
that was changed after the node was made raises ``RuntimeError`` instead of
computing a wrong gradient (PyTorch's ``SavedVariable`` rule). A node whose input
was changed in place *by a recorded operation* and does not read it sends that
input's gradient to the value it saw (the input's state before the change).
"""

from __future__ import annotations

import contextlib
import heapq
import weakref

from ..backends import backend_of_array
from ..ops.conversion import gradient_as
from . import hooks
from .above import above
from .hooks import _run_post_hooks, _with_grad_hooks
from .modes import enable_grad, grad_lock, no_grad
from .node import COMPLEX, Node, edge
from .trace import TRACER, note
from .versions import latest_change

__all__ = ["backprop", "complex_rule", "Released", "zero_graph_grads"]


def _check_saved(node, seq) -> bool:
    """Raise if ``node``'s backward reads an input whose values changed in place after
    ``node`` was made (PyTorch's ``SavedVariable`` rule); else return whether any input's
    values changed since. Each parent edge is the value the node saw (an in-place change
    recorded later gave the tensor a new node), so nothing else needs looking up."""
    op = node._op
    changed = False
    for position, parent in enumerate(node._prev):
        vc = parent._vc
        if vc is None or vc.changed <= seq:
            continue
        if op.saved(position):
            raise RuntimeError(
                f"backward through {op!r}: its input {position} (shape {tuple(parent._data.shape)}) was "
                f"changed in place after {op!r} saved it: it is at version {vc.count}, {op!r} needs "
                f"version {vc.at(seq)}. Compute the graph again after the change, or change a copy "
                "instead (x = x + ... instead of x += ...)"
            )
        changed = True
    return changed


def _is_complex(x) -> bool:
    return "complex" in str(getattr(x, "dtype", x))  # an array's, a Tensor's (create_graph), a Node's, or a dtype


def _complex(grad, parents) -> bool:
    """Whether a complex value meets the node: its gradient, or one of its inputs."""
    return _is_complex(grad) or any(_is_complex(p._data) for p in parents)


def _complex_grads(node, parents, grad, backward, changed, graph):
    """The gradients of a node where a complex value is involved: :func:`complex_rule`
    on the node's rule (the graph's, with ``create_graph``)."""
    xp = graph.xp(node) if graph is not None else node._backend.xp

    def rule(g):
        if graph is not None:
            return graph.grads(node, parents, g, changed)
        guard = node._backend.guard
        if guard is None:
            return backward(g)
        with guard:
            return backward(g)

    return complex_rule(xp, node._op, rule, grad, [p._data.dtype for p in parents])


def complex_rule(xp, op, rule, grad, dtypes) -> list:
    """The gradients ``rule(grad)`` of an ``op`` where a complex value is involved, by
    PyTorch's convention (a gradient is ``dL/dRe + i dL/dIm``), as the op's ``complex``
    says: a holomorphic op's real rule runs as ``conj(rule(conj(g)))``, an op with its
    own complex rule runs it, any other op raises ``TypeError``. An input of a real
    dtype (``dtypes``: the inputs') gets the real part of its gradient, a complex input
    a complex one. (The engine's, and a compiled call's replays'.)"""
    how = op.complex
    if how is None:
        raise TypeError(
            f"backward through {op!r}: complex gradients are not supported by {op!r} (inputs of dtypes "
            f"{', '.join(map(str, dtypes))}, gradient of dtype {grad.dtype}); compute it on real tensors (lp.real, "
            "lp.imag) instead"
        )
    if how == "holomorphic" and _is_complex(grad):
        grads = [None if g is None else xp.conj(g) for g in rule(xp.conj(grad))]
    else:
        grads = list(rule(grad))
    for i, (dtype, g) in enumerate(zip(dtypes, grads)):
        if g is None:
            continue
        wanted = _is_complex(dtype)
        if _is_complex(g) and not wanted:
            grads[i] = xp.real(g)
        elif wanted and not _is_complex(g):
            grads[i] = xp.astype(g, dtype)
    return grads


def _check_output(node, seq):
    if node._op.saves_out:
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
        grad = gradient_as(backend.xp, grad, data.dtype)
        fresh = True
    old = tensor._grad
    if old is not None:
        if type(old) is not backend.array_type:  # a Tensor, from backward(create_graph=True)
            tensor._grad = old + above.leaf(grad if fresh else backend.copy(grad), backend)
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
    """THE backward engine: backpropagate ``grads`` (one per root: arrays, which may be
    the caller's and are copied before one is kept as a ``.grad``, or Tensors with
    ``create_graph``) through the graph below ``roots`` (Tensors).

    Nodes are visited in decreasing creation order (``_seq``): every node was made
    after its inputs, so each one is reached after all the nodes it feeds, and its
    gradient is complete when reached; it is dropped once passed on. Nodes waiting
    are kept in a heap, except that a node's first input new to the pass comes next
    without it where no node waiting comes first (a chain never touches the heap). How a
    node's gradients are computed is the one thing that differs between first order
    and ``create_graph`` (Chainer's ``_backprop_to_all``): its backward rule on the
    arrays it saved, or the strategy ``above.graph.grads``, which records the rule as
    a graph of Tensors. Either reads only values the node saw (:func:`_check_saved`
    raises for a saved one that changed since).

    With ``targets`` (a sequence of tensors) only the nodes on a path to one are
    visited, their gradients are returned (None for one that got none) and no
    ``.grad`` is written; without, the gradients are added into the leaves' (and
    retained tensors') ``.grad``, under :data:`grad_lock`, and only at the end: an
    error on the way (a released graph, a custom op's wrong gradient) leaves
    everything as it was. The graph is released unless ``retain_graph``. The rules run
    with floating-point warnings off (the first root's ``backend.quiet()``).
    """
    tracer = TRACER[0]
    if tracer is None:
        return _backprop(roots, grads, create_graph, retain_graph, targets, None)
    tracer.backprop(roots, grads, create_graph, targets)  # lp.compile records the pass (its schedule, read now)
    try:
        return _backprop(roots, grads, create_graph, retain_graph, targets, tracer)
    except BaseException:  # caught in the call, the error would not come in a replay of the pass recorded
        tracer.raised("a backward pass")
        raise


@contextlib.contextmanager
def _unrecorded(tracer, kind: str):
    """Hooks of ``kind`` running in a traced call (``tracer``, or None): unrecorded, each
    replay runs the hooks there are then (lp.compile's ``Tracer.hooks_running``). Only
    the traced thread's pass, outside any hook, says so: another thread's must not stop
    its recording."""
    recording = tracer is not None and tracer.records()
    if recording:
        tracer.hooks_running(kind)
    try:
        yield
    finally:
        if recording:
            tracer.hooks_running(None)


def _backprop(roots, grads, create_graph, retain_graph, targets, tracer):
    wanted = needed = None
    if targets is not None:
        wanted = {id(edge(t)) for t in targets}
        needed = _needed(roots, wanted)
    hooked = hooks._grad_hooks_registered  # read once: a local test per node below
    watched = hooked or wanted is not None  # a node's gradient may be wanted for more than its rule
    complex_on = COMPLEX[0]  # whether any complex value ever entered a graph
    graph = above.graph if create_graph else None  # the rules that record gradients as graphs
    pending: dict = {}
    heap: list = []
    leaves: dict = {}  # leaf -> (gradient, fresh: the engine's own array, free to keep as .grad)
    found: dict = {}
    retained: list = []
    done: list = []
    push, pop = heapq.heappush, heapq.heappop
    for root, g in zip(roots, grads):
        node = root._node
        if needed is not None and id(root if node is None else node) not in needed:
            continue
        if node is not None:
            old = pending.get(node)
            if old is None:
                pending[node] = g
                push(heap, (-node._seq, node))
            else:
                pending[node] = old + g
        else:
            old = leaves.get(root)
            leaves[root] = (g, False) if old is None else (old[0] + g, True)  # a seed may be the caller's array
    # one quiet context for every rule of the pass (NumPy's floating-point warnings off: IEEE
    # results, as the forward's), instead of one per rule that may meet inf or nan
    quiet = roots[0]._backend.quiet() if roots else contextlib.nullcontext()
    with enable_grad() if create_graph else no_grad(), quiet:
        following = following_grad = None  # the next node, and its gradient (kept out of ``pending``)
        while following is not None or heap:
            if following is None:
                node = pop(heap)[1]
                grad = pending.pop(node)
            else:
                node, grad, following, following_grad = following, following_grad, None, None
            if not watched and not hooks.retaining:  # (a retain_grad may come during the pass: read each time)
                pass
            elif wanted is not None and id(node) in wanted:
                # As PyTorch's autograd.grad (2.13): an input the pass goes on through (another
                # input lies below it) gives its gradient before its own hooks; one where it
                # stops, after them
                last = isinstance(node._prev, Released) or not any(id(p) in needed for p in node._prev)
                if not last:
                    found[id(node)] = grad
                if hooked:
                    grad = _with_grad_hooks(node, grad)
                if last:
                    found[id(node)] = grad
                    continue  # nothing asked for lies below it
            else:  # its gradient is complete: the hooks registered on this value see it (and may change it)
                if hooked:
                    grad = _with_grad_hooks(node, grad)
                owner = node._tensor  # the tensor whose value this is, where it retains its gradient
                if owner is not None and targets is None:
                    owner = owner()
                    if owner is not None and getattr(owner, "_retain", False):
                        retained.append((owner, grad))
            backward = node._backward
            if backward is None:
                raise RuntimeError(_RELEASED)
            done.append(node)
            parents = node._prev
            changed = False  # an input's values changed in place since the node was made
            seq = node._seq
            if latest_change[0] > seq:  # something changed in place since the node was made: what?
                vc = node._vc
                if vc is not None and vc.changed > seq:
                    _check_output(node, seq)
                for parent in parents:
                    pvc = parent._vc
                    if pvc is not None and pvc.changed > seq:
                        changed = _check_saved(node, seq)
                        break
            if complex_on and _complex(grad, parents):  # PyTorch's convention, op by op (Op.complex)
                parent_grads = _complex_grads(node, parents, grad, backward, changed, graph)
            elif create_graph:
                parent_grads = graph.grads(node, parents, grad, changed)
            else:
                guard = node._backend.guard
                if guard is None:
                    parent_grads = backward(grad)
                else:  # cuda:N on a machine of several GPUs: run where the data is
                    with guard:
                        parent_grads = backward(grad)
            op = node._op
            fresh_op, exact = op.fresh, op.exact
            # the next node: the first parent new to ``pending``, where no node waiting comes before it (it would
            # be pushed and popped at once)
            for parent, pgrad in zip(parents, parent_grads):
                if pgrad is None or (needed is not None and id(parent) not in needed):
                    continue
                inner = type(parent) is Node
                if not inner:
                    if not parent._rg or parent._node is not None:
                        continue  # a value outside the graph (a tensor that entered it later is not this value)
                    if parent._backend is not node._backend and not create_graph:  # a leaf moved (model.to) since
                        _check_devices(((parent, pgrad),))
                fresh = fresh_op
                if not exact:  # the gradient of a broadcast input, of another dtype (a custom op's, a mixed in-place)
                    data = parent._data
                    if pgrad.shape != data.shape:
                        pgrad = _unbroadcast(graph.xp(parent) if create_graph else parent._backend.xp, pgrad,
                                             tuple(data.shape))
                        fresh = True
                    if pgrad.dtype is not data.dtype and pgrad.dtype != data.dtype:
                        pgrad = gradient_as(graph.xp(parent) if create_graph else parent._backend.xp, pgrad, data.dtype)
                        fresh = True
                if inner:
                    if parent is following:  # a node's input twice (x * x)
                        following_grad = following_grad + pgrad
                        continue
                    old = pending.get(parent)
                    if old is not None:
                        pending[parent] = old + pgrad
                    elif following is None:
                        following, following_grad = parent, pgrad
                    else:
                        pending[parent] = pgrad
                        push(heap, (-parent._seq, parent))
                else:
                    old = leaves.get(parent)
                    leaves[parent] = (pgrad, fresh) if old is None else (old[0] + pgrad, True)
            if following is not None and heap and heap[0][0] < -following._seq:  # a node waiting comes first
                pending[following] = following_grad
                push(heap, (-following._seq, following))
                following = None
        if hooked:  # each leaf's gradient of this call, complete: through its hooks
            with _unrecorded(tracer, "gradient"):  # (a traced call's replays run them on their gradients)
                for leaf in leaves:
                    if hooks.hooked(leaf, post=False):  # a hook may keep what it saw (or gave): .grad is a copy
                        leaves[leaf] = (_with_grad_hooks(leaf, leaves[leaf][0]), False)
    if targets is not None:
        for t, (g, _) in leaves.items():
            if id(t) in wanted:
                found[id(t)] = g
    else:
        if create_graph:
            _check_devices((t, g) for t, (g, _) in leaves.items())
        with grad_lock:
            for tensor, g in retained:
                if create_graph:
                    graph.store(tensor, g)
                else:
                    _store(tensor, g, fresh=False)
            for leaf, (g, fresh) in leaves.items():
                if (fresh and not create_graph and leaf._grad is None and type(g) is leaf._backend.array_type
                        and g.dtype == leaf._data.dtype):
                    leaf._grad = g  # the common case of _store, written out: a training step's every leaf
                    leaf._read_zeros = False
                elif create_graph:
                    graph.store(leaf, g)
                else:
                    _store(leaf, g, fresh)
    if not retain_graph:
        _release(done, leaves, retained)
    if targets is None:
        if hooks._hooks_registered:
            with _unrecorded(tracer, "post-accumulate-grad"):  # (its replays run them after their backward)
                _run_post_hooks(leaves)
        return None
    found = [found.get(id(edge(t))) for t in targets]
    if create_graph:
        return found
    copies = [None if g is None else t._backend.copy(g) for t, g in zip(targets, found)]
    if tracer is not None:  # lp.compile: values of the pass it recorded
        tracer.gradients(copies)
    leaf = above.leaf  # raw arrays become Tensors outside any graph, owning their arrays
    return [None if c is None else leaf(c, t._backend) for t, c in zip(targets, copies)]


def _release(done, leaves, retained) -> None:
    """Free what the nodes ``done`` by a backward call saved: each keeps only a shared
    :class:`Released` record (the leaves written, the retained tensors weakly)."""
    released = Released(tuple(leaves), tuple(weakref.ref(t) for t, _ in retained) if retained else ())
    for node in done:
        node._backward = None
        node._replay = None  # it holds the inputs too
        node._prev = released


def zero_graph_grads(root) -> None:
    """Reset ``.grad`` of every tensor in ``root``'s graph (lazily: it reads as zeros):
    its leaves and the tensors that retain theirs.

    Through a released part of the graph it reaches what :class:`Released` keeps: the
    leaves the releasing backward call wrote into and the retained tensors still alive."""
    note("zero_graph_grads, Tensor.zero_grad_all (gradients reset apart from the recorded operations)")
    root._grad = None
    root._read_zeros = False
    start = root._node
    if start is None:
        return
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        if type(node) is not Node:  # a tensor: a leaf, or one a released graph kept
            node._grad = None
            node._read_zeros = False
            continue
        owner = node._tensor
        if owner is not None and owner() is not None:
            owner()._grad = None
            owner()._read_zeros = False
        for parent in node._prev:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)


def _needed(roots, targets) -> set:
    """The ids of the nodes (and leaves) on a path from ``roots`` to a target (the ids
    of the targets' edges): the only ones :func:`backprop` visits for ``targets``."""
    needed: set = set()
    done: set = set()
    stack = [(edge(r), False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            if key in targets or any(id(p) in needed for p in node._prev):
                needed.add(key)
            continue
        if key in done:
            continue
        done.add(key)
        if type(node) is not Node:  # a leaf
            if key in targets:
                needed.add(key)
            continue
        if isinstance(node._prev, Released):  # its part of the graph was freed by an earlier backward
            if key in targets:  # its own gradient is all that is asked of it
                needed.add(key)
            elif any(id(leaf) in targets for leaf in node._prev.leaves):
                raise RuntimeError(_RELEASED)
            continue
        stack.append((node, True))
        stack.extend((p, False) for p in node._prev if p._rg and id(p) not in done)
    return needed
