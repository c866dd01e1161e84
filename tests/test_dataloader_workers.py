"""DataLoader(num_workers=N): exactly the batches of num_workers=0, in the same order,
made ahead by N worker threads with a bounded prefetch; a worker's exception raised in
the loop with its traceback; no thread left behind when the loop stops early or the
loader (or its iterator) is collected; the arguments checked."""

from __future__ import annotations

import copy
import gc
import threading
import time
import traceback

import numpy as np
import pytest

import leanpass as lp
from leanpass.data import DataLoader, DistributedSampler, TensorDataset

WORKER = "leanpass DataLoader worker"


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER)]


@pytest.fixture(autouse=True)
def no_stray_threads():
    """Every test starts and ends without worker threads (none left for the collector
    to stop: refcounting stops them)."""
    assert _workers() == []
    before = set(threading.enumerate())
    yield
    assert _workers() == [], "worker threads left running"
    assert set(threading.enumerate()) <= before


def _dataset(device, n=23):
    x = lp.asarray(np.arange(3.0 * n).reshape(n, 3), device=device)
    return TensorDataset(x, lp.arange(n, device=device))


class _Rows:
    """A plain dataset (``__len__``, ``__getitem__``) of dict rows, recording who reads."""

    def __init__(self, n, device, fail_at=None):
        self.n, self.device, self.fail_at = n, device, fail_at
        self.reads, self.lock = [], threading.Lock()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.lock:
            self.reads.append((i, threading.current_thread().name))
        if i == self.fail_at:
            raise KeyError(f"row {i} is damaged")
        return {"x": lp.asarray(np.full(2, float(i)), device=self.device), "y": i, "name": f"row{i}"}


