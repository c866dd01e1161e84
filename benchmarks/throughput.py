"""Training throughput on synthetic data, on any device: a wide MLP, a CNN or a transformer.

    python benchmarks/throughput.py --device cuda                  # LeanPass, PyTorch, CuPy by hand
    python benchmarks/throughput.py --device cpu --width 1024 --steps 10
    python benchmarks/throughput.py --device cuda --only leanpass --dtype float64
    python benchmarks/throughput.py --device cuda --model cnn      # LeanPass and PyTorch
    python benchmarks/throughput.py --device cuda --model transformer --width 256 --depth 4
    python benchmarks/throughput.py --device cuda --sizes 784 256 128 10 --batch-size 64 --compile

One step is forward, cross-entropy, backward and an SGD update of:
- ``--model mlp`` (default): an MLP with ``--depth`` hidden layers of ``--width``
  units (default 4 x 4096, batch 1024; ``--depth 0`` is one Linear layer), or of the
  layer sizes ``--sizes`` (inputs first, classes last), against the same step
  written by hand with the device's array library too;
- ``--model cnn``: ``benchmarks/models.py``'s CNN (3x3 convolutions of ``--width``
  and twice as many channels, BatchNorm, pooling) on 28x28 images (default width
  32, batch 256);
- ``--model transformer``: ``--depth`` causal GPT-2 blocks of ``--width`` with 4
  heads on sequences of 128, one label per position (default 2 x 128, batch 32).
Each contestant (LeanPass, with ``--compile`` LeanPass's step through
``lp.compile`` too, PyTorch where installed, and for the MLP the step by hand)
runs ``--steps`` steps per round, with the device synchronised before the clock
stops; rounds interleave the contestants, and the table gives medians and the
ratio to LeanPass. (The compiled CNN's and transformer's steps are replayed three
times before: their first loss is the fourth step's.)

Sizes and counts must be integers >= 1 (``--depth`` and ``--warmup`` >= 0): anything
else is a usage error (exit status 2), as is a device that cannot be used here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from steps import (  # noqa: E402
    CompiledLeanPassStep,
    HandStep,
    LeanPassStep,
    TorchStep,
    available_contestants,
    model_steps,
)

from leanpass.backends import get_backend  # noqa: E402

NAMES = {"leanpass": LeanPassStep, "hand": HandStep, "torch": TorchStep}
DEFAULTS = {  # model: (width, depth, batch size)
    "mlp": (4096, 4, 1024),
    "cnn": (32, None, 256),
    "transformer": (128, 2, 32),
}


def _integer(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


positive, natural = _integer(1), _integer(0)


def measure(steps: dict, n_steps: int, rounds: int, warmup: int) -> dict:
    """Median seconds per step of each contestant, interleaved round by round."""
    for step in steps.values():
        for _ in range(warmup):
            step()
        step.sync()
    times = {name: [] for name in steps}
    order = list(steps.items())
    for r in range(rounds):
        for name, step in order[r % len(order):] + order[:r % len(order)]:
            step.sync()
            start = time.perf_counter()
            for _ in range(n_steps):
                step()
            step.sync()
            times[name].append((time.perf_counter() - start) / n_steps)
    return {name: statistics.median(t) for name, t in times.items()}


def mlp_steps(args):
    """The MLP's contestants, its FLOPs per step and its description."""
    sizes = args.sizes or [args.features] + [args.width] * args.depth + [args.classes]
    classes = [NAMES[n] for n in args.only] if args.only else available_contestants(args.device)
    if args.compile and LeanPassStep in classes:
        classes.insert(classes.index(LeanPassStep) + 1, CompiledLeanPassStep)
    steps = {}
    for cls in classes:
        try:
            steps[cls.name] = cls(sizes, args.batch_size, device=args.device, dtype=args.dtype)
        except ImportError as exc:
            print(f"({cls.name} left out: {exc})")
    flops = 6 * args.batch_size * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    return steps, flops, f"MLP {sizes}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="mlp", choices=list(DEFAULTS))
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--width", type=positive, default=None, help="units, channels or embedding width")
    p.add_argument("--depth", type=natural, default=None,
                   help="hidden layers (0: one Linear layer) or transformer blocks (>= 1); not used by the CNN")
    p.add_argument("--features", type=positive, default=1024, help="the MLP's inputs")
    p.add_argument("--classes", type=positive, default=10, help="the MLP's classes")
    p.add_argument("--sizes", type=positive, nargs="+", default=None,
                   help="the MLP's layer sizes, inputs first and classes last (in place of the three above, "
                        "--width and --depth)")
    p.add_argument("--compile", action="store_true", help="LeanPass's step through lp.compile too")
    p.add_argument("--batch-size", type=positive, default=None)
    p.add_argument("--steps", type=positive, default=20, help="steps per round")
    p.add_argument("--rounds", type=positive, default=5)
    p.add_argument("--warmup", type=natural, default=3)
    p.add_argument("--only", nargs="*", choices=list(NAMES), help="contestants (default: all available)")
    args = p.parse_args(argv)
    if args.sizes is not None and (args.model != "mlp" or len(args.sizes) < 2):
        p.error("--sizes: an MLP's sizes, at least its inputs and its classes")
    if args.model == "transformer" and args.depth == 0:
        p.error("--depth 0: a transformer needs at least one block")
    try:  # a device that cannot be used is a one-line error (exit status 2), not a traceback
        get_backend(args.device)
    except (ValueError, RuntimeError) as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")

    width, depth, batch = DEFAULTS[args.model]  # for the options not given (None), never for a 0
    args.width = width if args.width is None else args.width
    args.depth = depth if args.depth is None else args.depth
    args.batch_size = batch if args.batch_size is None else args.batch_size
    if args.model == "mlp":
        steps, flops, described = mlp_steps(args)
    else:
        if args.only and "hand" in args.only:
            p.error(f"--only hand: there is no step by hand for --model {args.model}")
        names = {"leanpass": "leanpass", "torch": "pytorch"}
        frameworks = [names[n] for n in args.only] if args.only else None
        if frameworks and args.compile and "leanpass" in frameworks:
            frameworks.append("leanpass compiled")
        steps = model_steps(args.model, args.batch_size, device=args.device, dtype=args.dtype, width=args.width,
                            depth=args.depth or 2, frameworks=frameworks, compiled=args.compile)
        flops = None
        described = (f"CNN of {args.width} and {2 * args.width} channels on 28x28 images" if args.model == "cnn"
                     else f"transformer of {args.depth} blocks x width {args.width}, sequences of 128")
    losses = {name: step.loss_value(step()) for name, step in steps.items()}
    medians = measure(steps, args.steps, args.rounds, args.warmup)
    first = medians.get("leanpass", next(iter(medians.values())))
    print(f"{described}, batch {args.batch_size}, {args.dtype} on {args.device}; "
          f"{args.rounds} rounds of {args.steps} steps, medians")
    print("| contestant | samples/s | ms/step | TFLOP/s | vs leanpass | first loss |")
    print("|---|---|---|---|---|---|")
    for name, seconds in medians.items():
        tflops = f"{flops / seconds / 1e12:.2f}" if flops else "-"
        print(f"| {name} | {args.batch_size / seconds:,.0f} | {seconds * 1e3:.2f} | {tflops} "
              f"| {first / seconds:.2f}x | {losses[name]:.5f} |")
    return medians


if __name__ == "__main__":
    main()
