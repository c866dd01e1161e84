"""A result changed in place after it was used (``m = lp.maximum(x, 0); m *= 2``):
wherever PyTorch's backward survives that change -- its rule saved the inputs, not the
output -- LeanPass's does too and gives PyTorch's gradient; where PyTorch raises,
LeanPass may raise (it must not return a gradient computed from the changed output).

A differential test over every differentiable element-wise function of the table
(leanpass.ops.elementwise) that PyTorch has under the same name, and the other
functions a client's post-processing meets (clip, where, relu, abs...)."""

from __future__ import annotations

import numpy as np
import pytest

import leanpass as lp
from leanpass.ops import elementwise as table

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
DOMAIN = {"acosh": (1.2, 2.0), "acos": (-0.8, 0.8), "asin": (-0.8, 0.8), "atanh": (-0.8, 0.8)}
# The same function in PyTorch under another name
TORCH_NAMES = {"pow": "pow", "divide": "div", "multiply": "mul", "subtract": "sub"}


def _values(name, n=6):
    low, high = DOMAIN.get(name, (0.3, 1.7))
    values = RNG.uniform(low, high, size=n)
    return values


def _run(fn, tensors, make, scale):
    """``fn(*tensors)`` changed in place by ``scale``, then backward: the gradients, or the
    error backward raised."""
    out = fn(*tensors)
    scale(out)
    try:
        out.sum().backward()
    except RuntimeError as exc:
        return exc
    return [np.asarray(make(t)) for t in tensors]


def _compare(name, lp_fn, torch_fn, arity):
    arrays = [_values(name) for _ in range(arity)]
    if name in ("maximum", "minimum") and arity == 2:  # ties and a NaN: the rule's corners
        arrays[1][0] = arrays[0][0]
        arrays[0][1] = np.nan
    ours = [lp.Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]

    def scale_lp(t):
        t *= 2.0

    def scale_torch(t):
        t.mul_(2.0)

    expected = _run(torch_fn, theirs, lambda t: t.grad.numpy(), scale_torch)
    got = _run(lp_fn, ours, lambda t: t.grad, scale_lp)
    if isinstance(expected, Exception):
        return "torch raises"
    assert not isinstance(got, Exception), f"{name}: torch survives the change of its output, LeanPass raised {got}"
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15, err_msg=f"{name}: input {i}")
    return "same gradient"


def _table_cases():
    cases = []
    for entries, arity in ((table.UNARY, 1), (table.BINARY, 2)):
        for name, entry in sorted(entries.items()):
            if not entry.op.differentiable:
                continue
            torch_fn = getattr(torch, TORCH_NAMES.get(name, name), None)
            if torch_fn is None or name in ("real", "imag", "conj", "nextafter", "positive"):  # torch's positive
                # returns its input itself
                continue
            cases.append(pytest.param(name, getattr(lp, name), torch_fn, arity, id=name))
    return cases


TABLE = _table_cases()


@pytest.mark.parametrize(("name", "lp_fn", "torch_fn", "arity"), TABLE)
def test_table_function_whose_output_is_changed_in_place(name, lp_fn, torch_fn, arity):
    _compare(name, lp_fn, torch_fn, arity)


OTHERS = {
    "clip": (lambda x: lp.clip(x, 0.5, 1.5), lambda x: torch.clamp(x, 0.5, 1.5), 1),
    "clip_tensor_bounds": (lambda x, lo: lp.clip(x, lo, 1.5),
                           lambda x, lo: torch.clamp(x, lo, torch.full_like(x, 1.5)), 2),
    "where": (lambda a, b: lp.where(a > 1.0, a, b), lambda a, b: torch.where(a > 1.0, a, b), 2),
    "relu": (lambda x: x.relu(), lambda x: torch.relu(x), 1),
    "abs": (lambda x: lp.abs(x - 1.0), lambda x: torch.abs(x - 1.0), 1),
    "maximum_scalar": (lambda x: lp.maximum(x, 1.0), lambda x: torch.clamp_min(x, 1.0), 1),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: torch.nn.functional.leaky_relu(x, 0.1), 1),
    "sum": (lambda x: lp.sum(x * 1.0, keepdims=True), lambda x: torch.sum(x * 1.0, dim=0, keepdim=True), 1),
    "matmul": (lambda a, b: lp.reshape(a, (2, 3)) @ lp.reshape(b, (3, 2)),
               lambda a, b: a.reshape(2, 3) @ b.reshape(3, 2), 2),
}


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_function_whose_output_is_changed_in_place(name):
    lp_fn, torch_fn, arity = OTHERS[name]
    _compare(name, lp_fn, torch_fn, arity)


def test_the_issues_example_and_rbf_kernel_style_post_processing():
    """``m = lp.maximum(x, 0); m *= 2`` raised in backward (maximum saved its output);
    scikit-learn's rbf_kernel clips, scales and exponentiates its distances in place."""
    x = lp.Tensor([-1.0, 2.0, 0.0], requires_grad=True)
    m = lp.maximum(x, 0.0)
    m *= 2
    m.sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 2.0, 1.0])  # 1/2 each at the tie, as torch

    a = lp.Tensor(RNG.normal(size=(4, 3)), requires_grad=True)
    d = lp.sum((a[:, None, :] - a[None, :, :]) ** 2, axis=-1)
    d = lp.maximum(d, 0.0)
    d *= -0.5
    k = lp.exp(d)
    k.sum().backward()
    ta = torch.tensor(a.numpy(), requires_grad=True)
    td = ((ta[:, None, :] - ta[None, :, :]) ** 2).sum(-1).clamp_min(0.0)
    td.mul_(-0.5)
    td.exp().sum().backward()
    np.testing.assert_allclose(a.grad, ta.grad.numpy(), rtol=1e-12)
