"""``leanpass.data``: datasets and batch loading, as ``torch.utils.data``.

- ``TensorDataset(*tensors)``: rows of tensors that share their first dimension.
- ``DataLoader(dataset, batch_size, shuffle, drop_last, seed, sampler, *,
  num_workers=0, prefetch_factor=None, persistent_workers=False)``: batches.
  A ``TensorDataset`` is batched on its tensors' device, with one ``take`` per
  tensor and batch (a basic slice when the order is sequential), never a Python
  loop over rows; any other dataset (``__len__`` and ``__getitem__``) is read row
  by row and its rows stacked. ``num_workers=N`` makes the same batches, in the
  same order, ahead of the loop in N worker threads (see ``DataLoader``).
- ``DistributedSampler(dataset, num_replicas, rank, ...)``: each process's share
  of the rows, for data-parallel training launched with ``mpiexec``.

>>> import leanpass as lp
>>> from leanpass.data import DataLoader, TensorDataset
>>> ds = TensorDataset(lp.reshape(lp.arange(12.0), (6, 2)), lp.arange(6))
>>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
>>> len(loader)
2
>>> for epoch in range(2):
...     loader.set_epoch(epoch)  # this epoch's order, the same in a resumed run
...     for x, y in loader:
...         print(x.shape, y.shape)
(4, 2) (4,)
(2, 2) (2,)
(4, 2) (4,)
(2, 2) (2,)

With ``num_workers``, threads make the batches ahead while the loop trains on the
last one; the batches are those of ``num_workers=0``:

>>> ahead = DataLoader(ds, batch_size=4, shuffle=True, seed=0, num_workers=2)
>>> ahead.set_epoch(1)
>>> loader.set_epoch(1)
>>> all(bool(lp.all(a == b)) for a, b in zip([x for x, _ in ahead], [x for x, _ in loader]))
True

Threads, not processes: the batches are array operations (``take``, copies,
``stack``) that NumPy and CuPy run without holding the GIL, so threads overlap
them with the training step; threads share the dataset and its device (no copy
of the tensors to each worker, no pickling, and a GPU's tensors stay usable,
which a forked process cannot promise), and they start at once on every
platform.
"""

from __future__ import annotations

import math
import numbers
import operator
import queue
import threading
import weakref

from . import distributed, ops
from ._graph.modes import is_grad_enabled, set_grad_enabled
from ._namespace import asarray, stack
from ._node import run1
from .backends import get_backend, host_generator, host_rng
from .tensor import Tensor

__all__ = ["TensorDataset", "DataLoader", "DistributedSampler"]


def _int(value, op: str, name: str, low: int | None) -> int:
    """``value`` as an int of at least ``low``: ``TypeError`` / ``ValueError`` naming ``op``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{op}: {name} must be at least {low}, got {value}")
    return int(value)


class TensorDataset:
    """Rows of ``tensors`` (Tensors, or array-likes made Tensors by ``leanpass.asarray``),
    all on one device, of one first dimension: ``ds[i]`` is the tuple ``(t[i] for t in
    tensors)``. ``ValueError`` for 0-d tensors, mismatched first dimensions or devices."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset: give at least one tensor")
        tensors = tuple(asarray(t) for t in tensors)
        first = tensors[0]
        for t in tensors:
            if t.ndim == 0:
                raise ValueError(f"TensorDataset: tensors need a first dimension, got one of shape {t.shape}")
            if t.device != first.device:
                raise ValueError(
                    f"TensorDataset: tensors are on different devices, {first.device} and {t.device} "
                    f"(shapes {first.shape} and {t.shape}); move them to one with .to(...)"
                )
            if t.shape[0] != first.shape[0]:
                raise ValueError(
                    f"TensorDataset: tensors of shapes {first.shape} and {t.shape} differ in their first dimension"
                )
        self.tensors = tensors

    @property
    def device(self) -> str:
        return self.tensors[0].device

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index) -> tuple:
        return tuple(t[index] for t in self.tensors)


