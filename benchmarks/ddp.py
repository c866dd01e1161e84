"""Data-parallel scaling on the CPU: the W1 step on 1, 2, ... processes started by MPI.

    python benchmarks/ddp.py                                   # 1 and 2 processes
    python benchmarks/ddp.py --processes 1 2 4 --rounds 15 --dtype float32 --json ddp.json

This script is the driver: for each process count P it starts itself with
``mpiexec -n P python -m mpi4py benchmarks/ddp.py --worker ...`` (the mpiexec next
to this Python first, else the one on PATH), reads the JSON line rank 0 prints,
and prints one markdown table for all of them. Each process limits its BLAS pool
to one thread (threadpoolctl) and runs with OMP_NUM_THREADS=1.

The workload is weak scaling: every process takes one W1 step (MLP 784-256-128-10,
ReLU, cross-entropy on integer labels, SGD lr 0.01) on its own batch of 128, from
``steps.make_problem`` with a seed per rank, and the gradients are averaged over the
processes. Contestants, interleaved round by round inside one mpiexec run (a barrier
before each one's timed block), each figure the median over rounds of the slowest
rank's time per step:

- ``numpy+mpi4py by hand``: the floor. NumPy forward and backward that write the
  gradients into views of one flat buffer, one ``Allreduce`` of it, the update.
- ``leanpass DDP``: ``nn.parallel.DistributedDataParallel(nn.MLP(...))`` and
  ``optim.SGD``, as a user writes the step (also on one process).
- ``pytorch DDP (gloo)``: ``torch.nn.parallel.DistributedDataParallel`` over gloo
  on 127.0.0.1, when PyTorch is installed.

Also, per process count, the by-hand step's two parts timed alone: the bare
``Allreduce`` of a flat buffer the size of all the gradients (the communication
floor of one step) and the step without it (its compute, which slows down when
the processes share cores). Before the clock starts the contestants' losses
are checked to agree step by step, and LeanPass's parameters to be equal on every
rank.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as run.py: before torch loads

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from steps import LeanPassStep, TorchStep, make_problem  # noqa: E402

SIZES, BATCH, LR = [784, 256, 128, 10], 128, 0.01
HAND, LEANPASS, TORCH = "numpy+mpi4py by hand", "leanpass DDP", "pytorch DDP (gloo)"
ALLREDUCE, COMPUTE = "allreduce", "compute"  # the by-hand step's two parts, timed alone
MARK = "DDPBENCH-JSON "  # starts the line of results rank 0 prints
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def parameter_count(sizes) -> int:
    """Weights and biases of the MLP: 235,146 for 784-256-128-10."""
    return sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:]))


# ---- the worker: one process of an mpiexec run ------------------------------------------------


class HandDDPStep:
    """The step by hand with NumPy (as ``steps.HandStep``), its gradients written into
    views of one flat buffer that a single ``Allreduce`` averages."""

    name = HAND

    def __init__(self, comm, sizes, batch, dtype="float32", lr=LR, seed=0, communicate=True):
        from mpi4py import MPI

        self.comm, self.in_place, self.size = comm, MPI.IN_PLACE, comm.Get_size()
        self.communicate = communicate  # False: no Allreduce (its compute alone, not a data-parallel step)
        x, self.labels, _ = make_problem(sizes, batch, seed)  # this rank's data
        self.x = x.astype(dtype)
        _, _, weights = make_problem(sizes, batch, 0)  # rank 0's start, as DDP's broadcast gives the others
        self.weights = [(w.astype(dtype), b.astype(dtype)) for w, b in weights]
        self.flat = np.empty(parameter_count(sizes), dtype=dtype)
        self.grads, offset = [], 0
        for w, b in self.weights:
            gw = self.flat[offset:offset + w.size].reshape(w.shape)
            offset += w.size
            gb = self.flat[offset:offset + b.size]
            offset += b.size
            self.grads.append((gw, gb))
        self.rows = np.arange(batch)
        self.scale = lr / self.size  # the mean over processes and the learning rate, in one pass

    def __call__(self):
        acts, pre = [self.x], []
        h = self.x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(self.weights):
            z = h @ w + b
            pre.append(z)
            h = np.maximum(z, 0) if i < last else z
            acts.append(h)
        logits = acts[-1]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        loss = (np.log(total[:, 0]) - shifted[self.rows, self.labels]).mean()
        grad = exp / total
        grad[self.rows, self.labels] -= 1
        grad /= logits.shape[0]
        for i in range(last, -1, -1):
            gw, gb = self.grads[i]
            np.matmul(acts[i].T, grad, out=gw)
            np.sum(grad, axis=0, out=gb)
            if i:
                grad = (grad @ self.weights[i][0].T) * (pre[i - 1] > 0)
        if self.communicate:
            self.comm.Allreduce(self.in_place, self.flat)
        self.flat *= self.scale
        for (w, b), (gw, gb) in zip(self.weights, self.grads):
            w -= gw
            b -= gb
        return loss

    def loss_value(self, loss) -> float:
        return float(loss)


def leanpass_ddp_step(dtype, rank):
    from leanpass import nn

    step = LeanPassStep(SIZES, BATCH, dtype=dtype, lr=LR, seed=rank)  # this rank's data (and weights,
    step.model = nn.parallel.DistributedDataParallel(step.model)      # replaced here by rank 0's)
    step.name = LEANPASS
    return step


def torch_ddp_step(comm, dtype, rank, size):
    import socket

    import torch
    import torch.distributed as tdist

    port = None
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    step = TorchStep(SIZES, BATCH, dtype=dtype, lr=LR, seed=rank)
    step.model = torch.nn.parallel.DistributedDataParallel(step.model)  # the optimizer keeps the same parameters
    step.name = TORCH
    return step


def check_same_losses(steps: dict, dtype: str, n: int = 3) -> None:
    """The contestants start from rank 0's weights and take the same steps: their losses
    agree on every rank (this also warms them up)."""
    tolerance = 1e-4 if dtype == "float32" else 1e-10
    for i in range(n):
        losses = {name: step.loss_value(step()) for name, step in steps.items()}
        first = next(iter(losses.values()))
        if max(losses.values()) - min(losses.values()) > tolerance * abs(first):
            raise RuntimeError(f"ddp.py: the contestants' losses differ at step {i + 1}: {losses}")


def check_leanpass_in_sync(model) -> None:
    """Every rank's LeanPass parameters are exactly rank 0's."""
    import leanpass as lp
    from leanpass import distributed as dist

    mine = lp.concat([lp.reshape(p.detach(), (-1,)) for p in model.parameters()])
    gathered = dist.all_gather([lp.zeros_like(mine) for _ in range(dist.get_world_size())], mine)
    reference = gathered[0].numpy()
    for r, t in enumerate(gathered):
        if not np.array_equal(t.numpy(), reference):
            worst = float(np.max(np.abs(t.numpy() - reference)))
            raise RuntimeError(f"ddp.py: leanpass DDP parameters differ between rank 0 and rank {r} (max {worst:g})")


def interleaved(comm, contestants: dict, rounds: int, repeat: int) -> dict:
    """Seconds per call of each contestant, round by round (the order rotating each
    round, the same on every rank), a barrier before each timed block; returns this
    rank's times per round."""
    for fn in contestants.values():  # warm up
        fn()
    times = {name: [] for name in contestants}
    order = list(contestants.items())
    for r in range(rounds):
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(repeat):
                fn()
            times[name].append((time.perf_counter() - start) / repeat)
    return times


