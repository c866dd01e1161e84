"""The hooks through which :func:`leanpass.compile` records a call of a function.

While a call is traced, :data:`TRACER` holds the tracer (``leanpass.compile``'s); the
layers below report to it what they do: the tensors made from operations (with how to
run each again), the in-place changes, the backward passes, the methods that change
state as a whole (an optimizer's ``step``: :func:`action`), and everything a replay
could not reproduce (a value read on the host, an array from outside the recorded
operations: :func:`note`). Only the traced call's thread is recorded (the tracer's
``records()``). Outside a trace each hook is one test of ``TRACER[0]``.
"""

from __future__ import annotations

import functools
import weakref

__all__ = ["TRACER", "action", "idempotent", "sets_options", "closure_first", "note", "raised", "check",
           "implicit_seed", "draw", "made", "read_grad", "read_option", "read_state", "watch"]

TRACER = [None]  # [the active tracer, or None]

# objects whose Python state a traced call must not change other than through an action:
# ``obj._traced_state()`` gives a snapshot of it (an optimizer's options); lp.compile
# compares them around the call, and traces again where they changed
WATCHED: weakref.WeakSet = weakref.WeakSet()


WRITES = [0]  # writes into watched Python state (an optimizer's parameter groups): see :func:`wrote`


def wrote() -> None:
    """A write into watched Python state (a parameter group's option set): lp.compile
    traces a function that makes one outside an action again at every call, since a
    replay would not make it (even where it wrote the value there was)."""
    WRITES[0] += 1


