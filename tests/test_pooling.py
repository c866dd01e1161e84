"""MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and their function forms: PyTorch's values,
indices and input gradients (ties included), second derivatives, and bad input."""

from __future__ import annotations

import helpers
import numpy as np
import pytest
from helpers import host, torch_or_skip

import leanpass as lp
from leanpass import Tensor, gradcheck, gradgradcheck, nn
from leanpass.nn import functional as F

TOL = 1e-10


def close(a, b):
    helpers.close(a, b, rtol=TOL, atol=TOL)



def compare(torch, ours_fn, theirs_fn, array, device, seed=0):
    """Output and input gradient (for random output weights) of ours and PyTorch's."""
    x = Tensor(array, requires_grad=True, device=device)
    tx = torch.tensor(array, requires_grad=True)
    out, tout = ours_fn(x), theirs_fn(tx)
    if isinstance(tout, tuple):
        (out, index), (tout, tindex) = out, tout
        assert index.dtype == "int64"
        np.testing.assert_array_equal(host(index), host(tindex))
    assert out.shape == tuple(tout.shape)
    close(out, tout)
    weights = np.random.default_rng(seed).normal(size=out.shape)
    (out * Tensor(weights, device=device)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    close(x.grad, tx.grad)


def inputs(rng, shape, ties):
    """Normal values, or small integers as floats (many ties in every window)."""
    return rng.integers(0, 3, size=shape).astype(np.float64) if ties else rng.normal(size=shape)


MAX_GRID = [  # kernel_size, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 1, 1, 1, False),  # overlapping windows
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), (1, 2), False),
    (2, 3, 1, 1, True),  # ceil_mode: the last window starts in the input, ends past it
    ((2, 3), 1, (1, 1), 2, True),
    (4, 3, 2, 1, True),
    (1, 2, 0, 1, False),
]


@pytest.mark.parametrize("kernel_size, stride, padding, dilation, ceil_mode", MAX_GRID)
@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (3, 5, 9)], ids=["batched", "unbatched"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_max_pool2d_matches_torch(device, kernel_size, stride, padding, dilation, ceil_mode, shape, ties):
    torch = torch_or_skip()
    array = inputs(np.random.default_rng(1), shape, ties)
    kwargs = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    compare(torch, lambda x: F.max_pool2d(x, return_indices=True, **kwargs),
            lambda t: torch.nn.functional.max_pool2d(t, return_indices=True, **kwargs), array, device)
    compare(torch, nn.MaxPool2d(**kwargs), torch.nn.MaxPool2d(**kwargs), array, device)


def test_max_pool2d_nan_minus_inf_and_integers_as_torch(device):
    torch = torch_or_skip()
    array = np.array([[[np.nan, 1.0, 2.0], [np.nan, 5.0, -np.inf], [-np.inf, -np.inf, -np.inf]]])
    for kwargs in (dict(kernel_size=2), dict(kernel_size=2, stride=1, padding=1), dict(kernel_size=3, padding=1)):
        out, index = F.max_pool2d(Tensor(array, device=device), return_indices=True, **kwargs)
        tout, tindex = torch.nn.functional.max_pool2d(torch.tensor(array), return_indices=True, **kwargs)
        np.testing.assert_array_equal(host(out), host(tout))
        np.testing.assert_array_equal(host(index), host(tindex))
    ints = np.random.default_rng(2).integers(-5, 5, size=(2, 5, 6))
    out = F.max_pool2d(Tensor(ints, dtype="int64", device=device), 3, 2, 1)
    assert out.dtype == "int64"
    np.testing.assert_array_equal(host(out), host(torch.nn.functional.max_pool2d(torch.tensor(ints), 3, 2, 1)))


@pytest.mark.parametrize("kernel_size, shape", [(2, (2, 3, 8, 6)), ((2, 3), (3, 6, 9)), (2, (1, 2, 7, 6))],
                         ids=["tiled", "tiled-rect", "disjoint-leftover-row"])
@pytest.mark.parametrize("values", ["distinct", "ties", "nan-inf"])
def test_max_pool2d_disjoint_windows_match_torch(device, kernel_size, shape, values):
    """Windows that do not overlap: the backward writes each window's gradient into
    place (into an uninitialised buffer where the windows tile the input): ties go to
    the first maximum, NaNs to the last NaN, -inf windows to their first -inf."""
    torch = torch_or_skip()
    rng = np.random.default_rng(7)
    array = inputs(rng, shape, values != "distinct")
    if values == "nan-inf":
        array[rng.random(shape) < 0.2] = np.nan
        array[rng.random(shape) < 0.3] = -np.inf
    compare(torch, lambda x: F.max_pool2d(x, kernel_size, return_indices=True),
            lambda t: torch.nn.functional.max_pool2d(t, kernel_size, return_indices=True), array, device)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=2, stride=1, padding=1),
                                    dict(kernel_size=3, padding=1), dict(kernel_size=(2, 3), stride=1)])
