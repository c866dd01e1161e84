"""What a compiled call's code reaches, beside its tensors: the function a compiled
callable runs, the helpers, layers and methods it leads to, the names they read,
the plain objects, dicts, modules and classes they name, and the host random
generators among them (read from the code, :mod:`dis`, before a trace)."""

from __future__ import annotations

import dis
import functools
import io
import math
import os
import sys
import sysconfig
import types
import weakref

from ..backends import _host_random
from ..nn.module import Module
from ..tensor import Tensor

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # leanpass/


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
    among the attributes of the layers reached (``self.cfg`` read in a ``forward``), the
    dicts and lists among those of the layers of the user's classes (``self.hparams``),
    the objects of the bound methods and the arguments of the partials reached."""
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
                    method = getattr(v, "__func__", None)  # (self.transform = self.aug.apply: its code)
                    if (type(method) is types.FunctionType and id(method.__code__) not in seen
                            and _users_file(method.__code__.co_filename)):
                        todo.append((method, 1))
                    v = v.__self__
                    if _plain(v) and id(v) not in reached:  # (apply = aug.apply, a global: aug.k read by apply)
                        held.append(v)
                elif type(v) is functools.partial and id(v) not in reached:  # (act = partial(helper, cfg=obj))
                    reached.add(id(v))
                    held += [a for a in v.args if _plain(a)]  # (and the objects in its keywords, through their
                    held += [v.keywords] if v.keywords else []  # dict: act.keywords["cfg"] = other too)
                    more += [v.func, *v.args, *v.keywords.values()]
                    continue
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
                    held += [a for a in _attributes([m for m in layers if _configuration(type(m))], names)
                             if issubclass(type(a), (dict, list))]  # (self.hparams["t"] in a layer of the user's)
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
        try:
            attributes = getattr(obj, "__dict__", None)
        except Exception:  # (a proxy whose attributes raise outside its context)
            continue
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


# ---- the key of a call -----------------------------------------------------------------------

_NOT_KEYED = object()


def _named_objects(fn, words=frozenset()) -> list:
    """``(object, names)`` for the plain objects ``fn`` reads by name (a global ``cfg``, a
    closure's): the attributes its code loads on that name (``cfg.scale``; ``cfg.train``
    for ``cfg.train.lr``: the plain objects it holds are read by ``words``, the names of
    the code reached, :func:`leanpass._compile.state._named_state`), whose values a
    replay checks; all of them (None) where the code calls one of its methods
    (``logger.log()``, ``pbar.update(1)``: what the method reads or sets is not in the
    code), but for the steps a replay calls again (a scheduler's ``step``), or uses it
    otherwise (passed to a helper, aliased, ``getattr``). A module or a class of the
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
        root = None  # the name loaded right before (an attribute of it may follow)
        fresh = False  # whether the root was loaded right before: no attribute of it loaded yet
        for ins in dis.get_instructions(c):
            if fresh and ins.opname not in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR", "COPY",
                                             "DUP_TOP", "EXTENDED_ARG"):
                whole.add(root)  # (what is done with it is not in this code: subscripted, passed, stored)
            was_fresh, fresh = fresh, False
            if root is not None and ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "DELETE_ATTR"):
                loaded.setdefault(root, set()).add(ins.argval)  # (cfg.train.lr: train; the object it holds is
                # read by the names of the code reached, ``words``: lr among them)
                if _loads_method(ins):  # (logger.log(), pbar.update(1): what the method reads or sets is unseen)
                    called.setdefault(root, set()).add(ins.argval)
                root = None
            elif root is not None and ins.opname in ("COPY", "DUP_TOP", "EXTENDED_ARG"):
                fresh = was_fresh  # (cfg.calls += 1: the object copied, its attribute loaded, changed, stored;
                # a = b = cfg: copied, then stored)
            else:
                root = ins.argval if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF") else None
                fresh = root is not None
    found = []
    for name in sorted(loaded.keys() | whole):
        if name not in values:
            continue
        value = values[name]
        if issubclass(type(value), (dict, list)):  # (all its items: a reader the walk does not reach, a function
            # kept in a dict or passed in, may read any key; a subclass's own attributes, STATE.step: those loaded
            # on it, or those of the code reached where it is used otherwise, STATE["lr"]; all where it runs a
            # method of its class's a replay does not)
            everything = any(m not in vars(dict) and m not in vars(list)
                             and not getattr(getattr(type(value), m, None), "action", False)
                             for m in called.get(name, ()))
            found.append((value, None if everything or not _attributed(value) else
                          frozenset(loaded.get(name, ())) | (words if name in whole else frozenset())))
        elif isinstance(value, types.ModuleType):  # (a config module: the names loaded on it, or those of the
            if _configuration(value):  # code reached where it is used otherwise: never all of it)
                found.append((value, frozenset(loaded.get(name, ())) | (words if name in whole else frozenset())))
        elif _plain(value) or _configuration(value):  # (lp.compile's own: left out by _python_state)
            # (all its attributes where it runs a method a replay does not, or it is used otherwise)
            everything = name in whole or any(not getattr(getattr(type(value), m, None), "action", False)
                                              for m in called.get(name, ()))
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


