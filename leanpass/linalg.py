"""``leanpass.linalg``: the array API standard's linear algebra extension, differentiable."""

from __future__ import annotations

__all__: list[str] = []