class DataLoader:
    """Batches of ``dataset``: tuples of Tensors for a ``TensorDataset`` (a 1-tuple for
    one tensor); for another dataset, the stacked rows, as PyTorch's ``default_collate``
    stacks them: tuples column by column, dicts key by key, lists column by column
    (a list of plain numbers is one vector), strings as lists.

    ``shuffle=True`` draws a new order each time the loader is iterated, from
    ``numpy.random.default_rng(seed)`` made here; ``seed=None`` takes a seed from
    LeanPass's generator, so ``leanpass.manual_seed`` makes runs repeatable. After
    ``set_epoch(epoch)`` the order is ``default_rng([seed, epoch])``'s permutation,
    the same in a resumed run. ``sampler`` (an iterable of indices with ``__len__``,
    such as ``DistributedSampler``) gives the order instead; the loader does not call
    its ``set_epoch``. ``len(loader)`` is the number of batches.

    ``num_workers=N`` (PyTorch's name; 0, the default, makes each batch when the loop
    asks for it) gives exactly the batches of ``num_workers=0``, in the same order
    (the order is drawn in the calling thread when iteration starts), made ahead by
    N worker threads: at most ``prefetch_factor`` batches per worker (2 by default)
    are made and not yet taken. An exception in a worker is raised by the loop, at
    that batch, with its original traceback, and ends the iteration. The threads
    stop when the iteration ends, stops early (``break``) or its iterator is
    collected; with ``persistent_workers=True`` they serve every epoch and stop when
    the loader is collected. Batches are made in the grad mode that was on when the
    iteration started. The dataset's ``__getitem__`` is then called from several
    threads at once: it must be safe to (reading is), and rows that draw random
    numbers from a shared generator get them in an order that changes from run to run.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, seed=None, sampler=None, *,
                 num_workers=0, prefetch_factor=None, persistent_workers=False):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"DataLoader: the dataset must have __len__ and __getitem__, got {type(dataset).__name__}"
            )
        batch_size = _int(batch_size, "DataLoader", "batch_size", 1)
        if sampler is not None:
            if shuffle:
                raise ValueError("DataLoader: sampler is mutually exclusive with shuffle=True")
            if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
                raise TypeError(
                    f"DataLoader: the sampler must be an iterable of indices with __len__, "
                    f"got {type(sampler).__name__}"
                )
        seed = None if seed is None else _int(seed, "DataLoader", "seed", 0)
        num_workers = _int(num_workers, "DataLoader", "num_workers", 0)
        if prefetch_factor is not None:
            prefetch_factor = _int(prefetch_factor, "DataLoader", "prefetch_factor", 1)
            if not num_workers:
                raise ValueError("DataLoader: prefetch_factor counts the batches each worker makes ahead: it "
                                 "needs num_workers > 0 (leave it None for num_workers=0)")
        if not isinstance(persistent_workers, numbers.Integral) or persistent_workers not in (0, 1):
            raise TypeError(f"DataLoader: persistent_workers must be a bool, got {persistent_workers!r}")
        if persistent_workers and not num_workers:
            raise ValueError("DataLoader: persistent_workers=True needs num_workers > 0")
        if shuffle and seed is None:
            seed = int(host_rng().integers(2**63))
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, bool(shuffle)
        self.drop_last, self.seed, self.sampler = bool(drop_last), seed, sampler
        self._rng = host_generator(seed) if shuffle else None
        self._epoch = None
        self.num_workers, self.persistent_workers = num_workers, bool(persistent_workers)
        self.prefetch_factor = (2 if prefetch_factor is None else prefetch_factor) if num_workers else None
        self._workers = None  # persistent_workers: (the worker threads, their finalizer)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_workers"] = None  # threads are not copied: a copy starts its own
        return state

    def set_epoch(self, epoch: int) -> None:
        """Shuffle with ``default_rng([seed, epoch])`` from now on: the order of each
        epoch is then fixed by ``seed`` and ``epoch`` alone."""
        self._epoch = _int(epoch, "DataLoader.set_epoch", "epoch", 0)

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self):
        """This epoch's row indices as a list of ints, or ``None`` for 0, 1, 2, ..."""
        n = len(self.dataset)
        if self.sampler is not None:
            order = [operator.index(i) for i in self.sampler]
            bad = [i for i in order if not -n <= i < n]
            if bad:
                raise IndexError(f"DataLoader: the sampler gave index {bad[0]}, out of range for {n} rows")
            return [i + n if i < 0 else i for i in order]
        if self.shuffle:
            rng = self._rng if self._epoch is None else host_generator([self.seed, self._epoch])
            return rng.permutation(n).tolist()
        return None

    def __iter__(self):
        order = self._order()
        n = len(self.dataset) if order is None else len(order)
        stop = n - n % self.batch_size if self.drop_last else n
        spans = [(i, min(i + self.batch_size, n)) for i in range(0, stop, self.batch_size)]
        if isinstance(self.dataset, TensorDataset):
            make = _tensor_batch_maker(self.dataset, order, spans)
        else:
            make = _collated_batch_maker(self.dataset, order, spans)
        if not self.num_workers or not spans:
            return (make(k) for k in range(len(spans)))
        workers = None
        if self.persistent_workers:
            if self._workers is None:
                pool = _Workers(self.num_workers)
                self._workers = (pool, weakref.finalize(self, pool.close))
            workers = self._workers[0]
        return _Prefetcher(self, make, len(spans), self.num_workers, self.num_workers * self.prefetch_factor,
                           workers)


