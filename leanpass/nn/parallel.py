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
import itertools
import weakref

from .. import autograd, distributed
from .._dtypes import DTYPES, dtype_name
from .._graph import trace
from ..backends import canonical_device
from ..tensor import Tensor
from .module import Module

__all__ = ["DistributedDataParallel"]


_created = itertools.count()  # creation order of the wrappers
_round = {"number": None, "wrappers": []}  # the wrappers with gradients in the running backward call


def _average() -> None:
    """After every hook of a backward call: each wrapper that got gradients averages
    them, in creation order, so that every process enters the same all-reduces in the
    same order whatever order its gradients were reached in."""
    wrappers = sorted(_round["wrappers"], key=lambda w: w._order)
    _round["number"], _round["wrappers"] = None, []
    for wrapper in wrappers:
        wrapper._sync()


def _weak_hook(wrapper):
    """The hook each parameter gets: it holds the wrapper weakly, so the module's
    parameters do not keep a dropped wrapper alive (nor make it average)."""
    ref = weakref.ref(wrapper)

    def ready(p):
        w = ref()
        if w is not None:
            w._ready(p)

    return ready


class _Bucket:
    """Gradients of some parameters (one device and dtype), reduced in one message."""

    __slots__ = ("params", "offsets", "size")

    def __init__(self, params):
        self.params = params
        self.offsets = []
        size = 0
        for p in params:
            self.offsets.append(size)
            size += p.size
        self.size = size


def _check_device(name: str, given, device: str) -> None:
    """PyTorch's ``device_ids`` (a list of one device) and ``output_device``: LeanPass
    runs the module where its parameters are, so these may only name that device
    (an int ``i`` is ``cuda:i``)."""
    if given is None:
        return
    many = isinstance(given, (list, tuple))
    if many and len(given) != 1:
        raise ValueError(f"DistributedDataParallel: {name} must name one device (one per process), got {given!r}")
    one = given[0] if many else given
    if isinstance(one, int) and not isinstance(one, bool):
        one = f"cuda:{one}"
    if not isinstance(one, str) or canonical_device(one) != device:
        raise ValueError(f"DistributedDataParallel: {name}={given!r} names another device than the module's "
                         f"parameters, on {device}; move the module with module.to(device) instead")


