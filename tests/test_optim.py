"""Optimizers: PyTorch's update rules exactly, in place on the parameter's device
and dtype, lazy state, and state dicts that resume training to the same numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import host, other_device

import leanpass
from leanpass import Tensor, nn, optim
from leanpass.backends import get_backend

W0 = np.array([[0.5, -1.5], [2.0, 0.25]])
GRADS = [
    np.array([[0.1, -0.2], [0.3, 0.05]]),
    np.array([[-0.4, 0.2], [0.0, 0.6]]),
    np.array([[0.2, 0.2], [-0.1, -0.3]]),
]


def run_steps(device, make, grads=GRADS, w0=W0, dtype="float64"):
    w = Tensor(w0, requires_grad=True, device=device, dtype=dtype)
    opt = make([w])
    data_id = id(w.data)
    for g in grads:
        opt.zero_grad()
        w.grad = g
        opt.step()
    assert id(w.data) == data_id  # updated in place
    return w, opt


# ---- reference rules, written out by hand from PyTorch's documentation ---------------


def ref_sgd(w, grads, lr, momentum=0.0, weight_decay=0.0, nesterov=False, dampening=0.0):
    w, buf = w.copy(), None
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        w = w - lr * g
    return w


def ref_adam(w, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    w, m, v = w.copy(), np.zeros_like(w), np.zeros_like(w)
    b1, b2 = betas
    for t, g in enumerate(grads, start=1):
        if decoupled:
            w = w * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
    return w


CASES = {
    "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda: ref_sgd(W0, GRADS, 0.1)),
    "sgd_momentum": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
                     lambda: ref_sgd(W0, GRADS, 0.1, momentum=0.9)),
    "sgd_nesterov_wd": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
                        lambda: ref_sgd(W0, GRADS, 0.05, 0.8, 0.01, nesterov=True)),
    "sgd_dampening": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.4, weight_decay=0.1),
                      lambda: ref_sgd(W0, GRADS, 0.1, 0.9, 0.1, dampening=0.4)),
    # PyTorch's positional order: lr, momentum, dampening, weight_decay
    "sgd_positional": (lambda p: optim.SGD(p, 0.1, 0.9, 0.5, 0.2),
                       lambda: ref_sgd(W0, GRADS, 0.1, 0.9, 0.2, dampening=0.5)),
    "adam": (lambda p: optim.Adam(p, lr=0.01), lambda: ref_adam(W0, GRADS, 0.01)),
    "adam_wd": (lambda p: optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
                lambda: ref_adam(W0, GRADS, 0.02, (0.8, 0.99), 1e-6, 0.1)),
    "adamw": (lambda p: optim.AdamW(p, lr=0.01), lambda: ref_adam(W0, GRADS, 0.01, weight_decay=0.01, decoupled=True)),
    "adamw_wd": (lambda p: optim.AdamW(p, lr=0.03, weight_decay=0.5),
                 lambda: ref_adam(W0, GRADS, 0.03, weight_decay=0.5, decoupled=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_update_rule_matches_the_written_out_rule(device, name):
    make, reference = CASES[name]
    w, _ = run_steps(device, make)
    np.testing.assert_allclose(w.numpy(), reference(), rtol=1e-13, atol=1e-15)


def test_adam_first_step_by_hand():
    """After one step Adam moves each weight by lr * sign(g) (up to eps)."""
    w, _ = run_steps("cpu", lambda p: optim.Adam(p, lr=0.1), grads=GRADS[:1])
    np.testing.assert_allclose(w.numpy(), W0 - 0.1 * np.sign(GRADS[0]), rtol=1e-6)


TORCH = {
    "sgd_momentum": lambda torch, p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda torch, p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
    "adam_wd": lambda torch, p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "adamw_wd": lambda torch, p: torch.optim.AdamW(p, lr=0.03, weight_decay=0.5),
}


@pytest.mark.parametrize("name", list(TORCH))
def test_update_rule_matches_torch_optim(device, name):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the written-out rules still run")
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=W0.shape) for _ in range(6)]
    tw = torch.tensor(W0, requires_grad=True)
    topt = TORCH[name](torch, [tw])
    for g in grads:
        topt.zero_grad()
        tw.grad = torch.tensor(g)
        topt.step()
    w, _ = run_steps(device, CASES[name][0], grads=grads)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["sgd_momentum", "adam_wd", "adamw"])
def test_float32_parameters_and_state_stay_float32(device, name):
    w, opt = run_steps(device, CASES[name][0], dtype="float32")
    f32 = get_backend(device).dtype("float32")
    assert w.dtype == f32
    for value in opt.state_dict()["state"][0].values():
        if hasattr(value, "dtype"):
            assert value.dtype == f32
    np.testing.assert_allclose(w.numpy(), CASES[name][1](), rtol=1e-5)


def test_parameters_without_gradient_are_skipped(device):
    a = Tensor([1.0], requires_grad=True, device=device)
    b = Tensor([2.0], requires_grad=True, device=device)
    opt = optim.SGD([a, b], lr=0.5, weight_decay=0.1, momentum=0.9)
    (a * 3.0).sum().backward()
    opt.step()
    assert b.numpy().tolist() == [2.0]
    assert a.numpy().tolist() == pytest.approx([1.0 - 0.5 * (3.0 + 0.1)])
    assert b._grad is None  # step allocated no gradient for b


def test_zero_grad_makes_gradients_read_as_zeros(device):
    w = Tensor([1.0, 2.0], requires_grad=True, device=device)
    opt = optim.Adam([w])
    (w * w).sum().backward()
    opt.zero_grad()
    assert get_backend(device).to_host(w.grad).tolist() == [0.0, 0.0]


def test_state_is_created_lazily_on_the_parameters_device():
    model = nn.Linear(3, 2)
    opt = optim.Adam(model.parameters(), lr=0.1)
    assert opt.state == {}
    model.to("strict:1")
    loss = (model(Tensor(np.ones((4, 3)), device="strict:1")) ** 2).mean()
    loss.backward()
    opt.step()
    state = opt.state_dict()["state"][0]
    assert state["exp_avg"].device == get_backend("strict:1").xp_device
    assert model.weight.device == "strict:1"


def test_param_groups_override_defaults():
    a = Tensor([1.0], requires_grad=True)
    b = Tensor([1.0], requires_grad=True)
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad, b.grad = [1.0], [1.0]
    opt.step()
    assert (a.item(), b.item()) == (pytest.approx(0.9), pytest.approx(0.0))


def test_bad_hyper_parameters():
    w = [Tensor([1.0], requires_grad=True)]
    for make in (lambda: optim.SGD(w, lr=-1), lambda: optim.SGD(w, nesterov=True),
                 lambda: optim.Adam(w, betas=(1.0, 0.9)), lambda: optim.AdamW(w, eps=-1.0),
                 lambda: optim.SGD([]), lambda: optim.SGD(w + w)):
        with pytest.raises(ValueError):
            make()
    with pytest.raises(TypeError):
        optim.SGD([np.ones(2)])


def _train(model, opt, x, y, steps):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("make", [lambda p: optim.Adam(p, lr=0.01, weight_decay=0.01),
                                  lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
                                  lambda p: optim.AdamW(p, lr=0.01),
                                  lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
                                  lambda p: optim.Adagrad(p, lr=0.1, initial_accumulator_value=0.2)])
def test_state_dict_round_trip_resumes_to_the_same_numbers(tmp_path, make):
    rng = np.random.default_rng(0)
    x, y = Tensor(rng.normal(size=(16, 3))), Tensor(rng.normal(size=(16, 1)))
    leanpass.manual_seed(1)
    model = nn.MLP([3, 8, 1])
    opt = make(model.parameters())
    _train(model, opt, x, y, 5)
    leanpass.save(model.state_dict(), tmp_path / "model.npz")
    leanpass.save(opt.state_dict(), tmp_path / "optim.npz")
    expected = _train(model, opt, x, y, 5)

    leanpass.manual_seed(99)  # different initial weights, overwritten by the load
    resumed = nn.MLP([3, 8, 1])
    resumed.load_state_dict(leanpass.load(tmp_path / "model.npz"))
    opt2 = make(resumed.parameters())
    opt2.load_state_dict(leanpass.load(tmp_path / "optim.npz"))
    assert _train(resumed, opt2, x, y, 5) == expected


def _stepped(cls, **options):
    """An optimizer of ``cls`` after one step of a 2-element parameter, and its state dict."""
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = cls([w], **options)
    w.grad = [1.0, 1.0]
    opt.step()
    return w, opt, opt.state_dict()


def _stepped_adam():
    """An Adam after one step, its state dict, and a copy of the parameter's state."""
    w, opt, good = _stepped(optim.Adam, lr=0.1)
    return w, opt, good, {k: (v.copy() if hasattr(v, "copy") else v) for k, v in good["state"][0].items()}


