"""``__array_namespace_info__()``: what this namespace offers."""

from __future__ import annotations

from .._dtypes import DTYPES, KINDS
from ..backends import available_devices, get_backend, get_default_device, get_default_dtype

__all__ = ["__array_namespace_info__", "Info"]


class Info:
    """The inspection object of the standard: capabilities, devices and dtypes."""

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> str:
        return get_default_device()

    def devices(self) -> list:
        return available_devices()

    def default_dtypes(self, *, device=None) -> dict:
        if device is not None:
            get_backend(device)
        real = get_default_dtype()
        return {
            "real floating": DTYPES[real],
            "complex floating": DTYPES["complex64" if real == "float32" else "complex128"],
            "integral": DTYPES["int64"],
            "indexing": DTYPES["int64"],
        }

    def dtypes(self, *, device=None, kind=None) -> dict:
        if device is not None:
            get_backend(device)
        if kind is None:
            return dict(DTYPES)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        letters = ""
        for k in kinds:
            if k not in KINDS:
                raise ValueError(f"dtypes: unknown kind {k!r}; kinds are {', '.join(map(repr, KINDS))}")
            letters += KINDS[k]
        return {name: d for name, d in DTYPES.items() if d.kind in letters}


def __array_namespace_info__() -> Info:
    return Info()
