"""PyTorch's losses (issue 28, item 3): ``CrossEntropyLoss``/``F.cross_entropy``,
``NLLLoss``/``F.nll_loss``, ``MSELoss``/``F.mse_loss``, ``L1Loss``/``F.l1_loss``,
``BCEWithLogitsLoss``/``F.binary_cross_entropy_with_logits``,
``SmoothL1Loss``/``F.smooth_l1_loss`` and ``HuberLoss``/``F.huber_loss`` with their
arguments: values and the gradients of input and target against torch in float64,
gradcheck on every device, state dicts in PyTorch's names, the old LeanPass forms
unchanged, a device that cannot check indices without waiting, and bad input."""

from __future__ import annotations

import warnings

import array_api_strict
import numpy as np
import pytest
from helpers import close, host, registered, torch_or_skip

import leanpass as lp
from leanpass import Tensor, gradcheck, nn
from leanpass.backends.strict_backend import StrictBackend
from leanpass.nn import functional as F

RTOL = 1e-7
REDUCTIONS = ["mean", "sum", "none"]


def _pair(torch, array, requires_grad=True):
    return Tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad)


def _compare(torch, ours, theirs, tensors):
    """Values, and after backward with a random output gradient, every gradient."""
    close(ours, theirs, rtol=RTOL, atol=1e-14)
    g = np.random.default_rng(1).normal(size=tuple(theirs.shape))
    ours.backward(Tensor(g))
    theirs.backward(torch.tensor(g))
    for a, ta in tensors:
        close(a.grad, ta.grad, rtol=RTOL, atol=1e-14)


def _indices(rng, shape, classes, ignore_index=None):
    target = rng.integers(0, classes, size=shape)
    if ignore_index is not None and target.size > 1:
        target.flat[1] = ignore_index
    return target


# ---- cross-entropy and nll -------------------------------------------------------------------

SHAPES = [(5, 4), (3, 4, 2, 3), (4,), (2, 4, 3)]  # (N, C), (N, C, d1, d2), (C,), (N, C, d1)
CE_OPTIONS = [{}, {"weight": True}, {"label_smoothing": 0.3}, {"weight": True, "label_smoothing": 0.2},
              {"ignore_index": 2}, {"ignore_index": -100, "weight": True, "label_smoothing": 0.1}]


def _class_shape(shape):
    return shape[:1] + shape[2:] if len(shape) > 1 else ()


def _options(torch, options, classes, rng, ours=True):
    out = dict(options)
    if out.get("weight"):
        w = np.random.default_rng(7).uniform(0.5, 2.0, size=classes)
        out["weight"] = Tensor(w) if ours else torch.tensor(w)
    return out


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", CE_OPTIONS, ids=lambda o: "-".join(o) or "plain")
def test_cross_entropy_with_class_indices_is_torchs(reduction, shape, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    logits = rng.normal(size=shape) * 2
    target = _indices(rng, _class_shape(shape), shape[1 if len(shape) > 1 else 0],
                      options.get("ignore_index", -100))
    x, tx = _pair(torch, logits)
    classes = shape[1 if len(shape) > 1 else 0]
    ours = F.cross_entropy(x, lp.asarray(target), reduction=reduction, **_options(torch, options, classes, rng))
    theirs = torch.nn.functional.cross_entropy(tx, torch.tensor(target), reduction=reduction,
                                               **_options(torch, options, classes, rng, ours=False))
    _compare(torch, ours, theirs, [(x, tx)])
    module = nn.CrossEntropyLoss(reduction=reduction, **_options(torch, options, classes, rng))
    close(module(Tensor(logits), target), theirs, rtol=RTOL, atol=1e-14)  # host data as target


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", [o for o in CE_OPTIONS if "ignore_index" not in o],
                         ids=lambda o: "-".join(o) or "plain")