def test_optimizer_load_state_dict_checks_before_changing():
    w, opt, good, before = _stepped_adam()
    bad = {"state": {0: {"step": 1, "exp_avg": np.zeros(3), "exp_avg_sq": np.zeros(2)}},
           "param_groups": [dict(good["param_groups"][0], lr=5.0)]}
    with pytest.raises(ValueError, match=r"shape"):
        opt.load_state_dict(bad)
    assert opt.param_groups[0]["lr"] == 0.1
    np.testing.assert_array_equal(opt.state[id(w)]["exp_avg"], before["exp_avg"])
    with pytest.raises(ValueError):
        opt.load_state_dict({"state": {}})
    with pytest.raises(ValueError, match="groups"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0, 1]}]})


def test_no_host_round_trip_in_a_step():
    """A training step on `strict` moves nothing between host and device."""
    backend = get_backend("strict")
    leanpass.manual_seed(0)
    model = nn.MLP([4, 8, 3], device="strict")
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = Tensor(np.ones((5, 4)), device="strict")
    y = Tensor(np.eye(3)[[0, 1, 2, 0, 1]], device="strict")
    before = backend.host_transfers
    for _ in range(3):
        opt.zero_grad()
        nn.cross_entropy_loss(model(x), y).backward()
        opt.step()
    assert backend.host_transfers == before
    assert math.isfinite(model.parameters()[0].numpy().sum())


def test_reading_grad_does_not_make_an_unused_parameter_move(device):
    """As in PyTorch, a parameter that got no gradient is skipped, even after .grad was read."""
    used = Tensor([1.0], requires_grad=True, device=device)
    unused = Tensor([1.0, 2.0], requires_grad=True, device=device)
    opt = optim.AdamW([used, unused], lr=0.01, weight_decay=1.0)
    (used * 2.0).sum().backward()
    assert get_backend(device).to_host(unused.grad).tolist() == [0.0, 0.0]  # reading makes zeros
    opt.step()
    assert unused.numpy().tolist() == [1.0, 2.0]
    assert used.numpy().tolist() != [1.0]
    (unused * 3.0).sum().backward()  # once a gradient arrives, it moves
    opt.step()
    assert unused.numpy().tolist() != [1.0, 2.0]


def test_load_state_dict_validates_options_and_entries():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    good = opt.state_dict()
    for bad in (
        {"state": {}, "param_groups": [dict(good["param_groups"][0], betas=[0.9])]},
        {"state": {}, "param_groups": [dict(good["param_groups"][0], lr=-1.0)]},
        {"state": {"x": {}}, "param_groups": good["param_groups"]},
        {"state": {0: [1, 2]}, "param_groups": good["param_groups"]},
        {"state": {5: {}}, "param_groups": good["param_groups"]},
        {"state": {}, "param_groups": 3},
    ):
        with pytest.raises(ValueError, match="load_state_dict"):
            opt.load_state_dict(bad)
        assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["betas"] == (0.9, 0.999)


# ---- regressions: bad input is refused at the boundary, nothing changed ------------------


