"""Each contestant alone in a fresh process, as a user's training script runs.

    python benchmarks/alone.py                      # W5c and W6, float32 and float64
    python benchmarks/alone.py --only W6 --dtypes float32 --rounds 3

``run.py`` puts every contestant in one process, interleaved, so that drifts in the
machine's speed hit them alike. What it cannot show is what one framework's memory
traffic does to itself: the C library's allocator is shared by the process, and
how it treats a step's large temporaries (kept for reuse, or handed back to the
kernel and faulted in again) depends on everything allocated before. Here each
contestant runs in a process of its own, one after another, round by round: the
median step time over ``--steps`` steps (after three), the minor page faults and
the kernel time per step; each figure is the median over ``--rounds`` processes,
each ratio is to the first column's (PyTorch's, where it is installed). PyTorch and
"leanpass, malloc as it was" run with ``LEANPASS_KEEP_MEMORY=0`` (docs/devices.md:
memory on the CPU), so that PyTorch's process keeps glibc's ``malloc`` as it is,
even where the step's set-up touches LeanPass's ``cpu`` device. Every process imports
PyTorch where it is installed, for the weights both frameworks start from.

W5c is ``run.py``'s CNN training step (batch 64), W6 its transformer block
(forward and backward, batch 16, sequence 128, width 128); one BLAS thread.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTESTANTS = {  # name: (framework in run.py's terms, extra environment)
    "pytorch": ("pytorch", {"LEANPASS_KEEP_MEMORY": "0"}),
    "leanpass": ("leanpass", {}),
    "leanpass compiled": ("leanpass compiled", {}),
    "leanpass, malloc as it was": ("leanpass", {"LEANPASS_KEEP_MEMORY": "0"}),
}


def child(workload: str, dtype: str, framework: str, steps: int) -> dict:
    """One contestant's figures, in this process."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    import run
    from steps import model_steps
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if workload == "W6":
        step = run.block_step(dtype, framework)[0]
    else:  # W5c
        step = model_steps("cnn", 64, dtype=dtype, width=32, compiled=framework == "leanpass compiled",
                           frameworks=[framework])[framework]
    for _ in range(3):
        step()
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"ms": float(np.median(times)) * 1e3, "faults": (after.ru_minflt - before.ru_minflt) / steps,
            "sys_ms": (after.ru_stime - before.ru_stime) / steps * 1e3}


def measure(workload, dtype, name, steps) -> dict:
    framework, extra = CONTESTANTS[name]
    env = {**os.environ, **extra, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    if not extra:
        env.pop("LEANPASS_KEEP_MEMORY", None)
    done = subprocess.run([sys.executable, __file__, "--child", workload, dtype, framework, str(steps)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=["W5c", "W6"], choices=["W5c", "W6"])
    p.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per contestant")
    p.add_argument("--steps", type=int, default=15, help="timed steps per process")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        workload, dtype, framework, steps = args.child
        print(json.dumps(child(workload, dtype, framework, int(steps))))
        return
    try:
        import torch  # noqa: F401
        names = list(CONTESTANTS)
    except ImportError:
        names = [n for n in CONTESTANTS if n != "pytorch"]
    for workload in args.only:
        print(f"## {workload}, each contestant alone in a fresh process, one BLAS thread: ms per step "
              f"(median of {args.steps} steps, then of {args.rounds} processes), minor page faults and kernel ms "
              "per step")
        print(f"| dtype | {' | '.join(f'{n} ms (ratio)' for n in names)} | "
              f"faults, kernel ms per step ({' / '.join(names)}) |")
        print("|" + "---|" * (len(names) + 2))
        for dtype in args.dtypes:
            figures = {n: [] for n in names}
            for _ in range(args.rounds):
                for name in names:
                    figures[name].append(measure(workload, dtype, name, args.steps))
            ms = {n: statistics.median(f["ms"] for f in figures[n]) for n in names}
            base = ms[names[0]]
            faults = " / ".join(f"{statistics.median(f['faults'] for f in figures[n]):.0f}, "
                                f"{statistics.median(f['sys_ms'] for f in figures[n]):.1f}" for n in names)
            print(f"| {dtype} | " + " | ".join(f"{ms[n]:.1f} ({ms[n] / base:.2f}x)" for n in names)
                  + f" | {faults} |", flush=True)
        print()


if __name__ == "__main__":
    main()
