"""``nn.GroupNorm``/``F.group_norm``, ``nn.Upsample``/``F.interpolate``, ``F.pad`` and
``F.one_hot`` (issue 28, item 3) as PyTorch's: outputs and the gradients of input
and parameters from the same state dict in float64, gradcheck on every device,
second derivatives, the W8 benchmark row, and bad input that raises naming the
function and the shapes and changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass as lp
from leanpass import Tensor, gradcheck, nn
from leanpass.nn import functional as F

RTOL = 1e-7


def _backward_both(torch, y, ty, seed=1):
    g = np.random.default_rng(seed).normal(size=tuple(ty.shape))
    y.backward(Tensor(g, device=y.device))
    ty.backward(torch.tensor(g))


# ---- GroupNorm -------------------------------------------------------------------------------------

GN_CASES = [((4, 6, 5), 3, {}), ((2, 8, 3, 4), 2, {}), ((3, 4), 4, {}), ((2, 6, 2, 2, 3), 1, {"affine": False}),
            ((2, 6, 7), 6, {"bias": False}), ((1, 4, 9), 2, {"eps": 1e-3})]


@pytest.mark.parametrize("shape, groups, options", GN_CASES, ids=str)
def test_group_norm_is_torchs_from_the_same_state_dict(shape, groups, options):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    channels = shape[1]
    ours = nn.GroupNorm(groups, channels, dtype="float64", **options)
    theirs = torch.nn.GroupNorm(groups, channels, dtype=torch.float64, **options)
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    state = {k: rng.normal(size=v.shape) for k, v in theirs.state_dict().items()}
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    ours.load_state_dict(state)
    data = rng.normal(size=shape) * 3 + 50  # a large mean: the variance is taken from centred values
    x, tx = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    close(y, ty, rtol=RTOL, atol=1e-12)
    _backward_both(torch, y, ty)
    close(x.grad, tx.grad, rtol=RTOL, atol=1e-10)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad, rtol=RTOL, atol=1e-10)  # one value per group: xhat is 0, PyTorch's +-1e-12


def test_group_norm_function_and_second_derivatives_are_torchs():
    torch = torch_or_skip()
    rng = np.random.default_rng(2)
    arrays = [rng.normal(size=(3, 6, 4)), rng.normal(size=6), rng.normal(size=6)]
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = F.group_norm(ours[0], 3, ours[1], ours[2])
    ty = torch.nn.functional.group_norm(theirs[0], 3, theirs[1], theirs[2])
    close(y, ty, rtol=RTOL)
    v = rng.normal(size=(3, 6, 4))
    grads = lp.autograd.grad(((y * y).sum()), ours, create_graph=True)
    tgrads = torch.autograd.grad(((ty * ty).sum()), theirs, create_graph=True)
    (grads[0] * Tensor(v)).sum().backward()
    (tgrads[0] * torch.tensor(v)).sum().backward()
    for a, ta in zip(ours, theirs):
        close(a.grad, ta.grad, rtol=1e-6, atol=1e-10)
    close(F.group_norm(ours[0], 2, bias=ours[2]), torch.nn.functional.group_norm(theirs[0], 2, bias=theirs[2]))


@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_group_norm_gradcheck_on_every_device(device, affine):
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(2, 4, 3)) * 2 + 1, requires_grad=True, device=device)
    w = Tensor(rng.normal(size=4), requires_grad=True, device=device)
    b = Tensor(rng.normal(size=4), requires_grad=True, device=device)
    if affine == "both":
        assert gradcheck(lambda a, c, d: F.group_norm(a, 2, c, d), [x, w, b])
    elif affine == "weight":
        assert gradcheck(lambda a, c: F.group_norm(a, 2, c), [x, w])
    else:
        assert gradcheck(lambda a: F.group_norm(a, 4), [x])


def test_group_norm_keeps_float32_and_moves_with_the_model():
    layer = nn.GroupNorm(2, 4, dtype="float32")
    x = Tensor(np.random.default_rng(0).normal(size=(2, 4, 5)), dtype="float32", requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert y.dtype == "float32" and x.grad.dtype == np.float32 and layer.weight.grad.dtype == np.float32
    layer.to("strict")
    z = layer(Tensor(x.numpy(), device="strict"))
    np.testing.assert_allclose(host(z), y.numpy(), rtol=1e-6)
    empty = F.group_norm(Tensor(np.zeros((0, 4, 3))), 2, Tensor(np.ones(4)), Tensor(np.zeros(4)))
    assert empty.shape == (0, 4, 3)


# ---- interpolate and Upsample -----------------------------------------------------------------------

INTERP_CASES = []
for _mode, _shapes in (("nearest", [(2, 3, 5), (2, 3, 5, 4)]), ("linear", [(2, 3, 5)]), ("bilinear", [(2, 3, 5, 4)])):
    for _shape in _shapes:
        _dim = len(_shape) - 2
        for _ac in ([None] if _mode == "nearest" else [False, True]):
            for _spec in ({"size": 9}, {"size": (7, 3)[:_dim]}, {"scale_factor": 2}, {"scale_factor": 1.5},
                          {"scale_factor": 0.6}, {"scale_factor": (2.5, 0.75)[:_dim]},
                          {"scale_factor": 2.3, "recompute_scale_factor": True}, {"size": _shape[2:]}):
                INTERP_CASES.append((_mode, _shape, _ac, _spec))


@pytest.mark.parametrize("mode, shape, align_corners, spec", INTERP_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_interpolate_is_torchs(mode, shape, align_corners, spec, dtype):
    torch = torch_or_skip()
    data = np.random.default_rng(0).normal(size=shape).astype(dtype)
    x, tx = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    y = F.interpolate(x, mode=mode, align_corners=align_corners, **spec)
    ty = torch.nn.functional.interpolate(tx, mode=mode, align_corners=align_corners, **spec)
    tol = RTOL if dtype == "float64" else 1e-5
    assert y.dtype == dtype and y.shape == tuple(ty.shape)
    close(y, ty, rtol=tol, atol=tol)
    _backward_both(torch, y, ty)
    close(x.grad, tx.grad, rtol=tol, atol=tol)


def test_upsample_is_interpolate_and_prints_as_torchs():
    torch = torch_or_skip()
    data = np.random.default_rng(0).normal(size=(1, 2, 3, 4))
    for kwargs in ({"scale_factor": 2}, {"size": (5, 7), "mode": "bilinear", "align_corners": True},
                   {"scale_factor": (2, 1.5), "mode": "bilinear"}, {"size": 6}):
        ours, theirs = nn.Upsample(**kwargs), torch.nn.Upsample(**kwargs)
        assert repr(ours) == repr(theirs)
        close(ours(Tensor(data)), theirs(torch.tensor(data)), rtol=RTOL)
    assert nn.Upsample(scale_factor=3, mode="linear")(Tensor(np.ones((1, 1, 2)))).shape == (1, 1, 6)


def test_nearest_1d_gradient_is_its_forwards():
    """PyTorch's 1-D nearest forward and backward take different indices where the
    scale factor makes them differ (its backward is not its forward's gradient):
    LeanPass's values are PyTorch's, and its gradient is the true one."""
    torch = torch_or_skip()
    data = np.arange(5.0).reshape(1, 1, 5)
    y = F.interpolate(Tensor(data, requires_grad=True), scale_factor=1.128)
    close(y, torch.nn.functional.interpolate(torch.tensor(data), scale_factor=1.128))
    x = Tensor(data, requires_grad=True)
    F.interpolate(x, scale_factor=1.128).sum().backward()
    assert x.grad.ravel().tolist() == [2.0, 1.0, 1.0, 1.0, 0.0]  # index 0 taken twice, 4 never


@pytest.mark.parametrize("mode, size, align_corners", [("nearest", (5, 3), None), ("bilinear", (5, 3), False),
                                                       ("bilinear", (2, 7), True)])
def test_interpolate_gradcheck_on_every_device(device, mode, size, align_corners):
    x = Tensor(np.random.default_rng(0).normal(size=(1, 2, 3, 4)), requires_grad=True, device=device)
    assert gradcheck(lambda a: F.interpolate(a, size=size, mode=mode, align_corners=align_corners), [x])
    line = Tensor(np.random.default_rng(1).normal(size=(2, 1, 4)), requires_grad=True, device=device)
    assert gradcheck(lambda a: F.interpolate(a, scale_factor=1.75, mode="linear"), [line])


# ---- pad and one_hot -------------------------------------------------------------------------------

PAD_CASES = [
    ("constant", (2, 3), (1, 2)), ("constant", (2, 3, 4), (0, 1, 2, -1, 1, 1)), ("constant", (2, 5), (-2, 1)),
    ("reflect", (1, 2, 5), (2, 3)), ("reflect", (2, 3, 4, 5), (1, 2, 3, 0)), ("reflect", (2, 6), (-1, 2)),
    ("reflect", (1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2)), ("replicate", (1, 2, 5), (3, 4)),
    ("replicate", (2, 3, 4, 5), (2, -1, 0, 3)), ("replicate", (2, 2, 3, 4), (1, 2, 3, 1, 1, 0)),
    ("circular", (1, 2, 5), (2, 5)), ("circular", (2, 3, 4, 5), (1, 2, 3, 4)), ("circular", (1, 2, 6), (3, -2)),
    ("circular", (2, 2, 3, 4), (1, 1, 2, 0, 2, 1)),
]


@pytest.mark.parametrize("mode, shape, pad", PAD_CASES, ids=str)
def test_pad_is_torchs(mode, shape, pad):
    torch = torch_or_skip()
    data = np.random.default_rng(0).normal(size=shape)
    x, tx = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    kwargs = {"value": 2.5} if mode == "constant" else {}
    y, ty = F.pad(x, pad, mode=mode, **kwargs), torch.nn.functional.pad(tx, pad, mode=mode, **kwargs)
    assert y.shape == tuple(ty.shape)
    close(y, ty, rtol=0, atol=0)
    _backward_both(torch, y, ty)
    close(x.grad, tx.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_gradcheck_on_every_device(device, mode):
    x = Tensor(np.random.default_rng(0).normal(size=(1, 2, 3, 4)), requires_grad=True, device=device)
    assert gradcheck(lambda a: F.pad(a, (2, 1, 1, 2), mode=mode), [x])


def test_pad_keeps_integer_dtypes_as_torch():
    torch = torch_or_skip()
    ints = np.arange(4).reshape(1, 1, 4)
    for mode, kwargs in (("constant", {"value": 2.7}), ("reflect", {}), ("circular", {})):
        ours, theirs = F.pad(lp.asarray(ints), (1, 2), mode=mode, **kwargs), torch.nn.functional.pad(
            torch.tensor(ints), (1, 2), mode=mode, **kwargs)
        assert ours.dtype == "int64" and ours.numpy().tolist() == theirs.numpy().tolist()
    x = Tensor([1.0, 2.0])
    assert F.pad(x, (0, 0)) is not x and F.pad(x, (0, 0)).numpy().tolist() == [1.0, 2.0]


def test_one_hot_is_torchs(device):
    torch = torch_or_skip()
    labels = np.array([[0, 2], [1, 3]])
    ours = F.one_hot(lp.asarray(labels, device=device))
    assert ours.dtype == "int64" and ours.device == device
    np.testing.assert_array_equal(host(ours), torch.nn.functional.one_hot(torch.tensor(labels)).numpy())
    np.testing.assert_array_equal(host(F.one_hot(lp.asarray(labels, dtype="int32", device=device), 6)),
                                  torch.nn.functional.one_hot(torch.tensor(labels), 6).numpy())
    assert F.one_hot(lp.asarray(np.zeros(0, dtype=np.int64), device=device), 3).shape == (0, 3)
    assert F.one_hot(lp.asarray(2, device=device), 4).numpy().tolist() == [0, 0, 1, 0]


# ---- the benchmark row ------------------------------------------------------------------------------


def test_the_w8_benchmark_row_runs_and_checks_against_torch(tmp_path):
    torch_or_skip()
    pytest.importorskip("threadpoolctl", reason="benchmarks/run.py needs threadpoolctl (the bench extra)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import run

    results = run.main(["--only", "W8", "--rounds", "1", "--threads", "1"])
    assert set(results["W8"]["float32/1"]) == {"pytorch", "leanpass"}


# ---- bad input -------------------------------------------------------------------------------------------

BAD = [
    (lambda x: F.group_norm(x, 3), ValueError, ["group_norm", "4 channels", "(2, 4, 3)", "num_groups=3"]),
    (lambda x: F.group_norm(x, 2, Tensor(np.ones(3))), ValueError, ["group_norm", "weight", "(3,)", "(2, 4, 3)"]),
    (lambda x: F.group_norm(x, 0), ValueError, ["group_norm", "num_groups"]),
    (lambda x: F.group_norm(x[0, 0], 1), ValueError, ["group_norm", "(3,)"]),
    (lambda x: F.group_norm(x, 2, Tensor(np.ones(4), device="strict")), ValueError, ["group_norm", "strict", "cpu"]),
    (lambda x: nn.GroupNorm(3, 4), ValueError, ["GroupNorm", "num_channels", "num_groups"]),
    (lambda x: nn.GroupNorm(2, 4)(Tensor(np.ones((2, 6, 3)))), ValueError, ["GroupNorm", "(2, 6, 3)", "4"]),
    (lambda x: F.interpolate(x, size=5, scale_factor=2), ValueError, ["interpolate", "size", "scale_factor"]),
    (lambda x: F.interpolate(x), ValueError, ["interpolate", "size", "scale_factor"]),
    (lambda x: F.interpolate(x, size=(4, 5)), ValueError, ["interpolate", "size", "(4, 5)", "1"]),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), ValueError, ["interpolate", "bilinear", "(2, 4, 3)"]),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), ValueError, ["interpolate", "bicubic"]),
    (lambda x: F.interpolate(x, scale_factor=2, align_corners=True), ValueError, ["interpolate", "align_corners"]),
    (lambda x: F.interpolate(x, scale_factor=0.1), ValueError, ["interpolate", "(2, 4, 3)", "(0,)"]),
    (lambda x: F.interpolate(x, scale_factor=-1), ValueError, ["interpolate", "scale_factor"]),
    (lambda x: F.interpolate(x, size=2.5), TypeError, ["interpolate", "size"]),
    (lambda x: F.interpolate(x, size=4, recompute_scale_factor=True), ValueError, ["interpolate", "recompute"]),
    (lambda x: F.interpolate(x[0], size=4), ValueError, ["interpolate", "(4, 3)"]),
    (lambda x: nn.Upsample(scale_factor=2, mode="area"), ValueError, ["Upsample", "area"]),
    (lambda x: F.pad(x, (1,)), ValueError, ["pad", "divisible by 2"]),
    (lambda x: F.pad(x, (1, 1, 1, 1, 1, 1, 1, 1)), ValueError, ["pad", "(2, 4, 3)"]),
    (lambda x: F.pad(x, (1.5, 1)), TypeError, ["pad", "integers"]),
    (lambda x: F.pad(x, (1, 1), mode="mirror"), ValueError, ["pad", "mirror"]),
    (lambda x: F.pad(x, (3, 1), mode="reflect"), ValueError, ["pad", "reflect", "(3, 1)", "size 3"]),
    (lambda x: F.pad(x, (1, 1), mode="reflect", value=1.0), ValueError, ["pad", "reflect", "value"]),
    (lambda x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate"), ValueError, ["pad", "replicate", "(2, 4, 3)"]),
    (lambda x: F.pad(x, (4, 0), mode="circular"), ValueError, ["pad", "circular", "more than once"]),
    (lambda x: F.pad(x, (-4, 0)), ValueError, ["pad", "(-4, 0)", "size 3"]),
    (lambda x: F.one_hot(x), TypeError, ["one_hot", "integers", "float64"]),
    (lambda x: F.one_hot(lp.asarray([0, -1])), ValueError, ["one_hot", "non-negative"]),
    (lambda x: F.one_hot(lp.asarray([0, 3]), 3), ValueError, ["one_hot", "num_classes", "3"]),
    (lambda x: F.one_hot(lp.asarray(np.zeros(0, dtype=np.int64))), ValueError, ["one_hot", "empty"]),
    (lambda x: F.one_hot([0, 1]), TypeError, ["one_hot", "Tensor"]),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_input_raises_naming_the_function_and_the_shapes_and_changes_nothing(index):
    call, error, parts = BAD[index]
    x = Tensor(np.arange(24.0).reshape(2, 4, 3) / 10, requires_grad=True)
    (x * x).sum().backward()
    before, grad = x.numpy().copy(), x.grad.copy()
    with pytest.raises(error) as info:
        call(x)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(x.grad, grad)