def test_a_bare_tensor_as_params_raises_type_error():
    """optim.SGD(w) with w a (3, 2) tensor used to iterate its rows and train nothing."""
    w = Tensor(np.ones((3, 2)), requires_grad=True)
    with pytest.raises(TypeError, match="SGD: params argument given to the optimizer should be an iterable "
                                        "of Tensors or dicts, but got Tensor"):
        optim.SGD(w, lr=0.1)
    for bad in ({w}, 3):
        with pytest.raises(TypeError, match="Adam"):
            optim.Adam(bad)


def test_a_non_leaf_parameter_raises_value_error():
    a = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor.*parameter 1"):
        optim.SGD([a, a * 2.0], lr=0.1)


def test_a_group_without_params_raises_with_a_message():
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="SGD: parameter group 1 has no 'params'"):
        optim.SGD([{"params": [w]}, {"lr": 0.1}], lr=0.1)
    with pytest.raises(TypeError, match="SGD: parameter group 1 .*Tensor"):
        optim.SGD([{"params": [w]}, Tensor([2.0], requires_grad=True)], lr=0.1)
    opt = optim.SGD([{"params": w, "lr": 0.5}])  # a group's single Tensor is a list of one (PyTorch)
    assert opt.param_groups[0]["params"] == [w]


NAN = float("nan")
BAD_OPTIONS = [
    (optim.SGD, {"lr": NAN}, ValueError, "SGD: lr must be >= 0 and finite, got nan"),
    (optim.SGD, {"lr": -0.1}, ValueError, "SGD: lr must be >= 0 and finite, got -0.1"),
    (optim.SGD, {"momentum": NAN}, ValueError, "SGD: momentum must be >= 0 and finite, got nan"),
    (optim.SGD, {"momentum": -0.5}, ValueError, "SGD: momentum must be >= 0 and finite, got -0.5"),
    (optim.SGD, {"weight_decay": NAN}, ValueError, "SGD: weight_decay must be >= 0 and finite, got nan"),
    (optim.SGD, {"lr": "0.1"}, TypeError, "SGD: lr must be a real number, got '0.1'"),
    (optim.SGD, {"lr": True}, TypeError, "SGD: lr must be a real number, got True"),
    (optim.SGD, {"momentum": None}, TypeError, "SGD: momentum must be a real number, got None"),
    (optim.Adam, {"eps": NAN}, ValueError, "Adam: eps must be >= 0 and finite, got nan"),
    (optim.Adam, {"eps": -1e-8}, ValueError, "Adam: eps must be >= 0 and finite"),
    (optim.SGD, {"weight_decay": math.inf}, ValueError, "SGD: weight_decay must be >= 0 and finite, got inf"),
    (optim.Adam, {"lr": math.inf}, ValueError, "Adam: lr must be >= 0 and finite, got inf"),
    (optim.Adam, {"weight_decay": -1.0}, ValueError, "Adam: weight_decay must be >= 0 and finite, got -1.0"),
    (optim.Adam, {"betas": (NAN, 0.9)}, ValueError, r"Adam: betas\[0\] must be in \[0, 1\), got nan"),
    (optim.Adam, {"betas": (0.9, -0.1)}, ValueError, r"Adam: betas\[1\] must be in \[0, 1\), got -0.1"),
    (optim.Adam, {"betas": ("0.9", 0.99)}, TypeError, r"Adam: betas\[0\] must be a real number"),
    (optim.Adam, {"betas": 0.9}, TypeError, "Adam: betas must be a pair"),
    (optim.Adam, {"lr": "0.1"}, TypeError, "Adam: lr must be a real number"),
    (optim.AdamW, {"lr": NAN}, ValueError, "AdamW: lr must be >= 0 and finite, got nan"),
    (optim.AdamW, {"weight_decay": NAN}, ValueError, "AdamW: weight_decay must be >= 0 and finite, got nan"),
    (optim.AdamW, {"eps": False}, TypeError, "AdamW: eps must be a real number, got False"),
]


@pytest.mark.parametrize("cls, options, exc, message", BAD_OPTIONS)
def test_nan_negative_and_non_number_hyper_parameters_are_refused(cls, options, exc, message):
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(exc, match=message):
        cls([w], **options)
    with pytest.raises(exc, match=message):  # in a parameter group too
        cls([{"params": [w], **options}])
    opt = cls([w])
    good = opt.state_dict()
    before = dict(opt.param_groups[0])
    with pytest.raises(exc, match=f"{cls.__name__}.load_state_dict: .*{message.partition(': ')[2]}"):
        opt.load_state_dict({"state": {}, "param_groups": [dict(good["param_groups"][0], **options)]})
    assert opt.param_groups[0] == before


def test_hyper_parameters_are_stored_as_python_floats():
    w = Tensor([1.0], requires_grad=True)
    opt = optim.Adam([w], lr=np.float32(0.5), betas=[0, 0.5], eps=1, weight_decay=np.float64(0.25))
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (0.5, (0.0, 0.5), 1.0, 0.25)
    assert all(type(v) is float for v in (group["lr"], *group["betas"], group["eps"], group["weight_decay"]))
    with pytest.raises(ValueError, match="SGD: nesterov momentum needs momentum > 0"):
        optim.SGD([w], lr=0.1).load_state_dict(
            {"state": {}, "param_groups": [{"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0,
                                             "nesterov": True, "params": [0]}]})


def _read_only_parameter(device):
    """A leaf whose array cannot be written: a broadcast view."""
    w = leanpass.broadcast_to(Tensor([1.0, 2.0], device=device), (3, 2)).detach().requires_grad_()
    if device.startswith("cuda"):
        pytest.skip("CuPy arrays have no read-only flag")
    return w


@pytest.mark.parametrize("make", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.1)])
def test_step_is_all_or_nothing_when_a_parameter_is_read_only(device, make):
    a = Tensor([1.0, 2.0], requires_grad=True, device=device)
    b = _read_only_parameter(device)
    opt = make([a, b])
    a.grad, b.grad = [1.0, 1.0], np.ones((3, 2))
    with pytest.raises(ValueError, match=rf"{type(opt).__name__}.step: parameter 1 \(shape \(3, 2\)\) is read-only"):
        opt.step()
    assert a.numpy().tolist() == [1.0, 2.0] and a._version == 0
    assert opt.state_dict()["state"] == {}


