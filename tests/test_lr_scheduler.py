"""optim.lr_scheduler: each scheduler against torch.optim.lr_scheduler, step by step,
state dicts that resume identically, and bad input refused with nothing changed."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, optim
from leanpass.optim import lr_scheduler

LRS = [0.1, 0.03]  # two parameter groups with their own rates

# name -> (optimizer class name, its options, scheduler maker(module, optimizer))
CONFIGS = {
    "step": ("SGD", {}, lambda m, o: m.StepLR(o, step_size=7)),
    "step_gamma": ("Adam", {}, lambda m, o: m.StepLR(o, step_size=3, gamma=0.7)),
    "multistep": ("SGD", {}, lambda m, o: m.MultiStepLR(o, milestones=[5, 12, 30])),
    "multistep_repeated": ("SGD", {}, lambda m, o: m.MultiStepLR(o, milestones=[30, 4, 12, 12], gamma=0.5)),
    "exponential": ("SGD", {}, lambda m, o: m.ExponentialLR(o, gamma=0.93)),
    "cosine": ("SGD", {}, lambda m, o: m.CosineAnnealingLR(o, T_max=20)),
    "cosine_eta_min": ("Adam", {}, lambda m, o: m.CosineAnnealingLR(o, T_max=13, eta_min=0.005)),
    "lambda": ("SGD", {}, lambda m, o: m.LambdaLR(o, lambda epoch: 0.95**epoch)),
    "lambda_per_group": ("SGD", {}, lambda m, o: m.LambdaLR(o, [lambda e: 1.0 / (1 + e), lambda e: (e % 7) / 7])),
    "linear": ("SGD", {}, lambda m, o: m.LinearLR(o)),
    "linear_down": ("SGD", {}, lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=23)),
    "onecycle": ("SGD", {"momentum": 0.9}, lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=60)),
    "onecycle_adam": ("Adam", {}, lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.2], epochs=6, steps_per_epoch=10)),
    "onecycle_three_phase_linear": ("RMSprop", {"momentum": 0.5}, lambda m, o: m.OneCycleLR(
        o, max_lr=0.4, total_steps=60, three_phase=True, anneal_strategy="linear", pct_start=0.25,
        div_factor=10.0, final_div_factor=100.0, base_momentum=0.8, max_momentum=[0.9, 0.99])),
    "onecycle_no_momentum": ("Adagrad", {}, lambda m, o: m.OneCycleLR(o, max_lr=0.3, total_steps=60,
                                                                       cycle_momentum=False)),
    "sequential": ("SGD", {}, lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=5),
                                                              m.CosineAnnealingLR(o, T_max=20),
                                                              m.StepLR(o, step_size=4, gamma=0.5)],
                                                          milestones=[5, 25])),
    "sequential_exponential": ("Adam", {}, lambda m, o: m.SequentialLR(
        o, [m.ExponentialLR(o, gamma=0.9),
            m.MultiStepLR(o, milestones=[5, 10])], milestones=[8])),
}
STEPS = 60


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def _lp_setup(name, device="cpu"):
    cls, options, make = CONFIGS[name]
    params = [Tensor(np.full(3, 1.0 + i), requires_grad=True, device=device) for i in range(2)]
    opt = getattr(optim, cls)([{"params": [p], "lr": lr} for p, lr in zip(params, LRS)], **options)
    return params, opt, make(lr_scheduler, opt)


def _torch_setup(torch, name):
    cls, options, make = CONFIGS[name]
    params = [torch.full((3,), 1.0 + i, dtype=torch.float64, requires_grad=True) for i in range(2)]
    opt = getattr(torch.optim, cls)([{"params": [p], "lr": lr} for p, lr in zip(params, LRS)], **options)
    return params, opt, make(torch.optim.lr_scheduler, opt)


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _train(params, opt, sched, steps, grad):
    """``steps`` optimizer and scheduler steps; the rates, momenta and last_epoch after each."""
    seen = []
    for k in range(steps):
        for i, p in enumerate(params):
            p.grad = grad(k, i)
        opt.step()
        sched.step()
        seen.append((list(sched.get_last_lr()), _momenta(opt), sched.last_epoch))
    return seen


def _lp_grad(k, i):
    return np.full(3, math.sin(k + i))


def _compare(ours, theirs):
    assert len(ours) == len(theirs)
    for k, ((lr, mom, epoch), (tlr, tmom, tepoch)) in enumerate(zip(ours, theirs)):
        assert epoch == tepoch, k
        np.testing.assert_allclose(lr, tlr, rtol=1e-13, atol=1e-17, err_msg=f"step {k}")
        assert (mom[0] is None) == (tmom[0] is None)
        if mom[0] is not None:
            np.testing.assert_allclose(mom, tmom, rtol=1e-13, err_msg=f"step {k}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_schedule_matches_torch_step_by_step(name):
    torch = _torch()
    params, opt, sched = _lp_setup(name)
    tparams, topt, tsched = _torch_setup(torch, name)
    assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-15)
    assert sched.last_epoch == tsched.last_epoch
    if hasattr(tsched, "base_lrs"):
        assert sched.base_lrs == pytest.approx(tsched.base_lrs, rel=1e-15)
    assert [g["initial_lr"] for g in opt.param_groups] == pytest.approx([g["initial_lr"] for g in topt.param_groups])
    ours = _train(params, opt, sched, STEPS, _lp_grad)
    theirs = _train(tparams, topt, tsched, STEPS, lambda k, i: torch.tensor(_lp_grad(k, i)))
    _compare(ours, theirs)
    for p, tp in zip(params, tparams):  # the rates and momenta reached the updates
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("through_file", [False, True])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_state_dict_round_trip_mid_way_continues_identically(tmp_path, name, through_file):
    params, opt, sched = _lp_setup(name)
    _train(params, opt, sched, 25, _lp_grad)
    opt_state, sched_state = copy.deepcopy(opt.state_dict()), copy.deepcopy(sched.state_dict())  # not references
    if through_file:
        leanpass.save(opt_state, tmp_path / "opt.npz")
        leanpass.save(sched_state, tmp_path / "sched.npz")
        opt_state, sched_state = leanpass.load(tmp_path / "opt.npz"), leanpass.load(tmp_path / "sched.npz")
    saved_params = [p.numpy().copy() for p in params]
    opt_state_lrs = list(sched.get_last_lr())
    expected = _train(params, opt, sched, STEPS - 25, lambda k, i: _lp_grad(k + 25, i))

    params2, opt2, sched2 = _lp_setup(name)  # a new run: scheduler made, then both states loaded
    for p, value in zip(params2, saved_params):
        p.data = Tensor(value).data
    opt2.load_state_dict(opt_state)
    sched2.load_state_dict(sched_state)
    assert sched2.last_epoch == 25 and sched2.get_last_lr() == opt_state_lrs
    resumed = _train(params2, opt2, sched2, STEPS - 25, lambda k, i: _lp_grad(k + 25, i))
    assert resumed == expected
    for p, q in zip(params, params2):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_lambda_functions_are_not_saved_but_callable_objects_state_is():
    class Warmup:
        def __init__(self, steps):
            self.steps = steps

        def __call__(self, epoch):
            return min(1.0, (epoch + 1) / self.steps)

    w = Tensor([1.0], requires_grad=True)
    opt = optim.SGD([{"params": [w]}, {"params": [Tensor([2.0], requires_grad=True)]}], lr=0.1)
    sched = lr_scheduler.LambdaLR(opt, [lambda e: 0.5**e, Warmup(10)])
    state = sched.state_dict()
    assert state["lr_lambdas"] == [None, {"steps": 10}]
    other = Warmup(4)
    opt2 = optim.SGD([{"params": [Tensor([1.0], requires_grad=True)]},
                      {"params": [Tensor([2.0], requires_grad=True)]}], lr=0.1)
    sched2 = lr_scheduler.LambdaLR(opt2, [lambda e: 0.5**e, other])
    sched2.load_state_dict(state)
    assert other.steps == 10 and sched2.lr_lambdas[1] is other


def test_two_chained_schedulers_compose_as_in_torch():
    torch = _torch()
    w = Tensor([1.0], requires_grad=True)
    tw = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    opt, topt = optim.SGD([w], lr=0.5), torch.optim.SGD([tw], lr=0.5)
    ours = [lr_scheduler.ExponentialLR(opt, 0.9), lr_scheduler.StepLR(opt, 4, 0.5),
            lr_scheduler.CosineAnnealingLR(opt, 9)]
    theirs = [torch.optim.lr_scheduler.ExponentialLR(topt, 0.9), torch.optim.lr_scheduler.StepLR(topt, 4, 0.5),
              torch.optim.lr_scheduler.CosineAnnealingLR(topt, 9)]
    for _ in range(50):
        w.grad, tw.grad = [1.0], torch.ones(1, dtype=torch.float64)
        opt.step()
        topt.step()
        for s, t in zip(ours, theirs):
            s.step()
            t.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"], rel=1e-13, abs=1e-300)
        assert [s.get_last_lr()[0] for s in ours] == pytest.approx([t.get_last_lr()[0] for t in theirs], rel=1e-13)


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine_eta_min", "linear", "lambda"])
def test_deprecated_step_with_epoch_uses_the_closed_form_as_torch(name):
    torch = _torch()
    params, opt, sched = _lp_setup(name)
    tparams, topt, tsched = _torch_setup(torch, name)
    opt.step()  # no gradients: nothing moves, but the optimizer has stepped
    topt.step()
    for epoch in (3, 17, 4, 40):
        with pytest.warns(UserWarning, match="epoch parameter"):
            sched.step(epoch)
        with pytest.warns(UserWarning, match="epoch parameter"):
            tsched.step(epoch)
        assert sched.last_epoch == tsched.last_epoch == epoch
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-13)


def test_scheduler_step_before_optimizer_step_warns_as_torch():
    w = Tensor([1.0], requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    sched = lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step\(\)"):
        sched.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()  # only the first step warns
    with pytest.warns(UserWarning, match="get_last_lr"):
        sched.get_lr()


def test_a_subclass_written_for_torch_overrides_get_lr():
    """PyTorch's way to write a scheduler: override get_lr(); step() calls it, without
    the warning meant for user calls. The bare base class says what to override."""
    class Half(lr_scheduler.LRScheduler):
        def get_lr(self):
            return [base * 0.5 ** self.last_epoch for base in self.base_lrs]

    opt = optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched = Half(opt)
        opt.step()
        sched.step()
    assert sched.get_last_lr() == [0.05] and opt.param_groups[0]["lr"] == 0.05
    with pytest.raises(NotImplementedError, match="override get_lr"):
        lr_scheduler.LRScheduler(optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1))


def test_import_forms():
    from leanpass.optim.lr_scheduler import OneCycleLR

    assert optim.lr_scheduler is lr_scheduler and OneCycleLR is lr_scheduler.OneCycleLR
    assert "lr_scheduler" in optim.__all__


def test_training_with_onecycle_matches_torch_parameters(device):
    """RMSprop and SGD (momentum cycled) under OneCycleLR: the parameters match torch's
    to 1e-12 after every step, on each device."""
    torch = _torch()
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=(3, 2))
    grads = [rng.normal(size=(3, 2)) for _ in range(30)]
    for cls, options in (("SGD", {"momentum": 0.9, "nesterov": True}), ("RMSprop", {"momentum": 0.3}),
                         ("Adam", {"weight_decay": 0.01})):
        w = Tensor(w0, requires_grad=True, device=device)
        tw = torch.tensor(w0, requires_grad=True)
        opt, topt = getattr(optim, cls)([w], **options), getattr(torch.optim, cls)([tw], **options)
        sched = lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=len(grads))
        tsched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.05, total_steps=len(grads))
        for g in grads:
            w.grad, tw.grad = g, torch.tensor(g)
            opt.step()
            topt.step()
            sched.step()
            tsched.step()
            np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-14)


# ---- bad input --------------------------------------------------------------------------


def _opt():
    return optim.SGD([Tensor([1.0], requires_grad=True)], lr=0.1)


BAD = [
    (lambda o: lr_scheduler.StepLR(o, step_size=0), ValueError, "StepLR: step_size must be an int >= 1, got 0"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2.5), TypeError, "StepLR: step_size must be an int"),
    (lambda o: lr_scheduler.StepLR(o, 2, gamma="0.1"), TypeError, "StepLR: gamma must be a real number"),
    (lambda o: lr_scheduler.ExponentialLR(o, gamma=float("nan")), ValueError, "ExponentialLR: gamma must be >= 0"),
    (lambda o: lr_scheduler.ExponentialLR(o, gamma=-0.5), ValueError, "ExponentialLR: gamma must be >= 0"),
    (lambda o: lr_scheduler.MultiStepLR(o, milestones=3), TypeError, "MultiStepLR: milestones must be a list"),
    (lambda o: lr_scheduler.MultiStepLR(o, milestones=[2, "5"]), TypeError, "MultiStepLR: each milestone must be"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), ValueError, "CosineAnnealingLR: T_max must be an int >= 1"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, 5, eta_min=-1.0), ValueError, "CosineAnnealingLR: eta_min"),
    (lambda o: lr_scheduler.LinearLR(o, start_factor=0.0), ValueError, r"LinearLR: start_factor must be in \(0, 1\]"),
    (lambda o: lr_scheduler.LinearLR(o, end_factor=1.5), ValueError, r"LinearLR: end_factor must be in \[0, 1\]"),
    (lambda o: lr_scheduler.LambdaLR(o, [lambda e: 1.0] * 2), ValueError, "LambdaLR: expected 1 lr_lambdas, but got 2"),
    (lambda o: lr_scheduler.LambdaLR(o, 0.5), TypeError, "LambdaLR: lr_lambda 0 must be callable"),
    (lambda o: lr_scheduler.StepLR(o, 2, last_epoch=-2), ValueError, "StepLR: last_epoch must be an int >= -1"),
    (lambda o: lr_scheduler.StepLR(o, 2, last_epoch=3), KeyError, "StepLR: param 'initial_lr' is not specified"),
    (lambda o: lr_scheduler.StepLR(object(), 2), TypeError, "StepLR: object is not an Optimizer"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0), ValueError,
     r"OneCycleLR: you must define either total_steps OR \(epochs AND steps_per_epoch\)"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=0), ValueError,
     "OneCycleLR: total_steps must be an int >= 1"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=10.0), TypeError, "OneCycleLR: total_steps must be an int"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, epochs=0, steps_per_epoch=5), ValueError, "OneCycleLR: epochs"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=10, pct_start=1.5), ValueError,
     r"OneCycleLR: pct_start must be in \[0, 1\]"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy="cosine"), ValueError,
     "OneCycleLR: anneal_strategy must be one of 'cos' or 'linear'"),
    (lambda o: lr_scheduler.OneCycleLR(o, [1.0, 2.0], total_steps=10), ValueError,
     "OneCycleLR: max_lr must have the same length as optimizer.param_groups"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=10, pct_start=0.1), ValueError,
     "OneCycleLR: step 0 falls in phase 0 of no steps"),
    (lambda o: lr_scheduler.OneCycleLR(o, 1.0, total_steps=10, div_factor=0), ValueError, "OneCycleLR: div_factor"),
    (lambda o: lr_scheduler.SequentialLR(o, [], []), ValueError, "SequentialLR expects at least one scheduler"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(o, 3)], [2, 4]),
     ValueError, "SequentialLR expects number of schedulers provided to be one more than the number of milestone"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2), "StepLR"], [2]), TypeError,
     "SequentialLR: the scheduler at index 1 is a str"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(_opt(), 2)], [2]),
     ValueError, "SequentialLR expects all schedulers to belong to the same optimizer"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2)] * 3, [5, 2]), ValueError,
     "SequentialLR: milestones must be in increasing order"),
    (lambda o: lr_scheduler.LambdaLR(o, lambda e: 1.0 / e), ZeroDivisionError, "division by zero"),
]


@pytest.mark.parametrize("make, exc, message", BAD)
def test_bad_input_raises_and_leaves_the_optimizer_as_it_was(make, exc, message):
    opt = _opt()
    if "SequentialLR" not in message:  # SequentialLR's parts changed it, as they must
        before = [dict(g) for g in opt.param_groups]
    with pytest.raises(exc, match=message):
        make(opt)
    if "SequentialLR" not in message:
        assert opt.param_groups == before


def test_onecycle_with_an_optimizer_without_momentum_raises():
    opt = optim.Adagrad([Tensor([1.0], requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="OneCycleLR: optimizer must support momentum or beta1"):
        lr_scheduler.OneCycleLR(opt, 1.0, total_steps=10)
    assert "initial_lr" not in opt.param_groups[0]


def test_stepping_past_the_end_or_to_a_bad_rate_raises_and_changes_nothing():
    opt = _opt()
    sched = lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    opt.step()
    for _ in range(3):
        sched.step()
    state, group = sched.state_dict(), dict(opt.param_groups[0])
    with pytest.raises(ValueError, match="OneCycleLR: tried to step 4 times. The specified number of total steps is 3"):
        sched.step()
    assert sched.state_dict() == state and opt.param_groups[0] == group
    opt = _opt()
    sched = lr_scheduler.LambdaLR(opt, lambda e: float("inf") if e == 2 else 1.0)
    opt.step()
    sched.step()
    state, group = sched.state_dict(), dict(opt.param_groups[0])
    with pytest.raises(ValueError, match="LambdaLR.step: the learning rate of parameter group 0 would be inf"):
        sched.step()
    assert sched.state_dict() == state and opt.param_groups[0] == group


@pytest.mark.parametrize("change, exc, message", [
    ({"gamma": "x"}, TypeError, "StepLR.load_state_dict: gamma must be a real number"),
    ({"step_size": 0}, ValueError, "StepLR.load_state_dict: step_size must be an int >= 1"),
    ({"last_epoch": 1.5}, TypeError, "StepLR.load_state_dict: last_epoch must be an int"),
    ({"base_lrs": [0.1, 0.2]}, ValueError, "StepLR.load_state_dict: base_lrs must have the same length"),
    ({"extra": 1}, ValueError, r"StepLR.load_state_dict: the state does not fit this scheduler \(unknown keys "
                               r"\['extra'\]"),
])
def test_load_state_dict_checks_before_changing(change, exc, message):
    opt = _opt()
    sched = lr_scheduler.StepLR(opt, 2)
    state = sched.state_dict()
    with pytest.raises(exc, match=message):
        sched.load_state_dict({**state, **change})
    assert sched.state_dict() == state
    with pytest.raises(TypeError, match="StepLR.load_state_dict: expected a dict"):
        sched.load_state_dict([1])
    with pytest.raises(ValueError, match=r"missing keys \['gamma'\]"):
        sched.load_state_dict({k: v for k, v in state.items() if k != "gamma"})


def test_sequential_load_checks_every_inner_state_first():
    opt = _opt()
    sched = lr_scheduler.SequentialLR(opt, [lr_scheduler.StepLR(opt, 2), lr_scheduler.ExponentialLR(opt, 0.5)], [3])
    state = sched.state_dict()
    bad = {**state, "last_epoch": 7, "_schedulers": [state["_schedulers"][0], {**state["_schedulers"][1], "gamma": -1}]}
    with pytest.raises(ValueError, match="SequentialLR.load_state_dict: scheduler 1: .*gamma must be >= 0"):
        sched.load_state_dict(bad)
    assert sched.state_dict() == state


def test_the_order_warning_counts_optimizer_steps_from_the_first_scheduler():
    """As PyTorch: an optimizer that stepped in an earlier phase, before any scheduler
    existed, still warns when the new scheduler steps first."""
    w = Tensor(np.ones(2), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    w.grad = np.ones(2)
    opt.step()  # a first phase without a scheduler
    sched = lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match=r"before `optimizer.step\(\)`"):
        sched.step()
    second = lr_scheduler.StepLR(optim.SGD([w], lr=0.1), 2)
    second.optimizer.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second.step()


def test_cosine_annealing_takes_a_whole_float_t_max():
    w = Tensor(np.ones(2), requires_grad=True)
    a = lr_scheduler.CosineAnnealingLR(optim.SGD([w], lr=0.1), T_max=10.0)
    b = lr_scheduler.CosineAnnealingLR(optim.SGD([w], lr=0.1), T_max=10)
    assert a.T_max == 10 and type(a.T_max) is int
    for _ in range(12):
        a.optimizer.step(), b.optimizer.step(), a.step(), b.step()
        assert a.get_last_lr() == b.get_last_lr()
    with pytest.raises(TypeError, match="T_max must be an int"):
        lr_scheduler.CosineAnnealingLR(optim.SGD([w], lr=0.1), T_max=10.5)
