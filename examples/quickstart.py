"""LeanPass in one screen: tensors, operations, backward, and a tiny model fit.

    python examples/quickstart.py                  # on the CPU
    python examples/quickstart.py --device strict  # on the array-API stand-in
    python examples/quickstart.py --device cuda    # on a CUDA GPU (needs leanpass[cuda12])

A device that cannot be used here (``--device cuda`` without CuPy or a GPU, a
misspelled one) ends the script at once with a one-line reason and exit status 2,
as a bad argument does.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import leanpass
from leanpass import Tensor, nn, optim
from leanpass.backends import get_backend


def tour(device: str) -> None:
    print(f"== A tour of LeanPass on {device}")
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True, name="x", device=device)
    w = Tensor([0.5, -1.0, 2.0], requires_grad=True, name="w", device=device)
    b = Tensor(0.25, requires_grad=True, name="b", device=device)
    y = (x * w).sum() + b
    y.backward()
    print(x)
    print("y =", y.item(), " y._op =", repr(y._op))
    print("dy/dx =", x.grad)  # a backend array: NumPy on cpu, CuPy on cuda
    print("dy/dw =", w.grad)

    a = Tensor(np.ones((3, 1)), requires_grad=True, device=device)
    c = Tensor(np.ones((1, 4)), requires_grad=True, device=device)
    (a + c).backward(np.ones((3, 4)))
    print("broadcast gradients summed back to", a.grad.shape, "and", c.grad.shape)

    z = Tensor([-2.0, -1.0, 0.0, 1.0, 2.0], device=device)
    print("relu   ", z.relu().numpy())
    print("sigmoid", np.round(z.sigmoid().numpy(), 3))


def fit_line(device: str, steps: int = 300, lr: float = 0.1) -> tuple[float, float]:
    """Fit y = 2x + 1 + noise with nn.Linear, mse_loss and SGD."""
    print(f"\n== Fitting y = 2x + 1 on {device}")
    leanpass.manual_seed(0)
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, size=(256, 1))
    ys = 2.0 * xs + 1.0 + rng.normal(0, 0.05, size=xs.shape)
    x, y = Tensor(xs, device=device), Tensor(ys, device=device)
    model = nn.Linear(1, 1, device=device)
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=0.5)
    start = time.perf_counter()
    for step in range(steps + 1):
        optimizer.zero_grad()
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step:4d}  loss {loss.item():.5f}")
    seconds = time.perf_counter() - start
    weight, bias = model.weight.item(), model.bias.item()
    print(f"learned w = {weight:.3f}, b = {bias:.3f} (true 2, 1) in {seconds * 1000:.0f} ms")
    return weight, bias


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


positive.__name__ = "integer"  # argparse names the type in its message


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu, strict, strict:1, cuda, cuda:N (default: cpu)")
    parser.add_argument("--steps", type=positive, default=300, help="SGD steps of the fit (default: 300)")
    args = parser.parse_args(argv)
    try:  # a device that cannot be used is a one-line error (exit status 2), not a traceback
        get_backend(args.device)
    except (ValueError, RuntimeError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print("LeanPass", leanpass.__version__, "| devices here:", ", ".join(leanpass.available_devices()))
    tour(args.device)
    weight, bias = fit_line(args.device, steps=args.steps)
    if abs(weight - 2.0) > 0.1 or abs(bias - 1.0) > 0.1:
        raise SystemExit("the fit did not converge")


if __name__ == "__main__":
    main()
