"""``lp.compile``: trace a function once, then replay what it did without the Python
around it.

The first call with a given kind of arguments runs the function eagerly and records,
through the hooks of :mod:`leanpass._graph.trace`, what it did: each operation (the
op record and how to run it again: its parameters), where each operation's inputs
come from (an argument, an earlier operation, a tensor that existed before the call:
a parameter, a buffer, a constant), the in-place changes, each backward pass (its
schedule, read from the graph), and the steps that change state as a whole (an
optimizer's ``step`` and ``zero_grad``). Later calls with arguments of the same
shapes, dtypes, devices and ``requires_grad`` flags (and equal Python values) replay
the record: each operation's forward on arrays, each backward pass as a fixed
schedule of the saved backward rules, each step called again. No Tensor, no graph
node, no argument check and no engine walk is made on the way, and every result is
the one the eager call gives, bit for bit: the same kernels run in the same order.

What a replay could not reproduce makes the function run eagerly for those
arguments, with one warning naming what and where: a value read on the host
(``.item()``, ``bool(t)``, ``float(t)``, ``.numpy()``; a float the function's own
``return`` gives as it is, ``return loss.item()``, is read again at each replay:
:func:`_returned_reads`), an array that leaves the
recorded operations (``.data``; ``.grad`` reads as a Tensor whose value a replay reads
again), a shape that depends on values, a random
draw LeanPass does not record (``lp.manual_seed`` inside, a layer made inside: the
others, dropout, ``lp.rand``/``randn``/``randint``/``randperm``, ``t.uniform_()``,
``nn.init``, are drawn again at each replay), a recorded in-place change of a tensor
in the graph, ``backward(create_graph=True)`` inside the function (``autograd.grad``
with ``create_graph`` and ``lp.func``'s transforms are replayed), ``retain_grad``. A
backward pass through complex values replays each rule by PyTorch's convention, as
the engine runs it (:class:`_Complex`). See docs/compile.md.
"""

from __future__ import annotations

import ast
import builtins
import collections
import dis
import functools
import gc
import inspect
import io
import itertools
import linecache
import math
import os
import sys
import sysconfig
import threading
import types
import warnings
import weakref

from . import ops
from ._checks import broadcast_shapes
from ._fusion import ARG, COMPILE_AFTER, EXT, VAL, BackwardRun, compile_runs, fuse, fusion_enabled
from ._graph import hooks
from ._graph.engine import Released, _is_complex, _needed, _store, _unbroadcast, complex_rule
from ._graph.hooks import _with_grad_hooks
from ._graph.modes import grad_lock, is_grad_enabled, no_grad
from ._graph.node import COMPLEX, Node, edge
from ._graph.trace import TRACER
from ._graph.trace import WATCHED as _WATCHED
from ._graph.trace import WRITES as _WRITES
from ._node import _cast_back, _part_backward, inplace, leaf, share_version
from .backends import _base as _backends_base
from .backends import _host_random, get_default_device, get_default_dtype
from .nn.module import _CHANGES as _MODULE_CHANGES
from .nn.module import Module, _same_value, holding_members, items_of, unchanged
from .nn.module import restored as modules_restored
from .ops.conversion import gradient_as
from .tensor import Tensor, host_number

__all__ = ["compile", "Compiled"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _disabled() -> bool:
    """Whether ``LEANPASS_COMPILE=0`` is set: read when a function is compiled (each call
    reading the environment cost 2 of a small step's 100 microseconds)."""
    return os.environ.get("LEANPASS_COMPILE", "1") == "0"


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
_WRAPPERS = {os.path.join(_PACKAGE, name) for name in ("_node.py", "tensor.py", "_compile.py",
                                                         os.path.join("_graph", "trace.py"))}
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
            return None if path in _CREATORS or not path.startswith(_PACKAGE) else frame.f_code.co_name
        frame = frame.f_back
    return None


def _unwrapped(fn) -> tuple:
    """``(function, owners)``: the plain function a compiled callable runs (a bound
    method's, a ``functools.partial``'s, a callable object's ``__call__``), and the
    objects it carries (the method's instance, the partial's arguments, the callable
    object): their attributes are Python state the function reads."""
    owners = []
    for _ in range(8):  # (a partial of a bound method of ...: a few layers at most)
        if isinstance(fn, types.MethodType):
            owners.append(fn.__self__)
            fn = fn.__func__
        elif isinstance(fn, functools.partial):
            owners += [v for v in (*fn.args, *fn.keywords.values()) if not isinstance(v, Tensor)]
            fn = fn.func
        elif not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)) and callable(fn):
            owners.append(fn)
            fn = types.MethodType(type(fn).__call__, fn) if isinstance(type(fn).__call__, types.FunctionType) else None
            if fn is None:
                break
        else:
            break
    return fn, owners


