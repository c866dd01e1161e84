"""Conventions at kinks and step functions, pinned to PyTorch's values (computed
with torch 2.13 by hand; PyTorch is not needed to run these). Gradcheck keeps away
from kinks, so without these a changed convention passes every other test."""

from __future__ import annotations

import numpy as np
import pytest

import leanpass as lp
from leanpass import Tensor

X = [-1.0, 0.0, 1.0]

# name -> (function of the tensor, PyTorch's gradient of its sum at X)
KINKS = {
    "relu": (lambda t: t.relu(), [0.0, 0.0, 1.0]),
    "abs": (lambda t: lp.abs(t), [-1.0, 0.0, 1.0]),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), [0.1, 0.1, 1.0]),
    "maximum with 0": (lambda t: lp.maximum(t, lp.zeros(3, device=t.device)), [0.0, 0.5, 1.0]),
    "sign": (lambda t: lp.sign(t), [0.0, 0.0, 0.0]),
    "power 1": (lambda t: t ** 1.0, [1.0, 1.0, 1.0]),
}


def test_atan2_gradient_at_the_origin_is_zero_as_pytorch(device):
    """At y = x = 0 the rule is 0/0; PyTorch gives 0 to both (an angle of a zero or
    padded vector must not send NaN to every weight). torch 2.14: [0, 0.5], [-0, -0.5]."""
    y = Tensor([0.0, 1.0], requires_grad=True, device=device)
    x = Tensor([0.0, 1.0], requires_grad=True, device=device)
    lp.atan2(y, x).sum().backward()
    np.testing.assert_array_equal(np.asarray(lp.asarray(y.grad, device="cpu").data), [0.0, 0.5])
    np.testing.assert_array_equal(np.asarray(lp.asarray(x.grad, device="cpu").data), [0.0, -0.5])


@pytest.mark.parametrize("dtype, a, b", [
    ("float32", -12345.6, -12347.1), ("float32", -1e5, -1e5), ("float32", 3e7, 3e7),
    ("float64", 1e15, 1e15), ("float64", 1e15, 1e15 - 2.0), ("float64", np.inf, 0.0), ("float64", -np.inf, 0.0),
])
def test_logaddexp_gradients_are_exact_at_any_size(device, dtype, a, b):
    """d/da logaddexp(a, b) is sigmoid(a - b), whatever the size of a and b: the rule
    exp(a - out) lost |out| * eps to the rounding of out (0.81777 for 0.81757 in
    float32 at -12345), gave derivatives summing to 2 at 3e7 and NaN at inf."""
    x = Tensor([a], requires_grad=True, device=device, dtype=dtype)
    y = Tensor([b], requires_grad=True, device=device, dtype=dtype)
    lp.logaddexp(x, y).sum().backward()
    x64, y64 = np.float64(x.numpy()[0]), np.float64(y.numpy()[0])  # the values as stored
    with np.errstate(invalid="ignore", over="ignore"):
        want = 1.0 / (1.0 + np.exp(y64 - x64))
    tol = 1e-6 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(np.asarray(lp.asarray(x.grad, device="cpu").data), [want], rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(lp.asarray(y.grad, device="cpu").data), [1.0 - want], rtol=tol, atol=tol)


@pytest.mark.parametrize("name", list(KINKS))
def test_gradient_at_kinks_is_pytorchs(device, name):
    fn, expected = KINKS[name]
    x = Tensor(X, requires_grad=True, device=device)
    fn(x).sum().backward()
    np.testing.assert_array_equal(np.asarray(lp.asarray(x.grad, device="cpu").data), expected)


def test_every_mutant_of_the_mutation_script_still_applies():
    """scripts/mutate.py makes single bugs by replacing exact text: each must still
    occur exactly once, or the script measures nothing (run it with
    ``python scripts/mutate.py``)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("mutate", root / "scripts" / "mutate.py")
    mutate = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutate", mutate)  # dataclasses look their module up there
    spec.loader.exec_module(mutate)
    assert len(mutate.MUTANTS) >= 40 and len({m.name for m in mutate.MUTANTS}) == len(mutate.MUTANTS)
    for m in mutate.MUTANTS:
        assert (root / m.file).read_text().count(m.old) == 1, f"mutant {m.name} is stale"
        assert m.old != m.new and all((root / t.split("::")[0]).exists() for t in m.tests), m.name
