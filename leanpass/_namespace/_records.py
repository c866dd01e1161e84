"""The namespace's records: every public function that is not element-wise or a
reduction or a Fourier transform (those come from their own tables) is declared
with :func:`recorded`, which keeps a :class:`Record` of it in :data:`RECORDS`; its
Tensor methods are made from the record (:func:`methods_of`), and the tests hold
the function to what its record says (tests/test_records.py).

A record says what the generators, the docs and the tests need to know of one
function: its name and section, the operation it runs (whose ``saves`` say what
its backward keeps), its dtype policy, what its ``axis`` is, and its Tensor
methods, each with the parameters it takes after ``self`` written as Python writes
them (``"*shape"``, ``"axis=None"``, ``"shift, axis=None"``). :func:`method` makes
a method from such a line for any namespace function, the reductions' included:
``*name`` gathers the positional arguments (``t.reshape(2, 3)`` or
``t.reshape((2, 3))``), a default there replaces the function's (``t.squeeze()``
squeezes every size-one axis), and a method with an ``axis`` also takes PyTorch's
``dim=`` (with ``keepdims``, ``keepdim=``).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import NamedTuple

from ..ops import Op
from ..tensor import Tensor
from ._util import refuse_positional, torch_axis

_P = inspect.Parameter

# What ``axis`` is, for ``Record.axes``: checked for every record by tests/test_records.py.
AXES = {
    "one": "an int in [-N, N)",
    "new": "an int in [-N-1, N]: where a new axis goes",
    "many": "an int, a tuple of ints, or None for every axis",
    "flat": "an int, or None for the flattened tensor",
    "pair": "two ints or two tuples of ints (source and destination)",
    "last": "an int counted from the end of the broadcast shape",
}
# How the result's dtype follows the inputs', for ``Record.dtype``.
DTYPES = {
    "keep": "the input's",
    "promote": "the inputs' promoted dtype, as the standard's table says",
    "index": "int64 indices, never requiring grad",
    "bool": "bool, never requiring grad",
    "floating": "floating point in, the same out: other input is a TypeError naming the function",
    "own": "the function's own rule (see its docstring)",
}


@dataclass(frozen=True)
class Record:
    """One namespace function and what is known of it."""

    name: str
    section: str  # the standard's section ("manipulation"), or the extension ("linalg")
    op: Op | None  # the operation it runs; None where it runs several (or none: its own code)
    dtype: str  # a key of DTYPES
    axes: str | None  # a key of AXES, or None: no axis parameter
    methods: dict = field(default_factory=dict)  # Tensor methods: {name: parameters after self, or a Method}
    function: object = None  # the namespace function itself


RECORDS: dict[str, Record] = {}
REGISTRY: dict = {}  # every Tensor method named after a namespace function, by name (see methods.py)


def recorded(op, section, *, dtype="keep", axes=None, methods=None):
    """Declare the namespace function (the decorated one, returned as it is) with its
    record; the record's methods are in :func:`methods_of` once the module is read."""
    if dtype not in DTYPES or axes is not None and axes not in AXES:
        raise ValueError(f"recorded: unknown dtype policy {dtype!r} or axis kind {axes!r}")

    def declare(function):
        name = function.__name__
        if name in RECORDS:
            raise ValueError(f"recorded: {name} is declared twice")
        RECORDS[name] = Record(name, section, op, dtype, axes, dict(methods or {}), function)
        return function

    return declare


class Method(NamedTuple):
    """A record's Tensor method where its line alone does not say all: ``names`` maps
    its parameters to the function's where PyTorch names them otherwise (``t.matmul(
    other)`` for ``matmul``'s ``x2``), ``note`` is added to its docstring."""

    line: str
    names: dict | None = None
    note: str = ""


def methods_of(section: str) -> dict:
    """The Tensor methods of the records of ``section``: {method name: method}."""
    found = {}
    for r in RECORDS.values():
        if r.section == section:
            for name, spec in r.methods.items():
                spec = Method(spec) if isinstance(spec, str) else spec
                found[name] = method(r.function, name, spec.line, spec.note, names=spec.names)
    return found


