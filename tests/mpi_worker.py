"""Scenarios that tests/test_distributed.py runs under ``mpiexec -n N python -m mpi4py``.

    mpiexec -n 2 python -m mpi4py tests/mpi_worker.py collectives
    python -m mpi4py tests/mpi_worker.py ddp nccl      # on cuda:<local rank>, over NCCL

Each scenario asserts on every rank; a failed assertion on any rank aborts all of
them (``-m mpi4py``) and the test sees a non-zero exit status. Rank 0 prints
``OK <scenario>`` at the end.
"""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np

import leanpass as lp
from leanpass import distributed as dist
from leanpass import nn, optim
from leanpass.nn.parallel import DistributedDataParallel as DDP

DEVICES = ["cpu", "strict"]  # with "nccl" on the command line: ["cuda:<local rank>"]


def expect(error, fn, *words):
    try:
        fn()
    except error as exc:
        for word in words:
            assert word in str(exc), (word, str(exc))
    else:
        raise AssertionError(f"{fn} did not raise {error.__name__}")


def collectives():
    rank, size = dist.get_rank(), dist.get_world_size()
    values = [np.arange(5.0) * (r + 1) - r for r in range(size)]  # rank r's data
    for device in DEVICES:
        for dtype in ("float32", "float64", "int64", "int32"):
            for op, reduce in (("sum", np.sum), ("max", np.max), ("min", np.min), ("mean", np.mean)):
                if op == "mean" and dtype.startswith("int"):
                    continue
                t = lp.asarray(values[rank], device=device, dtype=dtype, copy=True)
                version = t._version
                assert dist.all_reduce(t, op) is t
                want = reduce(np.stack([v.astype(dtype) for v in values]), axis=0)
                np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
                assert t.device == lp.backends.get_backend(device).device and str(t.dtype) == dtype
                assert t._version == version + 1
        for op in ("max", "min"):  # NaN wherever any rank has one, on every rank
            for nan_on in range(size):
                data = np.array([1.0 * rank, 2.0, -1.0 * rank])
                if rank == nan_on:
                    data[0] = np.nan
                t = lp.asarray(data, device=device)
                dist.all_reduce(t, op)
                got = t.numpy()
                assert np.isnan(got[0]), (op, nan_on, got)
                np.testing.assert_array_equal(got[1:], [2.0, (-(size - 1) if op == "min" else 0.0)])
        z = lp.asarray([1 + 2j * rank], device=device)
        dist.all_reduce(z)
        np.testing.assert_allclose(z.numpy(), [size + 2j * sum(range(size))])
        s = lp.asarray(float(rank), device=device)  # 0-d
        dist.all_reduce(s, "max")
        assert float(s) == size - 1
        # a non-contiguous view: the base changes where the view lies, nowhere else
        base = lp.reshape(lp.arange(6.0, device=device), (2, 3)) + rank
        dist.all_reduce(base[:, 1])
        want = np.arange(6.0).reshape(2, 3) + rank
        want[:, 1] = np.arange(6.0).reshape(2, 3)[:, 1] * size + sum(range(size))
        np.testing.assert_allclose(base.numpy(), want)
        for src in range(size):
            t = lp.full((2, 2), float(rank), device=device)
            dist.broadcast(t, src=src)
            assert (t.numpy() == src).all()
        flags = lp.asarray([rank % 2 == 0, True], device=device)
        dist.broadcast(flags, src=size - 1)
        assert flags.numpy().tolist() == [(size - 1) % 2 == 0, True]
        outs = [lp.zeros((3,), device=device, dtype="int64") for _ in range(size)]
        assert dist.all_gather(outs, lp.full((3,), rank * 10, device=device, dtype="int64")) is outs
        assert [o.numpy().tolist() for o in outs] == [[r * 10] * 3 for r in range(size)]
    # a leaf that requires grad: written in place, still a leaf that requires grad
    device = DEVICES[0]
    w = lp.Tensor([1.0, 2.0], requires_grad=True, device=device)
    dist.all_reduce(w)
    assert w.requires_grad and w.is_leaf and w.numpy().tolist() == [size, 2.0 * size]
    # a graph that saved the old values refuses to backpropagate
    x = lp.Tensor([1.0, 2.0], requires_grad=True, device=device)
    y = x * 1.0
    loss = (y * y).sum()
    dist.all_reduce(y)
    expect(RuntimeError, loss.backward, "changed in place")
    # bad input: nothing changes, every rank raises alike (no collective is entered)
    t = lp.ones(2, device=device)
    expect(ValueError, lambda: dist.all_reduce(t, "prod"), "all_reduce", "'prod'")
    expect(TypeError, lambda: dist.all_reduce(lp.asarray([1, 2], device=device), "mean"), "mean", "int64")
    expect(TypeError, lambda: dist.all_reduce(lp.asarray([True], device=device)), "bool")
    expect(TypeError, lambda: dist.all_reduce(np.ones(2)), "Tensor", "ndarray")
    expect(ValueError, lambda: dist.broadcast(t, src=size), "src", str(size))
    expect(ValueError, lambda: dist.all_gather([t], t) if size > 1 else dist.all_gather([], t), "tensor_list")
    expect(ValueError, lambda: dist.all_gather([lp.ones(3, device=device)] * size, t), "tensor_list[0]", "(3,)", "(2,)")
    expect(RuntimeError, lambda: dist.init_process_group(), "already initialized")
    assert t.numpy().tolist() == [1.0, 1.0]
    dist.barrier()


