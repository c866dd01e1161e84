"""The backend registry: device strings -> array libraries.

``cpu`` is NumPy, ``cuda``/``cuda:N`` is CuPy, ``strict``/``strict:1``/``strict:2``
is ``array_api_strict``. A library is imported the first time one of its devices
is asked for, so ``import leanpass`` needs only NumPy and array-api-compat.
Third parties add a device type with :func:`register_backend`.
"""

from __future__ import annotations

import copyreg
import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._base import (
    FLOAT_DTYPES,
    GRAD_DTYPES,
    Backend,
    canonical_name,
    dtype_name,
    float_dtype_name,
    host_array,
    host_generator,
    host_rng,
    reseed_host,
)

__all__ = [
    "FLOAT_DTYPES",
    "GRAD_DTYPES",
    "Backend",
    "register_backend",
    "get_backend",
    "available_devices",
    "canonical_device",
    "backend_of_array",
    "transfer",
    "set_default_device",
    "get_default_device",
    "set_default_dtype",
    "get_default_dtype",
    "manual_seed",
    "host_array",
    "host_rng",
    "host_generator",
    "dtype_name",
    "float_dtype_name",
]


@dataclass
class _Entry:
    type: str
    loader: Callable[[], type]  # returns the Backend subclass (imports its library)
    library: str | None  # top-level module name of the library's array type
    always_index: bool
    cls: type | None = None


_TYPES: dict[str, _Entry] = {}
_LIBRARIES: dict[str, str] = {}  # array module root name -> device type
_INSTANCES: dict[str, Backend] = {}  # canonical device string -> backend
# Taken to make a backend object: two threads that use a device for the first time
# at once get one object (re-entrant: a backend's loader may ask for another device).
_CREATION_LOCK = threading.RLock()


def _lazy(module: str, name: str) -> Callable[[], type]:
    def load():
        return getattr(importlib.import_module(module, __name__), name)

    return load


def register_backend(
    device_type: str,
    backend,
    *,
    library: str | None = None,
    always_index: bool = False,
) -> None:
    """Add (or replace) a device type.

    ``backend`` is a :class:`Backend` subclass, or a function of no arguments that
    imports and returns one (so the library loads only when the device is used).
    ``library`` is the top-level module name of the library's array type
    (``"cupy"``), so ``Tensor(array)`` finds the device of a raw array.
    ``always_index`` makes canonical device strings carry their index (``"cuda:0"``).
    """
    if not isinstance(device_type, str) or not device_type.isidentifier():
        raise ValueError(f"register_backend: device type must be an identifier, got {device_type!r}")
    if isinstance(backend, type) and issubclass(backend, Backend):
        cls = backend
        loader = lambda: cls  # noqa: E731
        library = library or cls.library
        always_index = always_index or cls.always_index
    elif callable(backend):
        loader = backend
    else:
        raise TypeError("register_backend: backend must be a Backend subclass or a function returning one")
    owner = _LIBRARIES.get(library) if library else None
    if owner is not None and owner != device_type:
        raise ValueError(
            f"register_backend: arrays of {library!r} already belong to the device type {owner!r}; "
            "give the new backend a library of its own (library=...)"
        )
    with _CREATION_LOCK:  # no backend of the old entry is made while it is replaced
        _TYPES[device_type] = _Entry(device_type, loader, library, always_index)
        if library:
            _LIBRARIES[library] = device_type
        stale = [k for k, b in _INSTANCES.items() if b.device_type == device_type or _type_of(k) == device_type]
        for key in stale:
            del _INSTANCES[key]


def _type_of(device: str) -> str:
    return device.strip().partition(":")[0]


register_backend("cpu", _lazy(".numpy_backend", "NumpyBackend"), library="numpy")
register_backend("cuda", _lazy(".cupy_backend", "CupyBackend"), library="cupy", always_index=True)
register_backend("strict", _lazy(".strict_backend", "StrictBackend"), library="array_api_strict")


def _parse(device) -> tuple[_Entry, int]:
    if isinstance(device, Backend):
        device = device.device
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda:0', got {type(device).__name__}")
    # Errors are RuntimeErrors, as PyTorch's torch.device("tpu") and torch.device("cuda:x").
    type_, sep, index = device.strip().partition(":")
    if not type_ and not sep:
        raise RuntimeError(f"invalid device {device!r}: the device string must not be empty")
    entry = _TYPES.get(type_)
    if entry is None:
        raise RuntimeError(
            f"unknown device {device!r}: expected one of {', '.join(sorted(_TYPES))} device type at start "
            f"of device string: {type_} (add a device type with leanpass.backends.register_backend)"
        )
    if not sep:
        return entry, 0
    if not (index.isascii() and index.isdigit()):  # not '²', which int() refuses
        raise RuntimeError(f"invalid device {device!r}: the index after ':' must be a number, as in '{type_}:0'")
    return entry, int(index)


def canonical_device(device) -> str:
    """The canonical string of a device (``"cuda"`` -> ``"cuda:0"``), without importing its library."""
    entry, index = _parse(device)
    return canonical_name(entry.type, index, entry.always_index)


