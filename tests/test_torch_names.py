"""PyTorch's everyday names on Tensors and layers (``dim=``/``keepdim=``, ``view``,
``masked_fill``, the in-place ``_`` methods), compared with PyTorch where it is
installed, on every device."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import close, torch_or_skip

import leanpass as lp
from leanpass import Tensor, nn

A = np.array([[1.0, 5.0, -2.0], [3.0, 2.0, 0.5]])


@pytest.mark.parametrize("name, kwargs", [
    ("sum", {"dim": 1}), ("sum", {"dim": 0, "keepdim": True}), ("mean", {"dim": 1, "keepdim": True}),
    ("prod", {"dim": 0}), ("argmax", {"dim": 1}), ("argmin", {"dim": 0, "keepdim": True}),
    ("cumsum", {"dim": 1}), ("softmax", {"dim": 0}), ("log_softmax", {"dim": 1}), ("argsort", {"dim": 1}),
    ("std", {"dim": 1}), ("var", {"dim": 0, "keepdim": True}),
])
def test_dim_and_keepdim_as_pytorch(device, name, kwargs):
    torch = torch_or_skip()
    ours = getattr(Tensor(A, device=device), name)(**kwargs)
    theirs = getattr(torch.tensor(A), name)(**kwargs)
    if name in ("std", "var"):  # the standard's correction=0 against PyTorch's unbiased default
        theirs = getattr(torch.tensor(A), name)(**kwargs, correction=0)
    assert ours.shape == tuple(theirs.shape)
    close(ours, theirs)


def test_max_and_min_where_pytorch_gives_values_and_indices_raise(device):
    """t.max(1) / t.max(dim=1) in PyTorch give (values, indices), and t.max(other) the
    element-wise maximum; LeanPass's t.max(axis=1) gives values only (NumPy's), so
    the PyTorch forms raise rather than unpack rows silently (``t.max(1)[1]``)."""
    t = Tensor(A, device=device)
    for call in (lambda: t.max(dim=1), lambda: t.min(dim=0)):
        with pytest.raises(TypeError, match="values only"):
            call()
    for call in (lambda: t.max(1), lambda: t.min(0, True), lambda: t.max(lp.asarray(0, device=device))):
        with pytest.raises(TypeError, match=r"(max|min): give the axis by name.*\(values, indices\)"):
            call()
    with pytest.raises(TypeError, match="sum: give axis or dim"):
        t.sum(0, dim=1)
    assert t.max(axis=1).tolist() == [5.0, 3.0] and t.min(axis=0, keepdims=True).shape == (1, 3)


def test_softmax_functions_and_layer_take_dim(device):
    t = Tensor(A, device=device)
    for out in (nn.functional.softmax(t, dim=0), nn.Softmax(dim=0)(t)):
        close(out, t.softmax(0))
    close(nn.functional.log_softmax(t, dim=0), t.log_softmax(0))


def test_view_dim_pow_masked_fill(device):
    torch = torch_or_skip()
    x = Tensor(A, device=device, requires_grad=True)
    tx = torch.tensor(A, requires_grad=True)
    ours = (x * 1).view(3, 2).pow(2).view(-1).masked_fill(lp.asarray(np.arange(6) % 2 == 0, device=device), -1.0)
    theirs = (tx * 1).view(3, 2).pow(2).view(-1).masked_fill(torch.arange(6) % 2 == 0, -1.0)
    close(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    close(x.grad, tx.grad)
    assert x.dim() == 2 and x.T.view(6).shape == (6,)  # a transposed tensor: view copies, as reshape


def test_in_place_underscore_methods(device):
    """zero_/fill_/copy_/add_/sub_/mul_/div_ change the tensor itself and return it;
    on a leaf that requires grad they need no_grad (RuntimeError otherwise, nothing changed)."""
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with lp.no_grad():
        assert w.add_(Tensor([1.0, 1.0], device=device), alpha=2) is w and w.tolist() == [3.0, 4.0]
        assert w.sub_(1.0).tolist() == [2.0, 3.0] and w.mul_(3).tolist() == [6.0, 9.0]
        assert w.div_(2).tolist() == [3.0, 4.5] and w.zero_().tolist() == [0.0, 0.0]
        assert w.fill_(5).tolist() == [5.0, 5.0] and w.copy_(Tensor([7.0, 8.0], device=device)).tolist() == [7.0, 8.0]
    assert w.requires_grad and w._version == 7
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.zero_()
    assert w.tolist() == [7.0, 8.0]
    # a non-leaf: recorded, the gradient flows as for t[...] = v
    v = Tensor([2.0, 3.0], device=device, requires_grad=True)
    h = w * 1
    h.copy_(v * 2)
    h.sum().backward()
    assert lp.asarray(v.grad).numpy().tolist() == [2.0, 2.0]


def test_functional_cross_entropy_takes_pytorchs_class_axis(device):
    """F.cross_entropy classes along axis 1 of (N, C, L) logits, as PyTorch's (with
    probabilities or class indices); nn.cross_entropy_loss keeps the last axis."""
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    logits, probs = rng.normal(size=(2, 3, 4)), rng.dirichlet(np.ones(3), size=(2, 4)).transpose(0, 2, 1)
    labels = rng.integers(0, 3, size=(2, 4))
    x = Tensor(logits, device=device)
    tx = torch.tensor(logits)
    close(nn.functional.cross_entropy(x, Tensor(probs, device=device)),
          torch.nn.functional.cross_entropy(tx, torch.tensor(probs)))
    close(nn.functional.cross_entropy(x, lp.asarray(labels, device=device)),
          torch.nn.functional.cross_entropy(tx, torch.tensor(labels)))
    close(nn.cross_entropy_loss(x, Tensor(probs, device=device), axis=1),
          torch.nn.functional.cross_entropy(tx, torch.tensor(probs)))


def test_masked_fill_keeps_the_dtype_and_axis_dim_conflicts(device):
    """masked_fill in the tensor's dtype (PyTorch's: 2.5 into int64 is 2, a float64 0-d
    value into float32 is float32); an axis given both positionally and as dim= raises."""
    mask = lp.asarray([True, False], device=device)
    f = Tensor([1.0, 2.0], dtype="float32", device=device)
    assert f.masked_fill(mask, lp.asarray(7.0, device=device)).dtype == lp.float32
    i = lp.asarray([1, 2], device=device)
    got = i.masked_fill(mask, 2.5)
    assert got.dtype == lp.int64 and got.tolist() == [2, 2]
    t = Tensor(A, device=device)
    for call in (lambda: t.softmax(0, dim=1), lambda: t.argsort(0, dim=1), lambda: nn.Softmax(0, dim=1)):
        with pytest.raises(TypeError, match="give axis or dim"):
            call()
    close(nn.functional.softmax(t), t.softmax(-1))


def test_softmax_of_a_zero_d_tensor(device):
    """One value: softmax 1 and log_softmax 0 along axis 0 or -1, as PyTorch."""
    x = Tensor(2.5, device=device, requires_grad=True)
    y = x.softmax(0)
    (y * 3.0 + x.log_softmax(dim=-1)).backward()
    assert y.shape == () and y.tolist() == 1.0 and float(lp.asarray(x.grad)) == 0.0
    assert nn.functional.log_softmax(x).tolist() == 0.0
    with pytest.raises(IndexError, match="softmax: axis 1 is out of range for a tensor of 0 dimensions"):
        x.softmax(1)


def test_in_place_methods_name_themselves_in_errors(device):
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    calls = (("zero_", w.zero_), ("fill_", lambda: w.fill_(3.0)), ("copy_", lambda: w.copy_(lp.ones(2, device=device))))
    for name, call in calls:
        with pytest.raises(RuntimeError, match=f"^{name}: a leaf tensor that requires grad"):
            call()
    with pytest.raises(ValueError, match=r"^copy_: a value of shape \(3,\) does not broadcast"):
        w.detach().copy_(lp.ones(3, device=device))
    assert w.tolist() == [1.0, 2.0]


# ---- in-place variants of the element-wise methods (t.exp_(), t.clamp_(lo, hi)...) ----------------

X = np.array([[0.3, 0.7, 0.2], [0.9, 0.45, 0.6]])  # inside every function's domain (acosh: below)
IN_PLACE = {  # name -> (arguments, input)
    **{n: ((), X) for n in ("abs", "acos", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "exp", "expm1",
                           "floor", "log", "log10", "log1p", "log2", "reciprocal", "relu", "round", "sigmoid",
                           "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "neg")},
    "acosh": ((), X + 1.0), "clamp": ((0.4, 0.65), X), "clip": ((0.4, 0.65), X), "pow": ((3,), X),
    "addcmul": ((X * 2, X - 1.0), X), "addcdiv": ((X * 2, X + 1.0), X), "lerp": ((X * 3, 0.25), X),
    "masked_fill": ((X > 0.5, -1.0), X),
}


def _ours_and_theirs(torch, args, device):
    ours = [Tensor(a, device=device) if isinstance(a, np.ndarray) and a.dtype != bool else
            lp.asarray(a, device=device) if isinstance(a, np.ndarray) else a for a in args]
    return ours, [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_in_place_variants_of_element_wise_methods_match_torch(device, name):
    """Values, the tensor itself returned, and the gradient through a change of a value
    inside a graph (``y = x * 1; y.exp_()``), as PyTorch's."""
    torch = torch_or_skip()
    args, data = IN_PLACE[name]
    ours_args, theirs_args = _ours_and_theirs(torch, args, device)
    t = Tensor(data, device=device)
    assert getattr(t, f"{name}_")(*ours_args) is t
    expected = getattr(torch.tensor(data), f"{name}_")(*theirs_args)
    close(t, expected)
    x, tx = Tensor(data, requires_grad=True, device=device), torch.tensor(data, requires_grad=True)
    y, ty = x * 1.5, tx * 1.5
    getattr(y, f"{name}_")(*ours_args)
    ty = getattr(ty, name)(*theirs_args)  # (PyTorch has no derivative for some in-place ones: asinh_)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    close(x.grad, tx.grad)