def test_cross_entropy_with_probabilities_is_torchs_target_gradient_too(reduction, shape, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    classes = shape[1 if len(shape) > 1 else 0]
    probs = rng.dirichlet(np.ones(classes), size=_class_shape(shape))
    probs = np.ascontiguousarray(np.moveaxis(probs, -1, 1)) if len(shape) > 1 else probs
    (x, tx), (p, tp) = _pair(torch, rng.normal(size=shape)), _pair(torch, probs)
    ours = F.cross_entropy(x, p, reduction=reduction, **_options(torch, options, classes, rng))
    theirs = torch.nn.functional.cross_entropy(tx, tp, reduction=reduction,
                                               **_options(torch, options, classes, rng, ours=False))
    _compare(torch, ours, theirs, [(x, tx), (p, tp)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", [{}, {"weight": True}, {"ignore_index": 1}, {"weight": True, "ignore_index": 0}],
                         ids=lambda o: "-".join(o) or "plain")
def test_nll_loss_is_torchs(reduction, shape, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    classes = shape[1 if len(shape) > 1 else 0]
    target = _indices(rng, _class_shape(shape), classes, options.get("ignore_index", -100))
    log_probs = np.log(rng.dirichlet(np.ones(classes), size=_class_shape(shape)))
    log_probs = np.ascontiguousarray(np.moveaxis(log_probs, -1, 1)) if len(shape) > 1 else log_probs  # torch's nll
    x, tx = _pair(torch, log_probs)
    ours = F.nll_loss(x, lp.asarray(target), reduction=reduction, **_options(torch, options, classes, rng))
    theirs = torch.nn.functional.nll_loss(tx, torch.tensor(target), reduction=reduction,
                                          **_options(torch, options, classes, rng, ours=False))
    _compare(torch, ours, theirs, [(x, tx)])
    module = nn.NLLLoss(reduction=reduction, **_options(torch, options, classes, rng))
    close(module(Tensor(log_probs), lp.asarray(target)), theirs, rtol=RTOL, atol=1e-14)


def test_every_target_ignored_gives_nan_and_zero_gradients_as_torch():
    torch = torch_or_skip()
    x, tx = _pair(torch, np.random.default_rng(0).normal(size=(3, 4)))
    ours = F.cross_entropy(x, [-100, -100, -100])
    theirs = torch.nn.functional.cross_entropy(tx, torch.tensor([-100, -100, -100]))
    assert np.isnan(ours.item()) and np.isnan(theirs.item())
    ours.backward()
    theirs.backward()
    close(x.grad, tx.grad)
    assert F.cross_entropy(Tensor(np.zeros((2, 3))), [-100, -100], reduction="sum").item() == 0.0


def test_legacy_size_average_and_reduce_as_torch():
    torch = torch_or_skip()
    logits, target = np.random.default_rng(0).normal(size=(4, 3)), np.array([0, 2, 1, 1])
    for size_average, reduce in ((None, None), (False, None), (None, False), (True, True), (False, True)):
        with warnings.catch_warnings():  # PyTorch warns that they are deprecated; LeanPass takes them silently
            warnings.simplefilter("ignore")
            reference = torch.nn.CrossEntropyLoss(size_average=size_average, reduce=reduce)
        close(nn.CrossEntropyLoss(size_average=size_average, reduce=reduce)(Tensor(logits), target),
              reference(torch.tensor(logits), torch.tensor(target)))


def test_the_fast_paths_are_one_node_and_the_old_forms_are_unchanged():
    logits = Tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]], requires_grad=True)
    assert F.cross_entropy(logits, [0, 2])._op == "cross_entropy"
    assert F.cross_entropy(logits, [[1.0, 0, 0], [0, 0, 1.0]])._op == "cross_entropy"
    assert F.cross_entropy(logits, [0, 2]).item() == nn.cross_entropy_loss(logits, [0, 2]).item()
    assert F.cross_entropy(logits, [0, 2], 1).item() == F.cross_entropy(logits, [0, 2]).item()  # 0.3's positional axis
    x = Tensor(np.arange(12.0).reshape(2, 3, 2))
    assert F.cross_entropy(x, [[0, 1], [2, 0]], axis=1).item() == F.cross_entropy(x, [[0, 1], [2, 0]]).item()
    assert nn.mse_loss(Tensor([1.0, 2.0]), [1.5, 2.5]).item() == 0.25
    assert nn.binary_cross_entropy_loss(Tensor([1e4, -1e4]), [0.0, 1.0]).item() == 10000.0
    with pytest.raises(ValueError, match="cross_entropy_loss: class indices"):
        nn.cross_entropy_loss(logits, [0, -100])  # LeanPass's own form has no ignore_index


