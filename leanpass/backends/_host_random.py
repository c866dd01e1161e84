"""The host's random generators outside LeanPass (NumPy's and Python's), for
``lp.compile``: a number a traced call draws from one would be frozen into its
replays, so the compiler compares their states around the trace. NumPy is named
here, in the backends' layer, not in the compiler (DESIGN.md's rule 2)."""

from __future__ import annotations

import os
import random
import sys

import numpy as np

GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
# what makes a generator, seeded from the system's entropy where it is called without a seed
_MAKERS = (np.random.default_rng, np.random.RandomState, np.random.SeedSequence, np.random.PCG64,
           np.random.PCG64DXSM, np.random.MT19937, np.random.Philox, np.random.SFC64, random.Random,
           random.SystemRandom)


def makes_generator(value) -> bool:
    """Whether ``value`` makes a random generator (``np.random.default_rng``,
    ``random.Random``: called without a seed, one seeded from the system's entropy)."""
    return any(value is maker for maker in _MAKERS)


def global_generators(named, names) -> list:
    """The global generators code draws from where it names them: NumPy's legacy one
    (``np.random.beta``: the module ``numpy`` with ``random`` among the code's
    ``names``, or ``numpy.random`` itself) and Python's (the ``random`` module)."""
    found = []
    if ("random" in names and any(v is np for v in named)) or any(v is np.random for v in named):
        found.append(np.random.mtrand._rand)
    if any(v is random for v in named):
        found.append(random._inst)
    return found


def state(generator):
    """``generator``'s state, comparable by ``==``; a new object for one without a state
    (``random.SystemRandom``: the system's entropy), which counts as drawn from."""
    if isinstance(generator, np.random.Generator):
        return _frozen(generator.bit_generator.state)
    if isinstance(generator, np.random.RandomState):
        return _frozen(generator.get_state(legacy=False))
    try:
        return generator.getstate()
    except NotImplementedError:
        return object()


def _frozen(value):
    """A generator's state (dicts, tuples and arrays) comparable by ``==``."""
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return tuple(map(_frozen, value))
    if isinstance(value, np.ndarray):
        return value.tobytes()
    return value


_SEED = random.Random.seed.__code__  # (random.Random() and random.seed(): seeded with None, from os.urandom)


class EntropyWatch:
    """Whether the code run on this thread between :meth:`start` and :meth:`stop` drew on
    the system's entropy: ``os.urandom`` (an unseeded NumPy generator's ``SeedSequence``,
    ``random.SystemRandom``) or Python's ``Random.seed(None)`` (``random.Random()``), through
    ``sys.setprofile`` (a trace of code that names what makes a generator turns it on:
    the numbers drawn from such a generator would be frozen into the replays). A
    profiler set already is left alone, and the entropy counted as drawn. A legacy
    ``np.random.RandomState(seed)`` counts too: it draws some before its seed."""

    def __init__(self):
        self.drawn = False
        self._set = False

    def start(self) -> None:
        if sys.getprofile() is not None:
            self.drawn = True
            return
        sys.setprofile(self._event)
        self._set = True

    def stop(self) -> None:
        if self._set:
            sys.setprofile(None)
            self._set = False

    def _event(self, frame, event, arg) -> None:
        if event == "c_call":
            if arg is os.urandom:
                self.drawn = True
        elif event == "call" and frame.f_code is _SEED and frame.f_locals.get("a") is None:
            self.drawn = True
