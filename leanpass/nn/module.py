"""``Module``: parameters and buffers found by walking attributes, train/eval, devices,
state dicts; ``Parameter``; the containers ``ModuleList`` and ``ModuleDict``."""

from __future__ import annotations

import collections
import itertools
import math
import operator
import weakref
from typing import NamedTuple

from .._dtypes import as_dtype
from .._graph.trace import TRACER, action, idempotent
from ..backends import dtype_name, get_backend
from ..serialization import TORCH_LAYOUTS, note_transposed, transposed_copy, was_transposed
from ..tensor import Tensor, as_tensor, clear_gradients

__all__ = ["Module", "Parameter", "ModuleList", "ModuleDict"]

# "leanpass" and "torch" are the same arrays (PyTorch's layouts) under LeanPass's or
# PyTorch's names; "leanpass-0.3" is LeanPass's names with the arrays 0.3 stored
# transposed (``Linear.weight`` as ``(in, out)``, ``in_proj_weight`` as ``(E, 3E)``).
LAYOUTS = ("leanpass", "torch", "leanpass-0.3")


class Parameter(Tensor):
    """A Tensor that a :class:`Module` always counts as a parameter, also while it is
    frozen (``requires_grad=False``), as PyTorch's ``nn.Parameter``.

    ``Parameter(data=None, requires_grad=True, *, name=None, device=None, dtype=None)``
    takes what the Tensor constructor takes (and owns a copy, as every Tensor made by
    a constructor); ``None`` is an empty float tensor. It is a leaf; operations on it
    give plain Tensors, and so does :meth:`detach`.
    """

    __slots__ = ()

    def __init__(self, data=None, requires_grad=True, *, name=None, device=None, dtype=None):
        super().__init__([] if data is None else data, requires_grad=requires_grad, name=name, device=device,
                         dtype=dtype)

    def __repr__(self) -> str:
        return "Parameter" + super().__repr__()[len("Tensor"):]


def _is_dtype(value) -> bool:
    """Whether ``value`` names a dtype (``lp.float32``, ``"float32"``, ``numpy.float32``)
    rather than a device."""
    try:
        as_dtype(value)
    except (TypeError, ValueError):
        return False
    return True


class IncompatibleKeys(NamedTuple):
    """What :meth:`Module.load_state_dict` returns, as in PyTorch: the model's keys
    the state lacked, and the state's keys the model does not have."""

    missing_keys: list
    unexpected_keys: list


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _check_layout(layout, op: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"{op}: unknown layout {layout!r}; choose 'leanpass', 'torch' or 'leanpass-0.3'")


# How many attribute sets and deletes any Module has seen, and changes of the members of
# containers (Sequential, ModuleList, ModuleDict). A module that caches what it found
# among its members (MLP: whether it can run as one graph node, and with which
# parameters) keeps the count it saw, and so does a compiled function's trace: an
# unchanged count means no member was replaced.
_CHANGES = [0]

# The last attribute sets and deletes, ``(count after it, the module's weak reference,
# the name, what the attribute held before)``: for a compiled function, whose trace
# holds when every change since is undone (model.eval() for an evaluation, then
# model.train(): :func:`restored`). A change no later change undoes (a container's) is
# journaled as unknown (:func:`changed`): no trace outlives it while the module lives.
_JOURNAL: collections.deque = collections.deque(maxlen=4096)
_ABSENT = object()  # (an attribute the module did not have)
_BORN = object()  # (the first attribute set on a module: none before, so it was made since)
_UNKNOWN = object()  # (what the journal does not keep: a change that no later change undoes)
_PLAIN = (bool, int, float, complex, str, bytes, type(None))  # kept as they are: compared by value
_PLAIN_IDS = frozenset(map(id, _PLAIN))  # (looked up by identity: no metaclass's hash or == is called)


