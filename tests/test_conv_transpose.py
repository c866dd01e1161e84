"""ConvTranspose1d, ConvTranspose2d, conv_transpose1d, conv_transpose2d: PyTorch's values
and gradients (stride, padding, output_padding, groups and dilation), the layer from
PyTorch's state dict and ``output_size``, adjointness with the convolution, gradcheck
and second derivatives on every device, and errors that change nothing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass
from leanpass import Tensor, nn
from leanpass.nn import functional as F

RTOL, ATOL = 1e-7, 1e-10

# (stride, padding, output_padding, dilation, groups, bias) for 2-D; 1-D takes each tuple's first entry
CASES = [
    (1, 0, 0, 1, 1, True),
    (2, 1, 1, 1, 1, True),
    (3, 2, 2, 1, 2, False),
    (2, 1, 1, 2, 2, True),
    (1, 0, 1, 2, 1, True),  # output_padding below the dilation, not the stride
    (2, 3, 0, 1, 1, True),  # padding that cuts into the scattered blocks
    (2, 0, 1, 1, 4, True),  # depthwise-like: one input channel per group
    ((3, 1), (0, 2), (2, 0), (1, 2), 1, True),
]


def first(v):
    return v[0] if isinstance(v, tuple) else v


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dims", [1, 2])
def test_function_matches_torch(device, dims, case, batched):
    torch = torch_or_skip()
    stride, padding, output_padding, dilation, groups, bias = case if dims == 2 else tuple(map(first, case))
    rng = np.random.default_rng(0)
    kernel = (3, 2) if dims == 2 else (3,)  # non-square
    size = (5, 6) if dims == 2 else (7,)
    x = rng.normal(size=((2,) if batched else ()) + (4, *size))
    w = rng.normal(size=(4, 8 // groups, *kernel))
    arrays = [x, w] + ([rng.normal(size=8)] if bias else [])
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    f = F.conv_transpose2d if dims == 2 else F.conv_transpose1d
    tf = torch.nn.functional.conv_transpose2d if dims == 2 else torch.nn.functional.conv_transpose1d
    kw = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
    y, ty = f(*ours, **kw), tf(*theirs, **kw)
    assert y.shape == tuple(ty.shape)
    close(y, ty, rtol=RTOL, atol=ATOL)
    g = rng.normal(size=y.shape)
    y.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    for a, t in zip(ours, theirs):
        close(a.grad, t.grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("groups", [1, 2])
def test_large_inputs_matches_torch(device, groups):
    # big enough that the backward works in bands of input rows and copies the gradient one sample at a time
    torch = torch_or_skip()
    rng = np.random.default_rng(9)
    arrays = [rng.normal(size=(3, 8, 20, 12)), rng.normal(size=(8, 32 // groups, 4, 3)), rng.normal(size=32)]
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    kw = dict(stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=groups, dilation=(1, 2))
    y, ty = F.conv_transpose2d(*ours, **kw), torch.nn.functional.conv_transpose2d(*theirs, **kw)
    close(y, ty, rtol=RTOL, atol=ATOL)
    g = rng.normal(size=y.shape)
    y.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    for a, t in zip(ours, theirs):
        close(a.grad, t.grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dims", [1, 2])
def test_layer_from_torch_state_dict_and_its_seeded_initialisation(device, dims):
    torch = torch_or_skip()
    cls, tcls = (nn.ConvTranspose2d, torch.nn.ConvTranspose2d) if dims == 2 else (
        nn.ConvTranspose1d, torch.nn.ConvTranspose1d)
    args = dict(stride=2, padding=1, output_padding=1, groups=2)
    leanpass.manual_seed(3)
    layer = cls(4, 6, 3, **args, device=device, dtype="float64")
    fan_in = 6 // 2 * 3 ** dims  # PyTorch's fan_in of the (in, out / groups, *k) weight
    values = np.concatenate([host(layer.weight).ravel(), host(layer.bias)])
    assert np.abs(values).max() <= fan_in ** -0.5 and np.abs(values).max() > 0.9 * fan_in ** -0.5
    leanpass.manual_seed(3)
    close(cls(4, 6, 3, **args, device=device, dtype="float64").weight, layer.weight, rtol=0, atol=0)
    ref = tcls(4, 6, 3, **args, dtype=torch.float64)
    assert repr(layer) == repr(ref)
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    assert layer.load_state_dict(state) == ([], [])
    assert tuple(layer.weight.shape) == tuple(ref.weight.shape) == (4, 3) + (3,) * dims
    assert list(layer.state_dict(layout="torch")) == list(ref.state_dict())
    x = np.random.default_rng(1).normal(size=(2, 4) + (5,) * dims)
    ours, theirs = Tensor(x, requires_grad=True, device=device), torch.tensor(x, requires_grad=True)
    y, ty = layer(ours), ref(theirs)
    close(y, ty, rtol=RTOL, atol=ATOL)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL)
    close(layer.weight.grad, ref.weight.grad, rtol=RTOL, atol=ATOL)
    close(layer.bias.grad, ref.bias.grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("output_size", [(9, 10), (10, 11), [2, 6, 10, 10]])
def test_output_size_picks_the_output_padding_as_torch(device, output_size):
    torch = torch_or_skip()
    ref = torch.nn.ConvTranspose2d(3, 6, (3, 4), stride=2, padding=1, dtype=torch.float64)
    layer = nn.ConvTranspose2d(3, 6, (3, 4), stride=2, padding=1, device=device, dtype="float64")
    layer.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = np.random.default_rng(2).normal(size=(2, 3, 5, 5))
    y = layer(Tensor(x, device=device), output_size=output_size)
    ty = ref(torch.tensor(x), output_size=output_size)
    assert y.shape == tuple(ty.shape)
    close(y, ty, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dims", [1, 2])
def test_adjoint_of_the_convolution(device, dims):
    # <conv(u, w), v> == <u, conv_transpose(v, w)>, with the output_padding that makes the sizes meet
    rng = np.random.default_rng(3)
    size = (9, 8) if dims == 2 else (10,)
    stride, padding, dilation, groups = 2, 1, 2, 2
    u = Tensor(rng.normal(size=(2, 4, *size)), device=device)
    w = Tensor(rng.normal(size=(6, 2) + (3,) * dims), device=device)
    conv = F.conv2d if dims == 2 else F.conv1d
    convt = F.conv_transpose2d if dims == 2 else F.conv_transpose1d
    v = Tensor(rng.normal(size=conv(u, w, stride=stride, padding=padding, dilation=dilation,
                                    groups=groups).shape), device=device)
    extra = tuple(n - ((m - 1) * stride - 2 * padding + dilation * 2 + 1) for n, m in zip(size, v.shape[2:]))
    assert set(extra) == ({0, 1} if dims == 2 else {1})  # each axis takes the output_padding its size needs
    back = convt(v, w, stride=stride, padding=padding, output_padding=extra, dilation=dilation, groups=groups)
    assert back.shape == u.shape
    left = float(leanpass.sum(conv(u, w, stride=stride, padding=padding, dilation=dilation, groups=groups) * v))
    np.testing.assert_allclose(left, float(leanpass.sum(u * back)), rtol=1e-12)


@pytest.mark.parametrize("dims", [1, 2])
def test_gradcheck_and_gradgradcheck(device, dims):
    rng = np.random.default_rng(4)
    size = (3, 2) if dims == 2 else (4,)
    x = Tensor(rng.normal(size=(2, 2, *size)), requires_grad=True, device=device)
    w = Tensor(rng.normal(size=(2, 2) + (2,) * dims), requires_grad=True, device=device)
    b = Tensor(rng.normal(size=4), requires_grad=True, device=device)
    f = F.conv_transpose2d if dims == 2 else F.conv_transpose1d

    def fn(x, w, b):
        return f(x, w, b, stride=2, padding=1, output_padding=1, groups=2).tanh()  # tanh: a non-zero Hessian

    assert leanpass.gradcheck(fn, (x, w, b))
    assert leanpass.gradgradcheck(fn, (x, w, b))


@pytest.mark.parametrize("wanted", ["x", "w", "b", "x and b"])
def test_gradients_of_some_inputs_only_and_a_non_contiguous_incoming_gradient(device, wanted):
    torch = torch_or_skip()
    rng = np.random.default_rng(6)
    arrays = rng.normal(size=(3, 4, 5, 6)), rng.normal(size=(4, 3, 3, 2)), rng.normal(size=6)
    ours = [Tensor(a, requires_grad=name in wanted, device=device) for a, name in zip(arrays, "xwb")]
    theirs = [torch.tensor(a, requires_grad=name in wanted) for a, name in zip(arrays, "xwb")]
    y = F.conv_transpose2d(*ours, stride=(1, 2), padding=1, groups=2)
    ty = torch.nn.functional.conv_transpose2d(*theirs, stride=(1, 2), padding=1, groups=2)
    close(y, ty, rtol=RTOL, atol=ATOL)
    g = rng.normal(size=y.shape)
    leanpass.sum(leanpass.permute_dims(y, (3, 1, 2, 0)) * Tensor(g.transpose(3, 1, 2, 0), device=device)).backward()
    ty.backward(torch.tensor(g))
    for a, t, name in zip(ours, theirs, "xwb"):
        if name in wanted:
            close(a.grad, t.grad, rtol=RTOL, atol=ATOL)
        else:
            assert not a.has_grad


def test_float32_and_downstream_operations():
    torch = torch_or_skip()
    layer = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1, dtype="float32")
    ref = torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
    layer.load_state_dict({k: v.detach().numpy() for k, v in ref.state_dict().items()})
    x = np.random.default_rng(7).normal(size=(3, 8, 5, 5)).astype("float32")
    y = layer(Tensor(x))
    assert y.dtype == leanpass.float32
    flat, tflat = y.reshape((3, -1)), ref(torch.tensor(x)).reshape(3, -1)
    close(flat, tflat, rtol=1e-5, atol=1e-6)
    close(y[:, 1:3].sum(axis=(2, 3)), tflat.reshape(3, 4, 10, 10)[:, 1:3].sum(dim=(2, 3)), rtol=1e-5, atol=1e-5)


def test_a_decoder_trains(device):
    leanpass.manual_seed(0)
    model = nn.Sequential(nn.ConvTranspose2d(2, 4, 4, stride=2, padding=1, device=device), nn.ReLU(),
                          nn.ConvTranspose2d(4, 1, 3, padding=1, device=device))
    rng = np.random.default_rng(8)
    x = Tensor(rng.normal(size=(4, 2, 3, 3)), device=device)
    target = Tensor(rng.normal(size=(4, 1, 6, 6)), device=device)
    opt = leanpass.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(10):
        loss = nn.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=2), ValueError,
     r"ConvTranspose2d: output_padding \(2, 2\) must be smaller than either stride \(2, 2\) or dilation \(1, 1\)"),
    (lambda: nn.ConvTranspose1d(3, 4, 3, output_padding=1), ValueError, "ConvTranspose1d: output_padding"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, groups=2), ValueError, "divisible by groups"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, padding="same"), ValueError, "ConvTranspose2d: padding must be an int"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect"), ValueError, "only padding_mode 'zeros'"),
    (lambda: nn.ConvTranspose2d(3, 4, (3, 3, 3)), TypeError, "kernel_size must be an int or a tuple of 2 ints"),
    (lambda: nn.ConvTranspose2d(3, 4, 3, stride=0), ValueError, "stride must be positive"),
    (lambda: nn.ConvTranspose2d(0, 4, 3), ValueError, "positive ints"),
])
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def bad_calls(device):
    x = Tensor(np.ones((2, 4, 5, 5)), device=device)
    w = Tensor(np.ones((4, 3, 3, 3)), device=device)
    return [
        (lambda: F.conv_transpose2d(x, w, stride=2, output_padding=2), ValueError,
         r"conv_transpose2d: output_padding \(2, 2\) must be smaller than either stride \(2, 2\) or dilation"),
        (lambda: F.conv_transpose2d(Tensor(np.ones((2, 3, 5, 5)), device=device), w), ValueError,
         r"conv_transpose2d: input has 3 channels, the weight expects 4 \(its axis 0\); input of shape "
         r"\(2, 3, 5, 5\), weight of shape \(4, 3, 3, 3\)"),
        (lambda: F.conv_transpose2d(x, w, Tensor(np.ones(4), device=device)), ValueError,
         r"conv_transpose2d: bias of shape \(4,\) must be \(3,\)"),
        (lambda: F.conv_transpose2d(x, w, groups=3), ValueError, "in channels 4 are not divisible by groups 3"),
        (lambda: F.conv_transpose1d(x, w), ValueError, "conv_transpose1d: weight must have 3 axes"),
        (lambda: F.conv_transpose2d(x, w, dilation=(1, 0)), ValueError, "conv_transpose2d: dilation must be positive"),
        (lambda: F.conv_transpose2d(x, w, padding=4), ValueError,
         r"conv_transpose2d: the output size \(-1, -1\) .* must be positive"),
        (lambda: F.conv_transpose2d(x, np.ones((4, 3, 3, 3))), TypeError, "expected a Tensor as weight"),
        (lambda: F.conv_transpose2d(x[0, 0], w), ValueError, r"input must have 3 \(unbatched\) or 4 \(batched\)"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_bad_function_input(device, case):
    call, error, message = bad_calls(device)[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("output_size, error, message", [
    ((12, 12), ValueError, r"ConvTranspose2d: requested an output size of \(12, 12\), but valid sizes range from "
     r"\(9, 9\) to \(10, 10\) \(for an input of \(5, 5\)\)"),
    ((9,), ValueError, "output_size must have 2 or 4 elements"),
    ("9x9", TypeError, "output_size must be a tuple of ints"),
])
def test_bad_output_size_changes_nothing(device, output_size, error, message):
    layer = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, device=device)
    before = host(layer.weight).copy()
    x = Tensor(np.ones((2, 4, 5, 5)), requires_grad=True, device=device)
    with pytest.raises(error, match=message):
        layer(x, output_size=output_size)
    close(layer.weight, before, rtol=0, atol=0)
    assert not layer.weight.has_grad and not x.has_grad
