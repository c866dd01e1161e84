"""``leanpass.distributed``: collectives between processes, for data-parallel training.

Two engines, the ones clusters already run, and no transport of LeanPass's own:

- ``"mpi"``: MPI through mpi4py, for tensors on the host (``cpu``, ``strict``), on one
  machine or many. ``pip install "leanpass[mpi]"`` brings mpi4py and MPICH as wheels.
- ``"nccl"``: NCCL through CuPy, for ``cuda`` tensors, one process per GPU. MPI still
  starts the processes and hands NCCL its unique id; CuPy arrays never travel over
  MPI (the MPI wheels are not CUDA-aware).

Launch every process with MPI; ``python -m mpi4py`` makes an exception on one rank
abort them all, where a plain ``python`` would leave the others waiting::

    mpiexec -n 2 python -m mpi4py train.py

    import leanpass as lp
    from leanpass import distributed as dist

    dist.init_process_group()               # "mpi" on cpu, "nccl" when the device is cuda
    t = lp.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)                      # in place: [3., 3., 3.] on both ranks of 2
    dist.destroy_process_group()

The same script also runs as one process (``python train.py``): the group then has
one rank. mpi4py and CuPy's NCCL bindings are imported only by
:func:`init_process_group`.

The collectives change their tensors in place, as ``torch.distributed``'s do: they
are not recorded in the graph (gradients do not flow through them), and each changed
tensor's version goes up, so a backward that saved its old values raises.
"""

from __future__ import annotations

import numbers
import os
import warnings

from . import backends
from ._dtypes import dtype_name
from ._graph.versions import increment_version
from .tensor import Tensor

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "get_rank", "get_world_size", "get_local_rank", "get_backend",
    "all_reduce", "broadcast", "all_gather", "barrier", "ReduceOp",
]

_OPS = ("sum", "mean", "max", "min")


class ReduceOp:
    """PyTorch's names for :func:`all_reduce`'s ``op``: ``all_reduce(t, op=ReduceOp.SUM)``
    is ``all_reduce(t, "sum")``; ``AVG`` is ``"mean"``."""

    SUM, AVG, MAX, MIN = "sum", "mean", "max", "min"

_group = None  # the process group: an _MPIGroup or _NCCLGroup while initialized


def is_available() -> bool:
    """Whether mpi4py can be imported here (every process group needs it to start)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError(
            f"init_process_group: MPI is not available ({exc}); install it with "
            'pip install "leanpass[mpi]" (mpi4py and MPICH as wheels)'
        ) from None
    return MPI


class _MPIGroup:
    """Every process of ``MPI.COMM_WORLD``, on a duplicate of it (so LeanPass's traffic
    never matches a message of the user's own)."""

    name = "mpi"

    def __init__(self):
        self.lib = backends.get_backend("cpu").module  # the library of its buffers: host (NumPy) arrays
        MPI = self.MPI = _mpi()
        self.comm = MPI.COMM_WORLD.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()
        self.limits = None  # the thread limits init_process_group sets (_share_cores), restored by destroy
        self.ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}

    def carries(self, backend) -> bool:
        return not backend.device.startswith("cuda")

    # Buffers are contiguous host (NumPy) arrays.
    def all_reduce(self, buf, op: str) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.ops[op])

    def broadcast(self, buf, src: int) -> None:
        self.comm.Bcast(buf, root=src)

    def average(self, params, offsets, size) -> None:
        """Average the gradients of ``params`` (one device and dtype; each at its offset
        in a flat buffer of ``size`` elements) over the processes, in one all-reduce:
        each gradient divided by the number of processes as it is packed (so the sum is
        the mean), then one flag per parameter, whether any process has a gradient for
        it. One that none has keeps ``.grad`` as it was (None), as PyTorch's. This is
        DistributedDataParallel's bucket."""
        lib = self.lib
        flat = lib.empty(size + len(params), dtype=dtype_name(params[0].dtype))
        flags = flat[size:]
        scale = 1.0 / self.size
        for k, (p, start) in enumerate(zip(params, offsets)):
            part = flat[start:start + p.size]
            if p.has_grad:
                g = p.grad
                lib.multiply(lib.asarray(g.data if isinstance(g, Tensor) else g).reshape(-1), scale, out=part)
                flags[k] = 1
            else:  # no gradient here: zeros, so every process sends the same buffer
                part.fill(0)
                flags[k] = 0
        everywhere = all(p.has_grad for p in params)  # then no flag needs reading (a GPU would wait)
        self.all_reduce(flat, "sum")
        used = [True] * len(params) if everywhere else (flags > 0).tolist()
        for used_here, p, start in zip(used, params, offsets):
            if not used_here:
                continue
            part = flat[start:start + p.size].reshape(p.shape)
            g = p.grad if p.has_grad else None
            if isinstance(g, lib.ndarray):  # the gradient array, written in place
                lib.copyto(g, part)
            else:  # no gradient here yet, a Tensor, or a strict array: set (the setter copies)
                p.grad = part

    def all_gather(self, send, recv) -> None:
        self.comm.Allgather(send, recv)

    def barrier(self) -> None:
        self.comm.Barrier()

    def destroy(self) -> None:
        if self.limits is not None:  # the thread pools as they were before the group
            self.limits.restore_original_limits()
        self.comm.Free()