class DistributedDataParallel(Module):
    """``module``, with its gradients averaged over the processes of the group after
    each backward call (``leanpass.distributed.init_process_group()`` first).

    - At construction, rank 0's parameters (and buffers, where the module has them)
      are copied to every process.
    - The gradients travel in buckets of about ``bucket_cap_mb`` megabytes, the last
      layers' first, each one all-reduce, divided by the number of processes as they
      are packed (so the sum is the mean). LeanPass's engine writes the gradients of a
      backward call at its end, so the buckets are reduced then, in order: the
      communication does not overlap the backward computation. Several wrappers whose
      modules get gradients from one backward call average in the order they were made.
    - Only the first backward call after a forward through the wrapper averages (as
      PyTorch's); a backward of ``ddp.module`` called directly stays on this process.
    - :meth:`no_sync` accumulates gradients locally (a forward inside it makes the
      following backward skip the averaging); the first backward after a forward
      outside it averages the accumulated sum.
    - A parameter that got no gradient on this process counts as zeros in the
      average, so all processes always exchange the same buckets; one that no process
      has a gradient for keeps ``.grad`` as it was (None), as PyTorch's.
    - The parameters' hooks hold the wrapper weakly: a dropped wrapper stops averaging.

    - PyTorch's ``device_ids`` and ``output_device`` may be given, naming the device
      of the module's parameters (where it runs); ``find_unused_parameters`` is
      accepted and changes nothing: unused parameters are always handled, as above.
    - A module with no parameter that requires a gradient is a ``ValueError``.

    The wrapped module is ``.module``; its parameters appear under ``module.`` in
    ``state_dict`` (as PyTorch's), so save ``ddp.module.state_dict()`` to load
    the weights without the wrapper.
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, *, bucket_cap_mb: float = 25.0,
                 broadcast_buffers: bool = True, find_unused_parameters: bool = False):
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected a Module, got {type(module).__name__}")
        if not isinstance(find_unused_parameters, bool):
            raise TypeError("DistributedDataParallel: find_unused_parameters must be a bool, got "
                            f"{type(find_unused_parameters).__name__}")
        if not isinstance(bucket_cap_mb, (int, float)) or isinstance(bucket_cap_mb, bool) or not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be a positive number, got {bucket_cap_mb!r}")
        group = distributed._require("DistributedDataParallel")
        params = module.parameters()
        devices = sorted({p.device for p in params})
        if len(devices) > 1:
            raise ValueError(f"DistributedDataParallel: the module's parameters are on several devices {devices}; "
                             "move it to one with module.to(device)")
        if not any(p.requires_grad for p in params):
            raise ValueError("DistributedDataParallel: the module has no parameter that requires a gradient: "
                             "there is nothing to average (as PyTorch, which refuses it too)")
        for p in params:
            distributed._checked("DistributedDataParallel", p)  # a device the group carries
        for name, given in (("device_ids", device_ids), ("output_device", output_device)):
            _check_device(name, given, devices[0])
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.broadcast_buffers = bool(broadcast_buffers)
        self._group = group
        self._sync_next = False  # whether the next backward averages: set by forward outside no_sync
        self._no_sync = False
        self._round = None  # the backward call (autograd.hook_round) this wrapper last joined
        self._order = next(_created)  # every process makes its wrappers in the same order
        distributed.same_everywhere("DistributedDataParallel", self._description())
        self._broadcast_state(params)
        self._buckets = self._make_buckets([p for p in params if p.requires_grad])
        self._hook()

    def _description(self) -> list:
        """One line per parameter and buffer: name, shape, dtype, whether it trains."""
        named_buffers = getattr(self.module, "named_buffers", lambda: ())
        return ([f"parameter {n}: shape {p.shape}, {p.dtype}, requires_grad={p.requires_grad}"
                 for n, p in self.module.named_parameters()]
                + [f"buffer {n}: shape {b.shape}, {b.dtype}" for n, b in named_buffers()])

    def _hook(self) -> None:
        ready = _weak_hook(self)
        self._handles = [p.register_post_accumulate_grad_hook(ready) for b in self._buckets for p in b.params]

    # ---- copies ------------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """``copy.deepcopy`` and ``pickle`` (as PyTorch's): everything but the process
        group and the hooks, which a copy gets anew from the current process group."""
        state = dict(self.__dict__)
        for key in ("_group", "_handles", "_round"):
            state.pop(key, None)
        state["_buckets"] = [b.params for b in self._buckets]
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        buckets = [_Bucket(params) for params in state.pop("_buckets")]
        self.__dict__.update(state)
        self._buckets = buckets
        self._group = distributed._group  # None when there is none: forward then says so
        self._round = None
        self._sync_next = False  # no forward went through the copy yet: its first backward is local
        self._no_sync = False  # a copy is inside no one's no_sync block
        self._order = next(_created)
        self._hook()

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
            nbytes += p.size * DTYPES[dtype_name(p.dtype)].bits // 8
            if nbytes >= cap:
                buckets.append(_Bucket(members))
                open_.pop(key, None)
            else:
                open_[key] = (members, nbytes)
        buckets.extend(_Bucket(members) for members, _ in open_.values())
        return buckets

    # ---- forward and no_sync -------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        self._arm(autograd.is_grad_enabled())
        return self.module(*args, **kwargs)

    # lp.compile: a replay arms the wrapper, and broadcasts its buffers, as a forward does. Not idempotent:
    # a rank whose replay fell back after it would broadcast twice, the others once (a hang)
    @trace.action
    def _arm(self, recording: bool) -> None:
        """Check the process group, arm the next backward to average (outside
        ``no_sync``) and give every rank rank 0's buffers. Only a forward that records a
        graph (``recording``: grad mode was on) arms it (PyTorch's rule): after an
        evaluation under no_grad, a local backward must not wait for the others; an
        evaluation between a forward and its backward keeps it armed. A compiled call's
        replay calls this again with the trace's ``recording``. The wrapper's flags are
        set past ``Module.__setattr__``: they are not members (a compiled call that sets
        them is not a call that changed its modules)."""
        if not distributed.is_initialized() or distributed._group is not self._group:
            raise RuntimeError("DistributedDataParallel: its process group was destroyed; wrap the module again "
                               "after init_process_group()")
        if recording:
            object.__setattr__(self, "_sync_next", not self._no_sync)
        if self.broadcast_buffers and not self._no_sync:
            self._broadcast_module_buffers()

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, forward passes make their backward accumulate gradients on this
        process only (no communication), as PyTorch's ``no_sync``. The flag is set past
        ``Module.__setattr__``, as :meth:`_arm`'s: only ``_arm`` reads it, which a
        compiled call's replay runs again, so a compiled micro-step replays inside and
        outside the block (a member change would trace it again at every call)."""
        trace.note("DistributedDataParallel.no_sync() inside the function (a replay would not enter it)")
        old = self._no_sync
        object.__setattr__(self, "_no_sync", True)
        try:
            yield
        finally:
            object.__setattr__(self, "_no_sync", old)

    # ---- the averaging, driven by the engine's hooks ------------------------------------------
    def _ready(self, p: Tensor) -> None:
        """A gradient of this wrapper's module was written by the running backward call:
        join its round (once); the averaging happens after every hook (:func:`_average`)."""
        if not self._sync_next or self._group is None or self._group.size == 1:  # one process: the gradient is the mean
            return
        number = autograd.hook_round()
        if _round["number"] != number:  # the first wrapper of this backward call
            _round["number"], _round["wrappers"] = number, []
            autograd.queue_callback(_average)
        if self._round != number:
            object.__setattr__(self, "_round", number)  # not a member (see _arm)
            _round["wrappers"].append(self)

    def _sync(self) -> None:
        """Average every bucket's gradients over the processes, buckets in order. Each
        bucket is one all-reduce of the gradients divided by the number of processes
        (so the sum is the mean), then one flag per parameter: whether any process has a
        gradient for it. One none has keeps ``.grad`` as it was (None), as PyTorch's."""
        object.__setattr__(self, "_sync_next", False)  # a later backward without a forward is local
        for bucket in self._buckets:
            self._group.average(bucket.params, bucket.offsets, bucket.size)

    def extra_repr(self) -> str:
        sizes = ", ".join(str(b.size) for b in self._buckets)
        if self._group is None:  # unpickled where no process group exists
            return f"no process group, buckets of [{sizes}] elements"
        return f"{self._group.size} processes ({self._group.name}), buckets of [{sizes}] elements"
