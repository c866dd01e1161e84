"""PyTorch's functions where a PyTorch user reaches first (SPEC Part 3): ``lp.tensor``,
``rand``/``randn``/``randint``/``randperm`` and ``t.uniform_()``/``t.normal_()`` (seeded
by ``manual_seed``), ``zeros(2, 3)``, ``cat``, ``einsum``, ``topk``, ``t.repeat``,
``t.norm``, ``allclose``, ``lp.linalg.norm``: values and gradients (float64) against
PyTorch and ``lp.gradcheck`` on every device, and bad input."""

from __future__ import annotations

import contextlib
import importlib
import math
import subprocess
import sys
import types

import numpy as np
import pytest
from helpers import close, host, other_device, torch_or_skip
from test_bad_input import raises_unchanged

import leanpass as lp
from leanpass import Tensor

RNG = np.random.default_rng(28)


@contextlib.contextmanager
def torch_float64(torch):
    """PyTorch with LeanPass's default float dtype, float64."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def leaf(array, device):
    return Tensor(np.asarray(array, dtype=np.float64), device=device, requires_grad=True)


def against_torch(fn, torch_fn, arrays, device, *, grad=True, rtol=1e-10, atol=1e-12):
    """``fn`` of leaves made from ``arrays`` on ``device`` against ``torch_fn`` of torch
    tensors of them: the values, and the gradients of ``sum(out * w)`` (a fixed ``w``)."""
    torch = torch_or_skip()
    ours_in = [leaf(a, device) for a in arrays]
    theirs_in = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    ours, theirs = fn(*ours_in), torch_fn(*theirs_in)
    assert ours.shape == tuple(theirs.shape)
    assert ours.device == lp.asarray(0, device=device).device
    close(ours, theirs, rtol=rtol, atol=atol)
    if grad:
        w = np.random.default_rng(1).normal(size=ours.shape)
        (ours * lp.asarray(w, device=device)).sum().backward()
        (theirs * torch.tensor(w)).sum().backward()
        for a, b in zip(ours_in, theirs_in):
            expected = np.zeros(a.shape) if b.grad is None else b.grad.numpy()
            close(lp.asarray(a.grad), expected, rtol=rtol, atol=atol)
    return ours


# ---- lp.tensor -------------------------------------------------------------------------------


def test_tensor_is_a_function_with_torchs_dtypes(device):
    torch = torch_or_skip()
    cases = [[1, 2], [1.5, 2], [True, False], 3, 2.5, [[1, 2], [3, 4]], [1 + 2j], np.arange(3, dtype=np.int32),
             np.ones(2, dtype=np.float32)]
    with torch_float64(torch):
        made = [(data, lp.tensor(data, device=device), torch.tensor(data)) for data in cases]
    for data, ours, theirs in made:
        assert ours.dtype == str(theirs.dtype).removeprefix("torch."), data
        assert ours.shape == tuple(theirs.shape) and ours.device == lp.asarray(0, device=device).device
        close(ours, theirs)
        assert ours.is_leaf and not ours.requires_grad
    t = lp.tensor([1.0, 2.0], device=device, requires_grad=True, dtype=lp.float32)
    assert t.requires_grad and t.dtype == lp.float32 and t.is_leaf
    assert lp.tensor([1, 2], dtype="float64").dtype == lp.float64
    lp.set_default_dtype("float32")
    try:
        assert lp.tensor([1.5]).dtype == lp.float32 and lp.tensor([1]).dtype == lp.int64
    finally:
        lp.set_default_dtype("float64")


def test_tensor_copies_and_leaves_the_graph(device):
    source = np.array([1.0, 2.0])
    t = lp.tensor(source, device=device)
    source[0] = 100.0
    assert t.tolist() == [1.0, 2.0]
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x * 2
    for made, expected in ((lp.tensor(y), [2.0, 4.0]), (lp.tensor([y[0], y[1]]), [2.0, 4.0]),
                           (lp.tensor(x, requires_grad=True), [1.0, 2.0])):
        assert made.is_leaf and made._node is None and made.tolist() == expected
    copy = lp.tensor(x)
    with lp.no_grad():
        x.mul_(3.0)
    assert copy.tolist() == [1.0, 2.0] and not copy.requires_grad


def test_tensor_refuses_requires_grad_on_integers_and_bools(device):
    for data in ([1, 2], [True]):
        with pytest.raises(ValueError, match=r"^tensor: only floating-point tensors can require gradients "
                                             r"\(real or complex ones\), got dtype (int64|bool)"):
            lp.tensor(data, device=device, requires_grad=True)
    with pytest.raises(TypeError, match="tensor: requires_grad must be a bool"):
        lp.tensor([1.0], requires_grad="yes")
    with pytest.raises(TypeError):
        lp.tensor([1.0], "float32")  # keyword-only after data, as torch.tensor


def test_the_module_leanpass_tensor_still_imports():
    """``lp.tensor`` is the function; the module stays ``leanpass.tensor`` in sys.modules,
    so every import of it works, and the function carries the module's public names."""
    import leanpass.tensor  # noqa: F401 - the statement must work
    from leanpass.tensor import Tensor as T
    from leanpass.tensor import apply, as_tensor

    module = sys.modules["leanpass.tensor"]
    assert isinstance(module, types.ModuleType) and importlib.import_module("leanpass.tensor") is module
    assert isinstance(lp.tensor, types.FunctionType) and lp.tensor.__name__ == "tensor"
    assert T is Tensor and module.apply is apply and module.as_tensor is as_tensor
    assert lp.tensor.apply is apply and lp.tensor.Tensor is Tensor and lp.tensor.as_tensor is as_tensor
    assert set(module.__all__) <= set(vars(lp.tensor))  # every public name of the module
    code = ("from leanpass.tensor import Tensor, apply\nimport leanpass.tensor\nimport leanpass as lp\n"
            "import sys\nassert callable(lp.tensor) and lp.tensor([1]).dtype == lp.int64\n"
            "assert sys.modules['leanpass.tensor'].Tensor is Tensor is lp.Tensor and lp.tensor.apply is apply\n"
            "from leanpass import tensor\nassert tensor([1.5]).dtype == lp.float64\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---- random numbers --------------------------------------------------------------------------


def test_one_seed_gives_the_same_numbers_on_every_device(device):
    other = other_device(device, prefer="cpu")
    for make in (lambda d: lp.rand(3, 4, device=d), lambda d: lp.randn((3, 4), device=d),
                 lambda d: lp.randint(-5, 5, (7,), device=d), lambda d: lp.randperm(9, device=d),
                 lambda d: lp.empty(5, device=d).uniform_(-2, 3), lambda d: lp.zeros(5, device=d).normal_(1, 2)):
        lp.manual_seed(123)
        first = make(device)
        lp.manual_seed(123)
        again = make(device)
        lp.manual_seed(123)
        elsewhere = make(other)
        assert first.device == lp.asarray(0, device=device).device
        np.testing.assert_array_equal(host(first), host(again))
        np.testing.assert_array_equal(host(first), host(elsewhere))
        assert not np.array_equal(host(make(device)), host(first)) or first.size < 2


def test_rand_equals_uniform_and_randn_normal_from_one_seed(device):
    for dtype in ("float32", "float64"):
        lp.manual_seed(7)
        a = lp.rand(4, 5, dtype=dtype, device=device)
        lp.manual_seed(7)
        b = lp.empty(4, 5, dtype=dtype, device=device).uniform_()
        lp.manual_seed(7)
        c = lp.randn(20, dtype=dtype, device=device)
        lp.manual_seed(7)
        d = lp.zeros(20, dtype=dtype, device=device).normal_()
        assert a.dtype == b.dtype == c.dtype == d.dtype == dtype
        np.testing.assert_array_equal(host(a), host(b))
        np.testing.assert_array_equal(host(c), host(d))


def test_random_shapes_dtypes_and_distributions(device):
    lp.manual_seed(0)
    for fn in (lp.rand, lp.randn):
        for args in ((2, 3), ((2, 3),), ([2, 3],), (0,), ((),)):
            t = fn(*args, device=device)
            assert t.shape == (tuple(args[0]) if isinstance(args[0], (tuple, list)) else args), args
            assert t.dtype == lp.float64 and not t.requires_grad
        t = fn(3, dtype=lp.float32, device=device, requires_grad=True)
        assert t.dtype == lp.float32 and t.requires_grad and t.is_leaf
    u = host(lp.rand(200_000, device=device))
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    u32 = host(lp.rand(200_000, dtype="float32", device=device))
    assert u32.dtype == np.float32 and u32.min() >= 0.0 and u32.max() < 1.0
    n = host(lp.randn(200_000, device=device))
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1.0) < 0.01
    z = host(lp.randn(200_000, dtype="complex128", device=device))
    assert z.dtype == np.complex128 and abs(np.mean(np.abs(z) ** 2) - 1.0) < 0.02  # torch's: E|z|^2 = 1
    assert abs(z.real.var() - 0.5) < 0.01 and abs(z.imag.var() - 0.5) < 0.01
    r = host(lp.randint(3, 7, (10_000,), device=device))
    assert r.dtype == np.int64 and set(r.tolist()) == {3, 4, 5, 6}
    assert set(host(lp.randint(4, (1000,), device=device)).tolist()) == {0, 1, 2, 3}
    assert host(lp.randint(high=2, size=(5,), device=device)).max() <= 1
    assert lp.randint(0, 10, size=(2, 2), dtype=lp.int8, device=device).dtype == lp.int8
    f = lp.randint(-3, 3, (50,), dtype="float32", device=device, requires_grad=True)
    assert f.dtype == lp.float32 and f.requires_grad and np.all(host(f) == np.round(host(f)))
    p = lp.randperm(50, device=device)
    assert p.dtype == lp.int64 and sorted(host(p).tolist()) == list(range(50))
    assert lp.randperm(0, device=device).shape == (0,) and lp.randperm(4, dtype="float64").dtype == lp.float64