def _load(entry: _Entry) -> type:
    if entry.cls is None:
        try:
            entry.cls = entry.loader()
        except ImportError as exc:
            raise RuntimeError(f"its library could not be imported ({exc})") from None
    return entry.cls


def get_backend(device=None) -> Backend:
    """The backend object of a device string (the default device when ``None``).

    Raises ``RuntimeError`` naming the device for a malformed or unknown one (as
    PyTorch), and naming the reason and the fix for one that cannot be used here.
    """
    if device is None:
        device = get_default_device()
    elif isinstance(device, Backend):
        return device
    backend = _INSTANCES.get(device)
    if backend is not None:
        return backend
    with _CREATION_LOCK:  # checked again inside: another thread may have made it meanwhile
        return _create_backend(device)


def _reduce_backend(backend):
    """A copy or an unpickled backend is the registry's own object for its device:
    tensors of ``copy.deepcopy(model)`` or of a pickle meet the others' tensors."""
    return (get_backend, (backend.device,))


def _create_backend(device) -> Backend:
    backend = _INSTANCES.get(device)
    if backend is not None:
        return backend
    entry, index = _parse(device)
    name = canonical_name(entry.type, index, entry.always_index)
    backend = _INSTANCES.get(name)
    if backend is None:
        try:
            cls = _load(entry)
            indices = cls.device_indices()
        except RuntimeError as exc:
            raise RuntimeError(f"device {name!r} cannot be used: {exc}") from None
        if index not in indices:
            have = ", ".join(canonical_name(entry.type, i, entry.always_index) for i in indices)
            raise RuntimeError(f"device {name!r} does not exist on this machine; available: {have}")
        backend = cls(index)
        copyreg.pickle(cls, _reduce_backend)
        if backend.device != name:  # the registry's name and its always_index, not the class's defaults
            backend.device_type, backend.device = entry.type, name
        if _seed is not None:
            backend.seed(_seed)
        _INSTANCES[name] = backend  # published only once ready: other threads read without the lock
    if isinstance(device, str):
        _INSTANCES[device] = backend
    return backend


def available_devices() -> list[str]:
    """The devices that work on this machine, e.g. ``['cpu', 'strict', 'strict:1', 'strict:2']``
    (``'cuda:0'``... only where CuPy imports and sees a GPU)."""
    found = []
    for entry in _TYPES.values():
        try:
            cls = _load(entry)
            indices = cls.device_indices()
        except (RuntimeError, ImportError):
            continue
        found.extend(canonical_name(entry.type, i, entry.always_index) for i in indices)
    return found


def backend_of_array(array) -> Backend | None:
    """The backend an array of a registered library lives on; ``None`` for host
    data (Python numbers and lists, NumPy arrays), which goes to the requested device."""
    root = type(array).__module__.partition(".")[0]
    device_type = _LIBRARIES.get(root)
    if device_type is None or device_type == "cpu":
        return None
    entry = _TYPES[device_type]
    cls = _load(entry)
    index = cls.index_of(array)
    return get_backend(canonical_name(entry.type, index, entry.always_index))


def transfer(array, src: Backend, dst: Backend):
    """Move an array of device ``src`` to device ``dst``."""
    if src is dst:
        return array
    if src.library and src.library == dst.library:
        return dst._from_same_library(array)
    return dst.from_host(src.to_host(array), dtype=dtype_name(array.dtype))


# ---- defaults: the only global state besides the per-thread grad mode ----------

def _device_from_environment() -> str:
    value = os.environ.get("LEANPASS_DEVICE", "").strip() or "cpu"
    try:
        return canonical_device(value)
    except RuntimeError as exc:
        raise RuntimeError(f"the environment variable LEANPASS_DEVICE={value!r} is invalid: {exc}") from None


_default_device = _device_from_environment()
_default_dtype = "float64"
_seed: int | None = None


def set_default_device(device) -> None:
    """Make ``device`` the default for new tensors and modules. It is checked first:
    an unknown, malformed or unusable device raises ``RuntimeError`` (``TypeError`` for
    a non-string) and the default stays as it was."""
    global _default_device
    _default_device = get_backend(device).device


def get_default_device() -> str:
    return _default_device


def set_default_dtype(dtype) -> None:
    """``"float32"`` or ``"float64"`` (the default): the dtype of new tensors made from
    Python numbers, lists and non-float arrays."""
    global _default_dtype
    _default_dtype = float_dtype_name(dtype, "set_default_dtype")


def get_default_dtype() -> str:
    return _default_dtype


def manual_seed(seed: int) -> None:
    """Seed parameter initialisation and dropout on every backend. Any integer in
    ``[-2**63, 2**64)``, as PyTorch's (a negative seed counts as ``seed + 2**64``)."""
    global _seed
    value = int(seed)
    if not -2**63 <= value < 2**64:
        raise ValueError(f"manual_seed: the seed must be an integer in [-2**63, 2**64), got {seed!r}")
    value %= 2**64
    with _CREATION_LOCK:  # a backend made meanwhile is seeded with this seed, not the old one
        reseed_host(value)
        _seed = value
        for backend in set(_INSTANCES.values()):
            backend.seed(_seed)