# ---- element-wise losses ---------------------------------------------------------------------

ELEMENTWISE = {
    "mse_loss": [{}, {"weight": True}],
    "l1_loss": [{}, {"weight": True}],
    "smooth_l1_loss": [{}, {"beta": 0.5}, {"beta": 0.0}, {"beta": 3.0}],
    "huber_loss": [{}, {"delta": 0.7}, {"delta": 2.5, "weight": True}],
}
MODULES = {"mse_loss": "MSELoss", "l1_loss": "L1Loss", "smooth_l1_loss": "SmoothL1Loss", "huber_loss": "HuberLoss"}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, options", [(n, o) for n, os in ELEMENTWISE.items() for o in os],
                         ids=lambda v: v if isinstance(v, str) else "-".join(v) or "plain")
def test_elementwise_losses_are_torchs_target_gradient_too(reduction, name, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    prediction, target = rng.normal(size=(4, 3)) * 2, rng.normal(size=(4, 3)) * 2
    prediction[0, 0], prediction[0, 1] = target[0, 0], target[0, 1] + options.get("beta", options.get("delta", 1.0))
    (x, tx), (t, tt) = _pair(torch, prediction), _pair(torch, target)
    kwargs, tkwargs = dict(options), dict(options)
    if options.get("weight"):
        w = rng.uniform(0.2, 2.0, size=(4, 3))
        kwargs["weight"], tkwargs["weight"] = Tensor(w), torch.tensor(w)
    ours = getattr(F, name)(x, t, reduction=reduction, **kwargs)
    theirs = getattr(torch.nn.functional, name)(tx, tt, reduction=reduction, **tkwargs)
    _compare(torch, ours, theirs, [(x, tx), (t, tt)])
    if "weight" not in options:
        module = getattr(nn, MODULES[name])(reduction=reduction, **options)
        assert repr(module) == repr(getattr(torch.nn, MODULES[name])(reduction=reduction, **options))
        close(module(Tensor(prediction), Tensor(target)), theirs, rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("options", [{}, {"weight": (3,)}, {"pos_weight": (3,)},
                                     {"weight": (4, 1), "pos_weight": (3,)}], ids=lambda o: "-".join(o) or "plain")
def test_binary_cross_entropy_with_logits_is_torchs(reduction, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    (x, tx), (t, tt) = _pair(torch, rng.normal(size=(4, 3)) * 4), _pair(torch, rng.uniform(size=(4, 3)))
    kwargs = {k: rng.uniform(0.3, 3.0, size=shape) for k, shape in options.items()}
    ours = F.binary_cross_entropy_with_logits(x, t, reduction=reduction, **{k: Tensor(v) for k, v in kwargs.items()})
    theirs = torch.nn.functional.binary_cross_entropy_with_logits(tx, tt, reduction=reduction,
                                                                  **{k: torch.tensor(v) for k, v in kwargs.items()})
    _compare(torch, ours, theirs, [(x, tx), (t, tt)])
    module = nn.BCEWithLogitsLoss(reduction=reduction, **{k: Tensor(v) for k, v in kwargs.items()})
    reference = torch.nn.BCEWithLogitsLoss(reduction=reduction, **{k: torch.tensor(v) for k, v in kwargs.items()})
    assert sorted(module.state_dict()) == sorted(reference.state_dict())
    close(module(x.detach(), t.detach()), theirs)
    assert nn.binary_cross_entropy_loss(x.detach(), t.detach(), reduction=reduction,
                                        **{k: Tensor(v) for k, v in kwargs.items()}).shape == tuple(theirs.shape)


def test_losses_are_finite_for_huge_logits_and_differences():
    huge = Tensor([1e4, -1e4])
    assert F.binary_cross_entropy_with_logits(huge, [0.0, 1.0], pos_weight=Tensor([2.0])).item() == 15000.0
    assert F.cross_entropy(Tensor([[1e4, -1e4]]), [1], label_smoothing=0.5).item() == pytest.approx(15000.0)
    assert F.huber_loss(Tensor([1e200]), [0.0]).item() == pytest.approx(1e200)  # the square is never formed
    assert F.smooth_l1_loss(Tensor([-1e200]), [0.0], beta=2.0).item() == pytest.approx(1e200)


# ---- modules and their state dicts ----------------------------------------------------------


def test_loss_modules_keep_weights_as_buffers_in_torchs_state_dict():
    torch = torch_or_skip()
    w = np.array([0.5, 1.0, 2.0])
    ours, theirs = nn.CrossEntropyLoss(weight=Tensor(w)), torch.nn.CrossEntropyLoss(weight=torch.tensor(w))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert list(nn.CrossEntropyLoss().state_dict()) == list(torch.nn.CrossEntropyLoss().state_dict()) == []
    assert nn.CrossEntropyLoss(weight=Tensor(w)).parameters() == []
    fresh = nn.CrossEntropyLoss(weight=Tensor(np.ones(3)))
    fresh.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    logits, target = np.random.default_rng(0).normal(size=(5, 3)), np.array([0, 1, 2, 2, 1])
    close(fresh(Tensor(logits), target), theirs(torch.tensor(logits), torch.tensor(target)))
    assert repr(ours) == "CrossEntropyLoss()" and repr(nn.HuberLoss()) == repr(torch.nn.HuberLoss())
    moved = nn.NLLLoss(weight=Tensor(w)).to("strict")
    assert moved.weight.device == "strict"


def test_a_float32_loss_stays_float32():
    x = Tensor(np.random.default_rng(0).normal(size=(4, 3)), dtype="float32", requires_grad=True)
    losses = [F.cross_entropy(x, [0, 1, 2, -100], weight=Tensor([1.0, 2.0, 3.0]), label_smoothing=0.1),
              F.nll_loss(x, [0, 1, 2, 1], reduction="sum"), F.mse_loss(x, np.zeros((4, 3)), reduction="sum"),
              F.l1_loss(x, np.zeros((4, 3))), F.smooth_l1_loss(x, np.zeros((4, 3))), F.huber_loss(x, np.zeros((4, 3))),
              F.binary_cross_entropy_with_logits(x, np.ones((4, 3)), pos_weight=Tensor([2.0, 1.0, 1.0]))]
    for loss in losses:
        loss.backward()
        assert loss.dtype == "float32" and x.grad.dtype == np.float32


# ---- every device ------------------------------------------------------------------------------


def _device_cases(device):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 2))
    labels = lp.asarray(np.array([[0, 3], [-100, 2], [1, 1]]), device=device)
    probs = np.moveaxis(rng.dirichlet(np.ones(4), size=(3, 2)), -1, 1)
    w = Tensor([0.5, 1.0, 1.5, 2.0], device=device)
    other = rng.normal(size=(3, 4, 2))
    return {
        "ce-index": (lambda a: F.cross_entropy(a, labels, weight=w, label_smoothing=0.2), [logits]),
        "ce-index-sum": (lambda a: F.cross_entropy(a, labels, reduction="sum"), [logits]),
        "ce-prob": (lambda a, p: F.cross_entropy(a, p, weight=w, label_smoothing=0.1, reduction="none"),
                    [logits, probs]),
        "nll": (lambda a: F.nll_loss(a.log_softmax(1), labels, weight=w), [logits]),
        "mse": (lambda a, b: F.mse_loss(a, b, weight=Tensor(np.ones((3, 4, 2)) * 0.5, device=device)), [logits, other]),
        "l1": (lambda a, b: F.l1_loss(a, b, reduction="sum"), [logits, other]),
        "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.5, reduction="none"), [logits, other]),
        "huber": (lambda a, b: F.huber_loss(a, b, delta=0.8), [logits, other]),
        "bce": (lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight=w[:2], pos_weight=Tensor(
            [2.0, 0.5], device=device)), [logits, rng.uniform(size=(3, 4, 2))]),
    }