def test_random_functions_match_torchs_signatures():
    torch = torch_or_skip()
    with torch_float64(torch):
        pairs = ((lp.rand(2, 3), torch.rand(2, 3)), (lp.randn((2, 3)), torch.randn((2, 3))),
                 (lp.randint(5, (2, 3)), torch.randint(5, (2, 3))),
                 (lp.randint(1, 5, (4,)), torch.randint(1, 5, (4,))),
                 (lp.randint(low=1, high=5, size=(4,)), torch.randint(low=1, high=5, size=(4,))),
                 (lp.randperm(6), torch.randperm(6)))
    for ours, theirs in pairs:
        assert ours.shape == tuple(theirs.shape) and ours.dtype == str(theirs.dtype).removeprefix("torch.")


def test_uniform_and_normal_in_place(device):
    t = lp.zeros(1000, device=device)
    assert t.uniform_(-2, 3) is t and t._version == 1
    values = host(t)
    assert values.min() >= -2 and values.max() < 3 and values.std() > 1
    assert t.normal_(5.0, 0.5) is t and t._version == 2
    assert abs(host(t).mean() - 5.0) < 0.1 and abs(host(t).std() - 0.5) < 0.05
    f32 = lp.ones(10, dtype="float32", device=device).normal_()
    assert f32.dtype == lp.float32
    assert np.all(host(lp.zeros(10, device=device).uniform_(2, 2)) == 2.0)
    # a leaf that requires grad: only under no_grad (PyTorch's rule), and then it keeps requiring grad
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    for call in (w.uniform_, w.normal_):
        with pytest.raises(RuntimeError, match=r"^(uniform_|normal_): a leaf tensor that requires grad"):
            call()
    assert w.tolist() == [1.0, 2.0] and w._version == 0
    with lp.no_grad():
        w.uniform_(10, 11)
    assert w.requires_grad and all(10 <= v < 11 for v in w.tolist()) and w._version == 1
    # a non-leaf: recorded, no gradient flows to what was overwritten (PyTorch: zeros)
    x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    h = x * 2
    h.normal_()
    (h * h).sum().backward()
    assert host(x.grad).tolist() == [0.0, 0.0, 0.0]
    # saved values changed in place: backward refuses
    y = x * 1
    z = (y * y).sum()
    y.uniform_()
    with pytest.raises(RuntimeError, match="version"):
        z.backward()


