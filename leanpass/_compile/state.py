"""The key of a call (its tensors' shapes, dtypes, devices and flags, its Python
values) and the snapshots of the Python state a replay would not change (the
items of dicts and lists, the attributes of plain objects, iterators), compared
after a trace and before each replay."""

from __future__ import annotations

import collections
import enum
import functools
import itertools
import math
import numbers
import operator
import os
import pathlib
import types

from .._graph.modes import is_grad_enabled
from ..backends import get_default_device, get_default_dtype
from ..backends._values import comparable, nbytes, same_values, snapshot
from ..nn.module import Module, _same_value, holding_members, items_of
from ..tensor import Tensor
from .code import (
    _ABSENT,
    _ITERATOR,
    _NOT_KEYED,
    _attributed,
    _compiled_function,
    _configuration,
    _inspectable,
    _is_iterator,
    _plain,
    _slot,
    _slots,
    own_attributes,
)


def _tensor_key(value) -> tuple:
    data = value._data  # (the dtype itself: its str() is slow in NumPy)
    # (a leaf that requires grad gets a .grad; a value of a graph made outside, of the same kind, does not)
    return ("T", tuple(data.shape), data.dtype, value._backend.device, value._rg, value._node is None)


def _integer_or_none(value) -> bool:
    """None, a Python int (or bool), or a NumPy integer scalar: a slice's bound keyed by value."""
    return (value is None or type(value) in (int, bool)
            or (isinstance(value, numbers.Integral) and getattr(value, "shape", None) == ()))


def _key_of(value, tensors: list, objects: list | None = None):
    """A hashable description of ``value``: a Tensor by its kind (and collected in
    ``tensors``), containers item by item (a dict's keys too), Python scalars and
    strings by value, NumPy scalars by dtype and value, ranges and slices of integers,
    frozensets of numbers and strings, and paths by value, a value of a subclass by its
    class too (:func:`_subclass_key`), any other object by identity (a module passed
    in: the same module; a NumPy array, named apart for the warnings)."""
    if isinstance(value, Tensor):
        tensors.append(value)
        return _tensor_key(value)
    if isinstance(value, (tuple, list)):
        items = tuple(_key_of(v, tensors, objects) for v in value)
        kind = type(value)
        if kind is tuple or kind is list:
            return (kind.__name__, items)
        return _subclass_key(value, items, tensors, objects)
    if isinstance(value, dict):  # (in their order: a function may iterate them; keys as values: -0.0 is not 0.0,
        # True not 1, an object by identity, whatever its == says)
        items = tuple((_key_of(k, tensors, objects), _key_of(v, tensors, objects)) for k, v in value.items())
        return ("dict", items) if type(value) is dict else _subclass_key(value, items, tensors, objects)
    kind = type(value)  # (told by identity: a metaclass's == may raise)
    if kind is float:  # -0.0 is not 0.0 (1 / s); NumPy's float64, a float too, below (another dtype)
        return ("float", value, math.copysign(1.0, value))
    if value is None or kind is bool or kind is int or kind is str or kind is bytes:
        return (kind.__name__, value)
    if issubclass(kind, complex):  # (the signs of its parts, as a float's: 1 / complex(0.0, -0.0); NumPy's too)
        return ("complex" if kind is complex else _Kind(kind), _key_of(value.real, tensors, objects),
                _key_of(value.imag, tensors, objects))
    if issubclass(kind, enum.Enum) and issubclass(kind, (int, str)):  # (an IntEnum's, IntFlag's or StrEnum's
        # member: its class, name and value, not its value alone; a flag of no name, P(4), by its value)
        return (_Kind(kind), value._name_, _key_of(value._value_, tensors, objects))
    if issubclass(kind, (int, str, bytes)):  # (class Level(int), whose level.label a call may read: its value as
        # the base class has it, not by its own == and hash, which may call two apart alike, or raise; the type,
        # not __class__, which a proxy may claim)
        return _subclass_key(value, int.__int__(value) if issubclass(kind, int) else str.__str__(value)
                             if issubclass(kind, str) else bytes(memoryview(value)), tensors, objects)
    if kind is range or (kind is slice and all(map(_integer_or_none, (value.start, value.stop, value.step)))):
        # (values, not objects: x[s] with a new but equal slice at each call)
        return (kind.__name__, *(_key_of(v, tensors, objects) for v in (value.start, value.stop, value.step)))
    if kind is slice:  # (a bound of its own, an __index__ a loop advances: read anew at each use)
        raise TypeError("a slice argument of objects")
    if kind is frozenset and all(id(type(v)) in _VALUES for v in value):  # (a new one at each call, a dict's key:
        # in its order, which two equal ones may not share)
        return ("frozenset", tuple(_key_of(v, tensors) for v in value))
    if issubclass(kind, pathlib.PurePath):  # (its own attributes, a subclass's; not pathlib's cached slots)
        return _subclass_key(value, os.fspath(value), tensors, objects, slots=False)
    if getattr(value, "shape", None) == () and hasattr(value, "item") and hasattr(value, "dtype"):  # a NumPy scalar
        return ("scalar", str(value.dtype), _key_of(value.item(), tensors, objects))
    if _is_iterator(value):  # (a replay would not advance it: every call runs eagerly; a file given to write a log
        # to is no iterator here; read from the type's attributes: an unhashable class takes no ABC check)
        raise TypeError("an iterator argument")
    if objects is not None:
        objects.append(value)  # kept by the trace: its id is not reused while the entry lives
    if _is_array(value):
        return ("array", id(value))  # (by identity too: NumPy code on it is not recorded; named apart in warnings)
    return ("id", id(value))


