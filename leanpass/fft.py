"""``leanpass.fft``: the array API standard's fast Fourier transform extension."""

from __future__ import annotations

__all__: list[str] = []
