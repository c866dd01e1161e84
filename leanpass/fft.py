"""``leanpass.fft``: the array API standard's fast Fourier transform extension (2024.12),
on every device (NumPy's ``fft`` on ``cpu``, CuPy's on ``cuda``,
``array_api_strict.fft`` on ``strict``).

Gradients: every transform is differentiable, with PyTorch's gradient and its
convention for complex values (``x.grad`` is ``dL/dRe x + i dL/dIm x``; a real input
gets the real part), for every ``norm``, ``n`` and ``s``: a spectral loss such as
``abs(lp.fft.rfft(x)).sum()`` trains ``x``. ``fftshift`` and ``ifftshift`` are
differentiable rolls; ``fftfreq`` and ``rfftfreq`` make new tensors.

Input dtypes: the complex-input transforms (``fft``, ``ifft``, ``fftn``, ``ifftn``,
``irfft``, ``irfftn``, ``hfft``) take real tensors too, converted to the complex dtype
of their precision; the real-input ones (``rfft``, ``rfftn``, ``ihfft``) reject complex
tensors. Integer tensors are converted to the default floating dtype first.
"""

from __future__ import annotations

from . import ops, tensor  # tensor before the graph layer (_node), which imports it
from ._checks import integer, normalize_axes, normalize_axis
from ._dtypes import as_dtype
from ._namespace._records import recorded
from ._namespace._util import tensors
from ._namespace.elementwise import positive
from ._node import leaf, run
from .backends import get_backend, get_default_dtype
from .ops.fft import TRANSFORMS, Transform

__all__ = [
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
]

_NORMS = ("backward", "ortho", "forward")
_COMPLEX = {"float32": "complex64", "float64": "complex128"}


def _input(x, name, real):
    """``x`` as a Tensor fit for transform ``name`` and the dtype to convert it to (or None)."""
    (x,) = tensors(name, x)
    if x.ndim == 0:
        raise ValueError(f"{name}: x must have at least one dimension, got a 0-d tensor")
    kind = x.dtype.kind
    if kind == "c":
        if real:
            raise TypeError(f"{name}: expected a real floating-point tensor, got dtype {x.dtype}; use fft for "
                            "complex input")
        return x, None
    base = x.dtype.name if kind == "f" else get_default_dtype()
    target = base if real else _COMPLEX[base]
    return x, (None if target == x.dtype.name else x._backend.dtype(target))


def _norm(norm, name):
    if norm not in _NORMS:
        raise ValueError(f"{name}: norm must be 'backward', 'ortho' or 'forward', got {norm!r}")
    return norm


def _size(n, name, what="n"):
    return integer(n, name, what, minimum=1, kind="a positive integer")


def _apply(t: Transform, x, dtype, **kw):
    try:
        return run(t.op, [x], dtype, **kw)
    except ValueError as exc:
        raise ValueError(f"{t.name}: {exc} (shape {x.shape}, {kw})") from None


def _axes(t: Transform, x, s, axes):
    """``(s, axes)`` of a transform over several axes, checked and normalised."""
    name = t.name
    if axes is not None:
        axes = [normalize_axis(a, x.ndim, name) for a in ([axes] if isinstance(axes, int) else axes)]
        if not axes and t.halved:  # its last axis is the halved one: there must be one
            raise ValueError(f"{name}: axes is empty; it must transform at least one axis")
    if s is not None:
        if axes is None:
            raise ValueError(f"{name}: s needs axes (the axes its sizes are for)")
        given = list(s)
        if len(given) != len(axes):
            raise ValueError(f"{name}: s {tuple(given)} and axes {tuple(axes)} have different lengths")
        # -1: every input element along that axis
        s = [_size(n, name, "s") if n != -1 else x.shape[a] for n, a in zip(given, axes)]
        if t.halved == "input" and given and given[-1] == -1:  # irfftn's last axis: 2 * (M - 1) outputs
            s[-1] = 2 * (x.shape[axes[-1]] - 1)
    return s, axes


def transform(t: Transform):
    """The namespace function of the record ``t``: ``name(x, /, *, n=None, axis=-1,
    norm="backward")`` over one axis, ``name(x, /, *, s=None, axes=None, norm="backward")``
    over several, as the standard says."""
    name, real = t.name, t.halved == "output"
    if t.axes == "one":

        def function(x, /, *, n=None, axis=-1, norm="backward"):
            x, dtype = _input(x, name, real)
            size = None if n is None else _size(n, name)
            return _apply(t, x, dtype, n=size, axis=normalize_axis(axis, x.ndim, name), norm=_norm(norm, name))

    else:

        def function(x, /, *, s=None, axes=None, norm="backward"):
            x, dtype = _input(x, name, real)
            s, axes = _axes(t, x, s, axes)
            return _apply(t, x, dtype, s=s, axes=axes, norm=_norm(norm, name))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = t.doc
    return function


fft = transform(TRANSFORMS["fft"])
ifft = transform(TRANSFORMS["ifft"])
fftn = transform(TRANSFORMS["fftn"])
ifftn = transform(TRANSFORMS["ifftn"])
rfft = transform(TRANSFORMS["rfft"])
irfft = transform(TRANSFORMS["irfft"])
rfftn = transform(TRANSFORMS["rfftn"])
irfftn = transform(TRANSFORMS["irfftn"])
hfft = transform(TRANSFORMS["hfft"])
ihfft = transform(TRANSFORMS["ihfft"])


def _frequencies(name, n, d, dtype, device):
    backend = get_backend(device)
    n = _size(n, name)
    dtype = as_dtype(dtype, name).name if dtype is not None else get_default_dtype()
    if dtype not in _COMPLEX:
        raise ValueError(f"{name}: dtype must be a real floating-point dtype, got {dtype}")
    if d == 0:  # NumPy's own error is an unnamed ZeroDivisionError
        raise ZeroDivisionError(f"{name}: the sample spacing d must not be 0 (the frequencies are 1 / (d * n))")
    with backend.context():
        out = getattr(backend.fft, name)(n, d=float(d), dtype=backend.dtype(dtype), device=backend.xp_device)
    return leaf(out, backend, name)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of a transform of length ``n`` and sample spacing ``d``:
    ``[0, 1, ..., -2, -1] / (d * n)`` (default dtype: the default floating dtype)."""
    return _frequencies("fftfreq", n, d, dtype, device)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The non-negative sample frequencies (for ``rfft``): ``[0, 1, ..., n // 2] / (d * n)``."""
    return _frequencies("rfftfreq", n, d, dtype, device)


def _shift(name, op):
    def shift(x, /, *, axes=None):
        (x,) = tensors(name, x)
        if not x.dtype.is_floating:
            raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
        axes = tuple(range(x.ndim)) if axes is None else normalize_axes(
            tuple(axes) if not isinstance(axes, int) else axes, x.ndim, name)
        if not axes:  # nothing to shift (a 0-d tensor, or axes=()): a copy
            return positive(x)
        return run(op, [x], axes)

    shift.__name__ = shift.__qualname__ = name
    shift.__doc__ = op.__doc__
    return shift


fftshift = recorded(ops.fftshift, "fft", axes="many")(_shift("fftshift", ops.fftshift))
ifftshift = recorded(ops.ifftshift, "fft", axes="many")(_shift("ifftshift", ops.ifftshift))

del tensor