_VALUES = frozenset(map(id, (type(None), bool, int, float, str, bytes)))  # what a frozenset keyed by value holds


class _Kind:
    """A subclass (of tuple, list, dict, int, str, bytes, complex, a path, an enum's) in
    a call's key, told by identity: two named tuples of one name and other fields are
    not alike (``p.a`` is another place), and a metaclass's ``==`` or ``hash``, which
    may raise or call two classes equal, is not asked."""

    __slots__ = ("kind",)

    def __init__(self, kind):
        self.kind = kind

    def __eq__(self, other):
        return type(other) is _Kind and other.kind is self.kind

    def __hash__(self):
        return id(self.kind)

    def __repr__(self):
        return getattr(self.kind, "__qualname__", "?")


def _subclass_key(value, items, tensors: list, objects, slots: bool = True) -> tuple:
    """The key of an instance of a subclass of tuple, list, dict, int, str, bytes or a
    path (a named tuple, an ``OrderedDict``, ``class Cfg(dict)``): its class by
    identity, its items (``_key_of``'s) or value, and its own attributes
    (:func:`own_attributes`, not those that are its items: an ``EasyDict``'s), each
    a number, string or Tensor by value, anything else by identity (kept among
    ``objects``: its attributes or items compared where the code reads them; not
    walked into, which may lead back to ``value``). A class of the user's goes among
    ``objects`` too (its attributes the code reads, ``Cfg.scale``, compared)."""
    kind = type(value)
    try:
        own = own_attributes(value, slots)
    except Exception as exc:  # (a __dict__ or slot that raises: what a replay cannot compare, eagerly)
        raise TypeError("an argument whose attributes cannot be read") from exc
    if objects is not None and _configuration(kind):
        objects.append(kind)
    if not own:
        return (_Kind(kind), items)
    return (_Kind(kind), items, tuple((name, _attribute_key(v, value, tensors, objects)) for name, v in own.items()))


def _attribute_key(value, owner, tensors: list, objects):
    """The key of an attribute of a subclassed value ``owner`` (:func:`_subclass_key`)."""
    if value is owner:
        return ("self",)
    if value is None or id(type(value)) in _SCALAR_TYPES or isinstance(value, Tensor):
        return _key_of(value, tensors, objects)
    if objects is not None:
        objects.append(value)  # (kept by the trace: its id is not reused while the entry lives)
    return ("id", id(value))