def _words(fn) -> frozenset:
    """The names ``fn``'s code loads (:func:`_attribute_names`) and the strings it holds
    (``getattr(cfg, "scale")``)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return frozenset()
    return _attribute_names(fn) | {k for c in _codes(code) for k in c.co_consts if type(k) is str}


def _loads_method(ins) -> bool:
    """Whether the instruction ``ins`` loads an attribute to call it (``opt.step()``):
    ``LOAD_METHOD`` before Python 3.12, ``LOAD_ATTR`` with its low bit set since."""
    return ins.opname == "LOAD_METHOD" or (ins.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)
                                           and ins.arg & 1)


def _called_only(functions) -> frozenset:
    """The attribute names that ``functions``' code loads only to call a method
    (``opt.step()``, ``loss.backward()``), never as a value (``self.step += 1``,
    ``cfg.step``, ``getattr(c, "step")``): an attribute of that name whose value is no
    callable cannot be what the code reads (:class:`leanpass._compile.state.Names`)."""
    called, values = set(), set()
    for fn in functions:
        code = getattr(fn, "__code__", None)
        for c in _codes(code) if code is not None else ():
            for ins in dis.get_instructions(c):
                if _loads_method(ins):
                    called.add(ins.argval)
                elif ins.opname in ("LOAD_ATTR", "STORE_ATTR", "DELETE_ATTR"):
                    values.add(ins.argval)
            values.update(k for k in c.co_consts if type(k) is str)
    return frozenset(called - values)


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


def _compiled_function(value) -> bool:
    """Whether ``value`` is a function ``lp.compile`` made (called inside a traced call,
    it runs eagerly, its operations recorded in the trace): no configuration, and its
    counts and cache change at each call."""
    module = getattr(type(value), "__module__", None)  # (a descriptor, not a name, for a class met on Python 3.10)
    return isinstance(module, str) and module.startswith("leanpass._compile.")


def _plain(value) -> bool:
    """Whether ``value`` is an object whose attributes a call may read (``cfg.scale``):
    one with a ``__dict__`` or slots, not a module, class, function, layer or Tensor; a
    tuple, list or dict only of a subclass with attributes of its own
    (:func:`_attributed`, ``class Cfg(dict)``)."""
    try:
        if isinstance(value, (list, tuple, dict)):
            return _attributed(value)
        return (hasattr(value, "__dict__") or hasattr(type(value), "__slots__")) and not isinstance(
            value, (types.ModuleType, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                    functools.partial, Module, Tensor))
    except Exception:  # (a proxy whose attributes raise outside its context)
        return False


def _attributed(value) -> bool:
    """Whether ``value``, a tuple, list or dict, is of a subclass and holds attributes
    of its own that are not its items (``class Cfg(dict)`` with ``cfg.scale``, which a
    call may read; not an ``OrderedDict`` or a named tuple without, nor an
    ``EasyDict``, whose attributes are its items). One whose attributes raise when
    read counts (a replay must read them, and cannot)."""
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        return False
    try:
        return bool(own_attributes(value))
    except Exception:
        return True


def own_attributes(value, slots: bool = True) -> dict:
    """The attributes of ``value``'s own (``__dict__``; slots set, with ``slots``) that
    are not its items (an attribute dict's, whose ``__dict__`` is itself or holds its
    items again: ``EasyDict``, ``AttrDict``). Slots are read through their
    descriptors (an unset one is absent; a ``__getattr__`` is not asked)."""
    kind = type(value)
    own = vars(value) if kind.__dictoffset__ else {}
    found = {name: got for name, slot in (_slots(kind) if slots else ()) if (got := _slot(value, slot)) is not _ABSENT}
    if own and own is not value:
        mirrored = dict.get if isinstance(value, dict) else None
        found.update((k, v) for k, v in own.items() if mirrored is None or mirrored(value, k, _ABSENT) is not v)
    return found


def _slot(obj, descriptor):
    """The value of a slot of ``obj``, or :data:`_ABSENT` where it is not set."""
    try:
        return descriptor.__get__(obj, type(obj))
    except AttributeError:
        return _ABSENT


_ABSENT = object()


def _slots(cls) -> tuple:
    """``(name, descriptor)`` of the slots of ``cls`` and its bases (not ``__dict__``,
    ``__weakref__``), by the names they are stored under (``__scale`` of a class
    ``Scaled`` as ``_Scaled__scale``, whatever the class is called since): a class's
    slots are made with it, so each class is read once, kept by identity (not by hash
    or ``==``, which a metaclass may define, raise in, or make equal for two classes of
    one name: a class defined again in a notebook)."""
    kept = _SLOTS.get(id(cls))
    if kept is not None and kept[0]() is cls:
        return kept[1]
    found = tuple((name, d) for base in cls.__mro__ if "__slots__" in vars(base)
                  for name, d in vars(base).items() if type(d) is types.MemberDescriptorType)
    if len(_SLOTS) >= 1024:  # (classes made on the fly: a bound)
        _SLOTS.clear()
    _SLOTS[id(cls)] = (weakref.ref(cls), found)
    return found


_SLOTS: dict = {}  # id(class) -> (a weak reference to it, its slots)


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