class _Weak:
    """What the journal keeps of an attribute's former object: a weak reference (a
    replaced layer or parameter is not kept alive by it)."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


def _plain(value) -> bool:
    """A number, None, or a short string or tuple of such (what the journal keeps as it
    is: a long one, kept 4,096 times, would hold their memory)."""
    kind = type(value)  # (compared by identity: a metaclass's == or hash may raise)
    if kind is str or kind is bytes:
        return len(value) <= 256
    return id(kind) in _PLAIN_IDS or (kind is tuple and len(value) <= 16 and all(map(_plain, value)))


def _kept(value):
    """``value`` as the journal keeps it: a number, a string or a tuple of them as it is;
    an object by weak reference; anything else as unknown (a list, a tuple holding
    tensors: the journal would keep what they hold alive)."""
    if value is _ABSENT or _plain(value):
        return value
    try:
        return _Weak(weakref.ref(value))
    except TypeError:
        return _UNKNOWN


_MEMBERS = "(its members)"  # the journal's name for a change of a module that no later change undoes


def changed(module) -> None:
    """Count a change of ``module`` that no later change undoes (a container's member
    added, removed or replaced; a tensor made a buffer, or no longer one; an attribute
    deleted): a trace made before it no longer holds while the module lives (one made
    and dropped inside a compiled call, a loss module built in the step, is no change)."""
    _CHANGES[0] += 1
    _JOURNAL.append((_CHANGES[0], weakref.ref(module), _MEMBERS, _UNKNOWN))


def _journal(module, name, before) -> None:
    """Count a change of ``module``'s attribute ``name`` (it held ``before``), after it."""
    _CHANGES[0] += 1
    # (an attribute that lives elsewhere than the instance dict, a property's: not journaled, so no trace
    # holds over its change)
    kind = type(getattr(type(module), name, None))
    if (name in module.__dict__ or before is not _ABSENT) and not (hasattr(kind, "__set__")
                                                                   or hasattr(kind, "__delete__")):
        born = before is _ABSENT and len(module.__dict__) == 1  # (a module made since a trace: a replay would not)
        _JOURNAL.append((_CHANGES[0], weakref.ref(module), name, _BORN if born else _kept(before)))


def restored(since: int) -> bool:
    """Whether every change counted after ``since`` (a compiled function's trace) was
    an attribute's, since set back: each such attribute holds again the object (or an
    equal number, string or tuple of them, as :func:`_same_value` compares) it held at
    ``since``, as after ``model.eval()`` then ``model.train()``. False where a change
    was a container's (a layer appended), an attribute holds another object, or the
    journal no longer reaches back that far."""
    changes = _CHANGES[0] - since
    if changes <= 0 or changes > len(_JOURNAL):
        return changes == 0
    before = {}  # (the module's reference's id, name) -> (reference, what it held at ``since``): its first entry
    for expected, (count, ref, name, held) in enumerate(itertools.islice(_JOURNAL, len(_JOURNAL) - changes, None),
                                                        since + 1):
        if count != expected:  # a change without an entry (a container's) in between
            return False
        before.setdefault((id(ref), name), (ref, held))  # (by id: a module's own == and hash have no say)
    for (_, name), (ref, held) in before.items():
        module = ref()
        if module is None:  # (gone: nothing can read it)
            continue
        if held is _UNKNOWN:  # (and _BORN: made since, and still here, kept by the call or its caller, is no
            return False  # value the attribute holds now)
        if type(held) is _Weak:
            held = held.ref()
            if held is None:  # (the object it held is gone: it holds another one now)
                return False
        now = module.__dict__.get(name, _ABSENT)
        if held is _ABSENT and now is not _ABSENT:  # (read through the class at the trace: Module.training)
            held = class_attribute(type(module), name, _UNKNOWN)
        if not _same_value(held, now):
            return False
    return True


def reversible(since: int) -> bool:
    """Whether every change counted after ``since`` may still be undone, a trace made
    at ``since`` holding again then: each an attribute's, which held a number, a string
    or None (``model.eval()``, a ``train()`` at alternate calls), of a module still
    alive; no container's, no object replaced (which a trace keeping it would hold
    alive), and the journal reaching back that far."""
    changes = _CHANGES[0] - since
    if changes <= 0 or changes > len(_JOURNAL):
        return changes == 0
    for expected, (count, ref, _, held) in enumerate(itertools.islice(_JOURNAL, len(_JOURNAL) - changes, None),
                                                     since + 1):
        if count != expected or ref() is None or not (held is _ABSENT or _plain(held)):
            return False
    return True