_SCALAR_TYPES = frozenset(map(id, (bool, int, float, complex, str, bytes)))  # (ids: a metaclass's == may raise)


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
        elif not issubclass(type(v), (int, str, bytes, pathlib.PurePath)):
            continue
        kind = type(v)
        if kind.__dictoffset__ or _slots(kind):  # (not dict's, list's, int's...: their own classes have neither)
            state.append((v, _own_items(v), _own_items))  # (a subclass's own attributes: one the call sets, b.done =
            # True, level.seen = True, is a change a replay would not make)
    stack, seen = list(objects), set()
    while stack:  # the objects, and the plain objects among their attributes (cfg.train.scale)
        obj = stack.pop()
        if (id(obj) in seen or isinstance(obj, (Module, Tensor, types.FunctionType, types.MethodType))
                or (isinstance(obj, type) and not any(obj is o for o in objects)  # (a class named: its values;
                    and not _configuration(obj))  # one of the user's held by a configuration, Config.train.lr)
                or (hasattr(type(obj), "_traced_state") and _leanpass_own(obj))  # (a watched one of LeanPass's:
                # an optimizer, a scheduler; a class of the user's is compared as any object, self.beta read)
                or _compiled_function(obj)  # (lp.compile's, wherever it is held: its counts change at each call)
                or (_leanpass_own(obj) and not any(obj is o for o in objects))):  # (a backend, a compiled
            continue  # function an object holds: no configuration, and the latter's counts change at each call)
        seen.add(id(obj))
        if isinstance(obj, (collections.deque, set, frozenset)):  # (a deque of the last frames: its items)
            state.append((obj, tuple(obj), tuple))
            continue
        if issubclass(type(obj), (dict, list)):  # (a partial's dict argument: its items)
            stack += _container_state(obj, state)
            if not _attributed(obj):
                continue  # (else its attributes too, below: class Cfg(dict) with cfg.scale)
        if _is_iterator(obj):  # (a partial's iterator argument: as advanced)
            state.append((obj, _position(obj), _position))
            continue
        read = functools.partial(_attribute_items, names=names if nested is _NOT_KEYED
                                 or any(obj is o for o in objects) else nested)
        try:
            attrs = _object_attributes(obj, read.keywords["names"])
        except Exception:  # (a proxy whose attributes raise outside its context: a change at every read)
            state.append((obj, (_Unreadable(),), read))
            continue
        # (each plain object, also with none of those attributes yet: one set on it later is a change)
        state.append((obj, tuple(itertools.chain.from_iterable(attrs.items())), read))
        for v in attrs.values():
            kind = type(v)  # (not isinstance: a proxy's __class__ may raise outside its context)
            if issubclass(kind, (list, dict, tuple)):  # (cfg.w[0] = 3.0: its items; a long list's length alone;
                stack += _container_state(v, state)  # self.loaders["train"]: an iterator in it, as advanced)
                if _attributed(v):  # (and its attributes: self.cfg.scale of a class Cfg(dict))
                    stack.append(v)
            elif (issubclass(kind, (collections.deque, set, frozenset)) or _plain(v)
                  or (issubclass(kind, type) and _configuration(v))):  # (Config.train.lr)
                stack.append(v)
            elif _inspectable(v) and _is_iterator(v):  # (next(self.batches): as advanced)
                state.append((v, _position(v), _position))
    return state


def _attribute_items(obj, names) -> tuple:
    """A plain object's entry in a :func:`_python_state` snapshot: the attributes
    :func:`_object_attributes` reads, names and values side by side; where they raise,
    an object of its own (:class:`_Unreadable`), a change at every read: what a replay
    cannot read, it cannot tell unchanged."""
    try:
        return tuple(itertools.chain.from_iterable(_object_attributes(obj, names).items()))
    except Exception:
        return (_Unreadable(),)


def _own_items(value) -> tuple:
    """The attributes of ``value``'s own (:func:`own_attributes`), names and values side
    by side, or an :class:`_Unreadable` where they raise."""
    try:
        return tuple(itertools.chain.from_iterable(own_attributes(value).items()))
    except Exception:
        return (_Unreadable(),)


class _Unreadable:
    """The entry of an object whose attributes raise when read (a proxy outside its
    context, whose ``__dict__`` raises): a new one
    at each read, so a replay traces again (from the third time in a row, the call runs
    eagerly), where a constant entry let replays keep the trace's values of attributes
    the code reads well."""

    __slots__ = ()


def _unreadable(snapshot) -> bool:
    """Whether an object of ``snapshot`` (:func:`_python_state`'s) raised when read."""
    return any(type(items) is tuple and len(items) == 1 and type(items[0]) is _Unreadable
               for _, items, _ in snapshot)


def _leanpass_own(obj) -> bool:
    """Whether ``obj`` is an instance of one of LeanPass's own classes."""
    module = getattr(type(obj), "__module__", None)  # (a descriptor, not a name, for a class met on Python 3.10)
    return isinstance(module, str) and module.startswith("leanpass.")