def worker(args) -> None:
    import mpi4py
    from mpi4py import MPI
    from threadpoolctl import threadpool_limits

    import leanpass
    from leanpass import distributed as dist

    try:
        import torch
    except ImportError:
        torch = None
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dtype = args.dtype
    if torch is not None:
        torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        dist.init_process_group("mpi")
        steps = {HAND: HandDDPStep(comm, SIZES, BATCH, dtype=dtype, seed=rank),
                 LEANPASS: leanpass_ddp_step(dtype, rank)}
        if torch is not None:
            steps[TORCH] = torch_ddp_step(comm, dtype, rank, size)
        check_same_losses(steps, dtype)
        check_leanpass_in_sync(steps[LEANPASS].model)
        flat = np.zeros(parameter_count(SIZES), dtype=dtype)
        fns = dict(steps)
        fns[ALLREDUCE] = lambda: comm.Allreduce(MPI.IN_PLACE, flat)
        fns[COMPUTE] = HandDDPStep(comm, SIZES, BATCH, dtype=dtype, seed=rank, communicate=False)
        times = interleaved(comm, fns, args.rounds, args.repeat)
        check_leanpass_in_sync(steps[LEANPASS].model)
        everyone = comm.gather(times, root=0)
        if torch is not None:
            torch.distributed.destroy_process_group()
        dist.destroy_process_group()
    if rank == 0:  # per round the slowest rank's time (the step is done when every rank is), then the median
        ms = {name: 1e3 * statistics.median(max(t[name][r] for t in everyone) for r in range(args.rounds))
              for name in fns}
        result = {
            "processes": size, "dtype": dtype, "rounds": args.rounds, "repeat": args.repeat,
            "step_ms": {name: ms[name] for name in steps}, "allreduce_ms": ms[ALLREDUCE], "compute_ms": ms[COMPUTE],
            "mpi": " ".join(MPI.Get_library_version().strip().splitlines()[0].split()),
            "mpi4py": mpi4py.__version__,
            "torch": torch.__version__ if torch is not None else None, "leanpass": leanpass.__version__,
        }
        print(MARK + json.dumps(result), flush=True)