def class_attribute(cls, name: str, default=None):
    """``name``'s value in ``cls`` or a base where it is a plain class attribute
    (``Module.training``, ``Cfg.scale = 2.0``); ``default`` where there is none, or it
    is a method, a property or another descriptor."""
    for base in cls.__mro__:
        if name in base.__dict__:
            value = base.__dict__[name]
            return default if hasattr(type(value), "__get__") else value
    return default


def _same_value(a, b) -> bool:
    """Whether ``b`` is ``a``, or an equal Python number, string or tuple of them (of
    one type: ``1`` is not ``1.0`` nor ``True``; ``-0.0`` is not ``0.0``)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(map(_same_value, a, b))
    kind = type(a)  # (compared by identity: a metaclass's == may raise)
    if kind is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return (kind is int or kind is bool or kind is str) and a == b


def _member_lists(module) -> list:
    """The lists and dicts among ``module``'s attributes that hold modules or tensors
    (``Sequential.layers``, a custom module's ``self.blocks = [...]``), also inside
    one another (``self.stages = [[a, b], [c]]``; and inside tuples), each with its
    items (:func:`items_of`): an item replaced in place (``model.layers[0] = other``,
    ``model.stages[1][0] = other``) changes no attribute, so a compiled function
    checks these before each replay (:func:`unchanged`)."""
    return holding_members(vars(module).values())


def holding_members(values, tuples: bool = False) -> list:
    """The lists and dicts among ``values``, and inside them, that hold modules or
    tensors (themselves or deeper), each with its items (see :func:`_member_lists`;
    lp.compile also checks those a function reads by name, and the containers of a
    call's arguments and result); with ``tuples``, the tuples too. Each container is
    looked into once, without recursion (a result may nest deeper than Python recurses)."""
    found: list = []
    holds: dict = {}  # id(container) -> whether it holds a module or a tensor, itself or deeper
    kinds = (list, dict, tuple)
    for value in values:
        if not isinstance(value, kinds) or id(value) in holds:
            continue
        order, stack = [], [value]  # each container after those that hold it
        while stack:
            v = stack.pop()
            if id(v) in holds:
                continue
            holds[id(v)] = False  # (a container inside itself: nothing found through that path)
            order.append(v)
            stack.extend(c for c in (v.values() if isinstance(v, dict) else v) if isinstance(c, kinds))
        for v in reversed(order):  # (each container after those it holds)
            held = any(isinstance(c, (Module, Tensor)) or (isinstance(c, kinds) and holds.get(id(c), False))
                       for c in (v.values() if isinstance(v, dict) else v))
            holds[id(v)] = held
            if held and (tuples or not isinstance(v, tuple)):
                found.append((v, items_of(v)))
    return found


def items_of(container) -> tuple:
    """A list's items, or a dict's keys and values, as one tuple: the objects
    themselves, so that one freed and another made at its address is no match."""
    if isinstance(container, dict):
        return tuple(x for pair in container.items() for x in pair)
    return tuple(container)


def unchanged(container, items: tuple) -> bool:
    """Whether ``container`` still holds ``items`` (:func:`items_of`): the same objects,
    or equal numbers and strings."""
    if type(container) is list and len(container) == len(items) and all(map(operator.is_, container, items)):
        return True  # (the same objects: a compiled call's check before each replay, without the tuple)
    now = items_of(container)
    return len(now) == len(items) and all(map(_same_value, now, items))


def report_members(module) -> None:
    """Tell lp.compile, if a call is traced, that it reads ``module``'s members (a
    module called, or a ``Sequential`` iterated): a replay checks its member lists."""
    tracer = TRACER[0]
    if tracer is not None:
        tracer.module_called(module, _member_lists)


class Module:
    """Base class of layers and models.

    A subclass sets its parameters and sub-modules as attributes -- directly or
    inside lists, tuples and dicts -- and defines ``forward``. A :class:`Parameter`
    is always a parameter; a plain Tensor is one while it requires grad. Tensors
    given to :meth:`register_buffer` are buffers. Other attributes whose names start
    with ``_`` are private and not walked.
    """

    training: bool = True
    # Names of this module's own 2-D parameters that LeanPass 0.3 stored transposed
    # (``Linear.weight`` as ``(in, out)``): a state dict of its files, or of
    # ``layout="leanpass-0.3"``, and a pickle of a 0.3 module are transposed on loading.
    _v03_transposed: tuple = ()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __setattr__(self, name, value):
        buffers = self.__dict__.get("_buffers")
        if buffers and name in buffers and not (value is None or type(value) is Tensor):
            if isinstance(value, (Parameter, Module)):  # no longer a buffer: a parameter, a sub-module (PyTorch)
                del buffers[name]
                changed(self)
            elif not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: cannot assign a {type(value).__name__} as buffer {name!r} "
                                "(a Tensor, a Module or None is expected)")
        before = self.__dict__.get(name, _ABSENT)
        if _same_value(before, value):  # the same again (train() of a module in training; self.n =
            return  # x.shape[0] in a forward: an equal number is no change)
        object.__setattr__(self, name, value)
        _journal(self, name, before)  # after the change: a check that sees the new count sees the new member

    def __delattr__(self, name):
        object.__delattr__(self, name)
        changed(self)  # (set again, the name comes last in the instance dict: the parameters' order changed)
        buffers = self.__dict__.get("_buffers")
        if buffers and name in buffers:  # the name may hold a parameter next
            del buffers[name]

    def __call__(self, *args, **kwargs):
        if TRACER[0] is not None:  # lp.compile: a replay checks that the module's lists still hold these members
            report_members(self)
        return self.forward(*args, **kwargs)

    # ---- pickles -------------------------------------------------------------------
    def __getstate__(self):
        state = dict(self.__dict__)
        if self._v03_transposed:  # marks the layout: a pickle of 0.3 (or older) has no mark
            state["_layout_format"] = TORCH_LAYOUTS
        return state

    def __setstate__(self, state):
        """A pickle of LeanPass 0.3 or older (no ``_layout_format``) holds the
        parameters of ``_v03_transposed`` transposed: they (and their gradients) are
        turned into PyTorch's layout, so the module computes what it computed."""
        state = dict(state)
        old = bool(self._v03_transposed) and state.pop("_layout_format", 1) < TORCH_LAYOUTS
        self.__dict__.update(state)
        for name in self._v03_transposed if old else ():
            t = state.get(name)
            if not isinstance(t, Tensor) or t.ndim != 2 or was_transposed(t):  # a weight tied to another: done
                continue
            note_transposed(t)
            backend = get_backend(t.device)
            grad = t._read_grad() if t.has_grad else None
            t._set_data(transposed_copy(t.data, backend), changed=False)
            t.grad = None if grad is None else transposed_copy(grad, backend)

    # ---- walking the tree ----------------------------------------------------------
    def _children(self):
        """(name, value) pairs of the public attributes and the buffers, in the order
        they were set."""
        buffers = self.__dict__.get("_buffers", ())
        return ((k, v) for k, v in vars(self).items() if not k.startswith("_") or k in buffers)

    def _torch_key(self, key: str) -> str:
        """The name PyTorch's namesake of this module gives its member ``key``
        (``"layers.1"`` of an MLP is ``"2"`` in a ``torch.nn.Sequential``)."""
        return key

    def _members(self) -> list:
        """``(key, value, is_buffer)`` for what this module holds itself: its attributes
        and the items of the lists, tuples and dicts among them (``"layers.0"``), in
        order, without looking inside sub-modules."""
        buffers = self.__dict__.get("_buffers", ())
        found = []
        stack = [(k, v, k in buffers) for k, v in self._children()][::-1]
        while stack:
            key, value, buffer = stack.pop()
            if isinstance(value, (list, tuple)):
                stack.extend((f"{key}.{i}", v, False) for i, v in reversed(list(enumerate(value))))
            elif isinstance(value, dict):
                stack.extend((f"{key}.{k}", v, False) for k, v in reversed(list(value.items())))
            else:
                found.append((key, value, buffer))
        return found

    def _walk(self, prefix: str = "", torch: bool = False, found=None, seen=None, unique: bool = True) -> list:
        """``(kind, name, value, owner, key)`` depth first in attribute order:
        ``"module"`` for this module and every sub-module, ``"parameter"``,
        ``"buffer"``; ``owner`` holds the value as ``key``. ``torch``: PyTorch's names.
        ``unique``: each object once, under its first name; else under every name it
        has (a tied weight in each module that holds it, as PyTorch's state dicts),
        walking a module only once along any one path (a module that holds itself)."""
        if found is None:
            found, seen = [("module", prefix, self, None, "")], {id(self)}
        for key, value, buffer in self._members():
            if isinstance(value, Module):
                kind = "module"
            elif isinstance(value, Tensor) and (buffer or isinstance(value, Parameter) or value.requires_grad):
                kind = "buffer" if buffer else "parameter"
            else:
                continue
            if id(value) in seen:
                continue
            name = _join(prefix, self._torch_key(key) if torch else key)
            found.append((kind, name, value, self, key))
            if kind == "module":
                seen.add(id(value))
                value._walk(name, torch, found, seen, unique)
                if not unique:
                    seen.discard(id(value))  # only the path down to here
            elif unique:
                seen.add(id(value))
        return found

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> list[tuple[str, Tensor]]:
        """``[(dotted.name, tensor), ...]``: every parameter once, in a stable order
        (attribute order, then list/tuple position, then dict insertion order);
        ``recurse=False``: only this module's own, as PyTorch."""
        return [(name, value) for kind, name, value, owner, _ in self._walk(prefix)
                if kind == "parameter" and (recurse or owner is self)]

    def parameters(self, recurse: bool = True) -> list[Tensor]:
        """Every parameter once, in a stable order (``recurse=False``: this module's own)."""
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> list[tuple[str, Tensor]]:
        """``[(dotted.name, tensor), ...]``: every buffer once (persistent or not);
        ``recurse=False``: only this module's own."""
        return [(name, value) for kind, name, value, owner, _ in self._walk(prefix)
                if kind == "buffer" and (recurse or owner is self)]

    def buffers(self, recurse: bool = True) -> list[Tensor]:
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def named_modules(self, prefix: str = "") -> list[tuple[str, Module]]:
        """``[(dotted.name, module), ...]``: this module (named ``prefix``) and every
        sub-module once, depth first."""
        return [(name, value) for kind, name, value, _, _ in self._walk(prefix) if kind == "module"]

    def modules(self) -> list[Module]:
        """This module and every sub-module, each once, depth first."""
        return [m for _, m in self.named_modules()]

    def named_children(self) -> list[tuple[str, Module]]:
        """``[(name, module), ...]``: the sub-modules this module holds itself (in
        attributes, or in their lists and dicts: ``"layers.0"``), each once."""
        found, seen = [], set()
        for key, value, _ in self._members():
            if isinstance(value, Module) and id(value) not in seen:
                seen.add(id(value))
                found.append((key, value))
        return found

    def children(self) -> list[Module]:
        return [m for _, m in self.named_children()]

    def apply(self, fn) -> Module:
        """Call ``fn`` on every sub-module (children first, depth first), then on this
        module; returns this module (PyTorch's order, as for ``nn.init`` code)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Keep ``tensor`` as the attribute ``name``: a buffer, which ``to`` moves and
        ``state_dict`` saves (unless ``persistent=False``), but which is never a
        parameter (optimizers do not see it). ``None`` reserves the name."""
        if not isinstance(name, str):
            raise TypeError(f"register_buffer: the name must be a str, got {type(name).__name__}")
        if "." in name or not name:
            raise KeyError(f"register_buffer: invalid buffer name {name!r} (empty, or containing '.')")
        if hasattr(self, name) and name not in self.__dict__.get("_buffers", ()):
            raise KeyError(f"register_buffer: attribute {name!r} already exists in {type(self).__name__}")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: cannot use a {type(tensor).__name__} as buffer {name!r} "
                            "(a Tensor or None is required)")
        buffers = self.__dict__.setdefault("_buffers", {})
        if buffers.get(name) != bool(persistent):  # (a new buffer, or saved where it was not)
            changed(self)
        buffers[name] = bool(persistent)
        setattr(self, name, tensor)

    # ---- modes and devices -------------------------------------------------------
    @action
    @idempotent
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient (it reads as zeros until the next backward);
        ``set_to_none=False`` sets gradients that exist to zeros in place, as PyTorch."""
        clear_gradients(self.parameters(), set_to_none)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter (freeze with ``False``); returns the
        module. A frozen plain Tensor is no longer a parameter: freeze Parameters."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode``, a bool) on this module and every sub-module;
        returns this module."""
        if not isinstance(mode, bool):
            raise ValueError(f"train: the training mode must be a bool, got {mode!r}")
        for m in self.modules():
            m.training = mode
        return self

    def cpu(self) -> Module:
        """``to("cpu")``."""
        return self.to("cpu")

    def add_module(self, name: str, module) -> None:
        """``setattr(self, name, module)`` for a Module or None, with PyTorch's checks."""
        self._check_name(name, "add_module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {type(module).__name__} is not a Module")
        setattr(self, name, module)

    register_module = add_module

    def register_parameter(self, name: str, param) -> None:
        """``setattr(self, name, param)`` for a Parameter or None, with PyTorch's checks."""
        self._check_name(name, "register_parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: cannot assign a {type(param).__name__} as parameter {name!r} "
                            "(a leanpass.nn.Parameter or None is required)")
        setattr(self, name, param)

    def _check_name(self, name, op: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{op}: the name must be a str, got {type(name).__name__}")
        if "." in name or not name:
            raise KeyError(f"{op}: invalid name {name!r} (empty, or containing '.')")
        if hasattr(self, name) and name not in self.__dict__:
            raise KeyError(f"{op}: attribute {name!r} already exists in {type(self).__name__}")

    def get_submodule(self, target: str) -> Module:
        """The sub-module at the dotted path ``target`` (``""``: this module), as
        PyTorch's; ``AttributeError`` naming the missing part."""
        found = dict(self.named_modules())
        if target not in found:
            raise AttributeError(f"get_submodule: {type(self).__name__} has no sub-module {target!r}")
        return found[target]

    def eval(self) -> Module:
        return self.train(False)

    def to(self, device=None, dtype=None) -> Module:
        """Move every parameter (and its gradient) and every buffer to ``device``, and/or
        cast the floating-point ones to the float ``dtype``, in place: the same Tensor
        objects, so an optimizer made before keeps working (its state follows at the
        next step). PyTorch's forms: ``to("cuda")``, ``to(lp.float32)``,
        ``to("cuda", lp.float32)``, ``to(dtype=...)``; integer buffers keep their dtype."""
        if dtype is None and device is not None and _is_dtype(device):
            device, dtype = None, device
        try:
            target = None if device is None else get_backend(device)
        except (RuntimeError, TypeError, ValueError):
            if any(word in str(device) for word in ("float", "int", "complex", "bool", "half", "double")):
                raise TypeError(
                    f"Module.to: dtype must be floating point (float32 or float64), got {device!r}") from None
            raise
        if dtype is not None:
            dtype = dtype_name(as_dtype(dtype, "Module.to"))
            if dtype not in ("float32", "float64"):
                raise TypeError(f"Module.to: dtype must be floating point (float32 or float64), got {dtype}")
        for kind, _, p, _, _ in self._walk():
            if kind == "module":
                continue
            move = target is not None and p.device != target.device
            cast = dtype is not None and dtype_name(p.dtype) in ("float32", "float64") and dtype_name(p.dtype) != dtype
            if not (move or cast):
                continue
            grad = p._read_grad() if p.has_grad else None
            moved = p.detach()
            if move:
                moved = moved.to(target.device)
            if cast:
                moved = moved.astype(dtype)
            p._set_data(moved.data, changed=False)  # the same values: no version change
            p.grad = None if grad is None else Tensor(grad, device=moved.device, dtype=dtype_name(moved.dtype)).data
        return self

    def float(self) -> Module:
        """``to(dtype="float32")``: floating-point parameters and buffers as float32 (PyTorch's)."""
        return self.to(dtype="float32")

    def double(self) -> Module:
        """``to(dtype="float64")``."""
        return self.to(dtype="float64")

    # ---- state -------------------------------------------------------------------
    def _state_entries(self, layout: str) -> dict:
        """``{key: (tensor, transposed)}`` for the parameters and persistent buffers,
        under every name they have (a tied weight under each, as PyTorch);
        ``transposed``: the layout holds the transpose (0.3's)."""
        torch = layout == "torch"
        old = layout == "leanpass-0.3"
        return {
            name: (value, old and key in owner._v03_transposed and value.ndim == 2)
            for kind, name, value, owner, key in self._walk(torch=torch, unique=False)
            if kind == "parameter" or (kind == "buffer" and owner._buffers[key])
        }

    def state_dict(self, *, layout: str = "leanpass") -> dict:
        """``{name: array}`` for every parameter and persistent buffer (the arrays
        themselves, not copies), in PyTorch's layouts (``Linear.weight`` is ``(out,
        in)``). ``layout="torch"``: PyTorch's names (an ``MLP``'s or ``Sequential``'s
        layers as ``torch.nn.Sequential`` numbers them), the same arrays;
        ``layout="leanpass-0.3"``: LeanPass 0.3's layouts (``Linear.weight``
        ``(in, out)``, a view)."""
        _check_layout(layout, "state_dict")
        state = {}
        for name, (t, transposed) in self._state_entries(layout).items():
            data = t.data
            state[name] = get_backend(t.device).xp.permute_dims(data, (1, 0)) if transposed else data
        return state

    def load_state_dict(self, state: dict, strict: bool = True, *, layout: str = "leanpass") -> IncompatibleKeys:
        """Copy ``state``'s values into the existing parameters and buffers (so an
        optimizer holding them keeps working). Every key, shape and dtype is checked
        before anything is copied; ``strict=False`` loads the keys both have and
        ignores missing and unexpected ones. The arrays are in PyTorch's layouts
        (``Linear.weight`` ``(out, in)``), so a PyTorch state dict loads as it is;
        ``layout="torch"`` reads PyTorch's names (an ``MLP`` or ``Sequential`` reads
        a ``torch.nn.Sequential``'s) and transposes nothing. A state dict that
        ``leanpass.load`` read from a file of LeanPass 0.3 (format version 1) is
        read as ``layout="leanpass-0.3"``: its ``Linear`` weights ``(in, out)`` and
        ``in_proj_weight`` ``(E, 3E)`` are transposed. Returns ``(missing_keys,
        unexpected_keys)``, as PyTorch."""
        _check_layout(layout, "load_state_dict")
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict: expected a dict of arrays, got {type(state).__name__}")
        version = getattr(state, "format_version", TORCH_LAYOUTS)  # set by leanpass.load on old files
        if layout == "leanpass" and isinstance(version, int) and version < TORCH_LAYOUTS:
            layout = "leanpass-0.3"  # a 0.3 state_dict(layout="torch") file is PyTorch's layouts already
        entries = self._state_entries(layout)
        given = {id(entries[k][0]) for k in state if k in entries}
        # a tensor under several names (a tied weight) needs one of them: state dicts
        # saved before every name was listed have the first alone
        missing = [k for k, (t, _) in entries.items() if k not in state and id(t) not in given]
        unexpected = [k for k in state if k not in entries]
        if strict and (missing or unexpected):
            raise ValueError(
                f"load_state_dict into {type(self).__name__}: missing keys {missing}, unexpected keys {unexpected}"
            )
        updates = []
        for name, (p, transposed) in entries.items():
            if name not in state:
                continue
            value = state[name]
            value = value.data if isinstance(value, Tensor) else value
            if not (hasattr(value, "shape") and hasattr(value, "dtype")):
                raise TypeError(f"load_state_dict: {name!r} is a {type(value).__name__} in the state; "
                                "give an array or a Tensor")
            shape = tuple(value.shape)
            want = p.shape[::-1] if transposed else p.shape
            if shape != want:
                raise ValueError(
                    f"load_state_dict: {name!r} has shape {shape} in the state but {want} in the model"
                    + (" (LeanPass 0.3's layout: the transpose)" if transposed else "")
                )
            have, want = dtype_name(value.dtype), dtype_name(p.dtype)
            if have != want:
                raise ValueError(f"load_state_dict: {name!r} has dtype {have} in the state but {want} in the model")
            array = as_tensor(value, device=p.device, dtype=want).data  # integer buffers stay integer
            updates.append((p, array, transposed))
        for p, array, transposed in updates:  # copies: training must not write into the state's arrays
            backend = get_backend(p.device)  # counts as an in-place change (a new version):
            p.data = transposed_copy(array, backend) if transposed else backend.copy(array)
            if transposed:
                note_transposed(p)  # an optimizer state of 0.3 loaded next is transposed for it too
        return IncompatibleKeys(missing, unexpected)

    def __repr__(self) -> str:
        children = self.named_children()
        extra = self.extra_repr()
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = [f"{type(self).__name__}("] + [f"  {line}" for line in extra.split("\n") if extra]
        for name, value in children:
            inner = repr(value).replace("\n", "\n  ")
            lines.append(f"  ({name}): {inner}")
        return "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        return ""


def _module(value, op: str) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{op}: expected a Module, got {type(value).__name__}")
    return value


class ModuleList(Module):
    """A list of modules whose parameters are named ``"0.weight"``, ``"1.weight"``...
    as PyTorch's: ``append``, ``extend``, ``insert``, indexing (a slice is a
    ModuleList), assignment, ``del``, ``len`` and iteration."""

    def __init__(self, modules=None):
        self._list = [] if modules is None else [_module(m, "ModuleList") for m in modules]

    def _children(self):
        return ((str(i), m) for i, m in enumerate(self._list))

    def _index(self, index: int, op: str) -> int:
        if not -len(self._list) <= index < len(self._list):
            raise IndexError(f"{op}: index {index} is out of range for {len(self._list)} modules")
        return index % len(self._list)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(self._list[index])
        return self._list[self._index(index, "ModuleList")]

    def __setitem__(self, index, module) -> None:
        self._list[self._index(index, "ModuleList")] = _module(module, "ModuleList")
        changed(self)

    def __delitem__(self, index) -> None:
        if isinstance(index, slice):
            del self._list[index]
        else:
            del self._list[self._index(index, "ModuleList")]
        changed(self)

    def __len__(self) -> int:
        return len(self._list)

    def __iter__(self):
        return iter(self._list)

    def __iadd__(self, modules) -> ModuleList:
        return self.extend(modules)

    def append(self, module) -> ModuleList:
        self._list.append(_module(module, "ModuleList.append"))
        changed(self)
        return self

    def extend(self, modules) -> ModuleList:
        new = [_module(m, "ModuleList.extend") for m in modules]  # all checked before any is added
        self._list.extend(new)
        changed(self)
        return self

    def insert(self, index: int, module) -> None:
        self._list.insert(index, _module(module, "ModuleList.insert"))
        changed(self)

    def pop(self, index: int = -1) -> Module:
        module = self._list.pop(self._index(index, "ModuleList.pop"))
        changed(self)
        return module

    def __add__(self, other) -> ModuleList:
        if not isinstance(other, ModuleList):
            return NotImplemented
        return ModuleList(self._list + other._list)


class ModuleDict(Module):
    """An ordered mapping of names to modules, whose parameters are named
    ``"<key>.weight"`` as PyTorch's: ``d[key]``, assignment, ``del``, ``in``, ``len``,
    iteration over the keys, ``keys``, ``values``, ``items``, ``update``, ``pop``,
    ``clear``."""

    def __init__(self, modules=None):
        self._dict = {}
        if modules is not None:
            self.update(modules)

    def _children(self):
        return iter(self._dict.items())

    @staticmethod
    def _key(key) -> str:
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be str, got {type(key).__name__}")
        if "." in key or not key:
            raise KeyError(f"ModuleDict: invalid key {key!r} (empty, or containing '.')")
        return key

    def __getitem__(self, key) -> Module:
        return self._dict[key]

    def __setitem__(self, key, module) -> None:
        self._dict[self._key(key)] = _module(module, f"ModuleDict[{key!r}]")
        changed(self)

    def __delitem__(self, key) -> None:
        del self._dict[key]
        changed(self)

    def __contains__(self, key) -> bool:
        return key in self._dict

    def __len__(self) -> int:
        return len(self._dict)

    def __iter__(self):
        return iter(self._dict)

    def keys(self):
        return self._dict.keys()

    def values(self):
        return self._dict.values()

    def items(self):
        return self._dict.items()

    def pop(self, key) -> Module:
        module = self._dict.pop(key)
        changed(self)
        return module

    def clear(self) -> None:
        self._dict.clear()
        changed(self)

    def update(self, modules) -> None:
        """Add ``modules``: a mapping, or an iterable of ``(key, module)`` pairs; all are
        checked before any is added."""
        pairs = list(modules.items() if hasattr(modules, "items") else modules)
        checked = []
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"ModuleDict.update: expected (key, module) pairs, got {pair!r}")
            checked.append((self._key(pair[0]), _module(pair[1], f"ModuleDict[{pair[0]!r}]")))
        self._dict.update(checked)
        changed(self)