class Names(frozenset):
    """The attribute names a call's code loads (:func:`_object_attributes`' ``names``),
    with ``called``: those it loads only to call a method (:func:`_called_only`). Of an
    object's attributes of such a name, only a callable one counts (``self.step``, a
    count the loop keeps, is no ``opt.step()``)."""

    def __new__(cls, names, called=frozenset()):
        made = super().__new__(cls, names)
        made.called = frozenset(called) & made
        return made


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
    for slot, descriptor in _slots(cls):
        if (whole or slot in names) and (got := _slot(obj, descriptor)) is not _ABSENT:
            attrs[slot] = got
    for name in getattr(names, "called", ()):  # (the code only calls a method of that name: not this value)
        if name in attrs and not callable(attrs[name]):
            del attrs[name]
    for name in getattr(cls, "_leanpass_attributes", ()):  # (a subclass of the user's of an optimizer: what its
        attrs.pop(name, None)  # class adds; the base's own, its actions change and its checks look after)
    return attrs


def _position(iterator) -> tuple:
    """Where ``iterator`` stands: an object of its own each time, as if it had been
    advanced, since Python does not show it (a generator at the same ``yield`` with the
    same locals, an iterator object whose state is in another one, ``self.it``, may
    have moved on): a function that names one runs eagerly."""
    return (object(),)


def _named_state(named, words) -> list:
    """:func:`_python_state` of :func:`_named_objects`' objects, each with its names (None:
    all of its own attributes); a dict's items (:func:`_container_state`); an iterator
    as advanced. The plain objects among their attributes and items, those named
    among ``words``, the names and strings of the code reached (``TRAINER.cfg.scale``
    where the code calls ``TRAINER.fit()``, ``cfg.stages[0].scale``)."""
    state = []
    for obj, names in named:
        if names is _ITERATOR:
            state.append((obj, _position(obj), _position))
        elif issubclass(type(obj), (dict, list)):
            state += _python_state((), _container_state(obj, state), None, words)
            if _attributed(obj):  # (and its own attributes: CFG.scale of a Cfg(dict))
                state += _python_state((), [obj], names, words)  # (its items again, then those)
        else:
            state += _python_state((), [obj], names, words)
    return state


def _container_state(container, state: list, depth: int = 1) -> list:
    """Appends to ``state`` the items of the dict, list or tuple ``container`` (its length
    alone past 256), the iterators among them (as advanced: ``ITERS["train"]``) and,
    ``depth`` levels down, the dicts and lists among them (64 at most:
    ``CFG["train"]["lr"]``; a tuple's items at its own level, as it cannot change:
    ``CFG["pairs"][0][1]``). Returns the plain objects among its items and a dict's
    keys (``CFG["aug"]``, ``cfg.stages[0]``), and the items of a subclass with
    attributes of its own (:func:`_attributed`), 16 at most, whose attributes the
    caller compares."""
    state.append((container, _container_items(container), _container_items))
    if len(container) > 256:
        return []
    plain, nested = [], 0
    for v in ((*container.values(), *container) if isinstance(container, dict) else container):  # (a key too:
        # an object whose attributes the code reads, next(iter(D)).scale)
        kind = type(v)
        if issubclass(kind, (dict, list, tuple)):
            if (depth or issubclass(kind, tuple)) and nested < 64:
                nested += 1
                plain += _container_state(v, state, depth - (not issubclass(kind, tuple)))
            if _attributed(v) and len(plain) < 16:  # (its attributes: CFG["train"].scale of a Cfg(dict))
                plain.append(v)
        elif _inspectable(v) and _is_iterator(v):
            state.append((v, _position(v), _position))
        elif _plain(v) and len(plain) < 16:
            plain.append(v)
    return plain


_LONG = ("long",)  # (a long container's entry: its length, told apart from one item that is a number)


def _container_items(container) -> tuple:
    """A dict's or list's entry in a snapshot (:func:`_container_state`): its items,
    or its length alone past 256 items."""
    return (_LONG, len(container)) if len(container) > 256 else items_of(container)


def _same_state(before: list, now: list) -> bool:
    """Whether two :func:`_python_state` snapshots agree: the same containers and
    objects, holding the same items (:func:`leanpass.nn.module.unchanged`)."""
    return len(before) == len(now) and all(a is b and len(i) == len(j) and all(map(_same_value, i, j))
                                           for (a, i, _), (b, j, _) in zip(before, now))


def _state_now(snapshot: list) -> list:
    """``snapshot``'s containers and objects, each read again as it was read."""
    return [(obj, read(obj), read) for obj, _, read in snapshot]