def test_max_pool2d_gradient_of_nan_and_minus_inf_windows_as_torch(device, kwargs):
    """The gradient goes to a window's last NaN, or its first -inf (never the padding)."""
    torch = torch_or_skip()
    array = np.array([[[np.nan, 1.0, np.nan], [np.nan, 5.0, -np.inf], [-np.inf, -np.inf, -np.inf]],
                      [[-np.inf, -np.inf, 2.0], [-np.inf, -np.inf, 2.0], [np.nan, 0.0, np.nan]]])
    compare(torch, lambda x: F.max_pool2d(x, return_indices=True, **kwargs),
            lambda t: torch.nn.functional.max_pool2d(t, return_indices=True, **kwargs), array, device)


def test_max_pool2d_output_is_its_own_array(device):
    """A 1x1 window's output is no view of the input, and changing the output in
    place changes neither the input nor the gradient (the backward keeps its own
    copy of the maxima)."""
    torch = torch_or_skip()
    array = np.random.default_rng(8).normal(size=(2, 4, 6))
    x = Tensor(array, requires_grad=True, device=device)
    y = F.max_pool2d(x, 1, 2)
    y += 1.0
    assert host(x).tolist() == array.tolist()
    h = x * 1.0
    z = F.max_pool2d(h, 2)
    z *= 3.0
    (z * z).sum().backward()
    tx = torch.tensor(array, requires_grad=True)
    tz = torch.nn.functional.max_pool2d(tx * 1.0, 2)
    tz.mul_(3.0)
    (tz * tz).sum().backward()
    close(x.grad, tx.grad)


def test_max_pool2d_input_changed_in_place_after_forward_raises(device):
    """The backward reads the input (as PyTorch's saves it): a later in-place change raises."""
    x = Tensor(np.random.default_rng(9).normal(size=(1, 4, 4)), requires_grad=True, device=device)
    h = x * 1.0
    y = F.max_pool2d(h, 2)
    h += 1.0
    with pytest.raises(RuntimeError, match="max_pool2d"):
        y.sum().backward()


AVG_GRID = [  # kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None),
    (3, 1, 1, False, True, None),
    (3, 1, 1, False, False, None),
    (3, 2, 1, True, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2), (2, 1), (1, 0), True, False, None),
    (2, 3, 1, True, True, None),
    (2, 3, 1, True, False, None),
    (3, 2, 1, True, True, 4),
    ((2, 4), 1, (1, 2), False, False, -3),
]


@pytest.mark.parametrize("kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override", AVG_GRID)
@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (3, 5, 9)], ids=["batched", "unbatched"])
def test_avg_pool2d_matches_torch(device, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                  divisor_override, shape):
    torch = torch_or_skip()
    array = np.random.default_rng(3).normal(size=shape)
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    compare(torch, lambda x: F.avg_pool2d(x, *args), lambda t: torch.nn.functional.avg_pool2d(t, *args),
            array, device)
    compare(torch, nn.AvgPool2d(*args), torch.nn.AvgPool2d(*args), array, device)


@pytest.mark.parametrize("output_size", [1, 3, 4, (None, 3), (5, None), (7, 8), (2, 5), (6, 7), (9, 11),
                                         (7, 4), (1, 2)])  # (7, 4): avg_pool2d's windows; 1: a mean
@pytest.mark.parametrize("shape", [(2, 3, 7, 8), (3, 7, 8)], ids=["batched", "unbatched"])
def test_adaptive_avg_pool2d_matches_torch(device, output_size, shape):
    torch = torch_or_skip()
    array = np.random.default_rng(4).normal(size=shape)
    compare(torch, lambda x: F.adaptive_avg_pool2d(x, output_size),
            lambda t: torch.nn.functional.adaptive_avg_pool2d(t, output_size), array, device)
    compare(torch, nn.AdaptiveAvgPool2d(output_size), torch.nn.AdaptiveAvgPool2d(output_size), array, device)


def test_adaptive_avg_pool2d_to_the_inputs_size_is_a_new_tensor(device):
    x = Tensor(np.arange(4.0).reshape(1, 1, 2, 2), requires_grad=True, device=device)
    y = F.adaptive_avg_pool2d(x, (2, None))
    assert y is not x and y.requires_grad
    with lp.no_grad():
        y += 1  # as PyTorch's: the input is not changed
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0).reshape(1, 1, 2, 2))
    (F.adaptive_avg_pool2d(x, 2) * 3).sum().backward()
    np.testing.assert_array_equal(helpers.host(x.grad), np.full((1, 1, 2, 2), 3.0))


