"""``save`` / ``load`` of state dicts as ``.npz`` files, without pickle.

A file holds each array as its own ``.npy`` entry and, in the entry
``__leanpass__``, a JSON description of the nested dicts, lists and numbers
around them, with a format marker and version. Arrays are written from the
host, so a state saved on one device loads on any other.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

from .backends import backend_of_array, get_backend
from .tensor import Tensor

__all__ = ["save", "load", "FORMAT", "VERSION"]

FORMAT = "leanpass"
VERSION = 1
_META = "__leanpass__"


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, bool))


def save(obj, path) -> None:
    """Write a state dict (a module's or an optimizer's: nested dicts and lists of
    arrays, Tensors, numbers, strings) to ``path`` as ``.npz``.

    The file is written whole to a temporary file and then moved into place, so
    an existing file is never left half-written.
    """
    arrays: dict[str, np.ndarray] = {}

    def encode(value):
        if isinstance(value, Tensor):
            value = value.data
        if _is_array(value):
            backend = backend_of_array(value)
            host = np.asarray(value) if backend is None else backend.to_host(value)
            key = f"a{len(arrays)}"
            arrays[key] = host
            return {"array": key}
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"save: dict keys must be strings or integers, got {type(k).__name__}")
                items.append([k, encode(v)])
            return {"dict": items}
        if isinstance(value, (list, tuple)):
            return {"list" if isinstance(value, list) else "tuple": [encode(v) for v in value]}
        if value is None or isinstance(value, (bool, int, float, str)):
            return {"value": value}
        raise TypeError(
            f"save: cannot store a {type(value).__name__}; save state dicts (model.state_dict(), "
            "optimizer.state_dict()) made of arrays, numbers and strings"
        )

    meta = {"format": FORMAT, "version": VERSION, "tree": encode(obj)}
    blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".leanpass-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{_META: blob}, **arrays)
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; keep what a plain write would give
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path, device=None):
    """Read a state dict written by :func:`save`, its arrays on ``device`` (default:
    the default device).

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a file
    that is truncated, corrupt, or not a LeanPass file. Reading never changes the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: no such file: {path!r}")
    backend = get_backend(device)
    try:
        with open(path, "rb") as f:  # our own handle: np.load leaks its own on a truncated file
            archive = np.load(f, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise _NotLeanPass("it holds a single array, not an .npz archive")
            with archive:
                if _META not in archive.files:
                    raise _NotLeanPass(f"it has no {_META!r} entry")
                raw = archive[_META]
                if not isinstance(raw, np.ndarray):
                    raise ValueError(f"its {_META!r} entry is not an array")
                meta = json.loads(raw.tobytes().decode("utf-8"))
                entries = {name: archive[name] for name in archive.files if name != _META}
    except _NotLeanPass as exc:
        raise ValueError(f"load: {path!r} is not a LeanPass file: {exc}") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise ValueError(
            f"load: {path!r} is not a readable LeanPass file (truncated, corrupt or another format): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    marker = meta.get("format") if isinstance(meta, dict) else None
    if marker != FORMAT:
        raise ValueError(f"load: {path!r} is not a LeanPass file (format marker {marker!r})")
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise ValueError(
            f"load: {path!r} has format version {meta.get('version')!r}; this LeanPass reads up to {VERSION}"
        )

    def decode(node):
        if not isinstance(node, dict) or len(node) != 1:
            raise ValueError(f"load: {path!r} has a malformed description ({node!r:.80})")
        (kind, value), = node.items()
        if kind == "array":
            if value not in entries:
                raise ValueError(f"load: {path!r} lacks the array entry {value!r}")
            host = entries[value]
            if host.dtype.kind not in "biuf":
                raise ValueError(f"load: {path!r} holds a non-numeric array ({host.dtype}) at {value!r}")
            return backend.from_host(host, host.dtype.name)
        if kind == "dict":
            return {k: decode(v) for k, v in value}
        if kind == "list":
            return [decode(v) for v in value]
        if kind == "tuple":
            return tuple(decode(v) for v in value)
        if kind == "value":
            return value
        raise ValueError(f"load: {path!r} has an unknown entry kind {kind!r}")

    try:
        return decode(meta.get("tree"))
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"load: {path!r} has a malformed description ({type(exc).__name__}: {exc})") from None


class _NotLeanPass(Exception):
    pass


def _mode_for(path: str) -> int:
    """The replaced file's permissions, or those the umask gives a new file."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