@pytest.mark.parametrize("case", ["ce-index", "ce-index-sum", "ce-prob", "nll", "mse", "l1", "smooth_l1", "huber",
                                  "bce"])
def test_gradcheck_on_every_device(device, case):
    fn, arrays = _device_cases(device)[case]
    inputs = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("case", ["ce-index", "ce-prob", "bce"])
def test_results_agree_across_devices(device, case):
    cpu_fn, arrays = _device_cases("cpu")[case]
    fn, _ = _device_cases(device)[case]
    np.testing.assert_allclose(host(fn(*[Tensor(a, device=device) for a in arrays])),
                               host(cpu_fn(*[Tensor(a) for a in arrays])), rtol=1e-12)


class _NoSync(StrictBackend):
    """A CPU device whose reads cost a wait, as a GPU's: class indices are not checked."""

    device_type = "nosync"
    always_index = True
    syncs_cheaply = False
    xp = type("xp", (), {k: staticmethod(v) if callable(v) else v for k, v in vars(array_api_strict).items()
                         if not k.startswith("__")})


def test_on_a_device_that_cannot_check_indices_ignored_ones_count_for_nothing_and_invalid_ones_give_nan():
    with registered("nosync", _NoSync, "nosync_arrays"):
        logits = np.random.default_rng(0).normal(size=(4, 3))
        for target in ([0, -100, 2, 1], [0, 5, 2, 1], [0, -1, 2, 1]):
            x = Tensor(logits, requires_grad=True, device="nosync")
            loss = F.cross_entropy(x, lp.asarray(target, device="nosync"), label_smoothing=0.1)
            if -100 in target:
                expected = F.cross_entropy(Tensor(logits), target, label_smoothing=0.1)
                assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
                loss.backward()
                assert np.all(host(x.grad)[1] == 0)
            else:
                assert np.isnan(loss.item())
        loss = F.nll_loss(Tensor(logits, device="nosync"), lp.asarray([0, 1, 2, -100], device="nosync"))
        assert loss.item() == pytest.approx(F.nll_loss(Tensor(logits), [0, 1, 2, -100]).item(), rel=1e-12)