def _same(a, b):
    """Two batches (tuples, dicts, lists of Tensors or strings) are equal, value, dtype and device."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, lp.Tensor):
        assert (a.shape, a.dtype, a.device, a.requires_grad) == (b.shape, b.dtype, b.device, b.requires_grad)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    else:
        assert a == b


def _epochs(loader, epochs=3, set_epoch=False):
    out = []
    for epoch in range(epochs):
        if set_epoch:
            loader.set_epoch(epoch)
        out.append(list(loader))
    return out


def _assert_same_epochs(a, b):
    assert [len(e) for e in a] == [len(e) for e in b]
    for ea, eb in zip(a, b):
        for x, y in zip(ea, eb):
            _same(x, y)


@pytest.mark.parametrize("num_workers, prefetch_factor", [(1, None), (2, None), (3, 1), (4, 5)])
@pytest.mark.parametrize("options", [
    dict(batch_size=4),
    dict(batch_size=5, drop_last=True),
    dict(batch_size=4, shuffle=True, seed=3),
    dict(batch_size=6, shuffle=True, seed=3, drop_last=True),
    dict(batch_size=3, sampler=[5, 0, -1, 7, 7, 2, 9]),
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_the_batches_of_num_workers_0_in_the_same_order(device, options, num_workers, prefetch_factor):
    for set_epoch in (False, True):  # the loader's own generator, or default_rng([seed, epoch])
        plain = _epochs(DataLoader(_dataset(device), **options), set_epoch=set_epoch)
        ahead = DataLoader(_dataset(device), **options, num_workers=num_workers, prefetch_factor=prefetch_factor)
        _assert_same_epochs(_epochs(ahead, set_epoch=set_epoch), plain)


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_plain_dataset_gives_the_same_collated_batches(device, shuffle):
    plain = _epochs(DataLoader(_Rows(11, device), batch_size=3, shuffle=shuffle, seed=1))
    ahead = DataLoader(_Rows(11, device), batch_size=3, shuffle=shuffle, seed=1, num_workers=3)
    _assert_same_epochs(_epochs(ahead), plain)


@pytest.mark.parametrize("shuffle, drop_last", [(False, False), (True, False), (True, True)])
def test_distributed_sampler_shards_are_the_same(device, shuffle, drop_last):
    ds = _dataset(device, 17)
    for rank in range(3):
        batches = []
        for workers in (0, 2):
            sampler = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=shuffle, seed=7, drop_last=drop_last)
            loader = DataLoader(ds, batch_size=2, sampler=sampler, num_workers=workers)
            epochs = []
            for epoch in range(2):
                sampler.set_epoch(epoch)
                epochs.append(list(loader))
            batches.append(epochs)
        _assert_same_epochs(batches[1], batches[0])


def test_many_epochs_of_many_workers_stay_the_same(device):
    ds = _dataset(device, 200)
    plain = _epochs(DataLoader(ds, batch_size=7, shuffle=True, seed=11), epochs=8)
    _assert_same_epochs(_epochs(DataLoader(ds, batch_size=7, shuffle=True, seed=11, num_workers=4,
                                           prefetch_factor=3), epochs=8), plain)


def _wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_batches_are_made_ahead_by_the_workers_with_a_bounded_prefetch(device):
    rows = _Rows(40, device)
    loader = DataLoader(rows, batch_size=1, num_workers=2, prefetch_factor=3)
    assert loader.prefetch_factor == 3
    it = iter(loader)
    _wait_for(lambda: len(rows.reads) == 6)  # 2 workers x 3, before the loop asks for any
    time.sleep(0.1)
    assert len(rows.reads) == 6  # and no more: the queue is bounded
    assert next(it)["y"].numpy().tolist() == [0]
    _wait_for(lambda: len(rows.reads) == 7)  # one taken, one more made
    time.sleep(0.1)
    assert len(rows.reads) == 7
    assert [b["y"].numpy().tolist() for b in it] == [[i] for i in range(1, 40)]
    assert sorted(i for i, _ in rows.reads) == list(range(40))
    names = {name for _, name in rows.reads}
    assert names <= {f"{WORKER} {w}" for w in range(2)} and threading.current_thread().name not in names


def test_an_error_in_a_worker_is_raised_in_the_loop_with_its_traceback(device):
    plain, ahead = [], []
    for workers, out in ((0, plain), (3, ahead)):
        it = iter(DataLoader(_Rows(20, device, fail_at=9), batch_size=2, num_workers=workers))
        with pytest.raises(KeyError, match="row 9 is damaged") as info:
            for batch in it:
                out.append(batch)
        frames = [(f.name, f.line) for f in traceback.extract_tb(info.value.__traceback__)]
        assert ("__getitem__", 'raise KeyError(f"row {i} is damaged")') in frames  # where it was raised
        assert next(it, "ended") == "ended"  # the iteration ends there, as a generator's
        if workers:
            assert "DataLoader worker thread, making batch 4" in "".join(getattr(info.value, "__notes__", [""])) \
                or not hasattr(info.value, "add_note")
            assert _workers() == []
    assert len(ahead) == len(plain) == 4
    for x, y in zip(ahead, plain):
        _same(x, y)


def test_an_error_in_the_first_batch_and_loaders_that_still_work(device):
    loader = DataLoader(_Rows(6, device, fail_at=0), batch_size=2, num_workers=2)
    with pytest.raises(KeyError):
        next(iter(loader))
    loader.dataset.fail_at = None
    assert len(list(loader)) == 3  # the next epoch starts afresh


def test_breaking_out_of_the_loop_stops_the_threads(device):
    rows = _Rows(100, device)
    loader = DataLoader(rows, batch_size=2, num_workers=3)
    for i, _ in enumerate(loader):
        if i == 2:
            assert len(_workers()) == 3
            break
    assert _workers() == []  # at once: the iterator is freed when the loop ends
    read = len(rows.reads)
    time.sleep(0.05)
    assert len(rows.reads) == read <= 2 * (3 + 3 * 2)  # nothing made after the stop


def test_an_iterator_dropped_unstarted_or_closed_stops_its_threads(device):
    loader = DataLoader(_dataset(device), batch_size=2, num_workers=2)
    it = iter(loader)
    assert len(_workers()) == 2
    del it
    assert _workers() == []
    it = iter(loader)
    next(it)
    it.close()
    assert _workers() == [] and next(it, "ended") == "ended"
    it = iter(loader)
    next(it)
    del loader  # the iterator keeps what it needs
    assert len(list(it)) == 11
    assert _workers() == []


def test_persistent_workers_serve_every_epoch_and_stop_with_the_loader(device):
    ds = _dataset(device)
    loader = DataLoader(ds, batch_size=4, shuffle=True, seed=2, num_workers=2, persistent_workers=True)
    first = _epochs(loader, epochs=2)
    threads = _workers()
    assert len(threads) == 2
    second = list(loader)
    assert _workers() == threads  # the same threads
    _assert_same_epochs([*first, second], _epochs(DataLoader(ds, batch_size=4, shuffle=True, seed=2), epochs=3))
    it = iter(loader)
    next(it)
    del it  # an epoch stopped early: the threads stay for the next
    assert _workers() == threads
    clone = copy.deepcopy(loader)  # a copy gets threads of its own when it needs them
    assert len(list(clone)) == 6 and len(_workers()) == 4
    it = iter(loader)
    del loader, clone
    gc.collect()
    assert _workers() == threads  # the live iterator keeps its loader and threads
    assert len(list(it)) == 6
    del it
    gc.collect()
    assert _workers() == []


def test_batches_are_made_in_the_grad_mode_of_the_loop(device):
    x = lp.asarray(np.arange(8.0).reshape(4, 2), device=device)
    x.requires_grad_()
    ds = TensorDataset(x, lp.arange(4, device=device))
    for xb, yb in DataLoader(ds, batch_size=3, shuffle=True, seed=0, num_workers=2):
        assert xb.requires_grad and not yb.requires_grad
        xb.sum().backward()
    np.testing.assert_array_equal(lp.asarray(x.grad).numpy(), np.ones((4, 2)))
    with lp.no_grad():
        assert not any(xb.requires_grad for xb, _ in DataLoader(ds, batch_size=3, num_workers=2))


def test_an_empty_loader_starts_no_threads(device):
    loader = DataLoader(_dataset(device, 3), batch_size=4, drop_last=True, num_workers=2)
    it = iter(loader)
    assert _workers() == [] and list(it) == [] and len(loader) == 0


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_workers": -1}, ValueError, "DataLoader: num_workers must be at least 0, got -1"),
    ({"num_workers": 1.5}, TypeError, "DataLoader: num_workers must be an int, got float 1.5"),
    ({"num_workers": True}, TypeError, "DataLoader: num_workers must be an int, got bool True"),
    ({"num_workers": "2"}, TypeError, "DataLoader: num_workers must be an int, got str '2'"),
    ({"num_workers": None}, TypeError, "DataLoader: num_workers must be an int, got NoneType None"),
    ({"prefetch_factor": 2}, ValueError, "DataLoader: prefetch_factor .* needs num_workers > 0"),
    ({"num_workers": 2, "prefetch_factor": 0}, ValueError, "DataLoader: prefetch_factor must be at least 1, got 0"),
    ({"num_workers": 2, "prefetch_factor": 2.0}, TypeError, "DataLoader: prefetch_factor must be an int"),
    ({"num_workers": 2, "persistent_workers": "yes"}, TypeError,
     "DataLoader: persistent_workers must be a bool, got 'yes'"),
    ({"persistent_workers": True}, ValueError, "DataLoader: persistent_workers=True needs num_workers > 0"),
])
def test_bad_worker_arguments(device, kwargs, error, message):
    with pytest.raises(error, match=f"^{message}"):
        DataLoader(_dataset(device), **kwargs)
    assert _workers() == []


def test_worker_arguments_as_attributes():
    ds = _dataset("cpu")
    plain = DataLoader(ds)
    assert (plain.num_workers, plain.prefetch_factor, plain.persistent_workers) == (0, None, False)
    ahead = DataLoader(ds, num_workers=np.int64(3), persistent_workers=1)
    assert (ahead.num_workers, ahead.prefetch_factor, ahead.persistent_workers) == (3, 2, True)
    assert type(ahead.num_workers) is int
    with pytest.raises(TypeError):  # keyword only (PyTorch's order differs from LeanPass's)
        DataLoader(ds, 2, False, False, None, None, 2)