def test_step_is_all_or_nothing_with_a_read_only_numpy_array():
    host = np.array([1.0, 2.0])
    host.flags.writeable = False
    a = Tensor([1.0, 2.0], requires_grad=True)
    b = leanpass.as_tensor(host).requires_grad_()
    opt = optim.Adam([a, b], lr=0.1)
    a.grad, b.grad = [1.0, 1.0], [1.0, 1.0]
    with pytest.raises(ValueError, match="Adam.step: parameter 1 .*read-only"):
        opt.step()
    assert a.numpy().tolist() == [1.0, 2.0]
    assert opt.state == {}


def test_step_is_all_or_nothing_when_a_gradient_mismatches_its_data(device):
    """A parameter whose data changed dtype or device after its gradient was set:
    the step refuses before touching the parameters before it."""
    backend = get_backend(device)
    a = Tensor([1.0, 2.0], requires_grad=True, device=device)
    b = Tensor([3.0, 4.0], requires_grad=True, device=device)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad, b.grad = [1.0, 1.0], [1.0, 1.0]
    opt.step()
    state = {k: (backend.copy(v) if hasattr(v, "shape") else v) for k, v in opt.state[id(a)].items()}
    b.data = Tensor([3.0, 4.0], device=device, dtype="float32").data  # its gradient stays float64
    with pytest.raises(TypeError, match=r"Adam.step: parameter 1 \(shape \(2,\)\) has dtype float32, its gradient "
                                        "float64"):
        opt.step()
    if device.startswith("strict"):
        other = other_device(device)  # another strict device
        b.data = Tensor([3.0, 4.0], device=other).data  # its gradient stays on device
        with pytest.raises(ValueError, match=rf"Adam.step: parameter 1 .* on {other}, its gradient on {device}"):
            opt.step()
    assert opt.state[id(a)]["step"] == 1
    assert backend.to_host(opt.state[id(a)]["exp_avg"]).tolist() == backend.to_host(state["exp_avg"]).tolist()
    assert a._version == 1
    c = Tensor([1, 2], device=device, dtype="int64")  # needs no gradient, but .grad can be set
    opt = optim.SGD([a, c], lr=0.1)
    a.grad, c.grad = [1.0, 1.0], [1, 1]
    values = a.numpy().tolist()
    with pytest.raises(TypeError, match=r"SGD.step: parameter 1 has dtype int64: only floating-point"):
        opt.step()
    assert a.numpy().tolist() == values and a._version == 1


def test_data_of_another_shape_raises_instead_of_broadcasting_the_gradient(device):
    """After p.data was set to an array of another shape, SGD broadcast the old-shaped
    gradient into it."""
    p = Tensor(np.ones((1, 2)), requires_grad=True, device=device)
    opt = optim.SGD([p], lr=0.1)
    p.grad = np.ones((1, 2))
    p.data = Tensor(np.ones((3, 2)), device=device).data
    with pytest.raises(ValueError, match=r"SGD.step: parameter 0 has shape \(3, 2\), its gradient \(1, 2\)"):
        opt.step()
    np.testing.assert_array_equal(p.numpy(), np.ones((3, 2)))


def test_data_of_another_shape_than_its_state_raises(device):
    p = Tensor(np.ones((1, 2)), requires_grad=True, device=device)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones((1, 2))
    opt.step()
    p.data = Tensor(np.ones((3, 2)), device=device).data
    p.grad = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"SGD.step: parameter 0 has shape \(3, 2\), its state 'momentum_buffer' "
                                         r"\(1, 2\)"):
        opt.step()
    np.testing.assert_array_equal(p.numpy(), np.ones((3, 2)))


def test_state_follows_the_parameters_dtype(device):
    """A model cast to float32 after its first step keeps training in float32."""
    w, opt = run_steps(device, CASES["adam"][0], grads=GRADS[:1])
    w.data = Tensor(w.numpy(), device=device, dtype="float32").data
    w.grad = GRADS[1]
    opt.step()
    f32 = get_backend(device).dtype("float32")
    assert w.dtype == f32 and opt.state[id(w)]["exp_avg"].dtype == f32


def test_gradient_set_after_zero_grad_counts(device):
    """opt.zero_grad(); p.grad = g; opt.step() must update p (also after .grad was read)."""
    for value in (np.array([1.0, -1.0]), [1.0, -1.0], Tensor([1.0, -1.0], device=device)):
        for read_first in (False, True):
            p = Tensor([1.0, 2.0], requires_grad=True, device=device)
            opt = optim.SGD([p], lr=0.5)
            (p * p).sum().backward()
            opt.zero_grad()
            if read_first:
                assert get_backend(device).to_host(p.grad).tolist() == [0.0, 0.0]
            p.grad = value
            opt.step()
            assert p.numpy().tolist() == [0.5, 2.5]


