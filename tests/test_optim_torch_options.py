"""PyTorch's optimizer options ``amsgrad`` (Adam, AdamW) and ``maximize`` (SGD, Adam,
AdamW, RMSprop, Adagrad): step for step equal to ``torch.optim``, their state in the
state dict under PyTorch's names, float32 kept, bad values refused, and on a device with
fused kernels (the CPU stand-in of ``cuda``) the generic path instead of the kernels."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
from helpers import host, registered  # (tests/ is on sys.path)
from test_cuda_standin import CALLS, Standin
from test_optim import GRADS, W0, ref_adam, ref_sgd, run_steps

import leanpass
from leanpass import Tensor, optim
from leanpass.backends import get_backend


def _grads(seed=5, steps=12):
    """Gradients that shrink, so that AMSGrad's maximum differs from the running average."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=W0.shape) * 0.7**k for k in range(steps)]


# (optimizer, options): each with and without the new options, and with the old ones they mix with
CASES = [
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.2, maximize=True)),
    ("Adam", dict(lr=0.02, amsgrad=True)),
    ("Adam", dict(lr=0.02, betas=(0.9, 0.8), amsgrad=True)),  # a second moment that falls: the maximum counts
    ("Adam", dict(lr=0.02, maximize=True)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.03, betas=(0.85, 0.7), amsgrad=True)),
    ("AdamW", dict(lr=0.03, weight_decay=0.5, maximize=True)),
    ("AdamW", dict(lr=0.03, weight_decay=0.5, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, maximize=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.7, centered=True, weight_decay=0.1, maximize=True)),
    ("Adagrad", dict(lr=0.1, maximize=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.2, initial_accumulator_value=0.1, maximize=True)),
]
IDS = [f"{cls}-{'-'.join(f'{k}={v}' for k, v in options.items())}" for cls, options in CASES]


@pytest.mark.parametrize("cls, options", CASES, ids=IDS)
def test_matches_torch_optim_after_every_step(device, cls, options):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed; the written-out rules still run")
    tw = torch.tensor(W0, requires_grad=True)
    topt = getattr(torch.optim, cls)([tw], **options)
    w = Tensor(W0, requires_grad=True, device=device)
    opt = getattr(optim, cls)([w], **options)
    for g in _grads():
        tw.grad, w.grad = torch.tensor(g), g
        topt.step()
        opt.step()
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-14)
    theirs, ours = topt.state_dict(), opt.state_dict()
    # the same state, under the same names (PyTorch's step is a tensor, LeanPass's an int)
    ours_state, theirs_state = ours["state"].get(0, {}), theirs["state"].get(0, {})
    assert sorted(ours_state) == sorted(k for k, v in theirs_state.items() if v is not None)
    for field, value in ours_state.items():
        expected = theirs_state[field]
        if hasattr(value, "shape"):
            np.testing.assert_allclose(host(value), expected.numpy(), rtol=1e-12, atol=1e-14)
        else:
            assert value == int(expected)
    for key in ("amsgrad", "maximize"):
        if key in theirs["param_groups"][0]:
            assert ours["param_groups"][0][key] is theirs["param_groups"][0][key]


def test_amsgrad_divides_by_the_largest_second_moment(device):
    """The written-out rule (and the cases above are not vacuous: the maximum is larger)."""
    grads = _grads()
    w, opt = run_steps(device, lambda p: optim.Adam(p, lr=0.02, betas=(0.9, 0.8), amsgrad=True), grads=grads)
    expected, m, v, v_max = W0.copy(), np.zeros_like(W0), np.zeros_like(W0), np.zeros_like(W0)
    for t, g in enumerate(grads, start=1):
        m = 0.9 * m + 0.1 * g
        v = 0.8 * v + 0.2 * g * g
        v_max = np.maximum(v_max, v)
        expected = expected - 0.02 / (1 - 0.9**t) * m / (np.sqrt(v_max / (1 - 0.8**t)) + 1e-8)
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-12, atol=1e-15)
    state = opt.state_dict()["state"][0]
    np.testing.assert_allclose(host(state["max_exp_avg_sq"]), v_max, rtol=1e-12)
    assert (host(state["max_exp_avg_sq"]) > host(state["exp_avg_sq"]) * 2).all()
    plain, _ = run_steps(device, lambda p: optim.Adam(p, lr=0.02, betas=(0.9, 0.8)), grads=grads)
    assert not np.allclose(plain.numpy(), w.numpy(), rtol=1e-6)
    assert "max_exp_avg_sq" not in optim.Adam([Tensor([1.0], requires_grad=True)]).state_dict()["state"].get(0, {})