def _tensor_batch_maker(dataset, order, spans):
    """``make(k)``: batch ``k`` of a ``TensorDataset`` (from any thread)."""
    tensors = dataset.tensors
    if order is None:  # basic slices, copied: a batch changed in place leaves the data as it was
        def make(k):
            i, j = spans[k]
            return tuple(t[i:j].clone() for t in tensors)

        return make
    # The order goes to the device once per epoch; its indices are in range (checked
    # above), so each batch is one take per tensor with no range check on the device.
    order = get_backend(dataset.device).from_host(order, op="DataLoader")

    def make(k):
        i, j = spans[k]
        index = order[i:j]
        return tuple(run1(ops.take_positions, t, 0, tuple(index.shape), (t.shape[0],), index) for t in tensors)

    return make


def _collated_batch_maker(dataset, order, spans):
    """``make(k)``: batch ``k`` of any other dataset, its rows collated."""
    def make(k):
        i, j = spans[k]
        rows = range(i, j) if order is None else order[i:j]
        return _collate([dataset[r] for r in rows])

    return make


# ---- worker threads (num_workers > 0) ---------------------------------------------------------


class _Workers:
    """``count`` daemon threads running the tasks ``(epoch, k)`` put in ``tasks``.
    They hold no reference to a loader or an iterator (only to this queue), so both
    can be collected while the threads wait, and their finalizers stop them."""

    def __init__(self, count: int):
        self.tasks = queue.SimpleQueue()
        self.closed = False
        self.threads = [threading.Thread(target=_work, args=(self.tasks,), daemon=True,
                                         name=f"leanpass DataLoader worker {w}") for w in range(count)]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        """Stop the threads after the tasks queued (those of a stopped epoch are cancelled:
        no work) and wait for them: a batch being made is finished first."""
        if self.closed:
            return
        self.closed = True
        for _ in self.threads:
            self.tasks.put(None)
        current = threading.current_thread()
        for thread in self.threads:
            if thread is not current:  # a finalizer may run on a worker
                thread.join()


def _work(tasks) -> None:
    while True:
        task = tasks.get()
        if task is None:
            return
        epoch, k = task
        epoch.run(k)


class _Epoch:
    """One iteration's batches as the workers finish them: ``run(k)`` makes batch ``k``
    (or keeps its exception), ``take(k)`` waits for it."""

    def __init__(self, make, grad_mode: bool):
        self.make, self.grad_mode = make, grad_mode
        self.done: dict = {}  # k -> (True, batch) or (False, exception)
        self.ready = threading.Condition()
        self.cancelled = False

    def run(self, k: int) -> None:
        if self.cancelled:  # the iteration stopped: nobody will take it
            return
        try:
            with set_grad_enabled(self.grad_mode):
                result = (True, self.make(k))
        except BaseException as exc:  # raised by the loop, in the calling thread
            result = (False, exc)
        with self.ready:
            self.done[k] = result
            self.ready.notify_all()

    def take(self, k: int):
        with self.ready:
            while k not in self.done:
                self.ready.wait()
            return self.done.pop(k)


def _stop(epoch: _Epoch, workers: _Workers | None) -> None:
    epoch.cancelled = True
    if workers is not None:
        workers.close()


class _Prefetcher:
    """The iterator of a ``DataLoader`` with workers: batch 0, 1, 2, ... in order, with at
    most ``ahead`` batches asked of the workers and not yet taken. Its own threads
    (``workers=None``), or the loader's persistent ones, which stay."""

    def __init__(self, loader, make, count: int, num_workers: int, ahead: int, workers=None):
        own = workers is None
        self._loader = loader  # the loader (and its persistent threads) lives while its iterator does
        self._workers = _Workers(num_workers) if own else workers
        self._epoch = _Epoch(make, is_grad_enabled())
        self._count, self._next, self._asked = count, 0, 0
        self._finalizer = weakref.finalize(self, _stop, self._epoch, self._workers if own else None)
        for _ in range(min(ahead, count)):
            self._ask()

    def _ask(self) -> None:
        self._workers.tasks.put((self._epoch, self._asked))
        self._asked += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._next >= self._count:
            self._finalizer()
            raise StopIteration
        k = self._next
        ok, value = self._epoch.take(k)
        self._next += 1
        if not ok:  # as a generator that raised: the iteration ends here
            self._next = self._count
            self._finalizer()
            if hasattr(value, "add_note"):  # Python 3.11
                value.add_note(f"(raised in a DataLoader worker thread, making batch {k})")
            raise value  # with the worker's traceback, under this frame
        if self._asked < self._count:
            self._ask()
        return value

    def close(self) -> None:
        """Stop early: the batches asked for are dropped and the threads stopped."""
        self._next = self._count
        self._finalizer()


