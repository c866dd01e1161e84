"""Grad mode, per thread, and the creation clock of graph nodes.

``no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(mode)`` / ``inference_mode()``
are context managers and decorators that set whether operations on this thread record
a graph; :data:`sequence` numbers nodes in creation order (a node's inputs always
have smaller numbers), the order the engine visits them in.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled", "grad_lock",
           "sequence"]

# Creation order of graph nodes: a node's inputs always have smaller numbers.
sequence = itertools.count()


class _GradState(threading.local):
    enabled = True


_state = _GradState()

# [the number of threads whose grad mode is off]: while it is 0, grad mode is on on every
# thread, and ``make`` (every operation) skips the thread-local read (``not OFF[0] or
# _state.enabled``: about 30 ns of a small operation's 1 µs). A thread that ends with
# grad mode off stays counted: the test is then as slow as before, never wrong.
OFF = [0]
_off_lock = threading.Lock()


def _set(mode: bool) -> None:
    """Set this thread's grad mode (every change goes through here, to keep :data:`OFF`)."""
    if mode != _state.enabled:
        with _off_lock:
            OFF[0] += -1 if mode else 1
    _state.enabled = mode

# Held while gradients are added into ``.grad`` (once per backward call, for all its
# leaves) and while ``.grad`` allocates its zeros: a read-modify-write of one
# tensor's gradient is never interleaved with another thread's.
grad_lock = threading.Lock()


def is_grad_enabled() -> bool:
    """Whether operations on this thread record a graph for backward."""
    return _state.enabled


class _GradMode:
    """Context manager and decorator setting grad mode on the current thread."""

    _enabled: bool

    def __new__(cls, func=None):
        self = super().__new__(cls)
        if func is not None:  # used bare as a decorator: @no_grad
            return self(func)
        return self

    def __enter__(self):
        self._prev = _state.enabled
        _set(self._enabled)
        return self

    def __exit__(self, *exc_info):
        _set(self._prev)
        return False

    def _fresh(self):
        """A new context manager of this mode (one per call of a decorated function)."""
        return type(self)()

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"{type(self).__name__}() decorates a function, got {type(func).__name__}")
        mode = self._fresh
        if inspect.isgeneratorfunction(func):
            return functools.wraps(func)(_generator_in_mode(func, mode))

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with mode():
                return func(*args, **kwargs)

        return wrapper


def _generator_in_mode(func, mode):
    """A generator function whose every resume (next, send, throw, close) runs ``func``'s
    generator in ``mode``, and the caller's code between resumes in the caller's mode
    (as torch does)."""

    def generator(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with mode():
                response = gen.send(None)
            while True:
                try:
                    request = yield response
                except GeneratorExit:
                    with mode():
                        gen.close()
                    raise
                except BaseException as exc:  # noqa: BLE001 - thrown in by the caller: passed on
                    with mode():
                        response = gen.throw(exc)
                else:
                    with mode():
                        response = gen.send(request)
        except StopIteration as stop:
            return stop.value

    return generator


class no_grad(_GradMode):
    """Disable graph recording on this thread: ``with no_grad(): ...`` or ``@no_grad()``."""

    _enabled = False


class enable_grad(_GradMode):
    """Re-enable graph recording on this thread, e.g. inside a ``no_grad`` block."""

    _enabled = True


class set_grad_enabled(_GradMode):
    """Set graph recording on this thread to ``mode``, as PyTorch's: called alone it
    sets the mode at once (``set_grad_enabled(False)``); as a context manager
    (``with set_grad_enabled(is_train):``) or a decorator it restores the previous
    mode afterwards."""

    def __new__(cls, mode):
        return object.__new__(cls)

    def __init__(self, mode):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled: mode must be a bool, got {type(mode).__name__}")
        self._enabled = mode
        self._prev = _state.enabled
        _set(mode)

    def __enter__(self):  # the mode again (the object may be entered twice, as PyTorch's)
        _set(self._enabled)
        return self

    def _fresh(self):
        return set_grad_enabled(self._enabled)

    def __call__(self, func):
        _set(self._prev)  # as a decorator it changes nothing until the function runs
        return super().__call__(func)


class inference_mode(_GradMode):
    """``inference_mode()`` (or ``inference_mode(True)``): no graph is recorded, as under
    :class:`no_grad` (PyTorch's name for evaluation code; LeanPass has no separate
    inference tensors, so tensors made here may later enter a graph).
    ``inference_mode(False)`` records one, as PyTorch's (also inside ``no_grad``)."""

    def __new__(cls, mode=True):
        if callable(mode):  # used bare as a decorator: @inference_mode
            return cls(True)(mode)
        return object.__new__(cls)

    def __init__(self, mode=True):
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode: mode must be a bool, got {type(mode).__name__}")
        self._mode = mode

    def __enter__(self):
        self._prev = _state.enabled
        _set(not self._mode)
        return self

    def _fresh(self):
        return inference_mode(self._mode)