def _parameters(line: str) -> list:
    """The parameters ``line`` declares (as a ``def`` would), as ``inspect.Parameter``s."""
    args = ast.parse(f"def f({line}): pass").body[0].args
    plain = [*args.posonlyargs, *args.args]
    defaults = [_P.empty] * (len(plain) - len(args.defaults)) + [ast.literal_eval(d) for d in args.defaults]
    found = [_P(a.arg, _P.POSITIONAL_OR_KEYWORD, default=d) for a, d in zip(plain, defaults)]
    if args.vararg is not None:
        found.append(_P(args.vararg.arg, _P.VAR_POSITIONAL))
    found += [_P(a.arg, _P.KEYWORD_ONLY, default=_P.empty if d is None else ast.literal_eval(d))
              for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return found


def method(function, name: str, line: str, note: str = "", call=None, names=None):
    """The Tensor method ``name`` of the namespace ``function``: it takes the parameters
    ``line`` declares after ``self`` (each one of ``function``'s, by name, or by its
    name in ``names``: ``{"other": "x2"}``), and calls ``function(self, ...)``. ``*p``
    gathers the positional arguments into ``p`` (one tuple or list is taken as it is);
    a default replaces ``function``'s, but a default of None where the function's is
    another value means the function's (``t.argsort(None)`` sorts along the last axis,
    as ``t.sort(None)``); a positional argument beyond those declared is refused, never
    read as another parameter; an ``axis`` parameter also comes as PyTorch's ``dim=``,
    ``keepdims`` as ``keepdim=``. ``call(self, name, values)``, where given, is called
    instead of ``function`` with the arguments by name (the reductions' own entry,
    which names the method in its errors)."""
    params = _parameters(line)
    names = names or {}
    own = {p.name: p for p in list(inspect.signature(function).parameters.values())[1:]}
    unknown = [p.name for p in params if names.get(p.name, p.name) not in own]
    if unknown:
        raise ValueError(f"method {name}: {function.__name__} has no parameter {unknown[0]!r}")
    positional = tuple(p.name for p in params if p.kind is _P.POSITIONAL_OR_KEYWORD)
    gather = next((p.name for p in params if p.kind is _P.VAR_POSITIONAL), None)
    taken = frozenset(p.name for p in params)
    required = tuple(p.name for p in params if p.default is _P.empty and p.kind is not _P.VAR_POSITIONAL)
    theirs = {p.name: own[names.get(p.name, p.name)].default for p in params}  # the function's defaults
    # None for the function's own default (t.argsort(None)): the argument is left out
    nulls = tuple(p.name for p in params if p.default is None and theirs[p.name] not in (_P.empty, None))
    # the defaults ``function`` does not have itself (t.squeeze()'s axis=None)
    defaults = {p.name: p.default for p in params
                if p.default is not _P.empty and p.name not in nulls and repr(p.default) != repr(theirs[p.name])}
    first = tuple(key for key, p in own.items() if p.kind is _P.POSITIONAL_ONLY)  # passed by position
    dim, keepdim = "axis" in taken, "keepdims" in taken
    torch = ("dim",) * dim + ("keepdim",) * keepdim
    many, least = len(positional), len(required)
    plain = call is None and not defaults and not first and not names and not nulls  # function(self, **values)

    def finish(self, values):
        for key in nulls:
            if key in values and values[key] is None:
                del values[key]
        if names:
            values = {names.get(key, key): value for key, value in values.items()}
        if call is not None:
            return call(self, name, values)
        if defaults:
            values = {**defaults, **values}
        if first:
            return function(self, *[values.pop(key) for key in first if key in values], **values)
        return function(self, **values)

    def bound(self, *args, **kwargs):
        if gather is None:
            if len(args) > many:
                if not params:
                    raise TypeError(f"{name}() takes no arguments ({len(args)} given)")
                refuse_positional(name, args, positional)
            values = dict(zip(positional, args)) if args else {}
            if not kwargs and len(args) >= least:  # t.sum(), t.squeeze(1), t.roll(1, 0): nothing more to check
                return function(self, **values) if plain else finish(self, values)
        else:
            values = dict(zip(positional, args)) if many else {}
            rest = args[many:] if many else args
            if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
                rest = tuple(rest[0])
            if not kwargs and plain:  # t.reshape(2, 3), t.permute((1, 0))
                values[gather] = tuple(rest)
                return function(self, **values)
            if rest or gather not in kwargs:
                values[gather] = tuple(rest)
        if kwargs:
            given_dim = kwargs.pop("dim", None) if dim else None
            given_keepdim = kwargs.pop("keepdim", None) if keepdim else None
            for key, value in kwargs.items():
                if key not in taken:
                    raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
                if key in values:
                    raise TypeError(f"{name}() got multiple values for argument {key!r}")
                values[key] = value
            if given_dim is not None or given_keepdim is not None:
                axis, keepdims = torch_axis(name, values.get("axis"), given_dim, values.get("keepdims", False),
                                            given_keepdim)
                values["axis"] = axis
                if keepdim:
                    values["keepdims"] = keepdims
        for key in required:
            if key not in values:
                raise TypeError(f"{name}() missing required argument {key!r}")
        return finish(self, values)

    bound.__name__ = bound.__qualname__ = name
    bound.__signature__ = inspect.Signature([
        _P("self", _P.POSITIONAL_OR_KEYWORD), *params,
        *(_P(key, _P.KEYWORD_ONLY, default=None) for key in torch)])
    also = " and ".join(f"``{key}=`` for ``{key}s``" if key == "keepdim" else "``dim=`` for ``axis``"
                        for key in torch)
    module = function.__module__
    public = "leanpass" if module.startswith("leanpass._") else module  # lp.reshape, lp.linalg.det
    taking = f", taking ``{line}``" if line else ""
    bound.__doc__ = (f"``{public}.{function.__name__}(t, ...)``{taking}"
                     + (f"; PyTorch's {also} too" if also else "") + "." + (f" {note}" if note else ""))
    return bound


def attach(found: dict) -> None:
    """Make the methods ``found`` ({name: function}) Tensor's, and entries of :data:`REGISTRY`
    (methods.py attaches the namespace's, ``leanpass.linalg`` its own)."""
    REGISTRY.update(found)
    for name, function in found.items():
        setattr(Tensor, name, function)
