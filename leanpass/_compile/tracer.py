"""The tracer: one eager call recorded, through the hooks of
:mod:`leanpass._graph.trace`, as a list of events a :class:`~leanpass._compile.plan.Plan`
replays; checks moved ahead of the passes they do not depend on."""

from __future__ import annotations

import collections
import gc
import itertools
import os
import sys
import threading
import weakref

from .. import ops
from .._fusion import ARG, EXT, VAL
from .._graph import hooks
from .._graph.engine import Released, _is_complex, _needed
from .._graph.modes import enable_grad, is_grad_enabled
from .._graph.node import COMPLEX, Node, edge
from .._graph.trace import TRACER
from .._graph.trace import WATCHED as _WATCHED
from .._graph.trace import WRITES as _WRITES
from .._node import inplace, leaf
from ..backends import _base as _backends_base
from ..backends import backend_of_array, get_backend
from ..nn.module import _CHANGES as _MODULE_CHANGES
from ..nn.module import Module, holding_members
from ..tensor import Tensor
from .code import _PACKAGE, _equal
from .plan import Plan
from .record import _CAST_FIRST, _Complex, _has_array, _keeps, _output_slots, _Recipe, _share_memory, _state_items
from .returns import _host_float, _read_at


def _where() -> str:
    """``file:line`` of the innermost frame outside LeanPass: the user's line."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


# The modules through which a tensor is made from an array (Tensor(...), as_tensor, leaf),
# and those whose functions make one from their arguments alone (lp.zeros, lp.eye...).
_HERE = os.path.dirname(os.path.abspath(__file__))
_WRAPPERS = {os.path.join(_PACKAGE, name) for name in ("_node.py", "tensor.py", os.path.join("_graph", "trace.py"))}
_WRAPPERS |= {os.path.join(_HERE, name) for name in os.listdir(_HERE) if name.endswith(".py")}  # (this package's)
_CREATORS = {os.path.join(_PACKAGE, "_namespace", name) for name in ("creation.py", "torch_names.py")}


def _internal_maker():
    """Who made a tensor from an array no recorded operation gave: None where a
    creation function (``lp.zeros``...) or the caller's own code did (a constant of
    the trace), else the name of the LeanPass function that did (an array it computed
    itself, such as batch norm's statistics: a value the replay would not compute)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path not in _WRAPPERS:
            if path in _CREATORS or not path.startswith(_PACKAGE):
                return None
            while frame.f_code.co_name.startswith("<") and frame.f_back is not None:  # (a comprehension's frame,
                frame = frame.f_back  # before Python 3.12: its function's name)
            name = frame.f_code.co_name
            if name.startswith("__") and name.endswith("__"):  # a method's: named with its class (Linear.__init__)
                owner = frame.f_locals.get("self")
                return name if owner is None else f"{type(owner).__name__}.{name}"
            return name[1:] if name.startswith("_") else name  # (a helper's: sets.py's _unique is "unique")
        frame = frame.f_back
    return None


def _on_optimizer_state(array) -> bool:
    """Whether ``array`` is one of the arrays the optimizers alive hold as state
    (``opt.state``'s), or a view of one (``buf[0]``, ``buf.T``: through ``.base``)."""
    found = set()
    for obj in list(_WATCHED):
        state = getattr(obj, "state", None)
        if isinstance(state, dict):
            for entries in dict.values(state):
                if isinstance(entries, dict):
                    found.update(id(v) for v in entries.values() if hasattr(v, "shape"))
    while array is not None:
        if id(array) in found:
            return True
        array = getattr(array, "base", None)
    return False


class Tracer:
    """Records one eager call (see :mod:`leanpass._compile`). Reports from the hooks arrive as
    method calls; the first thing a replay could not reproduce sets :attr:`reason`
    and stops the recording (the call itself goes on eagerly)."""

    def __init__(self, args: list, caller):
        self.caller = caller  # the code that calls the traced function (Compiled._record's)
        self.thread = threading.get_ident()  # other threads (a data loader's workers) are not recorded
        self.reason = None  # (what, where) of the first thing that cannot be replayed
        self.events: list = []
        self.slots = 0
        self.meta: dict = {}  # slot -> (shape, dtype) of its value
        self.source: dict = {}  # id(tensor) -> (kind, ref)
        self.arrays: dict = {}  # id(array) -> (kind, ref): where an array the call has seen comes from
        self.keep: list = []  # what the ids above refer to, alive for the trace
        self.poisoned: dict = {}  # id(tensor) -> the step that made it (its value is not replayed)
        self.node_slot: dict = {}  # id(node) -> slot of its output
        self.externals: dict = {}  # id(tensor) -> (tensor, shape, dtype, backend, rg): checked before a replay
        self.constants = 0
        self.implicit: set = set()  # ids of the ones arrays backward() made as seeds
        self.draws = 0
        self.graph_passes = 0  # autograd.grad(create_graph=True) passes: recorded as their operations
        self.hooked_passes = set()  # the ids of the backward events whose leaves have hooks (Tracer._hooked)
        self.checks_past_passes = False  # whether a check moved past a backward pass (_checks_first)
        self.pass_leaves = []  # the leaves of every pass, (ARG, i) or (EXT, t): hooks added there since (Plan)
        self.inner_leaves: dict = {}  # id(tensor) -> slot: leaves that require grad made in the call (new_leaf)
        self.grad_slots: dict = {}  # slot of a gradient read in the call (t.grad) -> t's source
        self.rng_state = _backends_base._host_rng.bit_generator.state  # the host generator's, after the last draw
        self.actions: list = []
        self.modules_called: dict = {}  # id -> module called in the call
        self.views_apart: dict = {}  # id(version counter) -> [it, weak references to views made in no_grad mode]
        self.member_lists: list = []  # (list or dict of a called module's members, ids of its items)
        self.made_here: list = []  # weak references to the tensors on the call's values (:meth:`escaped`)
        self.returns = None  # (code, lines): where the function returns host reads as they are (_returned_reads)
        self.watched = [(obj, obj._traced_state()) for obj in list(_WATCHED)]  # (optimizers' options)
        self.state_changed = False  # whether the call changed a watched object other than through an action
        self.writes = _WRITES[0]  # writes into watched state when the call began, plus those its actions made
        self.host: dict = {}  # id(number) -> (slot, what, where) of a value read on the host in a return
        self.out_specs: dict = {}  # id(tensor) -> its spec in the result (_outputs)
        self.options: list = []  # (parameter group, key, value) read by the call's own code: checked (Plan.fits)
        self.made_watched: list = []  # the classes of the optimizers and schedulers made in the call (trace.made)
        self.state_reads: list = []  # (an optimizer's state of Tensors, _state_items, its optimizers) read: too
        self.options_set = None  # the action that may have set options since the call began (a scheduler's step)
        self.keep_args = list(args)
        self.arg_references = _references(self.keep_args)  # what holds the arguments before the call (escaped)
        self.holders: list = []  # the lists, tuples and dicts in the arguments that hold tensors (f([x, y]))
        self.holder_references: list = []  # what holds them before the call
        self.hooking = None  # which hooks the engine runs now, unrecorded ("gradient"...: hooks_running)
        self.arg_arrays: dict = {}  # id -> array: the arrays among the arguments (NumPy's: keyed by identity)
        self.hook_writes = 0  # (_WRITES when the hooks running now began: hooks_running)
        self.hook_made: dict = {}  # id(tensor) -> (weak reference, which hooks) of those the hooks made
        for i, t in enumerate(args):
            if id(t) not in self.source:
                self._register(t, (ARG, i))

    # ---- bookkeeping
    def _register(self, t, src):
        self.source[id(t)] = src
        self.arrays[id(t._data)] = src
        self.keep.append(t)
        if src[0] == VAL:  # a tensor on a value of the call: it must not outlive the call but in the result
            self.made_here.append(weakref.ref(t))

    def _new_slot(self, t) -> int:
        slot = self.slots
        self.slots += 1
        self.meta[slot] = (tuple(t._data.shape), t._data.dtype)
        self._register(t, (VAL, slot))
        return slot

    def source_of(self, t):
        src = self.source.get(id(t))
        if src is not None:
            return src
        if id(t) in self.poisoned:
            self.unsupported(f"a tensor returned by {self.poisoned[id(t)]} used by an operation")
            return None
        src = self.arrays.get(id(t._data))  # another tensor on a value of the call (a node's, held apart)
        if src is not None and src[0] != VAL:  # a tensor from outside on an argument's or another's array: its own
            src = None
        if src is None:
            slot = self.node_slot.get(id(t._node)) if t._node is not None else None
            if slot is not None:  # a node's value, held apart (the copy a node keeps of a value changed in place
                src = (VAL, slot)  # since, which a create_graph pass reads), is the node's value of the replay
            else:
                made = self.hook_made.get(id(t))
                if made is not None and made[0]() is t:
                    self.unsupported(f"a tensor made by a {made[1]} hook, read by the function after the backward "
                                     "pass (a replay would read the first call's)")
                    return None
                src = (EXT, t)
                self.externals[id(t)] = (t, tuple(t._data.shape), t._data.dtype, t._backend, t._rg)
        self._register(t, src)
        return src

    def records(self) -> bool:
        """Whether the calling thread is the traced call's, outside the hooks a backward
        pass runs (:meth:`hooks_running`)."""
        return self.hooking is None and threading.get_ident() == self.thread

    def hooks_running(self, kind) -> None:
        """The engine runs hooks now (``kind``: ``"gradient"``, ``"post-accumulate-grad"``),
        or no more (None). They are not recorded: each replay runs the hooks there are
        then. What they make is noted, and a tensor they made that the function reads
        after them, or a number a gradient hook reads on the host, makes the call run
        eagerly: a replay would read the first call's. What they change of the watched
        objects (an optimizer stepped in a post-accumulate hook, PyTorch's "optimizer
        step in backward") counts as an action's change: each replay runs them again."""
        if kind is not None and self.hooking is None:
            self.check_watched()  # (changed by the function's own code before the pass: a replay would not)
            self.hook_writes = _WRITES[0]
        elif kind is None and self.hooking is not None:
            self.writes += _WRITES[0] - self.hook_writes
            if self.check_watched(by_action=True):  # (an option they may have set, read after them: the trace's)
                self.options_set = f"the {self.hooking} hooks"
        self.hooking = kind

    def _in_hooks(self) -> bool:
        """Whether the calling code is a hook the engine runs now in the traced call."""
        return self.hooking is not None and threading.get_ident() == self.thread

    def _hook_made(self, t) -> None:
        """``t``, made by the hooks running now in the traced call, noted as such."""
        if self._in_hooks():
            self.hook_made[id(t)] = (weakref.ref(t), self.hooking)

    def unsupported(self, what: str) -> None:
        if self.reason is None and self.records():
            self.reason = (what, _where())
        else:
            self._in_hook(what)

    def _in_hook(self, what: str) -> None:
        """``what`` (a value read on the host, an array taken out of a tensor...) done by
        the gradient hooks running now in the traced call: its result may feed the
        function's code after the backward pass, which a replay would give the first
        call's. (Post-accumulate-grad hooks read what they like, DDP's ``has_grad``
        among them; docs/compile.md says what of theirs a replay does not follow.)"""
        if self.reason is None and self.hooking == "gradient" and self._in_hooks():
            self.reason = (f"{what.split(' (', 1)[0]} in a {self.hooking} hook (a replay could not feed what it "
                           "read to the code after it)", _where())

    # ---- reports from the hooks
    def made(self, t, op, prev, recipe) -> None:
        if self.reason is not None or not self.records():
            self._hook_made(t)
            return
        backend = t._backend
        if backend.guard is not None:
            return self.unsupported(f"{op} on {backend.device} (a machine of several GPUs)")
        if not prev:  # a tensor on an array: one the call has seen (detach), a constant, or a value computed apart
            return self.born(t)
        if recipe is None or (callable(recipe) and not getattr(recipe, "on_arrays", False)):
            return self.unsupported(f"{op}: it cannot be run again on arrays")
        sources = []
        for p in prev:
            src = self.source_of(p)
            if src is None:
                return
            sources.append(src)
        params = recipe.items() if type(recipe) is dict else enumerate(recipe) if type(recipe) is tuple else ()
        arrays = []  # (position, source) of the parameters that are arrays the call has seen (an index tensor's)
        for position, value in params:
            if backend.is_array(value) and getattr(value, "shape", None) is not None:
                src = self.arrays.get(id(value))
                if src is None:
                    return self.unsupported(f"{op}: an array among its parameters computed outside the recorded "
                                            "operations (an index computed from values)")
                arrays.append((position, src))
        if any(isinstance(v, (tuple, list, dict)) and _has_array(backend, v)
               for v in (recipe.values() if type(recipe) is dict else recipe if type(recipe) is tuple else ())):
            return self.unsupported(f"{op}: arrays inside its parameters (an index), which a replay would not follow")
        if arrays:
            recipe = _Recipe(recipe, tuple(arrays))
        slot = self._new_slot(t)
        node = t._node
        if node is not None:
            self.node_slot[id(node)] = slot
        positional = type(recipe) is tuple or (type(recipe) is _Recipe and recipe.kind is tuple)
        grad = is_grad_enabled()  # (the needs the op was given: none under no_grad)
        needs = tuple(grad and p._rg for p in prev) if op.needs and positional else None
        self.events.append(("op", op, tuple(sources), recipe, needs, slot, tuple(t._data.shape), backend))

    def born(self, t, python: bool = False, source=None) -> None:
        """A tensor made from data during the call: a second tensor on an array the call
        has seen, or, made by the caller's own code (``Tensor(...)``, ``lp.zeros(...)``),
        a constant of the trace. One LeanPass makes inside a function from an array
        of its own (batch norm's statistics) is a value the replay would not compute."""
        if self.reason is not None or not self.records():
            self._hook_made(t)
            return
        src = self.arrays.get(id(t._data))
        if src is not None:  # another tensor on an array the call has seen (detach, as_tensor)
            self._register(t, src)
            if src[0] == ARG:  # (a new object at each call, as a value's: it must not outlive the call either)
                self.made_here.append(weakref.ref(t))
            return
        if id(t._data) in self.implicit:  # the ones autograd.grad(create_graph=True) starts from, as a Tensor
            python = True
        maker = None if python else _internal_maker()  # Python numbers make a constant wherever
        if maker is not None:
            if maker.endswith(".__init__"):  # (Parameter.__init__: a layer made in the call)
                return self.unsupported(f"a {maker[:-9]} made inside the function (a layer made there: a replay "
                                        "would keep the first call's values; make it outside)")
            if self.arg_arrays and self._of_argument(t, None):
                return self.unsupported(f"{maker}: an array argument (not a Tensor: what NumPy code does with it "
                                        "is not recorded; pass a Tensor, lp.asarray(a))")
            return self.unsupported(f"{maker}: a value computed outside the recorded operations")
        if t._rg:
            return self.unsupported("a tensor that requires grad made inside the function")
        if _on_optimizer_state(t._data):  # (its dict fetched before the call: no read of opt.state seen)
            return self.unsupported("a tensor on an optimizer's state array (lp.as_tensor(opt.state[...][name])) "
                                    "made inside the function: each step changes it in place, and a replay would "
                                    "give the first call's values")
        if self.arg_arrays and self._of_argument(t, source):
            return self.unsupported("a Tensor made of an array argument (Tensor(a), lp.asarray(a)): a replay would "
                                    "start from the first call's values, where the caller may refill the array; "
                                    "pass a Tensor")
        # a new tensor at each call, as eagerly: a replay starts from a copy of the values made now
        slot = self._new_slot(t)
        self.events.append(("const", t._backend.copy(t._data), slot, t._backend))
        self.constants += 1

    def _of_argument(self, t, source) -> bool:
        """Whether ``t``, made of ``source`` (what its maker was given, where it tells),
        holds an array argument's values: the argument itself, or memory it shares (a
        view, a view of a view, DLPack's, a memoryview's), in ``t`` or in ``source``, or
        in the items of a list or tuple ``source`` (two levels, 64 items each). An
        array argument is keyed by identity: the caller may refill it between calls."""
        found, stack = [t._data], [(source, 0)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, (list, tuple)):
                if depth < 2:
                    stack.extend((item, depth + 1) for item in value[:64])
            elif value is not None:
                found.append(value.obj if type(value) is memoryview else value)
        for value in found:
            if id(value) in self.arg_arrays:
                return True
            backend = backend_of_array(value)  # (None for NumPy's: host data, which the cpu device's reads)
            if backend is None and type(value).__module__ == "numpy":
                backend = get_backend("cpu")
            if backend is not None and any(type(a) is type(value) and backend.shares_memory(value, a)
                                           for a in self.arg_arrays.values()):
                return True
        return False

    def changed_unrecorded(self, t, label) -> None:
        """``t`` changed in place while nothing is recorded (another thread, a hook): in
        the hooks the engine runs in the traced call, a value the call made is one a
        replay would leave unchanged (its own array), so the call runs eagerly."""
        if self.reason is None and self._in_hooks() and self.source.get(id(t), (None,))[0] == VAL:
            self.reason = (f"{label}: an in-place change in a {self.hooking} hook of a value the function made",
                           _where())

    def inplace(self, t, op, others, params, name, write):
        label = name or op
        if self.reason is None:
            if is_grad_enabled() and (t._rg or any(isinstance(o, Tensor) and o._rg for o in others)):
                return self._recorded_change(t, op, others, params, name, write)
            elif _has_array(t._backend, (params, [o for o in others if not isinstance(o, Tensor)])):
                self.unsupported(f"{label}: an array among its operands (an index), which a replay would not follow")
            else:
                target = self.source_of(t)
                sources = [self.source_of(o) if isinstance(o, Tensor) else (None, o) for o in others]
                if target is not None and all(s is not None for s in sources):
                    self.events.append(("inplace", target, op, tuple(sources), params, name, write,
                                        self._own_memory(t, target)))
        return self._untraced(inplace, t, op, others, *params, name=name, write=write)

    def _own_memory(self, t, src) -> bool:
        """Whether ``t`` (of source ``src``) is a value of the call on memory of its own, no
        view nor array of an argument or of a tensor from outside: a change of it in place
        changes no state (an eager call after a replay's error makes it anew)."""
        if src[0] != VAL or src[1] in self.grad_slots or getattr(t, "_base", None) is not None:
            return False  # (a gradient read from .grad is the tensor's own gradient)
        backend, data = t._backend, t._data
        others = [*self.keep_args, *(e[0] for e in self.externals.values())]
        return not any(o._backend is backend and backend.shares_memory(o._data, data) for o in others)

    def _recorded_change(self, t, op, others, params, name, write):
        """An in-place change recorded in the graph (``h += x``, ``y[:, 0] = 0`` with grad
        on; ``out += b`` in a rule that ``autograd.grad(create_graph=True)`` records):
        replayed as the operation out of place, its result a new value of ``t``. That is
        what the change does where nothing else sees ``t``'s memory: so ``t`` must be a
        value made in the call, of no view and with no view, no other tensor on its array,
        Tensor operands of its dtype, none of them ``t``'s memory, and a result of its shape
        (what eagerly would be cast or broadcast back into ``t`` is not); a plain operand (the
        number ``y[:, 0] = 0.0`` writes) becomes a parameter."""
        label = name or op
        src = self.source.get(id(t))
        tensors = [o for o in others if isinstance(o, Tensor)]
        plain = list(others[len(tensors):])  # operands that are not Tensors (a number written): after the Tensors
        vc = t._vc
        why = None
        if src is None or src[0] != VAL:
            why = "of a tensor not made in the call (an argument, a parameter)"
        elif src[1] in self.grad_slots:
            why = "of a gradient read from .grad (its array is the tensor's gradient)"
        elif getattr(t, "_base", None) is not None or (vc is not None and (
                vc.live_views() or any(ref() is not None for ref in self.views_apart.get(id(vc), [None])[1:]))):
            why = "of a view, or of a tensor with views"
        elif any(isinstance(o, Tensor) for o in plain) or _has_array(t._backend, (plain, params)):
            why = "with an array among its operands or parameters (an index)"
        elif any(o is t or (vc is not None and o._vc is vc) for o in tensors):
            why = "with an operand on the tensor's own memory"
        elif op != "setitem" and not all(_keeps(label, t, o) for o in tensors):  # (a write keeps t's anyway)
            why = "with an operand of another dtype, or of a shape that broadcasts the tensor's"
        elif sum(1 for other in self.source.values() if other == src) > 1:
            why = "of a tensor whose array another tensor holds too (t.detach())"
        if why is not None:
            self.unsupported(f"{label}: an in-place change recorded in the graph, {why}")
            return self._untraced(inplace, t, op, others, *params, name=name, write=write)
        sources = [src] + [self.source_of(o) for o in tensors]
        needs = (t._rg, *(o._rg for o in tensors), *(False for _ in plain)) if op.needs else None
        self._untraced(inplace, t, op, others, *params, name=name, write=write)
        if any(s is None for s in sources) or self.reason is not None:
            return t
        old = t._node._prev[0]  # the value before the change: a node (found by node_slot), or the leaf eager
        if type(old) is not Node and id(old) not in self.source:  # made of a tensor outside the graph, which
            self._register(old, src)  # holds a copy of it where the op saves it (a create_graph pass reads it)
        if op == "setitem":  # a write into its input: a replay writes into a copy, and the old value stays
            # (a fused run's backward may compute again from it, where eager's saved what it read)
            shape, dtype = self.meta[src[1]]
            copy = self.slots
            self.slots += 1
            self.meta[copy] = (shape, dtype)
            self.events.append(("op", ops.copy, (src,), (), None, copy, shape, t._backend))
            sources[0] = (VAL, copy)
        slot = self._new_slot(t)  # t's new value (its array, the same, names it from now on)
        self.node_slot[id(t._node)] = slot
        self.events.append(("op", op, tuple(sources), (*plain, *params), needs, slot, tuple(t._data.shape),
                            t._backend))
        return t

    def several(self, op, x, params, results, joint) -> None:
        """A decomposition (``several``: ``op``'s outputs ``results``, and, in the graph,
        ``joint``, the tensor of its one node, whose value is ``x``'s): one event that runs
        it again, each output a value of its own, and in the graph each output's node
        handing its gradient to the joint node, as eagerly."""
        if self.reason is not None or not self.records():
            for t in results:  # (a decomposition in a hook: its outputs, as any tensor a hook made)
                self._hook_made(t)
            return
        backend = x._backend
        if backend.guard is not None:
            return self.unsupported(f"{op} on {backend.device} (a machine of several GPUs)")
        src = self.source_of(x)
        if src is None:
            return
        if _has_array(backend, params):
            return self.unsupported(f"{op}: an array among its parameters")
        slots = tuple(self._new_slot(t) for t in results)
        for t, slot in zip(results, slots):
            if t._node is not None:
                self.node_slot[id(t._node)] = slot
        joint_slot = None
        if joint is not None:  # (its array is x's: not registered, x's stays x's)
            joint_slot = self.slots
            self.slots += 1
            self.meta[joint_slot] = (tuple(x._data.shape), x._data.dtype)
            self.node_slot[id(joint._node)] = joint_slot
        self.events.append(("several", op, src, tuple(params), slots, joint_slot,
                            tuple(tuple(t._data.shape) for t in results), backend))

    def draw(self, fn, args):
        """A random draw ``fn(*args)`` (an array): recorded as a value of its own, drawn
        again at each replay; a draw the trace did not record before it (from the
        host generator) makes the call run eagerly."""
        if self.reason is None and _backends_base._host_rng.bit_generator.state != self.rng_state:
            self.unsupported("a random draw the trace does not record (a layer made inside, lp.manual_seed...)")
        array = self._untraced(fn, *args)
        backend = args[0]
        if type(array) is not backend.array_type:  # a library scalar (a 0-d mask times 1 / keep): its array,
            array = backend.as_array(array)  # the one the call goes on with (else a constant of the trace)
        if self.reason is None:
            slot = self.slots
            self.slots += 1
            self.meta[slot] = (tuple(array.shape), array.dtype)
            self.arrays[id(array)] = (VAL, slot)
            self.keep.append(array)
            self.events.append(("draw", fn, args, slot, args[0]))
            self.draws += 1
        self.rng_state = _backends_base._host_rng.bit_generator.state
        return array

    def set_grad(self, t, value) -> None:
        # its own gradient given back, changed in place (``p.grad *= 2``: read_grad's Tensor for ``t``), or None
        read = self.arrays.get(id(value._data)) if isinstance(value, Tensor) and value._data is t._grad else None
        own = read is not None and read[0] == VAL and self.grad_slots.get(read[1]) == self.source.get(id(t))
        if value is not None and not own:
            self.unsupported("Tensor.grad = an array")
        elif self.reason is None:
            src = self.source_of(t)
            if src is not None and src[0] == VAL:
                self.unsupported("Tensor.grad = ... of a tensor made in the call")
            elif src is not None:
                self.events.append(("grad", src, own))
        TRACER[0] = None
        try:
            t.grad = value
        finally:
            TRACER[0] = self

    def action(self, method, args, kwargs):
        if getattr(method, "closure_first", False) and ((len(args) > 1 and args[1] is not None)
                                                         or kwargs.get("closure") is not None):
            closure = args[1] if len(args) > 1 else kwargs["closure"]  # (opt.step(closure): a replay runs
            with enable_grad():  # the closure's recorded operations, then the step)
                result = closure()
            self.action(method, args[:1], {k: v for k, v in kwargs.items() if k != "closure"})
            return result
        args = tuple(list(a) if isinstance(a, collections.abc.Iterator) else a for a in args)  # params() twice
        if any(callable(v) for v in (*args[1:], *kwargs.values())):
            self.unsupported(f"{method.__qualname__} given a function (a closure would run with the trace's values)")
        for value in (*args, *kwargs.values()):
            for t in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(t, Tensor) and self.source.get(id(t), (EXT,))[0] != EXT:  # (a replay would give it
                    self.unsupported(f"{method.__qualname__} given an argument of the call or a tensor computed "
                                     "in it (a replay would give it the first call's)")  # the trace's)
        at = None
        if self.reason is None:
            at = len(self.events)
            self.events.append(("action", method, args, kwargs, None))  # (None: what it returns is not used)
            self.actions.append(method.__qualname__)
        if getattr(method, "sets_options", False):  # (an option read after it may differ at a replay)
            self.options_set = method.__qualname__
        self.check_watched()  # changed by the function's own code since the last look: a replay would not
        writes = _WRITES[0]
        try:
            result = self._untraced(method, *args, **kwargs)
        finally:
            self.writes += _WRITES[0] - writes  # (an action's writes are replayed)
        self.check_watched(by_action=True)  # (an action's changes are replayed: the state to compare with now)
        if isinstance(result, Tensor):
            if at is not None and self.reason is None and not result._rg and id(result) not in self.source:
                slot = self._new_slot(result)  # (clip_grad_norm_'s norm): a value of the call, the one the action
                self.events[at] = (*self.events[at][:4], (slot, *self.meta[slot], result._backend))  # returns
            elif id(result) not in self.source:
                self.poisoned[id(result)] = method.__qualname__
                self.keep.append(result)
        return result

    def read_state(self, state) -> None:
        """See :func:`leanpass._graph.trace.read_state`."""
        if any(not isinstance(v, Tensor) for entries in dict.values(state)
               for v in (dict.values(entries) if isinstance(entries, dict) else (entries,))):
            self.unsupported("an optimizer's state read inside the function (opt.state): its arrays and step "
                             "counts change at each step, and a replay would give the first call's")
        else:  # (Tensors, or none yet: ``if opt.state:``, a step's first call fills it): a replay checks that
            # it holds the same objects, and is still its optimizers' (not rebound by load_state_dict)
            owners = [o for o in list(_WATCHED) if getattr(o, "state", None) is state]
            self.state_reads.append((state, _state_items(state), owners))

    def read_option(self, group, key, value) -> None:
        """See :func:`leanpass._graph.trace.read_option`."""
        if self.options_set is not None and key != "params":
            self.unsupported(f"an optimizer's option ({key!r}) read after {self.options_set} in the call: a replay "
                             "would use the number the trace read, whatever they set")
        self.options.append((group, key, value))

    def view_apart(self, vc, view) -> None:
        """``view`` was made in ``no_grad`` mode on the memory whose version counter is
        ``vc`` (it is not among ``vc``'s live views): a change of that memory recorded in
        the graph, which a replay makes out of place, would leave it stale."""
        if self.records():
            self.views_apart.setdefault(id(vc), [vc]).append(weakref.ref(view))

    def module_called(self, module, member_lists) -> None:
        """``module`` was called in the call: its lists of members, ``member_lists(module)``
        (:func:`leanpass.nn.module._member_lists`), must hold the same items at a replay."""
        if id(module) not in self.modules_called and self.records():
            self.modules_called[id(module)] = module
            self.member_lists.extend(member_lists(module))  # (of lists and dicts, by item: not nested ones)

    def check_watched(self, by_action: bool = False) -> bool:
        """Compare the watched objects (:data:`leanpass._graph.trace.WATCHED`) with their
        last snapshot: a change not made ``by_action`` sets :attr:`state_changed`, as
        does a write the call's own code made (even of the value there was). Whether
        an option may have changed: an optimizer's groups, or any other watched
        object's state (a scheduler's); not an optimizer's step counts alone."""
        if not by_action and _WRITES[0] != self.writes:
            self.state_changed = True
        options = False
        for k, (obj, seen) in enumerate(self.watched):
            now = obj._traced_state()
            if not _equal(now, seen):
                self.watched[k] = (obj, now)
                self.state_changed = self.state_changed or not by_action
                options = options or not hasattr(obj, "param_groups") or not _equal(now[0], seen[0])
        return options

    def read_grad(self, t, get):
        """``t.grad`` read in the call: its array now, as a Tensor whose value a replay
        reads from ``t`` at the same point (after the same backward passes and steps)."""
        g = get()
        if self.reason is not None:
            return g
        if g is None:
            self.unsupported("Tensor.grad read as None (a replay may find a gradient)")
            return g
        if isinstance(g, Tensor):
            self.unsupported("Tensor.grad holding a Tensor (from backward(create_graph=True))")
            return g
        src = self.source_of(t)
        if src is None:
            return g
        if src[0] == VAL:
            key = self._kept_grad(t, src)
            if key is None:
                self.unsupported("Tensor.grad of a tensor made in the call that is no leaf of it and retains no "
                                 "gradient")
                return g
            # a leaf made in the call (FGSM's x.detach().requires_grad_()), or a value that retains its gradient:
            # its gradient of the replay's backward passes at this point (Plan._backward keeps it), a value of the call
            slot = self._new_grad_value(g)
            self.events.append(("leaf_grad", key, slot, t._backend, *self.meta[slot]))
            return leaf(g, t._backend)
        slot = self._new_grad_value(g)
        self.grad_slots[slot] = src  # its memory is the tensor's .grad: no change in the graph replays out of place
        self.events.append(("grad_read", src, slot, t._backend))
        return leaf(g, t._backend)

    def _kept_grad(self, t, src):
        """The slot by which a replay's backward passes keep the gradient of ``t``, a
        tensor of the call's values (``src``): a leaf made in the call, or a value that
        retains its gradient (its node's slot, which its backward pass names); None
        for any other."""
        slot = self.inner_leaves.get(id(t))
        if slot is None and t._node is not None and t.retains_grad:
            slot = self.node_slot.get(id(t._node))
        return slot if slot is not None and src == (VAL, slot) else None

    def _new_grad_value(self, g) -> int:
        """A slot for the gradient ``g`` read in the call, a value of it (the Tensor on it
        that the read gives is registered as this value)."""
        slot = self.slots
        self.slots += 1
        self.meta[slot] = (tuple(g.shape), g.dtype)
        self.arrays[id(g)] = (VAL, slot)
        self.keep.append(g)
        return slot

    def check(self, fn, values, branch: bool = False) -> None:
        """``fn(*arrays)`` checks the values of ``values`` (tensors, or arrays the call has
        seen): a replay checks again (``branch``: where it fails, eager code takes another
        path: see :func:`_checks_first`)."""
        if self.reason is not None:
            return
        sources = [self.source_of(v) if isinstance(v, Tensor) else self.arrays.get(id(v)) for v in values]
        if any(s is None for s in sources):
            return self.unsupported("a check of values computed outside the recorded operations")
        self.events.append(("check", fn, tuple(sources), branch))

    def host_read(self, t, value, frame, what) -> None:
        """``value``, a Python number read from ``t`` by the code of ``frame``: recorded
        where the function returns it as it is (``return loss.item()``: a replay reads it
        again); anywhere else a replay could not follow what Python does with it."""
        if self.reason is not None or not self.records():
            self._in_hook(what)
            return
        returns = self.returns
        src = self.source_of(t)
        if (type(value) is not float or returns is None or frame.f_code is not returns[0]
                or frame.f_back is None or frame.f_back.f_code is not self.caller  # (not a recursive call's)
                or _read_at(frame) not in returns[1] or src is None):
            return self.unsupported(what)
        slot = self.slots
        self.slots += 1
        self.meta[slot] = ((), None)
        self.host[id(value)] = (slot, what, _where())
        self.keep.append(value)
        self.events.append(("host", _host_float, (src,), slot, t._backend))

    def _untraced(self, fn, *args, **kwargs):
        TRACER[0] = None
        try:
            return fn(*args, **kwargs)
        except BaseException:
            self.raised(getattr(fn, "__qualname__", "an in-place change"))
            raise
        finally:
            TRACER[0] = self

    def raised(self, what: str) -> None:
        """``what``, recorded (or about to be), raised: the call may catch the error and go
        on, where a replay would run it without the error, so the call runs eagerly."""
        self.unsupported(f"{what} raised an error inside the function")

    def backprop(self, roots, grads, create_graph, targets) -> None:
        if self.reason is not None or not self.records():
            return
        if create_graph and targets is None:
            return self.unsupported("backward(create_graph=True) inside the function (a .grad in a graph)")
        if create_graph:
            self.graph_passes += 1  # (a hook registered later makes its replays stale: Plan.fits)
            # autograd.grad(create_graph=True) (lp.func.hvp, a gradient penalty): the pass records its rules as
            # operations on Tensors, which the trace records as any other (its seeds, Tensors, too); a replay runs
            # them, and a later pass goes back through them. Only the graph is checked here: made in the call.
            needed = _needed(roots, {id(edge(t)) for t in targets})
            schedule = self._schedule([r._node for r in roots if id(r._node) in needed], needed)
            if schedule is not None and self._hooked(schedule, post=False):  # (they would run on recorded Tensors)
                self.unsupported("autograd.grad(create_graph=True) to a tensor with gradient hooks (register_hook)")
            return
        seeds = []
        for root, g in zip(roots, grads):
            node = root._node
            slot = self.node_slot.get(id(node)) if node is not None else None
            if slot is None:
                return self.unsupported("backward from a tensor made outside the recorded operations")
            src = self.arrays.get(id(g))
            if src is None:
                if id(g) not in self.implicit:
                    return self.unsupported("backward(gradient) with a gradient made outside the recorded operations")
                src = ("ones", (tuple(g.shape), g.dtype))
            seeds.append((slot, src))
        if targets is None:
            retained = []
            schedule = self._schedule([r._node for r in roots], retained=retained)
            if schedule is not None:
                self.events.append(("backward", tuple(seeds), schedule, roots[0]._backend, frozenset(retained)))
                if self._hooked(schedule):
                    self.hooked_passes.add(id(self.events[-1]))
            return
        # autograd.grad: only the nodes on a path to a target, whose gradients it returns (each
        # copied into a slot of its own: ``gradients``), and no .grad written
        needed = _needed(roots, {id(edge(t)) for t in targets})
        schedule = self._schedule([r._node for r in roots if id(r._node) in needed], needed)
        if schedule is None:
            return
        keys = []
        for t in targets:
            if t._node is not None:
                keys.append(("node", self.node_slot.get(id(t._node))))
            else:
                keys.append(self._leaf_key(t))
            if keys[-1] is None or keys[-1][1] is None:
                return self.unsupported("autograd.grad for a tensor made outside the recorded operations")
        self.events.append(("autograd", tuple(seeds), schedule, roots[0]._backend, tuple(keys), []))
        if self._hooked(schedule):  # (its leaves' gradient hooks run: they may write what a check reads)
            self.hooked_passes.add(id(self.events[-1]))

    def gradients(self, arrays) -> None:
        """The arrays autograd.grad returns (the copies it makes, None where an input got no
        gradient): values of the last ``autograd`` event, each in a slot of its own."""
        if self.reason is not None or not self.records():
            return
        event = self.events[-1] if self.events else None
        if event is None or event[0] != "autograd":
            return self.unsupported("autograd.grad's gradients apart from its pass")
        for k, array in enumerate(arrays):
            if array is not None:
                slot = self.slots
                self.slots += 1
                self.meta[slot] = (tuple(array.shape), array.dtype)
                self.arrays[id(array)] = (VAL, slot)
                self.keep.append(array)
                event[5].append((k, slot))

    def new_leaf(self, t) -> None:
        """``t``: a new leaf that requires grad, on the values of a tensor the call has seen
        (``lp.func.grad``'s input): a value of its own, so that autograd.grad can aim at it
        apart from the tensor it shares its array with."""
        if self.reason is not None or not self.records():
            return
        src = self.source.get(id(t))
        if src is None:
            return self.unsupported("a leaf that requires grad on values computed outside the recorded operations")
        slot = self.slots
        self.slots += 1
        self.meta[slot] = (tuple(t._data.shape), t._data.dtype)
        self.source[id(t)] = (VAL, slot)
        self.inner_leaves[id(t)] = slot
        self.events.append(("leaf", src, slot, t._backend))

    def grad_leaf(self, t) -> bool:
        """``t.requires_grad_()`` on a tensor of the call's values that is not an argument
        nor a tensor from outside (``x.detach().requires_grad_()``, a gradient penalty's
        input): a new leaf, as :meth:`new_leaf`. False where it is one of those."""
        if self.reason is not None or not self.records():
            return True  # (nothing recorded any more, or another thread's)
        src = self.source.get(id(t))
        if src is None or src[0] == EXT or (src[0] == ARG and self.keep_args[src[1]] is t):
            return False
        self.new_leaf(t)
        return True

    def _hooked(self, schedule, post: bool = True) -> bool:
        """Whether a leaf of the pass ``schedule`` (an argument, a tensor from outside)
        has a hook, a gradient hook or (``post``) a post-accumulate one, which may write
        any tensor: a check stays behind the pass (:func:`_checks_first`). Hooks
        elsewhere (on another model's tensors, or on ones that are garbage not yet
        collected) are no matter. The pass's leaves without such hooks are kept
        (:attr:`pass_leaves`, with ``post``): one hooked later traces again (:meth:`Plan.fits`)."""
        found = False
        for _, parents, _, _ in schedule:
            for parent in parents:
                if parent is None or parent[0] not in (ARG, EXT):
                    continue
                t = self.keep_args[parent[1]] if parent[0] == ARG else parent[1]
                if hooks.hooked(t, post):
                    found = True
                else:
                    self.pass_leaves.append((*parent[:2], post))
        return found

    def _leaf_key(self, t):
        """How a backward pass's schedule names the leaf ``t``: ``(ARG, i)``, ``(EXT, t)``,
        or ``("leaf", slot)`` for one made in the call (:meth:`new_leaf`); None elsewhere."""
        slot = self.inner_leaves.get(id(t))
        if slot is not None:
            return ("leaf", slot)
        kind, ref = self.source_of(t) or (None, None)
        return None if kind in (None, VAL) else (kind, ref)

    def _schedule(self, starts, needed=None, retained=None):
        """The nodes below ``starts`` in the engine's order (newest first), each with its
        parents: ``(slot, parents, fresh, exact)``, a parent ``(VAL, slot, shape,
        dtype)``, ``(EXT, leaf, shape, dtype)`` for a leaf that takes a gradient, or None.
        With ``needed`` (autograd.grad's: the ids on a path to a target) only those. A
        leaf made in the call (:meth:`new_leaf`) is ``("leaf", slot, shape, dtype)``.
        ``retained`` (a backward pass's list) gets the slots of the nodes whose tensor
        retains its gradient (``retain_grad``): the pass keeps their gradients."""
        seen, stack, nodes = set(), list(starts), []
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if type(node._prev) is not tuple:
                self.unsupported("backward through a graph an earlier backward released")
                return None
            owner = node._tensor
            if retained is not None and owner is not None and getattr(owner(), "_retain", False):
                retained.append(node)  # (autograd.grad keeps no gradient there, as eagerly)
            nodes.append(node)
            stack.extend(p for p in node._prev if type(p) is Node and (needed is None or id(p) in needed))
        schedule = []
        for node in sorted(nodes, key=lambda n: -n._seq):
            slot = self.node_slot.get(id(node))
            if slot is None:
                self.unsupported("backward through a graph made before the call")
                return None
            parents = []
            for p in node._prev:
                shape, dtype = tuple(p._data.shape), p._data.dtype
                if needed is not None and id(p) not in needed:
                    parents.append(None)  # (the engine passes nothing there either)
                elif type(p) is Node:
                    parent_slot = self.node_slot.get(id(p))
                    if parent_slot is None:
                        self.unsupported("backward through a graph made before the call")
                        return None
                    parents.append((VAL, parent_slot, shape, dtype))
                elif p._rg and p._node is None and id(p) in self.inner_leaves:  # (backward: its .grad is not kept)
                    parents.append(("leaf", self.inner_leaves[id(p)], shape, dtype))
                elif p._rg and p._node is None:
                    kind, ref = self.source_of(p)  # an argument, or a tensor from outside (checked before a replay)
                    if kind == VAL:
                        self.unsupported("backward into a tensor made in the call from an array")
                        return None
                    parents.append((kind, ref, shape, dtype))
                else:
                    parents.append(None)
            # (a rule of mixed dtypes that eagerly returned its gradients cast: the replay's rule does not)
            exact = _CAST_FIRST if getattr(node._backward, "casts", False) else bool(node._op.exact)
            if COMPLEX[0] and any(_is_complex(p._data) for p in (node, *node._prev)):
                exact = _Complex(node, exact)
            schedule.append((slot, tuple(parents), node._op.fresh, exact))
        if retained:
            retained[:] = [self.node_slot[id(node)] for node in retained]
        return tuple(schedule)

    # ---- the plan
    def plan(self, result, fuse: bool = True):
        outputs = self._outputs(result)
        if self.reason is None:
            returned = set(_output_slots(outputs))
            for slot, what, where in self.host.values():
                if slot not in returned:  # (a read in a return, its number not in the result: an error's path)
                    self.reason = (what, where)
                    break
        if self.reason is None:
            self.events, late, self.guards, self.checks_past_passes = _checks_first(
                self.events, self.keep_args, self.hooked_passes)
            if late:  # a path eager code takes on values, decided after the call changed state
                self.reason = (f"a value read on the host that decides a path ({late}) after the call changed state "
                               "(a backward pass, a step), or of a value it computed: a replay could not take the "
                               "other path", "replay")
        if self.reason is not None:
            return None
        return Plan(self, outputs, _MODULE_CHANGES[0], fuse)

    def escaped(self, box: list) -> str | None:
        """What of the call's values outlives it other than in the result ``box[0]``, if
        anything (a replay makes new arrays and Python objects for them, and would
        leave what is kept elsewhere as the trace made it):

        - a tensor on a value of the call, not in the result (held through weak
          references): kept in an optimizer's state made at its first step, appended
          to a list, stored in a global;
        - a tensor or container of the result, or an argument, that something
          outside the result holds more than before the call (``state["h"] = h;
          return h``, ``state["prev"] = x``): counted by references, those from the
          result's own containers, views' bases and graph taken off.

        ``box`` holds the only reference the caller keeps to the result. (The trace's
        own references go first.)"""
        made, self.made_here = self.made_here, []
        self.keep.clear()
        for attempt in range(2):
            if attempt:  # (a cycle the call made may hold one: an exception caught inside, with its frames;
                gc.collect()  # one a long call moved to the oldest generation)
            seen, inside, mine = _held_by(box, made, {id(h) for h in self.holders})
            if any(ref() is not None and id(ref()) not in seen for ref in made):
                if attempt:
                    return ("a tensor made in the call kept after it other than in the result (in an optimizer's "
                            "state made at its first step, a list, a global)")
            elif any(n > inside[id(o)] for o, n in zip(mine, _references(mine))):
                if attempt:
                    return "a tensor or container the call returns, kept elsewhere too (state['h'] = h; return h)"
            elif any(after - before > inside[id(t)] for t, before, after in
                     [*zip(self.keep_args, self.arg_references, _references(self.keep_args)),
                      *zip(self.holders, self.holder_references, _references(self.holders))]):
                if attempt:
                    return "an argument kept after the call (state['prev'] = x, or the list it came in)"
            else:
                return None
        return None

    def meta_of(self, src):
        """``(shape, dtype)`` of the value a source gives (at every replay: checked)."""
        kind, ref = src
        if kind == VAL:
            return self.meta[ref]
        data = (self.keep_args[ref] if kind == ARG else ref)._data
        return tuple(data.shape), data.dtype

    def _outputs(self, value):
        if isinstance(value, Tensor):  # one tensor twice in the result (return y, y): one spec, one object
            spec = self.out_specs.get(id(value))
            if spec is None:
                spec = self.out_specs[id(value)] = self._tensor_output(value)
            return spec
        kind = type(value)
        if kind in (tuple, list) or (issubclass(kind, tuple) and hasattr(kind, "_make")):  # (a named tuple)
            return (kind, [self._outputs(v) for v in value])
        if kind in (dict, collections.OrderedDict):
            return (kind, {k: self._outputs(v) for k, v in value.items()})
        if kind is float and id(value) in self.host:  # read on the host in the return: read again
            return ("host", self.host[id(value)][0])
        if kind in (bool, int, float, complex):  # (a learning rate, a scheduler's count: state a replay reads not)
            self.unsupported(f"a Python {kind.__name__} in the result: a replay would return the trace's; return "
                             "a tensor, or a float read on the host as it is (return loss.item())")
            return None
        if value is None or kind is str:
            return ("py", value)
        self.unsupported(f"a result of type {kind.__name__}")
        return None

    def _tensor_output(self, value):
        src = self.source_of(value)
        if src is None:
            return None
        if value._rg and value._node is not None and not isinstance(value._node._prev, Released):
            self.unsupported("a result that requires grad in a graph still alive (its graph is not replayed: "
                             "call backward inside the function)")
        if src[0] != VAL and value is not (self.keep_args[src[1]] if src[0] == ARG else src[1]):
            return ("T", src, value._backend, "view")  # another tensor on its array (x.detach())
        if src[0] == VAL and (id(value) in self.inner_leaves or value.retains_grad):
            # a leaf made in the call, or a value that retains its gradient: it comes back with its .grad (at the
            # call's end), a value of the call
            key = self._kept_grad(value, src)
            if key is None:
                self.unsupported("a tensor of the call that retains its gradient, changed in place since, as a "
                                 "result: its .grad is not replayed")
                return None
            grad = value._grad  # (where no pass reached it, zeros apart: eager's own result keeps None)
            if grad is None:
                grad = value._backend.zeros(tuple(value._data.shape), value._data.dtype)
            slot = self._new_grad_value(grad)
            self.events.append(("leaf_grad", key, slot, value._backend, *self.meta[slot]))
            return ("T", src, value._backend, None, slot)
        return ("T", src, value._backend)


def _held_by(box: list, made: list, given: set) -> tuple:
    """What the result ``box[0]`` holds (:meth:`Tracer.escaped`): the ids of its
    containers, tensors, views' bases and graph nodes; how many references these hold
    to each object (by id); and those of them nothing else may hold: the result's
    containers that hold tensors (but those of the arguments, ids in ``given``), and
    its tensors on values of the call (``made``, weak references)."""
    made_ids = {id(ref()) for ref in made}
    seen: set = {id(box)}
    held: list = [box]
    mine: list = []
    holding = {id(c) for c, _ in holding_members([box[0]], tuples=True)}  # (its containers that hold tensors)
    stack = [box[0]]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        if isinstance(value, Tensor):
            stack += [getattr(value, "_base", None), value._node]  # (base, key, ...) on a view: unset elsewhere
            if id(value) in made_ids:
                mine.append(value)
        elif isinstance(value, Node):
            stack.append(value._prev)
        elif isinstance(value, Released):  # the leaves a backward wrote into; weakly, the retained
            stack += [value.leaves, *value]
        elif isinstance(value, (tuple, list, dict)):
            stack.extend(value.values() if isinstance(value, dict) else value)
            if id(value) not in given and id(value) in holding:
                mine.append(value)
        else:
            continue
        seen.add(id(value))
        held.append(value)
    inside = collections.Counter(map(id, itertools.chain.from_iterable(map(gc.get_referents, held))))
    return seen, inside, mine


def _references(objects: list) -> list:
    """How many references each of ``objects`` has, beyond the list's own and this
    function's (a new object in the same place is the zero)."""
    objects.append(object())  # (held by the list alone: the zero)
    counts = [sys.getrefcount(o) for o in objects]
    objects.pop()
    return [n - counts[-1] for n in counts[:-1]]


def _checks_first(events: list, args: list, hooked=frozenset()):
    """``(events, late, guards)``: ``events`` with each check of values from outside the
    call (an argument's, a state tensor's: class indices, a mask found causal), or of
    values the call computed from those by operations (a later micro-batch's targets,
    ``y[2:4]``: the operations and constants move with it, :func:`_movable`), moved to the front,
    where nothing before it could have changed them: no in-place change of one of them
    or of memory it shares (a view, a second name), nor of the computed value, nor of a
    value of the call that may be a view of one; no step given one of them or its
    holder; no backward pass whose leaves have hooks (which may write anything: ``hooked``,
    the ids of those passes, :meth:`Tracer._hooked`). A
    replay that fails it then has changed nothing yet, and the call runs eagerly, as
    eager code would take another path, where a check met after a backward pass or a
    step could only raise.

    ``late``: what a check that decides a path (``branch``) but stays behind a change of
    state (by the replay's own rules: :meth:`Plan._replay`) is about, else None.
    ``guards``: ``(read, written)`` pairs of sources, ``(ARG, i)`` or ``(EXT, tensor)``,
    one of them an argument: a tensor a moved check or operation reads, and one
    something before the check's place writes. A replay where the two share memory
    (``f(state[:])`` where the trace had another tensor, read or written) runs
    eagerly; the call's key tells how arguments share memory among themselves.
    ``args``: the traced call's tensor arguments. ``crossed``: whether a check moved
    past a backward pass (a hook added since to one of its leaves may write what it
    reads: :meth:`Plan.fits`)."""
    first, rest, late, guards, crossed = [], [], None, [], False
    written = []  # the tensors from outside an in-place change or a step before here may have written
    anything = False  # an in-place change of a value of the call that is not its own memory; a hooked backward
    changed = read_grads = False  # a change of state before here, by the replay's rules (Plan._replay)
    passed = False  # a backward pass before here

    def tensor(src):
        kind, ref = src
        return args[ref] if kind == ARG else ref if kind == EXT else None

    def untouched(src):
        t = tensor(src)
        return t is not None and not any(_share_memory(t, w) for w in written)

    made = {}  # slot -> the operation that made it, where one did (only its operands decide its value)
    moved = set()  # the ids of operations moved to the front with a check that reads what they make
    changed_values = set()  # the slots of values of the call changed in place

    for event in events:
        kind = event[0]
        if kind == "check":
            chain = []  # a check of a value the call computed from such tensors (the labels of a micro-batch,
            # y[2:4], after the first one's backward pass) moves with the operations that compute it
            if not anything and all(_movable(src, chain, made, moved, changed_values, untouched) for src in event[2]):
                crossed = crossed or passed
                first += chain
                moved.update(map(id, chain))
                first.append(event)
                read = [src for e in (*chain, event) for src in _operands(e) if src[0] != VAL]
                for w in written:  # (arguments among themselves: the call's key holds how they share memory)
                    w = next(((ARG, i) for i, a in enumerate(args) if a is w), (EXT, w))
                    guards += [(src, w) for src in read if (src[0] == ARG) != (w[0] == ARG)]
                continue
            if event[3] and changed and late is None:  # (before any change, a failure still runs it eagerly)
                late = getattr(getattr(event[1], "func", event[1]), "__name__", "a check")
        elif kind == "op":
            made[event[5]] = event
        elif kind == "const":  # (a tensor made in the call from host values: the same at every replay)
            made[event[2]] = event
        elif kind == "inplace" and not event[7]:  # (not the call's own memory)
            target = tensor(event[1])
            if target is None:  # a value of the call: it may be a view of an argument, or of a state tensor
                anything = True
            else:
                written.append(target)
            changed = True
        elif kind == "inplace":  # a value of the call on memory of its own, changed: its slot holds another value
            changed_values.add(event[1][1])
        elif kind == "action":
            if read_grads or not getattr(event[1], "idempotent", False):  # (zero_grad writes no values)
                written += _touched(event[1], event[2], event[3])
                changed = True
        elif kind == "backward":  # (a hook on its leaves may step the parameters, or write any tensor; a hook
            # added since the trace on one of them traces again: Plan.fits)
            anything = anything or id(event) in hooked
            changed = passed = True
        elif kind == "autograd":  # (no .grad written, but its leaves' gradient hooks run, as in a backward pass:
            anything = anything or id(event) in hooked  # whatever they do is a change, which a replay that failed
            changed = changed or id(event) in hooked  # a check after it could not undo)
            passed = True
        elif kind == "grad_read":
            read_grads = True
        elif kind == "grad":
            changed = changed or event[2] or read_grads
        rest.append(event)
    return first + [e for e in rest if id(e) not in moved], late, guards, crossed


def _operands(event) -> tuple:
    """The sources an operation or a check reads: its inputs, and the arrays among an
    operation's parameters (an index tensor's)."""
    if event[0] == "check":
        return event[2]
    if event[0] == "const":
        return ()
    recipe = event[3]
    return event[2] + (tuple(a for _, a in recipe.arrays) if type(recipe) is _Recipe else ())


def _movable(src, chain, made, moved, changed_values, untouched) -> bool:
    """Whether the source ``src`` of a check can be read at the front of a replay, with
    the operations that make it (added to ``chain``, operands first): a tensor from
    outside nothing may have written yet (``untouched``), or a value an operation made
    (``made``: slot -> event) of such, unchanged since (not in ``changed_values``).
    ``moved``: the ids of operations already moved."""
    if src[0] != VAL:
        return untouched(src)
    event = made.get(src[1])
    if event is None or src[1] in changed_values:
        return False
    if id(event) in moved or any(e is event for e in chain):
        return True
    if not all(_movable(o, chain, made, moved, changed_values, untouched) for o in _operands(event)):
        return False
    chain.append(event)
    return True


def _touched(method, args, kwargs) -> list:
    """The tensors a step may write: those among its arguments (in lists, tuples and
    dicts too), an optimizer's parameters, a module's parameters and buffers."""
    found = []
    stack = [getattr(method, "__self__", None), *args, *kwargs.values()]
    while stack:
        value = stack.pop()
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, Module):
            found += [*value.parameters(), *value.buffers()]
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif hasattr(value, "param_groups"):  # an optimizer (or a scheduler's): its parameters
            stack.extend(group.get("params", ()) for group in value.param_groups)
        elif hasattr(value, "optimizer") and hasattr(value.optimizer, "param_groups"):
            stack.append(value.optimizer)
    return found
