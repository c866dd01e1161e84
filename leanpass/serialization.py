"""``save`` / ``load`` of state dicts as ``.npz`` files, without pickle.

A file holds each array as its own ``.npy`` entry and, in the entry
``__leanpass__``, a JSON description of the nested dicts, lists and numbers
around them, with a format marker and version. Arrays are written from the
host, so a state saved on one device loads on any other.

Format versions: 1 (LeanPass 0.3 and before) stored ``Linear.weight`` as ``(in,
out)`` and ``MultiheadAttention.in_proj_weight`` as ``(E, 3E)``; 2 stores every
array in PyTorch's layout, as the layers hold it, and a Tensor saved alone as a
Tensor (``{"tensor": {"data": ..., "requires_grad": ..., "name": ...}}`` at the
top of the description). The dicts read from a version 1 file are
:class:`OldFormatDict`, which ``Module.load_state_dict`` reads in 0.3's layout.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import re
import socket
import tempfile
import weakref
import zipfile
import zlib

import numpy as np

from .backends import backend_of_array, get_backend
from .tensor import Tensor, as_tensor

__all__ = ["save", "load", "FORMAT", "VERSION", "OldFormatDict"]

FORMAT = "leanpass"
VERSION = 2  # 1: LeanPass 0.3 (Linear weights (in, out)); 2: PyTorch's layouts, bare Tensors
TORCH_LAYOUTS = 2  # the first version whose arrays are all in PyTorch's layouts
_META = "__leanpass__"
_ARRAY_KINDS = "biufc"  # bool, integers, floats, complex: what .npy holds without pickle
_STANDARD_DTYPES = frozenset(  # of those, the array API standard's (float16 or longdouble load on no device but cpu)
    ["bool", "float32", "float64", "complex64", "complex128"]
    + [f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)])
# The default cap of ``load``: above any state dict LeanPass is made for (a billion float32
# values), below what takes a common machine's memory when a small file claims more.
_DEFAULT_MAX_BYTES = 4 * 2**30
_MAX_DESCRIPTION = 64 * 2**20  # the JSON description: a few KiB in practice; parsing multiplies its size
# Temporary files are named after the host and the process writing them, so that a
# later save can tell one left behind by a killed process from one still being written.
_HOST = format(zlib.crc32(socket.gethostname().encode()), "08x")
_TEMP = re.compile(r"\.leanpass-([0-9a-f]{8})-(\d{1,10})-[A-Za-z0-9_]+\.npz")


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (int, float, bool, str))


def _where(keys: str) -> str:
    return keys or "the top level"


def transposed_copy(array, backend):
    """A new C-ordered array holding the transpose of the 2-D ``array`` (a plain
    ``permute_dims`` is a view, which a copy of NumPy's keeps in Fortran order: a
    parameter's gradient, always C-ordered, would then differ in layout)."""
    xp = backend.xp
    t = xp.permute_dims(array, (1, 0))
    return backend.copy(xp.reshape(xp.reshape(t, (-1,)), t.shape))  # the flat reshape lays it out in C order


# id -> weak reference of the tensors whose values were turned from LeanPass 0.3's layout
# (by Module.load_state_dict or a 0.3 pickle): an optimizer state of 0.3 loaded after is
# turned for the same tensors, and a weight two 0.3 layers share is turned once. (Not a
# WeakSet: its lookups compare Tensors with ==, which is element-wise.)
_TRANSPOSED: dict = {}


def note_transposed(t) -> None:
    key = id(t)

    def forget(ref):
        if _TRANSPOSED.get(key) is ref:
            del _TRANSPOSED[key]

    _TRANSPOSED[key] = weakref.ref(t, forget)


def was_transposed(t) -> bool:
    ref = _TRANSPOSED.get(id(t))
    return ref is not None and ref() is t


class OldFormatDict(dict):
    """A dict that :func:`load` read from a file of an older format version,
    ``format_version`` (1: LeanPass 0.3, whose ``Linear`` weights are ``(in, out)``).
    ``Module.load_state_dict`` reads one in that version's layout, transposing the
    arrays 0.3 stored transposed; otherwise it is a plain dict. A copy made with
    ``dict(...)`` is plain: load it with ``layout="leanpass-0.3"``."""

    def __init__(self, items=(), format_version: int = 1):
        super().__init__(items)
        self.format_version = format_version


def save(obj, path) -> None:
    """Write a state dict (a module's or an optimizer's: nested dicts and lists of
    arrays, Tensors, numbers, strings), or a Tensor, to ``path`` as ``.npz``. A
    Tensor inside a container is saved as its array; one saved alone loads back as
    a Tensor, with its ``requires_grad`` and name.

    Arrays must be bool, integer, float or complex (anything else would need
    pickle; ``TypeError``). The file is written whole to a temporary file next to
    the target and then moved into place, so an existing file is never left
    half-written; a symlink is written through (the link stays, its target is
    replaced); a read-only target raises ``PermissionError``. On any error nothing
    is written. Temporary files left by killed saves on this host are removed by
    the next save to the same folder.
    """
    arrays: dict[str, np.ndarray] = {}
    open_containers: set[int] = set()  # those being encoded: one met again holds itself

    def encode(value, keys: str):
        if isinstance(value, Tensor):
            value = value.data
        if _is_array(value):
            backend = backend_of_array(value)
            host = np.asarray(value) if backend is None else backend.to_host(value)
            if host.dtype.kind not in _ARRAY_KINDS or host.dtype.name not in _STANDARD_DTYPES:
                raise TypeError(
                    f"save: the array at {_where(keys)} has dtype {host.dtype}; LeanPass files hold the array "
                    "API standard's bool, integer, float and complex dtypes only (every device loads them; no "
                    "pickle)"
                )
            key = f"a{len(arrays)}"
            arrays[key] = host
            return {"array": key}
        if isinstance(value, (dict, list, tuple)):
            if id(value) in open_containers:
                raise ValueError(f"save: the {type(value).__name__} at {_where(keys)} refers to itself")
            open_containers.add(id(value))
            try:
                return encode_container(value, keys)
            finally:
                open_containers.discard(id(value))
        if value is None or isinstance(value, (bool, int, float, str)):
            return {"value": value}
        raise TypeError(
            f"save: cannot store a {type(value).__name__} (at {_where(keys)}); save state dicts "
            "(model.state_dict(), optimizer.state_dict()) made of arrays, numbers and strings"
        )

    def encode_container(value, keys: str):
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                if not isinstance(k, (str, numbers.Integral)) or isinstance(k, (bool, np.bool_)):
                    raise TypeError(
                        f"save: dict keys must be strings or integers, got {type(k).__name__} at {_where(keys)}"
                    )
                items.append([k if isinstance(k, str) else int(k), encode(v, f"{keys}[{k!r}]")])  # NumPy ints too
            return {"dict": items}
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [encode(v, f"{keys}[{i}]") for i, v in enumerate(value)]}

    try:
        if isinstance(obj, Tensor):  # alone: loads back as a Tensor
            tree = {"tensor": {"data": encode(obj, ""), "requires_grad": obj.requires_grad, "name": obj.name}}
        else:
            tree = encode(obj, "")
        meta = {"format": FORMAT, "version": VERSION, "tree": tree}
        blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    except RecursionError:
        raise ValueError("save: the object is nested too deeply to save") from None
    path = os.fsdecode(os.fspath(path))  # a bytes path too
    target = os.path.realpath(path)  # through symlinks: the link stays, its target is replaced
    if os.path.exists(target) and (not os.access(target, os.W_OK) or not os.stat(target).st_mode & 0o222):
        link = f" (a link to {target!r})" if os.path.islink(path) else ""
        raise PermissionError(f"save: {path!r}{link} is read-only; nothing was written")
    folder = os.path.dirname(target)
    _remove_stale_temporaries(folder)
    fd, tmp = tempfile.mkstemp(prefix=f".leanpass-{_HOST}-{os.getpid()}-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            for name, array in [(_META, blob), *arrays.items()]:
                with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, array, allow_pickle=False)
        os.chmod(tmp, _mode_for(target))  # mkstemp makes 0600; keep what a plain write would give
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _remove_stale_temporaries(folder: str) -> None:
    """Remove the temporary files of saves on this host whose process is gone (killed
    mid-save). Only POSIX can ask whether a process lives without touching it."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            match = _TEMP.fullmatch(entry.name)
            if match and match[1] == _HOST and not _process_alive(int(match[2])):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process (PermissionError), or no valid pid: keep
        pass
    return True


def load(path, device=None, *, max_bytes=_DEFAULT_MAX_BYTES):
    """Read a state dict written by :func:`save`, its arrays on ``device`` (default:
    the default device); a Tensor saved alone comes back as a Tensor there, with its
    dtype, ``requires_grad`` and name. The dicts of a file of format version 1
    (LeanPass 0.3) are :class:`OldFormatDict`, which ``Module.load_state_dict``
    reads in 0.3's layout (``Linear`` weights transposed).

    ``max_bytes`` (default 4 GiB; ``None``: no limit) caps the total size of the
    arrays read (and of the description): an entry whose ``.npy`` header claims
    more than is left is refused before anything is allocated, so a small,
    highly compressed file cannot take all memory.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a file
    that is truncated, corrupt, over ``max_bytes``, or not a LeanPass file.
    Reading never changes the file.
    """
    path = os.fsdecode(os.fspath(path))
    if max_bytes is not None:
        if not isinstance(max_bytes, numbers.Integral) or isinstance(max_bytes, bool):
            raise TypeError(f"load: max_bytes must be an integer or None, got {type(max_bytes).__name__}")
        if max_bytes < 0:
            raise ValueError(f"load: max_bytes must be >= 0, got {max_bytes}")
        max_bytes = int(max_bytes)
    if not os.path.isfile(path):
        if os.path.isdir(path):
            raise IsADirectoryError(f"load: {path!r} is a folder, not a file saved by leanpass.save")
        raise FileNotFoundError(f"load: no such file: {path!r}")
    backend = get_backend(device)
    budget = _Budget(path, max_bytes)
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as archive:
            if f"{_META}.npy" not in archive.namelist():
                raise _Refused(f"{path!r} is not a LeanPass file: it has no {_META!r} entry")
            raw = _read_entry(archive, _META, "the description", budget, _MAX_DESCRIPTION)
            meta = json.loads(raw.tobytes().decode("utf-8"))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                marker = meta.get("format") if isinstance(meta, dict) else None
                raise _Refused(f"{path!r} is not a LeanPass file (format marker {marker!r})")
            version = meta.get("version")
            if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= VERSION:
                raise _Refused(f"{path!r} has format version {version!r}; this LeanPass reads 1 to {VERSION}")

            def decode(node, keys: str):
                if not isinstance(node, dict) or len(node) != 1:
                    raise _Refused(f"{path!r} has a malformed description ({node!r:.80})")
                (kind, value), = node.items()
                if kind == "array":
                    if not isinstance(value, str):
                        raise _Refused(f"{path!r} has a malformed array reference {value!r:.80}")
                    host = _read_entry(archive, value, _where(keys), budget)
                    return backend.from_host(host, host.dtype.name)
                if kind == "dict":
                    items = {k: decode(v, f"{keys}[{k!r}]") for k, v in value}
                    return items if version >= TORCH_LAYOUTS else OldFormatDict(items, version)
                if kind == "list":
                    return [decode(v, f"{keys}[{i}]") for i, v in enumerate(value)]
                if kind == "tuple":
                    return tuple(decode(v, f"{keys}[{i}]") for i, v in enumerate(value))
                if kind == "value":
                    return value
                raise _Refused(f"{path!r} has an unknown entry kind {kind!r}")

            def decode_tensor(value):
                if (version < TORCH_LAYOUTS or not isinstance(value, dict)
                        or set(value) != {"data", "requires_grad", "name"}
                        or not isinstance(value["requires_grad"], bool)
                        or not isinstance(value["name"], (str, type(None)))):
                    raise _Refused(f"{path!r} has a malformed tensor entry ({value!r:.80})")
                data = decode(value["data"], "")
                if not _is_array(data):
                    raise _Refused(f"{path!r} has a tensor entry without an array ({value!r:.80})")
                t = as_tensor(data, device=backend.device, dtype=data.dtype)  # integers stay integers
                t.requires_grad_(value["requires_grad"])  # ValueError for an integer tensor
                t.name = value["name"]
                return t

            tree = meta.get("tree")
            try:
                if isinstance(tree, dict) and len(tree) == 1 and "tensor" in tree:  # a Tensor saved alone
                    return decode_tensor(tree["tensor"])
                return decode(tree, "")
            except (TypeError, AttributeError) as exc:
                raise _Refused(f"{path!r} has a malformed description ({type(exc).__name__}: {exc})") from None
    except _Refused as exc:
        raise ValueError(f"load: {exc}") from None
    except RecursionError:
        raise ValueError(f"load: {path!r} has a description nested too deeply to read") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, zlib.error) as exc:
        raise ValueError(
            f"load: {path!r} is not a readable LeanPass file (truncated, corrupt or another format): "
            f"{type(exc).__name__}: {exc}"
        ) from None


class _Refused(Exception):
    """A file read without error but refused; its message becomes the ValueError's."""


