"""Data-parallel training: :class:`DistributedDataParallel`, as PyTorch's.

Each process runs the same model on its own share of every batch; after ``backward``
the gradients are averaged over the processes, so that every process takes the same
optimizer step, the step one process would take on the whole batch::

    mpiexec -n 2 python -m mpi4py train.py

    from leanpass import distributed as dist, nn, optim

    dist.init_process_group()
    model = nn.parallel.DistributedDataParallel(nn.MLP([784, 256, 10]))
    opt = optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:                     # a DistributedSampler gives each rank its share
        opt.zero_grad()
        nn.cross_entropy_loss(model(x), y).backward()   # gradients averaged here
        opt.step()
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import autograd, distributed
from .._dtypes import dtype_name
from ..tensor import Tensor
from .module import Module

__all__ = ["DistributedDataParallel"]


class _Bucket:
    """Gradients of some parameters (one device and dtype), reduced in one message."""

    __slots__ = ("params", "offsets", "size", "ready", "flat", "request")

    def __init__(self, params):
        self.params = params
        self.offsets = []
        size = 0
        for p in params:
            self.offsets.append(size)
            size += p.size
        self.size = size
        self.ready = 0
        self.flat = self.request = None


class DistributedDataParallel(Module):
    """``module``, with its gradients averaged over the processes of the group after
    each backward call (``leanpass.distributed.init_process_group()`` first).

    - At construction, rank 0's parameters (and buffers, where the module has them)
      are copied to every process.
    - The gradients travel in buckets of about ``bucket_cap_mb`` megabytes, the last
      layers' first, each one all-reduce, divided by the number of processes as they
      are packed (so the sum is the mean). LeanPass's engine writes the gradients of a
      backward call at its end, so the buckets are reduced then, in order: the
      communication does not overlap the backward computation. (With NCCL each
      bucket's all-reduce is queued on the stream without waiting for the one before.)
    - :meth:`no_sync` accumulates gradients locally (a forward inside it makes the
      following backward skip the averaging); the first backward after it averages
      the accumulated sum.
    - A parameter that got no gradient on this process counts as zeros in the
      average, so all processes always exchange the same buckets.

    The wrapped module is ``.module``; its parameters appear under ``module.`` in
    ``state_dict`` (as PyTorch's), so save ``ddp.module.state_dict()`` to load
    the weights without the wrapper.
    """

    def __init__(self, module: Module, *, bucket_cap_mb: float = 25.0, broadcast_buffers: bool = True):
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected a Module, got {type(module).__name__}")
        if not isinstance(bucket_cap_mb, (int, float)) or isinstance(bucket_cap_mb, bool) or not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be a positive number, got {bucket_cap_mb!r}")
        group = distributed._require("DistributedDataParallel")
        params = module.parameters()
        devices = sorted({p.device for p in params})
        if len(devices) > 1:
            raise ValueError(f"DistributedDataParallel: the module's parameters are on several devices {devices}; "
                             "move it to one with module.to(device)")
        for p in params:
            distributed._checked("DistributedDataParallel", p)  # a device the group carries
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.broadcast_buffers = bool(broadcast_buffers)
        self._group = group
        self._sync_next = True  # whether the next backward averages (set by each forward)
        self._no_sync = False
        self._pending = False
        if group.name == "nccl":
            self._lib = group.cupy
        else:
            self._lib = np
        self._broadcast_state(params)
        self._buckets = self._make_buckets([p for p in params if p.requires_grad])
        self._bucket_of = {id(p): (i, b) for i, b in enumerate(self._buckets) for p in b.params}
        self._next = 0
        self._handles = [p.register_post_accumulate_grad_hook(self._ready) for b in self._buckets for p in b.params]

    # ---- set-up -------------------------------------------------------------------------------
    def _broadcast_state(self, params) -> None:
        for p in params:
            distributed.broadcast(p, src=0)
        self._broadcast_module_buffers()

    def _broadcast_module_buffers(self) -> None:
        named_buffers = getattr(self.module, "named_buffers", None)
        if named_buffers is not None:
            for _, buf in named_buffers():
                distributed.broadcast(buf, src=0)

    def _make_buckets(self, params) -> list:
        """Parameters in reverse order (roughly the order backward reaches them),
        grouped by device and dtype, cut at ``bucket_cap_mb``."""
        cap = self.bucket_cap_mb * 2**20
        buckets, open_ = [], {}
        for p in reversed(params):
            key = (p.device, dtype_name(p.dtype))
            members, nbytes = open_.get(key, ([], 0))
            members.append(p)
            nbytes += p.size * np.dtype(dtype_name(p.dtype)).itemsize
            if nbytes >= cap:
                buckets.append(_Bucket(members))
                open_.pop(key, None)
            else:
                open_[key] = (members, nbytes)
        buckets.extend(_Bucket(members) for members, _ in open_.values())
        return buckets

    # ---- forward and no_sync -------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        self._sync_next = not self._no_sync
        if self.broadcast_buffers and self._sync_next:
            self._broadcast_module_buffers()
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, forward passes make their backward accumulate gradients on this
        process only (no communication), as PyTorch's ``no_sync``."""
        old, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = old

    # ---- the averaging, driven by the engine's hooks ------------------------------------------
    def _ready(self, p: Tensor) -> None:
        if not self._sync_next or self._group.size == 1:  # one process: the mean is the gradient itself
            return
        if not self._pending:  # the first gradient of this backward call
            autograd.queue_callback(self._finish)
            self._pending = True
            self._next = 0
            for b in self._buckets:
                b.ready = 0
        try:
            bucket = self._bucket_of[id(p)][1]
            bucket.ready += 1
            buckets = self._buckets
            while self._next < len(buckets) and buckets[self._next].ready == len(buckets[self._next].params):
                self._start(buckets[self._next])  # in bucket order: every process starts them alike
                self._next += 1
        except BaseException:
            self._pending = False  # the next backward starts afresh
            raise

    def _start(self, bucket: _Bucket) -> None:
        """Pack the bucket's gradients, divided by the number of processes, into one flat
        array (one pass each) and start its all-reduce, whose sum is then their mean."""
        lib = self._lib  # NumPy for MPI, which sends host arrays; CuPy for NCCL
        p0 = bucket.params[0]
        flat = lib.empty(bucket.size, dtype=dtype_name(p0.dtype))
        scale = 1.0 / self._group.size
        for p, start in zip(bucket.params, bucket.offsets):
            part = flat[start:start + p.size]
            if p.has_grad:
                lib.multiply(lib.asarray(p.grad).reshape(-1), scale, out=part)
            else:  # no gradient here: zeros, so every process sends the same bucket
                part.fill(0)
        bucket.flat = flat
        bucket.request = self._group.start_all_reduce(flat, "sum")

    def _finish(self) -> None:
        """After every hook of the backward call: start the buckets not started yet
        (those with a parameter that got no gradient), wait for all, write the means."""
        self._pending = False
        buckets = self._buckets
        while self._next < len(buckets):
            self._start(buckets[self._next])
            self._next += 1
        lib = self._lib
        for bucket in buckets:
            self._group.finish(bucket.request)
            flat, bucket.flat, bucket.request = bucket.flat, None, None
            for p, start in zip(bucket.params, bucket.offsets):
                part = flat[start:start + p.size].reshape(p.shape)
                g = p.grad if p.has_grad else None
                if isinstance(g, lib.ndarray):  # the gradient array, written in place
                    lib.copyto(g, part)
                else:  # no gradient yet, or a strict array: set (the setter copies)
                    p.grad = part

    def extra_repr(self) -> str:
        sizes = ", ".join(str(b.size) for b in self._buckets)
        return f"{self._group.size} processes ({self._group.name}), buckets of [{sizes}] elements"
