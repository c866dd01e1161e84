"""Autograd's public face: ``grad``, ``backward``, grad modes and version counters
(``lp.autograd.grad`` as ``torch.autograd.grad``), and the rules a ``create_graph``
backward computes gradients with.

The engine itself is :mod:`leanpass._graph.engine` (one loop for first order and
``create_graph``). With ``create_graph=True`` it asks the rules here for each node's
gradients: the node's operation runs again on Tensors (``_replay``, with a
:class:`GraphBackend` whose namespace is LeanPass's own), so that its backward rule
-- the same code, written against ``xp`` -- records a graph that can be
differentiated again; or, where an input changed since, its rule on saved values
(``Op.rule``) runs on the node's output. This module hands those rules to the engine
when imported.
"""

from __future__ import annotations

import math
import types

from . import _namespace, fft, linalg, ops, special
from ._dtypes import DTYPES
from ._graph.above import above
from ._graph.engine import Released, _needed, backprop, zero_graph_grads
from ._graph.hooks import RemovableHandle, hook_round, queue_callback
from ._graph.modes import enable_grad, grad_lock, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from ._graph.node import edge
from ._graph.trace import TRACER, implicit_seed, note, read
from ._graph.versions import Version, increment_version, increment_versions, version_of
from ._node import Outputs, as_graph_tensor, as_tensor, leaf, run, run1
from .backends._base import NO_FUSED, Backend, Numbers
from .tensor import Tensor

__all__ = [
    "no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled", "backward", "grad",
    "zero_graph_grads", "backprop", "version_of",
    "Version", "increment_version", "increment_versions", "Released", "grad_lock", "queue_callback", "hook_round",
    "RemovableHandle",
]


def _tensor_namespace():
    """LeanPass's own array API namespace as the rules see it (``xp``): the standard's
    functions on Tensors, its dtypes and constants, and the linalg and fft extensions
    -- what ``import leanpass`` offers, built from the modules below it."""
    xp = types.SimpleNamespace(**{name: getattr(_namespace, name) for name in _namespace.__all__})
    for name, dtype in DTYPES.items():
        setattr(xp, name, dtype)
    xp.e, xp.inf, xp.nan, xp.pi, xp.newaxis = math.e, math.inf, math.nan, math.pi, None
    xp.linalg, xp.fft, xp.Tensor, xp.as_tensor = linalg, fft, Tensor, as_tensor
    return xp


_XP = None


class GraphBackend:
    """What an operation's forward sees as ``be`` when it runs on Tensors: ``xp`` is
    LeanPass's own namespace, arrays are Tensors of ``base``'s device, and there are
    no fused kernels. Every other method is :class:`leanpass.backends.Backend`'s
    generic one, written against ``xp``."""

    def __init__(self, base):
        global _XP
        if _XP is None:
            _XP = _tensor_namespace()
        self.base = base
        self.xp = _XP
        self.linalg = linalg
        self.fft = fft
        self.special = special  # lp.special: the special functions on Tensors, differentiable
        self.device = self.xp_device = base.device
        self.fused = NO_FUSED
        self.guard = None
        self.array_type = Tensor
        self.numbers = Numbers(Backend.number.__get__(self))  # a Python number stays itself
        for name in ("zeros", "ones", "arange", "create", "matmul", "index_add", "index_set", "index_get",
                     "take_rows", "sub_at_rows", "all_in_range", "relu_fresh", "relu_mask", "add_bias",
                     "scale_fresh", "sum_rows", "add_leading", "stack"):
            setattr(self, name, getattr(Backend, name).__get__(self))

    @property
    def causal_rows(self):
        return self.base.causal_rows

    @property
    def syncs_cheaply(self):
        """The device's, but not while lp.compile traces the call: a value read to the host
        there (to pick a path) would make the call run eagerly, and the paths a rule
        chooses by it give the same values."""
        tracer = TRACER[0]
        return self.base.syncs_cheaply and (tracer is None or not tracer.records())

    @staticmethod
    def col2im(cols, size, kernel, stride, dilation, padding):
        """``ops.conv._col2im`` on Tensors: one ``fold`` node (whose gradient is the patches
        again), where the generic loop would add into views of a buffer in place, which
        lp.compile does not record."""
        n, c, k = cols.shape[:3]
        flat = cols.reshape((n, c * k, math.prod(cols.shape[3:])))
        return run(ops.fold, (flat, tuple(size), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation)))

    def copy(self, t):
        return t * 1 if t._rg else self.xp.asarray(t, copy=True)  # the copy stays in the graph

    def as_array(self, value):
        return self.xp.asarray(value, device=self.device)

    @staticmethod
    def c_order(t):
        return t  # a Tensor: its array's layout is its operations' own business

    def context(self):
        return self.base.context()

    def quiet(self):
        return self.base.quiet()

    @staticmethod
    def quietly(fn, *args):
        return fn(*args)  # on Tensors: each operation keeps its own warnings quiet


