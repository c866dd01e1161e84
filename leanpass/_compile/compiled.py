"""The compiled function: its cache of plans by the key of a call, when it traces,
replays or runs eagerly, and why (``explain()``); :func:`compile`."""

from __future__ import annotations

import collections
import copy
import functools
import inspect
import os
import sys
import threading
import types
import warnings

from .._graph import hooks
from .._graph.modes import is_grad_enabled
from .._graph.trace import TRACER
from ..backends import _base as _backends_base
from ..backends import _host_random, get_default_device, get_default_dtype
from ..backends._values import fingerprint
from ..nn.module import _CHANGES as _MODULE_CHANGES
from ..nn.module import Module, holding_members, unchanged
from ..nn.module import restored as modules_restored
from . import state as _state
from .code import (
    _PACKAGE,
    _attribute_names,
    _called_only,
    _host_draws,
    _host_generators,
    _merged,
    _named_objects,
    _names_read,
    _same,
    _unwrapped,
    _values,
    _words,
)
from .record import _Branch, _Retry, _Stale
from .returns import _returned_reads
from .state import (
    _COMPARED,
    Names,
    _array_state,
    _call_key,
    _changed_arrays,
    _held_members,
    _is_array,
    _named_members,
    _named_state,
    _python_state,
    _same_state,
    _state_kept,
    _state_now,
    _unreadable,
)
from .tracer import Tracer, _references

__all__ = ["compile", "Compiled"]


