"""Element-wise fusion for ``lp.compile``: runs of element-wise operations in a
recorded call, and the backward rules of those operations, replayed as one program.

How an operation computes is read from the operation itself, not from a table: its
forward runs once, at plan time, on :class:`Sym` values through a symbolic backend
(:class:`SymBackend`, whose ``xp`` builds expressions instead of arrays), and so does
the backward rule it returns. An operation whose code does anything a symbol cannot
do (reshape, reduce, index, read a value in Python, call a library kernel) raises
:class:`NotFusible` on the way and stays as it was. What is left is a graph of
scalar expressions per run, which a :class:`Program` runs:

- **flat**: generated Python that calls the backend's namespace once per
  expression, with no Tensor, closure, graph or promotion check in between; the
  same kernels in the same order as eagerly, so the results are the same bit for
  bit (on ``cuda``, where the eager ``tanh`` and ``sigmoid`` backward rules are
  CuPy kernels of their own, up to that compiler's rounding);
- **fused**: one loop over the elements that computes every expression of the run
  in registers, compiled by the backend (Numba on ``cpu``, the ``fuse`` extra; a
  generated ``cupy.ElementwiseKernel`` on ``cuda``): one pass over memory for the
  whole run; the rounding may differ from eager's by a few ulp (a library's ``tanh``
  against NumPy's). A run is compiled after its plan has
  been replayed :data:`COMPILE_AFTER` times (compiling costs about a second, once;
  Numba and CuPy cache it on disk), and runs flat until then. Numba's loops call
  ``tanh``, ``exp``... one element at a time (``fused.scalar_calls``): there a run of
  more than :data:`SMALL` elements that calls them is not formed, the library's
  vectorised kernels being faster; a generated CUDA kernel (``cuda``) has no such
  limit.

A run holds operations of one shape and one real floating dtype, whose inputs all
have that shape: no broadcasting, so no gradient is summed back to a smaller shape.
A backward run is a stretch of the engine's schedule whose nodes all belong to
fused forward runs; the gradients that enter it, and those it hands on to nodes
and leaves after it, are the schedule's own, added in the engine's order.
"""

from __future__ import annotations

import math
import os

from .backends._base import INFIX, NO_FUSED, Numbers

__all__ = ["NotFusible", "Sym", "SymBackend", "Program", "symbolic"]


class NotFusible(Exception):
    """An operation's code did something a symbol cannot stand for."""


_ARITHMETIC = ("add", "sub", "mul", "truediv", "pow")  # (INFIX spells each, and the rest)
_COMPARISON = ("lt", "le", "gt", "ge", "eq", "ne")
_LOGICAL = ("and_", "or_", "xor")
_FLOAT_FUNCTIONS = frozenset({
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "exp", "expm1", "floor",
    "log", "log1p", "log2", "log10", "negative", "positive", "reciprocal", "round", "sign", "sin", "sinh",
    "sqrt", "square", "tan", "tanh", "trunc",
})
_FLOAT_BINARY = frozenset({"atan2", "copysign", "hypot", "logaddexp", "maximum", "minimum"})
_PREDICATES = frozenset({"isnan", "isinf", "isfinite", "signbit"})
SPECIAL = frozenset({"erf", "erfc"})  # the backend's special functions a run may call
_FLAT = {"neg": "-{0}", "not": "xp.logical_not({0})", "where": "xp.where({0}, {1}, {2})"}  # a flat program's spellings
# functions a compiled loop calls one element at a time (a library's scalar routine): on
# long arrays the library's own vectorised kernels (NumPy's SIMD tanh, exp) beat such a loop
_SCALAR_CALLS = frozenset({
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cos", "cosh", "erf", "erfc", "exp", "expm1",
    "hypot", "log", "log1p", "log2", "log10", "logaddexp", "pow", "sin", "sinh", "tan", "tanh",
})
SMALL = 512  # elements: below, a run is worth compiling whatever it calls (the calls cost more than the work)


class Sym:
    """One value of a run, as an expression: ``fn`` applied to ``args`` (other
    :class:`Sym`, or Python numbers), of ``dtype`` and the run's ``shape``; ``fn`` is
    ``"in"`` for an input (``args``: its number in the run)."""

    __slots__ = ("fn", "args", "dtype", "shape")
    made = [0]  # how many were made: an operation's size
    kinds: set = set()  # the functions made since it was last cleared

    def __init__(self, fn, args, dtype, shape):
        self.fn, self.args, self.dtype, self.shape = fn, args, dtype, shape
        Sym.made[0] += 1
        Sym.kinds.add(fn)

    @property
    def ndim(self):
        return len(self.shape)

    def __bool__(self):
        raise NotFusible("a value read in Python")

    __float__ = __int__ = __index__ = __len__ = __iter__ = __bool__

    def __getitem__(self, key):
        raise NotFusible("indexing")

    def __repr__(self):
        return f"Sym({self.fn})"


