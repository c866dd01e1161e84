"""leanpass.distributed and DistributedDataParallel.

The collectives and DDP run in real processes, started by ``mpiexec`` (MPICH from
the ``mpi`` extra's wheels) running ``tests/mpi_worker.py``; those tests skip, with
the reason, where mpi4py or mpiexec is missing. The rest runs in this process
without MPI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import leanpass as lp
from leanpass import distributed as dist
from leanpass import nn

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_worker.py")
TIMEOUT = 180  # seconds: a hang (a rank that never reaches a collective) fails instead of blocking CI


def _mpiexec() -> str | None:
    """mpiexec next to this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def _why_no_mpi() -> str | None:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return 'mpi4py is not installed (pip install "leanpass[mpi]")'
    if _mpiexec() is None:
        return "no mpiexec found next to this Python or on PATH"
    return None


needs_mpi = pytest.mark.skipif(_why_no_mpi() is not None, reason=f"MPI tests: {_why_no_mpi()}")


def _why_no_nccl(processes: int) -> str | None:
    """None where NCCL can run ``processes`` processes, one GPU each; else why not."""
    try:
        lp.backends.get_backend("cuda")
        import cupy
        from cupy.cuda import nccl
    except (ImportError, RuntimeError, ValueError) as exc:
        return f"no usable CUDA or CuPy NCCL here ({exc})"
    if not getattr(nccl, "available", True):
        return "CuPy finds no NCCL library (install nvidia-nccl-cu12 / -cu13: the cuda12/cuda13 extras)"
    gpus = cupy.cuda.runtime.getDeviceCount()
    if gpus < processes:
        return f"NCCL with {processes} processes needs {processes} GPU(s); CuPy sees {gpus}"
    return None


def _env() -> dict:
    """The processes' environment: one BLAS thread each, and this checkout's leanpass
    first on the path (a script run by path would import the installed one, which
    may be another checkout: scripts/mutate.py tests a copy)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=path)


def launch(scenario: str, processes: int, backend: str = "mpi") -> subprocess.CompletedProcess:
    """Run a scenario of tests/mpi_worker.py on ``processes`` processes (1: without mpiexec,
    as a script run on its own)."""
    env = _env()
    command = [sys.executable, "-m", "mpi4py", WORKER, scenario, backend]
    if processes > 1:
        command = [_mpiexec(), "-n", str(processes), *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def assert_ok(result, scenario, processes):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert f"OK {scenario} on {processes} processes" in result.stdout


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("processes", [1, 2, 3])
def test_collectives_give_the_expected_values(processes):
    """all_reduce (sum, mean, max, min; float, int, complex, 0-d, a strided view),
    broadcast from each rank, all_gather, on cpu and strict; bad input raises alike on
    every rank and changes nothing."""
    assert_ok(launch("collectives", processes), "collectives", processes)


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("processes", [1, 2])
def test_ddp_steps_as_one_process_with_the_whole_batch(processes):
    """2 processes x batch 32 = 1 process x batch 64, to 1e-10 in float64 after 20 steps
    (SGD with momentum, and Adam with a bucket per parameter); rank 1 starts from other
    weights, which the wrapper replaces with rank 0's."""
    assert_ok(launch("ddp", processes), "ddp", processes)


# scenario of tests/mpi_worker.py -> what it checks, on 2 processes
DDP_SCENARIOS = {
    "compiled": "a compiled DDP step (lp.compile) steps as the eager one: its replays average the gradients",
    "no_sync": "no_sync accumulates locally, then the next synced backward averages the sum",
    "unused": "a parameter unused on one rank counts as zeros there",
    "two_wrappers": "two wrapped models in one backward each average their own gradients",
    "robustness": "a parameter no rank uses keeps .grad None; a hook raising once does not stop the "
                  "averaging; a backward without a forward through the wrapper, or after it is dropped, "
                  "makes no collective call (rank 0 alone runs one: a hang would hit the timeout)",
    "buffers": "rank 0's buffers reach every rank at construction and at each forward outside no_sync",
    "mismatch": "models that differ across ranks raise ValueError on every rank at construction, naming "
                "the parameter",
    "evaluation": "a forward under no_grad does not arm the next backward (a local one does not hang)",
    "copies": "copy.deepcopy and pickle of a wrapper work; the copy averages its own gradients",
    "evaluation_between": "an evaluation forward between a forward and its backward keeps the averaging; a "
                          "read-only tensor on one rank raises there after the collective (no hang)",
}


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("scenario", sorted(DDP_SCENARIOS))
def test_ddp_scenarios_on_two_processes(scenario):
    assert_ok(launch(scenario, 2), scenario, 2)


