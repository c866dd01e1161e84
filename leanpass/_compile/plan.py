"""A trace's plan: its events replayed on arrays, without tensors or the graph."""

from __future__ import annotations

import collections

from .._fusion import ARG, COMPILE_AFTER, EXT, VAL, BackwardRun, compile_runs, fuse, fusion_enabled
from .._graph import hooks
from .._graph.engine import _store, _unbroadcast
from .._graph.hooks import _with_grad_hooks
from .._graph.modes import grad_lock, no_grad
from .._node import _part_backward, inplace, leaf, share_version
from ..nn.module import _CHANGES as _MODULE_CHANGES
from ..nn.module import _same_value, unchanged
from ..nn.module import restored as modules_restored
from ..nn.module import reversible as modules_reversible
from ..ops.conversion import gradient_as
from ..tensor import Tensor
from .code import _NOT_KEYED, _equal
from .record import (
    _CAST_FIRST,
    _Branch,
    _Complex,
    _output_slots,
    _Recipe,
    _Retry,
    _share_memory,
    _Stale,
    _state_items,
)


class Plan:
    """A recorded call, ready to replay (see :mod:`leanpass._compile`)."""

    def __init__(self, tracer, outputs, modules: int, fuse_runs: bool = True):
        self.modules = modules  # the modules' change count when the trace ended
        self.events = tracer.events
        self.guards = tracer.guards  # (read, written): sources a moved check reads and the call writes
        self.post_hooks = hooks.post_hook_changes[0]  # (a hook added or removed since: trace again)
        # the leaves of the passes where a check moved past one (a hook added there since may write what it reads:
        # _checks_first) or a graph pass met none (they would run on its Tensors): one hooked since traces again
        watched = tracer.pass_leaves if tracer.checks_past_passes or tracer.graph_passes else ()
        self.hook_leaves = list({(id(ref), post): (ref, post) for kind, ref, post in watched if kind == EXT}.values())
        self.hook_args = sorted({(ref, post) for kind, ref, post in watched if kind == ARG})
        self.slots = tracer.slots
        self.outputs = outputs
        self.externals = list(tracer.externals.values())
        self.member_lists = tracer.member_lists
        self.options = list({(id(g), k): (g, k, v) for g, k, v in reversed(tracer.options)}.values())  # (first)
        self.state_reads = list({id(r[0]): r for r in reversed(tracer.state_reads)}.values())  # (the first)
        self.counts = collections.Counter(e[0] for e in self.events)
        self.draws = bool(self.counts["draw"])
        self.passes = self.counts["backward"] + self.counts["autograd"] + tracer.graph_passes
        self.graph_passes = tracer.graph_passes
        self.slot_backend = {e[5]: e[7] for e in self.events if e[0] == "op"}
        self.slot_backend.update({e[2]: e[3] for e in self.events if e[0] == "const"})
        self.slot_backend.update({e[3]: e[4] for e in self.events if e[0] == "draw"})
        self.slot_backend.update({e[2]: e[3] for e in self.events if e[0] == "leaf"})
        self.slot_backend.update({slot: e[7] for e in self.events if e[0] == "several"
                                  for slot in (*e[4], *([] if e[5] is None else [e[5]]))})
        self.slot_backend.update({slot: e[3] for e in self.events if e[0] == "autograd" for _, slot in e[5]})
        self.slot_backend.update({e[2]: e[3] for e in self.events if e[0] in ("grad_read", "leaf_grad")})
        self.leaf_grads = frozenset(e[1] for e in self.events if e[0] == "leaf_grad")  # (their .grad read)
        self.slot_backend.update({e[4][0]: e[4][3] for e in self.events if e[0] == "action" and e[4] is not None})
        self.grad_meta = {e[2]: tracer.meta[e[2]] for e in self.events if e[0] == "grad_read"}
        self.grads_read = list({id(e[1][1]) if e[1][0] == EXT else e[1]: e[1] for e in self.events
                                if e[0] == "grad_read"}.values())
        self.runs = self.replays = self.kernels = 0
        self.retries = self.retried = 0  # replays that met an error before any change of state: in a row, all
        self.retry_reason = None  # (the last one's error)
        # fusion plans at the first replay (the trace, and a call made once, do not pay for it),
        # from the shapes and dtypes of what the operations read
        self._to_fuse = None
        if fuse_runs and fusion_enabled():
            ops = [e for e in self.events if e[0] == "op"]
            self._to_fuse = {src: tracer.meta_of(src) for e in ops for src in (*e[2], (VAL, e[5]))}
        self.constants = tracer.constants
        self.actions = tracer.actions
        self._prepare()

    def _prepare(self) -> None:
        """What a replay reads of the events: the nodes whose backward rule a pass runs,
        and where each value is last read."""
        needed = set()
        for event in self.events:
            if event[0] in ("backward", "autograd"):
                needed.update(entry[0] for entry in event[2] if type(entry) is tuple)
        self.keeps_backward = needed
        free = self._liveness()
        self._free = [free.get(i, ()) for i in range(len(self.events))]  # (a list: read at every event)

    def _fuse(self) -> None:
        meta, self._to_fuse = self._to_fuse, None
        self.events, self.runs = fuse(self.events, meta.__getitem__, _output_slots(self.outputs))
        self._prepare()

    def _liveness(self) -> dict:
        """{event index: slots no later event, backward pass or result reads}: the replay
        drops its references to them there, as eager code drops its temporaries."""
        last = {}
        for i, event in enumerate(self.events):
            kind = event[0]
            if kind == "op":
                recipe = event[3]
                reads = (*event[2], *(src for _, src in recipe.arrays)) if type(recipe) is _Recipe else event[2]
                for kind_, ref in reads:
                    if kind_ == VAL:
                        last[ref] = i
            elif kind == "inplace":
                for src in (event[1], *event[3]):
                    if src[0] == VAL:
                        last[src[1]] = i
            elif kind in ("backward", "autograd"):
                for _, src in event[1]:
                    if src[0] == VAL:
                        last[src[1]] = i
                for entry in event[2]:  # the forward values a fused stretch of it reads
                    if type(entry) is BackwardRun:
                        for slot in entry.reads:
                            last[slot] = i
            elif kind == "fused":
                for kind_, ref in event[2]:
                    if kind_ == VAL:
                        last[ref] = i
            elif kind in ("check", "host"):
                for src in event[2]:
                    if src[0] == VAL:
                        last[src[1]] = i
            elif kind in ("leaf", "several") and event[1 if kind == "leaf" else 2][0] == VAL:
                last[event[1 if kind == "leaf" else 2][1]] = i
        for slot in _output_slots(self.outputs):
            last[slot] = len(self.events)
        free = collections.defaultdict(list)
        for slot, i in last.items():
            free[i].append(slot)
        return dict(free)

    def fusion(self) -> str:
        """What fusion made of the plan, for ``explain()``."""
        if self._to_fuse is not None:
            return "planned at the first replay"
        if not self.runs:
            return "none (each operation is its own kernels)"
        backward = sum(len(r.programs) for e in self.events if e[0] in ("backward", "autograd") for r in e[2]
                       if type(r) is BackwardRun)
        fused = self.counts["op"] - sum(1 for e in self.events if e[0] == "op")
        state = (f"{self.kernels} compiled into one loop each" if self.kernels else
                 f"flat (compiled after {COMPILE_AFTER} replays where the backend can)")
        return (f"{fused} of {self.counts['op']} operations in {self.runs} forward runs and "
                f"{backward} backward programs; {state}")

    def fits(self, tensors: bool = True, undone: bool = False) -> bool:
        """Whether every tensor from outside still has the shape, dtype, device and flag
        the trace saw (a parameter moved: trace again; not checked without ``tensors``),
        and no module had a member replaced or an attribute set since (a layer replaced,
        ``.eval()``: the function may reach other tensors, or take another path), or
        every such change was undone since (``.eval()`` for an evaluation, then
        ``.train()``). With ``undone``, a change of modules that may still be undone
        (a flag's: :func:`leanpass.nn.module.reversible`) passes too."""
        if hooks.post_hook_changes[0] != self.post_hooks:
            return False
        if _MODULE_CHANGES[0] != self.modules:  # a change since the trace: unless undone (eval(), then train())
            if modules_restored(self.modules):
                self.modules = _MODULE_CHANGES[0]
            elif not (undone and modules_reversible(self.modules)):
                return False
        for members, items in self.member_lists:  # an item replaced in place: model.layers[0] = other
            if not unchanged(members, items):
                return False
        for t, post in self.hook_leaves:  # a hook added since on a leaf of a pass a check moved past (__init__)
            if hooks.hooked(t, post):
                return False
        for group, key, value in self.options:  # an optimizer's option the trace used as a number (lr * p.grad)
            if not _equal(dict.get(group, key, _NOT_KEYED), value):
                return False
        for state, items, owners in self.state_reads:  # an optimizer's state the call read: holding what it
            now = _state_items(state)  # held then (a momentum buffer reset by assignment: another Tensor)
            if (len(now) != len(items) or not all(map(_same_value, now, items))
                    or any(getattr(o, "state", None) is not state for o in owners)):
                return False
        if tensors:
            for t, shape, dtype, backend, rg in self.externals:
                data = t._data
                if data.dtype != dtype or tuple(data.shape) != shape or t._backend is not backend or t._rg != rg:
                    return False
        return True

    def replay(self, args: list):
        """The recorded call on ``args``' arrays: its result. An error before anything
        changed state (an operation's, a check's: one the eager call may have caught)
        is a :class:`_Retry`, after which the call runs eagerly; after, it propagates."""
        self.changed = False  # set by _replay at the first change of state
        try:
            return self._replay(args)
        except (_Stale, _Branch):
            raise
        except Exception as exc:
            if self.changed:
                raise
            raise _Retry(repr(exc)) from exc

    def _replay(self, args: list):
        self.replays += 1
        for read, written in self.guards:  # (a moved check would read a tensor before the call writes it)
            if _share_memory(*(args[ref] if kind == ARG else ref for kind, ref in (read, written))):
                raise _Retry("an argument shares memory with a tensor a moved check reads, or one the call writes "
                             "before the check's place")
        if self._to_fuse is not None:
            self._fuse()
        if self.replays == COMPILE_AFTER and self.runs:  # a plan replayed again: worth compiling its runs
            self.kernels = compile_runs(self.events)
        for kind_, ref in self.grads_read:  # a gradient set to a Tensor (create_graph) since: trace again
            if isinstance((args[ref] if kind_ == ARG else ref)._grad, Tensor):
                raise _Stale("a gradient the call reads holds a Tensor (backward(create_graph=True))")
        slots = [None] * self.slots
        inner = dict.fromkeys(self.leaf_grads) if self.leaf_grads else None  # (Plan._backward's)
        unreached = {}  # id -> the zeros such a .grad reads where no pass reached it yet (a result's: has_grad)
        backwards = {}
        keeps = self.keeps_backward
        free = self._free

        def get(src):
            kind, ref = src
            if kind == VAL:
                return slots[ref]
            if kind == ARG:
                return args[ref]._data
            return ref._data

        read_grads = False  # whether the replay has read a .grad (then clearing gradients is a change too)
        for i, event in enumerate(self.events):
            kind = event[0]
            if kind == "op":
                _, op, sources, recipe, needs, slot, shape, backend = event
                arrays = [slots[r] if k == VAL else args[r]._data if k == ARG else r._data for k, r in sources]  # get's
                if type(recipe) is _Recipe:
                    recipe = recipe.fill(get)
                if type(recipe) is tuple:
                    if needs is not None:
                        out, backward = op.fn(backend, *arrays, *recipe, needs=needs)
                    else:
                        out, backward = op.fn(backend, *arrays, *recipe)
                elif type(recipe) is dict:
                    out, backward = op.fn(backend, *arrays, **recipe)
                else:
                    out, backward = recipe(backend, arrays)
                if type(out) is not backend.array_type:
                    out = backend.as_array(out)
                if tuple(out.shape) != shape:
                    if self.changed:  # (a stale shape after a change of state cannot fall back)
                        raise RuntimeError(
                            f"lp.compile: a replay met {op} of shape {tuple(out.shape)} where the trace saw {shape}, "
                            "after it had changed state (a backward pass, a step): it cannot fall back to an eager "
                            "call; a shape that depends on values has no place in a compiled step"
                        )
                    raise _Stale(f"{op} gave shape {tuple(out.shape)}, the trace {shape}")
                slots[slot] = out
                if slot in keeps:
                    backwards[slot] = backward
                arrays = out = backward = None  # (held by the slots alone: dropped with them, as eager's values)
            elif kind == "fused":  # a run of element-wise operations: one program
                fn = event[1]
                if fn is None:  # its first replay: the program as Python
                    fn = event[4].flat(event[4].backend)
                    self.events[i] = ("fused", fn, *event[2:])
                arrays = [get(s) for s in event[2]]
                for slot in free[i]:  # (its inputs read last here: the program drops each after its use)
                    slots[slot] = None
                with event[4].backend.quiet():
                    for slot, out in zip(event[3], fn(arrays)):
                        slots[slot] = out
                arrays = out = None  # (a compiled kernel leaves its list as it was)
            elif kind == "several":  # a decomposition: its outputs, and in the graph the nodes eager's has
                self._several(event, slots, get, backwards)
            elif kind == "draw":  # a random draw: a new one each time, from the generator, as eagerly
                out = event[1](*event[2])
                slots[event[3]] = out if type(out) is event[4].array_type else event[4].as_array(out)
            elif kind == "const":  # a tensor made in the call: a new one each time, as eagerly
                slots[event[2]] = event[3].copy(event[1])
            elif kind == "check":
                try:
                    event[1](*[get(src) for src in event[2]])
                except Exception as exc:
                    if event[3] and not self.changed:  # (a path's check: another trace of the key may take it)
                        raise _Branch(repr(exc)) from exc
                    raise
            elif kind == "host":  # a number read on the host, which the call returns
                slots[event[3]] = event[1](event[4], get(event[2][0]))
            elif kind == "backward":
                self.changed = True
                self._backward(event, get, backwards, args, inner=inner)
            elif kind == "autograd":  # autograd.grad: its gradients are values of the call
                if self._backward(event, get, backwards, args, slots):  # (its leaves' hooks ran: a change of
                    self.changed = True  # state, whatever they do; a check failing after cannot try another path)
            elif kind == "leaf":  # a leaf made in the call on values it has (lp.func.grad's input)
                slots[event[2]] = get(event[1])
            elif kind == "leaf_grad":  # its .grad read: the passes' gradient so far (zeros before any, kept:
                g = inner[event[1]]  # a pass after adds to them, as eagerly)
                if g is None:
                    g = inner[event[1]] = event[3].zeros(event[4], event[5])
                    unreached[id(g)] = g  # (kept: its id is not another array's at the end)
                slots[event[2]] = g
            elif kind == "grad_read":  # t.grad read in the call: its array at this point
                read_grads = True  # (a zero_grad after it is no longer one an eager call runs again alike)
                _, (kind_, ref), slot, backend = event
                g = (args[ref] if kind_ == ARG else ref)._read_grad()
                if type(g) is not backend.array_type or (tuple(g.shape), g.dtype) != self.grad_meta[slot]:
                    what = "a gradient read as " + (repr(g) if type(g) is not backend.array_type else
                                                    str((tuple(g.shape), g.dtype)))
                    if self.changed:
                        raise RuntimeError(f"lp.compile: a replay met {what} where the trace read "
                                           f"{self.grad_meta[slot]}, after it had changed state: it cannot fall back "
                                           "to an eager call")
                    raise _Stale(what)
                slots[slot] = g
            elif kind == "action":
                _, method, a, kw, returns = event
                if read_grads or not getattr(method, "idempotent", False):  # (zero_grad: an eager call runs it
                    self.changed = True  # again alike, unless the call read a gradient before)
                out = method(*a, **kw)
                if returns is not None:  # a tensor the trace used (clip_grad_norm_'s norm): a value of the call
                    slot, shape, dtype, backend = returns
                    if (type(out) is not Tensor or out._backend is not backend or tuple(out._data.shape) != shape
                            or out._data.dtype != dtype):
                        raise RuntimeError(f"lp.compile: a replay met {method.__qualname__} returning {out!r} where "
                                           f"the trace saw a tensor of shape {shape} and dtype {dtype}, after it had "
                                           "changed state: it cannot fall back to an eager call")
                    slots[slot] = out._data
            elif kind == "inplace":
                if not event[7]:  # (a value of the call on memory of its own: an eager call makes it anew)
                    self.changed = True
                self._inplace(event, slots, get, args)
            else:  # "grad": .grad = None, or its own array given back (changed in place)
                _, (kind_, ref), own = event
                if own or read_grads:  # (.grad = None: an eager call sets it again alike)
                    self.changed = True
                t = args[ref] if kind_ == ARG else ref
                t._grad = t._backend.copy(t._grad) if own else None  # (the setter's copy, as eagerly)
                t._read_zeros = False
            for slot in free[i]:  # never a result's: those are read after the last event
                slots[slot] = None
        return self._result(self.outputs, slots, args, unreached=unreached)

    def _several(self, event, slots, get, backwards) -> None:
        _, op, src, params, out_slots, joint, shapes, backend = event
        x = get(src)
        outs, backward = op.fn(backend, x, *params)
        for slot, out, shape in zip(out_slots, outs, shapes):
            if tuple(out.shape) != shape:
                raise _Stale(f"{op} gave shape {tuple(out.shape)}, the trace {shape}")
            slots[slot] = out
        if joint is None:
            return
        slots[joint] = x
        keeps, n = self.keeps_backward, len(outs)
        if joint in keeps:
            backwards[joint] = lambda parts: backward(*parts.grads)
        for k, slot in enumerate(out_slots):
            if slot in keeps:
                backwards[slot] = _part_backward(k, n, x.dtype)

    def _inplace(self, event, slots, get, args):
        _, target, op, others, params, name, write = event[:7]

        def tensor(src):
            kind, ref = src
            if kind == EXT:
                return ref
            if kind == ARG:
                return args[ref]
            return leaf(get(src), self.slot_backend[ref])

        t = tensor(target)
        operands = [o[1] if o[0] is None else tensor(o) for o in others]
        with no_grad():  # as recorded: under no_grad, or with nothing that requires grad
            inplace(t, op, operands, *params, name=name, write=write)
        if target[0] == VAL:
            slots[target[1]] = t._data

    @staticmethod
    def _backward(event, get, backwards, args, slots=None, inner=None):
        """One backward pass: ``get(source)`` reads the replay's arrays. An autograd.grad
        (an ``autograd`` event) writes no ``.grad``: the gradients of its targets, copied, go
        to their ``slots``; it returns whether a leaf's gradient hook ran. ``inner``: the
        ``.grad`` of the leaves made in the call that the call reads, by slot (None until
        a pass reaches one; kept as ``_store`` keeps a tensor's)."""
        _, seeds, schedule, backend = event[:4]
        targets = event[4] if slots is not None else None
        # (a backward pass's values that retain their gradients, where the call reads them: kept, as a leaf's)
        retained = event[4] & inner.keys() if slots is None and inner is not None and event[4] else ()
        kept = []
        xp = backend.xp

        def leaf_tensor(kind, ref):
            return args[ref] if kind == ARG else ref if kind == EXT else (kind, ref)  # ("leaf", slot): made in the call

        found = {}
        wanted = {}  # a node's slot -> the targets it is (a tensor may come twice)
        if targets:
            for k, (kind, ref) in enumerate(targets):
                if kind == "node":
                    wanted.setdefault(ref, []).append(k)

        pending = {}
        for slot, src in seeds:
            g = backend.ones(*src[1]) if src[0] == "ones" else get(src)
            old = pending.get(slot)
            pending[slot] = g if old is None else old + g
        leaves = {}
        with backend.quiet():
            for entry in schedule:
                if type(entry) is BackwardRun:  # a stretch over fused nodes: one program
                    entry.run(pending, leaves, get, leaf_tensor)
                    continue
                slot, parents, fresh_op, exact = entry
                g = pending.pop(slot, None)
                if g is None:
                    continue
                if slot in wanted:
                    found.update((k, g) for k in wanted[slot])
                    if not any(parents):
                        continue  # nothing asked for lies below it
                elif slot in retained:  # (its gradient complete: eager's engine keeps it, copied at the pass's end)
                    kept.append((slot, g))
                if type(exact) is _Complex:
                    grads = exact.grads(xp, backwards[slot], g)
                    exact = exact.exact
                else:
                    grads = backwards[slot](g)  # kept: a second pass (retain_graph=True) runs it again
                for parent, pg in zip(parents, grads):
                    if pg is None or parent is None:
                        continue
                    kind, ref, shape, dtype = parent
                    fresh = fresh_op
                    if exact is not True:  # as eagerly: summed over broadcast axes, then cast; cast first
                        if exact is _CAST_FIRST and pg.dtype != dtype:  # where the rule casts (_cast_back's)
                            pg = gradient_as(xp, pg, dtype)
                            fresh = True
                        if tuple(pg.shape) != shape:
                            pg = _unbroadcast(xp, pg, shape)
                            fresh = True
                        if pg.dtype != dtype:
                            pg = gradient_as(xp, pg, dtype)
                            fresh = True
                    if kind == VAL:
                        old = pending.get(ref)
                        pending[ref] = pg if old is None else old + pg
                    else:
                        t = args[ref] if kind == ARG else ref if kind == EXT else (kind, ref)  # (leaf_tensor's)
                        old = leaves.get(t)
                        leaves[t] = (pg, fresh) if old is None else (old[0] + pg, True)
            hooked = False
            if hooks._grad_hooks_registered:  # each leaf's gradient of the pass through its hooks, as eagerly
                with no_grad():
                    for t, (g, _) in leaves.items():
                        if type(t) is not tuple and hooks.hooked(t, post=False):  # (looked up now: those there are)
                            leaves[t] = (_with_grad_hooks(t, g), False)  # (a hook may keep it: .grad is a copy)
                            hooked = True
        if targets is not None:
            for k, key in enumerate(targets):
                if key[0] != "node" and leaf_tensor(*key) in leaves:
                    found[k] = leaves[leaf_tensor(*key)][0]
            for k, slot in event[5]:
                slots[slot] = backend.copy(found[k])
            return hooked
        with grad_lock:
            for slot, g in kept:  # (first, as eager's engine stores them)
                _keep(inner, slot, g, False, backend)
            for t, (g, fresh) in leaves.items():
                if type(t) is not tuple:  # (a leaf made in the call, ("leaf", slot): no result is it)
                    _store(t, g, fresh)
                elif inner is not None and t[1] in inner:  # (one whose .grad the call reads)
                    _keep(inner, t[1], g, fresh, backend)
        if hooks._hooks_registered:  # the leaves' post-accumulate hooks (DDP's averaging), as eagerly
            hooks._run_post_hooks(leaves)

    def _result(self, spec, slots, args, made=None, unreached=()):
        kind = spec[0]
        if kind == "T":
            src, backend = spec[1], spec[2]
            k, ref = src
            if k == EXT and len(spec) == 3:
                return ref
            if k == ARG and len(spec) == 3:
                return args[ref]
            if made is not None and id(spec) in made:  # the same tensor again in the result (return y, y)
                return made[id(spec)]
            if len(spec) == 4:  # another tensor on an argument's or a state tensor's array (s.detach()):
                owner = args[ref] if k == ARG else ref  # its changes in place count with the owner's, as eagerly
                t = share_version(leaf(owner._data, backend), owner)
            else:
                t = leaf(slots[ref], backend)
                if len(spec) == 5:  # a value that keeps its gradient (retain_grad, a leaf made in the call)
                    t._grad = g = slots[spec[4]]
                    t._read_zeros = id(g) in unreached  # (zeros no pass wrote: no gradient, for has_grad)
            if made is not None:
                made[id(spec)] = t
            return t
        if kind == "py":
            return spec[1]
        if kind == "host":
            return slots[spec[1]]
        made = {} if made is None else made
        if kind is dict or kind is collections.OrderedDict:
            return kind((key, self._result(v, slots, args, made, unreached)) for key, v in spec[1].items())
        items = [self._result(v, slots, args, made, unreached) for v in spec[1]]
        return kind._make(items) if hasattr(kind, "_make") else kind(items)  # a named tuple takes its fields


def _keep(inner: dict, slot: int, g, fresh: bool, backend) -> None:
    """Add a backward pass's gradient ``g`` into ``inner[slot]``, the ``.grad`` of a
    value of the call that the call reads (a leaf made in it, a value that retains its
    gradient; None before any pass), as the engine's ``_store`` adds into a tensor's:
    the first one copied unless ``fresh`` (the engine's own array)."""
    old = inner[slot]
    g = old + g if old is not None else g if fresh else backend.copy(g)
    inner[slot] = g if type(g) is backend.array_type else backend.as_array(g)