def _operand(value, dtype):
    """``value`` as an operand beside a Sym of ``dtype``: a Sym of that dtype, or a real
    Python number (which keeps the Sym's dtype, as a weak scalar does)."""
    if isinstance(value, Sym):
        if value.dtype != dtype:
            raise NotFusible(f"operands of dtypes {value.dtype} and {dtype}")
        return value
    if type(value) in (int, float, bool):
        return value
    raise NotFusible(f"an operand of type {type(value).__name__}")


def _arith(name):
    def method(self, other):
        _floating(self)
        return Sym(name, (self, _operand(other, self.dtype)), self.dtype, self.shape)

    def reflected(self, other):
        _floating(self)
        return Sym(name, (_operand(other, self.dtype), self), self.dtype, self.shape)

    return method, reflected


def _compare(name):
    def method(self, other):
        return Sym(name, (self, _operand(other, self.dtype)), _BOOL[0], self.shape)

    return method


def _logical(name):
    def method(self, other):
        if self.dtype != _BOOL[0] or (isinstance(other, Sym) and other.dtype != _BOOL[0]):
            raise NotFusible(f"{name} of non-boolean values")
        return Sym(name, (self, _operand(other, self.dtype)), self.dtype, self.shape)

    return method, (lambda self, other: method(self, other))


_BOOL = [None]  # the run's boolean dtype (the backend's), set by SymBackend


def _floating(x):
    if x.dtype == _BOOL[0]:
        raise NotFusible("arithmetic on booleans")


for _name in _ARITHMETIC:
    _m, _r = _arith(_name)
    setattr(Sym, f"__{_name}__", _m)
    setattr(Sym, f"__r{_name}__", _r)
for _name in _COMPARISON:
    setattr(Sym, f"__{_name}__", _compare(_name))
for _name in _LOGICAL:
    _m, _r = _logical(_name)
    setattr(Sym, f"__{_name.rstrip('_')}__", _m)
    setattr(Sym, f"__r{_name.rstrip('_')}__", _r)
Sym.__neg__ = lambda self: (_floating(self), Sym("neg", (self,), self.dtype, self.shape))[1]
Sym.__pos__ = lambda self: self
Sym.__invert__ = lambda self: SymNamespace.logical_not(None, self)
Sym.__hash__ = object.__hash__
del _name, _m, _r


class SymNamespace:
    """The array namespace of :class:`SymBackend`: the element-wise functions a run
    may hold build expressions; any other name raises :class:`NotFusible`."""

    def __init__(self, xp):
        self._xp = xp
        self.bool = xp.bool

    def __getattr__(self, name):
        if name in _FLOAT_FUNCTIONS:
            def function(x, /):
                x = _sym(x, name)
                _floating(x)
                return Sym(name, (x,), x.dtype, x.shape)
        elif name in _FLOAT_BINARY:
            def function(a, b, /):
                first = a if isinstance(a, Sym) else _sym(b, name)
                _floating(first)
                return Sym(name, (_operand(a, first.dtype), _operand(b, first.dtype)), first.dtype, first.shape)
        elif name in _PREDICATES:
            def function(x, /):
                x = _sym(x, name)
                return Sym(name, (x,), _BOOL[0], x.shape)
        else:
            raise NotFusible(f"xp.{name}")
        return function

    def isdtype(self, dtype, kind):
        return self._xp.isdtype(dtype, kind)

    def where(self, condition, a, b, /):
        condition = _sym(condition, "where")
        if condition.dtype != _BOOL[0]:
            raise NotFusible("where with a non-boolean condition")
        first = a if isinstance(a, Sym) else b
        first = _sym(first, "where")
        return Sym("where", (condition, _operand(a, first.dtype), _operand(b, first.dtype)), first.dtype,
                   condition.shape)

    def zeros_like(self, x, /, *, dtype=None, device=None):
        return self._full_like(x, 0, dtype)

    def ones_like(self, x, /, *, dtype=None, device=None):
        return self._full_like(x, 1, dtype)

    def _full_like(self, x, value, dtype):
        x = _sym(x, "full_like")
        if dtype is not None and dtype != x.dtype:
            raise NotFusible("a constant of another dtype")
        return Sym("full", (value,), x.dtype, x.shape)

    def astype(self, x, dtype, /, *, copy=True, device=None):
        x = _sym(x, "astype")
        if dtype != x.dtype:
            raise NotFusible("a cast")
        return x

    def logical_not(self, x, /):
        x = _sym(x, "logical_not")
        if x.dtype != _BOOL[0]:
            raise NotFusible("logical_not of a non-boolean value")
        return Sym("not", (x,), x.dtype, x.shape)

    def logical_and(self, a, b, /):
        return _sym(a, "logical_and") & b

    def logical_or(self, a, b, /):
        return _sym(a, "logical_or") | b


