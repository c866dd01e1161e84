"""Shared pieces of the tests (imported by test modules; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from leanpass import Tensor, backends, optim
from leanpass.backends import register_backend

# The optimizers whose fused kernels are compared with the generic path
# (tests/test_fused.py on the CPU, tests/test_cuda.py on a GPU).
OPTIMIZERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.1, weight_decay=0.01),
    "momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    "adam": lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1),
    "adamw": lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
}


@contextlib.contextmanager
def registered(device_type: str, backend_class, library: str):
    """A test backend registered for the duration of a ``with`` block, then removed."""
    register_backend(device_type, backend_class, library=library)
    try:
        yield
    finally:
        backends._TYPES.pop(device_type)
        backends._LIBRARIES.pop(library)
        for key in [k for k, b in backends._INSTANCES.items() if b.device_type == device_type]:
            del backends._INSTANCES[key]


# ---- comparisons with PyTorch (the layers' tests) ----------------------------------------


def torch_or_skip():
    """PyTorch, or skip the test that compares with it."""
    return pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")


def host(a):
    """A Tensor, a torch tensor or a device array as a NumPy array."""
    if isinstance(a, Tensor):
        a = a.data
    return a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)


def close(a, b, rtol=1e-10, atol=1e-12):
    """``a`` and ``b`` (each any of :func:`host`'s kinds) agree to ``rtol``/``atol``."""
    np.testing.assert_allclose(host(a), host(b), rtol=rtol, atol=atol)