MAXIMIZE = [(cls, options) for cls, options in CASES if options.get("maximize")]


@pytest.mark.parametrize("cls, options", MAXIMIZE, ids=[i for i, c in zip(IDS, CASES) if c in MAXIMIZE])
def test_maximize_is_the_rule_on_the_negated_gradient(device, cls, options):
    """maximize=True with gradients g steps exactly as maximize=False with -g."""
    grads = _grads(seed=9)
    up, up_opt = run_steps(device, lambda p: getattr(optim, cls)(p, **options), grads=grads)
    down, down_opt = run_steps(device, lambda p: getattr(optim, cls)(p, **{**options, "maximize": False}),
                               grads=[-g for g in grads])
    np.testing.assert_array_equal(up.numpy(), down.numpy())
    for field, value in up_opt.state_dict()["state"][0].items():
        other = down_opt.state_dict()["state"][0][field]
        assert np.array_equal(host(value), host(other)) if hasattr(value, "shape") else value == other


def test_maximize_matches_the_written_out_rules(device):
    w, _ = run_steps(device, lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01,
                                                   maximize=True))
    np.testing.assert_allclose(w.numpy(), ref_sgd(W0, [-g for g in GRADS], 0.05, 0.8, 0.01, nesterov=True),
                               rtol=1e-13, atol=1e-15)
    w, _ = run_steps(device, lambda p: optim.AdamW(p, lr=0.03, weight_decay=0.5, maximize=True))
    np.testing.assert_allclose(w.numpy(), ref_adam(W0, [-g for g in GRADS], 0.03, weight_decay=0.5, decoupled=True),
                               rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("cls", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_maximize_climbs_to_the_maximum(device, cls):
    """-(p - 3)**2 is largest at p = 3: every optimizer with maximize=True gets there."""
    p = Tensor([0.0, 5.0], requires_grad=True, device=device)
    lr = {"SGD": 0.1, "Adagrad": 1.0}.get(cls, 0.1)
    opt = getattr(optim, cls)([p], lr=lr, maximize=True)
    for _ in range(300):
        opt.zero_grad()
        (-((p - 3.0) ** 2)).sum().backward()
        opt.step()
    np.testing.assert_allclose(p.numpy(), [3.0, 3.0], atol=0.05)


@pytest.mark.parametrize("make", [
    lambda p: optim.Adam(p, lr=0.02, amsgrad=True, maximize=True),
    lambda p: optim.AdamW(p, lr=0.02, weight_decay=0.1, amsgrad=True),
    lambda p: optim.SGD(p, lr=0.1, momentum=0.9, maximize=True),
    lambda p: optim.RMSprop(p, lr=0.01, centered=True, momentum=0.5, maximize=True),
    lambda p: optim.Adagrad(p, lr=0.1, maximize=True),
])
def test_float32_parameters_and_state_stay_float32(device, make):
    w, opt = run_steps(device, make, grads=_grads(), dtype="float32")
    reference, _ = run_steps(device, make, grads=_grads())
    f32 = get_backend(device).dtype("float32")
    assert w.dtype == f32
    state = opt.state_dict()["state"][0]
    assert all(value.dtype == f32 for value in state.values() if hasattr(value, "dtype"))
    np.testing.assert_allclose(w.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda p: optim.Adam(p, lr=0.02, weight_decay=0.1, amsgrad=True, maximize=True),
    lambda p: optim.AdamW(p, lr=0.02, amsgrad=True),
    lambda p: optim.SGD(p, lr=0.05, momentum=0.9, maximize=True),
    lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5, maximize=True),
    lambda p: optim.Adagrad(p, lr=0.1, maximize=True),
])
def test_state_dict_round_trip_resumes_to_the_same_numbers(device, make, tmp_path):
    grads = _grads(steps=10)
    w, opt = run_steps(device, make, grads=grads[:5])
    leanpass.save(opt.state_dict(), tmp_path / "optim.npz")
    saved_w = w.numpy().copy()
    for g in grads[5:]:
        w.grad = g
        opt.step()
    resumed = Tensor(saved_w, requires_grad=True, device=device)
    fresh = make([resumed])
    for group in fresh.param_groups:  # the loaded options, not the constructor's, count
        for key in ("amsgrad", "maximize"):
            if key in group:
                group[key] = False
    fresh.load_state_dict(leanpass.load(tmp_path / "optim.npz"))
    assert {k: v for k, v in fresh.param_groups[0].items() if k != "params"} == \
        {k: v for k, v in opt.param_groups[0].items() if k != "params"}
    for g in grads[5:]:
        resumed.grad = g
        fresh.step()
    np.testing.assert_array_equal(resumed.numpy(), w.numpy())
    for field, value in fresh.state_dict()["state"][0].items():
        ours = opt.state_dict()["state"][0][field]
        assert np.array_equal(host(value), host(ours)) if hasattr(value, "shape") else value == ours