def test_uniform_and_normal_match_torchs_zero_gradient_through_the_overwrite():
    torch = torch_or_skip()
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    h.normal_()
    (h * h).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]


# ---- zeros(2, 3), ones, empty, full ----------------------------------------------------------


def test_creation_takes_torchs_size_form_and_the_standards(device):
    torch = torch_or_skip()
    for name in ("zeros", "ones", "empty"):
        ours, theirs = getattr(lp, name), getattr(torch, name)
        for args in ((2, 3), ((2, 3),), ([2, 3],), (4,), (0,), ((),), (2, 0, 1)):
            t = ours(*args, device=device)
            assert t.shape == tuple(theirs(*args).shape) and t.dtype == lp.float64, (name, args)
        assert ours(shape=(2, 3), device=device).shape == (2, 3)
        assert ours(2, 3, dtype=lp.int32, device=device).dtype == lp.int32
        t = ours(2, 3, device=device, requires_grad=True)
        assert t.requires_grad and t.is_leaf
        with pytest.raises(ValueError, match=f"^{name}: only floating-point tensors can require gradients"):
            ours(2, dtype="int64", requires_grad=True)
        with pytest.raises(TypeError, match=rf"^{name}: give the size as integers, {name}\(2, 3\), or as one tuple"):
            ours((2, 3), 4)
        with pytest.raises(ValueError, match=f"^{name}: negative dimensions are not allowed"):
            ours(2, -1)
    for value in (1.5, 2, True):
        with torch_float64(torch):
            ours, theirs = lp.full((2, 3), value, device=device), torch.full((2, 3), value)
        assert ours.dtype == str(theirs.dtype).removeprefix("torch.") and ours.shape == (2, 3)
        close(ours, theirs)
    assert lp.full([2], 0.5, requires_grad=True).requires_grad
    assert lp.zeros(2, 3).tolist() == [[0.0] * 3] * 2 and lp.ones(2, 1).tolist() == [[1.0], [1.0]]