_graph_backends: dict = {}


def graph_backend(base) -> GraphBackend:
    gb = _graph_backends.get(base)
    if gb is None:
        gb = _graph_backends[base] = GraphBackend(base)
    return gb


def _graph_grads(node, parents, grad, changed: bool):
    """The gradients of ``node``'s inputs as Tensors in a graph (``create_graph``).

    Its inputs are ``parents`` (each as the node saw it). Where none changed in place
    since the forward, the operation runs again on them with a :class:`GraphBackend`,
    and its own backward rule records the graph. Where one changed, the backward
    must not see a value computed from the changed one: ``_check_saved`` has already
    refused an input the rule reads, so the rule runs on what the node saved -- its
    unchanged inputs and its output, the node itself (``Op.rule``); an operation whose
    backward reads neither its output nor the changed input runs again, as the values
    computed from the changed input are never read. An operation marked ``saved_rule``
    runs its rule on the saved values whether or not an input changed."""
    op = node._op
    replay = node._replay
    if replay is None:
        raise RuntimeError(
            f"backward with create_graph=True: {op!r} (output of shape {tuple(node._data.shape)}) cannot be "
            "differentiated twice: it is an in-place change or a custom operation without a replay; compute it "
            "out of place"
        )
    gb = graph_backend(node._backend)
    parents = [as_graph_tensor(p) for p in parents]  # the values the node saw, in the graph
    if (changed or op.saved_rule) and op.saves_out:  # (saved_rule: the rule on saved values, always)
        if type(replay) is Outputs and op.rule is not None:  # a decomposition: its rule on its saved outputs
            with gb.quiet():
                return replay.on_saved(gb, node, grad)
        if op.rule is None or not isinstance(replay, (tuple, dict)):
            raise RuntimeError(
                f"backward with create_graph=True through {op!r}: an input of {op!r} was changed in place after "
                f"{op!r} was computed, and its derivative cannot be formed from what {op!r} saved; compute the "
                "graph again after the change, or change a copy instead (x = x + ... instead of x += ...)"
            )
        with gb.quiet():
            if type(replay) is dict:
                return op.rule(gb.xp, parents, as_graph_tensor(node), grad, **replay)
            out = as_graph_tensor(node)
            if op.needs:
                return op.rule(gb.xp, parents, out, grad, *replay, needs=tuple(p._rg for p in parents))
            return op.rule(gb.xp, parents, out, grad, *replay)
    _, backward = _replayed(node, replay, gb, parents)
    return backward(grad)


def _replayed(node, replay, gb, prev):
    """``(out, backward)`` of ``node``'s operation run again on the Tensors ``prev`` (see
    :func:`leanpass._node.make` for the forms ``replay`` takes)."""
    op = node._op
    if type(replay) is tuple:
        replay = tuple(_unfilled(v) for v in replay)
        if op.needs:
            return op.fn(gb, *prev, *replay, needs=tuple(p._rg for p in prev))
        return op.fn(gb, *prev, *replay)
    if type(replay) is dict:
        return op.fn(gb, *prev, **{k: _unfilled(v) for k, v in replay.items()})
    return replay(gb, prev)


