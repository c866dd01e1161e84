"""The values of an array argument of a compiled function, kept to be compared at
each replay (``leanpass._compile.state``): NumPy code on the argument is not
recorded, so a buffer refilled in place (a batch read into the same array at each
step) must not replay the values a trace computed from it."""

from __future__ import annotations

import hashlib
import math

import numpy as np


def comparable(array) -> bool:
    """Whether :func:`same_values` can tell ``array``'s values apart: not a NumPy array
    of objects or of ``StringDType`` (their bytes are references, and the objects may
    change inside), nor of a subclass (a masked array's mask, a matrix's shape rules)."""
    if isinstance(array, np.ndarray):
        return type(array) is np.ndarray and not array.dtype.hasobject and array.dtype.kind != "T"
    return True


def nbytes(array) -> int:
    """The bytes ``array``'s values take (a library without ``nbytes``: its dtype's bits)."""
    found = getattr(array, "nbytes", None)
    if found is not None:
        return int(found)
    xp = array.__array_namespace__()
    dtype = array.dtype
    try:
        bits = xp.finfo(dtype).bits if xp.isdtype(dtype, ("real floating", "complex floating")) else \
            xp.iinfo(dtype).bits if xp.isdtype(dtype, "integral") else 8
    except (TypeError, ValueError, AttributeError):  # (a library's dtype outside the standard)
        bits = 64
    if xp.isdtype(dtype, "complex floating"):  # (finfo gives a part's bits)
        bits *= 2
    return math.prod(array.shape) * max(bits // 8, 1)


def fingerprint(array):
    """A hash of the values of a NumPy array :func:`comparable` does not take or that is
    too large to copy (its data and a masked array's mask; the objects' identities, a
    ``StringDType`` array's strings), to tell whether a call changed it; None for
    another library's (not checked)."""
    if not isinstance(array, np.ndarray):
        return None
    data = np.asarray(array)
    if data.dtype.hasobject:
        return tuple(map(id, data.reshape(-1)))
    if data.dtype.kind == "T":
        return tuple(data.reshape(-1).tolist())
    digest = hashlib.blake2b(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    if isinstance(array, np.ma.MaskedArray):
        digest.update(np.ascontiguousarray(np.ma.getmaskarray(array)).reshape(-1).view(np.uint8))
    return data.shape, data.dtype, digest.digest()


def snapshot(array):
    """A copy of ``array``'s values, for :func:`same_values`."""
    if isinstance(array, np.ndarray):
        return array.copy(order="C")
    return array.__array_namespace__().asarray(array, copy=True)


def same_values(array, kept) -> bool:
    """Whether ``array`` holds :func:`snapshot` ``kept``'s values (a :func:`comparable`
    array). A NumPy array's bit for bit (``-0.0`` is not ``0.0``, a NaN its own
    payload); another library's by its ``==``, NaN equal to NaN, ``-0.0`` not ``0.0``
    (its ``bool`` waits for a device)."""
    if array.shape != kept.shape or array.dtype != kept.dtype:
        return False
    if isinstance(array, np.ndarray):
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return bool(np.array_equal(flat, kept.reshape(-1).view(np.uint8)))
    xp = array.__array_namespace__()
    same = (array == kept) | ((array != array) & (kept != kept))
    if xp.isdtype(array.dtype, "real floating"):
        same = same & (xp.signbit(array) == xp.signbit(kept))
    return bool(xp.all(same))
