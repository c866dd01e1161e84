"""Optimizers: PyTorch's update rules exactly, in place on the parameter's device
and dtype, lazy state, and state dicts that resume training to the same numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

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


def ref_sgd(w, grads, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    w, buf = w.copy(), None
    for g in grads:
        g = g + weight_decay * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
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
                                  lambda p: optim.AdamW(p, lr=0.01)])
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


def test_optimizer_load_state_dict_checks_before_changing():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    w.grad = [1.0, 1.0]
    opt.step()
    good = opt.state_dict()
    before = {k: (v.copy() if hasattr(v, "copy") else v) for k, v in good["state"][0].items()}
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