def _unfilled(value):
    """A parameter as an operation runs again with it: a list the forward fills
    (``ops.norm.Statistics``, batch norm's statistics, which went to the running
    statistics at the forward) as a new one, so that the values stay the forward's and
    no Tensor of the graph stays in it."""
    return type(value)() if getattr(value, "filled_by_the_op", False) else value



def _store_graph(tensor, grad) -> None:
    """Add a gradient Tensor (``create_graph``) into ``tensor.grad``: a copy in the graph,
    as PyTorch's (the gradient Tensor may be another leaf's too, ``(a + b)``'s, or a
    read-only broadcast view, ``sum``'s), or the sum with the Tensor ``.grad`` held."""
    old = tensor._grad
    with enable_grad():  # the copy or the sum stays differentiable
        if old is None:
            grad = run1(ops.copy, grad)
        else:
            grad = (old if old.__class__ is grad.__class__ else leaf(old, tensor._backend)) + grad
    tensor._grad = grad
    tensor._read_zeros = False


class _GraphRules:
    """The engine's ``create_graph`` strategy (see :mod:`leanpass._graph.above`)."""

    grads = staticmethod(_graph_grads)
    store = staticmethod(_store_graph)

    @staticmethod
    def xp(tensor):
        return graph_backend(tensor._backend).xp


above.graph = _GraphRules


def _zeros_leaf(t, requires_grad: bool):
    """Zeros of ``t``'s shape, dtype and device: a leaf (that requires grad if asked)."""
    z = leaf(t._backend.xp.zeros_like(t._data), t._backend)
    z._rg = requires_grad
    return z


def _seeds(name, what, given, outputs, grads, create_graph):
    """The engine's seed for each of ``outputs`` from ``grads`` (one per output: None
    is 1 for a one-element output, else a Tensor or array-like of its shape): arrays
    (the caller's, which the engine copies before it keeps one as a ``.grad``), or Tensors
    with ``create_graph``."""
    if create_graph and name == "backward":  # (lp.compile: said before the seeds below are made, which it would
        note("backward(create_graph=True) (a .grad in a graph: not replayed yet)")  # name instead)
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        backend = out._backend
        if g is None:
            if out.size != 1:
                raise RuntimeError(
                    f"{name}: grad can be implicitly created only for scalar outputs; {what}[{i}] has shape "
                    f"{out.shape}: pass {given}"
                )
            if out.dtype.kind == "c":  # a loss is real: the gradient of a complex value needs a direction
                raise RuntimeError(
                    f"{name}: grad can be implicitly created only for real scalar outputs; {what}[{i}] is "
                    f"{out.dtype}: take a real part (lp.real, abs) or pass {given}"
                )
            g = backend.ones(out._data.shape, out._data.dtype)
            implicit_seed(g)
            seeds.append(leaf(g, backend) if create_graph else g)
            continue
        g = g if isinstance(g, Tensor) else as_tensor(g, device=out.device, dtype=str(out.dtype))
        if g.shape != out.shape:
            raise ValueError(f"{name}: {given}[{i}] has shape {g.shape}, {what}[{i}] {out.shape}")
        if g.device != out.device:
            raise ValueError(f"{name}: {given}[{i}] is on {g.device}, {what}[{i}] on {out.device}")
        if g.dtype != out.dtype:
            g = g.astype(out.dtype)
        if TRACER[0] is not None and not create_graph:
            read(g)  # lp.compile: a replay starts from that tensor's array then (a tangent from outside: hvp)
        seeds.append(g if create_graph else g._data)  # the caller's array: the engine copies it before keeping it
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
        needed = _needed(outputs, {id(edge(t)) for t in inputs})
        for i, t in enumerate(inputs):
            if id(edge(t)) not in needed:
                raise RuntimeError(
                    f"grad: inputs[{i}] (shape {t.shape}) was not used to compute the outputs; pass "
                    "allow_unused=True to get None for it"
                )
    if retain_graph is None:
        retain_graph = create_graph
    grads = tuple(backprop(outputs, seeds, create_graph=create_graph, retain_graph=retain_graph, targets=inputs))
    if materialize_grads:  # zeros; with create_graph a leaf that requires grad, as PyTorch's
        grads = tuple(_zeros_leaf(t, create_graph)
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
