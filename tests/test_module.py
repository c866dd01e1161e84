"""Module machinery: Parameter, buffers, walking the tree, ModuleList/ModuleDict, Flatten,
state dicts in both layouts, and nn.utils gradient clipping (against PyTorch where importable)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, nn, optim
from leanpass.backends import get_backend


def torch_or_skip():
    return pytest.importorskip("torch", reason="the comparison with PyTorch needs torch")


# ---- Parameter ---------------------------------------------------------------------------------


def test_parameter_is_a_leaf_tensor_whose_results_are_plain_tensors(device):
    source = np.array([1.0, 2.0, 3.0])
    p = nn.Parameter(source, device=device)
    assert isinstance(p, Tensor) and type(p) is nn.Parameter and p.is_leaf and p.requires_grad
    assert p.device == device and p.dtype == "float64"
    source[0] = 9.0  # the constructor copies, as Tensor's
    assert p.numpy()[0] == 1.0
    assert repr(p) == ("Parameter(shape=(3,), requires_grad=True)" if device == "cpu"
                       else f"Parameter(shape=(3,), requires_grad=True, device={device})")
    assert not hasattr(p, "__dict__")  # keeps Tensor's __slots__
    for result in (p * 2, p.sum(), p[0], p.detach(), leanpass.exp(p)):
        assert type(result) is Tensor
    (p * p).sum().backward()
    np.testing.assert_array_equal(get_backend(device).to_host(p.grad), [2.0, 4.0, 6.0])
    frozen = nn.Parameter([1, 2], requires_grad=False, device=device)
    assert not frozen.requires_grad and frozen.dtype == leanpass.get_default_dtype()
    assert nn.Parameter().shape == (0,)
    with pytest.raises(ValueError, match="floating-point"):
        nn.Parameter(np.array([1, 2]), dtype="int64")


def test_linear_and_mlp_make_parameters():
    assert all(type(p) is nn.Parameter for p in nn.MLP([2, 3, 1]).parameters())
    assert nn.Linear(2, 3).weight.name == "weight"


class Frozen(nn.Module):
    def __init__(self, device=None):
        self.frozen = nn.Parameter([1.0, 2.0], requires_grad=False, device=device)
        self.trained = Tensor([3.0], requires_grad=True, device=device)
        self.constant = Tensor([4.0], device=device)  # neither a parameter nor state
        self.layer = nn.Linear(2, 1, device=device)


def test_frozen_parameters_are_collected_and_plain_tensors_only_while_they_require_grad(device):
    m = Frozen(device)
    names = ["frozen", "trained", "layer.weight", "layer.bias"]
    assert [n for n, _ in m.named_parameters()] == names
    assert list(m.state_dict()) == names
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.layer.parameters())
    assert [n for n, _ in m.named_parameters()] == ["frozen", "layer.weight", "layer.bias"]
    assert m.requires_grad_() is m and m.frozen.requires_grad and m.layer.weight.requires_grad


def test_optimizers_and_save_load_take_parameters(device, tmp_path):
    leanpass.manual_seed(0)
    model = nn.MLP([3, 4, 2], device=device)
    before = [p.numpy().copy() for p in model.parameters()]
    opt = optim.SGD(model.parameters(), lr=0.1)
    model(Tensor(np.ones((5, 3)), device=device)).sum().backward()
    opt.step()
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))
    path = tmp_path / "m.npz"
    leanpass.save(model.state_dict(), path)
    other = nn.MLP([3, 4, 2], device=device)
    other.load_state_dict(leanpass.load(path, device=device))
    for p, q in zip(model.parameters(), other.parameters()):
        assert type(q) is nn.Parameter
        np.testing.assert_array_equal(p.numpy(), q.numpy())


# ---- buffers -----------------------------------------------------------------------------------


class WithBuffers(nn.Module):
    def __init__(self, device=None):
        self.linear = nn.Linear(2, 2, device=device)
        self.register_buffer("running", Tensor([0.0, 0.0], device=device))
        self.register_buffer("scratch", Tensor([5.0], device=device), persistent=False)
        self.register_buffer("_count", Tensor(0.0, device=device))
        self.register_buffer("empty", None)


def test_buffers_are_state_moved_by_to_and_never_parameters(device):
    m = WithBuffers("cpu")
    assert [n for n, _ in m.named_parameters()] == ["linear.weight", "linear.bias"]
    assert [n for n, _ in m.named_buffers()] == ["running", "scratch", "_count"]
    assert m.buffers()[0] is m.running
    assert list(m.state_dict()) == ["linear.weight", "linear.bias", "running", "_count"]
    outer = nn.Sequential(m)
    assert [n for n, _ in outer.named_buffers()] == ["layers.0.running", "layers.0.scratch", "layers.0._count"]
    running = m.running
    m.to(device)
    assert m.running is running and all(b.device == device for b in m.buffers())
    state = {k: np.asarray(get_backend(device).to_host(v)) for k, v in m.state_dict().items()}
    state["running"] = np.array([1.0, 2.0])
    m.load_state_dict(state)
    np.testing.assert_array_equal(m.running.numpy(), [1.0, 2.0])
    assert m.running.device == device
    del state["_count"]
    with pytest.raises(ValueError, match=r"missing keys \['_count'\]"):
        m.load_state_dict(state)
    m.running = Tensor([7.0, 7.0], device=device)  # assigning to a buffer's name keeps it a buffer
    assert m.state_dict()["running"] is m.running.data


def test_register_buffer_checks_before_changing_anything():
    m = WithBuffers()
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("linear", Tensor([1.0]))
    with pytest.raises(KeyError, match="invalid buffer name"):
        m.register_buffer("a.b", Tensor([1.0]))
    with pytest.raises(TypeError, match="must be a str"):
        m.register_buffer(3, Tensor([1.0]))
    with pytest.raises(TypeError, match="cannot use a list as buffer 'x'"):
        m.register_buffer("x", [1.0])
    assert not hasattr(m, "x") and isinstance(m.linear, nn.Linear)
    m.register_buffer("running", Tensor([3.0]))  # registering again replaces
    np.testing.assert_array_equal(m.running.numpy(), [3.0])


# ---- walking the tree, containers ----------------------------------------------------------------


class Tree(nn.Module):
    def __init__(self):
        self.blocks = nn.ModuleList([nn.Linear(2, 3), nn.ReLU()])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 1), "b": nn.Sequential(nn.Linear(3, 2), nn.Dropout())})
        self.extra = [nn.Linear(1, 1)]
        self.scale = nn.Parameter([1.0])


def test_named_modules_children_and_apply_in_pytorch_order():
    m = Tree()
    assert [n for n, _ in m.named_modules()] == [
        "", "blocks", "blocks.0", "blocks.1", "heads", "heads.a", "heads.b", "heads.b.layers.0",
        "heads.b.layers.1", "extra.0",
    ]
    assert m.modules()[0] is m and len(m.modules()) == 10
    assert [n for n, _ in m.named_children()] == ["blocks", "heads", "extra.0"]
    assert m.children() == [m.blocks, m.heads, m.extra[0]]
    assert [n for n, _ in m.named_parameters()] == [
        "blocks.0.weight", "blocks.0.bias", "heads.a.weight", "heads.a.bias", "heads.b.layers.0.weight",
        "heads.b.layers.0.bias", "extra.0.weight", "extra.0.bias", "scale",
    ]
    seen = []
    assert m.apply(lambda module: seen.append(type(module).__name__)) is m
    assert seen == ["Linear", "ReLU", "ModuleList", "Linear", "Linear", "Dropout", "Sequential", "ModuleDict",
                    "Linear", "Tree"]
    assert m.eval() is m and not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    assert "(blocks): ModuleList(\n    (0): Linear(" in repr(m) and "(heads): ModuleDict(\n    (a): Linear(" in repr(m)


def test_module_list_api():
    a, b, c = nn.Linear(1, 1), nn.ReLU(), nn.Tanh()
    ml = nn.ModuleList()
    assert ml.append(a) is ml and ml.extend([b]) is ml
    ml.insert(0, c)
    assert list(ml) == [c, a, b] and len(ml) == 3 and ml[-1] is b and ml[1] is a
    part = ml[1:]
    assert type(part) is nn.ModuleList and list(part) == [a, b]
    ml[0] = nn.Sigmoid()
    del ml[0]
    ml += [c]
    assert list(ml) == [a, b, c]
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias"]
    with pytest.raises(IndexError, match="index 3 is out of range for 3 modules"):
        ml[3]
    with pytest.raises(TypeError, match="ModuleList.extend: expected a Module, got int"):
        ml.extend([nn.ReLU(), 1])
    assert len(ml) == 3  # nothing added
    with pytest.raises(NotImplementedError):
        ml(Tensor([1.0]))


def test_module_dict_api():
    a, b = nn.Linear(1, 2), nn.ReLU()
    md = nn.ModuleDict([("a", a)])
    md["b"] = b
    assert list(md) == ["a", "b"] and "a" in md and len(md) == 2 and md["a"] is a
    assert list(md.keys()) == ["a", "b"] and list(md.values()) == [a, b] and list(md.items())[1] == ("b", b)
    md.update({"c": nn.Tanh()})
    assert md.pop("c") is not None and "c" not in md
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.raises(TypeError, match="keys must be str"):
        md[1] = b
    with pytest.raises(KeyError, match="invalid key"):
        md["x.y"] = b
    with pytest.raises(TypeError, match=r"ModuleDict\['z'\]: expected a Module"):
        md.update({"y": nn.ReLU(), "z": 3})
    assert list(md) == ["a", "b"]  # nothing added
    del md["b"]
    md.clear()
    assert len(md) == 0


def test_state_dict_keys_are_pytorchs_for_module_lists_and_dicts():
    torch = torch_or_skip()

    class Ours(nn.Module):
        def __init__(self):
            self.blocks = nn.ModuleList([nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3)])
            self.heads = nn.ModuleDict({"a": nn.Linear(3, 1)})

    class Theirs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3)])
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 1)})

    theirs = Theirs().double()
    assert list(Ours().state_dict()) == list(theirs.state_dict())
    ours = Ours()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    np.testing.assert_array_equal(ours.blocks[2].weight.numpy(), theirs.blocks[2].weight.detach().numpy())


# ---- Flatten ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("start", "end"), [(1, -1), (0, -1), (1, 2), (-2, -1), (2, 2)])
def test_flatten_as_pytorch(device, start, end):
    torch = torch_or_skip()
    x = np.arange(120.0).reshape(2, 3, 4, 5)
    out = nn.Flatten(start, end)(Tensor(x, requires_grad=True, device=device))
    want = torch.nn.Flatten(start, end)(torch.tensor(x)).numpy()
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)
    out.sum().backward()


def test_flatten_errors_and_repr():
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert nn.Flatten(0)(Tensor(np.ones((2, 3)))).shape == (6,)
    with pytest.raises(IndexError, match=r"axes 1 to -1 are out of range for an input of shape \(3,\)"):
        nn.Flatten()(Tensor(np.ones(3)))
    with pytest.raises(ValueError, match="start_dim 2 comes after end_dim 1"):
        nn.Flatten(2, 1)(Tensor(np.ones((2, 3, 4))))


# ---- the PyTorch layout ----------------------------------------------------------------------------


def test_torch_layout_loads_a_torch_sequential_into_an_mlp(device):
    torch = torch_or_skip()
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2)).double()
    ours = nn.MLP([3, 5, 2], device=device)
    weight = ours.layers[0].weight
    result = ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    assert result == ([], []) and ours.layers[0].weight is weight
    x = np.random.default_rng(0).normal(size=(7, 3))
    want = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), want, rtol=1e-12, atol=1e-12)
    ours.load_state_dict(theirs.state_dict(), layout="torch")  # torch tensors (on the CPU) as they are
    exported = ours.state_dict(layout="torch")
    assert list(exported) == list(theirs.state_dict())
    for key, value in exported.items():
        np.testing.assert_array_equal(get_backend(device).to_host(value), theirs.state_dict()[key].numpy())
    seq = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    seq.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    np.testing.assert_allclose(seq(Tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)


def test_torch_layout_checks_before_changing_anything():
    mlp = nn.MLP([3, 5, 2])
    before = [p.numpy().copy() for p in mlp.parameters()]
    state = {"0.weight": np.ones((5, 3)), "0.bias": np.ones(5), "2.weight": np.ones((5, 2)), "2.bias": np.ones(2)}
    with pytest.raises(ValueError, match=r"'2.weight' has shape \(5, 2\) in the state but \(2, 5\) in the model$"):
        mlp.load_state_dict(state, layout="torch")
    assert all(np.array_equal(b, p.numpy()) for b, p in zip(before, mlp.parameters()))
    with pytest.raises(ValueError, match="unknown layout 'pytorch'"):
        mlp.load_state_dict(state, layout="pytorch")
    with pytest.raises(ValueError, match="unknown layout"):
        mlp.state_dict(layout="numpy")
    with pytest.raises(ValueError, match=r"missing keys \['layers.0.weight'"):
        mlp.load_state_dict(state)  # a torch state dict without layout="torch"


# ---- gradient clipping ---------------------------------------------------------------------------


def _with_grads(device, torch=None):
    """Parameters with gradients (one without), and torch's copies of them."""
    rng = np.random.default_rng(1)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    values = [rng.normal(size=s) for s in shapes]
    grads = [rng.normal(size=s) * 3 for s in shapes]
    ours = [Tensor(v, requires_grad=True, device=device) for v in values]
    for p, g in zip(ours, grads):
        p.grad = g
    ours.append(Tensor([1.0], requires_grad=True, device=device))  # no gradient: skipped
    theirs = None
    if torch is not None:
        theirs = [torch.tensor(v, requires_grad=True) for v in values]
        for p, g in zip(theirs, grads):
            p.grad = torch.tensor(g)
        theirs.append(torch.tensor([1.0], dtype=torch.float64, requires_grad=True))
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_pytorch(device, norm_type, max_norm):
    torch = torch_or_skip()
    ours, theirs = _with_grads(device, torch)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type)
    want = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, Tensor) and total.shape == () and total.device == device
    np.testing.assert_allclose(total.numpy(), want.numpy(), rtol=1e-12)
    for p, q in zip(ours[:3], theirs[:3]):
        np.testing.assert_allclose(get_backend(device).to_host(p.grad), q.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert not ours[3].has_grad


def test_clip_grad_value_matches_pytorch(device):
    torch = torch_or_skip()
    ours, theirs = _with_grads(device, torch)
    assert nn.utils.clip_grad_value_(ours, 1.5) is None
    torch.nn.utils.clip_grad_value_(theirs, 1.5)
    for p, q in zip(ours[:3], theirs[:3]):
        np.testing.assert_array_equal(get_backend(device).to_host(p.grad), q.grad.numpy())
    assert not ours[3].has_grad
    with pytest.raises(ValueError, match="clip_value must be >= 0"):
        nn.utils.clip_grad_value_(ours, -1.0)


def test_clip_grad_norm_reads_nothing_back_to_the_host(device, monkeypatch):
    ours, _ = _with_grads(device)
    backend = get_backend(device)

    def host_read(*args):
        raise AssertionError("a host read")

    with monkeypatch.context() as patch:
        patch.setattr(type(backend), "to_host", host_read)
        for name in ("__bool__", "__float__", "item", "tolist", "numpy"):
            patch.setattr(Tensor, name, host_read)
        total = nn.utils.clip_grad_norm_(ours, 0.1)
        nn.utils.clip_grad_value_(ours, 0.01)
        with pytest.raises(AssertionError, match="a host read"):  # the check is live
            nn.utils.clip_grad_norm_(ours, 0.1, error_if_nonfinite=True)
    assert total.item() > 0.1


def test_clip_grad_norm_scales_by_the_formula_and_keeps_dtypes(device):
    p = Tensor(np.zeros(2, dtype=np.float32), requires_grad=True, device=device)
    q = Tensor(np.zeros(1), requires_grad=True, device=device)
    p.grad, q.grad = np.array([3.0, 0.0], dtype=np.float32), np.array([4.0])
    total = nn.utils.clip_grad_norm_(iter([p, q]), 1.0)
    assert total.dtype == "float64" and total.item() == 5.0
    assert backend_host(p).dtype == np.float32 and backend_host(q).dtype == np.float64
    scale = 1.0 / (5.0 + 1e-6)
    np.testing.assert_allclose(backend_host(q), [4.0 * scale], rtol=1e-15)
    np.testing.assert_allclose(backend_host(p), [3.0 * scale, 0.0], rtol=1e-6)
    r = Tensor([1.0], requires_grad=True, device=device)
    assert nn.utils.clip_grad_norm_(r, 1.0).item() == 0.0  # a single tensor, without a gradient
    r32 = Tensor(np.ones(1, np.float32), requires_grad=True, device=device)
    zero = nn.utils.clip_grad_norm_([r32], 1.0)  # no gradient: 0 in the parameter's dtype, on its device
    assert zero.dtype == "float32" and zero.device == r32.device and zero.item() == 0.0
    assert nn.utils.clip_grad_norm_([], 1.0).item() == 0.0
    with pytest.raises(TypeError, match="clip_grad_norm_: parameters must be Tensors, got list"):
        nn.utils.clip_grad_norm_([[p]], 1.0)


def backend_host(t):
    return get_backend(t.device).to_host(t.grad)


def test_clip_grad_norm_nonfinite(device):
    p = Tensor([1.0, 2.0], requires_grad=True, device=device)
    p.grad = np.array([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="total norm of order 2.0 of the gradients is non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(backend_host(p), [np.inf, 1.0])  # unchanged
    with np.errstate(invalid="ignore"):
        total = nn.utils.clip_grad_norm_([p], 1.0)
    assert total.item() == math.inf
    np.testing.assert_array_equal(backend_host(p), [np.nan, 0.0])  # as PyTorch: inf * 0 is nan


def test_clip_grad_norm_of_create_graph_gradients(device):
    x = Tensor([3.0, 4.0], requires_grad=True, device=device)
    (x * x).sum().backward(create_graph=True)
    assert isinstance(x.grad, Tensor)
    total = nn.utils.clip_grad_norm_([x], 1.0)
    assert total.item() == pytest.approx(10.0)
    np.testing.assert_allclose(x.grad.numpy(), [0.6, 0.8], rtol=1e-6)


def test_load_state_dict_keeps_integer_buffers_and_names_non_arrays(tmp_path):
    """An int64 buffer (BatchNorm's num_batches_tracked) stays int64 through
    load_state_dict, so a checkpoint resumed twice still loads; a list in the state
    is refused by name."""
    def make():
        return nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))

    a = make()
    a(Tensor(np.random.default_rng(0).normal(size=(4, 3))))
    b = make()
    b.load_state_dict(a.state_dict())
    tracked = b.layers[1].num_batches_tracked
    assert tracked.dtype == "int64" and int(tracked.item()) == 1
    leanpass.save(b.state_dict(), tmp_path / "ck.npz")
    c = make()
    c.load_state_dict(leanpass.load(tmp_path / "ck.npz"))
    assert c.layers[1].num_batches_tracked.dtype == "int64"
    state = a.state_dict()
    state["layers.0.bias"] = [0.0, 0.0, 0.0]
    with pytest.raises(TypeError, match=r"'layers.0.bias' is a list in the state"):
        c.load_state_dict(state)


def test_state_dict_names_a_tied_weight_under_every_name_as_pytorch():
    """parameters() lists a tied weight once; state_dict() under each name that holds
    it (PyTorch's keys), so a PyTorch checkpoint of a tied model loads, and back."""
    class Tied(nn.Module):
        def __init__(self):
            self.a = nn.Linear(3, 3, dtype="float64")
            self.b = nn.Linear(3, 3, dtype="float64")
            self.b.weight = self.a.weight
            self.shared = [self.a, self.a]  # one module at two paths

    model = Tied()
    assert len(model.parameters()) == 3
    keys = ["a.weight", "a.bias", "b.weight", "b.bias", "shared.0.weight", "shared.0.bias",
            "shared.1.weight", "shared.1.bias"]
    assert list(model.state_dict()) == keys
    assert list(model.state_dict(layout="torch")) == keys
    state = {k: np.asarray(v) + 1.0 for k, v in model.state_dict().items()}
    other = Tied()
    assert other.load_state_dict(state) == ([], [])
    np.testing.assert_array_equal(other.b.weight.numpy(), state["b.weight"])
    assert other.b.weight is other.a.weight
    # a state dict saved before every name was listed (the first name alone) still loads
    older = {k: v for k, v in state.items() if k not in ("b.weight", "shared.0.weight", "shared.0.bias",
                                                         "shared.1.weight", "shared.1.bias")}
    third = Tied()
    assert third.load_state_dict(older) == ([], [])
    np.testing.assert_array_equal(third.b.weight.numpy(), state["a.weight"])
    with pytest.raises(ValueError, match=r"missing keys \['a.bias'"):
        Tied().load_state_dict({k: v for k, v in older.items() if k != "a.bias"})


def test_a_module_that_holds_itself_is_walked_once():
    class Loop(nn.Module):
        def __init__(self):
            self.layer = nn.Linear(2, 2)
            self.me = [self]

    model = Loop()
    assert list(model.state_dict()) == ["layer.weight", "layer.bias"]
    assert len(model.parameters()) == 2


def test_sequential_slices_and_list_operations_as_pytorch():
    """seq[a:b] is a Sequential of the same modules (model[:-1](x) runs all but the
    head); append, insert, extend, assignment and del change the layers; anything not
    callable is refused before a change."""
    leanpass.manual_seed(0)
    seq = nn.Sequential(nn.Linear(2, 3, dtype="float64"), nn.ReLU(), nn.Linear(3, 1, dtype="float64"))
    x = Tensor(np.ones((4, 2)))
    body = seq[:-1]
    assert type(body) is nn.Sequential and len(body) == 2 and body[0] is seq[0]
    np.testing.assert_array_equal(body(x).numpy(), np.maximum(x.numpy() @ seq[0].weight.numpy().T
                                                              + seq[0].bias.numpy(), 0.0))
    assert seq.append(nn.Tanh()) is seq and len(seq) == 4
    seq.insert(0, nn.Identity())
    assert seq.extend([nn.ReLU()]) is seq and len(seq) == 6
    del seq[0]
    seq[3] = nn.Sigmoid()
    assert [type(m).__name__ for m in seq] == ["Linear", "ReLU", "Linear", "Sigmoid", "ReLU"]
    with pytest.raises(TypeError, match="not a module"):
        seq.extend([nn.ReLU(), 3])
    assert len(seq) == 5
    assert list(seq.state_dict(layout="torch")) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_deleting_a_buffer_frees_its_name():
    class M(nn.Module):
        def __init__(self):
            self.register_buffer("scale", Tensor([1.0]))

    m = M()
    del m.scale
    m.scale = Tensor([2.0], requires_grad=True)  # now a parameter, as in PyTorch
    assert [n for n, _ in m.named_parameters()] == ["scale"] and m.buffers() == []


# ---- PyTorch's Module API, found missing or different by review -------------------------------


def test_repr_shows_extra_repr_with_children():
    class Scaled(nn.Module):
        def __init__(self):
            self.scale = 3
            self.inner = nn.Linear(2, 1)

        def extra_repr(self):
            return "scale=3"

    assert repr(Scaled()) == "Scaled(\n  scale=3\n  (inner): Linear(in_features=2, out_features=1, bias=True)\n)"


def test_assigning_to_a_buffer_name():
    """A Parameter makes it a parameter (optimizers see it), a non-Tensor raises
    TypeError (it silently dropped the buffer), a Tensor keeps it a buffer."""
    m = nn.Module()
    m.register_buffer("s", Tensor([1.0]))
    m.s = nn.Parameter([2.0])
    assert [n for n, _ in m.named_parameters()] == ["s"] and m.named_buffers() == []
    b = nn.Module()
    b.register_buffer("s", Tensor([1.0]))
    with pytest.raises(TypeError, match="buffer 's'"):
        b.s = 5
    assert [n for n, _ in b.named_buffers()] == ["s"] and "s" in b.state_dict()
    b.s = Tensor([3.0])
    assert [n for n, _ in b.named_buffers()] == ["s"]


def test_container_pop_and_concatenation():
    a, r = nn.Linear(1, 1), nn.ReLU()
    ml = nn.ModuleList([a, r])
    assert len(ml + ml) == 4 and ml.pop() is r and list(ml) == [a]
    seq = nn.Sequential(a, r)
    both = seq + nn.Sequential(nn.Tanh())
    assert len(both) == 3 and len(seq) == 2
    seq += nn.Sequential(nn.Tanh())
    assert len(seq) == 3 and seq.pop(0) is a and len(seq) == 2
    with pytest.raises(IndexError, match="pop"):
        nn.Sequential().pop()


def test_train_mode_must_be_a_bool():
    m = nn.Linear(1, 1)
    with pytest.raises(ValueError, match="bool"):
        m.train("False")
    assert m.training


def test_add_module_register_parameter_get_submodule_cpu_numel():
    m = nn.Module()
    m.add_module("a", nn.Sequential(nn.Linear(1, 1)))
    m.register_parameter("p", nn.Parameter([1.0]))
    assert [n for n, _ in m.named_parameters()] == ["a.layers.0.weight", "a.layers.0.bias", "p"]
    assert m.get_submodule("a.layers.0") is m.a[0] and m.get_submodule("") is m
    with pytest.raises(AttributeError, match="no sub-module"):
        m.get_submodule("a.b")
    with pytest.raises(TypeError, match="Parameter"):
        m.register_parameter("q", Tensor([1.0]))
    with pytest.raises(TypeError, match="not a Module"):
        m.add_module("b", 3)
    with pytest.raises(KeyError, match="invalid name"):
        m.add_module("x.y", nn.ReLU())
    assert m.cpu() is m and Tensor([[1.0, 2.0]]).numel() == 2


def test_parameters_and_buffers_without_recursing():
    class Own(nn.Module):
        def __init__(self):
            self.w = nn.Parameter([1.0])
            self.sub = nn.Linear(1, 1)
            self.register_buffer("b", Tensor([0.0]))

    m = Own()
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["w"]
    assert m.parameters(recurse=False) == [m.w] and len(m.parameters()) == 3
    assert [n for n, _ in m.named_buffers(recurse=False)] == ["b"] and m.buffers(recurse=False) == [m.b]


def test_to_dtype_float_and_double_cast_in_place(device):
    """Module.to(dtype), float(), double() (PyTorch's): floating-point parameters,
    their gradients and buffers change dtype in place (the same Tensor objects, so the
    optimizer keeps working); integer buffers keep theirs; a non-float dtype raises."""
    model = nn.Sequential(nn.Linear(3, 2, device=device), nn.BatchNorm1d(2, device=device))
    opt = optim.Adam(model.parameters(), lr=0.1)
    data = np.random.default_rng(0).normal(size=(4, 3))
    x = Tensor(data, device=device)
    nn.mse_loss(model(x), leanpass.zeros((4, 2), device=device)).backward()
    opt.step()
    weight = model.layers[0].weight
    assert model.float() is model and model.layers[0].weight is weight
    dtypes = {k: str(v.dtype).rsplit(".", 1)[-1] for k, v in model.state_dict().items()}
    assert dtypes["layers.0.weight"] == dtypes["layers.1.running_var"] == "float32"
    assert dtypes["layers.1.num_batches_tracked"] == "int64"
    assert leanpass.asarray(weight.grad).dtype == leanpass.float32
    before = weight.numpy().copy()
    opt.zero_grad()
    x32 = Tensor(data, device=device, dtype="float32")
    nn.mse_loss(model(x32), leanpass.zeros((4, 2), device=device, dtype="float32")).backward()
    opt.step()  # the optimizer's state follows the new dtype
    assert weight.dtype == leanpass.float32 and not np.array_equal(weight.numpy(), before)
    model.double()
    assert weight.dtype == leanpass.float64
    model.to(leanpass.float32)
    assert weight.dtype == leanpass.float32 and weight.device == device
    with pytest.raises(TypeError, match="Module.to: dtype must be floating point"):
        model.to(leanpass.int32)
    assert weight.dtype == leanpass.float32


def test_to_an_unsupported_float_dtype_says_so():
    model = nn.Linear(2, 2)
    for dtype in ("float16", np.float16):
        with pytest.raises(TypeError, match="Module.to: dtype must be floating point"):
            model.to(dtype)
    with pytest.raises(RuntimeError, match="unknown device"):
        model.to("bogus")