def test_param_groups_have_torchs_option_names_in_its_order():
    w = Tensor([1.0], requires_grad=True)
    assert list(optim.Adam([w]).param_groups[0])[:6] == ["lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"]
    assert optim.AdamW([w], 1e-3, (0.9, 0.999), 1e-8, 0.01, True).param_groups[0]["amsgrad"] is True  # positional
    for cls in (optim.SGD, optim.Adam, optim.AdamW, optim.RMSprop, optim.Adagrad):
        assert cls([w]).defaults["maximize"] is False
        assert cls([w], maximize=1).param_groups[0]["maximize"] is True


def test_amsgrad_state_is_required_when_loading_with_amsgrad():
    w = Tensor([1.0, 2.0], requires_grad=True)
    plain = optim.Adam([w], lr=0.1)
    w.grad = np.array([0.5, -0.5])
    plain.step()
    saved = plain.state_dict()
    ams = optim.Adam([Tensor([1.0, 2.0], requires_grad=True)], amsgrad=True)
    before = ams.state_dict()
    with pytest.raises(ValueError, match=r"Adam.load_state_dict: the state of parameter 0 lacks 'max_exp_avg_sq' "
                                         r"\(Adam needs step, exp_avg, exp_avg_sq, max_exp_avg_sq, or nothing\)"):
        ams.load_state_dict({"state": saved["state"], "param_groups": [dict(saved["param_groups"][0],
                                                                             amsgrad=True)]})
    assert ams.state_dict() == before  # nothing changed
    ams.load_state_dict(saved)  # the saved options (amsgrad off) need no maximum
    assert ams.param_groups[0]["amsgrad"] is False


def test_amsgrad_turned_on_later_starts_its_maximum_from_zeros(device):
    w, opt = run_steps(device, lambda p: optim.Adam(p, lr=0.02), grads=GRADS[:2])
    opt.param_groups[0]["amsgrad"] = True
    w.grad = GRADS[2]
    opt.step()
    state = opt.state_dict()["state"][0]
    np.testing.assert_array_equal(host(state["max_exp_avg_sq"]), host(state["exp_avg_sq"]))


def test_groups_saved_or_pickled_before_the_options_existed_take_the_defaults(device):
    w, opt = run_steps(device, lambda p: optim.Adam(p, lr=0.02, amsgrad=True), grads=GRADS[:1])
    old = opt.state_dict()
    old = {"state": old["state"], "param_groups": [{k: v for k, v in old["param_groups"][0].items()
                                                    if k not in ("amsgrad", "maximize")}]}
    fresh = optim.Adam([Tensor(W0, requires_grad=True, device=device)], lr=0.02, amsgrad=True)
    fresh.load_state_dict(old)  # the options missing from it keep this optimizer's
    assert fresh.param_groups[0]["amsgrad"] is True and fresh.param_groups[0]["maximize"] is False
    for group in (opt.defaults, *opt.param_groups):  # as a pickle made before LeanPass had them
        del group["amsgrad"], group["maximize"]
    copied = copy.deepcopy(opt)
    assert copied.param_groups[0]["amsgrad"] is False and copied.defaults["maximize"] is False
    copied.param_groups[0]["params"][0].grad = GRADS[1]
    copied.step()


