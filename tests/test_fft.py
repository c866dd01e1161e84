"""``leanpass.fft``: forward values against ``numpy.fft`` on every device, dtypes,
gradients against ``torch.fft``'s (PyTorch's convention for complex values),
differentiable shifts, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor, gradcheck
from leanpass.backends import get_backend

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.uniform(-1.0, 1.0, size=shape)


def crand(*shape):
    return rand(*shape) + 1j * rand(*shape)


def arr(device, array):
    return lp.asarray(np.asarray(array), device=device)


# name -> (keyword arguments, input); compared with numpy.fft.<name>(input, **kwargs)
CASES = {
    "fft": [({}, crand(4, 6)), ({"n": 8, "axis": 0, "norm": "ortho"}, crand(4, 6)),
            ({"n": 3, "norm": "forward"}, crand(5))],
    "ifft": [({}, crand(4, 6)), ({"n": 7, "axis": -2, "norm": "forward"}, crand(4, 6))],
    "fftn": [({}, crand(3, 4, 5)), ({"s": (2, 6), "axes": (0, 2), "norm": "ortho"}, crand(3, 4, 5))],
    "ifftn": [({}, crand(3, 4)), ({"axes": (1,)}, crand(3, 4)), ({"s": (5,), "axes": (-1,)}, crand(3, 4))],
    "rfft": [({}, rand(4, 6)), ({"n": 5, "axis": 0, "norm": "ortho"}, rand(4, 6))],
    "irfft": [({}, crand(4, 6)), ({"n": 9, "axis": 0, "norm": "forward"}, crand(4, 6))],
    "rfftn": [({}, rand(3, 4, 6)), ({"s": (4, 5), "axes": (0, 1)}, rand(3, 4, 6))],
    "irfftn": [({}, crand(3, 4)), ({"s": (3, 7), "axes": (0, 1), "norm": "ortho"}, crand(3, 4))],
    "hfft": [({}, crand(5)), ({"n": 6, "axis": 0}, crand(4, 3))],
    "ihfft": [({}, rand(6)), ({"n": 5, "axis": 0, "norm": "ortho"}, rand(4, 3))],
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_against_numpy(device, name):
    for kwargs, x in CASES[name]:
        out = getattr(lp.fft, name)(arr(device, x), **kwargs)
        expected = getattr(np.fft, name)(x, **kwargs)
        assert out.shape == expected.shape, (name, kwargs)
        assert out.device == device and not out.requires_grad
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12, err_msg=f"{name} {kwargs}")


@pytest.mark.parametrize("name", list(CASES))
def test_single_precision_stays_single(device, name):
    real_in = name in ("rfft", "rfftn", "ihfft")
    x = rand(4, 6).astype(np.float32) if real_in else crand(4, 6).astype(np.complex64)
    out = getattr(lp.fft, name)(arr(device, x))
    complex_out = name in ("fft", "ifft", "fftn", "ifftn", "rfft", "rfftn", "ihfft")
    assert out.dtype == (lp.complex64 if complex_out else lp.float32)


def test_round_trips(device):
    x = rand(4, 6)
    t = arr(device, x)
    np.testing.assert_allclose(lp.fft.ifft(lp.fft.fft(t)).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(lp.fft.irfft(lp.fft.rfft(t), n=6).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(lp.fft.irfftn(lp.fft.rfftn(t), s=(4, 6), axes=(0, 1)).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(lp.fft.hfft(lp.fft.ihfft(t), n=6).numpy(), x, atol=1e-12)
    # -1 in s: every input element along that axis
    c = arr(device, crand(3, 4))
    np.testing.assert_allclose(lp.fft.fftn(c, s=(-1, 4), axes=(0, 1)).numpy(), np.fft.fftn(c.numpy()))
    np.testing.assert_allclose(lp.fft.irfftn(c, s=(3, -1), axes=(0, 1)).numpy(), np.fft.irfftn(c.numpy()))


def test_real_and_integer_inputs_are_converted(device):
    x = rand(8)
    out = lp.fft.fft(arr(device, x))
    assert out.dtype == lp.complex128
    np.testing.assert_allclose(out.numpy(), np.fft.fft(x))
    out = lp.fft.rfft(arr(device, np.arange(6)))
    assert out.dtype == lp.complex128
    np.testing.assert_allclose(out.numpy(), np.fft.rfft(np.arange(6.0)))
    assert lp.fft.fft(arr(device, x.astype(np.float32))).dtype == lp.complex64


def _torch_kwargs(kwargs):
    return {{"axis": "dim", "axes": "dim"}.get(k, k): v for k, v in kwargs.items()}


def _real_loss(out, weights):
    """A real loss of every output element: weights on the real and imaginary parts."""
    re, im = weights
    if out.dtype.is_complex if hasattr(out.dtype, "is_complex") else out.dtype.kind == "c":
        real, imag = (out.real, out.imag) if not isinstance(out, Tensor) else (lp.real(out), lp.imag(out))
        return (real * re).sum() + (imag * im).sum()
    return (out * re).sum()


@pytest.mark.parametrize("name", list(CASES))
def test_transform_gradients_are_torchs(device, name):
    """Every transform, for each case (n or s, axes, norm) and for real and complex
    input where it takes both: values and gradients (of a real loss of the real and
    imaginary parts) equal torch.fft's, PyTorch's convention for complex gradients."""
    torch = pytest.importorskip("torch")
    for kwargs, x in CASES[name]:
        inputs = [x] if name in ("rfft", "rfftn", "ihfft") else [x, x.real]
        for data in inputs:
            t = torch.tensor(data, requires_grad=True)
            theirs = getattr(torch.fft, name)(t, **_torch_kwargs(kwargs))
            weights = [RNG.uniform(0.5, 1.5, size=tuple(theirs.shape)) for _ in range(2)]
            _real_loss(theirs, [torch.tensor(w) for w in weights]).backward()
            ours_in = Tensor(data, requires_grad=True, device=device)
            ours = getattr(lp.fft, name)(ours_in, **kwargs)
            np.testing.assert_allclose(ours.numpy(), theirs.detach().resolve_conj().numpy(), atol=1e-12)
            _real_loss(ours, [arr(device, w) for w in weights]).backward()
            np.testing.assert_allclose(host(ours_in.grad), t.grad.resolve_conj().numpy(), atol=1e-12,
                                       err_msg=f"{name} {kwargs} of {data.dtype} input")


@pytest.mark.parametrize("name", list(CASES))
def test_transforms_pass_gradcheck_and_gradgradcheck(device, name):
    kwargs, x = CASES[name][-1]
    t = Tensor(x, requires_grad=True, device=device)
    assert gradcheck(lambda a: getattr(lp.fft, name)(a, **kwargs), [t])
    assert lp.gradgradcheck(lambda a: lp.abs(getattr(lp.fft, name)(a * a, **kwargs)), [t])


def test_a_spectral_loss_trains(device):
    """What issue 28 asked for: a loss on the spectrum of a real signal differentiates
    (it raised TypeError), and gradient steps lower it."""
    x = Tensor(rand(32), requires_grad=True, device=device)
    target = lp.abs(lp.fft.rfft(arr(device, np.sin(np.arange(32) / 3.0))))
    opt = lp.optim.SGD([x], lr=0.01)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = ((lp.abs(lp.fft.rfft(x)) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("axes", [None, 0, -1, (0, 2), [1]])
def test_shifts(device, name, axes):
    x = rand(3, 4, 5)
    out = getattr(lp.fft, name)(arr(device, x), axes=axes)
    np.testing.assert_array_equal(out.numpy(), getattr(np.fft, name)(x, axes=axes))
    t = Tensor(x, requires_grad=True, device=device)
    assert gradcheck(lambda a: getattr(lp.fft, name)(a, axes=axes), [t])
    back = lp.fft.ifftshift(lp.fft.fftshift(t, axes=axes), axes=axes)
    np.testing.assert_array_equal(back.numpy(), x)
    c = getattr(lp.fft, name)(arr(device, crand(3, 5)))
    assert c.dtype == lp.complex128


def test_frequencies(device):
    for n, d in ((5, 0.5), (8, 1.0), (1, 2.0)):
        out = lp.fft.fftfreq(n, d=d, device=device)
        assert out.device == device and out.dtype == lp.get_default_dtype() and not out.requires_grad
        np.testing.assert_allclose(out.numpy(), np.fft.fftfreq(n, d=d))
        out = lp.fft.rfftfreq(n, d=d, device=device, dtype=lp.float32)
        assert out.dtype == lp.float32
        np.testing.assert_allclose(out.numpy(), np.fft.rfftfreq(n, d=d), rtol=1e-6)


BAD = {
    "norm": (ValueError, "fft: norm", lambda x: lp.fft.fft(x, norm="sideways")),
    "n_zero": (ValueError, "fft: n must be a positive", lambda x: lp.fft.fft(x, n=0)),
    "n_float": (TypeError, "fft: n", lambda x: lp.fft.fft(x, n=2.5)),
    "axis": (IndexError, "ifft", lambda x: lp.fft.ifft(x, axis=3)),
    "s_without_axes": (ValueError, "fftn: s needs axes", lambda x: lp.fft.fftn(x, s=(2, 2))),
    "s_length": (ValueError, "fftn: s", lambda x: lp.fft.fftn(x, s=(2,), axes=(0, 1))),
    "complex_rfft": (TypeError, "rfft: expected a real", lambda x: lp.fft.rfft(x)),
    "0d": (ValueError, "fft: .*0-d", lambda x: lp.fft.fft(x[0, 0])),
    "freq_n": (ValueError, "fftfreq: n", lambda x: lp.fft.fftfreq(0, device=x.device)),
    "freq_dtype": (ValueError, "rfftfreq: dtype", lambda x: lp.fft.rfftfreq(4, dtype=lp.int32, device=x.device)),
    "shift_int": (TypeError, "fftshift", lambda x: lp.fft.fftshift(lp.asarray([1, 2], device=x.device))),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input(device, name):
    kind, message, call = BAD[name]
    data = crand(3, 4)
    x = arr(device, data)
    with pytest.raises(kind, match=message):
        call(x)
    np.testing.assert_array_equal(x.numpy(), data)
    assert get_backend(device).device == x.device


def test_no_axes_to_transform(device):
    """fftn/ifftn over no axes give a copy of the input (NumPy gives the input itself);
    rfftn/irfftn need an axis to halve; fftshift of a 0-d tensor or over no axes copies."""
    z = lp.asarray(np.ones((2, 2), dtype=complex), device=device)
    for fn in (lp.fft.fftn, lp.fft.ifftn):
        r = fn(z, axes=())
        r[0, 0] = 5
        assert z.numpy()[0, 0] == 1
    for fn in (lp.fft.rfftn, lp.fft.irfftn):
        with pytest.raises(ValueError, match=f"{fn.__name__}: axes is empty"):
            fn(lp.ones((2, 3), device=device), axes=())
    x = Tensor(2.0, requires_grad=True, device=device)
    y = lp.fft.fftshift(x)
    assert y is not x and float(y) == 2.0
    y.backward()
    assert float(x.grad) == 1.0
    t = lp.asarray([1.0, 2.0, 3.0], device=device)
    assert lp.fft.ifftshift(t, axes=()).tolist() == [1.0, 2.0, 3.0]


def test_every_transform_is_made_from_its_record():
    """Each Transform record of ops.fft.TRANSFORMS makes its lp.fft function, with the
    standard's signature, applying the record's op."""
    import inspect

    from leanpass.ops.fft import TRANSFORMS

    assert set(TRANSFORMS) == {"fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft"}
    for name, record in TRANSFORMS.items():
        function = getattr(lp.fft, name)
        expected = ("(x, /, *, n=None, axis=-1, norm='backward')" if record.axes == "one"
                    else "(x, /, *, s=None, axes=None, norm='backward')")
        assert str(inspect.signature(function)) == expected, name
        assert function.__doc__ == record.doc
        x = Tensor(rand(4, 4) if record.halved != "input" else crand(4, 4), requires_grad=True)
        assert function(x).grad_fn.op is record.op, name
