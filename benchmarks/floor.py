"""How much of a step the matrix products alone take: the floor under a step time.

    python benchmarks/floor.py            # W1 (float32, float64) and W6 (float32), one BLAS thread
    python benchmarks/floor.py --rounds 9

A step cannot be faster than its matrix products, and with one BLAS library those
cost what they cost, whoever calls them. This runs, interleaved as ``run.py`` does
(medians, rounds rotated), the products of a step alone, in NumPy, beside the step
itself:

- W1 (``run.py``'s MLP 784-256-128-10, batch 128, SGD): the step written by hand in
  NumPy (``steps.HandStep``, its weights ``(in, out)``); the same step's eight
  products with weights ``(in, out)`` (the hand step's layout); the same products
  with weights ``(out, in)``, PyTorch's layout, which ``nn.Linear`` keeps (the forward
  reads ``w.T``, a transposed view, as BLAS takes it).
- W6 (``run.py``'s transformer block, forward and backward, float32): PyTorch's step,
  and the products of its four linear layers over the 2048 positions (forward: input
  times weight; backward: the input's and the weight's gradients), in ``(out, in)``.

Each line gives milliseconds and the ratio to the first line of its table; the note
under the table says what an issue's target (a ratio to the first line) leaves for
everything that is not a product.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import BATCH, BLOCK, SIZES, interleaved, threads, torch  # noqa: E402
from steps import HandStep  # noqa: E402


def mlp_products(dtype, layout, seed=0):
    """The eight products of a W1 step (three forward, three weight gradients, two
    input gradients) on arrays of its shapes, weights laid out ``(in, out)`` or
    ``(out, in)``."""
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal((BATCH, n)).astype(dtype) for n in SIZES[:-1]]
    grads = [rng.standard_normal((BATCH, n)).astype(dtype) for n in SIZES[1:]]
    ws = [rng.standard_normal((i, o)).astype(dtype) for i, o in zip(SIZES[:-1], SIZES[1:])]
    if layout == "(out, in)":
        ws = [np.ascontiguousarray(w.T) for w in ws]  # the same values, stored the other way

    def run():  # the products as (in, out)-shaped values, whichever the layout
        out = [h @ (w if layout == "(in, out)" else w.T) for h, w in zip(ins, ws)]
        for i in range(len(ws) - 1, -1, -1):
            g = grads[i]
            out.append(ins[i].T @ g if layout == "(in, out)" else (g.T @ ins[i]).T)
            if i:
                out.append(g @ (ws[i].T if layout == "(in, out)" else ws[i]))
        return out

    return run


def block_products(dtype, seed=0):
    """The products of W6's four linear layers, forward and backward, over its
    positions, weights ``(out, in)``."""
    batch, length, width, _ = BLOCK
    rows = batch * length
    rng = np.random.default_rng(seed)
    layers = [(width, 3 * width), (width, width), (width, 4 * width), (4 * width, width)]  # (in, out)
    arrays = [(rng.standard_normal((rows, i)).astype(dtype), rng.standard_normal((o, i)).astype(dtype),
               rng.standard_normal((rows, o)).astype(dtype)) for i, o in layers]

    def run():
        for x, w, g in arrays:
            x @ w.T
            g.T @ x
            g @ w

    return run


def table(title, fns, rounds, target, what):
    medians = interleaved(fns, rounds, repeat=10)
    first = next(iter(medians.values()))
    print(f"\n## {title}\n| what | ms | ratio |\n|---|---|---|")
    for name, t in medians.items():
        print(f"| {name} | {t * 1e3:.3f} | {t / first:.2f}x |")
    print(f"\nA target of {target}x the first line is {first * target * 1e3:.3f} ms; {what}")
    return medians


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    with threads(1):
        for dtype in ("float32", "float64"):
            hand = HandStep(SIZES, BATCH, dtype=dtype)
            table(f"W1 {dtype}: the MLP step by hand, and its products alone", {
                "step by hand (NumPy)": hand,
                "its 8 products, weights (in, out)": mlp_products(dtype, "(in, out)"),
                "its 8 products, weights (out, in) (nn.Linear's)": mlp_products(dtype, "(out, in)"),
            }, args.rounds, 0.95, "compare the products' lines with it.")
        if torch is not None:
            import run

            step, _ = run.block_step("float32", "pytorch")
            table("W6 float32: PyTorch's block step, and the products of its linear layers alone", {
                "PyTorch's step": step,
                "4 linear layers' products, forward and backward": block_products("float32"),
            }, args.rounds, 0.8, "what is left of it after the products is all a step may spend on attention, "
                                 "LayerNorm, GELU and the rest.")


if __name__ == "__main__":
    main()