# ---- DDP ------------------------------------------------------------------------------------


def problem(seed=0, n=64, features=6, classes=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, features)), rng.integers(0, classes, size=n)


def model_and_optimizer(device, kind):
    lp.manual_seed(7)
    model = nn.MLP([6, 16, 16, 3], device=device, dtype="float64")
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if kind == "sgd" else \
        optim.Adam(model.parameters(), lr=1e-2)
    return model, opt


def ddp():
    """N processes x batch B step exactly as one process x batch N*B (20 steps)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = problem()
    per = len(y) // size
    x, y = x[:per * size], y[:per * size]  # the reference's batch: every process's share
    for device in DEVICES:
        for kind, cap in (("sgd", 25.0), ("adam", 0.0005)):  # 0.0005 MB: a bucket per parameter or two
            ref, ref_opt = model_and_optimizer(device, kind)
            model, opt = model_and_optimizer(device, kind)
            if rank:  # different starting weights: the wrapper must copy rank 0's
                for p in model.parameters():
                    p.data[...] = p.data * 0.0 + 0.5
            ddp_model = DDP(model, bucket_cap_mb=cap)
            if cap < 1:
                assert len(ddp_model._buckets) > 2
            xs, ys = lp.Tensor(x, device=device), lp.asarray(y, device=device)
            mine = slice(rank * per, (rank + 1) * per)
            for _ in range(20):
                ref_opt.zero_grad()
                nn.cross_entropy_loss(ref(xs), ys).backward()
                ref_opt.step()
                opt.zero_grad()
                nn.cross_entropy_loss(ddp_model(xs[mine]), ys[mine]).backward()
                opt.step()
            for (name, a), b in zip(ref.named_parameters(), ddp_model.module.parameters()):
                np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-10, err_msg=f"{device} {kind} {name}")
            assert list(ddp_model.state_dict()) == ["module." + k for k in ref.state_dict()]


def compiled():
    """A compiled DDP training step (lp.compile) steps as the eager one, replays
    included: each replay arms the wrapper, runs the backward, then the gradients'
    hooks, which average them over the processes (10 steps, to 1e-12 in float64)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = problem()
    per = len(y) // size
    for device in DEVICES:
        for kind, cap in (("sgd", 25.0), ("adam", 0.0005)):
            ref, ref_opt = model_and_optimizer(device, kind)
            ref_ddp = DDP(ref, bucket_cap_mb=cap)
            model, opt = model_and_optimizer(device, kind)
            ddp_model = DDP(model, bucket_cap_mb=cap)

            def step(xb, yb, m=ddp_model, o=opt):
                o.zero_grad()
                loss = nn.cross_entropy_loss(m(xb), yb)
                loss.backward()
                o.step()
                return loss

            fast = lp.compile(step)
            xs, ys = lp.Tensor(x, device=device), lp.asarray(y, device=device)
            mine = slice(rank * per, (rank + 1) * per)
            for _ in range(10):
                ref_opt.zero_grad()
                expected = nn.cross_entropy_loss(ref_ddp(xs[mine]), ys[mine])
                expected.backward()
                ref_opt.step()
                got = fast(xs[mine], ys[mine])
                np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=0, atol=1e-12)
            assert fast.calls == {"traced": 1, "replayed": 9, "eager": 0}, fast.explain()
            for (name, a), b in zip(ref.named_parameters(), model.parameters()):
                np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-12, err_msg=f"{device} {kind} {name}")

            # the grad mode the function sets, not its caller's: an evaluation under no_grad
            # does not arm the next backward, and a step under enable_grad (called under
            # no_grad) averages
            def evaluate(xb, m=ddp_model):
                with lp.no_grad():
                    return m(xb).sum()

            def step_inside(xb, yb, m=ddp_model, o=opt):
                with lp.enable_grad():
                    o.zero_grad()
                    loss = nn.cross_entropy_loss(m(xb), yb)
                    loss.backward()
                o.step()
                return loss

            looked, inside = lp.compile(evaluate), lp.compile(step_inside)
            for _ in range(3):
                looked(xs[mine])
                assert not ddp_model._sync_next, "an evaluation armed the next backward"
            with lp.no_grad():
                for _ in range(3):
                    inside(xs[mine], ys[mine])
            assert looked.calls["replayed"] == 2 and inside.calls["replayed"] == 2
            for p in model.parameters():  # averaged gradients: every rank holds the same weights
                total = lp.asarray(p.numpy().copy(), device=device)
                dist.all_reduce(total)
                np.testing.assert_allclose(total.numpy(), size * p.numpy(), rtol=0, atol=1e-12)