def _disabled() -> bool:
    """Whether ``LEANPASS_COMPILE=0`` is set: read when a function is compiled (each call
    reading the environment cost 2 of a small step's 100 microseconds)."""
    return os.environ.get("LEANPASS_COMPILE", "1") == "0"


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
        self._escaped: dict = {}  # keys whose trace kept a tensor made in the call: one more trace, then eagerly
        self._escapes = 0  # the traces in a row that kept nothing for that (each of a new key)
        self._skips = 0  # calls of new kinds still to run eagerly untraced, after such traces in a row
        self._backoff = 4  # how many the next such streak skips (doubled at each, up to 256)
        self._unsettled: set = set()  # keys whose last trace changed Python state a replay would not change
        self._churning: dict = {}  # keys whose last call found state it reads set since: that state, read then
        self._refits: dict = {}  # keys whose traces fitted no call in a row: (how many, the module changes then)
        self._branches: dict = {}  # key -> the traces of its other paths (a check that decides a path: Plan)
        self._untraceable: set = set()  # keys one of whose paths cannot be traced: eagerly there
        self.calls = {"traced": 0, "replayed": 0, "eager": 0}
        self.off = _disabled()  # LEANPASS_COMPILE=0 when it was made: every call eagerly

    def __deepcopy__(self, memo):
        """A copy of the compiled function of a copy of ``fn`` (``copy.deepcopy`` of a model
        whose ``forward`` was compiled: the copy's bound method), with no trace: a trace
        holds the original's tensors. One a module names (``@lp.compile`` on a function
        there) is itself, as a function is."""
        if isinstance(self.__reduce__(), str):
            return self
        return Compiled(copy.deepcopy(self.fn, memo), self.cache_size, self.fuse)

    def __reduce__(self):
        """Pickled by its name where its module names it (``@lp.compile`` on a function
        there), else as a compiled function of ``fn``, pickled, without its traces."""
        name = getattr(self.fn, "__qualname__", None)
        found = sys.modules.get(getattr(self.fn, "__module__", None) or "")
        for part in (name or "").split("."):
            found = getattr(found, part, None)
        if found is self:
            return name
        return Compiled, (self.fn, self.cache_size, self.fuse)

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
            elif str(exc) == "an argument whose attributes cannot be read":
                self._warn("runs eagerly: an argument of a subclass (of tuple, list, dict, int, str, bytes or a "
                           "path) whose attributes raise when read (a replay could not tell them unchanged)",
                           "the call")
            elif str(exc) == "a slice argument of objects":
                self._warn("runs eagerly: a slice argument whose bounds are objects of their own (their __index__ "
                           "may give another position at each call; pass a slice of integers)", "the call")
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        if entry is None:
            if self._skips > 0 and key not in self._escaped:  # (traces of new kinds kept nothing, 3 in a row)
                self._skips -= 1  # (> 0: two threads may both take the last one)
                self._seen(key)  # (seen again, it is traced: a kind that comes back may replay)
                self.calls["eager"] += 1
                return self.fn(*args, **kwargs)
            return self._trace(key, tensors, objects, args, kwargs)
        if len(self._entries) > 1:
            self._entries.move_to_end(key)
        if isinstance(entry, str):  # it could not be traced: eagerly
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        if not _fits(entry, tensors):
            entry, kept = self._earlier(key, entry, tensors)
            if entry is None:
                return self._refit(key, kept, tensors, objects, args, kwargs)
        if not (_state_kept(entry.object_state) and _state_kept(entry.named_state)):
            now = _state_now(entry.object_state + entry.named_state)
            streak, last = self._churning.get(key, (0, None))
            streak = streak + 1 if last is None or not _same_state(last, now) else 0  # (0: it stayed since the last)
            self._churning[key] = (streak, now)
            if len(self._churning) > self.cache_size:  # (keys no longer cached)
                self._churning = {k: v for k, v in self._churning.items() if k in self._entries}
            arrays = _changed_arrays(entry.object_state)  # (an array's values, not an attribute, changed)
            unreadable = _unreadable(now)
            if streak >= 3:  # set before this call and the two before: while it changes at every call, eagerly
                self._warn(f"runs eagerly while the values of {arrays} change at every call ({_COMPARED}); traced "
                           "again once they stay as they are" if arrays
                           else f"{_UNREADABLE}: runs eagerly" if unreadable
                           else "runs eagerly while an attribute or an item its code reads changes at every call (a "
                           "counter kept there: keep it elsewhere); traced again once it stays as it is", "the call")
                self.calls["eager"] += 1  # (a trace costs more than the eager call it makes)
                return self.fn(*args, **kwargs)
            self._warn(f"traced again: the values of {arrays} changed since the last call ({_COMPARED})" if arrays
                       else f"{_UNREADABLE}: traced again" if unreadable
                       else "traced again: an attribute its code reads, of an argument or of an object it names (a "
                       "global cfg), was set since the last call, or an item of a dict or list it names "
                       "(CFG['lr'])", "the call")
            return self._trace(key, tensors, objects, args, kwargs)
        others = self._branches.get(key, ())
        for plan in (entry, *others):  # the traces of the key's paths (a target equal to ignore_index or none)
            if plan is not entry and not (_fits(plan, tensors) and _state_kept(plan.object_state)
                                          and _state_kept(plan.named_state)):
                continue
            # the host generator's state where the replay draws (dropout's masks on the CPU): a
            # replay that falls back gives its draws back, so the eager call draws as eagerly
            drawn = _backends_base._host_rng.bit_generator.state if plan.draws else None
            try:
                out = plan.replay(tensors)
            except (_Stale, _Retry) as exc:  # a shape the trace did not see: eagerly from now on; an error: this
                if drawn is not None:  # once; another path: the next trace of the key, or a new one
                    _backends_base._host_rng.bit_generator.state = drawn
                if isinstance(exc, _Branch):
                    continue
                if isinstance(exc, _Stale):
                    self._fall_back(key, (f"a replay met {exc}", "replay"))
                else:  # an error before any change of state: this call eagerly (it may catch the error)
                    plan.retries, plan.retried, plan.retry_reason = plan.retries + 1, plan.retried + 1, str(exc)
                    if plan.retries == 3:  # (at every call: each pays for the replay that failed too)
                        self._warn(f"replays met an error before any change of state at 3 calls in a row "
                                   f"({exc}), each call then run eagerly (which takes the path the code takes "
                                   "there, or raises the error): each costs a replay too", "replay")
                self.calls["eager"] += 1
                return self.fn(*args, **kwargs)
            except BaseException:  # after a change of state: raised as eagerly; the next call traces again
                if self._entries.get(key) is entry:
                    del self._entries[key]
                    self._churning.pop(key, None)
                raise
            if plan is not entry:  # (the path taken last comes first)
                self._entries[key] = plan
                self._branches[key] = [entry, *(p for p in others if p is not plan)]
            if self._churning:
                self._churning.pop(key, None)
            if self._refits:
                self._refits.pop(key, None)
            plan.retries = self._escapes = 0
            self.calls["replayed"] += 1
            return out
        return self._other_path(key, entry, tensors, objects, args, kwargs)

    def _refit(self, key, kept, tensors, objects, args, kwargs):
        """A call none of whose key's traces fits (a module's attribute set since, a state
        tensor of another shape): traced, unless the modules were changed before this
        call and the two before, each since the last (``model.past = kv``, a growing
        buffer set by the caller), and the key keeps none of its earlier traces (or
        would drop one: ``kept``, :meth:`_earlier`'s count): eagerly then, while they
        keep changing, as a trace costs more than the eager call."""
        streak, last = self._refits.get(key, (0, None))
        streak = streak + 1 if _MODULE_CHANGES[0] != last else 0
        if len(self._refits) > self.cache_size:  # (keys no longer cached)
            self._refits = {k: v for k, v in self._refits.items() if k in self._entries}
        try:
            if streak >= 3 and not 0 < kept <= 3:  # (none kept: an object set; or more than it may keep: a
                # module's flags set in more ways than a key keeps traces)
                self._warn("runs eagerly while modules' attributes or members are set before every call "
                           "(model.past = kv; any module's: lp.compile does not tell which ones the call reads) "
                           "and no trace fits: a trace at each call costs more than the eager call; traced again "
                           "once they stay as they are", "the call")
                self.calls["eager"] += 1
                return self.fn(*args, **kwargs)
            return self._trace(key, tensors, objects, args, kwargs, branch=True)
        finally:
            self._refits[key] = (streak, _MODULE_CHANGES[0])  # (after the call: the caller's changes count)

    def _earlier(self, key, entry, tensors):
        """A trace of the key made before ``entry`` that fits the call, where ``entry``
        does not (a layer frozen at every other call, with ``requires_grad_``; a
        parameter moved and moved back): made the entry, ``entry`` kept beside it; with
        None for the count. Where none fits, None and the number of traces that could be
        kept: those that only a state tensor's shape, dtype, device or flag, or a
        module's flag (``.eval()`` at alternate calls), tells from the call (such a
        change may be undone; a layer replaced, a name rebound, will not be: they go),
        at most 3 beside the trace to come, the newest."""
        others = self._branches.get(key, [])
        for plan in others:
            if _fits(plan, tensors):
                self._entries[key] = plan
                self._branches[key] = [entry, *(p for p in others if p is not plan)]
                return plan, None
        kept = [p for p in (entry, *others) if _fits(p, tensors, externals=False, undone=True)]
        self._branches[key] = kept[:3]
        return None, len(kept)

    def _other_path(self, key, entry, tensors, objects, args, kwargs):
        """A call none of whose key's traces takes its path (a check that decides one
        failed in each: targets equal to ``ignore_index`` where the traces saw none):
        traced too, beside them (at most 4 paths a key; past that, and where the path
        cannot be traced, the call runs eagerly)."""
        others = self._branches.get(key, [])
        if len(others) >= 3 or key in self._untraceable:
            self._warn("runs eagerly where a check that decides a path (a target equal to ignore_index, a causal "
                       "mask) takes one its traces did not (at most 4 traces of one kind of call; or one that "
                       "cannot be traced)", "the call")
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        self._branches[key] = [entry, *others]
        try:
            out = self._trace(key, tensors, objects, args, kwargs, branch=True)
        except BaseException:  # (an error of this call's: the key's traces stay)
            if self._entries.get(key) is None:
                self._entries[key], self._branches[key] = entry, others
            raise
        if isinstance(self._entries.get(key), str):  # (this path runs eagerly; the others replay)
            self._entries[key] = entry
            self._branches[key] = others
            self._untraceable.add(key)
        return out

    def _trace(self, key, tensors, objects, args, kwargs, branch: bool = False):
        """Runs the call eagerly, recording it: the key's trace where it can replay
        (``branch``: beside the key's other traces, one for another path). While
        another thread traces (:data:`TRACER` is one for all threads), eagerly."""
        if not _TRACING.acquire(blocking=False):
            self.calls["eager"] += 1
            return self.fn(*args, **kwargs)
        try:
            return self._record(key, tensors, objects, args, kwargs, branch)
        finally:
            _TRACING.release()
            if self._churning and not hasattr(self._entries.get(key), "object_state"):  # (no trace kept: what the
                self._churning.pop(key, None)  # last call read, arrays and their copies among it, goes)

    def _record(self, key, tensors, objects, args, kwargs, branch):
        """:meth:`_trace`'s work, one thread at a time."""
        self._entries.pop(key, None)
        if not branch:  # (the traces of the key's other paths were made before what made this trace)
            self._branches.pop(key, None)
            self._untraceable.discard(key)
        if self._attrs is _UNREAD:
            self._attrs = _attribute_names(self._function)
        # the functions the call's code reaches (its helpers, its layers' forward), the host generators they may
        # draw from, and the names they read (helper's global SCALE: checked before each replay too)
        generators, reached, makers, held = _host_generators(self._function, [*objects, *self._owners])
        reads = _names_read(reached)
        # the attributes of the arguments and the owner its code names, or a helper's reached (self.helper(x)
        # reading self.scale, helper(x, cfg) reading cfg.scale)
        called = _called_only(reached)  # (opt.step(): not the value of a count self.step)
        attrs = None if self._attrs is None else Names(self._attrs.union(*map(_attribute_names, reached[1:])), called)
        modules, names = _MODULE_CHANGES[0], _values(reads)
        # Python state the call may change: snapshots first (they hold the objects: the
        # references the tracer counts below, before and after the call, include theirs)
        words = Names(frozenset().union(*(_words(f) for f in reached)), called)  # (a config module passed on)
        named = _merged([*(x for fn in reached for x in _named_objects(fn, words)),  # (cfg.scale, CFG["lr"],
                         *((obj, words) for obj in held)])  # config.lr; self.cfg.scale in a layer's forward)
        named_state = _named_state(named, words)
        given = _python_state((args, kwargs), [*objects, *self._owners], attrs)
        python = given + named_state
        modules_given = [v for v in (*objects, *self._owners) if isinstance(v, Module)]  # (a model passed in, a
        members = _named_members(names) + _named_members(modules_given)  # method's own)
        held_members = _held_members(python)  # (compared after the call alone: a called module's are before
        # replays)
        tracer = Tracer(tensors, _TRACE_CODE)
        # the array arguments' values (NumPy's: keyed by identity), before the call; also those that plain objects
        # among the arguments hold in attributes the code names (batch.x)
        arrays, uncompared = _array_state([*objects, *self._owners, *(v for _, items, _ in given for v in items)])
        prints = [fingerprint(a) for a in uncompared]  # (theirs: a hash, no copy; the call must not change them)
        tracer.arg_arrays = {id(v): v for v in objects if _is_array(v)}  # (the arguments themselves)
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
        if not (_state_kept(arrays) and prints == [fingerprint(a) for a in uncompared]):  # changed by the call, by
            # NumPy code (a *= 2: a replay would not run it) or through a tensor whose memory it is (a parameter's,
            # taken through DLPack, that p.add_ changes: what NumPy computes from it would be the trace's at a replay)
            tracer.unsupported("an array argument changed in place by the function (code of its own library, "
                               "which lp.compile does not record, or a change of a tensor whose memory it is)")
        if hooks.post_hook_changes[0] != hooked:  # a replay runs the hooks there are, and would not add this one
            tracer.unsupported("a post-accumulate-grad hook added or removed inside the function")
        if any(value is t for value in names for t in tensors):  # one object, two roles: a replay would merge them
            tracer.unsupported("an argument the function also reads by name (a global or closure variable)")
        changed = None  # Python state the call changed that a replay would leave as it is
        after = _python_state((args, kwargs), [*objects, *self._owners], attrs) + _named_state(named, words)
        unreadable, same = _unreadable(after), _same_state(python, after)
        del after  # (not kept: its objects would count among the references the tracer counts below)
        if unreadable:
            changed = _UNREADABLE
        elif not same:
            changed = "a list or dict argument or one the function names, or an attribute of an argument or of an " \
                      "object it names, changed by the function, or an iterator it names advanced (lst.pop(), " \
                      "d[key] = v, COUNTS['n'] += 1, self.steps += 1, cfg.calls += 1, next(it))"
        elif not all(unchanged(c, items) for c, items in (*members, *held_members)):
            changed = "a list or dict of tensors or modules the function reads by name or through an object, " \
                      "changed by it (history.append(loss), a module's list of layers)"
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
        made = f"{' and '.join(tracer.made_watched)} made inside the function (a replay would step the first " \
            "call's, its state carried over: make it outside)" if tracer.made_watched else None
        kept = (tracer.escaped(box) or changed or made) if plan is not None else None
        if kept is not None:
            if key not in self._escaped:  # once: a cache filled at the first call (a mask made once): trace again
                self._seen(key)
                self._escapes += 1
                if self._escapes >= 3:  # (each call of a new kind: a cache grown at every call, new shapes)
                    self._warn(f"traced at 3 calls in a row, each of a new kind, and kept no trace ({kept}; a "
                               "second call of a kind is traced once more): where every call is of a new kind "
                               "(a cache grown at each, a list argument it pops), a trace at every call costs "
                               "more than the eager call, so the calls of new kinds after them run eagerly, "
                               "untraced, for a while (4 calls, then twice as many at each such streak); keep "
                               "what grows out of the arguments and results", "the call")
                    # (after them, one more such trace starts the next streak: the calls are still of new kinds)
                    self._escapes, self._skips, self._backoff = 2, self._backoff, min(2 * self._backoff, 256)
                return box[0]
            plan, tracer.reason = None, (f"{kept}: a replay would leave it as the first call made it",
                                         _where_defined(self.fn))
        if plan is not None:
            plan.name_reads, plan.names = reads, names
            plan.objects = objects  # (the arguments keyed by their ids: held, the ids are not reused)
            plan.named, plan.named_state = named, named_state
            # the attributes of the plain objects among the arguments and of the callable's own (_unwrapped) that
            # the function's code, or a helper's it reaches, names (attrs): what a caller may change between calls
            plan.object_state = _python_state((), [*objects, *self._owners], attrs) + arrays
            plan.member_lists = plan.member_lists + members
        self._escapes = 0
        if plan is None:
            self._fall_back(key, tracer.reason)
        else:
            if uncompared:
                self._warn("replays what NumPy computes from an array it is given as at the trace (an argument, or "
                           "one an argument, its object or a partial holds), where a replay does not compare its "
                           f"values (of more than {_state.COMPARED_BYTES >> 20} MiB: a copy per trace and a pass "
                           "per call; of objects, or of NumPy's StringDType; of a subclass of NumPy's array); pass "
                           "a Tensor (lp.asarray(a))", "trace")
            self._entries[key] = plan
            self._skips, self._backoff = 0, 4  # (a trace kept: calls of new kinds are traced again)
            self._bound_cache(key)
        return box[0]

    def _seen(self, key) -> None:
        """Note ``key`` as seen once without a trace kept (:attr:`_escaped`): its next call
        is traced (once more), not run eagerly untraced."""
        self._escaped[key] = None
        while len(self._escaped) > 4 * self.cache_size:  # (the oldest keys go; another thread's call may take one
            try:  # too: called outside the tracing lock from the eager stretch)
                del self._escaped[next(iter(self._escaped))]
            except (KeyError, RuntimeError, StopIteration):
                break

    def _fall_back(self, key, reason) -> None:
        what, where = reason
        self._entries[key] = f"{what} ({where})"
        self._branches.pop(key, None)  # (the key runs eagerly: its other traces go; _other_path keeps its own)
        self._bound_cache(key)
        self._warn(f"runs eagerly for these arguments: {what}", where)

    def _bound_cache(self, key) -> None:
        """Drops the least recently used entries past ``cache_size``; at the first drop,
        warns which arguments told ``key`` from the entry before it (a number that
        changes at every call traces at every call)."""
        while len(self._entries) > self.cache_size:
            dropped, _ = self._entries.popitem(last=False)
            self._branches.pop(dropped, None)
            self._churning.pop(dropped, None)  # (what it read last: an array argument and its copy among it)
            self._untraceable.discard(dropped)
            before = next(reversed([k for k in self._entries if k != key]), dropped)  # (the last call's kind)
            differing = _differing(key, before, self.fn)
            if _arrays_differ(key, before):
                hint = ("an array argument is the same kind of call only as the same array object (what NumPy "
                        "code does with it is not recorded): pass a Tensor, lp.asarray(a)")
            else:
                hint = ("a Python number that changes at every call, as a step count, traces at every call: pass "
                        "it as a tensor, lp.asarray(n)")
            self._warn(f"fills its cache of {self.cache_size} traces, and the oldest goes: each new kind of call "
                       f"traces again ({differing} differed from the call before; {hint})", "the call")

    def _warn(self, what: str, where: str) -> None:
        if what not in self._warned:  # once per function and reason
            self._warned.add(what)
            name = getattr(self, "__name__", None) or _name_of(self.fn)  # (a callable object, a partial)
            level, frame = 1, sys._getframe()  # (the warning names the first frame outside LeanPass: the caller's)
            while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
                level, frame = level + 1, frame.f_back
            warnings.warn(f"lp.compile: {name} {what} at {where}", RuntimeWarning, stacklevel=level)

    def explain(self) -> str:
        """What was traced: per cache entry, the operations, backward passes, in-place
        changes, steps and constants it replays, or why it runs eagerly; and the calls
        so far."""
        lines = [f"lp.compile({_name_of(self.fn)}): {len(self._entries)} cache "
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
                         f"fusion: {entry.fusion()}"
                         + (f"; {entry.retried} calls run eagerly after their replay met an error before any "
                            f"change of state (the last: {entry.retry_reason})" if entry.retried else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<lp.compile of {self.fn!r}>"


_UNREADABLE = ("the attributes of an object its code names raise when read (a proxy outside its context, a "
               "__getattr__ that raises other than AttributeError), so a replay cannot tell whether they changed")


def _fits(plan, tensors, externals: bool = True, undone: bool = False) -> bool:
    """Whether ``plan`` may replay a call with ``tensors``: the state tensors it reads
    as the trace saw them (:meth:`Plan.fits`; not checked without ``externals``; with
    ``undone``, a module's flag set since passes), the names it reads bound as then, no
    hook added to an argument it watches."""
    return (plan.fits(externals, undone) and all(map(_same, _values(plan.name_reads), plan.names))
            and not (plan.hook_args and any(hooks.hooked(tensors[i], post) for i, post in plan.hook_args)))


def _differing(key, other, fn) -> str:
    """Which arguments tell the key of a call from ``other``'s, named where ``fn``'s
    signature names them (``"argument 'it'"``); the modes or the tensors' sharing
    where no argument does."""
    (_, parts), kwargs = key[0], key[1]
    (_, other_parts), other_kwargs = other[0], other[1]
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    found = [f"argument {names[i]!r}" if i < len(names) else f"argument {i}"
             for i, (a, b) in enumerate(zip(parts, other_parts)) if a != b]
    if len(parts) != len(other_parts):
        found.append("the number of arguments")
    if kwargs != other_kwargs:
        found.append("the keyword arguments")
    return ", ".join(found) or "the grad mode, the default dtype or device, or which tensors share memory"


def _arrays_differ(key, other) -> bool:
    """Whether an array argument (a NumPy array, keyed by identity) tells the key of a
    call from ``other``'s."""
    def arrays(part):
        if type(part) is tuple and part:
            if part[0] == "array":
                yield part
            for item in part[1:] if type(part[0]) is str else part:
                yield from arrays(item)

    return set(arrays(key)) != set(arrays(other))


def _name_of(fn) -> str:
    """A name for ``fn`` where it has none of its own: a callable object's class (a
    Module's, not its repr of several lines), a partial's function's."""
    if isinstance(fn, functools.partial):
        return f"partial({_name_of(fn.func)})"
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


def _where_defined(fn) -> str:
    """``file:line`` of ``fn``'s definition, for a reason that has no line of its own (a
    callable object's: its class's ``forward``, a Module's, or ``__call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__", None)
    if code is None:
        method = getattr(type(fn), "forward", None) or vars(type(fn)).get("__call__")
        code = getattr(method, "__code__", None)
    return f"{getattr(code, 'co_filename', '?')}:{getattr(code, 'co_firstlineno', '?')}"


_TRACE_CODE = Compiled._record.__code__  # the frame that calls the traced function
_TRACING = threading.Lock()  # held by the thread that traces: two traces at once would share TRACER
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