# ---- the driver -----------------------------------------------------------------------------


def find_mpiexec() -> str | None:
    """mpiexec next to this Python (the mpich wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def why_not_runnable() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return 'mpi4py is not installed (pip install -e ".[mpi]": mpi4py and MPICH wheels)'
    if find_mpiexec() is None:
        return 'no mpiexec next to this Python or on PATH (pip install -e ".[mpi]" brings MPICH\'s)'
    if importlib.util.find_spec("threadpoolctl") is None:
        return 'threadpoolctl is not installed (pip install -e ".[bench]")'
    return None


def run_processes(mpiexec: str, processes: int, args) -> dict:
    """One mpiexec run of the worker on ``processes`` processes: rank 0's results."""
    command = [mpiexec, "-n", str(processes), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
               "--worker", "--rounds", str(args.rounds), "--repeat", str(args.repeat), "--dtype", args.dtype]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ, **ONE_THREAD))
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if done.returncode != 0 or len(lines) != 1:
        sys.exit(f"ddp.py: {' '.join(command)} failed (exit {done.returncode}); its output:\n{done.stdout}")
    return json.loads(lines[0][len(MARK):])


def table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def report(runs: dict, info: dict) -> str:
    """The markdown report of ``{processes: rank 0's results}``."""
    first = next(iter(runs.values()))
    names = list(first["step_ms"])
    out = [f"# LeanPass data-parallel benchmark, {info['date']}",
           f"{info['cpu']}, {info['cores']} cores; Python {info['python']}, NumPy {info['numpy']}, "
           f"{first['mpi']} (mpi4py {first['mpi4py']}), PyTorch {first['torch'] or 'not installed'}, "
           f"LeanPass {first['leanpass']}", "",
           f"## W1 step per process (MLP {'-'.join(map(str, SIZES))}, batch {BATCH} per process, cross-entropy, "
           f"SGD), {first['dtype']}, gradients averaged over the processes; median of {first['rounds']} rounds "
           f"x {first['repeat']} steps"]
    rows = []
    for p, run in runs.items():
        hand = run["step_ms"][HAND]
        for name in names:
            ms = run["step_ms"][name]
            rate = p * BATCH / (ms / 1e3)
            one = runs.get(1, {}).get("step_ms", {}).get(name)
            speedup = f"{rate / (BATCH / (one / 1e3)):.2f}x" if one else "-"
            rows.append([p, name, f"{ms:.3f}", f"{ms / hand:.2f}x", f"{rate:,.0f}", speedup])
    out.append(table(["processes", "contestant", "step ms (median)", "ratio to by-hand (same P)",
                      "samples/s (all processes)", "speed-up vs 1 process"], rows))
    out.append("")
    count = parameter_count(SIZES)
    itemsize = np.dtype(first["dtype"]).itemsize
    for p, run in runs.items():
        out.append(f"- {p} process{'es' if p > 1 else ''}: bare Allreduce of {count:,} {first['dtype']} "
                   f"({count * itemsize / 1e6:.2f} MB): {run['allreduce_ms']:.3f} ms per call; the by-hand "
                   f"step without it (compute alone): {run['compute_ms']:.3f} ms")
    if TORCH not in names:
        out.append(f"- {TORCH}: left out, PyTorch is not installed")
    out += ["", f"Caveats: {info['cores']} cores, which the processes share with each other (and with whatever "
            "else runs on the machine); weak scaling, so the ideal is a constant step time and a speed-up of P; "
            "every process runs one BLAS thread; the time of a step is the slowest rank's."]
    return "\n".join(out)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    return {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", nargs="+", type=int, default=[1, 2], help="process counts (default: 1 2)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--repeat", type=int, default=10, help="steps per contestant and round")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a process of an mpiexec run
    args = p.parse_args(argv)
    if min(args.processes) < 1 or args.rounds < 1 or args.repeat < 1:
        p.error("--processes, --rounds and --repeat take positive numbers")
    if args.worker:
        return worker(args)
    why = why_not_runnable()
    if why:
        p.exit(2, f"{p.prog}: error: {why}\n")
    mpiexec = find_mpiexec()
    runs = {n: run_processes(mpiexec, n, args) for n in sorted(set(args.processes))}
    info = machine()
    print(report(runs, info))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "runs": {str(n): r for n, r in runs.items()}}, f, indent=2)
    return runs


if __name__ == "__main__":
    main()