@pytest.mark.mpi
@needs_mpi
def test_the_processes_of_a_node_share_its_cores():
    """Without OMP_NUM_THREADS or OPENBLAS_NUM_THREADS, init_process_group limits each
    process's BLAS threads to cores // processes (the pools fought: the MLP example on
    2 processes of 2 cores trained 8,500 samples/s, not 300,000); a setting given is
    left as it is."""
    env = {k: v for k, v in _env().items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    command = [_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", WORKER, "threads", "mpi"]
    assert_ok(subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env), "threads", 2)
    assert_ok(launch("threads_set", 2), "threads_set", 2)


def test_sharing_the_cores_without_threadpoolctl_warns_at_the_callers_line(monkeypatch):
    """A group of 2 processes on this node (a stand-in for MPI's): without threadpoolctl,
    one warning at the line that called init_process_group, and the pools as they were;
    with it, the limits, given back by destroy_process_group."""
    class Group:
        name, rank, size, local_rank, local_size = "mpi", 0, 2, 0, 2

        def __init__(self):
            self.limits = None

        def destroy(self):
            if self.limits is not None:
                self.limits.restore_original_limits()

    monkeypatch.setattr(dist, "_MPIGroup", Group)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)
    with pytest.warns(RuntimeWarning, match="install threadpoolctl") as caught:
        dist.init_process_group("mpi")
    assert caught[0].filename == __file__
    dist.destroy_process_group()
    monkeypatch.delitem(sys.modules, "threadpoolctl")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    before = [pool["num_threads"] for pool in threadpoolctl.threadpool_info()]
    dist.init_process_group("mpi")
    try:
        assert all(pool["num_threads"] == share for pool in threadpoolctl.threadpool_info())
    finally:
        dist.destroy_process_group()
    assert [pool["num_threads"] for pool in threadpoolctl.threadpool_info()] == before


@pytest.mark.mpi
@needs_mpi
def test_a_rank_that_raises_ends_every_rank():
    """Rank 1 raises while rank 0 waits in all_reduce: both exit with an error (no hang;
    the timeout would fail the test)."""
    result = launch("failure", 2)
    assert result.returncode != 0
    assert "rank 1 fails on purpose" in result.stderr


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("scenario", ["collectives", "ddp", "no_sync", "unused", "two_wrappers", "robustness",
                                      "buffers"])
def test_nccl_on_gpus(scenario, processes):
    """The same scenarios on cuda tensors over NCCL, one GPU per process (one process
    is a group of one, which still runs every NCCL call)."""
    reason = _why_no_nccl(processes)
    if reason:
        pytest.skip(reason)
    assert_ok(launch(scenario, processes, "nccl"), scenario, processes)


# ---- without MPI: errors before any process group --------------------------------------------


def test_collectives_need_a_process_group():
    assert not dist.is_initialized()
    t = lp.ones(3)
    for call in (lambda: dist.all_reduce(t), lambda: dist.broadcast(t), lambda: dist.barrier(),
                 dist.get_rank, dist.get_world_size, dist.get_local_rank, dist.destroy_process_group,
                 lambda: dist.all_gather([t], t)):
        with pytest.raises(RuntimeError, match="init_process_group"):
            call()
    assert t.numpy().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.mpi
@needs_mpi
def test_collectives_refuse_read_only_tensors_without_writing():
    dist.init_process_group()
    try:
        data = np.ones(3)
        data.flags.writeable = False
        t = lp.from_dlpack(data)
        for name, call in (("all_reduce", lambda: dist.all_reduce(t)),
                           ("all_gather", lambda: dist.all_gather([t], lp.ones(3)))):
            with pytest.raises(ValueError, match=f"{name}.*read-only"):
                call()
        assert dist.broadcast(t, src=0) is t  # the source's tensor is only read
        assert t.numpy().tolist() == [1.0, 1.0, 1.0] and t._version == 0
    finally:
        dist.destroy_process_group()