def no_sync():
    """Two micro-batches per rank, the first under no_sync: the same step as one process
    over all the micro-batches (their mean losses summed, divided by the processes)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = problem(seed=1)
    micro = len(y) // (2 * size)
    for device in DEVICES:
        ref, ref_opt = model_and_optimizer(device, "sgd")
        model, opt = model_and_optimizer(device, "sgd")
        ddp_model = DDP(model, bucket_cap_mb=0.001)
        xs, ys = lp.Tensor(x, device=device), lp.asarray(y, device=device)
        parts = [slice(i * micro, (i + 1) * micro) for i in range(2 * size)]
        for _ in range(5):
            ref_opt.zero_grad()
            total = None
            for part in parts:
                loss = nn.cross_entropy_loss(ref(xs[part]), ys[part])
                total = loss if total is None else total + loss
            (total / size).backward()
            ref_opt.step()
            opt.zero_grad()
            first, second = parts[2 * rank], parts[2 * rank + 1]
            with ddp_model.no_sync():
                nn.cross_entropy_loss(ddp_model(xs[first]), ys[first]).backward()
            if size > 1:  # no communication yet: the gradients are this rank's own
                local = [lp.asarray(p.grad, copy=True) for p in model.parameters()]
                others = [lp.asarray(p.grad, copy=True) for p in model.parameters()]
                for g in others:
                    dist.all_reduce(g, "max")
                assert any(not np.array_equal(g.numpy(), mine.numpy()) for g, mine in zip(others, local))
            nn.cross_entropy_loss(ddp_model(xs[second]), ys[second]).backward()
            opt.step()
        for a, b in zip(ref.parameters(), model.parameters()):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=1e-10, err_msg=device)

        # compiled: one micro-step, replayed inside no_sync and outside it (the flag is read
        # by the replayed _arm, not a module change), as the eager steps above, bit for bit
        again, again_opt = model_and_optimizer(device, "sgd")
        ddp_again = DDP(again, bucket_cap_mb=0.001)

        def micro_step(xb, yb, m=ddp_again):
            loss = nn.cross_entropy_loss(m(xb), yb)
            loss.backward()
            return loss

        fast = lp.compile(micro_step)
        for _ in range(5):
            again_opt.zero_grad()
            with ddp_again.no_sync():
                fast(xs[first], ys[first])
            fast(xs[second], ys[second])
            again_opt.step()
        for a, b in zip(model.parameters(), again.parameters()):
            np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=device)
        assert fast.calls["eager"] == 0 and fast.calls["traced"] == 1, fast.explain()

        # no_sync() entered inside a compiled function: a replay would not enter it (it would
        # average), so such a call runs eagerly, with a warning
        def inside(xb, yb, m=ddp_again):
            with m.no_sync():
                nn.cross_entropy_loss(m(xb), yb).backward()

        inner = lp.compile(inside)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(3):
                again_opt.zero_grad()
                inner(xs[first], ys[first])
        assert inner.calls["replayed"] == 0, inner.explain()
        assert any("no_sync() inside the function" in str(w.message) for w in seen), [str(w.message) for w in seen]


def unused():
    """A parameter that one rank does not use counts as zeros there; every rank ends
    with the same, averaged gradient."""
    rank, size = dist.get_rank(), dist.get_world_size()

    class Two(nn.Module):
        def __init__(self):
            self.a = lp.Tensor([1.0, 2.0], requires_grad=True, device=DEVICES[0])
            self.b = lp.Tensor([3.0], requires_grad=True, device=DEVICES[0])

        def forward(self, use_b):
            out = (self.a * self.a).sum()
            return out + self.b.sum() * 4.0 if use_b else out

    model = DDP(Two(), bucket_cap_mb=1e-6)  # one bucket per parameter
    model(rank == 0).backward()
    np.testing.assert_allclose(model.module.a.grad.tolist(), [2.0, 4.0])
    np.testing.assert_allclose(model.module.b.grad.tolist(), [4.0 / size])


def two_wrappers():
    """Two wrapped models in one backward, one with a parameter that only rank 0 uses:
    each averages its own gradients (every rank reduces the wrappers in creation order)."""
    rank, size = dist.get_rank(), dist.get_world_size()

    class Pair(nn.Module):
        def __init__(self, scale):
            self.w = lp.Tensor([1.0, 1.0], requires_grad=True, device=DEVICES[0])
            self.extra = lp.Tensor([1.0], requires_grad=True, device=DEVICES[0])
            self.scale = scale

        def forward(self, use_extra):
            out = (self.w * self.scale * (rank + 1)).sum()
            return out + self.extra.sum() * 5.0 if use_extra else out

    a, b = DDP(Pair(3.0)), DDP(Pair(7.0))
    (a(True) + b(rank == 0)).backward()
    mean = sum(r + 1 for r in range(size)) / size
    np.testing.assert_allclose(a.module.w.grad.tolist(), [3.0 * mean] * 2)
    np.testing.assert_allclose(b.module.w.grad.tolist(), [7.0 * mean] * 2)
    np.testing.assert_allclose(a.module.extra.grad.tolist(), [5.0])
    np.testing.assert_allclose(b.module.extra.grad.tolist(), [5.0 / size])


def robustness():
    """A parameter no rank uses keeps .grad None; a hook that raises once does not stop
    later averaging; a backward without a forward through the wrapper (or after the
    wrapper is dropped) stays on this process: no collective, so no hang."""
    import gc

    rank, size = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(2, 1, device=DEVICES[0], dtype="float64")
    model.spare = lp.Tensor([1.0], requires_grad=True, device=DEVICES[0])  # never used
    ddp_model = DDP(model)
    x = lp.ones((1, 2), device=DEVICES[0], dtype="float64") * (rank + 1)
    ddp_model(x).sum().backward()
    assert model.spare.grad is None or not model.spare.has_grad
    mean = sum(r + 1 for r in range(size)) / size
    np.testing.assert_allclose(model.weight.grad.tolist(), [[mean, mean]])
    # a user hook that raises once: the next step still averages
    fail = [True]

    def hook(p):
        if fail.pop() if fail else False:
            raise ValueError("a hook fails once")

    handle = model.weight.register_post_accumulate_grad_hook(hook)
    model.zero_grad()
    try:
        ddp_model(x).sum().backward()
    except ValueError:
        pass
    model.zero_grad()
    ddp_model(x).sum().backward()
    np.testing.assert_allclose(model.weight.grad.tolist(), [[mean, mean]])
    handle.remove()
    # rank 0 alone: a backward of the module itself (no forward through the wrapper)
    if rank == 0:
        model.zero_grad()
        model(x).sum().backward()
        np.testing.assert_allclose(model.weight.grad.tolist(), [[1.0, 1.0]])
    dist.barrier()
    # a dropped wrapper: its hooks do nothing
    del ddp_model
    gc.collect()
    if rank == 0:
        model.zero_grad()
        model(x).sum().backward()
    dist.barrier()


def buffers():
    """Rank 0's buffers reach every rank at construction and at each forward outside no_sync."""
    rank = dist.get_rank()
    model = nn.Linear(2, 2, device=DEVICES[0])
    model.register_buffer("running", lp.ones(3, device=DEVICES[0]) * (rank + 1))
    ddp_model = DDP(model)
    assert model.running.numpy().tolist() == [1.0, 1.0, 1.0]
    model.running[...] = 7.0 + rank
    with ddp_model.no_sync(), lp.no_grad():
        ddp_model(lp.ones((1, 2), device=DEVICES[0]))
    assert model.running.numpy().tolist() == [7.0 + rank] * 3  # no_sync: no communication
    with lp.no_grad():
        ddp_model(lp.ones((1, 2), device=DEVICES[0]))
    assert model.running.numpy().tolist() == [7.0] * 3


