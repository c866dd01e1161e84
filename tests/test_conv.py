"""Conv1d, Conv2d, conv1d, conv2d and the unfold / fold operations: PyTorch's values
and gradients, second derivatives, adjointness, the torch state_dict layout, and
errors that change nothing."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass
from leanpass import Tensor, nn, ops
from leanpass.nn import functional as F
from leanpass.tensor import apply

RTOL = 1e-10


def same_outputs_and_gradients(torch, y, ty, ours, theirs, rng, device):
    """``y`` and PyTorch's ``ty`` agree, and so do the inputs' gradients after one
    random output gradient goes back through both."""
    close(y, ty)
    g = rng.normal(size=y.shape)
    y.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    for a, t in zip(ours, theirs):
        close(a.grad, t.grad)



# (stride, padding, dilation, groups, bias) for 2-D; the 1-D cases take each tuple's first entry
CASES = [
    (1, 0, 1, 1, True),
    (2, 1, 1, 1, False),
    ((2, 1), (0, 2), (1, 2), 1, True),
    (1, "same", (2, 1), 2, True),
    (1, "valid", 1, 3, False),
    ((1, 3), (2, 1), 2, 6, True),
]


def first(v):
    return v[0] if isinstance(v, tuple) else v


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("batched", [True, False])
def test_conv_matches_torch(device, dims, case, batched):
    torch = torch_or_skip()
    stride, padding, dilation, groups, bias = case if dims == 2 else tuple(map(first, case))
    rng = np.random.default_rng(0)
    kernel = (3, 2) if dims == 2 else (3,)  # non-square
    size = (9, 8) if dims == 2 else (11,)
    x = rng.normal(size=((2,) if batched else ()) + (6, *size))
    w = rng.normal(size=(12, 6 // groups, *kernel))
    b = rng.normal(size=12) if bias else None
    arrays = [a for a in (x, w, b) if a is not None]
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    f = F.conv2d if dims == 2 else F.conv1d
    tf = torch.nn.functional.conv2d if dims == 2 else torch.nn.functional.conv1d
    y = f(*ours, stride=stride, padding=padding, dilation=dilation, groups=groups)
    with warnings.catch_warnings():  # torch warns that "same" with an even kernel pads a copy
        warnings.simplefilter("ignore", UserWarning)
        ty = tf(*theirs, stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert y.shape == tuple(ty.shape)
    same_outputs_and_gradients(torch, y, ty, ours, theirs, rng, device)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("dims", [1, 2])
def test_layer_matches_torch_with_its_seeded_initialisation_and_padding_modes(device, mode, dims):
    torch = torch_or_skip()
    cls, tcls = (nn.Conv2d, torch.nn.Conv2d) if dims == 2 else (nn.Conv1d, torch.nn.Conv1d)
    leanpass.manual_seed(3)
    layer = cls(4, 6, 3, padding=2, groups=2, padding_mode=mode, device=device, dtype="float64")
    fan_in = 2 * 3 ** dims
    for p in (layer.weight, layer.bias):  # U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        assert float(np.abs(host(p)).max()) <= fan_in ** -0.5
    leanpass.manual_seed(3)
    again = cls(4, 6, 3, padding=2, groups=2, padding_mode=mode, device=device, dtype="float64")
    close(again.weight, layer.weight, rtol=0)
    ref = tcls(4, 6, 3, padding=2, groups=2, padding_mode=mode, dtype=torch.float64)
    ref.load_state_dict({k: torch.tensor(host(v)) for k, v in layer.state_dict(layout="torch").items()})
    x = np.random.default_rng(1).normal(size=(2, 4) + (7,) * dims)
    ours, theirs = Tensor(x, requires_grad=True, device=device), torch.tensor(x, requires_grad=True)
    y, ty = layer(ours), ref(theirs)
    close(y, ty)
    y.sum().backward()
    ty.sum().backward()
    close(ours.grad, theirs.grad)
    close(layer.weight.grad, ref.weight.grad)
    close(layer.bias.grad, ref.bias.grad)


def test_state_dict_torch_layout_round_trip(device):
    torch = torch_or_skip()
    ref = torch.nn.Conv2d(3, 4, (3, 2), dtype=torch.float64)
    layer = nn.Conv2d(3, 4, (3, 2), device=device, dtype="float64")
    layer.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()}, layout="torch")
    state = layer.state_dict(layout="torch")
    assert set(state) == {"weight", "bias"} and tuple(state["weight"].shape) == (4, 3, 3, 2)
    for k, v in ref.state_dict().items():
        close(state[k], v, rtol=0)
    back = torch.nn.Conv2d(3, 4, (3, 2), dtype=torch.float64)
    back.load_state_dict({k: torch.tensor(host(v)) for k, v in state.items()})
    x = np.random.default_rng(2).normal(size=(1, 3, 6, 5))
    close(layer(Tensor(x, device=device)), back(torch.tensor(x)))


@pytest.mark.parametrize("dims", [1, 2])
def test_gradcheck_and_gradgradcheck(device, dims):
    rng = np.random.default_rng(4)
    size = (5, 4) if dims == 2 else (6,)
    x = Tensor(rng.normal(size=(2, 2, *size)), requires_grad=True, device=device)
    w = Tensor(rng.normal(size=(2, 1) + (2,) * dims), requires_grad=True, device=device)
    b = Tensor(rng.normal(size=2), requires_grad=True, device=device)
    f = F.conv2d if dims == 2 else F.conv1d

    def fn(x, w, b):
        return f(x, w, b, stride=2, padding=1, dilation=1, groups=2).tanh()  # tanh: a non-zero Hessian

    assert leanpass.gradcheck(fn, (x, w, b))
    assert leanpass.gradgradcheck(fn, (x, w, b))


@pytest.mark.parametrize("wanted", ["x", "w", "b", "x and b"])
def test_gradients_of_some_inputs_only_and_a_non_contiguous_incoming_gradient_match_torch(device, wanted):
    # the conv node skips the input's (or the weight's) gradient when nobody needs it, and
    # the gradient arriving may be any strided view (here a transpose's)
    torch = torch_or_skip()
    rng = np.random.default_rng(6)
    arrays = rng.normal(size=(3, 4, 7, 6)), rng.normal(size=(6, 2, 3, 2)), rng.normal(size=6)
    ours = [Tensor(a, requires_grad=name in wanted, device=device) for a, name in zip(arrays, "xwb")]
    theirs = [torch.tensor(a, requires_grad=name in wanted) for a, name in zip(arrays, "xwb")]
    g = rng.normal(size=(3, 6, 7, 4))
    y = F.conv2d(*ours, stride=(1, 2), padding=1, groups=2)
    leanpass.sum(leanpass.permute_dims(y, (3, 1, 2, 0)) * Tensor(g.transpose(3, 1, 2, 0), device=device)).backward()
    ty = torch.nn.functional.conv2d(*theirs, stride=(1, 2), padding=1, groups=2)
    close(y, ty)
    ty.backward(torch.tensor(g))
    for a, t, name in zip(ours, theirs, "xwb"):
        if name in wanted:
            close(a.grad, t.grad)
        else:
            assert a.grad is None


@pytest.mark.parametrize("dims", [1, 2])
def test_unfold_and_fold_are_adjoint_and_match_torch(device, dims):
    rng = np.random.default_rng(5)
    size = (7, 6) if dims == 2 else (9,)
    kernel, stride, dilation = (2,) * dims, (2,) * dims, (1,) + (2,) * (dims - 1)
    padding = ((1, 1),) * dims
    x = Tensor(rng.normal(size=(2, 3, *size)), requires_grad=True, device=device)
    cols = apply(ops.unfold, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    c = Tensor(rng.normal(size=cols.shape), requires_grad=True, device=device)
    folded = apply(ops.fold, c, size=size, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    assert folded.shape == x.shape
    # <unfold(x), c> == <x, fold(c)>
    np.testing.assert_allclose(float(leanpass.sum(cols * c)), float(leanpass.sum(x * folded)), rtol=1e-12)
    # each one's backward is the other
    (cols * c).sum().backward()
    close(x.grad, folded)
    c2 = Tensor(host(c), requires_grad=True, device=device)
    again = apply(ops.fold, c2, size=size, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
    (again * x).sum().backward()
    close(c2.grad, cols)
    assert leanpass.gradgradcheck(
        lambda x: apply(ops.unfold, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation) ** 2, (x,))
    if dims == 2:
        torch = torch_or_skip()
        tx = torch.tensor(host(x))
        close(cols, torch.nn.functional.unfold(tx, kernel, dilation=dilation, padding=1, stride=stride))
        close(folded, torch.nn.functional.fold(torch.tensor(host(c)), size, kernel, dilation=dilation, padding=1,
                                               stride=stride))


def test_conv_layer_trains_in_a_sequential(device):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, device=device), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 2, device=device))
    x = Tensor(np.random.default_rng(6).normal(size=(5, 1, 6, 6)), device=device)
    labels = leanpass.asarray(np.array([0, 1, 0, 1, 1]), device=device)
    opt = leanpass.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        loss = nn.cross_entropy_loss(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("make, message", [
    (lambda: nn.Conv2d(3, 4, 3, groups=2), "divisible by groups"),
    (lambda: nn.Conv2d(4, 6, 3, groups=4), "divisible by groups"),
    (lambda: nn.Conv2d(2, 4, 3, stride=0), "stride must be positive"),
    (lambda: nn.Conv1d(2, 4, 3, dilation=-1), "dilation must be positive"),
    (lambda: nn.Conv2d(2, 4, 3, padding=-1), "padding must be non-negative"),
    (lambda: nn.Conv2d(2, 4, 3, stride=2, padding="same"), "strided"),
    (lambda: nn.Conv2d(2, 4, 3, padding_mode="mirror"), "padding_mode"),
    (lambda: nn.Conv2d(0, 4, 3), "positive"),
])
def test_bad_construction_raises_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("shape, message", [
    ((3, 8), "input must have 3 .* or 4"),  # wrong rank
    ((2, 1, 3, 8, 8), "input must have 3 .* or 4"),
    ((2, 2, 8, 8), "input has 2 channels, the weight expects 3"),
    ((2, 3, 2, 8), "larger than the padded input"),
])
def test_bad_input_raises_naming_the_layer_and_changes_nothing(device, shape, message):
    layer = nn.Conv2d(3, 4, 3, dilation=(2, 1), padding=(1, 0), device=device, dtype="float64")
    before = {k: host(v).copy() for k, v in layer.state_dict().items()}
    x = Tensor(np.ones(shape), requires_grad=True, device=device)
    with pytest.raises(ValueError, match=message) as info:
        layer(x)
    text = str(info.value)
    assert text.startswith("Conv2d:") and str(tuple(shape)) in text and "(4, 3, 3, 3)" in text
    assert not x.has_grad and not layer.weight.has_grad
    for k, v in layer.state_dict().items():
        close(v, before[k], rtol=0)


def test_functional_bad_arguments(device):
    x = Tensor(np.ones((1, 4, 6)), device=device)
    w = Tensor(np.ones((6, 2, 3)), device=device)
    with pytest.raises(ValueError, match="conv1d: out channels 6 are not divisible by groups 4"):
        F.conv1d(x, w, groups=4)
    with pytest.raises(ValueError, match="conv1d: stride must be positive"):
        F.conv1d(x, w, stride=0, groups=2)
    with pytest.raises(ValueError, match="conv1d: padding must be non-negative"):
        F.conv1d(x, w, padding=-2, groups=2)
    with pytest.raises(ValueError, match=r"conv1d: bias of shape \(5,\)"):
        F.conv1d(x, w, Tensor(np.ones(5), device=device), groups=2)
    with pytest.raises(ValueError, match="conv2d: weight must have 4 axes"):
        F.conv2d(x, w)
    with pytest.raises(TypeError, match="conv1d: expected a Tensor as weight"):
        F.conv1d(x, np.ones((6, 2, 3)))
    assert F.conv1d(x, w, groups=2).shape == (1, 6, 4)


@pytest.mark.parametrize("dtypes", [("float32", "float32", "float64"), ("float64", "float64", "float32"),
                                    ("float32", "float64", "float32"), ("float32", "float32", "float32")])
def test_mixed_dtypes_promote_as_the_standard_bias_included(device, dtypes):
    # the bias was added in place: a wider bias gave the narrower dtype on cpu and a raw TypeError on strict
    rng = np.random.default_rng(7)
    arrays = [rng.normal(size=(2, 4, 5, 6)), rng.normal(size=(6, 2, 3, 3)), rng.normal(size=6)]
    ours = [Tensor(a.astype(d), requires_grad=True, device=device) for a, d in zip(arrays, dtypes)]
    y = F.conv2d(*ours, padding=1, groups=2)
    expected = np.result_type(*dtypes)  # float32 with float64 is float64, as in the array API standard
    assert str(np.dtype(host(y).dtype)) == str(expected)
    wide = F.conv2d(*(Tensor(a, device=device) for a in arrays), padding=1, groups=2)
    close(y, wide, rtol=1e-5 if expected == np.float32 else 1e-6, atol=1e-5)
    y.sum().backward()
    for t, d in zip(ours, dtypes):
        assert str(np.dtype(host(t.grad).dtype)) == d


def test_the_weight_gradient_of_many_channels_over_few_pixels_needs_no_batch_sized_temporary():
    # (N, out, C * K) products summed over N: N times the weight's size; one contraction over N and the
    # pixels needs only a copy of the patches (here 16x smaller)
    torch = torch_or_skip()
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=(128, 32, 2, 2)), rng.normal(size=(64, 32, 3, 3))
    ours = Tensor(w, requires_grad=True)
    y = F.conv2d(Tensor(x), ours, padding=1)  # 4 pixels, 64 channels
    g = Tensor(rng.normal(size=y.shape))
    tracemalloc.start()
    try:
        y.backward(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < x.shape[0] * w.nbytes / 4
    tw = torch.tensor(w, requires_grad=True)
    torch.nn.functional.conv2d(torch.tensor(x), tw, padding=1).backward(torch.tensor(host(g)))
    close(ours.grad, tw.grad)


@pytest.mark.parametrize("groups, size", [(1, (2, 1)), (2, (2, 2)), (4, (1, 1))])  # 4, 6, 2 pixels
def test_weight_gradients_of_more_channels_than_pixels_match_torch(device, groups, size):
    torch = torch_or_skip()
    rng = np.random.default_rng(9)
    x, w, b = rng.normal(size=(3, 8, *size)), rng.normal(size=(16, 8 // groups, 3, 2)), rng.normal(size=16)
    ours = [Tensor(a, requires_grad=True, device=device) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = F.conv2d(*ours, padding=(1, 1), groups=groups)
    ty = torch.nn.functional.conv2d(*theirs, padding=(1, 1), groups=groups)
    same_outputs_and_gradients(torch, y, ty, ours, theirs, rng, device)
    if groups == 2:  # second derivatives too (small: one output pixel, 3 channels a group)
        small = [Tensor(rng.normal(size=s), requires_grad=True, device=device) for s in ((2, 4, 1, 2), (6, 2, 1, 2))]
        assert leanpass.gradgradcheck(lambda x, w: F.conv2d(x, w, groups=2).tanh(), small)


def test_an_in_place_change_of_the_input_after_the_forward_makes_backward_raise_as_torch(device):
    # torch's convolution saves its input; so does ours (a second derivative replays the forward on it)
    rng = np.random.default_rng(10)
    a = Tensor(rng.normal(size=(1, 2, 5, 5)), requires_grad=True, device=device)
    x = a * 1.0
    y = F.conv2d(x, Tensor(rng.normal(size=(3, 2, 3, 3)), device=device))
    x += 1.0
    with pytest.raises(RuntimeError, match="'conv': its input 0 .* changed in place"):
        y.sum().backward()


# (kernel_size, dilation, padding, stride) with the spatial size (H, W)
FOLD_CASES = [
    (2, 1, 0, 1, (5, 6)),
    ((3, 2), (1, 2), (1, 0), (2, 1), (7, 6)),
    (3, 2, 2, 3, (6, 5)),
    ((1, 4), 1, (0, 2), (1, 3), (4, 4)),
]


@pytest.mark.parametrize("case", FOLD_CASES)
@pytest.mark.parametrize("batched", [True, False])
def test_functional_unfold_and_fold_match_torch(device, case, batched):
    torch = torch_or_skip()
    kernel_size, dilation, padding, stride, size = case
    kw = dict(dilation=dilation, padding=padding, stride=stride)
    rng = np.random.default_rng(11)
    x = rng.normal(size=((2,) if batched else ()) + (3, *size))
    ours, theirs = Tensor(x, requires_grad=True, device=device), torch.tensor(x, requires_grad=True)
    cols, tcols = F.unfold(ours, kernel_size, **kw), torch.nn.functional.unfold(theirs, kernel_size, **kw)
    assert cols.shape == tuple(tcols.shape)
    close(cols, tcols)
    g = rng.normal(size=cols.shape)
    cols.backward(Tensor(g, device=device))
    tcols.backward(torch.tensor(g))
    close(ours.grad, theirs.grad)
    c = rng.normal(size=cols.shape)
    ours, theirs = Tensor(c, requires_grad=True, device=device), torch.tensor(c, requires_grad=True)
    folded = F.fold(ours, size, kernel_size, **kw)
    tfolded = torch.nn.functional.fold(theirs, size, kernel_size, **kw)
    assert folded.shape == tuple(tfolded.shape) == x.shape
    close(folded, tfolded)
    g = rng.normal(size=folded.shape)
    folded.backward(Tensor(g, device=device))
    tfolded.backward(torch.tensor(g))
    close(ours.grad, theirs.grad)


@pytest.mark.parametrize("call, error, message", [
    (lambda t: F.unfold(t((3, 4)), 2), ValueError, r"unfold: input must have 3 .* or 4 .*\(3, 4\)"),
    (lambda t: F.unfold(t((1, 3, 3, 4)), 4), ValueError, r"unfold: .*larger than the padded input"),
    (lambda t: F.unfold(t((1, 0, 4, 4)), 2), ValueError, r"unfold: .*non-zero"),
    (lambda t: F.unfold(t((1, 3, 4, 4)), 2, padding=-1), ValueError, "unfold: padding must be non-negative"),
    (lambda t: F.unfold(t((1, 3, 4, 4)), 2, stride=0), ValueError, "unfold: stride must be positive"),
    (lambda t: F.unfold(t((1, 3, 4, 4)), (2, 2, 2)), TypeError, "unfold: kernel_size must be an int or a tuple"),
    (lambda t: F.unfold(np.ones((1, 3, 4, 4)), 2), TypeError, "unfold: expected a Tensor as input"),
    (lambda t: F.fold(t((12,)), (4, 5), 2), ValueError, r"fold: input must have 2 .* or 3 .*\(12,\)"),
    (lambda t: F.fold(t((1, 10, 12)), (4, 5), 2), ValueError, r"fold: .*\(10, .*divisible .*\(2, 2\)"),
    (lambda t: F.fold(t((1, 12, 10)), (4, 5), 2), ValueError, r"fold: .*3 \* 4 = 12 .* 10"),
    (lambda t: F.fold(t((1, 12, 1)), (1, 5), 2), ValueError, r"fold: .*larger than the padded output"),
    (lambda t: F.fold(t((1, 12, 12)), (4, 5), 2, dilation=0), ValueError, "fold: dilation must be positive"),
    (lambda t: F.fold(t((1, 12, 12)), 4.0, 2), TypeError, "fold: output_size must be an int or a tuple"),
])
def test_functional_unfold_and_fold_bad_arguments_raise_naming_the_function(device, call, error, message):
    made = []

    def t(shape):
        made.append(Tensor(np.ones(shape), requires_grad=True, device=device))
        return made[-1]

    with pytest.raises(error, match=message):
        call(t)
    for a in made:  # nothing changed
        assert not a.has_grad
        close(a, np.ones(a.shape), rtol=0)


@pytest.mark.parametrize("in_channels, out_channels", [(6, 4), (1, 8)])  # more patch rows than outputs, and fewer
def test_float32_weight_gradients_in_either_layout_match_torch(device, in_channels, out_channels):
    torch = torch_or_skip()
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=(3, in_channels, 7, 6)).astype("float32"), rng.normal(
        size=(out_channels, in_channels, 3, 3)).astype("float32")
    ours = [Tensor(a, requires_grad=True, device=device) for a in (x, w)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w)]
    y, ty = F.conv2d(*ours, padding=1), torch.nn.functional.conv2d(*theirs, padding=1)
    g = rng.normal(size=y.shape).astype("float32")
    y.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    close(ours[1].grad, theirs[1].grad, rtol=2e-5, atol=1e-4)
    close(ours[0].grad, theirs[0].grad, rtol=2e-5, atol=1e-4)
    if device == "cpu":  # C-ordered: an optimizer's one-pass kernels take only such (a review found a view)
        assert ours[1].grad.flags.c_contiguous


@pytest.mark.parametrize("kernels", [True, False])
def test_the_input_layout_does_not_change_the_rounding(device, kernels, monkeypatch):
    # channels last and Fortran order give the values of C order bit for bit (the generic
    # patches take the input in C order where there is no padding to copy it into)
    from leanpass.backends import get_backend
    from leanpass.backends._base import NO_FUSED

    if not kernels:
        monkeypatch.setattr(get_backend(device), "fused", NO_FUSED)
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3, 6, 9, 8))
    w = Tensor(rng.normal(size=(6, 3, 3, 3)), device=device, requires_grad=True)
    g = Tensor(rng.normal(size=(3, 6, 7, 6)), device=device)
    def laid_out(order):  # x, its axes in memory in this order
        inverse = tuple(int(i) for i in np.argsort(order))
        return leanpass.permute_dims(Tensor(np.ascontiguousarray(x.transpose(order)), device=device), inverse)

    layouts = [Tensor(x, device=device), laid_out((0, 2, 3, 1)), laid_out((3, 2, 1, 0))]
    results = []
    for v in layouts:
        w.grad = None
        y = F.conv2d(v, w, groups=2)
        y.backward(g)
        results.append((host(y), host(w.grad)))
    for y, gw in results[1:]:
        assert np.array_equal(y, results[0][0]) and np.array_equal(gw, results[0][1])