def read_option(group, key, value) -> None:
    """``group[key]`` (a parameter group's option, ``value``) read by the traced call's
    own code, outside an action (``lr = group["lr"]``, then ``p -= lr * p.grad``): the
    number is in the trace, so a replay checks that the option still holds it, and the
    call is traced again where it does not (a scheduler set another)."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.read_option(group, key, value)


def read_state(state) -> None:
    """An optimizer's ``state`` (``{id(p): {name: value}}``) read by the traced call's own
    code, outside an action (``opt.state[id(p)]["momentum_buffer"]`` to log it, Adam's
    ``"step"`` count to ramp a loss in): where it holds arrays or numbers (the built-in
    optimizers' state), which each step changes, in place or anew, a replay, which
    would give the trace's, cannot stand for the call: it runs eagerly. Tensors there
    (a hand-written optimizer's) are state tensors as any other."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.read_state(state)


def watch(obj) -> None:
    """Have lp.compile check ``obj._traced_state()`` around each traced call (an
    optimizer: a learning rate set by hand inside a step is not replayed). One made in
    a traced call is a change a replay would not make: traced once more (one made at
    the first call and kept, ``if self.opt is None``), then eagerly (one made afresh at
    each call: a replay would step the trace's, its state carried over)."""
    WATCHED.add(obj)
    made(obj)


def made(obj) -> None:
    """``obj``, an optimizer or a scheduler, was just made: in a traced call, a change a
    replay would not make (traced once more, then eagerly: :func:`watch`)."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.made_watched.append(type(obj).__name__)


def action(method):
    """Mark ``method`` as one step of a compiled function's replay: traced, it runs as
    it is and is recorded whole (with its arguments), and a replay calls it again
    (an optimizer's ``step`` and ``zero_grad``: they change state tensors in place,
    outside any operation)."""

    @functools.wraps(method)
    def traced(*args, **kwargs):
        tracer = TRACER[0]
        if tracer is None or not tracer.records():
            return method(*args, **kwargs)
        return tracer.action(method, args, kwargs)

    traced.action = True  # (lp.compile: a replay calls it again; what it changes is not the call's own)
    return traced


def sets_options(method):
    """Mark an :func:`action` that may set an optimizer's options (a scheduler's
    ``step``): an option the call's own code reads after it may differ at a replay."""
    method.sets_options = True
    return method


def closure_first(method):
    """Mark an :func:`action` whose ``closure`` argument (PyTorch's ``opt.step(closure)``)
    it calls first, with grad mode on, returning what the closure returns: traced, the
    closure runs as the call's own code (its operations recorded) and the action is
    recorded without it."""
    method.closure_first = True
    return method


def idempotent(method):
    """Mark an :func:`action` whose second run changes nothing more (``zero_grad``): a
    replay that meets an error after it may still run the call eagerly instead."""
    method.idempotent = True
    return method


def check(fn, *values, branch: bool = False) -> None:
    """A check of values (class indices in range) that a replay must make again:
    ``fn(*arrays)`` raises on bad values; the tracer records it with where each
    value (a tensor, or a tensor's array) comes from. ``branch``: eager code takes
    another path where it fails (a mask no longer causal), never an error: a replay
    must then be able to run the call eagerly instead (the check first, before it
    changes anything), or the call runs eagerly."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.check(fn, values, branch)


def implicit_seed(array) -> None:
    """``array`` is the ones a backward pass starts from when no gradient is given."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.implicit.add(id(array))
        tracer.keep.append(array)


def draw(fn, *args):
    """``fn(*args)``: a random draw (dropout's mask: an array, ``args[0]`` the backend),
    made as it is. A traced call records it, and each replay draws again, from the same
    generator in the same order: a seeded compiled run draws what a seeded eager run
    draws."""
    tracer = TRACER[0]
    if tracer is None or not tracer.records():
        return fn(*args)
    return tracer.draw(fn, args)


def new_leaf(t) -> None:
    """``t`` is a new leaf that requires grad on the values of a tensor the call has
    seen (``lp.func.grad``'s input): a traced call records it as a value of its own."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records():
        tracer.new_leaf(t)


def read(t) -> None:
    """The call reads the Tensor ``t``'s array apart from an operation (the gradient a
    backward pass starts from, ``lp.func.grad``'s input): the tracer records where it
    comes from (an argument, an operation, a tensor from outside)."""
    tracer = TRACER[0]
    if tracer is not None and tracer.records() and tracer.reason is None:
        tracer.source_of(t)


def read_grad(t, get):
    """``t.grad``: the gradient array ``get()`` gives. Read in a traced call, it comes as
    a Tensor on that array, which a replay reads again at that point, so that
    arithmetic on it is recorded (a hand-written update, ``p -= lr * p.grad``; a
    gradient scaled in place)."""
    tracer = TRACER[0]
    if tracer is None or not tracer.records():
        return get()
    return tracer.read_grad(t, get)


def host_read(t, value, frame, what: str) -> None:
    """``value``, a Python number read from the tensor ``t`` (``t.item()``, ``float(t)``)
    by the code of ``frame``: a traced call records it where the function returns it
    as it is (``return loss.item()``), and runs eagerly otherwise, with a warning
    naming ``what``."""
    tracer = TRACER[0]
    if tracer is not None:
        tracer.host_read(t, value, frame, what)


def raised(error: BaseException) -> BaseException:
    """``error``, about to be raised by a check of values or an operation, noted where a
    call is traced: the function may catch it and go on another way, which its replays
    would take whatever their values (the call then runs eagerly from now on). Not a
    ``TypeError``: it comes of dtypes, which the key of a call holds (LeanPass itself
    catches some, as an int tensor times a float on a library that refuses the mix)."""
    tracer = TRACER[0]
    if tracer is not None and not isinstance(error, TypeError):
        tracer.unsupported(f"an error raised inside the function ({type(error).__name__}: {error}), which it may "
                           "catch: a replay would take the same path whatever its values")
    return error


def note(what: str) -> None:
    """Tell the tracer, if a call is traced, that ``what`` happened, which a replay
    cannot reproduce (a host read of a value, a shape that depends on values): the
    call then runs eagerly from now on, with a warning naming ``what``."""
    tracer = TRACER[0]
    if tracer is not None:
        tracer.unsupported(what)