# ---- bad input -----------------------------------------------------------------------------------


BAD = [
    (lambda x: F.cross_entropy(x, [0, 1]), ValueError, ["cross_entropy", "(2,)", "(3, 4)", "(3,)"]),
    (lambda x: F.cross_entropy(x, [0, 1, 4]), ValueError, ["cross_entropy", "[0, 4)"]),
    (lambda x: F.cross_entropy(x, [0, 1, 2], reduction="avg"), ValueError, ["cross_entropy", "reduction", "avg"]),
    (lambda x: F.cross_entropy(x, [0, 1, 2], label_smoothing=1.5), ValueError, ["cross_entropy", "label_smoothing"]),
    (lambda x: F.cross_entropy(x, [0, 1, 2], weight=Tensor(np.ones(3))), ValueError,
     ["cross_entropy", "weight", "(3,)", "(3, 4)", "4 classes"]),
    (lambda x: F.cross_entropy(x, [0, 1, 2], ignore_index=1.5), TypeError, ["cross_entropy", "ignore_index"]),
    (lambda x: F.cross_entropy(x, Tensor([0.0, 1.0, 2.0], device="strict")), ValueError,
     ["cross_entropy", "cpu", "strict"]),
    (lambda x: F.cross_entropy([[1.0]], [0]), TypeError, ["cross_entropy", "Tensor"]),
    (lambda x: F.cross_entropy(x, np.array(["a", "b", "c"])), TypeError, ["cross_entropy"]),
    (lambda x: F.nll_loss(x, np.zeros((3, 4))), ValueError, ["nll_loss", "(3, 4)", "(3,)"]),
    (lambda x: F.nll_loss(x, [0, 1, 2], weight=[1.0, 2.0]), ValueError, ["nll_loss", "weight", "(2,)"]),
    (lambda x: F.mse_loss(x, np.zeros((4, 3))), ValueError, ["mse_loss", "(3, 4)", "(4, 3)"]),
    (lambda x: F.mse_loss(x, np.zeros((3, 4)), weight=Tensor(np.ones(4))), ValueError, ["mse_loss", "weight", "(4,)"]),
    (lambda x: F.l1_loss(x, np.zeros((3, 4)), reduction=None), ValueError, ["l1_loss", "reduction"]),
    (lambda x: F.smooth_l1_loss(x, np.zeros((3, 4)), beta=-1.0), ValueError, ["smooth_l1_loss", "beta", "-1.0"]),
    (lambda x: F.huber_loss(x, np.zeros((3, 4)), delta=0.0), ValueError, ["huber_loss", "delta"]),
    (lambda x: F.huber_loss(x, np.zeros((3, 5))), ValueError, ["huber_loss", "(3, 4)", "(3, 5)"]),
    (lambda x: F.binary_cross_entropy_with_logits(x, np.zeros((3, 1))), ValueError,
     ["binary_cross_entropy_with_logits", "(3, 4)", "(3, 1)"]),
    (lambda x: F.binary_cross_entropy_with_logits(x, np.zeros((3, 4)), pos_weight=Tensor(np.ones(3))), ValueError,
     ["binary_cross_entropy_with_logits", "pos_weight", "(3,)", "(3, 4)"]),
    (lambda x: F.binary_cross_entropy_with_logits(x, np.zeros((3, 4)), weight="w"), TypeError,
     ["binary_cross_entropy_with_logits", "weight"]),
    (lambda x: nn.CrossEntropyLoss(reduction="avg"), ValueError, ["CrossEntropyLoss", "reduction"]),
    (lambda x: nn.CrossEntropyLoss(label_smoothing=-0.1), ValueError, ["CrossEntropyLoss", "label_smoothing"]),
    (lambda x: nn.SmoothL1Loss(beta=-2), ValueError, ["SmoothL1Loss", "beta"]),
    (lambda x: nn.HuberLoss(delta=-1), ValueError, ["HuberLoss", "delta"]),
    (lambda x: nn.NLLLoss(ignore_index=None), TypeError, ["NLLLoss", "ignore_index"]),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_input_raises_naming_the_function_and_the_shapes_and_changes_nothing(index):
    call, error, parts = BAD[index]
    x = Tensor(np.arange(12.0).reshape(3, 4) / 10, requires_grad=True)
    (x * x).sum().backward()
    before, grad = x.numpy().copy(), x.grad.copy()
    with pytest.raises(error) as info:
        call(x)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(x.grad, grad)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "float32"])
def test_class_indices_of_any_width_on_every_device(device, dtype):
    """-100 (the default ignore_index) is no uint8 value: nothing is ignored, no error."""
    logits = np.random.default_rng(0).normal(size=(3, 4))
    expected = F.cross_entropy(Tensor(logits), [0, 3, 1]).item()
    target = lp.asarray(np.array([0, 3, 1]), dtype=dtype, device=device)
    assert F.cross_entropy(Tensor(logits, device=device), target).item() == pytest.approx(expected, rel=1e-12)
    assert F.nll_loss(Tensor(logits, device=device), target, ignore_index=3).item() == pytest.approx(
        F.nll_loss(Tensor(logits), [0, -100, 1]).item(), rel=1e-12)
    with registered("nosync", _NoSync, "nosync_arrays"):
        on_nosync = F.cross_entropy(Tensor(logits, device="nosync"), lp.asarray(host(target), device="nosync"))
        assert on_nosync.item() == pytest.approx(expected, rel=1e-12)
