"""Fast Fourier transforms (the standard's fft extension), through the device's own
``fft`` namespace (``be.fft``) (see :mod:`leanpass.ops._op`).

Each transform is a :class:`Transform` record of :data:`TRANSFORMS` (by name): its op,
what its axis argument is and which side of it is a halved spectrum; the namespace
functions are made from the records (:mod:`leanpass.fft`). Each op has PyTorch's gradient
(its convention for complex values: see ``Op.complex``). The transforms of complex
(or real) input to complex output (``fft``, ``ifft``, ``fftn``, ``ifftn``, ``rfft``,
``rfftn``, ``ihfft``) are linear: their backward rule is the transposed transform
(the same transform of the gradient, the halved axis padded back, each axis cut or
padded back to the input's length), which the engine conjugates around. The ones
with real output (``irfft``, ``irfftn``, ``hfft``) read only half of a Hermitian
spectrum: their gradient is ``rfft`` of the output's gradient in the dual norm,
its bins that stand for two doubled (PyTorch's ``fft_c2r_backward``).
The shifts are differentiable rolls: each one's gradient is the other shift.
Arguments arrive checked by :mod:`leanpass.fft` (axes non-negative, ``n`` and ``s``
positive, ``norm`` valid).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._op import Op, op

_NAMES = ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft")
_DUAL = {"backward": "forward", "ortho": "ortho", "forward": "backward"}  # the adjoint's scaling
_HALVED = {"rfft": "fft", "rfftn": "fftn", "ihfft": "ifft"}  # real input: the full transform, for the adjoint
_REAL_OUTPUT = ("irfft", "irfftn", "hfft")


def _resize(be, g, axis, size):
    """``g`` cut or zero-padded to ``size`` along ``axis`` (the adjoint of padding or cutting)."""
    have = g.shape[axis]
    if have > size:
        return g[(slice(None),) * axis + (slice(0, size), ...)]
    if have < size:
        shape = list(g.shape)
        shape[axis] = size - have
        return be.xp.concat([g, be.zeros(tuple(shape), g.dtype)], axis=axis)
    return g


def _axes(a, kw) -> list:
    if "axis" in kw:
        return [kw["axis"]]
    return list(range(a.ndim)) if kw.get("axes") is None else list(kw["axes"])


def _full(be, name, g, axes, norm):
    """The transform ``name`` (or its full form, for a halved one) of ``g`` over ``axes``."""
    fft = be.fft
    if name in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        return getattr(fft, name)(g, axis=axes[0], norm=norm)
    return getattr(fft, name)(g, axes=axes, norm=norm)


def _real_output_backward(be, name, a, out, axes, norm):
    """The gradient of ``irfft``/``irfftn``/``hfft`` (real output ``out`` of the half
    spectrum ``a``): ``rfft`` of ``g`` in the dual norm, the bins that stand for two
    (all but the first and, for an even length, the last) doubled, cut or padded to
    ``a``'s lengths; for ``hfft`` (``irfft`` of ``conj(a)`` in the swapped norm) conjugated."""
    xp = be.xp
    n = out.shape[axes[-1]]
    halves = n // 2 + 1
    double = be.zeros((halves,), out.dtype) + 1.0
    double = xp.where(xp.arange(halves, device=be.xp_device) < (n + 1) // 2, 2.0, double)
    double = xp.where(xp.arange(halves, device=be.xp_device) == 0, 1.0, double)
    double = xp.reshape(double, (halves,) + (1,) * (out.ndim - 1 - axes[-1]))
    sizes = [out.shape[ax] for ax in axes]
    scale = norm if name == "hfft" else _DUAL[norm]

    def backward(g):
        if len(axes) == 1:
            h = be.fft.rfft(g, n=sizes[0], axis=axes[0], norm=scale)
        else:
            h = be.fft.rfftn(g, s=sizes, axes=axes, norm=scale)
        h = h * double
        if name == "hfft":
            h = xp.conj(h)
        for ax in axes:
            h = _resize(be, h, ax, a.shape[ax])
        return (h,)

    return backward


def _transform(name: str) -> Op:
    def forward(be, a, dtype, **kw):
        """``be.fft.<name>(a, **kw)``, ``a`` cast to ``dtype`` first when one is given."""
        if dtype is not None:
            a = be.xp.astype(a, dtype)
        out = getattr(be.fft, name)(a, **kw)
        axes = _axes(a, kw)
        if not axes:  # no axis to transform: NumPy gives the input itself
            return be.copy(out), _identity
        norm = kw.get("norm", "backward")
        if name in _REAL_OUTPUT:
            return out, _real_output_backward(be, name, a, out, axes, norm)
        last, full = axes[-1], _HALVED.get(name, name)

        def backward(g):  # the transposed transform (the engine conjugates around it)
            if full != name:  # a halved transform: the other half of the spectrum had no gradient
                g = _resize(be, g, last, _sizes(a, kw)[-1])
            h = _full(be, full, g, axes, norm)
            for ax in axes:
                h = _resize(be, h, ax, a.shape[ax])
            return (h,)

        return out, backward

    forward.__name__ = forward.__qualname__ = name
    return Op(name, forward, saves=(), saves_out=False, complex="own" if name in _REAL_OUTPUT else "holomorphic",
              doc=f"The standard's ``fft.{name}`` on the device, with PyTorch's gradient.")


def _sizes(a, kw) -> list:
    """The transform's lengths along its axes (``n``, ``s``, or the input's)."""
    axes = _axes(a, kw)
    if "axis" in kw:
        return [kw["n"] if kw.get("n") is not None else a.shape[axes[0]]]
    return list(kw["s"]) if kw.get("s") is not None else [a.shape[ax] for ax in axes]


def _identity(g):
    return (g,)


@dataclass(frozen=True)
class Transform:
    """One transform of the standard's fft extension: what its namespace function is made from."""

    name: str
    op: Op
    axes: str  # "one" (``n``, ``axis``) or "many" (``s``, ``axes``)
    # Which side is the first half of a Hermitian spectrum: None (neither: complex in and
    # out, real input converted), "output" (real input, refused complex: rfft, rfftn,
    # ihfft) or "input" (real output: irfft, irfftn, hfft). Over several axes, the halved
    # axis is the last, so ``axes`` may not be empty.
    halved: str | None
    doc: str


_DOCS = {
    "fft": "The one-dimensional discrete Fourier transform along ``axis`` (``n``: pad or trim to ``n`` points).",
    "ifft": "The one-dimensional inverse discrete Fourier transform along ``axis``.",
    "fftn": "The n-dimensional discrete Fourier transform over ``axes`` (all by default; ``s``: their sizes).",
    "ifftn": "The n-dimensional inverse discrete Fourier transform over ``axes``.",
    "rfft": "The discrete Fourier transform of real input along ``axis`` (the ``n // 2 + 1`` frequencies >= 0).",
    "irfft": "The inverse of ``rfft``: ``n`` real values (default ``2 * (m - 1)``) along ``axis``.",
    "rfftn": "The n-dimensional discrete Fourier transform of real input (the last axis halved, as ``rfft``).",
    "irfftn": "The inverse of ``rfftn``: real output of sizes ``s`` over ``axes``.",
    "hfft": "The discrete Fourier transform of a Hermitian-symmetric signal given by its first half: real output.",
    "ihfft": "The inverse of ``hfft``: the first half (``n // 2 + 1`` values) of a Hermitian signal from real input.",
}

# By name, not as module attributes: ``ops.fft`` is this module.
TRANSFORMS = {name: Transform(name, _transform(name), "many" if name.endswith("n") else "one",
                              "output" if name in _HALVED else "input" if name in _REAL_OUTPUT else None,
                              _DOCS[name] + " Differentiable, with PyTorch's gradient.")
              for name in _NAMES}


@op("fftshift", saves=(), saves_out=False, complex="holomorphic")
def fftshift(be, a, axes):
    """The zero frequency moved to the centre along ``axes`` (a tuple); the gradient is
    shifted back by ``ifftshift``."""
    fft = be.fft

    def backward(g):
        return (fft.ifftshift(g, axes=axes),)

    return fft.fftshift(a, axes=axes), backward


@op("ifftshift", saves=(), saves_out=False, complex="holomorphic")
def ifftshift(be, a, axes):
    """The inverse of ``fftshift`` along ``axes``; the gradient is shifted by ``fftshift``."""
    fft = be.fft

    def backward(g):
        return (fft.fftshift(g, axes=axes),)

    return fft.ifftshift(a, axes=axes), backward