def test_init_process_group_refuses_an_unknown_backend():
    with pytest.raises(ValueError, match="'gloo'"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()


def test_init_process_group_refuses_a_device_its_backend_does_not_carry():
    with pytest.raises(RuntimeError, match="unknown device 'bogus'"):
        dist.init_process_group(device="bogus")
    with pytest.raises(ValueError, match="init_process_group: backend 'nccl' does not carry tensors on cpu"):
        dist.init_process_group("NCCL", device="cpu")  # names in any case, as PyTorch's
    with pytest.raises(ValueError, match="init_process_group: backend 'mpi' does not carry tensors on cuda:0"):
        dist.init_process_group("mpi", device="cuda")
    assert not dist.is_initialized()


def test_reduce_op_names_are_the_op_strings():
    assert (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN) == ("sum", "mean", "max", "min")


class _Flags:  # CuPy's ndarray.flags: c_contiguous, f_contiguous and owndata only
    c_contiguous, f_contiguous, owndata = True, False, True


class _NoWriteableFlag(np.ndarray):
    flags = _Flags()


def test_buffer_uses_a_contiguous_array_whose_flags_have_no_writeable_field():
    """NCCL's buffers are CuPy arrays, whose flags have no ``writeable``: the array
    itself is the buffer (it raised AttributeError; no GPU here, so an array type
    with CuPy's flags stands in for the library)."""
    t = types.SimpleNamespace(data=np.ones(3).view(_NoWriteableFlag))  # _Buffer reads only .data
    group = types.SimpleNamespace(lib=types.SimpleNamespace(ndarray=_NoWriteableFlag), name="nccl")
    backend = types.SimpleNamespace(read_only=lambda a: lp.backends.Backend.read_only(None, a))  # CuPy's backend's
    buf = dist._Buffer(group, backend, t)
    assert buf.array is t.data and not buf.copied


@pytest.mark.mpi
@needs_mpi
def test_ddp_takes_pytorchs_device_arguments_for_its_own_device():
    dist.init_process_group()
    try:
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(2, 2), device_ids=["cpu"], output_device="cpu",
                                                 find_unused_parameters=True)
        assert ddp(lp.ones((1, 2))).shape == (1, 2)
        with pytest.raises(ValueError, match=r"DistributedDataParallel: device_ids=\[0\] names another device"):
            nn.parallel.DistributedDataParallel(nn.Linear(2, 2), device_ids=[0])
        with pytest.raises(ValueError, match="device_ids must name one device"):
            nn.parallel.DistributedDataParallel(nn.Linear(2, 2), device_ids=["cpu", "cpu"])
        with pytest.raises(ValueError, match="no parameter that requires a gradient"):
            nn.parallel.DistributedDataParallel(nn.ReLU())
    finally:
        dist.destroy_process_group()


def test_ddp_needs_a_process_group_and_a_module():
    with pytest.raises(RuntimeError, match="DistributedDataParallel.*init_process_group"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="DistributedDataParallel: expected a Module"):
        nn.parallel.DistributedDataParallel(lp.ones(2))
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        nn.parallel.DistributedDataParallel(nn.Linear(2, 2), bucket_cap_mb=0)


def test_init_without_mpi4py_names_the_extra(monkeypatch):
    """Where mpi4py cannot be imported, the error says how to install it."""
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    assert not dist.is_available()
    with pytest.raises(RuntimeError, match=r'leanpass\[mpi\]'):
        dist.init_process_group()
    assert not dist.is_initialized()


@pytest.mark.mpi
@needs_mpi
def test_training_script_distributed_then_resumed_on_one_process(tmp_path):
    """examples/train_mlp.py --distributed on 2 processes: rank 0 alone prints and
    checkpoints; the checkpoint resumes on 1 process."""
    script = os.path.join(os.path.dirname(WORKER), "..", "examples", "train_mlp.py")
    checkpoint = str(tmp_path / "run.npz")
    env = _env()
    args = ["--epochs", "2", "--quiet", "--checkpoint", checkpoint]
    result = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", script, "--distributed", *args],
                            capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 processes x batch 64" in out
    assert out.count("epoch   1 ") == 1 and out.count("final held-out accuracy") == 1  # rank 0 only
    assert os.path.exists(checkpoint)
    resumed = subprocess.run([sys.executable, script, *args[:1], "3", *args[2:], "--resume"],
                             capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "epoch   3 " in resumed.stdout
    assert float(resumed.stdout.rsplit("accuracy", 1)[1]) > 0.8


def _mpi_doc_blocks():
    """The ```python mpi blocks of docs/distributed.md: (first line, code)."""
    import re

    page = os.path.join(os.path.dirname(WORKER), "..", "docs", "distributed.md")
    with open(page) as f:
        text = f.read()
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python mpi[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.S | re.M)]


def test_the_distributed_page_has_multiprocess_examples():
    assert len(_mpi_doc_blocks()) >= 3


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("line, code", _mpi_doc_blocks(), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_distributed_page_examples_run_on_two_processes(line, code, tmp_path):
    script = tmp_path / f"distributed_md_line_{line}.py"
    script.write_text(code)
    env = _env()
    result = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(script)],
                            capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)
    assert result.returncode == 0, f"docs/distributed.md line {line}:\n{result.stderr}"