# ---- cat -------------------------------------------------------------------------------------


def test_cat_is_concat_with_dim(device):
    torch = torch_or_skip()
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 1))
    for dim in (1, -1):
        against_torch(lambda x, y, dim=dim: lp.cat([x, y], dim=dim), lambda x, y, dim=dim: torch.cat([x, y], dim=dim),
                      [a, b], device)
    against_torch(lambda x, y: lp.cat((x, y)), lambda x, y: torch.cat((x, y)), [a, RNG.normal(size=(1, 3))], device)
    x, y = leaf(a, device), leaf(b, device)
    assert lp.gradcheck(lambda x, y: lp.cat([x, y, x], 1), (x, y))


# ---- einsum ----------------------------------------------------------------------------------

EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("i,i->", [(4,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("ij->ji", [(2, 3)]),
    ("ij", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),
    ("iii->i", [(2, 2, 2)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,ij->i", [(2, 3), (2, 3)]),
    ("ij,ji->", [(2, 3), (3, 2)]),
    ("ij,j->i", [(2, 3), (3,)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij->ij", [(5, 2, 3)]),
    ("...i,i->...", [(2, 3, 4), (4,)]),
    ("ij...,j->i...", [(2, 3, 4, 5), (3,)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("...ij,...jk", [(3, 2, 4), (4, 5)]),
    ("i...,i", [(3, 2, 4), (3,)]),
    ("b...->...b", [(2, 3, 4)]),
    ("i,i,i->", [(4,), (4,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("Ab,bc->Ac", [(2, 3), (3, 4)]),
    ("ba,Ab", [(2, 3), (4, 2)]),
    (" i j , j k -> i k ", [(2, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 1), (3, 4)]),  # a size 1 broadcasts (PyTorch)
    ("i,i->i", [(1,), (4,)]),
    ("bij,jk->bik", [(1, 2, 3), (3, 4)]),
    (",->", [(), ()]),
    ("i->", [(0,)]),
    ("ij,jk->ik", [(2, 0), (0, 3)]),
    ("ijk,kji->ij", [(2, 3, 4), (4, 3, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM, ids=[f"{e.strip()}|{s}" for e, s in EINSUM])
def test_einsum_against_torch(device, equation, shapes):
    torch = torch_or_skip()
    arrays = [RNG.normal(size=s) for s in shapes]
    against_torch(lambda *xs: lp.einsum(equation, *xs), lambda *xs: torch.einsum(equation, *xs), arrays, device)
    if all(int(np.prod(s)) for s in shapes):
        inputs = tuple(leaf(a, device) for a in arrays)
        assert lp.gradcheck(lambda *xs: lp.einsum(equation, *xs), inputs)


def test_einsum_takes_a_list_and_computes_second_derivatives(device):
    torch = torch_or_skip()
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(3, 4))
    against_torch(lambda x, y: lp.einsum("ij,jk->ik", [x, y]), lambda x, y: torch.einsum("ij,jk->ik", [x, y]),
                  [a, b], device)
    x = leaf(RNG.normal(size=(3, 3)), device)
    assert lp.gradgradcheck(lambda x: lp.einsum("ij,jk,ki->", x, x, x), (x,))
    ints = lp.asarray(np.arange(6).reshape(2, 3), device=device)
    assert lp.einsum("ij->j", ints).dtype == lp.int64 and lp.einsum("ij->j", ints).tolist() == [3, 5, 7]


# ---- topk ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (1, 0, True), (3, 1, False), (0, -1, True),
                                             (4, 2, False), (2, -2, True)])
def test_topk_against_torch(device, k, dim, largest):
    torch = torch_or_skip()
    x = RNG.permutation(24).reshape(2, 3, 4) / 7.0  # distinct values
    ours = against_torch(lambda t: lp.topk(t, k, dim=dim, largest=largest)[0],
                         lambda t: torch.topk(t, k, dim=dim, largest=largest)[0], [x], device)
    values, indices = lp.topk(Tensor(x, device=device), k, dim, largest)
    expected = torch.topk(torch.tensor(x), k, dim, largest)
    assert indices.dtype == lp.int64 and not indices.requires_grad
    assert host(indices).tolist() == expected.indices.tolist() and ours.shape == values.shape
    method = Tensor(x, device=device).topk(k, dim=dim, largest=largest, sorted=True)
    assert host(method.values).tolist() == host(values).tolist() and method.indices.tolist() == indices.tolist()
    if k:
        assert lp.gradcheck(lambda t: lp.topk(t, k, dim, largest).values, (leaf(x, device),))


def test_topk_nans_ties_and_zero_d(device):
    torch = torch_or_skip()
    data = [1.0, math.nan, 3.0, 3.0, 2.0]
    for largest in (True, False):
        ours = lp.topk(Tensor(data, device=device), 3, largest=largest)
        theirs = torch.topk(torch.tensor(data, dtype=torch.float64), 3, largest=largest)
        np.testing.assert_array_equal(host(ours.values), theirs.values.numpy())
        assert ours.indices.tolist() == theirs.indices.tolist()
    values, indices = lp.topk(Tensor(5.0, device=device), 1)
    assert values.shape == () and indices.shape == () and values.item() == 5.0 and indices.item() == 0


# ---- t.repeat --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, sizes", [((3,), (2,)), ((2, 3), (2, 1)), ((2, 3), (1, 3, 2)), ((2,), ((2, 3),)),
                                          ((2, 3), (0, 2)), ((), (3,))])
def test_repeat_method_tiles_as_torch(device, shape, sizes):
    torch_or_skip()
    x = RNG.normal(size=shape)
    against_torch(lambda t: t.repeat(*sizes), lambda t: t.repeat(*sizes), [x], device)
    assert lp.gradcheck(lambda t: t.repeat(*sizes), (leaf(x, device),))


def test_repeat_method_is_torchs_and_the_function_the_standards(device):
    t = lp.asarray([1, 2], device=device)
    assert t.repeat(2).tolist() == [1, 2, 1, 2] and lp.repeat(t, 2).tolist() == [1, 1, 2, 2]
    with pytest.raises(TypeError, match=r"repeat: t.repeat\(\*sizes\) is PyTorch's.*lp.repeat\(t, repeats, axis"):
        t.repeat(2, axis=0)
    m = lp.ones((2, 3), device=device)
    with pytest.raises(ValueError, match=r"^repeat: 1 sizes given for a tensor of shape \(2, 3\); give at least 2"):
        m.repeat(2)


# ---- t.norm, lp.linalg.norm ------------------------------------------------------------------

NORM = [
    {}, {"p": 1}, {"p": 3}, {"p": math.inf}, {"p": -math.inf}, {"p": 0.5}, {"p": 2, "dim": 1},
    {"p": 1, "dim": (0, 2), "keepdim": True}, {"p": "fro", "dim": (1, 2)}, {"p": "fro", "dim": 0, "keepdim": True},
    {"dim": -1}, {"p": "nuc", "dim": (2, 1)}, {"p": "nuc", "dim": (0, 1), "keepdim": True},
]


@pytest.mark.parametrize("kwargs", NORM, ids=[str(k) for k in NORM])
def test_norm_method_against_torch(device, kwargs):
    torch_or_skip()
    x = RNG.normal(size=(2, 3, 4))
    against_torch(lambda t: t.norm(**kwargs), lambda t: t.norm(**kwargs), [x], device)
    assert lp.gradcheck(lambda t: t.norm(**kwargs), (leaf(x, device),))


def test_norm_method_of_a_matrix_and_positional_p(device):
    torch_or_skip()
    m = RNG.normal(size=(3, 4))
    for args in ((), (1,), ("nuc",), (2, 0), ("fro", None, True)):
        against_torch(lambda t, args=args: t.norm(*args), lambda t, args=args: t.norm(*args), [m], device)
    x = lp.ones((2, 3, 4), device=device)
    with pytest.raises(ValueError, match=r"dim must be one axis or two different axes, got \(0, 1, 2\)"):
        x.norm(p="fro", dim=(0, 1, 2))
    with pytest.raises(ValueError, match=r"^norm: p must be a number, 'fro' or 'nuc', got 'max'"):
        x.norm(p="max")


LINALG_NORM = [
    {}, {"dim": 1}, {"dim": (0, 1)}, {"dim": (1, 0), "ord": 1}, {"dim": (2, 0), "ord": "nuc"},
    {"dim": (0, 2), "ord": 2, "keepdim": True}, {"dim": (1, 2), "ord": -2}, {"dim": (2, 1), "ord": math.inf},
    {"dim": (0, 1), "ord": -math.inf}, {"dim": (0, 1), "ord": -1}, {"dim": -1, "ord": 0.5, "keepdim": True},
    {"keepdim": True}, {"dim": (-1, -2), "ord": "fro"},
]


@pytest.mark.parametrize("kwargs", LINALG_NORM, ids=[str(k) for k in LINALG_NORM])
def test_linalg_norm_against_torch(device, kwargs):
    torch = torch_or_skip()
    x = RNG.normal(size=(2, 3, 4))
    against_torch(lambda t: lp.linalg.norm(t, **kwargs), lambda t: torch.linalg.norm(t, **kwargs), [x], device,
                  rtol=1e-9)
    assert lp.gradcheck(lambda t: lp.linalg.norm(t, **kwargs), (leaf(x, device),))


@pytest.mark.parametrize("shape, ord", [((5,), None), ((5,), 1), ((5,), -math.inf), ((3, 4), None), ((3, 4), 2),
                                        ((3, 4), "nuc"), ((3, 4), -1), ((3, 4), "fro")])
def test_linalg_norm_without_dim_against_torch(device, shape, ord):
    torch = torch_or_skip()
    x = RNG.normal(size=shape)
    against_torch(lambda t: lp.linalg.norm(t, ord), lambda t: torch.linalg.norm(t, ord), [x], device, rtol=1e-9)


# ---- allclose --------------------------------------------------------------------------------


def test_allclose_as_torch(device):
    torch = torch_or_skip()
    inf, nan = math.inf, math.nan
    cases = [
        ([1.0, 2.0], [1.0, 2.0 + 1e-9], {}), ([1.0, 2.0], [1.0, 2.1], {}), ([1.0, 2.0], [1.0, 2.1], {"atol": 0.2}),
        ([100.0], [101.0], {"rtol": 0.01}), ([100.0], [101.0], {"rtol": 0.009}), ([inf, 1.0], [inf, 1.0], {}),
        ([inf], [-inf], {}), ([1.0], [inf], {}), ([inf], [1.0], {}), ([nan], [nan], {}),
        ([nan], [nan], {"equal_nan": True}), ([nan, 1.0], [nan, 2.0], {"equal_nan": True}),
        ([[1.0, 2.0], [1.0, 2.0]], [1.0, 2.0], {}), ([], [], {}), (0.0, [1e-9], {}),
    ]
    for a, b, kwargs in cases:
        ours = lp.allclose(Tensor(a, device=device), Tensor(b, device=device), **kwargs)
        theirs = torch.allclose(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64),
                                **kwargs)
        assert type(ours) is bool and ours == theirs, (a, b, kwargs)
    ints = lp.asarray([1, 2], device=device)
    assert lp.allclose(ints, lp.asarray([1, 2], device=device)) and not lp.allclose(ints, ints + 1)
    assert lp.allclose(Tensor([1.0, 2.0], device=device), [1.0, 2.0])  # host data beside a tensor
    assert lp.allclose(Tensor([1.0], dtype="float32", device=device), Tensor([1.0], device=device))


# ---- bad input -------------------------------------------------------------------------------


def test_bad_input_names_the_function_argument_and_shapes(device):
    a = Tensor(RNG.normal(size=(2, 3)), device=device, requires_grad=True)
    b = Tensor(RNG.normal(size=(4, 5)), device=device, requires_grad=True)
    c = Tensor(RNG.normal(size=(3,)), device=other_device(device))
    cases = [
        (ValueError, lambda: lp.einsum("ij,jk->ik", a, b), "einsum", "label 'j'", "(2, 3)", "(4, 5)"),
        (ValueError, lambda: lp.einsum("ij,jk->ik", a), "einsum", "2 operand terms", "1 operand was"),
        (ValueError, lambda: lp.einsum("ijk->i", a), "einsum", "names 3 axes", "(2, 3)"),
        (ValueError, lambda: lp.einsum("i1->i", a), "einsum", "'1'"),
        (ValueError, lambda: lp.einsum("ij->k", a), "einsum", "'k'", "no operand term"),
        (ValueError, lambda: lp.einsum("ij->ii", a), "einsum", "'i' more than once"),
        (ValueError, lambda: lp.einsum("ii->i", a), "einsum", "different sizes", "(2, 3)"),
        (ValueError, lambda: lp.einsum("i...j...->i", a), "einsum", "more than one ellipsis"),
        (ValueError, lambda: lp.einsum("ij->i->j", a), "einsum", "more than one '->'"),
        (TypeError, lambda: lp.einsum(a, [0, 1]), "einsum", "equation comes first"),
        (ValueError, lambda: lp.einsum("ij,j->i", a, c), "einsum", a.device, c.device),
        (ValueError, lambda: lp.topk(a, 4), "topk", "k=4", "size 3", "(2, 3)"),
        (IndexError, lambda: lp.topk(a, 1, dim=2), "topk", "axis 2"),
        (TypeError, lambda: lp.topk(a, 1.5), "topk", "k must be an integer"),
        (TypeError, lambda: lp.topk([1.0], 1), "topk", "expected a Tensor"),
        (ValueError, lambda: lp.cat([a, b], dim=0), "concat", "(2, 3)", "(4, 5)"),
        (IndexError, lambda: lp.cat([a, a], dim=2), "concat", "axis 2"),
        (ValueError, lambda: lp.allclose(a, b), "allclose", "(2, 3)", "(4, 5)"),
        (ValueError, lambda: lp.allclose(a, c), "allclose", a.device, c.device),
        (TypeError, lambda: lp.allclose(1.0, 1.0), "allclose", "expected a Tensor"),
        (ValueError, lambda: lp.linalg.norm(lp.ones((2, 3, 4), device=device), ord=2), "linalg.norm", "(2, 3, 4)",
         "give dim"),
        (ValueError, lambda: lp.linalg.norm(a, ord="fro", dim=1), "linalg.norm", "'fro'", "(2, 3)"),
        (ValueError, lambda: lp.linalg.norm(a, dim=(0, 0)), "linalg.norm", "two different axes", "(2, 3)"),
        (ValueError, lambda: lp.linalg.norm(a, ord=3, dim=(0, 1)), "matrix_norm", "ord"),
        (IndexError, lambda: lp.linalg.norm(a, dim=2), "linalg.norm", "axis 2"),
        (ValueError, lambda: a.repeat(2), "repeat", "(2, 3)", "at least 2"),
        (ValueError, lambda: a.norm(p="fro", dim=(0, 1, 1)), "linalg.norm", "(2, 3)"),
        (ValueError, lambda: lp.randint(5, 5, (2,)), "randint", "low=5", "high=5"),
        (TypeError, lambda: lp.randint(0, 5, 3), "randint", "size must be a tuple"),
        (TypeError, lambda: lp.randint(5), "randint", "give the size"),
        (ValueError, lambda: lp.randint(0, 300, (2,), dtype="int8"), "randint", "int8"),
        (TypeError, lambda: lp.randint(0, 5, (2,), dtype="bool"), "randint", "bool"),
        (ValueError, lambda: lp.randint(0, 5, (2,), requires_grad=True), "randint", "floating-point"),
        (ValueError, lambda: lp.randperm(-1), "randperm", "-1"),
        (TypeError, lambda: lp.randperm(2.5), "randperm", "2.5"),
        (TypeError, lambda: lp.rand(2, dtype="int64"), "rand", "int64"),
        (TypeError, lambda: lp.randn(), "randn", "give the size"),
        (ValueError, lambda: lp.rand(2, -3), "rand", "negative", "(2, -3)"),
        (TypeError, lambda: lp.randn((2, 3), 4), "randn", "as one tuple"),
        (ValueError, lambda: lp.zeros(2, 3, dtype="int32", requires_grad=True), "zeros", "int32"),
        (ValueError, lambda: a.detach().uniform_(2, 1), "uniform_", "a <= b", "a=2.0"),
        (ValueError, lambda: a.detach().normal_(0, -1), "normal_", "std >= 0", "-1"),
        (TypeError, lambda: lp.asarray([1, 2], device=device).uniform_(), "uniform_", "int64"),
        (RuntimeError, lambda: a.uniform_(), "uniform_", "leaf tensor that requires grad"),
        (RuntimeError, lambda: b.normal_(), "normal_", "leaf tensor that requires grad"),
        (ValueError, lambda: lp.tensor([1, 2], requires_grad=True), "tensor", "int64"),
    ]
    for exc_type, call, *parts in cases:
        message = raises_unchanged(exc_type, call, [a, b, c], *parts)
        assert message.startswith(parts[0]), message


def test_linear_with_a_one_dimensional_weight_is_torchs():
    """``F.linear(x, w)`` with ``w`` of shape ``(in_features,)``: ``x @ w``, its
    gradients too, as PyTorch's (it raised ValueError); with a bias, ValueError (PyTorch
    raises too)."""
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(3, 4)), rng.normal(size=4)
    ours = [Tensor(v, requires_grad=True) for v in (x, w)]
    theirs = [torch.tensor(v, requires_grad=True) for v in (x, w)]
    y, ty = lp.nn.functional.linear(*ours), torch.nn.functional.linear(*theirs)
    assert y.shape == tuple(ty.shape) == (3,)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12)
    y.sum().backward()
    ty.sum().backward()
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, t.grad.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="linear: a weight of shape"):
        lp.nn.functional.linear(*ours, Tensor(np.array(0.5)))