def mismatch():
    """Models that differ across ranks (another shape, another count) raise ValueError
    on every rank at construction, naming the parameter; nothing hangs."""
    rank = dist.get_rank()
    expect(ValueError, lambda: DDP(nn.Linear(2, 3 if rank == 0 else 4, device=DEVICES[0])),
           "models differ", "parameter weight: shape (3, 2)", "parameter weight: shape (4, 2)")
    layers = [2, 4] + ([3] if rank else [])
    expect(ValueError, lambda: DDP(nn.MLP(layers, device=DEVICES[0])), "models differ", "nothing more")
    DDP(nn.Linear(2, 3, device=DEVICES[0]))  # the same model: fine


def evaluation():
    """A forward under no_grad (an evaluation) does not arm the next backward: a
    backward of the module itself on rank 0 alone stays local (a hang would time out)."""
    rank = dist.get_rank()
    model = nn.Linear(2, 1, device=DEVICES[0], dtype="float64")
    ddp_model = DDP(model)
    x = lp.ones((1, 2), device=DEVICES[0], dtype="float64")
    with lp.no_grad():
        ddp_model(x)
    if rank == 0:
        model(x).sum().backward()
        np.testing.assert_allclose(model.weight.grad.tolist(), [[1.0, 1.0]])
    dist.barrier()


