"""Fast Fourier transforms (the standard's fft extension) (see :mod:`leanpass.ops._op`)."""

from __future__ import annotations

from ._op import op  # noqa: F401