def test_in_place_variants_refuse_what_pytorch_refuses(device):
    ints = lp.asarray(np.array([1, 4]), device=device)
    before = np.asarray(lp.asarray(ints, device="cpu").data).copy() if device == "cpu" else None
    with pytest.raises(TypeError, match="sqrt_: the result has dtype float64.*int64"):
        ints.sqrt_()
    if before is not None:
        np.testing.assert_array_equal(np.asarray(ints.data), before)  # nothing changed
    assert ints.abs_() is ints and ints.clamp_(0, 2).dtype == ints.dtype  # integer results stay
    w = Tensor(np.array([0.5, 2.0]), requires_grad=True, device=device)
    with pytest.raises(RuntimeError, match="exp_: a leaf tensor that requires grad"):
        w.exp_()
    with lp.no_grad():
        w.clamp_(0.0, 1.0)  # a parameter clipped by hand
    close(w, np.array([0.5, 1.0]))
    y = Tensor(np.array([0.5, 2.0]), requires_grad=True, device=device) * 1
    z = y * y  # saves y
    y.exp_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation|changed in place"):
        z.sum().backward()


def test_a_parameter_clamped_in_place_in_a_compiled_step(device):
    """WGAN's weight clipping: ``p.clamp_(-c, c)`` under no_grad, replayed."""
    def stepper(w):
        opt = lp.optim.SGD([w], lr=0.5)

        def step(x):
            opt.zero_grad()
            loss = (w * x).sum()
            loss.backward()
            opt.step()
            with lp.no_grad():
                w.clamp_(-0.6, 0.6)
            return loss

        return step

    w1, w2 = (nn.Parameter(Tensor(np.array([0.2, -0.4, 0.5]), device=device)) for _ in range(2))
    eager, compiled = stepper(w1), lp.compile(stepper(w2))
    for k in range(3):
        x = Tensor(np.array([1.0, -1.0, 0.5]) * (k + 1), device=device)
        eager(x)
        compiled(x)
        close(w2, np.asarray(w1.to("cpu").detach()))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("name, args", [("pow", "e"), ("clamp", "min"), ("clip", "max")])
def test_in_place_with_an_operand_that_requires_grad_as_torch(device, name, args):
    """``t.pow_(e)`` / ``t.clamp_(min=e)`` where only ``e`` requires grad: the gradient
    reaches ``e`` (the rule reads ``t`` as it was: a review found it raising)."""
    torch = torch_or_skip()
    data, other = np.array([0.3, 0.8, 1.5]), np.array([1.5, 0.5, 2.0])
    e, te = Tensor(other, requires_grad=True, device=device), torch.tensor(other, requires_grad=True)
    t, tt = Tensor(data, device=device), torch.tensor(data)
    kwargs, their_kwargs = ({}, {}) if args == "e" else ({args: e}, {args: te})
    getattr(t, f"{name}_")(*((e,) if args == "e" else ()), **kwargs)
    getattr(tt, f"{name}_")(*((te,) if args == "e" else ()), **their_kwargs)
    close(t, tt)
    (t * t).sum().backward()
    (tt * tt).sum().backward()
    close(e.grad, te.grad)
