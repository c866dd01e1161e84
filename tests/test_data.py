"""leanpass.data: TensorDataset, DataLoader and DistributedSampler (SPEC "lp.data",
"Distributed data parallel"), with torch.utils.data's conventions."""

from __future__ import annotations

import doctest
import math
import sys
import types
from collections import Counter

import numpy as np
import pytest
from helpers import other_device
from hypothesis import given
from hypothesis import strategies as st

import leanpass as lp
import leanpass.data
from leanpass.backends import get_backend
from leanpass.data import DataLoader, DistributedSampler, TensorDataset


def _dataset(device, n=10):
    x = lp.asarray(np.arange(3.0 * n).reshape(n, 3), device=device)
    y = lp.arange(n, device=device)
    return TensorDataset(x, y)


def _labels(loader):
    """The label column of every batch, one list per batch."""
    return [y.numpy().tolist() for _, y in loader]


def _flat(batches):
    return [i for b in batches for i in b]


def test_module_docstring_example_runs():
    assert doctest.testmod(leanpass.data, raise_on_error=True).attempted > 0


def test_exposed_as_lp_data():
    assert lp.data is leanpass.data


# ---- TensorDataset ----------------------------------------------------------------------------


def test_tensor_dataset_rows(device):
    ds = _dataset(device, 4)
    assert len(ds) == 4
    assert len(ds.tensors) == 2 and all(t.device == device for t in ds.tensors)
    x, y = ds[2]
    np.testing.assert_array_equal(x.numpy(), [6.0, 7.0, 8.0])
    assert int(y) == 2 and x.device == device


def test_tensor_dataset_converts_array_likes():
    ds = TensorDataset(np.ones((3, 2)), [[1], [2], [3]])
    assert all(isinstance(t, lp.Tensor) for t in ds.tensors)
    assert ds.tensors[1].shape == (3, 1) and ds[1][1].numpy().tolist() == [2]