@pytest.mark.parametrize("cls, key, value", [
    ("Adam", "amsgrad", "yes"), ("AdamW", "amsgrad", None), ("Adam", "maximize", 2), ("AdamW", "maximize", "no"),
    ("SGD", "maximize", "yes"), ("RMSprop", "maximize", 0.5), ("Adagrad", "maximize", [True]),
])
def test_bad_values_raise_type_error_naming_the_optimizer_and_option(cls, key, value):
    w = Tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match=rf"^{cls}: {key} must be a bool, got {value!r}".replace("[", r"\[")):
        getattr(optim, cls)([w], **{key: value})
    opt = getattr(optim, cls)([w])
    good = opt.state_dict()
    with pytest.raises(TypeError, match=rf"{cls}.load_state_dict: invalid options for parameter group 0: "
                                        rf"{cls}: {key} must be a bool"):
        opt.load_state_dict({"state": {}, "param_groups": [dict(good["param_groups"][0], **{key: value})]})
    assert opt.state_dict() == good
    with pytest.raises(TypeError, match=rf"{cls}: {key} must be a bool"):
        opt.add_param_group({"params": [Tensor([2.0], requires_grad=True)], key: value})
    # keyword only, as PyTorch's (RMSprop's place in its order follows options LeanPass lacks)
    assert inspect.signature(getattr(optim, cls)).parameters["maximize"].kind is inspect.Parameter.KEYWORD_ONLY


# ---- the fused kernels are left out (the CPU stand-in of the cuda backend) ----------------------


@pytest.fixture(scope="module")
def standin():
    with registered("standin", Standin, "standin_arrays"):
        yield "standin"


@pytest.mark.parametrize("cls, options", CASES, ids=IDS)
def test_the_fused_kernels_are_not_used_with_amsgrad_or_maximize(standin, cls, options):
    def steps(device):
        w, _ = run_steps(device, lambda p: getattr(optim, cls)(p, **options), grads=_grads())
        return w.numpy()

    CALLS.clear()
    fused = steps(standin)
    assert not {"sgd", "sgd_momentum", "adam"} & set(CALLS), CALLS
    np.testing.assert_array_equal(fused, steps("strict"))  # the generic path, the same statements
    off = {k: v for k, v in options.items() if k not in ("amsgrad", "maximize")}
    CALLS.clear()
    run_steps(standin, lambda p: getattr(optim, cls)(p, **off), grads=_grads())
    kernel = "adam" if cls.startswith("Adam") else "sgd_momentum" if off.get("momentum") else "sgd"
    if cls in ("SGD", "Adam", "AdamW") and not off.get("dampening"):
        assert CALLS.get(kernel) == len(_grads())  # without them the kernels still run


@pytest.mark.parametrize("cls", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_torchs_implementation_options_are_taken_and_change_nothing(cls):
    """``foreach``, ``fused``, ``capturable`` (where PyTorch's optimizer has them):
    accepted, as code written for PyTorch passes them (nanoGPT's ``fused=True``), and
    the steps are those without; ``differentiable=True`` raises NotImplementedError,
    a value of another type TypeError, naming the optimizer."""
    params = inspect.signature(getattr(optim, cls)).parameters
    given = {k: True for k in ("foreach", "fused", "capturable") if k in params}
    assert "foreach" in given and "differentiable" in params
    plain, _ = run_steps("cpu", lambda ps: getattr(optim, cls)(ps, lr=0.05))
    chosen, _ = run_steps("cpu", lambda ps: getattr(optim, cls)(ps, lr=0.05, **given))
    np.testing.assert_array_equal(host(chosen), host(plain))
    w = Tensor(np.ones(2), requires_grad=True)
    with pytest.raises(NotImplementedError, match=f"{cls}: differentiable=True"):
        getattr(optim, cls)([w], differentiable=True)
    with pytest.raises(TypeError, match=f"{cls}: foreach must be True, False or None"):
        getattr(optim, cls)([w], foreach="yes")
