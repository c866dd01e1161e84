"""Operations of the standard's searching section (see :mod:`leanpass.ops._op`)."""

from __future__ import annotations

from ._op import op  # noqa: F401