@pytest.mark.parametrize("bad, message", [
    ({"step": "3"}, r"'step' of parameter 0 must be an int >= 0, got '3'"),
    ({"step": -1}, r"'step' of parameter 0 must be an int >= 0, got -1"),
    ({"step": True}, r"'step' of parameter 0 must be an int >= 0, got True"),
    ({"step": 2.0}, r"'step' of parameter 0 must be an int >= 0, got 2.0"),
    ({"exp_avg": [0.0, 0.0]}, r"'exp_avg' of parameter 0 must be an array of shape \(2,\), got list"),
    ({"exp_avg_sq": np.zeros(3)}, r"'exp_avg_sq' of parameter 0 has shape \(3,\), the parameter \(2,\)"),
    ({"momentum_buffer": np.zeros(2)}, r"unknown state 'momentum_buffer' for parameter 0"),
    ({"exp_avg": None}, r"'exp_avg' of parameter 0 must be an array"),
])
def test_load_state_dict_validates_state_types(bad, message):
    """step='3' used to be accepted (and broke the next step); the optimizer is left unchanged."""
    w, opt, good, saved = _stepped_adam()
    with pytest.raises((TypeError, ValueError), match=rf"Adam.load_state_dict: {message}"):
        opt.load_state_dict({"state": {0: {**saved, **bad}}, "param_groups": good["param_groups"]})
    entry = opt.state[id(w)]
    assert entry["step"] == 1 and entry["exp_avg"] is good["state"][0]["exp_avg"]
    with pytest.raises(ValueError, match=r"Adam.load_state_dict: the state of parameter 0 lacks 'exp_avg_sq'"):
        opt.load_state_dict({"state": {0: {"step": 1, "exp_avg": np.zeros(2)}}, "param_groups": good["param_groups"]})
    opt.load_state_dict({"state": {0: {**saved, "step": np.int64(4)}}, "param_groups": good["param_groups"]})
    assert type(opt.state[id(w)]["step"]) is int and opt.state[id(w)]["step"] == 4


@pytest.mark.parametrize("name", ["sgd_momentum", "adam_wd", "adamw"])
def test_load_state_dict_casts_state_to_the_parameters_dtype_and_device(device, name):
    """float64 state saved on cpu, loaded into a float32 model on `device` (and on a
    second strict device): the state takes the parameter's dtype and device at once,
    and training goes on in float32 (a float64 buffer broke the next step on strict)."""
    make, _ = CASES[name]
    saved_w, saved_opt = run_steps("cpu", make, grads=GRADS[:2])
    for where in [device] + (["strict:1"] if device == "strict" else []):
        w = Tensor(saved_w.numpy(), requires_grad=True, device=where, dtype="float32")
        opt = make([w])
        opt.load_state_dict(saved_opt.state_dict())
        backend = get_backend(where)
        for value in opt.state_dict()["state"][0].values():
            if hasattr(value, "shape"):
                assert value.dtype == backend.dtype("float32") and type(value) is backend.array_type
                assert backend.xp_device is None or value.device == backend.xp_device
        w.grad = GRADS[2]
        opt.step()
        assert w.dtype == backend.dtype("float32")
        np.testing.assert_allclose(w.numpy(), CASES[name][1](), rtol=1e-5)


# ---- RMSprop and Adagrad ---------------------------------------------------------------------


