"""Fast Fourier transforms (the standard's fft extension), through the device's own
``fft`` namespace (``be.fft``) (see :mod:`leanpass.ops._op`).

The transforms carry no gradient (their inputs or outputs are complex, and complex
tensors carry none in LeanPass); they live in :data:`TRANSFORMS`, by name. The
shifts are differentiable rolls: each one's gradient is the other shift.
Arguments arrive checked by :mod:`leanpass.fft` (axes non-negative, ``n`` and ``s``
positive, ``norm`` valid).
"""

from __future__ import annotations

from ._op import Op, op

_NAMES = ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft")


def _transform(name: str) -> Op:
    def forward(be, a, dtype, **kw):
        """``be.fft.<name>(a, **kw)``, ``a`` cast to ``dtype`` first when one is given."""
        if dtype is not None:
            a = be.xp.astype(a, dtype)
        out = getattr(be.fft, name)(a, **kw)
        if kw.get("axes") == []:  # no axis to transform: NumPy gives the input itself
            out = be.copy(out)
        return out, None

    forward.__name__ = forward.__qualname__ = name
    return Op(name, forward, saves=(), saves_out=False, differentiable=False,
              doc=f"The standard's ``fft.{name}`` on the device (no gradient).")


# By name, not as module attributes: ``ops.fft`` is this module.
TRANSFORMS = {name: _transform(name) for name in _NAMES}


@op("fftshift", saves=(), saves_out=False)
def fftshift(be, a, axes):
    """The zero frequency moved to the centre along ``axes`` (a tuple); the gradient is
    shifted back by ``ifftshift``."""
    fft = be.fft

    def backward(g):
        return (fft.ifftshift(g, axes=axes),)

    return fft.fftshift(a, axes=axes), backward


@op("ifftshift", saves=(), saves_out=False)
def ifftshift(be, a, axes):
    """The inverse of ``fftshift`` along ``axes``; the gradient is shifted by ``fftshift``."""
    fft = be.fft

    def backward(g):
        return (fft.fftshift(g, axes=axes),)

    return fft.ifftshift(a, axes=axes), backward