def _names_seen(fn) -> tuple:
    """What ``fn`` (a plain function) reads by name: its closure cells and the globals
    its code names, as ``(cells, globals)``: a replay checks that each still holds the
    same object (or an equal number or string) as when the trace was made, since a
    name bound to another model or tensor would take the function elsewhere."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return (), ()
    cells = tuple(fn.__closure__ or ())
    namespace = fn.__globals__
    builtins = namespace.get("__builtins__", {})
    builtins = vars(builtins) if not isinstance(builtins, dict) else builtins
    # (a global bound only after lp.compile wrapped the function is read too; a builtin not shadowed, not)
    names = tuple(sorted(name for name in _globals_in(code) if name in namespace or name not in builtins))
    return cells, tuple((namespace, name) for name in names)


@functools.lru_cache(maxsize=1024)
def _globals_in(code) -> frozenset:
    """The names ``code`` reads as globals (not as attributes: ``opt.step()`` reads no
    global ``step``), with those of the code inside it: comprehensions (code of their
    own before Python 3.12), lambdas, functions."""
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, type(code)):
            names |= _globals_in(const)
    return frozenset(names)


def _same(a, b) -> bool:
    if a is b:
        return True
    if type(a) is float and type(b) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and isinstance(a, (bool, int, complex, str)) and a == b


def _equal(a, b) -> bool:
    """:func:`_same`, item by item in tuples."""
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(map(_equal, a, b))
    return _same(a, b)


def _host_generators(function, objects) -> tuple:
    """``(generators, functions, makers, held)``: the host random generators outside LeanPass a call
    of ``function`` may draw from,
    as far as its code shows: those among the values it names (closure cells, globals,
    default arguments) and ``objects`` (its arguments, its owner), the generators behind
    the bound methods there (``from random import gauss``), the ones their attributes
    named in the code hold (``self.rng``, ``cfg.aug.rng``, ``self.rngs[0]``: two levels),
    NumPy's and Python's global ones where the code names NumPy's ``random`` or Python's;
    and so on through the Python functions it names (a script's ``mixup`` helper,
    ``self.forward``), three levels deep, not LeanPass's own, the ``forward`` of the
    layers of every model reached (``self.model``'s), and the methods of the user's
    classes of those layers and of the plain objects reached (:func:`_methods`: a
    ``MixUp`` object's ``__call__``, a layer's helper method). What a trace saw drawn from one
    runs eagerly (:func:`_host_draws`); a generator a helper reaches another way is not
    seen. ``functions``: the Python functions visited, ``function`` first (what they
    read by name is checked before a replay too), with the functions of the user's
    modules it names (``utils.scale``). ``makers``: whether that code names what makes
    a generator (NumPy's ``default_rng``: one made there without a seed draws on the
    system's entropy, which the trace then watches for). ``held``: the plain objects
    among the attributes of the layers reached (``self.cfg`` read in a ``forward``)."""
    seen, names, roots, todo, functions, makers = set(), set(), list(objects), [(function, 0)], [], False
    held = []
    for _ in range(8):  # functions read -> values they name -> models among them -> their layers' forward
        while todo:
            fn, depth = todo.pop()
            code = getattr(fn, "__code__", None)
            if code is None or id(code) in seen:
                continue
            seen.add(id(code))
            if depth and code.co_filename.startswith(_PACKAGE):  # (LeanPass's own draw on LeanPass's generator)
                continue
            functions.append(fn)
            own = _attribute_names(fn)
            names |= own
            chained = _chain_values(fn)  # (NumPy's default_rng, utils.scale)
            makers = makers or any(map(_host_random.makes_generator, chained))  # (the trace watches for entropy)
            named = [*_values(_names_seen(fn)), *(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
            named = [v for v in named if _inspectable(v)]
            roots += _host_random.global_generators(named, own)  # (NumPy's beta, random.random())
            roots += named
            if depth < 3:
                todo += [(v, depth + 1) for v in named if isinstance(v, types.FunctionType)]
                todo += [(v, depth + 1) for v in chained  # (utils.scale of a module of the user's)
                         if type(v) is types.FunctionType and _users_file(v.__code__.co_filename)]
                todo += [(getattr(type(o), n, None), depth + 1) for o in objects for n in own
                         if isinstance(getattr(type(o), n, None), types.FunctionType)]  # (self.forward)
        found, values, reached = [], list(roots), set()
        for _ in range(4):  # the values, their attributes named in the code, theirs (a model's layers': one more)
            more = []
            for v in values:
                if isinstance(v, (types.BuiltinMethodType, types.MethodType)):  # (from random import gauss)
                    v = v.__self__
                if id(v) in reached:
                    continue
                reached.add(id(v))
                if isinstance(v, _host_random.GENERATORS):
                    found.append(v)
                elif type(v) is types.FunctionType:  # (a loss kept in a registry dict, a callback an object holds)
                    if id(v.__code__) not in seen and _users_file(v.__code__.co_filename):
                        todo.append((v, 1))
                elif isinstance(v, (list, tuple)):  # (self.rngs[0])
                    more += v[:64]
                elif isinstance(v, dict):
                    more += list(v.values())[:64]
                elif isinstance(v, Module):  # (a Mixup layer inside: its forward and the methods of its class if
                    layers = [m for m in v.modules() if m is v or id(m) not in reached]  # the user's, its attributes)
                    reached.update(map(id, layers))
                    todo += [(f, 1) for f in {f for m in layers for f in (type(m).forward, *_methods(type(m), names))}
                             if id(getattr(f, "__code__", None)) not in seen]
                    attributes = [a for a in _attributes(layers, names) if not isinstance(a, Module)]
                    held += [a for a in attributes if _plain(a)]  # (self.cfg.scale in a layer's forward)
                    more += attributes
                elif not isinstance(v, (types.ModuleType, type, Tensor, types.FunctionType)):
                    todo += [(f, 1) for f in _methods(type(v), names)  # (a MixUp object's __call__, noise.apply)
                             if id(f.__code__) not in seen]
                    more += _attributes([v], names)
            values = [v for v in more if _inspectable(v)]
        if not todo:
            break
    return found, functions, makers, held


def _methods(cls, names) -> list:
    """The Python functions of ``cls`` and its bases of the user's code (not LeanPass's
    nor an installed package's) that the code reached names (``names``), and its
    ``__call__``: methods, static and class methods, properties' getters. A layer's
    helper method and a plain object's ``__call__`` read what a replay must check too;
    a trainer's ``on_step_end``, which the step does not call, does not."""
    found = []
    for base in cls.__mro__[:-1]:
        if not _configuration(base):
            continue
        for name, value in vars(base).items():
            if name != "__call__" and name not in names:
                continue
            kind = type(value)  # (exact types: a class attribute's own __getattr__ or __class__ may raise)
            value = value.__func__ if kind in (staticmethod, classmethod) else value.fget if kind is property else value
            if type(value) is types.FunctionType:
                found.append(value)
    return found


def _names_read(functions) -> tuple:
    """:func:`_names_seen` of each of ``functions`` (a step and the helpers it reaches:
    ``helper``'s global ``SCALE``), merged as ``(cells, globals)``, each once."""
    cells, globals_, seen = [], [], set()
    for fn in functions:
        fn_cells, fn_globals = _names_seen(fn)
        for cell in fn_cells:
            if id(cell) not in seen:
                seen.add(id(cell))
                cells.append(cell)
        for namespace, name in fn_globals:
            if (id(namespace), name) not in seen:
                seen.add((id(namespace), name))
                globals_.append((namespace, name))
    return tuple(cells), tuple(globals_)


@functools.lru_cache(maxsize=1024)
def _name_chains(code) -> tuple:
    """The chains of names ``code`` (and the code nested in it) loads from a global or a
    closure's name: ``("utils", "scale")`` for ``utils.scale``."""
    found = []
    for c in _codes(code):
        chain = None  # the names loaded so far
        for ins in dis.get_instructions(c):
            op = ins.opname
            if chain is not None and op in ("LOAD_ATTR", "LOAD_METHOD"):
                chain += (ins.argval,)
                continue
            if chain is not None and op in ("PUSH_NULL", "EXTENDED_ARG"):
                continue
            if chain is not None:
                found.append(chain)
            chain = (ins.argval,) if op in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF") else None
        if chain is not None:
            found.append(chain)
    return tuple(found)


def _chain_values(fn) -> list:
    """What the chains of names ``fn``'s code loads (:func:`_name_chains`) lead to,
    through modules only (no property runs): NumPy's ``default_rng`` the function,
    ``utils.scale`` a function of a module of the user's; None where a chain leaves
    the modules (``cfg.scale``)."""
    code = getattr(fn, "__code__", None)
    chains = _name_chains(code) if code is not None else ()
    if not chains:
        return []
    scope, cells = fn.__globals__, _cells(fn)
    found = []
    for root, *attributes in chains:
        value = cells[root] if root in cells else scope.get(root, _NOT_KEYED)
        for name in attributes:  # (type(): not a proxy's __class__, which may raise outside its context; the
            value = _module_attribute(value, name)  # module's dict: no __getattr__ runs, which may warn or import)
        found.append(value)
    return found


def _cells(fn) -> dict:
    """``fn``'s closure variables that hold a value, by name."""
    found = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # (an empty cell)
            pass
    return found


def _module_attribute(module, name):
    """``module.name`` as the module holds it (its dict, or a submodule imported), None
    where ``module`` is no module or holds no such name: no module ``__getattr__`` runs
    (a deprecated name's warning, a lazy import)."""
    if not issubclass(type(module), types.ModuleType):
        return None
    value = vars(module).get(name)
    return value if value is not None else sys.modules.get(f"{getattr(module, '__name__', '')}.{name}")


def _host_draws(generators) -> list:
    """The states of ``generators`` (:func:`_host_generators`): a trace whose call
    changed one froze that draw (mixup's ``lam``) into its replays. A generator without
    a state (``random.SystemRandom``) counts as drawn from."""
    return [_host_random.state(g) for g in generators]


def _attributes(objects, names) -> list:
    """The attributes named in ``names`` (None: all) that ``objects`` hold in their
    ``__dict__`` (no property runs)."""
    found = []
    for obj in objects:
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            found.extend(v for k, v in attributes.items() if names is None or k in names)
    return found


def _inspectable(value) -> bool:
    """Whether ``value``'s class can be asked for (``isinstance``): not a proxy that
    raises outside its context (flask's ``request``), which the compiler leaves alone."""
    try:
        return value.__class__ is not None
    except Exception:
        return False


def _values(names) -> tuple:
    cells, globals_ = names
    out = []
    for cell in cells:
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell
            out.append(_NOT_KEYED)
    out.extend(namespace.get(name, _NOT_KEYED) for namespace, name in globals_)
    return tuple(out)


# ---- values read on the host that the function returns ---------------------------------------


def _is_host_read(node) -> bool:
    """Whether ``node`` is ``<expr>.item()`` or ``float(<expr>)``."""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr == "item" and not node.args
    return isinstance(func, ast.Name) and func.id == "float" and len(node.args) == 1


def _placed_reads(value):
    """The host reads in the expression ``value`` that give the result as they are: the
    expression itself, or items of tuple and list displays, values of dict displays,
    from the top down (``return loss.item()``, ``return {"loss": loss.item(), "out":
    out}``): their numbers go into the result, and no code sees them. (A read elsewhere
    in ``value`` is not among them: Python 3.11 and later tell a read by its call's
    position.) On Python 3.10, None where any other read or call lies in ``value``
    outside them: 3.10 tells a read by its line alone, and a call there may read
    (``map(float, ...)``)."""
    placed = []

    def place(node):
        if _is_host_read(node):
            placed.append(node)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for item in node.elts:
                place(item)
        elif isinstance(node, ast.Dict):
            for item in node.values:
                place(item)

    place(value)
    if sys.version_info < (3, 11):
        ids = {id(node) for node in placed}
        if not all(id(node) in ids for node in ast.walk(value) if _is_host_read(node)):
            return None  # (a read inside a placed one: float(max(a.item(), b.item())))
        stack = [value]
        while stack:
            node = stack.pop()
            if id(node) in ids:
                continue
            if isinstance(node, ast.Call):
                return None
            stack.extend(ast.iter_child_nodes(node))
    return placed


_HEADERS = {ast.If: "test", ast.While: "test", ast.For: "iter", ast.AsyncFor: "iter"}


def _returned_reads(fn):
    """``(code, places)``: ``fn``'s code and where in its source (as :func:`_read_at` says)
    lie the host reads (``t.item()``, ``float(t)``) of its own return statements that only
    give the result (:func:`_placed_reads`), on lines where no other statement's code
    lies; None where the source cannot be read (a lambda, a callable object, code typed
    at a prompt)."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name == "<lambda>" or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse("".join(lines) if lines[0][:1] not in " \t" else "if 1:\n" + "".join(lines))
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    shift = first - (1 if lines[0][:1] not in " \t" else 2)  # the tree's line numbers -> the file's
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs or defs[0].name != code.co_name or \
            min([defs[0].lineno] + [d.lineno for d in defs[0].decorator_list]) + shift != code.co_firstlineno \
            or not _compiles_to(lines, code):
        return None  # the source read is not this code's (a file changed since it was imported)
    taken: set = set()  # lines with code of a statement other than a return that qualifies
    returns = []

    def occupy(start, end):
        taken.update(range(start, end + 1))

    def visit(statements):
        for st in statements:
            placed = _placed_reads(st.value) if isinstance(st, ast.Return) and st.value is not None else None
            if placed is not None:
                returns.append((st, placed))
                continue
            bodies = [getattr(st, name) for name in ("body", "orelse", "finalbody")
                      if isinstance(getattr(st, name, None), list)]
            if not bodies or isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                occupy(st.lineno, st.end_lineno)  # a simple statement, a definition, a match: all its lines
                continue
            header = _HEADERS.get(type(st))  # the code before the first body: if's test, for's iterable
            end = getattr(st, header).end_lineno if header is not None else st.lineno
            for item in getattr(st, "items", ()):  # with
                end = max(end, item.context_expr.end_lineno, getattr(item.optional_vars, "end_lineno", 0) or 0)
            occupy(st.lineno, end)
            for handler in getattr(st, "handlers", ()):  # try: except ...:
                occupy(handler.lineno, handler.type.end_lineno if handler.type is not None else handler.lineno)
                visit(handler.body)
            for body in bodies:
                visit(body)

    visit(defs[0].body)
    allowed = set()
    for st, placed in returns:
        if set(range(st.lineno, st.end_lineno + 1)) & taken:
            continue
        if sys.version_info < (3, 11):  # the lines of the statement (whose only calls are its reads)
            allowed.update(range(st.lineno + shift, st.end_lineno + shift + 1))
        else:  # the reads themselves
            allowed.update((n.lineno + shift, n.end_lineno + shift, n.col_offset, n.end_col_offset) for n in placed)
    return code, frozenset(allowed)


def _compiles_to(lines, code) -> bool:
    """Whether the source file of ``code`` (``lines`` among it) still compiles to its
    bytecode and constants (a file edited after it was imported does not): the whole
    file, as the function was compiled (how a name is loaded depends on its imports)."""
    text = "".join(linecache.getlines(code.co_filename))
    if not text or "".join(lines) not in text:
        return False
    module = _compiled_file(code.co_filename, text)
    if module is None:
        return False
    stack = [module]
    while stack:
        const = stack.pop()
        if const.co_name == code.co_name and const.co_firstlineno == code.co_firstlineno:
            return const.co_code == code.co_code and _plain_constants(const) == _plain_constants(code)
        stack.extend(c for c in const.co_consts if isinstance(c, type(code)))
    return False


@functools.lru_cache(maxsize=16)
def _compiled_file(filename, text):
    """``text``, the source of ``filename``, compiled (once per text: 16 ms for 2000 lines)."""
    try:
        return builtins.compile(text, filename, "exec", dont_inherit=True)  # (compile: this module's lp.compile)
    except (SyntaxError, ValueError):
        return None


def _plain_constants(code) -> tuple:
    return tuple(repr(c) for c in code.co_consts if not isinstance(c, type(code)))  # (repr: -0.0 is not 0.0)


def _read_at(frame) -> tuple:
    """Where in its source ``frame`` stands: ``(line, end line, column, end column)`` of the
    call it is making (Python 3.11 and later), or its line alone (3.10)."""
    if sys.version_info < (3, 11):
        return frame.f_lineno
    return next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None), None)


def _host_float(backend, array) -> float:
    """What ``Tensor.item()`` (or ``float(t)``) gives for a one-element float ``array``."""
    return float(host_number(backend, array))


# ---- the key of a call -----------------------------------------------------------------------

_NOT_KEYED = object()


def _tensor_key(value) -> tuple:
    data = value._data  # (the dtype itself: its str() is slow in NumPy)
    # (a leaf that requires grad gets a .grad; a value of a graph made outside, of the same kind, does not)
    return ("T", tuple(data.shape), data.dtype, value._backend.device, value._rg, value._node is None)


def _key_of(value, tensors: list, objects: list | None = None):
    """A hashable description of ``value``: a Tensor by its kind (and collected in
    ``tensors``), containers item by item, Python scalars and strings by value, any
    other object by identity (a module passed in: the same module)."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return _tensor_key(value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_key_of(v, tensors, objects) for v in value))
    if isinstance(value, dict):  # (in their order: a function may iterate them)
        return ("dict", tuple((k, _key_of(v, tensors, objects)) for k, v in value.items()))
    if isinstance(value, float):  # -0.0 is not 0.0 (1 / s)
        return ("float", value, math.copysign(1.0, value))
    if value is None or isinstance(value, (bool, int, complex, str, bytes)):
        return (type(value).__name__, value)
    if getattr(value, "shape", None) == () and hasattr(value, "item") and hasattr(value, "dtype"):  # a NumPy scalar
        return ("scalar", str(value.dtype), _key_of(value.item(), tensors, objects))
    if isinstance(value, collections.abc.Iterator) and not isinstance(value, io.IOBase):  # (a replay would not
        # advance it: every call runs eagerly; a file given to write a log to is no iterator here)
        raise TypeError("an iterator argument")
    if objects is not None:
        objects.append(value)  # kept by the trace: its id is not reused while the entry lives
    return ("id", id(value))


def _python_state(value, objects, names=None, nested=_NOT_KEYED) -> list:
    """What a call could change of its arguments other than tensors' values, and a
    replay would not: each list and dict in them, and each plain object among
    ``objects`` (``self.steps += 1`` in a method), with its items or attributes
    (:func:`leanpass.nn.module.items_of`; an object's attributes only those in
    ``names``, where the function's code names them: a scheduler passed in, whose
    ``step`` sets its count, is no change unless the code reads the count). Not a
    module's or an optimizer's (their own checks look after them). ``nested``: the names
    for the plain objects found among attributes, where not ``names``."""
    state, seen, stack = [], set(), [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            state.append((v, items_of(v), items_of))
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            if isinstance(v, list):
                state.append((v, items_of(v), items_of))
            stack.extend(v)
    stack, seen = list(objects), set()
    while stack:  # the objects, and the plain objects among their attributes (cfg.train.scale)
        obj = stack.pop()
        if (id(obj) in seen or isinstance(obj, (Module, Tensor, types.FunctionType, types.MethodType))
                or (isinstance(obj, type) and not any(obj is o for o in objects))  # (a class named: its values)
                or hasattr(type(obj), "_traced_state")):  # (a watched one: an optimizer, a scheduler)
            continue
        seen.add(id(obj))
        if isinstance(obj, (collections.deque, set, frozenset)):  # (a deque of the last frames: its items)
            state.append((obj, tuple(obj), tuple))
            continue
        if issubclass(type(obj), (dict, list)):  # (a partial's dict argument: its items)
            stack += _container_state(obj, state)
            continue
        if _is_iterator(obj):  # (a partial's iterator argument: as advanced)
            state.append((obj, _position(obj), _position))
            continue
        read = functools.partial(_attribute_items, names=names if nested is _NOT_KEYED
                                 or any(obj is o for o in objects) else nested)
        try:
            attrs = _object_attributes(obj, read.keywords["names"])
        except Exception:  # (a proxy whose attributes raise outside its context: nothing to compare)
            continue
        # (each plain object, also with none of those attributes yet: one set on it later is a change)
        state.append((obj, tuple(itertools.chain.from_iterable(attrs.items())), read))
        for v in attrs.values():
            kind = type(v)  # (not isinstance: a proxy's __class__ may raise outside its context)
            if issubclass(kind, (list, dict)):  # (cfg.w[0] = 3.0: its items; a long list's length alone)
                stack += _container_state(v, state)  # (self.loaders["train"]: an iterator in it, as advanced)
            elif issubclass(kind, (collections.deque, set, frozenset)) or _plain(v):
                stack.append(v)
            elif _inspectable(v) and _is_iterator(v):  # (next(self.batches): as advanced)
                state.append((v, _position(v), _position))
    return state


def _attribute_items(obj, names) -> tuple:
    """A plain object's entry in a :func:`_python_state` snapshot: the attributes
    :func:`_object_attributes` reads, names and values side by side; an object of its
    own (a change) where they raise now."""
    try:
        return tuple(itertools.chain.from_iterable(_object_attributes(obj, names).items()))
    except Exception:
        return (object(),)  # (no tuple of attributes matches it)


def _object_attributes(obj, names) -> dict:
    """The attributes of the plain object ``obj`` a call's code names (``names``; None:
    all): its own (``__dict__``, slots), or its class's plain values (``Cfg.scale =
    2.0``: the first base that has the name decides). All of its own where the code
    cannot tell which it reads: a property among the names, a ``__getattr__`` (its
    values kept elsewhere, as an attribute dict's)."""
    if isinstance(obj, type):  # (a class as a configuration, Config.lr: its values and its bases', the user's)
        attrs = {}
        for base in (b for b in obj.__mro__[:-1] if _configuration(b)):
            attrs.update((k, v) for k, v in vars(base).items() if (names is None or k in names) and k not in attrs)
        return attrs
    cls = type(obj)
    own = getattr(obj, "__dict__", None)
    own = own if isinstance(own, dict) else {}
    attrs, whole = {}, names is None or getattr(cls, "__getattr__", None) is not None
    if names is not None:
        found = set()
        for base in cls.__mro__:
            for name in base.__dict__.keys() & names:
                if name not in found:
                    found.add(name)
                    value = base.__dict__[name]
                    if not hasattr(type(value), "__get__"):
                        attrs[name] = value
                    elif not isinstance(value, (types.FunctionType, staticmethod, classmethod)):
                        whole = True  # (a property: what it reads is not among the names)
    attrs.update(own if whole else ((k, own[k]) for k in own.keys() & names))
    for slot in _slots(cls):
        if (whole or slot in names) and hasattr(obj, slot):
            attrs[slot] = getattr(obj, slot)
    return attrs


def _named_objects(fn, words=frozenset()) -> list:
    """``(object, names)`` for the plain objects ``fn`` reads by name (a global ``cfg``, a
    closure's): the attributes its code loads on that name, and on those in a chain
    (``cfg.scale``, ``cfg.train.lr``: not ``opt.step``'s ``step``, nor ``cfg.opt.step()``'s),
    whose values a replay checks; all of them (None) where the code calls one of its
    methods (``logger.log()``, ``pbar.update(1)``: what the method reads or sets is not in
    the code), but for the steps a replay calls again (a scheduler's ``step``), or uses
    it otherwise (passed to a helper, aliased, ``getattr``). A module or a class of the
    user's as a configuration (:func:`_configuration`): the names loaded on it, or, used
    otherwise, those among ``words`` (the names and strings of the code reached). The
    dicts and lists it names or has as defaults (``CFG["lr"]``): all their items (None:
    a reader the walk does not reach, a function kept in a dict or passed in, may read
    any key). Iterators: :data:`_ITERATOR`. Not functions, Modules, Tensors."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    values = _cells(fn)
    values.update((name, namespace[name]) for namespace, name in _names_seen(fn)[1] if name in namespace)
    values = {name: value for name, value in values.items() if _inspectable(value)}
    loaded: dict = {}
    called: dict = {}  # the methods the code calls on a name's object
    whole = set()  # the names whose object the code uses otherwise: passed (helper(x, cfg)), aliased, getattr()
    for c in _codes(code):
        root = chain = None  # the name loaded, and whether attributes are being loaded on it (cfg.train.lr)
        fresh = False  # whether the root was loaded right before: no attribute of it loaded yet
        for ins in dis.get_instructions(c):
            if fresh and ins.opname not in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "COPY",
                                             "DUP_TOP", "EXTENDED_ARG"):
                whole.add(root)  # (what is done with it is not in this code: subscripted, passed, stored)
            was_fresh, fresh = fresh, False
            method = ins.opname == "LOAD_METHOD" or (ins.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)
                                                      and ins.arg & 1)
            if root is not None and ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR") and (
                    not chain or not method):  # (cfg.train.lr: train and lr; cfg.opt.step(): opt alone)
                loaded.setdefault(root, set()).add(ins.argval)
                if method and not chain:  # (logger.log(), pbar.update(1): what the method reads or sets is unseen)
                    called.setdefault(root, set()).add(ins.argval)
                chain = ins.opname == "LOAD_ATTR" and not method
                root = root if chain else None
            elif root is not None and ins.opname in ("COPY", "DUP_TOP", "EXTENDED_ARG"):
                fresh = was_fresh  # (cfg.calls += 1, cfg.a.b += 1: the object copied, its attribute loaded, changed,
                # stored; a = b = cfg: copied, then stored)
            else:
                root = ins.argval if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF") else None
                chain = False
                fresh = root is not None
    found = []
    for name in sorted(loaded.keys() | whole):
        if name not in values:
            continue
        value = values[name]
        if issubclass(type(value), (dict, list)):  # (all its items: a reader the walk does not reach, a function
            found.append((value, None))  # kept in a dict or passed in, may read any key)
        elif isinstance(value, types.ModuleType):  # (a config module: the names loaded on it, or those of the
            if _configuration(value):  # code reached where it is used otherwise: never all of it)
                found.append((value, frozenset(loaded.get(name, ())) | (words if name in whole else frozenset())))
        elif _plain(value) or _configuration(value):  # (all its attributes where it runs a method a replay does
            everything = name in whole or any(not getattr(getattr(type(value), m, None), "action", False)
                                              for m in called.get(name, ()))  # not, or it is used otherwise)
            found.append((value, None if everything else frozenset(loaded.get(name, ()))))
    defaults = [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]  # (def step(x, hp=HP))
    for value in [*values.values(), *defaults]:
        if not _inspectable(value):
            continue
        if _is_iterator(value):  # (next(it): a replay would not advance it)
            found.append((value, _ITERATOR))
        elif any(value is v for v in defaults) and (issubclass(type(value), (dict, list)) or _plain(value)):
            found.append((value, None))
    return found


_ITERATOR = "iterator"  # (the names of an iterator among _named_objects': its position is compared)


def _is_iterator(value) -> bool:
    """Whether ``value`` is an iterator (a generator, ``iter(batches)``), not a file."""
    kind = type(value)
    try:
        return hasattr(kind, "__next__") and hasattr(kind, "__iter__") and not issubclass(kind, io.IOBase)
    except Exception:  # (a metaclass whose __getattr__ raises)
        return False


def _position(iterator) -> tuple:
    """Where ``iterator`` stands: an object of its own each time, as if it had been
    advanced, since Python does not show it (a generator at the same ``yield`` with the
    same locals, an iterator object whose state is in another one, ``self.it``, may
    have moved on): a function that names one runs eagerly."""
    return (object(),)


def _words(fn) -> frozenset:
    """The names ``fn``'s code loads (:func:`_attribute_names`) and the strings it holds
    (``getattr(cfg, "scale")``)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return frozenset()
    return _attribute_names(fn) | {k for c in _codes(code) for k in c.co_consts if type(k) is str}


def _merged(named) -> list:
    """:func:`_named_objects`' entries, one per object (several functions reached may
    name one ``CFG``): the names of each merged, all of them (None) where one says all."""
    merged: dict = {}
    for obj, names in named:
        key = id(obj)
        if key not in merged:
            merged[key] = (obj, names)
            continue
        before = merged[key][1]
        if before is None or names is None or before is _ITERATOR or names is _ITERATOR:
            names = before if before is _ITERATOR or before is None else names
        else:
            names = before | names
        merged[key] = (obj, names)
    return list(merged.values())


def _configuration(value) -> bool:
    """Whether ``value`` is a module or a class of the user's code (``import config;
    config.lr``, ``class Config: lr = 0.1``), not of Python's or of an installed
    package (``np``, ``lp``, ``nn.Linear``): its attributes the code reads are checked.
    A class whose module is gone (a script run by ``runpy``) is the user's where its
    functions' code is. No module ``__getattr__`` runs."""
    if isinstance(value, type):
        module = sys.modules.get(getattr(value, "__module__", None) or "")
        if module is None:
            return any(type(f) is types.FunctionType and _users_file(f.__code__.co_filename)
                       for f in vars(value).values())
        value = module
    if not issubclass(type(value), types.ModuleType):
        return False
    path = vars(value).get("__file__")
    return _users_file(str(path) if path is not None else "__main__" if vars(value).get("__name__") == "__main__"
                       else "")


@functools.lru_cache(maxsize=256)
def _users_file(path: str) -> bool:
    """Whether the code at ``path`` is the user's (``"__main__"`` without a file: an
    interactive session's; ``<stdin>``, ``<string>``, a notebook's cell), not Python's,
    an installed package's or LeanPass's (nor a built-in module's: no file, "")."""
    if path == "__main__" or (path.startswith("<") and not path.startswith("<frozen")):
        return True
    if not os.path.isabs(path):
        return False
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not path.startswith((_PACKAGE, *roots))


def _codes(code) -> list:
    """``code`` and the code nested in it (comprehensions, lambdas, functions)."""
    found, stack = [], [code]
    while stack:
        c = stack.pop()
        found.append(c)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return found


def _plain(value) -> bool:
    try:
        return (hasattr(value, "__dict__") or hasattr(type(value), "__slots__")) and not isinstance(
            value, (types.ModuleType, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                    functools.partial, Module, Tensor, list, tuple, dict))
    except Exception:  # (a proxy whose attributes raise outside its context)
        return False


def _named_state(named) -> list:
    """:func:`_python_state` of :func:`_named_objects`' objects, each with its names (all
    of its own attributes, None: the objects among them only as they are); a dict's
    items (:func:`_container_state`); an iterator as advanced."""
    state = []
    for obj, names in named:
        if names is _ITERATOR:
            state.append((obj, _position(obj), _position))
        elif issubclass(type(obj), (dict, list)):
            state += _python_state((), _container_state(obj, state), None, frozenset())
        else:
            state += _python_state((), [obj], names, frozenset() if names is None else _NOT_KEYED)
    return state


def _container_state(container, state: list, depth: int = 1) -> list:
    """Appends to ``state`` the items of the dict or list ``container`` (its length alone
    past 256), the iterators among them (as
    advanced: ``ITERS["train"]``) and, ``depth`` levels down, the dicts and lists among
    them (64 at most: ``CFG["train"]["lr"]``). Returns the plain objects among its items
    (``CFG["aug"]``; 16 at most), whose attributes the caller compares."""
    state.append((container, _container_items(container), _container_items))
    if len(container) > 256:
        return []
    plain, nested = [], 0
    for v in (container.values() if isinstance(container, dict) else container):
        kind = type(v)
        if issubclass(kind, (dict, list)):
            if depth and nested < 64:
                nested += 1
                plain += _container_state(v, state, depth - 1)
        elif _inspectable(v) and _is_iterator(v):
            state.append((v, _position(v), _position))
        elif _plain(v) and len(plain) < 16:
            plain.append(v)
    return plain


@functools.cache
def _slots(cls) -> tuple:
    """The slot names of ``cls`` and its bases (not ``__dict__``, ``__weakref__``)."""
    found = []
    for base in cls.__mro__:
        slots = base.__dict__.get("__slots__", ())
        found += [s for s in ((slots,) if isinstance(slots, str) else slots) if s not in ("__dict__", "__weakref__")]
    return tuple(found)


def _container_items(container) -> tuple:
    """A dict's or list's entry in a snapshot (:func:`_container_state`): its items,
    or its length alone past 256 items."""
    return (len(container),) if len(container) > 256 else items_of(container)


def _same_state(before: list, now: list) -> bool:
    """Whether two :func:`_python_state` snapshots agree: the same containers and
    objects, holding the same items (:func:`leanpass.nn.module.unchanged`)."""
    return len(before) == len(now) and all(a is b and len(i) == len(j) and all(map(_same_value, i, j))
                                           for (a, i, _), (b, j, _) in zip(before, now))


def _state_kept(snapshot: list) -> bool:
    """Whether each container and object of a :func:`_python_state` snapshot holds
    what it held, each read again as it was read: what :func:`_same_state` says of a
    new snapshot, without walking again (the walk goes from item to item, so the same
    items lead it to the same containers and objects), in a fifth of the time for
    W1's step (a plain object of seven attributes, 18 against 4 us)."""
    for obj, items, read in snapshot:
        now = read(obj)
        if len(now) != len(items) or not all(map(_same_value, now, items)):
            return False
    return True


def _named_members(values) -> list:
    """The lists and dicts holding tensors or modules among ``values`` (what a function
    reads by name: ``bufs = {"a": t}``, ``layers = [...]``) and among the public
    attributes of the modules there and of their sub-modules (not a private cache
    such as MLP's ``_fusion``), each with its items: checked after the trace (a step
    that changed one) and before each replay (:func:`leanpass.nn.module.unchanged`)."""
    values = [v for v in values if _inspectable(v)]
    found = holding_members(values)
    found += [x for v in values if isinstance(v, Module) for m in v.modules()
              for x in holding_members([a for k, a in vars(m).items() if not k.startswith("_")])]
    return found


def _attribute_names(fn):
    """The names ``fn``'s code and the code nested in it name (``co_names``: globals
    and attributes), or None where it has no code (a callable object)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(names)


def _call_key(args, kwargs):
    """``(key, tensors, objects)`` of a call (:func:`_key_of` of its arguments, with the
    modes a trace depends on, and which tensors are one or share memory). Plain
    Tensors among the positional arguments, a training step's usual call, are keyed
    here, as :func:`_key_of` keys them: every call pays for this."""
    tensors: list = []
    objects: list = []
    parts = []
    for value in args:
        if type(value) is Tensor:
            tensors.append(value)
            parts.append(_tensor_key(value))
        else:
            parts.append(_key_of(value, tensors, objects))
    key = (("tuple", tuple(parts)), _key_of(kwargs, tensors, objects) if kwargs else _NO_KWARGS, is_grad_enabled(),
           get_default_dtype(), get_default_device())
    if len(tensors) < 2:
        return key + (((0,) if tensors else ()), ()), tensors, objects
    first: dict = {}
    aliasing = tuple(first.setdefault(id(t), i) for i, t in enumerate(tensors))  # f(a, a) is not f(a, b)
    return key + (aliasing, _sharing(tensors)), tensors, objects


_NO_KWARGS = ("dict", ())  # _key_of({})


def _sharing(tensors) -> tuple:
    """For each tensor, the first one before it whose memory it may share (``f(a,
    a.detach())``, ``f(a, a[:])`` is not ``f(a, b)``: eagerly, a change of one is a
    change of the other, which a backward that saved it refuses), else its own place:
    arrays compared by their bounds where there are a few tensors, by identity else."""
    if len(tensors) < 2:
        return ()
    if len(tensors) > 8:
        first: dict = {}
        return tuple(first.setdefault(id(t._data), i) for i, t in enumerate(tensors))
    out = []
    for i, t in enumerate(tensors):
        data, backend = t._data, t._backend
        place = i
        for j in range(i):
            if tensors[j]._backend is backend and backend.shares_memory(tensors[j]._data, data):
                place = j
                break
        out.append(place)
    return tuple(out)


# ---- the record ----------------------------------------------------------------------------------


_CAST_FIRST = "cast first"  # a schedule entry's gradients: cast to the inputs' dtypes before anything else


class _Complex:
    """A schedule entry's ``exact`` where a complex value meets the node (its value or
    an input's): the rule runs by PyTorch's convention for complex gradients, as the
    engine runs it (:func:`~leanpass._graph.engine.complex_rule`); ``exact`` is what the
    entry's would be otherwise. (Fused runs are of real dtypes: none of theirs.)"""

    __slots__ = ("op", "dtypes", "inputs_complex", "exact")

    def __init__(self, node, exact):
        self.op, self.exact = node._op, exact
        self.dtypes = tuple(p._data.dtype for p in node._prev)
        self.inputs_complex = any(map(_is_complex, self.dtypes))

    def grads(self, xp, backward, g) -> list:
        if self.exact is _CAST_FIRST:  # a rule of mixed dtypes: cast as eagerly (a real input's real part, copied)
            backward = _cast_back(backward, xp, self.dtypes)
        if self.inputs_complex or _is_complex(g):  # (the engine's test: a real node may get a complex gradient)
            return complex_rule(xp, self.op, backward, g, self.dtypes)
        return backward(g)


class _Stale(Exception):
    """A replay met something the trace did not see (a shape): the call runs eagerly."""


class _Retry(Exception):
    """A replay raised before it changed any state: this call runs eagerly (a ``try``
    in the function may catch the error, which the replay cannot follow), later ones
    replay again."""


def _has_array(backend, value) -> bool:
    """Whether ``value`` is, or holds (in tuples, lists, dicts), an array of ``backend``."""
    if isinstance(value, (tuple, list)):  # a list the op fills (ops.norm.Statistics) holds no input
        return not getattr(value, "filled_by_the_op", False) and any(_has_array(backend, v) for v in value)
    if isinstance(value, dict):
        return any(_has_array(backend, v) for v in value.values())
    return backend.is_array(value) and getattr(value, "shape", None) is not None


class _Recipe:
    """Parameters of an operation among which are arrays of the call (an index tensor's
    array): ``fill(get)`` gives them with the replay's arrays in those places."""

    __slots__ = ("params", "arrays", "kind")

    def __init__(self, params, arrays):
        self.params, self.arrays, self.kind = params, arrays, type(params)

    def fill(self, get):
        params = dict(self.params) if self.kind is dict else list(self.params)
        for position, src in self.arrays:
            params[position] = get(src)
        return params if self.kind is dict else tuple(params)


def _keeps(label, t, o) -> bool:
    """Whether ``t (op) o`` has ``t``'s dtype and shape (``o``: a Tensor)."""
    if o._data.dtype != t._data.dtype:
        return False
    try:
        return tuple(broadcast_shapes(label, t.shape, o.shape)) == tuple(t.shape)
    except ValueError:
        return False


class Tracer:
    """Records one eager call (see the module's doc). Reports from the hooks arrive as
    method calls; the first thing a replay could not reproduce sets :attr:`reason`
    and stops the recording (the call itself goes on eagerly)."""

    def __init__(self, args: list):
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
        self.options_set = None  # the action that may have set options since the call began (a scheduler's step)
        self.keep_args = list(args)
        self.arg_references = _references(self.keep_args)  # what holds the arguments before the call (escaped)
        self.holders: list = []  # the lists, tuples and dicts in the arguments that hold tensors (f([x, y]))
        self.holder_references: list = []  # what holds them before the call
        self.hooking = None  # which hooks the engine runs now, unrecorded ("gradient"...: hooks_running)
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
        eagerly: a replay would read the first call's."""
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

    def born(self, t, python: bool = False) -> None:
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
            return self.unsupported(f"{maker}: a value computed outside the recorded operations")
        if t._rg:
            return self.unsupported("a tensor that requires grad made inside the function")
        # a new tensor at each call, as eagerly: a replay starts from a copy of the values made now
        slot = self._new_slot(t)
        self.events.append(("const", t._backend.copy(t._data), slot, t._backend))
        self.constants += 1

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

    def read_option(self, group, key, value) -> None:
        """See :func:`leanpass._graph.trace.read_option`."""
        if self.options_set is not None and key != "params":
            self.unsupported(f"an optimizer's option ({key!r}) read after {self.options_set} in the call: a replay "
                             "would use the number the trace read, whatever the scheduler set")
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

    def check_watched(self, by_action: bool = False) -> None:
        """Compare the watched objects (:data:`leanpass._graph.trace.WATCHED`) with their
        last snapshot: a change not made ``by_action`` sets :attr:`state_changed`, as
        does a write the call's own code made (even of the value there was)."""
        if not by_action and _WRITES[0] != self.writes:
            self.state_changed = True
        for k, (obj, seen) in enumerate(self.watched):
            now = obj._traced_state()
            if not _equal(now, seen):
                self.watched[k] = (obj, now)
                self.state_changed = self.state_changed or not by_action

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
            self.unsupported("Tensor.grad of a tensor made in the call")
            return g
        slot = self.slots
        self.grad_slots[slot] = src  # its memory is the tensor's .grad: no change in the graph replays out of place
        self.slots += 1
        self.meta[slot] = (tuple(g.shape), g.dtype)
        self.arrays[id(g)] = (VAL, slot)  # (the Tensor below is registered as this value)
        self.keep.append(g)
        self.events.append(("grad_read", src, slot, t._backend))
        return leaf(g, t._backend)

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
                or frame.f_back is None or frame.f_back.f_code is not _TRACE_CODE  # (not a recursive call's)
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
            schedule = self._schedule([r._node for r in roots])
            if schedule is not None:
                self.events.append(("backward", tuple(seeds), schedule, roots[0]._backend))
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

    def _schedule(self, starts, needed=None):
        """The nodes below ``starts`` in the engine's order (newest first), each with its
        parents: ``(slot, parents, fresh, exact)``, a parent ``(VAL, slot, shape,
        dtype)``, ``(EXT, leaf, shape, dtype)`` for a leaf that takes a gradient, or None.
        With ``needed`` (autograd.grad's: the ids on a path to a target) only those. A
        leaf made in the call (:meth:`new_leaf`) is ``("leaf", slot, shape, dtype)``."""
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
            if owner is not None and owner() is not None and getattr(owner(), "_retain", False):
                self.unsupported("a tensor that retains its gradient (retain_grad)")
                return None
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
        if id(value) in self.inner_leaves:
            self.unsupported("a leaf made in the call (requires_grad_(), lp.func's input) as a result: its .grad "
                             "is not replayed")
        if src[0] != VAL and value is not (self.keep_args[src[1]] if src[0] == ARG else src[1]):
            return ("T", src, value._backend, "view")  # another tensor on its array (x.detach())
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


def _output_slots(spec) -> list:
    """The slots a result ``spec`` (:meth:`Tracer._outputs`) reads."""
    if spec is None:
        return []
    kind = spec[0]
    if kind == "T":
        return [spec[1][1]] if spec[1][0] == VAL else []
    if kind == "host":
        return [spec[1]]
    if kind in (list, dict, collections.OrderedDict) or (isinstance(kind, type) and issubclass(kind, tuple)):
        items = spec[1].values() if isinstance(spec[1], dict) else spec[1]  # (a named tuple's, an OrderedDict's too)
        return [s for item in items for s in _output_slots(item)]
    return []


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
        elif kind == "autograd":  # (no .grad written, but its leaves' gradient hooks run, as in a backward pass)
            anything = anything or id(event) in hooked
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


def _share_memory(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` are one tensor or may share memory (by their arrays' bounds)."""
    return a is b or (a._backend is b._backend and a._backend.shares_memory(a._data, b._data))


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


class Plan:
    """A recorded call, ready to replay (see the module's doc)."""

    def __init__(self, tracer: Tracer, outputs, modules: int, fuse_runs: bool = True):
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
        self.slot_backend.update({e[2]: e[3] for e in self.events if e[0] == "grad_read"})
        self.slot_backend.update({e[4][0]: e[4][3] for e in self.events if e[0] == "action" and e[4] is not None})
        self.grad_meta = {e[2]: tracer.meta[e[2]] for e in self.events if e[0] == "grad_read"}
        self.grads_read = list({id(e[1][1]) if e[1][0] == EXT else e[1]: e[1] for e in self.events
                                if e[0] == "grad_read"}.values())
        self.runs = self.replays = self.kernels = 0
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

    def fits(self) -> bool:
        """Whether every tensor from outside still has the shape, dtype, device and flag
        the trace saw (a parameter moved: trace again), and no module had a member
        replaced or an attribute set since (a layer replaced, ``.eval()``: the function
        may reach other tensors, or take another path), or every such change was
        undone since (``.eval()`` for an evaluation, then ``.train()``)."""
        if hooks.post_hook_changes[0] != self.post_hooks:
            return False
        if _MODULE_CHANGES[0] != self.modules:  # a change since the trace: unless undone (eval(), then train())
            if not modules_restored(self.modules):
                return False
            self.modules = _MODULE_CHANGES[0]
        for members, items in self.member_lists:  # an item replaced in place: model.layers[0] = other
            if not unchanged(members, items):
                return False
        for t, post in self.hook_leaves:  # a hook added since on a leaf of a pass a check moved past (__init__)
            if hooks.hooked(t, post):
                return False
        for t, shape, dtype, backend, rg in self.externals:
            data = t._data
            if data.dtype != dtype or tuple(data.shape) != shape or t._backend is not backend or t._rg != rg:
                return False
        for group, key, value in self.options:  # an optimizer's option the trace used as a number (lr * p.grad)
            if not _equal(dict.get(group, key, _NOT_KEYED), value):
                return False
        return True

    def replay(self, args: list):
        """The recorded call on ``args``' arrays: its result. An error before anything
        changed state (an operation's, a check's: one the eager call may have caught)
        is a :class:`_Retry`, after which the call runs eagerly; after, it propagates."""
        self.changed = False  # set by _replay at the first change of state
        try:
            return self._replay(args)
        except _Stale:
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
            elif kind == "fused":  # a run of element-wise operations: one program
                fn = event[1]
                if fn is None:  # its first replay: the program as Python
                    fn = event[4].flat(event[4].backend)
                    self.events[i] = ("fused", fn, *event[2:])
                with event[4].backend.quiet():
                    for slot, out in zip(event[3], fn(*[get(s) for s in event[2]])):
                        slots[slot] = out
            elif kind == "several":  # a decomposition: its outputs, and in the graph the nodes eager's has
                self._several(event, slots, get, backwards)
            elif kind == "draw":  # a random draw: a new one each time, from the generator, as eagerly
                out = event[1](*event[2])
                slots[event[3]] = out if type(out) is event[4].array_type else event[4].as_array(out)
            elif kind == "const":  # a tensor made in the call: a new one each time, as eagerly
                slots[event[2]] = event[3].copy(event[1])
            elif kind == "check":
                event[1](*[get(src) for src in event[2]])
            elif kind == "host":  # a number read on the host, which the call returns
                slots[event[3]] = event[1](event[4], get(event[2][0]))
            elif kind == "backward":
                self.changed = True
                self._backward(event, get, backwards, args)
            elif kind == "autograd":  # autograd.grad: its gradients are values of the call
                self._backward(event, get, backwards, args, slots)
            elif kind == "leaf":  # a leaf made in the call on values it has (lp.func.grad's input)
                slots[event[2]] = get(event[1])
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
        return self._result(self.outputs, slots, args)

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
    def _backward(event, get, backwards, args, slots=None):
        """One backward pass: ``get(source)`` reads the replay's arrays. An autograd.grad
        (an ``autograd`` event) writes no ``.grad``: the gradients of its targets, copied, go
        to their ``slots``."""
        _, seeds, schedule, backend = event[:4]
        targets = event[4] if slots is not None else None
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
            if hooks._grad_hooks_registered:  # each leaf's gradient of the pass through its hooks, as eagerly
                with no_grad():
                    for t, (g, _) in leaves.items():
                        if type(t) is not tuple and hooks.hooked(t, post=False):  # (looked up now: those there are)
                            leaves[t] = (_with_grad_hooks(t, g), False)  # (a hook may keep it: .grad is a copy)
        if targets is not None:
            for k, key in enumerate(targets):
                if key[0] != "node" and leaf_tensor(*key) in leaves:
                    found[k] = leaves[leaf_tensor(*key)][0]
            for k, slot in event[5]:
                slots[slot] = backend.copy(found[k])
            return
        with grad_lock:
            for t, (g, fresh) in leaves.items():
                if type(t) is not tuple:  # (a leaf made in the call, ("leaf", slot): no result is it)
                    _store(t, g, fresh)
        if hooks._hooks_registered:  # the leaves' post-accumulate hooks (DDP's averaging), as eagerly
            hooks._run_post_hooks(leaves)

    def _result(self, spec, slots, args, made=None):
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
            if made is not None:
                made[id(spec)] = t
            return t
        if kind == "py":
            return spec[1]
        if kind == "host":
            return slots[spec[1]]
        made = {} if made is None else made
        if kind is dict or kind is collections.OrderedDict:
            return kind((key, self._result(v, slots, args, made)) for key, v in spec[1].items())
        items = [self._result(v, slots, args, made) for v in spec[1]]
        return kind._make(items) if hasattr(kind, "_make") else kind(items)  # a named tuple takes its fields


# ---- the compiled function -------------------------------------------------------------------


class Compiled:
    """``fn`` traced at its first call with each kind of arguments, replayed at the
    next (see :func:`compile`). ``explain()`` says what was traced."""

    def __init__(self, fn, cache_size: int, fuse: bool = True):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.fuse = fuse
        function, self._owners = _unwrapped(fn)  # (what a method, a partial or a callable object runs)
        self._function = function
        self.cache_size = cache_size
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._warned: set = set()
        self._returns = _UNREAD  # _returned_reads(fn), read at the first trace
        self._attrs = _UNREAD  # the attribute names the function's code names (_attribute_names): at the first trace
        self._escaped: set = set()  # keys whose trace kept a tensor made in the call: one more trace, then eagerly
        self._unsettled: set = set()  # keys whose last trace changed Python state a replay would not change
        self.calls = {"traced": 0, "replayed": 0, "eager": 0}
        self.off = _disabled()  # LEANPASS_COMPILE=0 when it was made: every call eagerly

    def __get__(self, obj, objtype=None):  # @lp.compile on a method: bound as a function is (the instance keyed)
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        if self.off or TRACER[0] is not None:  # turned off, or called inside a traced call: eagerly
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        try:
            key, tensors, objects = _call_key(args, kwargs)
            entry = self._entries.get(key)  # (an unhashable argument raises here)
        except TypeError as exc:  # an argument that cannot be a key (a NumPy array): every call is eager
            if str(exc) == "an iterator argument":
                self._warn("runs eagerly: an iterator argument (a replay would not advance it; pass what it "
                           "gives)", "the call")
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        if entry is None:
            return self._trace(key, tensors, objects, args, kwargs)
        if len(self._entries) > 1:
            self._entries.move_to_end(key)
        if isinstance(entry, str):  # it could not be traced: eagerly
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        if (not entry.fits() or not all(map(_same, _values(entry.name_reads), entry.names))
                or (entry.hook_args and any(hooks.hooked(tensors[i], post) for i, post in entry.hook_args))):  # (Plan)
            return self._trace(key, tensors, objects, args, kwargs)
        if not (_state_kept(entry.object_state) and _state_kept(entry.named_state)):
            self._warn("traced again: an attribute its code reads, of an argument or of an object it names (a "
                       "global cfg), was set since the last call, or an item of a dict or list it names "
                       "(CFG['lr'])", "the call")
            return self._trace(key, tensors, objects, args, kwargs)
        # the host generator's state where the replay draws (dropout's masks on the CPU): a
        # replay that falls back gives its draws back, so the eager call draws as eagerly
        drawn = _backends_base._host_rng.bit_generator.state if entry.draws else None
        try:
            out = entry.replay(tensors)
        except (_Stale, _Retry) as exc:  # a shape the trace did not see: eagerly from now on; an error: this once
            if drawn is not None:
                _backends_base._host_rng.bit_generator.state = drawn
            if isinstance(exc, _Stale):
                self._fall_back(key, (f"a replay met {exc}", "replay"))
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        except BaseException:  # after a change of state: raised as eagerly; the next call traces again
            if self._entries.get(key) is entry:
                del self._entries[key]
            raise
        self.calls["replayed"] += 1
        return out

    def _trace(self, key, tensors, objects, args, kwargs):
        self._entries.pop(key, None)
        if self._attrs is _UNREAD:
            self._attrs = _attribute_names(self._function)
        # the functions the call's code reaches (its helpers, its layers' forward), the host generators they may
        # draw from, and the names they read (helper's global SCALE: checked before each replay too)
        generators, reached, makers, held = _host_generators(self._function, [*objects, *self._owners])
        reads = _names_read(reached)
        # the attributes of the arguments and the owner its code names, or a helper's reached (self.helper(x)
        # reading self.scale, helper(x, cfg) reading cfg.scale)
        attrs = None if self._attrs is None else self._attrs.union(*(_attribute_names(f) for f in reached[1:]))
        modules, names = _MODULE_CHANGES[0], _values(reads)
        # Python state the call may change: snapshots first (they hold the objects: the
        # references the tracer counts below, before and after the call, include theirs)
        words = frozenset().union(*(_words(f) for f in reached))  # (a config module passed on: what is read)
        named = _merged([*(x for fn in reached for x in _named_objects(fn, words)),  # (cfg.scale, CFG["lr"],
                         *((obj, words) for obj in held)])  # config.lr; self.cfg.scale in a layer's forward)
        named_state = _named_state(named)
        python = _python_state((args, kwargs), [*objects, *self._owners], attrs) + named_state
        given = [v for v in (*objects, *self._owners) if isinstance(v, Module)]  # (a model passed in, a method's own)
        members = _named_members(names) + _named_members(given)
        tracer = Tracer(tensors)
        tracer.holders = [c for c, _ in holding_members([args, kwargs], tuples=True)  # (not the call's own
                          if c is not args and c is not kwargs]  # tuple and dict: made for it, and held by it)
        tracer.holder_references = _references(tracer.holders)  # (before the call; after: Tracer.escaped)
        if self._returns is _UNREAD:
            self._returns = _returned_reads(self.fn)
        tracer.returns = self._returns
        rng = _backends_base._host_rng
        host_draws = _host_draws(generators)
        hooked = hooks.post_hook_changes[0]
        modes = (is_grad_enabled(), get_default_dtype(), get_default_device())
        entropy = _host_random.EntropyWatch() if makers else None  # (a generator made without a seed)
        TRACER[0] = tracer
        try:
            if entropy is not None:
                entropy.start()
            box = [self.fn(*args, **kwargs)]  # the result, held only here (what else holds it: Tracer.escaped)
        finally:
            if entropy is not None:
                entropy.stop()
            TRACER[0] = None
            tracer.modules_called.clear()  # (held for their ids while the call ran: one it made and dropped goes)
        self.calls["traced"] += 1
        if (is_grad_enabled(), get_default_dtype(), get_default_device()) != modes:  # a replay would leave them
            tracer.unsupported("grad mode, the default dtype or the default device set inside the function and "
                               "left so (lp.set_grad_enabled, lp.set_default_dtype...)")
        if _backends_base._host_rng is not rng or rng.bit_generator.state != tracer.rng_state:
            tracer.unsupported("a random draw the trace does not record (a layer made inside, lp.manual_seed...)")
        if _host_draws(generators) != host_draws or (entropy is not None and entropy.drawn):
            tracer.unsupported("a random number drawn on the host outside LeanPass (NumPy's random, random, a NumPy "
                               "Generator, one made in the function without a seed: a replay would reuse the "
                               "trace's); draw it with lp.rand, or pass it in")
        if hooks.post_hook_changes[0] != hooked:  # a replay runs the hooks there are, and would not add this one
            tracer.unsupported("a post-accumulate-grad hook added or removed inside the function")
        if any(value is t for value in names for t in tensors):  # one object, two roles: a replay would merge them
            tracer.unsupported("an argument the function also reads by name (a global or closure variable)")
        changed = None  # Python state the call changed that a replay would leave as it is
        if not _same_state(python, _python_state((args, kwargs), [*objects, *self._owners], attrs)
                           + _named_state(named)):  # (the snapshot after: not kept, it would count as a reference)
            changed = "a list or dict argument or one the function names, or an attribute of an argument or of an " \
                      "object it names, changed by the function, or an iterator it names advanced (lst.pop(), " \
                      "d[key] = v, COUNTS['n'] += 1, self.steps += 1, cfg.calls += 1, next(it))"
        elif not all(unchanged(c, items) for c, items in members):
            changed = "a list or dict of tensors or modules the function reads by name, changed by it " \
                      "(history.append(loss), a module's list of layers)"
        tracer.check_watched()
        # (module changes the call undid, or made to modules it made and dropped, as a loss module built
        # in the step: a replay that makes none leaves the modules as the call left them)
        retrace = ((_MODULE_CHANGES[0] != modules and not modules_restored(modules))
                   or not all(map(_same, _values(reads), names)) or tracer.state_changed)
        if retrace and tracer.reason is None:  # the call changed Python state a replay would not change
            what = ("the function changed a module's attributes or members, an optimizer's options, or rebound a "
                    "name it reads (a replay would not)")
            if key in self._unsettled:  # at two traces in a row: at every call (a running average rebound), so
                self._unsettled.discard(key)  # eagerly from now on: a trace costs more than the eager call
                self._fall_back(key, (f"{what}, at two calls in a row", _where_defined(self.fn)))
                return box[0]
            self._unsettled.add(key)
            self._warn(f"{what}; it is traced again at the next call", "trace")
            return box[0]  # no entry: the next call traces again (a module's first call may set up a cache)
        self._unsettled.discard(key)
        plan = tracer.plan(box[0], self.fuse)
        kept = (tracer.escaped(box) or changed) if plan is not None else None
        if kept is not None:
            if key not in self._escaped:  # once: a cache filled at the first call (a mask made once): trace again
                self._escaped.add(key)
                return box[0]
            plan, tracer.reason = None, (f"{kept}: a replay would leave it as the first call made it",
                                         _where_defined(self.fn))
        if plan is not None:
            plan.name_reads, plan.names = reads, names
            plan.objects = objects  # (the arguments keyed by their ids: held, the ids are not reused)
            plan.named, plan.named_state = named, named_state
            # the attributes of the plain objects among the arguments and of the callable's own (_unwrapped) that
            # the function's code, or a helper's it reaches, names (attrs): what a caller may change between calls
            plan.object_state = _python_state((), [*objects, *self._owners], attrs)
            plan.member_lists = plan.member_lists + members
        if plan is None:
            self._fall_back(key, tracer.reason)
        else:
            self._entries[key] = plan
            while len(self._entries) > self.cache_size:
                self._entries.popitem(last=False)
        return box[0]

    def _fall_back(self, key, reason) -> None:
        what, where = reason
        self._entries[key] = f"{what} ({where})"
        while len(self._entries) > self.cache_size:
            self._entries.popitem(last=False)
        self._warn(f"runs eagerly for these arguments: {what}", where)

    def _warn(self, what: str, where: str) -> None:
        if what not in self._warned:  # once per function and reason
            self._warned.add(what)
            name = getattr(self, "__name__", None) or repr(self.fn)  # (a callable object, a partial: no name)
            level, frame = 1, sys._getframe()  # (the warning names the first frame outside LeanPass: the caller's)
            while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
                level, frame = level + 1, frame.f_back
            warnings.warn(f"lp.compile: {name} {what} at {where}", RuntimeWarning, stacklevel=level)

    def explain(self) -> str:
        """What was traced: per cache entry, the operations, backward passes, in-place
        changes, steps and constants it replays, or why it runs eagerly; and the calls
        so far."""
        lines = [f"lp.compile({getattr(self.fn, '__qualname__', self.fn)!s}): {len(self._entries)} cache "
                 f"entr{'y' if len(self._entries) == 1 else 'ies'} (at most {self.cache_size}); calls: "
                 + ", ".join(f"{n} {k}" for k, n in self.calls.items())
                 + (" (LEANPASS_COMPILE=0: compilation is off)" if self.off else "")]
        for i, (key, entry) in enumerate(self._entries.items()):
            shapes = [k for k in _flat_tensor_keys(key[:2])]
            head = f"  [{i}] arguments {', '.join(shapes) or '(no tensors)'}:"
            if isinstance(entry, str):
                lines.append(f"{head} eager: {entry}")
                continue
            c = entry.counts
            passes = c["backward"] + c["autograd"]
            of_grad = f" ({c['autograd']} of them autograd.grad)" if c["autograd"] else ""
            lines.append(f"{head} replays {c['op']} operations, {passes} backward pass"
                         f"{'es' * (passes != 1)}{of_grad}, {c['inplace']} in-place changes, "
                         f"{c['action']} steps ({', '.join(entry.actions) or 'none'}), {entry.constants} constants, "
                         f"{c['draw']} random draws, {c['host']} numbers read on the host; "
                         f"{len(entry.externals)} tensors from outside, checked before each replay; "
                         f"fusion: {entry.fusion()}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<lp.compile of {self.fn!r}>"


def _where_defined(fn) -> str:
    """``file:line`` of ``fn``'s definition, for a reason that has no line of its own."""
    code = getattr(fn, "__code__", None)
    return f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}"


_TRACE_CODE = Compiled._trace.__code__  # the frame that calls the traced function
_UNREAD = object()  # Compiled._returns before the first trace reads the source


def _flat_tensor_keys(key):
    if isinstance(key, tuple) and key and key[0] == "T":
        yield f"{key[2]}{list(key[1])}{'(requires grad)' if key[4] else ''} on {key[3]}"
        return
    if isinstance(key, tuple):
        for item in key:
            yield from _flat_tensor_keys(item)


def compile(fn=None, *, cache_size: int = 8, fuse: bool = True):  # noqa: A001 - PyTorch's and MLX's name
    """``fn`` traced at its first call with each kind of arguments (shapes, dtypes,
    devices, ``requires_grad`` flags, Python values), replayed at the next without
    building the graph. Usable as ``@lp.compile`` and ``@lp.compile(cache_size=...,
    fuse=...)``. ``cache_size`` bounds the traces kept (the least recently used goes).

    With ``fuse`` (the default), runs of element-wise operations, and their backward
    rules, replay as one program each (:mod:`leanpass._fusion`): the same kernels
    without the Python between them, the same results bit for bit; on ``cpu`` with
    Numba, from the second replay on, one compiled loop each, whose rounding may
    differ from eager's by a few ulp. ``fuse=False`` replays every operation as it
    ran: eager's results, bit for bit, always. ``LEANPASS_COMPILE=0`` turns
    compilation off everywhere (read when the function is compiled), ``LEANPASS_FUSE=0``
    fusion. What cannot be replayed
    runs eagerly, with a warning (see docs/compile.md)."""
    if fn is None:
        return lambda f: compile(f, cache_size=cache_size, fuse=fuse)
    if not callable(fn):
        raise TypeError(f"compile: fn must be callable, got {type(fn).__name__}")
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        raise ValueError(f"compile: cache_size must be a positive integer, got {cache_size!r}")
    if not isinstance(fuse, bool):
        raise TypeError(f"compile: fuse must be True or False, got {fuse!r}")
    return Compiled(fn, cache_size, fuse)