def ref_rmsprop(w, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    w, v, m, buf = w.copy(), np.zeros_like(w), np.zeros_like(w), np.zeros_like(w)
    for g in grads:
        g = g + weight_decay * w
        v = alpha * v + (1 - alpha) * g * g
        m = alpha * m + (1 - alpha) * g
        avg = np.sqrt(v - m * m if centered else v) + eps
        buf = momentum * buf + g / avg
        w = w - lr * (buf if momentum else g / avg)
    return w


def ref_adagrad(w, grads, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    w, total = w.copy(), np.full_like(w, initial_accumulator_value)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * w
        total = total + g * g
        w = w - lr / (1 + (t - 1) * lr_decay) * g / (np.sqrt(total) + eps)
    return w


RMSPROP = [dict(centered=c, momentum=m, weight_decay=wd)
           for c in (False, True) for m in (0.0, 0.7) for wd in (0.0, 0.1)]
ADAGRAD = [{}, {"lr_decay": 0.05}, {"initial_accumulator_value": 0.3}, {"weight_decay": 0.2},
           {"lr_decay": 0.01, "initial_accumulator_value": 0.1, "weight_decay": 0.05, "eps": 1e-6}]
NEW_OPTIMIZERS = [("RMSprop", dict(options, lr=0.01, alpha=0.9)) for options in RMSPROP] + [
    ("Adagrad", dict(options, lr=0.1)) for options in ADAGRAD]


@pytest.mark.parametrize("cls, options", NEW_OPTIMIZERS, ids=lambda x: str(x))
def test_rmsprop_and_adagrad_match_the_written_out_rule(device, cls, options):
    rng = np.random.default_rng(7)
    grads = [rng.normal(size=W0.shape) for _ in range(10)]
    w, _ = run_steps(device, lambda p: getattr(optim, cls)(p, **options), grads=grads)
    reference = (ref_rmsprop if cls == "RMSprop" else ref_adagrad)(W0, grads, **options)
    np.testing.assert_allclose(w.numpy(), reference, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cls, options", NEW_OPTIMIZERS, ids=lambda x: str(x))
def test_rmsprop_and_adagrad_match_torch_after_every_step(device, cls, options):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the written-out rules still run")
    rng = np.random.default_rng(11)
    tw = torch.tensor(W0, requires_grad=True)
    topt = getattr(torch.optim, cls)([tw], **options)
    w = Tensor(W0, requires_grad=True, device=device)
    opt = getattr(optim, cls)([w], **options)
    for _ in range(25):
        g = rng.normal(size=W0.shape)
        tw.grad, w.grad = torch.tensor(g), g
        topt.step()
        opt.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-14)
    theirs = topt.state_dict()["state"][0]
    for field, value in opt.state_dict()["state"][0].items():
        expected = theirs[field].numpy()
        np.testing.assert_allclose(get_backend(device).to_host(value) if hasattr(value, "shape") else value,
                                   expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("make", [lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
                                  lambda p: optim.Adagrad(p, lr=0.1, initial_accumulator_value=0.2)])
def test_rmsprop_and_adagrad_state_stays_float32(device, make):
    w, opt = run_steps(device, make, dtype="float32")
    f32 = get_backend(device).dtype("float32")
    assert w.dtype == f32 and all(v.dtype == f32 for v in opt.state[id(w)].values() if hasattr(v, "dtype"))


@pytest.mark.parametrize("cls, options, exc, message", [
    (optim.RMSprop, {"lr": -0.1}, ValueError, "RMSprop: lr must be >= 0 and finite, got -0.1"),
    (optim.RMSprop, {"alpha": -0.5}, ValueError, "RMSprop: alpha must be >= 0 and finite, got -0.5"),
    (optim.RMSprop, {"eps": NAN}, ValueError, "RMSprop: eps must be >= 0 and finite, got nan"),
    (optim.RMSprop, {"momentum": -1.0}, ValueError, "RMSprop: momentum must be >= 0 and finite"),
    (optim.RMSprop, {"weight_decay": "0"}, TypeError, "RMSprop: weight_decay must be a real number"),
    (optim.RMSprop, {"centered": "yes"}, TypeError, "RMSprop: centered must be a bool, got 'yes'"),
    (optim.Adagrad, {"lr": NAN}, ValueError, "Adagrad: lr must be >= 0 and finite, got nan"),
    (optim.Adagrad, {"lr_decay": -0.1}, ValueError, "Adagrad: lr_decay must be >= 0 and finite, got -0.1"),
    (optim.Adagrad, {"initial_accumulator_value": -1}, ValueError, "Adagrad: initial_accumulator_value must be >= 0"),
    (optim.Adagrad, {"eps": None}, TypeError, "Adagrad: eps must be a real number, got None"),
    (optim.Adagrad, {"weight_decay": math.inf}, ValueError, "Adagrad: weight_decay must be >= 0 and finite, got inf"),
])
def test_rmsprop_and_adagrad_refuse_bad_hyper_parameters(cls, options, exc, message):
    test_nan_negative_and_non_number_hyper_parameters_are_refused(cls, options, exc, message)


def test_rmsprop_and_adagrad_load_state_dict_needs_their_state():
    w, opt, good = _stepped(optim.RMSprop, momentum=0.9)
    assert sorted(good["state"][0]) == ["momentum_buffer", "square_avg", "step"]  # as torch: no grad_avg
    with pytest.raises(ValueError, match="RMSprop.load_state_dict: the state of parameter 0 lacks 'square_avg'"):
        opt.load_state_dict({"state": {0: {"step": 1}}, "param_groups": good["param_groups"]})
    adagrad = optim.Adagrad([w])
    with pytest.raises(ValueError, match="Adagrad.load_state_dict: the state of parameter 0 lacks 'sum'"):
        adagrad.load_state_dict({"state": {0: {"step": 1}}, "param_groups": adagrad.state_dict()["param_groups"]})
    with pytest.raises(ValueError, match="Adagrad.load_state_dict: unknown state 'square_avg'"):
        adagrad.load_state_dict({"state": {0: {"step": 1, "sum": np.zeros(2), "square_avg": np.zeros(2)}},
                                 "param_groups": adagrad.state_dict()["param_groups"]})
    assert adagrad.state == {}


@pytest.mark.parametrize("cls", ["RMSprop", "Adagrad"])
def test_rmsprop_and_adagrad_step_is_all_or_nothing(device, cls):
    a = Tensor([1.0, 2.0], requires_grad=True, device=device)
    b = _read_only_parameter(device)
    opt = getattr(optim, cls)([a, b], lr=0.1)
    a.grad, b.grad = [1.0, 1.0], np.ones((3, 2))
    with pytest.raises(ValueError, match=rf"{cls}.step: parameter 1 \(shape \(3, 2\)\) is read-only"):
        opt.step()
    assert a.numpy().tolist() == [1.0, 2.0] and opt.state == {}


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_deep_copies_and_pickles_keep_the_state(name):
    """copy.deepcopy / pickle of a model with its optimizer continue exactly as the
    original (the state was keyed by the ids of the original's parameters, so the
    copy silently restarted its moments)."""
    import copy
    import pickle

    leanpass.manual_seed(0)
    model = nn.Linear(2, 1, dtype="float64")
    kwargs = {"momentum": 0.9} if name in ("SGD", "RMSprop") else {}
    opt = getattr(optim, name)(model.parameters(), lr=0.1, **kwargs)
    x = Tensor(np.linspace(-1, 1, 16).reshape(8, 2))

    def step(m, o):
        o.zero_grad()
        nn.mse_loss(m(x), np.ones((8, 1))).backward()
        o.step()

    for _ in range(3):
        step(model, opt)
    copies = [copy.deepcopy({"model": model, "opt": opt}), pickle.loads(pickle.dumps({"model": model, "opt": opt}))]
    step(model, opt)
    for c in copies:
        assert list(c["opt"].state_dict()["state"]) == list(opt.state_dict()["state"]) == [0, 1]
        step(c["model"], c["opt"])
        np.testing.assert_array_equal(c["model"].weight.numpy(), model.weight.numpy())
        assert set(c["opt"].state) == {id(p) for p in c["model"].parameters()}


def test_zero_grad_set_to_none_false_zeroes_in_place_as_pytorch(device):
    """zero_grad(set_to_none=False) keeps each gradient array, filled with zeros, and
    step() still moves those parameters through their momentum; a parameter with no
    gradient keeps none. The default drops the gradients."""
    w = nn.Parameter(np.ones(3), device=device, dtype="float64")
    frozen_out = nn.Parameter(np.ones(2), device=device, dtype="float64")  # never gets a gradient
    opt = optim.SGD([w, frozen_out], lr=0.1, momentum=0.9)
    (w * 2.0).sum().backward()
    opt.step()  # w: 1 - 0.1 * 2
    grad = w.grad
    opt.zero_grad(set_to_none=False)
    assert w.grad is grad and w.has_grad
    np.testing.assert_array_equal(host(w.grad), np.zeros(3))
    assert not frozen_out.has_grad
    before = w.numpy().copy()
    opt.step()  # the momentum buffer (2) alone moves w: -0.1 * 0.9 * 2
    np.testing.assert_allclose(w.numpy(), before - 0.18, rtol=1e-12)
    model = nn.Linear(2, 1, device=device, dtype="float64")
    model(Tensor(np.ones((1, 2)), device=device)).sum().backward()
    model.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(host(model.weight.grad), np.zeros((1, 2)))  # (out, in)
    assert model.weight.has_grad
    model.zero_grad()
    assert not model.weight.has_grad
    opt.zero_grad()
    assert not w.has_grad


def test_add_param_group_as_pytorch(device):
    """add_param_group: a group with its own options (the rest from the defaults) that
    step() updates from then on; a parameter already in a group, a non-leaf or a
    non-dict raises and adds nothing."""
    body = nn.Parameter(np.ones(2), device=device, dtype="float64")
    head = nn.Parameter(np.ones(3), device=device, dtype="float64")
    opt = optim.SGD([body], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": head, "lr": 0.01})
    assert len(opt.param_groups) == 2
    assert opt.param_groups[1]["lr"] == 0.01 and opt.param_groups[1]["momentum"] == 0.5
    ((body * 2.0).sum() + (head * 3.0).sum()).backward()
    opt.step()
    np.testing.assert_allclose(body.numpy(), 1 - 0.1 * 2.0)
    np.testing.assert_allclose(head.numpy(), 1 - 0.01 * 3.0)
    for bad, error, pattern in [
        ({"params": [head]}, ValueError, "more than one place"),
        ({"params": [nn.Parameter(np.ones(1)), body]}, ValueError, "more than one place"),
        ({"params": [head * 2.0]}, ValueError, "non-leaf"),
        ([head], TypeError, "parameter group 2 is a list"),
        ({"params": [Tensor(np.ones(1))], "lr": -1.0}, ValueError, "lr"),
    ]:
        with pytest.raises(error, match=pattern):
            opt.add_param_group(bad)
        assert len(opt.param_groups) == 2
    state = opt.state_dict()
    assert [g["params"] for g in state["param_groups"]] == [[0], [1]]


def test_a_gradient_written_into_the_zeros_that_grad_gave_counts(device):
    """Reading .grad before any backward gives zeros that do not count (step skips the
    parameter, as PyTorch skips a None gradient), until something is written into
    them: p.grad[0] = 5.0 then counts (it was silently ignored)."""
    w = Tensor([1.0, 1.0], requires_grad=True, device=device)
    opt = optim.SGD([w], lr=0.1, weight_decay=0.5)
    assert np.array_equal(host(w.grad), [0.0, 0.0]) and not w.has_grad
    opt.step()
    np.testing.assert_array_equal(w.numpy(), [1.0, 1.0])  # skipped: no gradient yet
    w.grad[0] = 5.0
    assert w.has_grad
    opt.step()
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.1 * (5.0 + 0.5), 1.0 - 0.1 * 0.5])


def test_options_set_after_construction_are_checked_floats(device):
    """An lr set in param_groups after construction (a NumPy float, as PyTorch allows)
    is used as a Python float: float32 parameters stay float32 on every device; a bad
    value raises naming the optimizer, nothing changed."""
    w = leanpass.Tensor([1.0, 2.0], dtype="float32", device=device, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    opt.param_groups[0]["lr"] = np.float64(0.5)
    (w * w).sum().backward()
    opt.step()
    assert w.dtype == leanpass.float32 and w.tolist() == [0.0, 0.0]
    assert type(opt.param_groups[0]["lr"]) is float
    opt.param_groups[0]["lr"] = "fast"
    with pytest.raises(TypeError, match="SGD: lr must be a real number"):
        opt.step()
    assert w.tolist() == [0.0, 0.0]


def test_adam_and_rmsprop_second_moments_stay_finite_for_large_float32_gradients(device):
    """(1 - b2) * g * g scaled before squaring (PyTorch's addcmul): a gradient of 1e20
    in float32 still moves the parameter, where g * g overflows to inf."""
    for make, want in ((lambda p: optim.Adam([p], lr=0.1), 0.9), (lambda p: optim.RMSprop([p], lr=0.1), 0.0)):
        p = leanpass.Tensor([1.0], dtype="float32", device=device, requires_grad=True)
        opt = make(p)
        p.grad = leanpass.asarray([1e20], dtype=leanpass.float32, device=device).data
        opt.step()
        assert abs(float(p.numpy()[0]) - want) < 1e-4


def test_a_zero_d_array_or_tensor_lr_set_later_works(device):
    w = leanpass.Tensor([1.0, 2.0], device=device, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    opt.param_groups[0]["lr"] = np.array(0.5)
    (w * w).sum().backward()
    opt.step()
    opt.param_groups[0]["lr"] = leanpass.asarray(0.5)
    opt.step()
    assert w.tolist() == [-1.0, -2.0] and opt.param_groups[0]["lr"] == 0.5


def test_step_calls_a_closure_with_grad_mode_on_and_returns_its_loss(device):
    w = Tensor(W0, requires_grad=True, device=device)
    opt = optim.SGD([w], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with leanpass.no_grad():  # PyTorch's closure runs with grad mode on too
        loss = opt.step(closure)
    assert float(loss) == pytest.approx(float((W0 * W0).sum()))
    np.testing.assert_allclose(w.numpy(), W0 - 0.1 * 2 * W0)
    assert opt.step() is None


def test_named_parameters_and_nesterov_with_dampening(device):
    layer = nn.Linear(2, 3, device=device)
    opt = optim.SGD(layer.named_parameters(), lr=0.1, momentum=0.9)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.param_groups[0]["params"][0] is layer.weight
    again = optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    again.load_state_dict(opt.state_dict())  # the names travel with the group's options
    assert again.param_groups[0]["param_names"] == ["weight", "bias"]
    with pytest.raises(ValueError, match="nesterov momentum needs momentum > 0 and dampening 0"):
        optim.SGD(layer.parameters(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="dampening"):
        optim.SGD(layer.parameters(), lr=0.1, dampening=-1.0)


def test_sgd_pickled_without_dampening_and_groups_with_and_without_names():
    import pickle

    w = Tensor(W0, requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = GRADS[0]
    opt.step()
    for group in opt.param_groups:  # as an SGD pickled before dampening existed
        del group["dampening"]
    w2, again = pickle.loads(pickle.dumps((w, opt)))
    assert not again._stepped  # a pickle keeps no record of steps, as PyTorch's
    w2.grad = GRADS[1]
    again.step()
    np.testing.assert_allclose(w2.numpy(), ref_sgd(W0, GRADS[:2], 0.1, momentum=0.9))
    layer, other = nn.Linear(2, 2), nn.Linear(2, 2)
    with pytest.raises(ValueError, match="all parameter groups should be with names or without"):
        optim.SGD(layer.parameters(), lr=0.1).add_param_group({"params": other.named_parameters()})


def test_groups_with_explicit_param_names_as_pytorch():
    a, b = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
    opt = optim.SGD([{"params": [a], "param_names": ["a"]}, {"params": [b], "param_names": ["b"]}], lr=0.1)
    assert [g["param_names"] for g in opt.param_groups] == [["a"], ["b"]]
    named = optim.SGD(nn.Linear(1, 1).named_parameters(), lr=0.1)
    named.add_param_group({"params": [a], "param_names": ["x"]})


# ---- complex parameters: each part a real parameter, as PyTorch's ------------------

COMPLEX_CASES = [
    ("SGD", dict(lr=0.1)), ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.4, maximize=True)),
    ("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.02, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.03, weight_decay=0.5)), ("AdamW", dict(lr=0.01, maximize=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, centered=True, momentum=0.5, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
]


def _complex_grads(n, seed=5, shape=W0.shape):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape) + 1j * rng.normal(size=shape) for _ in range(n)]


@pytest.mark.parametrize("cls, options", COMPLEX_CASES, ids=lambda x: str(x))
def test_a_complex_parameter_steps_as_its_real_and_imaginary_parts_would(device, cls, options):
    """PyTorch's rule for complex parameters (``view_as_real``): the real and imaginary
    parts step as two real parameters would, so Adam's second moment is each part's
    square, not ``|g|**2``; the state stays complex, of the parameter's shape."""
    w0 = W0 + 1j * W0[::-1]
    grads = _complex_grads(6)
    w, opt = run_steps(device, lambda p: getattr(optim, cls)(p, **options), grads=grads, w0=w0, dtype="complex128")
    parts = Tensor(np.stack([w0.real, w0.imag], axis=-1), requires_grad=True, device=device)
    twin = getattr(optim, cls)([parts], **options)
    for g in grads:
        parts.grad = np.stack([g.real, g.imag], axis=-1)
        twin.step()
    expected = parts.numpy()
    assert w.dtype == get_backend(device).dtype("complex128")
    np.testing.assert_array_equal(w.numpy(), expected[..., 0] + 1j * expected[..., 1])
    backend = get_backend(device)
    for field, value in opt.state_dict()["state"][0].items():
        theirs = twin.state_dict()["state"][0][field]
        if not hasattr(value, "shape"):
            assert value == theirs
            continue
        assert value.dtype == backend.dtype("complex128") and tuple(value.shape) == W0.shape
        host = backend.to_host(theirs)
        np.testing.assert_array_equal(backend.to_host(value), host[..., 0] + 1j * host[..., 1])


@pytest.mark.parametrize("cls, options", COMPLEX_CASES[:1] + COMPLEX_CASES[3:5] + COMPLEX_CASES[-2:],
                         ids=lambda x: str(x))
def test_complex_parameters_match_torch_optim(device, cls, options):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the parts' rule still runs")
    w0 = (W0 + 1j * W0[::-1]).astype(np.complex64)
    tw = torch.tensor(w0, requires_grad=True)
    topt = getattr(torch.optim, cls)([tw], **options)
    w = Tensor(w0, requires_grad=True, device=device)
    opt = getattr(optim, cls)([w], **options)
    for g in _complex_grads(8):
        g = g.astype(np.complex64)
        tw.grad, w.grad = torch.tensor(g), g
        topt.step()
        opt.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=2e-6, atol=1e-7)
    theirs = topt.state_dict()["state"].get(0, {})  # (nothing for plain SGD: PyTorch keeps no entry)
    for field, value in opt.state_dict()["state"][0].items():
        if hasattr(value, "shape"):
            np.testing.assert_allclose(get_backend(device).to_host(value), theirs[field].numpy(), rtol=2e-6,
                                       atol=1e-7)


def test_a_complex_parameter_not_in_c_order_is_updated_in_place():
    """A parameter whose array is not in C order (``p.data = a.T``) has no real view: its
    update is made on a C-ordered copy and written back into its own array."""
    rng = np.random.default_rng(2)
    base = rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))
    g = _complex_grads(1, shape=(3, 4))[0]
    w = Tensor(np.zeros((3, 4), complex), requires_grad=True)
    owner = base.copy()
    w.data = data = owner.T  # F-ordered, a view of owner
    reference = Tensor(np.ascontiguousarray(base.T), requires_grad=True)
    for p in (w, reference):
        opt = optim.Adam([p], lr=0.1)
        p.grad = g
        opt.step()
    assert w.data is data and not data.flags.c_contiguous
    np.testing.assert_array_equal(owner.T, reference.numpy())
    assert opt.state_dict()["state"][0]["exp_avg"].dtype == np.complex128


def test_complex_and_real_parameters_in_one_group_step_as_each_would_alone(device):
    """One group of real and complex parameters: each steps as it would alone."""
    values = [W0, W0 + 1j * W0.T, W0[0], W0[1] * 1j]
    grads = [_complex_grads(3, seed=k, shape=np.shape(v)) for k, v in enumerate(values)]
    grads = [[g if np.iscomplexobj(v) else g.real for g in gs] for v, gs in zip(values, grads)]
    params = [Tensor(v, requires_grad=True, device=device) for v in values]
    opt = optim.Adam(params, lr=0.05, weight_decay=0.1)
    for k in range(3):
        for p, gs in zip(params, grads):
            p.grad = gs[k]
        opt.step()
    for p, v, gs in zip(params, values, grads):
        alone, _ = run_steps(device, lambda ps: optim.Adam(ps, lr=0.05, weight_decay=0.1), grads=gs, w0=v,
                             dtype=str(np.asarray(v).dtype))
        np.testing.assert_array_equal(p.numpy(), alone.numpy())