def evaluation_between():
    """An evaluation forward (no_grad) between a training forward and its backward
    keeps that backward averaging (PyTorch's); a read-only tensor on one rank only
    makes that rank raise after the collective, so no rank waits forever."""
    rank, size = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(2, 1, device=DEVICES[0], dtype="float64")
    ddp_model = DDP(model)
    x = lp.ones((1, 2), device=DEVICES[0], dtype="float64") * (rank + 1)
    loss = ddp_model(x).sum()
    with lp.no_grad():
        ddp_model(x)
    loss.backward()
    mean = sum(r + 1 for r in range(size)) / size
    np.testing.assert_allclose(model.weight.grad.tolist(), [[mean, mean]])
    t = lp.ones(3, device=DEVICES[0])
    if rank == 1 and DEVICES[0] == "cpu":
        t = lp.from_dlpack(np.ones(3))
        t.data.flags.writeable = False
        expect(ValueError, lambda: dist.all_reduce(t), "all_reduce", "read-only")
    else:
        dist.all_reduce(t)
    dist.barrier()


def copies():
    """copy.deepcopy of a wrapper (an EMA copy) is a wrapper of its own that averages
    its own gradients; pickle works too."""
    import copy
    import pickle

    rank, size = dist.get_rank(), dist.get_world_size()
    ddp_model = DDP(nn.Linear(2, 1, device=DEVICES[0], dtype="float64"))
    twin = copy.deepcopy(ddp_model)
    pickle.loads(pickle.dumps(ddp_model))
    assert twin.module.weight is not ddp_model.module.weight
    x = lp.ones((1, 2), device=DEVICES[0], dtype="float64") * (rank + 1)
    twin(x).sum().backward()
    mean = sum(r + 1 for r in range(size)) / size
    np.testing.assert_allclose(twin.module.weight.grad.tolist(), [[mean, mean]])
    assert not ddp_model.module.weight.has_grad
    # a copy made between a forward and its backward, or inside no_sync, starts unarmed
    ddp_model(x)
    with ddp_model.no_sync():
        third = copy.deepcopy(ddp_model)
    assert not third._sync_next and not third._no_sync