def tie_free(shape, device):
    """Distinct values at least 0.1 apart, so a finite-difference step moves no maximum."""
    values = np.random.default_rng(5).permutation(int(np.prod(shape))).reshape(shape) * 0.1
    return Tensor(values, requires_grad=True, device=device)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 2, 1),
    lambda x: F.max_pool2d(x, 3, 2, 1, 1, True),
    lambda x: F.max_pool2d(x, (2, 3), 1, (1, 0), (2, 1)),
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.max_pool2d(x, (2, 5)),
], ids=["max-overlap", "max-ceil-padded", "max-dilated", "max-disjoint", "max-tiled"])
def test_max_pool2d_gradcheck_and_gradgradcheck(device, fn):
    x = tie_free((1, 4, 5), device)
    assert gradcheck(fn, (x,))
    assert gradgradcheck(lambda x: fn(x) * fn(x), (x,))  # a nonzero second derivative through the pool


@pytest.mark.parametrize("fn", [
    lambda x: F.avg_pool2d(x, 2, 1),
    lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
    lambda x: F.avg_pool2d(x, (2, 3), 1, (1, 1), False, True, 5),
    lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    lambda x: F.adaptive_avg_pool2d(x, (None, 2)),
    lambda x: F.adaptive_avg_pool2d(x, (2, 5)),
    lambda x: F.adaptive_avg_pool2d(x, 1),
], ids=["avg-overlap", "avg-ceil-padded", "avg-divisor", "adaptive-bins", "adaptive-reshape", "adaptive-windows",
        "adaptive-global"])
def test_avg_pools_gradcheck_and_gradgradcheck(device, fn):
    x = Tensor(np.random.default_rng(6).normal(size=(1, 4, 5)), requires_grad=True, device=device)
    assert gradcheck(fn, (x,))
    assert gradgradcheck(lambda x: fn(x) * fn(x), (x,))


def test_layers_repr_and_return_indices(device):
    pool = nn.MaxPool2d(2, return_indices=True)
    out, index = pool(Tensor(np.arange(16.0).reshape(1, 4, 4), device=device))
    assert host(out).tolist() == [[[5.0, 7.0], [13.0, 15.0]]]
    assert host(index).tolist() == [[[5, 7], [13, 15]]]
    assert not index.requires_grad
    assert repr(nn.MaxPool2d(3, 1)) == "MaxPool2d(kernel_size=3, stride=1, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool2d(2)) == "AvgPool2d(kernel_size=2, stride=2, padding=0)"
    assert repr(nn.AdaptiveAvgPool2d((None, 3))) == "AdaptiveAvgPool2d(output_size=(None, 3))"


BAD = [  # layer, input shape, message part
    (nn.MaxPool2d(2), (4, 4), "MaxPool2d: expected an input of shape (N, C, H, W) or (C, H, W)"),
    (nn.AvgPool2d(2), (1, 1, 1, 4, 4), "AvgPool2d: expected an input of shape (N, C, H, W) or (C, H, W)"),
    (nn.AdaptiveAvgPool2d(2), (3, 0, 4), "AdaptiveAvgPool2d: expected an input"),
    (nn.MaxPool2d(5), (1, 4, 4), "MaxPool2d: kernel_size (5, 5) with dilation (1, 1) is larger than the input"),
    (nn.MaxPool2d(3, dilation=2), (1, 4, 4), "MaxPool2d: kernel_size (3, 3) with dilation (2, 2) is larger"),
    (nn.AvgPool2d(4, padding=1), (1, 1, 1, 7), "AvgPool2d: kernel_size (4, 4) is larger than the input"),  # no dilation
    (nn.MaxPool2d(3, padding=2), (1, 8, 8), "MaxPool2d: padding (2, 2) must be at most half of kernel_size (3, 3)"),
    (nn.AvgPool2d((2, 4), padding=(1, 3)), (1, 8, 8), "AvgPool2d: padding (1, 3) must be at most half"),
]