def _sym(x, name):
    if not isinstance(x, Sym):
        raise NotFusible(f"{name} of a {type(x).__name__}")
    return x


class SymBackend:
    """The backend an operation's forward runs on at plan time: ``xp`` is
    :class:`SymNamespace`; ``quietly`` just calls; no fused kernels; the real
    backend's ``syncs_cheaply`` (operations choose a path by it). Anything else an
    operation asks of it raises :class:`NotFusible`."""

    guard = None
    fused = NO_FUSED
    array_type = Sym

    def __init__(self, backend):
        self.xp = SymNamespace(backend.xp)
        # a Python number stays itself, a constant of the expression (one backend's dtypes per instance: a
        # strict dtype warns when it meets NumPy's in a key)
        self.numbers = Numbers(lambda s, dtype: None)
        self.syncs_cheaply = backend.syncs_cheaply
        _BOOL[0] = backend.xp.bool

    @staticmethod
    def quietly(fn, *args):
        return fn(*args)

    @staticmethod
    def is_array(value):
        return isinstance(value, Sym)

    @property
    def special(self):
        return _SymSpecial()

    def __getattr__(self, name):
        raise NotFusible(f"backend.{name}")


class _SymSpecial:
    """``SymBackend.special``: the special functions of :data:`SPECIAL` build expressions."""

    def __getattr__(self, name):
        if name not in SPECIAL:
            raise NotFusible(f"special.{name}")

        def function(x, /):
            x = _sym(x, name)
            _floating(x)
            return Sym(name, (x,), x.dtype, x.shape)

        return function