def _blas_threads():
    from threadpoolctl import threadpool_info

    return sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"})


def threads():
    """Launched without any *_NUM_THREADS setting: each of the node's processes limits
    its BLAS pools to its share of the cores, and the group's end gives them back;
    a second group limits them again."""
    import os

    from leanpass.distributed import _group

    share = max(1, len(os.sched_getaffinity(0)) // _group.local_size)
    assert _group.local_size == dist.get_world_size() and _blas_threads() == [share], (_blas_threads(), share)
    dist.destroy_process_group()
    before = _blas_threads()
    assert before != [share] or share == len(os.sched_getaffinity(0)), before
    # an NCCL start that fails after the MPI group was made (here: a CuPy that finds no device) leaves
    # no group and the thread pools as they were
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = types.ModuleType("cupy.cuda.nccl")
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1 // 0)
    fake = types.ModuleType("cupy")
    fake.cuda = cuda
    saved = {name: sys.modules.get(name) for name in ("cupy", "cupy.cuda", "cupy.cuda.nccl")}
    sys.modules.update({"cupy": fake, "cupy.cuda": cuda, "cupy.cuda.nccl": cuda.nccl})
    try:
        expect(ZeroDivisionError, lambda: dist.init_process_group("nccl"))
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert not dist.is_initialized() and _blas_threads() == before, _blas_threads()
    dist.init_process_group()
    assert _blas_threads() == [share], _blas_threads()


def threads_set():
    """Launched with OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set: left as they are."""
    assert _blas_threads() == [1], _blas_threads()
    from leanpass.distributed import _group

    assert _group.limits is None


def failure():
    """Rank 1 raises while rank 0 waits in a collective: python -m mpi4py aborts both."""
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    dist.all_reduce(lp.ones(3, device=DEVICES[0]))
    dist.barrier()


def main(scenario, backend="mpi"):
    dist.init_process_group(backend)
    if backend == "nccl":
        DEVICES[:] = [f"cuda:{dist.get_local_rank()}"]
    globals()[scenario]()  # an exception here aborts every rank (python -m mpi4py)
    dist.barrier()
    if dist.get_rank() == 0:
        print(f"OK {scenario} on {dist.get_world_size()} processes", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