class _NCCLGroup(_MPIGroup):
    """NCCL between the processes' GPUs (CuPy arrays, on CuPy's current stream); MPI
    carries the unique id at start-up and the barrier."""

    name = "nccl"

    def __init__(self):
        super().__init__()
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as exc:
            _MPIGroup.destroy(self)
            raise RuntimeError(
                f"init_process_group('nccl'): CuPy's NCCL bindings cannot be imported ({exc}); install "
                'pip install "leanpass[cuda12]" or "leanpass[cuda13]" (CuPy with NCCL)'
            ) from None
        self.cupy, self.nccl = cupy, nccl
        self.lib = cupy
        try:  # (a failure here frees the MPI communicator: the group was never made)
            count = cupy.cuda.runtime.getDeviceCount()
            cupy.cuda.Device(self.local_rank % count).use()  # one GPU per process on each node
            uid = nccl.get_unique_id() if self.rank == 0 else None
            uid = self.comm.bcast(uid, root=0)
            self.nccl_comm = nccl.NcclCommunicator(self.size, uid, self.rank)
        except BaseException:
            _MPIGroup.destroy(self)
            raise
        self.nccl_ops = {"sum": nccl.NCCL_SUM, "mean": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}
        self.types = {
            "float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64,
            "int8": nccl.NCCL_INT8, "uint8": nccl.NCCL_UINT8, "int32": nccl.NCCL_INT32,
            "uint32": nccl.NCCL_UINT32, "int64": nccl.NCCL_INT64, "uint64": nccl.NCCL_UINT64,
            # NCCL has no complex type: a complex sum is the sum of its float parts
            "complex64": nccl.NCCL_FLOAT32, "complex128": nccl.NCCL_FLOAT64, "bool": nccl.NCCL_UINT8,
        }

    def carries(self, backend) -> bool:
        return backend.device.startswith("cuda")

    def _type(self, buf):
        kind = buf.dtype.name
        if kind not in self.types:
            raise TypeError(f"NCCL has no type for {kind}")
        return self.types[kind], buf.size * (2 if kind.startswith("complex") else 1)

    def _stream(self) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def all_reduce(self, buf, op: str) -> None:
        kind, count = self._type(buf)
        self.nccl_comm.allReduce(buf.data.ptr, buf.data.ptr, count, kind, self.nccl_ops[op], self._stream())

    def broadcast(self, buf, src: int) -> None:
        kind, count = self._type(buf)
        self.nccl_comm.bcast(buf.data.ptr, count, kind, src, self._stream())

    def all_gather(self, send, recv) -> None:
        kind, count = self._type(send)
        self.nccl_comm.allGather(send.data.ptr, recv.data.ptr, count, kind, self._stream())

    def barrier(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()
        self.comm.Barrier()

    def destroy(self) -> None:
        self.nccl_comm.destroy()
        super().destroy()


# ---- threads: the cores a node's processes share -------------------------------------------

_THREAD_SETTINGS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _share_cores(processes: int):
    """Limit this process's BLAS and OpenMP thread pools to its share of the node's
    cores, ``cores // processes`` (at least 1), where ``processes`` of the group run on
    this node and no ``*_NUM_THREADS`` setting says otherwise (PyTorch's ``torchrun``
    sets ``OMP_NUM_THREADS=1`` alike). Each pool takes every core by default; on a
    node's shared cores they fought, their threads spinning while another process
    computed: the MLP example on 2 processes of 2 cores trained 8,500 samples/s, not
    300,000. Returns the limits to restore at the group's end (``threadpoolctl``'s),
    or None."""
    if processes < 2 or any(os.environ.get(name) for name in _THREAD_SETTINGS):
        return None
    try:
        cores = len(os.sched_getaffinity(0))  # (the cores this process may run on: mpiexec may bind it)
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        warnings.warn(f"init_process_group: {processes} processes share this node's {cores} cores, and each one's "
                      "BLAS threads take them all; install threadpoolctl (the mpi extra has it), or set "
                      "OMP_NUM_THREADS and OPENBLAS_NUM_THREADS for the processes", RuntimeWarning, stacklevel=3)
        # (stacklevel 3: the line that called init_process_group)
        return None
    return threadpool_limits(limits=max(1, cores // processes))


# ---- the process group --------------------------------------------------------------------


def init_process_group(backend: str | None = None, *, device=None) -> None:
    """Join every process started by ``mpiexec`` (or this process alone) into the group.

    ``backend``: ``"mpi"`` (host tensors) or ``"nccl"`` (``cuda`` tensors), in any
    case; ``None`` chooses from ``device`` (default: :func:`leanpass.get_default_device`).
    A ``device`` the backend does not carry is a ``ValueError``. With
    ``"nccl"`` each process takes the GPU ``cuda:<local rank>`` (its rank among the
    processes on its node) as CuPy's current device; use ``get_local_rank()`` for the
    device string."""
    global _group
    if _group is not None:
        raise RuntimeError(
            f"init_process_group: the process group is already initialized ({_group.name}, rank {_group.rank} "
            f"of {_group.size}); call destroy_process_group() first"
        )
    if isinstance(backend, str):
        backend = backend.lower()  # "MPI", "NCCL": as PyTorch's names
    if device is not None:
        device = backends.canonical_device(device)  # an unknown device raises here
        wanted = "nccl" if device.startswith("cuda") else "mpi"
        if backend is not None and backend != wanted:
            raise ValueError(f"init_process_group: backend {backend!r} does not carry tensors on {device}: "
                             f"{'nccl carries cuda tensors only' if backend == 'nccl' else 'use nccl for cuda'}")
    if backend is None:
        device = backends.get_default_device() if device is None else device
        backend = "nccl" if device.startswith("cuda") else "mpi"
    if backend == "mpi":
        _group = _MPIGroup()
    elif backend == "nccl":
        _group = _NCCLGroup()
    else:
        raise ValueError(f"init_process_group: backend must be 'mpi', 'nccl' or None, got {backend!r}")
    _group.limits = _share_cores(_group.local_size)


def destroy_process_group() -> None:
    """Leave the process group (its communicators are freed); it may be initialized again."""
    global _group
    group, _group = _require("destroy_process_group"), None
    group.destroy()


def is_initialized() -> bool:
    return _group is not None


def _require(name: str):
    if _group is None:
        raise RuntimeError(f"{name}: the process group is not initialized; call "
                           "leanpass.distributed.init_process_group() first")
    return _group


def get_rank() -> int:
    """This process's number in the group, from 0."""
    return _require("get_rank").rank


def get_world_size() -> int:
    """How many processes the group has."""
    return _require("get_world_size").size


def get_local_rank() -> int:
    """This process's number among the group's processes on its own node (machine):
    the GPU it should use (``f"cuda:{get_local_rank()}"``)."""
    return _require("get_local_rank").local_rank


def get_backend() -> str:
    """``"mpi"`` or ``"nccl"``."""
    return _require("get_backend").name


# ---- collectives ----------------------------------------------------------------------------


def _checked(name: str, t):
    """``(group, backend)`` for a collective on Tensor ``t``, after checking both."""
    group = _require(name)
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(t).__name__}")
    backend = backends.get_backend(t.device)
    if not group.carries(backend):
        raise ValueError(
            f"{name}: the tensor of shape {t.shape} is on {t.device}, but the process group uses "
            + ("NCCL, which carries cuda tensors only; init_process_group('mpi') for host tensors"
               if group.name == "nccl" else
               "MPI, which carries host tensors only (the MPI wheels are not CUDA-aware); "
               "init_process_group('nccl') for cuda tensors")
        )
    return group, backend


def _writable(name: str, t, backend) -> None:
    """Raise if ``t``'s array cannot be written in place: after the communication (an
    error before it on one process only would leave the others waiting in the
    collective), before anything is written."""
    if backend.read_only(t.data):
        raise ValueError(f"{name}: the tensor of shape {t.shape} is read-only: its array cannot be written in "
                         "place (set t.data to a writable copy)")


def same_everywhere(name: str, lines: list) -> None:
    """Raise ``ValueError`` on every process unless all of them give the same ``lines``
    (descriptions of their models: one parameter's name, shape and dtype per line),
    naming the first line where a process differs from rank 0. Two all-gathers: the
    lengths of the texts, then the texts padded to the longest."""
    group = _require(name)
    lib = group.lib
    text = "\n".join(lines).encode()
    lengths = lib.empty((group.size, 1), dtype="int64")
    group.all_gather(lib.asarray([len(text)], dtype="int64"), lengths)
    lengths = [int(n) for n in lengths[:, 0].tolist()]
    send = lib.zeros(max(lengths), dtype="uint8")
    if text:
        send[:len(text)] = lib.asarray(list(text), dtype="uint8")
    texts = lib.empty((group.size, max(lengths)), dtype="uint8")
    group.all_gather(send, texts)
    everyone = [bytes(row[:n]).decode() for row, n in zip(texts.tolist(), lengths)]
    for rank, other in enumerate(everyone):
        if other != everyone[0]:
            mine, theirs = everyone[0].split("\n"), other.split("\n")
            i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            first = mine[i] if i < len(mine) else "nothing more"
            second = theirs[i] if i < len(theirs) else "nothing more"
            raise ValueError(f"{name}: the processes' models differ: rank 0 has {first!r} where rank {rank} has "
                             f"{second!r}; every process must build the same model")


class _Buffer:
    """A tensor's data as a buffer the group can send and receive: the array itself
    when it is a contiguous, writable array of the group's library (NumPy for ``mpi``,
    CuPy for ``nccl``), else a contiguous copy that :meth:`write_back` copies into the
    tensor."""

    def __init__(self, group, backend, t: Tensor):
        self.t, self.backend = t, backend
        data, lib = t.data, group.lib
        # not data.flags.writeable: CuPy's flags have no such field (backend.read_only knows)
        if type(data) is lib.ndarray and data.flags.c_contiguous and not backend.read_only(data):
            self.array = data
        elif group.name == "nccl":  # a view: a contiguous copy on the same GPU
            self.array = lib.ascontiguousarray(data)
        else:  # strict, or a view: through a host copy
            self.array = lib.ascontiguousarray(backend.to_host(data))
        self.copied = self.array is not data

    def write_back(self) -> None:
        t = self.t
        if self.copied:
            t.data[...] = self.backend.xp.asarray(self.array, device=self.backend.xp_device)
        increment_version(t)


def all_reduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """Reduce ``tensor`` over every process, in place: afterwards each process holds the
    ``op`` (``"sum"``, ``"mean"``, ``"max"`` or ``"min"``) of all their tensors. Every
    process calls it with a tensor of the same shape and dtype. Returns the tensor.
    ``"max"`` and ``"min"`` give NaN where any process has one, on every process (as
    ``lp.max`` does), so a NaN check after them agrees across processes."""
    group, backend = _checked("all_reduce", tensor)
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {', '.join(map(repr, _OPS))}, got {op!r}")
    kind = dtype_name(tensor.dtype)
    if kind == "bool" or (kind.startswith("complex") and op in ("max", "min")):
        raise TypeError(f"all_reduce: op {op!r} is not defined for a tensor of dtype {kind} (shape {tensor.shape})")
    if op == "mean" and not (kind.startswith("float") or kind.startswith("complex")):
        raise TypeError(f"all_reduce: 'mean' needs a floating-point tensor, got dtype {kind} (shape {tensor.shape})")
    buf = _Buffer(group, backend, tensor)
    nan = None
    lib = group.lib
    if op in ("max", "min") and not kind.startswith("int") and not kind.startswith("uint"):
        # MPI's and NCCL's max/min may drop a NaN, or keep it on some ranks only (it
        # depends on the order of the operands): NaN wherever any process had one
        nan = lib.array(lib.isnan(buf.array), dtype=lib.uint8)  # an array also for 0-d (a writable buffer)
        group.all_reduce(nan, "max")
    group.all_reduce(buf.array, op)
    if nan is not None and nan.any():
        lib.copyto(buf.array, float("nan"), where=nan.astype(bool))
    if op == "mean":
        buf.array /= group.size
    _writable("all_reduce", tensor, backend)
    buf.write_back()
    return tensor


def broadcast(tensor: Tensor, src: int = 0) -> Tensor:
    """Copy process ``src``'s ``tensor`` into every other process's, in place (each
    process gives a tensor of the same shape and dtype). Returns the tensor."""
    group, backend = _checked("broadcast", tensor)
    if not isinstance(src, numbers.Integral) or isinstance(src, bool) or not 0 <= src < group.size:
        raise ValueError(f"broadcast: src must be a rank in [0, {group.size}), got {src!r}")
    buf = _Buffer(group, backend, tensor)
    group.broadcast(buf.array, int(src))
    if group.rank != src:  # the source's tensor is only read
        _writable("broadcast", tensor, backend)
        buf.write_back()
    return tensor


def all_gather(tensor_list: list, tensor: Tensor) -> list:
    """Gather every process's ``tensor`` into ``tensor_list`` (one tensor per rank, of
    ``tensor``'s shape, dtype and device), in place, as ``torch.distributed.all_gather``:
    afterwards ``tensor_list[r]`` holds rank ``r``'s tensor. Returns the list."""
    group, backend = _checked("all_gather", tensor)
    if not isinstance(tensor_list, (list, tuple)) or len(tensor_list) != group.size:
        got = len(tensor_list) if isinstance(tensor_list, (list, tuple)) else type(tensor_list).__name__
        raise ValueError(f"all_gather: tensor_list must be a list of {group.size} tensors (one per rank), got {got}")
    for r, out in enumerate(tensor_list):
        if not isinstance(out, Tensor):
            raise TypeError(f"all_gather: tensor_list[{r}] is a {type(out).__name__}, not a Tensor")
        if out.shape != tensor.shape or out.dtype != tensor.dtype or out.device != tensor.device:
            raise ValueError(
                f"all_gather: tensor_list[{r}] has shape {out.shape}, dtype {out.dtype} on {out.device}; "
                f"the tensor has shape {tensor.shape}, dtype {tensor.dtype} on {tensor.device}"
            )
    send = _Buffer(group, backend, tensor).array
    recv = group.lib.empty((group.size, *send.shape), dtype=send.dtype)
    group.all_gather(send, recv)
    for r, out in enumerate(tensor_list):
        _writable(f"all_gather: tensor_list[{r}]", out, backend)
    xp = backend.xp
    for r, out in enumerate(tensor_list):
        out.data[...] = xp.asarray(recv[r], device=backend.xp_device)
        increment_version(out)
    return tensor_list


def barrier() -> None:
    """Wait until every process of the group has called ``barrier()``."""
    _require("barrier").barrier()