def symbolic(sb, op, inputs, recipe, needs):
    """``op``'s forward on the Syms ``inputs``: ``(out, backward)``, or ``NotFusible``."""
    try:
        if type(recipe) is tuple:
            out, backward = (op.fn(sb, *inputs, *recipe, needs=needs) if needs is not None
                             else op.fn(sb, *inputs, *recipe))
        elif type(recipe) is dict:
            out, backward = op.fn(sb, *inputs, **recipe)
        elif callable(recipe):  # an operation with plain values among its arguments (a Python number)
            out, backward = recipe(sb, inputs)
        else:
            raise NotFusible("parameters a replay fills in")
    except NotFusible:
        raise
    except Exception as exc:  # noqa: BLE001 - what a symbol cannot do surfaces as any error
        raise NotFusible(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(out, Sym):
        raise NotFusible("a result that is not an expression")
    return out, backward


# ---- programs -----------------------------------------------------------------------------


class Program:
    """Expressions over numbered inputs, with the ones wanted as outputs: ``lines``
    (``(name, fn, args)`` in an order where each comes after its arguments, an
    argument a name, an ``("in", k)`` input or a Python number) and ``outputs``
    (names, or inputs passed through). ``flat(backend)`` gives the function that runs it
    on arrays, one call of ``xp`` per line."""

    def __init__(self, n_inputs, dtype, shape):
        self.n_inputs, self.dtype, self.shape = n_inputs, dtype, shape
        self.backend = None  # the backend whose arrays it runs on (set by who makes it)
        self._lines: list = []
        self._outputs: list = []
        self.later = None  # (forward run, its slots wanted): lines made when first asked for
        self._names: dict = {}  # id(Sym) -> its reference
        self._keep: list = []  # the Syms the ids refer to

    @property
    def lines(self) -> list:
        self._made()
        return self._lines

    @property
    def outputs(self) -> list:
        self._made()
        return self._outputs

    @outputs.setter
    def outputs(self, refs):
        self._outputs = refs

    def _made(self):
        """A forward run's lines, made now: its wanted slots' expressions from its inputs."""
        if self.later is not None:
            run, slots = self.later
            self.later = None
            inputs = {id(sym): k for k, sym in enumerate(run.inputs.values())}
            self._outputs = [self.ref(run.syms[slot], lambda s: inputs.get(id(s))) for slot in slots]

    def ref(self, sym, resolve):
        """The reference of ``sym`` (a line made for it and its arguments where new);
        ``resolve(sym)`` gives the input number of a Sym the program reads, or None
        for one it computes from its arguments."""
        if not isinstance(sym, Sym):
            return sym
        stack = [(sym, False)]
        while stack:  # iterative: a long chain is deeper than Python's recursion allows
            s, ready = stack.pop()
            if id(s) in self._names:
                continue
            if not ready:
                k = resolve(s)
                if k is not None:
                    self._names[id(s)] = ("in", k)
                    self._keep.append(s)
                    continue
                if s.fn == "in":
                    raise NotFusible("an input no run provides")
                stack.append((s, True))
                if s.fn != "full":
                    stack.extend((a, False) for a in s.args if isinstance(a, Sym) and id(a) not in self._names)
                continue
            name = f"v{len(self._lines)}"
            refs = s.args if s.fn == "full" else tuple(self._names[id(a)] if isinstance(a, Sym) else a
                                                       for a in s.args)
            self._lines.append((name, s.fn, refs))
            self._names[id(s)] = name
            self._keep.append(s)
        return self._names[id(sym)]

    def flat(self, backend):
        """The program as a Python function on ``backend``'s library: given a list of its
        input arrays, which it empties (so that an input nobody else holds is dropped
        after its last use, as eager code drops its temporaries), it gives the tuple of
        its outputs. The fused runs' kernels take their list alike."""
        constants = {}

        def arg(a):
            if isinstance(a, tuple):
                return f"i{a[1]}"
            if isinstance(a, str):
                return a
            name = f"c{len(constants)}"
            constants[name] = a
            return name

        template = "i0" if self.n_inputs else None  # (the array a constant's line makes one like)
        used = [([template] if template else []) if fn == "full" else [arg(x) for x in args
                                                                         if isinstance(x, (str, tuple))]
                for _, fn, args in self.lines]
        last = {x: i for i, names in enumerate(used) for x in names}  # each value's last line, inputs' too:
        outputs = {arg(o) for o in self.outputs if isinstance(o, (str, tuple))}  # dropped after it (eager's
        body = []  # temporaries die as they go)
        for i, (name, fn, args) in enumerate(self.lines):
            a = [arg(x) for x in args] if fn != "full" else []
            if fn in INFIX:
                expr = f"{a[0]} {INFIX[fn]} {a[1]}"
            elif fn in _FLAT:
                expr = _FLAT[fn].format(*a)
            elif fn == "full":
                expr = f"xp.{'zeros' if args[0] == 0 else 'ones'}_like({template})"
            elif fn in SPECIAL:
                expr = f"special.{fn}({a[0]})"
            else:
                expr = f"xp.{fn}({', '.join(a)})"
            body.append(f"    {name} = {expr}")
            done = sorted({x for x in used[i] if last[x] == i and x not in outputs})
            if done:
                body.append(f"    del {', '.join(done)}")
        outs = ", ".join(arg(o) for o in self.outputs)
        inputs = "".join(f"i{k}, " for k in range(self.n_inputs))
        source = ("def program(a):\n"  # (the list of inputs, emptied: an input no one else holds is dropped
                  + (f"    {inputs}= a\n    a.clear()\n" if inputs else "")  # after its last line)
                  + "\n".join(body) + f"\n    return ({outs}{',' if len(self.outputs) == 1 else ''})\n")
        namespace = {"xp": backend.xp, **constants}
        if any(fn in SPECIAL for _, fn, _ in self.lines):
            namespace["special"] = backend.special
        exec(compile(source, f"<lp.compile fused program, {len(self.lines)} lines>", "exec"), namespace)  # noqa: S102
        program = namespace["program"]
        program.source = source
        return program


COMPILE_AFTER = 2  # replays of a plan before its runs are compiled (compiling costs about a second)


def compile_runs(events) -> int:
    """The fused runs among ``events`` (in place) and the backward stretches compiled
    by their backend's ``fused.elementwise``, where it has one: the number compiled."""
    done = 0
    for i, event in enumerate(events):
        if event[0] == "fused":
            compiler = event[4].backend.fused.elementwise
            kernel = compiler(event[4]) if compiler is not None else None
            if kernel is not None:
                events[i] = ("fused", kernel, *event[2:])
                done += 1
        elif event[0] in ("backward", "autograd"):
            for entry in event[2]:
                compiler = entry.backend.fused.elementwise if type(entry) is BackwardRun else None
                if compiler is not None:
                    done += entry.compile(compiler)
    return done


def fusion_enabled() -> bool:
    """Whether ``LEANPASS_FUSE`` leaves fusion on (it is unless ``0``)."""
    return os.environ.get("LEANPASS_FUSE", "1") != "0"


# ---- a recorded call's runs ---------------------------------------------------------------

ARG, VAL, EXT = 0, 1, 2  # where an array comes from: an argument, an event's output, a tensor from outside


class _Forward:
    """A forward run being gathered: consecutive operations of one shape, dtype and
    backend; ``syms`` the Sym of each slot it computes, ``inputs`` the sources it reads
    (each a Sym ``"in"``), ``backward`` each slot's symbolic backward rule."""

    def __init__(self, shape, dtype, backend, start):
        self.key = (shape, dtype, backend)
        self.shape, self.dtype, self.backend = shape, dtype, backend
        self.start = self.stop = start
        self.size = 0  # the expressions its forward is made of
        self.kinds: set = set()  # the functions its forward and backward call
        self.syms: dict = {}  # slot -> Sym
        self.inputs: dict = {}  # source -> Sym("in")
        self.backward: dict = {}  # slot -> its symbolic backward rule
        self.slot_of: dict = {}  # id(Sym) -> slot
        self.source_of: dict = {}  # id(Sym("in")) -> source

    def reads(self, slot):
        """The sources of the forward values (this run's slots and inputs) that the
        backward rule of ``slot`` reads."""
        grads = self.backward[slot](Sym("in", (-1,), self.dtype, self.shape))
        found, seen, stack = set(), set(), [g for g in grads if g is not None]
        while stack:
            sym = stack.pop()
            if id(sym) in seen:
                continue
            seen.add(id(sym))
            src = self.source_of.get(id(sym))
            slot = self.slot_of.get(id(sym))
            if slot is not None:
                found.add((VAL, slot))
            elif src is not None:
                found.add(src)
            elif sym.fn != "full":
                stack.extend(a for a in sym.args if isinstance(a, Sym))
        return found

    def operands(self, sources, meta):
        """The Syms of ``sources`` (new inputs not yet kept: see :meth:`add`)."""
        syms, new = [], {}
        for src in sources:
            known = self.syms.get(src[1]) if src[0] == VAL else None
            if known is None:
                known = self.inputs.get(src)
            if known is None:
                known = new.get(src)
            if known is None:
                if meta(src) != (self.shape, self.dtype):
                    raise NotFusible("an input of another shape or dtype (broadcasting)")
                known = new[src] = Sym("in", (len(self.inputs) + len(new),), self.dtype, self.shape)
            syms.append(known)
        return syms, new

    def add(self, index, slot, out, rule, new):
        """The operation of event ``index`` joins: its output ``out`` (slot ``slot``),
        its symbolic backward ``rule``, the ``new`` inputs it reads."""
        for src, sym in new.items():
            self.inputs[src] = sym
            self.source_of[id(sym)] = src
        self.syms[slot] = out
        self.slot_of[id(out)] = slot
        self.backward[slot] = rule
        self.stop = index + 1


def _reads(event):
    """The sources an event reads (other than a backward pass's nodes)."""
    kind = event[0]
    if kind == "op":
        recipe = event[3]
        arrays = tuple(src for _, src in recipe.arrays) if hasattr(recipe, "arrays") else ()
        return (*event[2], *arrays)
    if kind == "inplace":
        return (event[1], *(o for o in event[3] if o[0] is not None))
    if kind in ("check", "host"):
        return event[2]
    if kind == "several":
        return (event[2],)
    if kind in ("backward", "autograd"):
        return tuple(src for _, src in event[1] if src[0] != "ones")
    if kind == "fused":
        return event[2]
    if kind == "leaf":  # (a leaf made on a value: lp.func.grad's input)
        return (event[1],)
    return ()


def fuse(events, meta, result_slots, min_length=2):
    """``events`` with each run of at least ``min_length`` fusible operations replaced by
    one ``("fused", program, sources, slots, run)`` event, and each stretch of a backward
    schedule over their nodes by one :class:`BackwardRun`; and the number of runs.
    ``meta(source) -> (shape, dtype)``; ``result_slots`` the slots the call returns."""
    backends: dict = {}  # backend -> its SymBackend
    floating: dict = {}  # (backend, dtype) -> whether a run may hold it
    runs: list = []
    current = None
    # the values autograd.grad returns the gradient of: operations of their own (a fused
    # stretch of a backward pass hands on gradients, it does not show them)
    targets = {ref for event in events if event[0] == "autograd" for kind, ref in event[4] if kind == "node"}
    read = {event[1] for event in events if event[0] == "leaf_grad"}  # (retain_grad's that the call reads too)
    targets.update(slot for event in events if event[0] == "backward" for slot in event[4] if slot in read)

    def close():  # a run of one operation is worth it where that operation is several expressions (GELU)
        if current is None or (len(current.syms) < min_length and current.size < min_length):
            return
        if (current.backend.fused.scalar_calls and math.prod(current.shape) > SMALL
                and current.kinds & _SCALAR_CALLS):
            return  # a long run of tanh, exp...: the library's kernels, one by one, are faster
        runs.append(current)

    for i, event in enumerate(events):
        if event[0] != "op":
            close()
            current = None
            continue
        _, op, sources, recipe, needs, slot, shape, backend = event
        if slot in targets:
            close()
            current = None
            continue
        dtype = meta((VAL, slot))[1]
        real = floating.get((backend, dtype))
        if real is None:
            real = floating[backend, dtype] = backend.xp.isdtype(dtype, "real floating")
        if not real or not op.differentiable:
            close()
            current = None
            continue
        if current is not None and current.key != (shape, dtype, backend):
            close()
            current = None
        fresh = current is None
        if fresh:
            current = _Forward(shape, dtype, backend, i)
        sb = backends.get(backend)
        if sb is None:
            sb = backends[backend] = SymBackend(backend)
        try:
            syms, new = current.operands(sources, meta)
            before = Sym.made[0]
            Sym.kinds.clear()
            out, rule = symbolic(sb, op, syms, recipe, needs)
            size = Sym.made[0] - before
            if out.dtype != dtype or out.shape != shape:
                raise NotFusible("a result of another dtype or shape than eager's")
            # its backward must be symbolic too: it has no other once the forward is fused
            grads = rule(Sym("in", (-1,), dtype, shape)) if rule is not None else ()
            if any(g is not None and (not isinstance(g, Sym) or g.dtype != dtype) for g in grads):
                raise NotFusible("a gradient that is not an expression of the run's dtype")
        except NotFusible:
            if not fresh:
                close()
            current = None
            continue
        current.add(i, slot, out, rule, new)
        current.size += size
        current.kinds |= Sym.kinds  # the forward's and the backward's functions
    close()
    if not runs:
        return events, 0
    return _rewrite(events, runs, meta, result_slots), len(runs)


def _rewrite(events, runs, meta, result_slots):
    by_slot = {slot: run for run in runs for slot in run.syms}
    # the forward values each node's backward reads: its run must keep them (the rest is recomputed)
    needed_by_backward = {id(run): set() for run in runs}
    backward_runs = []
    new_events = []
    schedules = {}
    # changes of state in place, after which a run's inputs may hold other values: a backward
    # pass too, whose post-accumulate hooks may step the parameters (an optimizer in backward)
    changes = [i for i, event in enumerate(events) if event[0] in ("inplace", "action", "backward")]
    for index, event in enumerate(events):
        if event[0] in ("backward", "autograd"):
            def unchanged(run, index=index):  # nothing changed in place between the run and this backward pass
                return not any(run.stop <= i < index for i in changes)

            schedules[index] = _split_schedule(event[2], by_slot, unchanged)
            for item in schedules[index]:
                if isinstance(item, BackwardRun):
                    backward_runs.append(item)
                    for slot in item.reads:
                        if slot in by_slot:
                            needed_by_backward[id(by_slot[slot])].add(slot)
    last_read = {}  # slot -> the last event that reads it
    for index, event in enumerate(events):
        for src in _reads(event):
            if src[0] == VAL:
                last_read[src[1]] = index
    results = set(result_slots)
    starts = {run.start: run for run in runs}
    index = 0
    while index < len(events):
        run = starts.get(index)
        if run is None:
            event = events[index]
            if index in schedules:
                event = (*event[:2], tuple(schedules[index]), *event[3:])
            new_events.append(event)
            index += 1
            continue
        backward = needed_by_backward[id(run)]
        slots = [slot for slot in run.syms
                 if last_read.get(slot, -1) >= run.stop or slot in backward or slot in results]
        if not slots:  # nothing reads what it computes (nor does its backward): nothing to run
            index = run.stop
            continue
        program = Program(len(run.inputs), run.dtype, run.shape)
        program.backend = run.backend
        program.later = (run, slots)  # its lines are made at its first replay (the trace's cost stays low)
        new_events.append(("fused", None, tuple(run.inputs), tuple(slots), program))
        index = run.stop
    return new_events


def _split_schedule(schedule, by_slot, unchanged):
    """The schedule with each stretch of entries over nodes of fused runs (one shape,
    dtype and backend) as one :class:`BackwardRun` (which computes the forward values
    again where ``unchanged(run)`` for each of its runs)."""
    out, stretch, key = [], [], None
    for entry in schedule:
        run = by_slot.get(entry[0])
        if run is not None and (key is None or run.key == key) and all(
                p is None or (p[2], p[3]) == (run.shape, run.dtype) for p in entry[1]):
            stretch.append((entry, run))
            key = run.key
            continue
        if stretch:
            out.append(BackwardRun(stretch, all(unchanged(run) for _, run in stretch)))
            stretch, key = [], None
        if run is not None and all(p is None or (p[2], p[3]) == (run.shape, run.dtype) for p in entry[1]):
            stretch.append((entry, run))
            key = run.key
        else:
            out.append(entry)
    if stretch:
        out.append(BackwardRun(stretch, all(unchanged(run) for _, run in stretch)))
    return out


def _fresh(refs, distinct: bool) -> tuple:
    """Which outputs of a program are its own new arrays: not an input handed on (``+``'s
    gradient); in a flat program, only the first output of a name (two leaves given one
    array would share it), in a compiled one each (each output is an array of its own)."""
    seen, fresh = set(), []
    for ref in refs:
        fresh.append(not isinstance(ref, tuple) and (distinct or ref not in seen))
        seen.add(ref)
    return tuple(fresh)


class BackwardRun:
    """A stretch of a backward schedule over nodes of fused runs, replayed as one
    program per pattern of gradients present when it starts (which nodes and leaves
    have gradients already: the same at every replay of a call, in practice).

    Where the backend compiles runs into one loop and nothing can have changed the
    forward runs' inputs since they ran (no in-place change, no step in between:
    ``recompute``), the forward values are computed again inside the loop from those
    inputs (cheaper than a pass over memory each); otherwise the rules read the values
    the forward runs computed, as eager rules read what they saved."""

    def __init__(self, stretch, recompute):
        self.entries = [(entry[0], entry[1], run) for entry, run in stretch]
        run = stretch[0][1]
        self.shape, self.dtype, self.backend = run.shape, run.dtype, run.backend
        self.own = frozenset(slot for slot, _, _ in self.entries)
        self.outside = []  # the nodes after the stretch it hands gradients to
        self.leaves = []  # the leaves it hands gradients to: (kind, ref), each once (by identity)
        self.leaf_of = {}  # _identity(kind, ref) -> its number in leaves
        for _, parents, _ in self.entries:
            for p in parents:
                if p is None:
                    continue
                if p[0] == VAL and p[1] not in self.own and p[1] not in self.outside:
                    self.outside.append(p[1])
                elif p[0] != VAL and _identity(p[0], p[1]) not in self.leaf_of:
                    self.leaf_of[_identity(p[0], p[1])] = len(self.leaves)
                    self.leaves.append((p[0], p[1]))
        self.programs: dict = {}
        self.compiler = None  # the backend's, once the plan is compiled
        self.recompute = recompute and self.backend.fused.elementwise is not None
        self.values = {}  # id(Sym) of a forward value the rules may read -> its source
        runs = {id(run): run for _, _, run in self.entries}.values()
        for run in runs:
            self.values.update(run.source_of)
            if not self.recompute:
                self.values.update({id(sym): (VAL, slot) for slot, sym in run.syms.items()})
        # the slots the rules may read: the runs' inputs (a value computed again is computed
        # from them), or the values they read
        if self.recompute:
            self.reads = {src[1] for run in runs for src in run.inputs if src[0] == VAL}
        else:
            self.reads = {src[1] for slot, _, run in self.entries for src in run.reads(slot) if src[0] == VAL}

    def _build(self, signature):
        """The program for ``signature``: the nodes of its own, the nodes after it and the
        leaves (by number) that have gradients when it starts."""
        program = Program(0, self.dtype, self.shape)
        program.backend = self.backend
        sources = []  # ("own", slot) | ("pending", slot) | ("leaf", number) | ("value", source)
        memo: dict = {}  # id(Sym) -> input number
        alive = []  # the Syms of memo: an id is only theirs while they live (a rule may drop its g)

        def new_input(what):
            sym = Sym("in", (len(sources),), self.dtype, self.shape)
            sources.append(what)
            memo[id(sym)] = len(sources) - 1
            alive.append(sym)
            return sym

        def resolve(sym):
            k = memo.get(id(sym))
            if k is not None:
                return k
            src = self.values.get(id(sym))
            if src is None:
                return None
            new_input(("value", src))
            memo[id(sym)] = len(sources) - 1
            return memo[id(sym)]

        grads = {slot: new_input(("own", slot)) for slot, _, _ in self.entries if slot in signature[0]}
        outside = {slot: new_input(("pending", slot)) for slot in self.outside if slot in signature[1]}
        leaves = {k: new_input(("leaf", k)) for k in signature[2]}
        touched_outside, touched_leaves = [], []
        for slot, parents, run in self.entries:
            g = grads.pop(slot, None)
            if g is None:
                continue
            rule = run.backward[slot]
            for parent, pg in zip(parents, rule(g)):
                if pg is None or parent is None:
                    continue
                if parent[0] == VAL and parent[1] in self.own:
                    old = grads.get(parent[1])
                    grads[parent[1]] = pg if old is None else old + pg
                elif parent[0] == VAL:
                    old = outside.get(parent[1])
                    outside[parent[1]] = pg if old is None else old + pg
                    if parent[1] not in touched_outside:
                        touched_outside.append(parent[1])
                else:
                    k = self.leaf_of[_identity(parent[0], parent[1])]
                    old = leaves.get(k)
                    leaves[k] = pg if old is None else old + pg
                    if k not in touched_leaves:
                        touched_leaves.append(k)
        outputs = [("pending", slot) for slot in touched_outside] + [("leaf", k) for k in touched_leaves]
        exprs = [outside[slot] for slot in touched_outside] + [leaves[k] for k in touched_leaves]
        program.outputs = [program.ref(e, resolve) for e in exprs]
        program.n_inputs = len(sources)  # the forward values read are among them
        fn, fresh = program.flat(self.backend), _fresh(program.outputs, distinct=False)
        kernel = self.compiler(program) if self.compiler is not None else None
        if kernel is not None:
            fn, fresh = kernel, _fresh(program.outputs, distinct=True)
        built = (fn, tuple(sources), tuple(outputs), fresh, program)
        self.programs[signature] = built
        return built

    def compile(self, compiler) -> int:
        """Its programs (and those it builds from now on) through ``compiler`` (the
        backend's ``fused.elementwise``): the number compiled."""
        self.compiler = compiler
        done = 0
        for signature, (_, sources, outputs, _, program) in list(self.programs.items()):
            kernel = compiler(program)
            if kernel is not None:
                self.programs[signature] = (kernel, sources, outputs, _fresh(program.outputs, True), program)
                done += 1
        return done

    def run(self, pending, leaves, get, leaf_tensor):
        """Replays the stretch: reads and updates the backward pass's ``pending``
        gradients and ``leaves`` (``leaf_tensor(kind, ref)`` the tensor of a leaf)."""
        tensors = [leaf_tensor(*key) for key in self.leaves]
        own, outside = self.own, self.outside
        signature = (tuple(sorted(k for k in pending if k in own)), tuple(k for k in outside if k in pending),
                     tuple(k for k, t in enumerate(tensors) if t in leaves))
        built = self.programs.get(signature)
        if built is None:
            built = self._build(signature)
        fn, sources, outputs, fresh, _ = built
        arrays = []
        for kind, ref in sources:
            if kind == "own":
                arrays.append(pending.pop(ref))
            elif kind == "pending":
                arrays.append(pending[ref])
            elif kind == "leaf":
                arrays.append(leaves[tensors[ref]][0])
            else:
                arrays.append(get(ref))
        for (kind, ref), value, own in zip(outputs, fn(arrays), fresh):
            if kind == "pending":
                pending[ref] = value
            else:
                t = tensors[ref]
                old = leaves.get(t)
                leaves[t] = (value, own if old is None else True)


def _identity(kind, ref):
    """A leaf's key by identity (a Tensor's ``==`` compares values): an argument's and a
    leaf made in the call's (``"leaf"``) by number."""
    return (kind, ref if kind in (ARG, "leaf") else id(ref))