def _state_kept(snapshot: list) -> bool:
    """Whether each container and object of a :func:`_python_state` snapshot holds
    what it held, each read again as it was read: what :func:`_same_state` says of a
    new snapshot, without walking again (the walk goes from item to item, so the same
    items lead it to the same containers and objects), in a fifth of the time for
    W1's step (a plain object of seven attributes, 18 against 4 us)."""
    for obj, items, read in snapshot:
        now = read(obj)  # (the same objects, mostly: told in C, before a call per item)
        if len(now) != len(items) or not (all(map(operator.is_, now, items)) or all(map(_same_value, now, items))):
            return False
    return True


class _Values:
    """Reads an array argument's values as a token (a :func:`_python_state` entry's
    reader): the same token while the array holds the values last read, bit for bit,
    and a new one once they change (a batch buffer refilled in place). The values are
    kept as a copy (:mod:`leanpass.backends._values`)."""

    __slots__ = ("seen",)

    def __init__(self, array):
        self.seen = (snapshot(array), object())  # (the values and their token: one attribute, set at once, so
        # that another thread's replay never pairs new values with the old token)

    def __call__(self, array) -> tuple:
        seen = self.seen
        if not same_values(array, seen[0]):
            seen = self.seen = (snapshot(array), object())
        return (seen[1],)


COMPARED_BYTES = 1 << 24  # the largest array argument whose values a replay compares (16 MiB: a batch of
# 64 RGB images of 128 x 128 in float32 is 12.6; a dataset passed whole would cost a copy per trace and a pass per
# replay)


def _array_state(objects) -> tuple:
    """The arrays among ``objects`` (arguments keyed by identity, NumPy's: code of
    their library on them is not recorded, so a trace keeps what it computed from their
    values), each with its values read by a :class:`_Values`: a :func:`_python_state`
    snapshot, checked before each replay as the attributes of an argument are; and
    the arrays left out: of more than :data:`COMPARED_BYTES`, or whose values cannot be
    compared (:func:`leanpass.backends._values.comparable`: of objects)."""
    arrays = {id(a): a for a in objects if _is_array(a)}  # (one entry for an array held twice)
    kept = [a for a in arrays.values() if comparable(a) and nbytes(a) <= COMPARED_BYTES]
    left = [a for a in arrays.values() if not any(a is k for k in kept)]
    return [(a, reader(a), reader) for a in kept for reader in (_Values(a),)], left


_COMPARED = ("a NumPy array the function is given is compared at each call, as a replay would keep what NumPy "
             "computed from it: a batch buffer refilled in place, pass a Tensor; an array it does not read (a log "
             "the caller fills), keep where its code does not name it")


def _changed_arrays(snapshot) -> str:
    """The arrays among ``snapshot``'s entries whose values changed since it was taken,
    named where an attribute, a dict's key or a list's place in it holds them (``the
    array 'losses'``); '' where none changed."""
    changed = [a for a, items, read in snapshot if type(read) is _Values and read(a)[0] is not items[0]]
    names = []
    for array in changed:
        name = "an array argument"
        for obj, items, _ in snapshot:
            if isinstance(items, tuple) and not isinstance(obj, (list, collections.deque)) and obj is not array:
                found = [items[i - 1] for i in range(1, len(items), 2) if items[i] is array]
                if found:
                    name = f"the array {found[0]!r}"
                    break
        names.append(name)
    return ", ".join(dict.fromkeys(names))


def _is_array(value) -> bool:
    """An array of a library other than LeanPass (NumPy's, CuPy's), as :func:`_key_of`
    keys one: by its type (an object's own ``__getattr__``, a proxy's, may raise); not
    a NumPy scalar (no ``__setitem__``: its values cannot change)."""
    kind = type(value)
    return (hasattr(kind, "__array_namespace__") and hasattr(kind, "shape") and hasattr(kind, "dtype")
            and hasattr(kind, "__setitem__") and not issubclass(kind, Tensor))


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


def _held_members(state) -> list:
    """:func:`_named_members` of the modules among the items of a snapshot's objects and
    containers (:func:`_python_state`: a trainer's ``self.model``, ``run.model``, a dict
    argument's): compared after the trace, as a call that changes such a module's
    layers in place before it calls it (``model.layers[0] = other``) makes a change a
    replay would not (the module's own check, made when it is called, sees the list
    as changed)."""
    modules = {id(v): v for _, items, _ in state if type(items) is tuple for v in items
               if issubclass(type(v), Module)}  # (type: a proxy's __class__ may raise outside its context)
    return _named_members(list(modules.values()))


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