# ---- DataLoader on a TensorDataset ------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size", [1, 3, 4, 10, 11])
def test_sequential_batches(device, batch_size, drop_last):
    ds = _dataset(device, 10)
    loader = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
    backend = get_backend(device)
    before = backend.host_transfers
    batches = list(loader)
    assert backend.host_transfers == before  # basic slices: no index array sent
    assert len(batches) == len(loader) == (10 // batch_size if drop_last else math.ceil(10 / batch_size))
    start = 0
    for x, y in batches:
        assert x.device == y.device == device
        assert not x.requires_grad and not y.requires_grad
        rows = range(start, min(start + batch_size, 10))
        np.testing.assert_array_equal(x.numpy(), np.arange(30.0).reshape(10, 3)[rows.start:rows.stop])
        assert y.numpy().tolist() == list(rows)
        start += batch_size
    if drop_last:
        assert all(x.shape[0] == batch_size for x, _ in batches)


@pytest.mark.parametrize("n", range(0, 8))
@pytest.mark.parametrize("batch_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_len_is_the_number_of_batches(n, batch_size, drop_last, shuffle):
    ds = TensorDataset(np.arange(float(n)))
    loader = DataLoader(ds, batch_size=batch_size, drop_last=drop_last, shuffle=shuffle, seed=1)
    batches = list(loader)
    assert len(batches) == len(loader) == (n // batch_size if drop_last else -(-n // batch_size))
    assert all(b[0].shape[0] == batch_size for b in batches[:-1] if batches)


def test_single_tensor_dataset_yields_one_tuples(device):
    loader = DataLoader(TensorDataset(lp.arange(5, device=device)), batch_size=2, shuffle=True, seed=0)
    for batch in loader:
        assert isinstance(batch, tuple) and len(batch) == 1 and batch[0].device == device


def test_shuffle_covers_every_row_once_per_epoch_and_changes_order(device):
    ds = _dataset(device, 20)
    loader = DataLoader(ds, batch_size=6, shuffle=True, seed=3)
    backend = get_backend(device)
    epochs = []
    for _ in range(3):
        before = backend.host_transfers
        batches = list(loader)
        assert backend.host_transfers == before + 1  # the epoch's order goes to the device once
        for x, y in batches:
            assert x.device == y.device == device
            np.testing.assert_array_equal(x.numpy(), 3.0 * y.numpy()[:, None] + np.arange(3.0))
        epochs.append(_flat(_labels(batches)))
    assert all(sorted(order) == list(range(20)) for order in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


def test_shuffle_drop_last(device):
    loader = DataLoader(_dataset(device, 10), batch_size=4, shuffle=True, drop_last=True, seed=5)
    batches = _labels(loader)
    assert [len(b) for b in batches] == [4, 4]
    assert len(set(_flat(batches))) == 8


def test_same_seed_same_order(device):
    first = [_flat(_labels(DataLoader(_dataset(device), 3, shuffle=True, seed=7))) for _ in range(2)]
    assert first[0] == first[1]
    a, b = (DataLoader(_dataset(device), 3, shuffle=True, seed=7) for _ in range(2))
    assert [_labels(a) for _ in range(3)] == [_labels(b) for _ in range(3)]
    assert _flat(_labels(DataLoader(_dataset(device), 3, shuffle=True, seed=8))) != first[0]


def test_seed_none_follows_manual_seed(device):
    orders = []
    for _ in range(2):
        lp.manual_seed(123)
        orders.append(_flat(_labels(DataLoader(_dataset(device, 30), 4, shuffle=True))))
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(30))


def test_set_epoch_makes_the_epoch_reproducible(device):
    run = DataLoader(_dataset(device, 16), batch_size=5, shuffle=True, seed=11)
    orders = {}
    for epoch in range(4):
        run.set_epoch(epoch)
        orders[epoch] = _flat(_labels(run))
    assert orders[0] != orders[1]
    assert orders[2] == np.random.default_rng([11, 2]).permutation(16).tolist()
    resumed = DataLoader(_dataset(device, 16), batch_size=5, shuffle=True, seed=11)
    resumed.set_epoch(2)
    assert _flat(_labels(resumed)) == orders[2]
    resumed.set_epoch(3)
    assert _flat(_labels(resumed)) == orders[3]


def test_batches_of_tensors_that_require_grad_are_graph_nodes(device):
    x = lp.asarray(np.arange(8.0).reshape(4, 2), device=device)
    x.requires_grad_()
    ds = TensorDataset(x, lp.arange(4, device=device))
    for xb, yb in DataLoader(ds, batch_size=3, shuffle=True, seed=0):
        assert xb.requires_grad and not yb.requires_grad
        xb.sum().backward()
    np.testing.assert_array_equal(lp.asarray(x.grad).numpy(), np.ones((4, 2)))


class _Spy:
    """A sampler: fixed indices, and a record of set_epoch calls."""

    def __init__(self, indices):
        self.indices, self.epochs = indices, []

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def test_sampler_gives_the_order_and_its_set_epoch_is_not_called(device):
    spy = _Spy([4, 0, -1, 2, 2])
    loader = DataLoader(_dataset(device, 5), batch_size=2, sampler=spy)
    assert len(loader) == 3
    assert _labels(loader) == [[4, 0], [4, 2], [2]]  # -1 is the last row, as t[-1]
    loader.set_epoch(3)
    list(loader)
    assert spy.epochs == []


def test_distributed_sampler_shards_through_loaders(device):
    ds = _dataset(device, 11)
    shards = []
    for rank in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=rank, seed=4)
        sampler.set_epoch(1)
        loader = DataLoader(ds, batch_size=2, sampler=sampler)
        batches = list(loader)
        assert len(batches) == len(loader) == 2
        assert all(x.device == device for x, _ in batches)
        shards.append(_flat(_labels(batches)))
    assert set(_flat(shards)) == set(range(11)) and len(_flat(shards)) == 12


# ---- DataLoader on any dataset ----------------------------------------------------------------


class _Pairs:
    """A plain dataset: rows (features, label) with a Tensor, a NumPy array... per row."""

    def __init__(self, n, device):
        self.n, self.device = n, device

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return lp.asarray([float(i), 2.0 * i], device=self.device), i


class _Items:
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return np.full(2, float(i))


def test_generic_dataset_is_collated(device):
    batches = list(DataLoader(_Pairs(5, device), batch_size=2))
    assert len(batches) == 3
    x, y = batches[1]
    assert x.device == device and x.shape == (2, 2) and y.shape == (2,)
    np.testing.assert_array_equal(x.numpy(), [[2.0, 4.0], [3.0, 6.0]])
    assert y.numpy().tolist() == [2, 3]


def test_generic_dataset_single_items_shuffled_and_dropped():
    loader = DataLoader(_Items(), batch_size=2, shuffle=True, drop_last=True, seed=2)
    batches = list(loader)
    assert len(batches) == len(loader) == 2
    assert all(isinstance(b, lp.Tensor) and b.shape == (2, 2) for b in batches)
    rows = [int(r[0]) for b in batches for r in b.numpy()]
    assert len(set(rows)) == 4 and set(rows) <= set(range(5))
    loader.set_epoch(0)
    assert [int(r[0]) for b in loader for r in b.numpy()] == np.random.default_rng([2, 0]).permutation(5)[:4].tolist()


# ---- DistributedSampler -----------------------------------------------------------------------


def _torch_shard(n, num_replicas, rank, drop_last, indices):
    """torch.utils.data.DistributedSampler.__iter__, line for line, on given indices."""
    if drop_last and n % num_replicas != 0:
        num_samples = math.ceil((n - num_replicas) / num_replicas)
    else:
        num_samples = math.ceil(n / num_replicas)
    total_size = num_samples * num_replicas
    indices = list(indices)
    if not drop_last:
        padding_size = total_size - len(indices)
        if padding_size <= len(indices):
            indices += indices[:padding_size]
        else:
            indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    else:
        indices = indices[:total_size]
    return indices[rank:total_size:num_replicas]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("n", range(12))
def test_distributed_sampler_shards(n, num_replicas, shuffle, drop_last):
    dataset = list(range(n))
    samplers = [DistributedSampler(dataset, num_replicas, rank, shuffle=shuffle, seed=9, drop_last=drop_last)
                for rank in range(num_replicas)]
    shards = [list(s) for s in samplers]
    perm = np.random.default_rng(9).permutation(n).tolist() if shuffle else list(range(n))
    for rank, (sampler, shard) in enumerate(zip(samplers, shards)):
        assert len(shard) == len(sampler)
        assert all(type(i) is int for i in shard)
        assert shard == _torch_shard(n, num_replicas, rank, drop_last, perm)
    every = _flat(shards)
    if drop_last:
        assert len(every) == len(set(every)) == num_replicas * (n // num_replicas)
    else:
        assert set(every) == set(range(n))
        assert len(every) == num_replicas * math.ceil(n / num_replicas)
        if n % num_replicas == 0:
            assert len(every) == len(set(every))


def test_distributed_sampler_pads_by_repeating_more_than_once():
    assert [list(DistributedSampler(range(1), 4, r, shuffle=False)) for r in range(4)] == [[0]] * 4
    assert [list(DistributedSampler(range(2), 4, r, shuffle=False)) for r in range(4)] == [[0], [1], [0], [1]]
    assert list(DistributedSampler(range(10), 4, 1, shuffle=False)) == [1, 5, 9]
    assert list(DistributedSampler(range(10), 4, 1, shuffle=False, drop_last=True)) == [1, 5]


def test_distributed_sampler_set_epoch_changes_order_and_still_partitions():
    def shards(epoch):
        out = []
        for rank in range(4):
            sampler = DistributedSampler(range(40), num_replicas=4, rank=rank, seed=1)
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out

    first, second = shards(0), shards(1)
    assert first != second and first == shards(0)
    for parts in (first, second):
        assert sorted(_flat(parts)) == list(range(40))
    assert shards(0)[0] == np.random.default_rng(1).permutation(40)[0::4].tolist()
    assert shards(1)[0] == np.random.default_rng(2).permutation(40)[0::4].tolist()  # seed + epoch
    assert shards(-1)[0] == np.random.default_rng(0).permutation(40)[0::4].tolist()  # any int, as PyTorch's


@given(
    n=st.integers(0, 200),
    num_replicas=st.integers(1, 8),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 1000),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_distributed_sampler_partition_property(n, num_replicas, seed, epoch, shuffle, drop_last):
    shards = []
    for rank in range(num_replicas):
        sampler = DistributedSampler(range(n), num_replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
        assert len(shards[-1]) == len(sampler)
    assert len({len(s) for s in shards}) == 1  # every rank steps the same number of times
    counts = Counter(_flat(shards))
    if drop_last:
        assert len(counts) == num_replicas * (n // num_replicas) and set(counts.values()) <= {1}
    else:
        assert set(counts) == set(range(n))
        total = num_replicas * math.ceil(n / num_replicas)
        assert sum(counts.values()) == total
        assert set(counts.values()) <= {total // n, -(-total // n)} if n else not counts


# ---- bad input --------------------------------------------------------------------------------


def test_tensor_dataset_first_dimensions_must_match(device):
    a, b = lp.ones((3, 2), device=device), lp.ones((4,), device=device)
    with pytest.raises(ValueError, match=r"TensorDataset.*\(3, 2\).*\(4,\)"):
        TensorDataset(a, b)


def test_tensor_dataset_devices_must_match(device):
    other = other_device(device)
    a, b = lp.ones(3, device=device), lp.ones(3, device=other)
    with pytest.raises(ValueError, match="TensorDataset") as info:
        TensorDataset(a, b)
    assert device in str(info.value) and other in str(info.value)


def test_tensor_dataset_needs_tensors_with_a_first_dimension(device):
    with pytest.raises(ValueError, match=r"TensorDataset.*shape \(\)"):
        TensorDataset(lp.ones(3, device=device), lp.asarray(1.0, device=device))
    with pytest.raises(ValueError, match="TensorDataset"):
        TensorDataset()


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"batch_size": 0}, ValueError, "DataLoader: batch_size.* 0"),
        ({"batch_size": -2}, ValueError, "DataLoader: batch_size.* -2"),
        ({"batch_size": 2.0}, TypeError, "DataLoader: batch_size.*float 2.0"),
        ({"batch_size": True}, TypeError, "DataLoader: batch_size.*bool True"),
        ({"batch_size": None}, TypeError, "DataLoader: batch_size.*None"),
        ({"shuffle": True, "seed": -1}, ValueError, "DataLoader: seed.* -1"),
        ({"shuffle": True, "seed": "x"}, TypeError, "DataLoader: seed.*str 'x'"),
        ({"shuffle": True, "sampler": [0, 1]}, ValueError, "DataLoader: sampler.*shuffle"),
        ({"sampler": iter([0, 1])}, TypeError, "DataLoader: the sampler.*list_iterator"),
    ],
)
def test_dataloader_bad_arguments(device, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        DataLoader(_dataset(device, 4), **kwargs)


def test_dataloader_bad_dataset_and_epoch(device):
    with pytest.raises(TypeError, match="DataLoader: the dataset.*int"):
        DataLoader(5)
    loader = DataLoader(_dataset(device, 4), shuffle=True, seed=0)
    with pytest.raises(TypeError, match="DataLoader.set_epoch: epoch.*str"):
        loader.set_epoch("1")
    with pytest.raises(ValueError, match="DataLoader.set_epoch: epoch.* -1"):
        loader.set_epoch(-1)
    assert len(_flat(_labels(loader))) == 4  # the loader still works


@pytest.mark.parametrize("index", [5, -6])
def test_dataloader_sampler_index_out_of_range(device, index):
    loader = DataLoader(_dataset(device, 5), batch_size=2, sampler=[0, index])
    with pytest.raises(IndexError, match=f"DataLoader.*{index}.*5 rows"):
        list(loader)


@pytest.mark.parametrize(("num_replicas", "rank"), [(4, 4), (4, -1), (1, 1)])
def test_distributed_sampler_rank_out_of_range(num_replicas, rank):
    with pytest.raises(ValueError, match=rf"DistributedSampler: rank {rank}.*{num_replicas}"):
        DistributedSampler(range(8), num_replicas=num_replicas, rank=rank)


def test_distributed_sampler_bad_arguments():
    with pytest.raises(ValueError, match="DistributedSampler: num_replicas.* 0"):
        DistributedSampler(range(8), num_replicas=0, rank=0)
    with pytest.raises(TypeError, match="DistributedSampler: rank.*float 1.0"):
        DistributedSampler(range(8), num_replicas=2, rank=1.0)
    negative = DistributedSampler(range(8), num_replicas=2, rank=0, seed=-3)  # any int, as PyTorch's
    other = DistributedSampler(range(8), num_replicas=2, rank=1, seed=-3)
    assert sorted(list(negative) + list(other)) == list(range(8))
    sampler = DistributedSampler(range(8), num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="DistributedSampler.set_epoch: epoch.*NoneType"):
        sampler.set_epoch(None)
    assert sampler.epoch == 0


NOT_INITIALIZED = r"DistributedSampler: give num_replicas and rank, or call leanpass.distributed.init_process_group"


def test_distributed_sampler_without_distributed_module(monkeypatch):
    monkeypatch.delattr(lp, "distributed", raising=False)
    monkeypatch.setitem(sys.modules, "leanpass.distributed", None)  # the import fails
    with pytest.raises(RuntimeError, match=NOT_INITIALIZED):
        DistributedSampler(range(8))


def _fake_distributed(initialized):
    return types.SimpleNamespace(
        is_initialized=lambda: initialized, get_world_size=lambda: 3, get_rank=lambda: 2
    )


def test_distributed_sampler_takes_world_size_and_rank_from_distributed(monkeypatch):
    monkeypatch.setattr(lp.data, "distributed", _fake_distributed(False))
    with pytest.raises(RuntimeError, match=NOT_INITIALIZED):
        DistributedSampler(range(8), rank=0)
    monkeypatch.setattr(lp.data, "distributed", _fake_distributed(True))
    sampler = DistributedSampler(range(8), shuffle=False)
    assert (sampler.num_replicas, sampler.rank, list(sampler)) == (3, 2, [2, 5, 0])
    assert DistributedSampler(range(8), rank=0, shuffle=False).num_replicas == 3


def test_a_batch_changed_in_place_leaves_the_dataset_as_it_was(device):
    """As PyTorch's DataLoader: batches are copies, shuffled or not."""
    x = lp.reshape(lp.arange(8.0, device=device), (4, 2))
    for shuffle in (False, True):
        for (batch,) in DataLoader(TensorDataset(x), batch_size=2, shuffle=shuffle, seed=0):
            batch -= 100.0
    assert x.numpy().tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


class _Rows:
    def __init__(self, make, n=4):
        self.make, self.n = make, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.make(i)


def test_rows_that_are_dicts_lists_and_strings_batch_as_pytorch_collates():
    batch = next(iter(DataLoader(_Rows(lambda i: {"x": np.ones(2) * i, "y": i, "name": f"n{i}"}), batch_size=3)))
    assert list(batch) == ["x", "y", "name"] and batch["name"] == ["n0", "n1", "n2"]
    np.testing.assert_array_equal(batch["x"].numpy(), [[0, 0], [1, 1], [2, 2]])
    assert batch["y"].dtype == "int64"
    mixed = next(iter(DataLoader(_Rows(lambda i: [np.ones(2) * i, i]), batch_size=2)))
    assert isinstance(mixed, list) and mixed[0].shape == (2, 2) and mixed[1].shape == (2,)
    vector = next(iter(DataLoader(_Rows(lambda i: [1.0 * i, 2.0]), batch_size=2)))  # a list of numbers: one vector
    assert vector.shape == (2, 2)
    with pytest.raises(ValueError, match="dicts with the same keys"):
        list(DataLoader(_Rows(lambda i: {"x": 1} if i == 0 else {"y": 2}, n=2), batch_size=2))
    with pytest.raises(ValueError, match="tuples of 2 items"):
        list(DataLoader(_Rows(lambda i: (1, 2) if i == 0 else (1,), n=2), batch_size=2))


def test_namedtuple_bytes_zero_d_and_reordered_dict_rows():
    import collections

    pair = collections.namedtuple("pair", "x y")
    batch = next(iter(DataLoader(_Rows(lambda i: pair(np.ones(2) * i, i)), batch_size=2)))
    assert type(batch) is pair and batch.x.shape == (2, 2)
    assert next(iter(DataLoader(_Rows(lambda i: b"ab"), batch_size=2))) == [b"ab", b"ab"]
    zero_d = next(iter(DataLoader(_Rows(lambda i: [np.array(1.0 * i), np.float32(2)]), batch_size=2)))
    assert zero_d.shape == (2, 2)  # a row of 0-d arrays and NumPy scalars is one vector
    rows = [{"a": 1, "b": 2}, {"b": 4, "a": 3}]
    batch = next(iter(DataLoader(_Rows(lambda i: rows[i], n=2), batch_size=2)))
    np.testing.assert_array_equal(batch["a"].numpy(), [1, 3])