def _collate(rows):
    """Rows stacked into a batch, as PyTorch's ``default_collate``: tuples column by
    column (a tuple of batches), dicts key by key (a dict), lists of anything but
    plain numbers column by column (a list), strings as a list; anything else
    (Tensors, arrays, numbers, a list of numbers) stacked into one Tensor."""
    first = rows[0]
    if isinstance(first, dict):
        keys = list(first)
        for row in rows:
            if not isinstance(row, dict) or row.keys() != first.keys():
                raise ValueError(f"DataLoader: the rows of a batch must be dicts with the same keys {keys}, "
                                 f"got {list(row) if isinstance(row, dict) else type(row).__name__}")
        return {k: _collate([row[k] for row in rows]) for k in keys}
    if isinstance(first, tuple) or (isinstance(first, list) and not _numbers(first)):
        for row in rows:
            if not isinstance(row, (tuple, list)) or len(row) != len(first):
                raise ValueError(f"DataLoader: the rows of a batch must be {type(first).__name__}s of "
                                 f"{len(first)} items, got {row!r:.80}")
        columns = [_collate(list(column)) for column in zip(*rows)]
        if hasattr(first, "_fields"):  # a namedtuple keeps its type
            return type(first)(*columns)
        return tuple(columns) if isinstance(first, tuple) else columns
    if isinstance(first, (str, bytes)):
        return list(rows)
    return stack([x if isinstance(x, Tensor) else asarray(x) for x in rows])


def _numbers(items) -> bool:
    """Whether ``items`` are numbers (Python's, NumPy's scalars, 0-d arrays): a row that
    is one vector."""
    return all(isinstance(x, numbers.Number) or getattr(x, "shape", None) == () for x in items)


class DistributedSampler:
    """The indices of this process's share of ``dataset``, as PyTorch's
    ``DistributedSampler``: the (shuffled) indices are padded by repeating them from
    the start to a multiple of ``num_replicas`` (or, with ``drop_last``, cut to one),
    and rank ``r`` takes every ``num_replicas``-th from the ``r``-th. Every rank has
    ``len(sampler)`` indices and, without padding, the shares partition the dataset.

    The permutation is ``numpy.random.default_rng(seed + epoch).permutation``, so the
    order differs from PyTorch's (``torch.randperm``); give every rank the same
    ``seed`` and call ``set_epoch(epoch)`` at the start of each epoch.
    ``num_replicas``/``rank`` default to ``leanpass.distributed``'s world size and rank.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            if not distributed.is_initialized():
                raise RuntimeError(
                    "DistributedSampler: give num_replicas and rank, or call "
                    "leanpass.distributed.init_process_group() first"
                )
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        num_replicas = _int(num_replicas, "DistributedSampler", "num_replicas", 1)
        rank = _int(rank, "DistributedSampler", "rank", None)
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"DistributedSampler: rank {rank} is outside [0, {num_replicas}) for num_replicas={num_replicas}"
            )
        self.seed = _int(seed, "DistributedSampler", "seed", None)  # any int, as PyTorch's
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.drop_last, self.epoch = bool(shuffle), bool(drop_last), 0
        n = len(dataset)
        self.num_samples = n // num_replicas if drop_last else math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Shuffle with ``default_rng(seed + epoch)`` (modulo 2**64: any int, as PyTorch's);
        call it with the same epoch on every rank."""
        self.epoch = _int(epoch, "DistributedSampler.set_epoch", "epoch", None)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self):
        n = len(self.dataset)
        rng = host_generator((self.seed + self.epoch) % 2**64)  # NumPy's seeds are >= 0
        order = rng.permutation(n).tolist() if self.shuffle else list(range(n))
        if n:  # repeat from the start to pad, or cut (drop_last)
            order = (order * -(-self.total_size // n))[:self.total_size]
        return iter(order[self.rank:self.total_size:self.num_replicas])