class _Budget:
    """What ``load`` may still allocate: ``max_bytes`` less what it has read."""

    def __init__(self, path: str, max_bytes: int | None):
        self.path, self.max_bytes, self.used = path, max_bytes, 0

    def take(self, nbytes: int, entry: str, where: str, limit: int | None) -> None:
        if self.max_bytes is not None and self.used + nbytes > self.max_bytes:
            raise _Refused(
                f"{self.path!r}: entry {entry!r} ({where}) needs {nbytes} bytes, {self.used} are read already, "
                f"over the limit max_bytes={self.max_bytes}; pass a larger max_bytes to read it"
            )
        if limit is not None and nbytes > limit:
            raise _Refused(f"{self.path!r}: entry {entry!r} ({where}) needs {nbytes} bytes, over {limit}")
        self.used += nbytes


def _read_entry(archive: zipfile.ZipFile, name: str, where: str, budget: _Budget, limit=None) -> np.ndarray:
    """The array of ``name.npy``: its header read and checked (numeric dtype, a size
    its entry holds, within the budget) before the array is allocated."""
    try:
        info = archive.getinfo(f"{name}.npy")
    except KeyError:
        raise _Refused(f"{budget.path!r} lacks the array entry {name!r}") from None
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
        raise _Refused(
            f"{budget.path!r} is not a readable LeanPass file: its entry {name!r} is encrypted or compressed "
            f"with zip method {info.compress_type} (LeanPass reads stored and deflated entries)"
        )
    with archive.open(info) as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise _Refused(
                f"{budget.path!r} is not a readable LeanPass file: its entry {name!r} has .npy format version "
                f"{version} (LeanPass reads 1.0 and 2.0)"
            )
        if dtype.kind not in _ARRAY_KINDS:
            raise _Refused(f"{budget.path!r} holds a non-numeric array ({dtype}) at {name!r}")
        if any(n < 0 for n in shape):
            raise _Refused(f"{budget.path!r}: entry {name!r} has a negative shape {shape}")
        nbytes = math.prod(shape) * dtype.itemsize
        held = info.file_size - stream.tell()
        if nbytes > held:
            raise _Refused(
                f"{budget.path!r}: entry {name!r} ({where}) claims {nbytes} bytes of data but holds {held} "
                "(truncated or corrupt)"
            )
        budget.take(nbytes, name, where, limit)
        data = np.empty(nbytes, dtype=np.uint8)
        view, done = memoryview(data), 0
        while done < nbytes:  # in pieces: a whole-size read would hold a second copy
            got = stream.readinto(view[done:done + 2**20])
            if not got:
                raise _Refused(f"{budget.path!r}: entry {name!r} ends after {done} of {nbytes} bytes")
            done += got
    return data.view(dtype).reshape(shape, order="F" if fortran else "C")


def _mode_for(path: str) -> int:
    """The replaced file's permissions, or those the umask gives a new file."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