@pytest.mark.parametrize("layer, shape, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_raises_and_changes_nothing(device, layer, shape, message):
    x = Tensor(np.ones(shape), requires_grad=True, device=device)
    with pytest.raises(ValueError) as info:
        layer(x)
    assert message in str(info.value)
    assert str(shape) in str(info.value)  # the input's shape is named
    assert not x.has_grad and host(x).tolist() == np.ones(shape).tolist()


BAD_ARGS = [  # layer, error, message part: the op and the argument are named
    (nn.MaxPool2d(0), ValueError, "MaxPool2d: kernel_size must be positive"),
    (nn.MaxPool2d(2, stride=(1, 0)), ValueError, "MaxPool2d: stride must be positive"),
    (nn.AvgPool2d(2, stride=-1), ValueError, "AvgPool2d: stride must be positive"),
    (nn.MaxPool2d(2, dilation=0), ValueError, "MaxPool2d: dilation must be positive"),
    (nn.MaxPool2d(2, padding=-1), ValueError, "MaxPool2d: padding must be non-negative"),
    (nn.AvgPool2d(2, divisor_override=0), ValueError, "AvgPool2d: divisor_override must be a non-zero int"),
    (nn.AdaptiveAvgPool2d(0), ValueError, "AdaptiveAvgPool2d: output_size must be positive"),
    (nn.AdaptiveAvgPool2d((2, 2, 2)), TypeError, "AdaptiveAvgPool2d: output_size must be"),
    (nn.MaxPool2d(2.0), TypeError, "MaxPool2d: kernel_size must be an int or a tuple of 2 ints, got 2.0"),
    (nn.MaxPool2d((2, 2, 2)), TypeError, "MaxPool2d: kernel_size must be an int or a tuple of 2 ints"),
    (nn.MaxPool2d(True), TypeError, "MaxPool2d: kernel_size must be an int"),
    (nn.MaxPool2d(2, stride="2"), TypeError, "MaxPool2d: stride must be an int"),
    (nn.MaxPool2d(3, padding=(1, 0.5)), TypeError, "MaxPool2d: padding must be an int"),
    (nn.MaxPool2d(2, dilation=1.0), TypeError, "MaxPool2d: dilation must be an int"),
    (nn.AvgPool2d(np.float64(2)), TypeError, "AvgPool2d: kernel_size must be an int"),
    (nn.AvgPool2d(2, divisor_override=2.0), TypeError, "AvgPool2d: divisor_override must be an int or None"),
    (nn.AdaptiveAvgPool2d(2.0), TypeError, "AdaptiveAvgPool2d: output_size must be an int"),
    (nn.AdaptiveAvgPool2d((2, 1.5)), TypeError, "AdaptiveAvgPool2d: output_size must be an int"),
]


@pytest.mark.parametrize("layer, error, message", BAD_ARGS, ids=[str(i) for i in range(len(BAD_ARGS))])
def test_bad_arguments_raise_naming_op_and_argument(device, layer, error, message):
    """A wrong type is a TypeError, a wrong value a ValueError, both naming the op
    and the argument (never Python's ``'float' object is not iterable``)."""
    x = Tensor(np.ones((1, 4, 4)), requires_grad=True, device=device)
    with pytest.raises(error) as info:
        layer(x)
    assert message in str(info.value)
    assert not x.has_grad and host(x).tolist() == np.ones((1, 4, 4)).tolist()


def test_numpy_integer_arguments_as_torch(device):
    """NumPy integers are ints for every argument, as PyTorch takes them."""
    torch = torch_or_skip()
    array = np.random.default_rng(10).normal(size=(2, 7, 8))
    i = np.int64
    max_args = (i(3), (i(2), 1), i(1), (1, i(2)), True)
    compare(torch, lambda x: F.max_pool2d(x, *max_args, return_indices=True),
            lambda t: torch.nn.functional.max_pool2d(t, *max_args, return_indices=True), array, device)
    compare(torch, nn.MaxPool2d(i(2)), torch.nn.MaxPool2d(i(2)), array, device)
    avg_args = ((i(3), np.int32(2)), i(2), i(1), True, False, i(5))
    compare(torch, lambda x: F.avg_pool2d(x, *avg_args), lambda t: torch.nn.functional.avg_pool2d(t, *avg_args),
            array, device)
    compare(torch, nn.AvgPool2d(*avg_args), torch.nn.AvgPool2d(*avg_args), array, device)
    compare(torch, lambda x: F.adaptive_avg_pool2d(x, i(3)),  # torch's takes a Python int only
            lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 3), array, device)
    compare(torch, lambda x: F.adaptive_avg_pool2d(x, (i(3), None)),
            lambda t: torch.nn.functional.adaptive_avg_pool2d(t, (3, None)), array, device)


def test_bad_input_types_and_function_names(device):
    with pytest.raises(TypeError, match="max_pool2d: expected a Tensor"):
        F.max_pool2d(np.ones((1, 4, 4)), 2)
    with pytest.raises(TypeError, match="avg_pool2d: expected a floating-point input, got dtype int64"):
        F.avg_pool2d(Tensor(np.ones((1, 4, 4)), dtype="int64", device=device), 2)
    with pytest.raises(TypeError, match="AdaptiveAvgPool2d: expected a floating-point input"):
        nn.AdaptiveAvgPool2d(2)(Tensor(np.ones((1, 4, 4)), dtype="int64", device=device))
    with pytest.raises(ValueError, match=r"avg_pool2d: padding \(2, 2\) must be at most half"):
        F.avg_pool2d(Tensor(np.ones((1, 4, 4)), device=device), 3, padding=2)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool2d: expected an input .* got shape \(4,\)"):
        F.adaptive_avg_pool2d(Tensor(np.ones(4), device=device), 2)

