"""Shared pieces of the tests (imported by test modules; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest

from leanpass import Tensor, backends, nn, optim
from leanpass.backends import backend_of_array, get_backend, register_backend

# The optimizers whose fused kernels are compared with the generic path
# (tests/test_fused.py on the CPU, tests/test_cuda.py on a GPU).
OPTIMIZERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.1, weight_decay=0.01),
    "momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    "adam": lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1),
    "adamw": lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
}


def training_step(model, opt):
    """A classifier's training step, uncompiled: zero the gradients, the cross-entropy
    of ``model(x)`` against ``y``, backward, ``opt.step()``; returns the loss."""
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


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


def other_device(device: str, prefer: str = "strict:1") -> str:
    """A device other than ``device`` (the device under test), for the tests of mixing
    devices: ``prefer`` where that differs from ``device``, else another ``strict``
    device (or the CPU). Under ``LEANPASS_TEST_DEVICES=strict:1`` the device under test
    is ``strict:1`` itself, so a fixed ``"strict:1"`` would not be another device."""
    device = get_backend(device).device
    for candidate in (prefer, "strict:2", "strict", "cpu"):
        if get_backend(candidate).device != device:
            return get_backend(candidate).device
    raise AssertionError(f"no device other than {device!r}")  # unreachable: the candidates differ


# ---- comparisons with PyTorch (the layers' tests) ----------------------------------------


def skip_below(module: str, minimum: tuple, why: str):
    """Import ``module``, or skip the test that needs it at version ``minimum`` or newer
    (``why``: what older versions do instead)."""
    found = pytest.importorskip(module)
    version = tuple(int(part) for part in re.findall(r"\d+", found.__version__)[:2])
    if version < minimum:
        pytest.skip(f"needs {module} {'.'.join(map(str, minimum))} or newer, found {found.__version__}: {why}")
    return found


# Measured: SciPy 1.17.1 and 1.18.1 with scikit-learn 1.9.1 pass; SciPy 1.15.3 with scikit-learn 1.7.2
# (the newest on Python 3.10) do not.
SCIPY_DISPATCH = ((1, 17), "its array API dispatch changes the input in place (logsumexp) and does not reach "
                           "lp.special, so it computes through NumPy, which a tensor in a graph refuses")
SKLEARN_DISPATCH = ((1, 9), "its array API dispatch calls NumPy's ufuncs (np.isnan) on the tensor")


def torch_or_skip():
    """PyTorch, or skip the test that compares with it."""
    return pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")


def host(a):
    """A Tensor, a torch tensor, a device array or host data as a NumPy array. Device
    data reaches the host only through the Tensor's ``.numpy()`` or its backend's
    ``to_host``: an implicit ``np.asarray`` raises on a GPU (and on ``strict:1``)."""
    if isinstance(a, Tensor):
        return a.numpy()
    if hasattr(a, "detach"):  # a torch tensor
        return a.detach().numpy()
    backend = backend_of_array(a)
    if backend is not None:
        return backend.to_host(a)
    return np.asarray(a)


def graph_nodes(t) -> list:
    """The graph nodes below the tensor ``t`` (its own first), each once: walked through
    their parent edges, which are nodes or tensors (leaves, values outside the graph)."""
    from leanpass._graph.node import Node

    start = t._node
    seen, stack, found = set(), [] if start is None else [start], []
    while stack:
        node = stack.pop()
        if id(node) in seen or type(node) is not Node:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(node._prev)
    return found


def close(a, b, rtol=1e-10, atol=1e-12):
    """``a`` and ``b`` (each any of :func:`host`'s kinds) agree to ``rtol``/``atol``."""
    np.testing.assert_allclose(host(a), host(b), rtol=rtol, atol=atol)
