"""LeanPass in one screen: tensors, operations, backward, and a tiny model fit.

    python examples/quickstart.py                  # on the CPU
    python examples/quickstart.py --device strict  # on the array-API stand-in
    python examples/quickstart.py --device cuda    # on a CUDA GPU (needs leanpass[cuda12])
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import leanpass
from leanpass import Tensor, nn, optim


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu, strict, strict:1, cuda, cuda:N (default: cpu)")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    print("LeanPass", leanpass.__version__, "| devices here:", ", ".join(leanpass.available_devices()))
    tour(args.device)
    weight, bias = fit_line(args.device, steps=args.steps)
    if abs(weight - 2.0) > 0.1 or abs(bias - 1.0) > 0.1:
        raise SystemExit("the fit did not converge")


if __name__ == "__main__":
    main()
