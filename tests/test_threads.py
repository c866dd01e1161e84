"""Threads: backward calls that accumulate into one leaf at once, and the first use of
a device from several threads at once."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from helpers import registered  # noqa: E402  (tests/ is on sys.path)

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend
from leanpass.backends.numpy_backend import NumpyBackend


@pytest.fixture
def frequent_switches():
    """Let the interpreter switch threads as often as it can, to provoke races."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _run_together(target, n_threads):
    """Run ``target(i)`` on ``n_threads`` threads released at once; re-raise their errors."""
    barrier = threading.Barrier(n_threads)
    errors = []

    def worker(i):
        try:
            barrier.wait(10)
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.usefixtures("frequent_switches")
def test_concurrent_backward_calls_lose_no_update(device):
    # Large enough that NumPy's addition releases the GIL between reading and writing .grad.
    x = Tensor(np.zeros(4096), requires_grad=True, device=device)
    calls = 300

    def work(_):
        for _ in range(calls):
            (x * 1.0).sum().backward()

    _run_together(work, 2)
    np.testing.assert_array_equal(get_backend(device).to_host(x.grad), np.full(4096, 2.0 * calls))


@pytest.mark.usefixtures("frequent_switches")
def test_concurrent_backward_into_a_leaf_root_loses_no_update(device):
    x = Tensor(np.zeros(4096), requires_grad=True, device=device)
    ones = np.ones(4096)

    def work(_):
        for _ in range(300):
            x.backward(ones)  # the leaf itself is the root: the engine's shortcut

    _run_together(work, 2)
    np.testing.assert_array_equal(get_backend(device).to_host(x.grad), np.full(4096, 600.0))


class _SlowNumpy(NumpyBackend):
    """A NumPy device under its own name whose backend object takes a while to make."""

    device_type = "racy"
    library = "racy_arrays"

    def __init__(self, index=0):
        time.sleep(0.05)  # widens the window in which two threads both find no backend
        super().__init__(index)


def test_first_use_of_a_device_from_two_threads_makes_one_backend():
    with registered("racy", _SlowNumpy, "racy_arrays"):
        made = [None, None]

        def first_tensor(i):
            made[i] = Tensor([1.0, 2.0], requires_grad=True, device="racy")

        _run_together(first_tensor, 2)
        a, b = made
        assert a._backend is b._backend is get_backend("racy")
        np.testing.assert_array_equal((a + b).numpy(), [2.0, 4.0])  # one device, not "racy and racy"


@pytest.mark.usefixtures("frequent_switches")
def test_grad_mode_is_per_thread_while_other_threads_switch_it(device):
    """Grad mode belongs to a thread (the hot path reads a count of the threads with it
    off before the thread's own flag): one thread's ``no_grad`` never stops another's
    graph, nor the reverse, and once every thread is back on the count is 0 again."""
    from leanpass._graph.modes import OFF

    x = Tensor([1.0, 2.0], requires_grad=True, device=device)
    before = OFF[0]
    recorded = [[], []]

    def work(i):
        for _ in range(300):
            if i == 0:  # off, on, off... in this thread alone
                with lp.no_grad():
                    recorded[0].append((x * 2.0).requires_grad)
                    with lp.enable_grad():
                        recorded[0].append(not (x * 2.0).requires_grad)
            else:  # always on here
                recorded[1].append((x * 2.0).requires_grad)

    _run_together(work, 2)
    assert recorded[0] == [False] * 600 and recorded[1] == [True] * 300
    assert OFF[0] == before

    def switch_off(_):
        lp.set_grad_enabled(False)  # and the thread ends so: counted, the test stays right

    _run_together(switch_off, 1)
    try:
        assert OFF[0] == before + 1 and (x * 2.0).requires_grad
        with lp.no_grad():
            assert not (x * 2.0).requires_grad
        assert OFF[0] == before + 1
    finally:
        OFF[0] = before  # the ended thread's mode went with it: later tests take the fast path again
