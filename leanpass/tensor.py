"""The Tensor: an array of any array-API library, plus the links of the graph.

This module holds the class itself: its data, gradient and graph attributes,
conversions, and the entry points of autodiff. Its operators and the methods
named after namespace functions (``t.sin()``, ``t.sum()``...) are attached by
:mod:`leanpass._namespace`; tensors are made by :mod:`leanpass._node`, indexed by
:mod:`leanpass._indexing`.
"""

from __future__ import annotations

import math
import sys
import weakref

from . import ops
from ._dtypes import DTYPES, as_dtype, dtype_name
from ._graph import hooks
from ._graph.above import above
from ._graph.engine import backprop, zero_graph_grads
from ._graph.hooks import add_grad_hook, add_post_accumulate_grad_hook
from ._graph.modes import enable_grad, grad_lock
from ._graph.node import note_complex
from ._graph.trace import TRACER
from ._graph.trace import host_read as _trace_host_read
from ._graph.trace import implicit_seed as _trace_implicit_seed
from ._graph.trace import note as _trace_note
from ._graph.trace import read as _trace_read
from ._graph.trace import read_grad as _trace_read_grad
from ._graph.versions import version_of
from ._indexing import getitem, setitem
from ._node import _check_grad_dtype as check_grad_dtype
from ._node import apply, as_tensor, fill_leaf, init_tensor, make, run1, share_version
from .backends import FLOAT_DTYPES, GRAD_DTYPES, backend_of_array, get_backend, transfer

__all__ = ["Tensor", "as_tensor", "apply"]


class Tensor:
    """An n-dimensional array that records the operations made on it.

    ``Tensor(data, *, requires_grad=False, name=None, device=None, dtype=None)``:
    ``data`` is a number, a (nested) list, an array of any registered library, or a
    Tensor. Host data (numbers, lists, NumPy arrays) goes to ``device`` (default:
    :func:`leanpass.get_default_device`); a CuPy or ``array_api_strict`` array keeps
    its device unless ``device`` asks otherwise. Integers and booleans become the
    default float dtype, float arrays keep theirs, unless ``dtype`` says otherwise
    (any dtype of the standard). Only floating-point tensors can require gradients.
    The tensor owns a copy of the data; :func:`as_tensor` shares memory instead,
    and :func:`leanpass.asarray` follows the array API's dtype rules.
    """

    # _node: the graph node that made the current value (None: a leaf, or outside any graph)
    __slots__ = ("_data", "_grad", "_backend", "_node", "_rg", "_vc", "_read_zeros", "_retain", "_base",
                 "_hooks", "name", "__weakref__")

    # NumPy and CuPy arrays on the left of an operator defer to the Tensor.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, data, *, requires_grad=False, name=None, device=None, dtype=None):
        init_tensor(self, data, requires_grad, name, device, dtype, copy=True)

    # ---- attributes -------------------------------------------------------------
    @property
    def data(self):
        """The backend array (a ``numpy.ndarray`` on ``cpu``, a ``cupy.ndarray`` on ``cuda``).

        Writing into it (``t.data[...] = x``) is not tracked by the version counter:
        it is the escape hatch, as in PyTorch."""
        if TRACER[0] is not None:
            _trace_note("Tensor.data (the array itself leaves the recorded operations)")
        return self._data

    @data.setter
    def data(self, value):
        if TRACER[0] is not None:
            _trace_note("Tensor.data = ... (a tensor's array replaced)")
        self._set_data(value)

    def _set_data(self, value, changed: bool = True) -> None:
        """Rebind ``.data``; ``changed=False`` where the values stay the same (``Module.to``
        moving or casting a parameter), which a backward's saved arrays may still read."""
        if isinstance(value, Tensor):
            value = value._data
        backend = backend_of_array(value)
        if backend is None:  # a NumPy array: this tensor's device if it holds NumPy arrays, else cpu
            backend = self._backend if type(value) is self._backend.array_type else get_backend("cpu")
        if type(value) is not backend.array_type or dtype_name(value.dtype) not in DTYPES:
            raise TypeError(
                f"Tensor.data must be an array of a standard dtype, got {type(value).__name__}"
                + (f" of dtype {value.dtype}" if hasattr(value, "dtype") else "")
            )
        if self._rg and dtype_name(value.dtype) not in GRAD_DTYPES:
            raise ValueError(f"Tensor.data: a tensor that requires grad needs floating-point (real or complex) data, "
                             f"got {value.dtype}")
        if self._rg and dtype_name(value.dtype).startswith("complex"):
            note_complex()
        self._data = value
        self._backend = backend
        node = self._node
        if node is not None:  # the node's value is the tensor's: a create_graph replay reads it there
            node._data, node._backend = value, backend
        if changed:
            version_of(self).bump()  # a backward that saved the old array must not read the new one

    @property
    def grad(self):
        """The gradient (an array of ``data``'s shape), or ``None``.

        A leaf that requires grad reads zeros until a backward pass adds to it; the
        zeros are allocated only when read. A non-leaf has a gradient only after
        :meth:`retain_grad`. Inside a function :func:`leanpass.compile` traces, it reads
        as a Tensor on the gradient's array (docs/compile.md).
        """
        if TRACER[0] is not None:
            return _trace_read_grad(self, self._read_grad)
        return self._read_grad()

    def _read_grad(self):
        """:attr:`grad`'s array (zeros made on the first read of a leaf's)."""
        g = self._grad
        if g is None and self._rg and (self._node is None or getattr(self, "_retain", False)):
            with grad_lock:  # a backward call on another thread may be storing one now
                g = self._grad
                if g is None:
                    g = self._grad = self._backend.zeros(self._data.shape, self._data.dtype)
                    self._read_zeros = True  # no gradient arrived yet: optimizers skip this tensor
        return g

    @grad.setter
    def grad(self, value):
        tracer = TRACER[0]
        if tracer is not None and tracer.records():
            return tracer.set_grad(self, value)  # recorded: a replay resets it too
        if value is not None:
            value = Tensor(value, device=self.device, dtype=self.dtype)._data
            if value.shape != self._data.shape:
                raise ValueError(
                    f"Tensor.grad: gradient of shape {value.shape} does not match the "
                    f"tensor's shape {self._data.shape}"
                )
        self._grad = value
        self._read_zeros = False

    @property
    def has_grad(self) -> bool:
        """Whether a gradient has arrived (from a backward pass, or assigned to
        ``.grad``) since the gradient was last reset. Reading ``.grad`` before that
        gives zeros and does not count: optimizers skip such tensors, as PyTorch's
        skip parameters whose ``.grad`` is ``None``."""
        if TRACER[0] is not None:
            _trace_note("Tensor.has_grad (a Python bool a replay would not read again)")
        g = self._grad
        return g is not None and (not self._read_zeros or _written(self))

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow into this tensor. Only floating-point leaves can be
        set to require grad; a tensor made by an operation requires grad when one of
        its inputs does."""
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value):
        tracer = TRACER[0]
        if tracer is not None and not (value and not self._rg and self._node is None and tracer.grad_leaf(self)):
            _trace_note("requires_grad set inside the function, on an argument or a tensor from outside")
        value = bool(value)
        if value == self._rg:
            return
        if self._node is not None:
            raise RuntimeError(
                "requires_grad can only be changed on a leaf tensor; use .detach() to make a leaf "
                "from this result"
            )
        check_grad_dtype(dtype_name(self._data.dtype), value, "requires_grad")
        self._rg = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set :attr:`requires_grad` in place and return the tensor (PyTorch)."""
        self.requires_grad = requires_grad
        return self

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self._data.shape)

    def numel(self) -> int:
        """The number of elements (PyTorch's name; ``t.size`` is the standard's)."""
        return math.prod(self._data.shape)

    @property
    def dtype(self):
        """The data type: ``leanpass.float32`` etc., which also compares equal to the
        array library's dtype and to its name."""
        return as_dtype(self._data.dtype)

    @property
    def device(self) -> str:
        """The canonical device string: ``"cpu"``, ``"cuda:0"``, ``"strict:1"``..."""
        return self._backend.device

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def _version(self) -> int:
        """How many times this tensor's array was changed in place (PyTorch's ``_version``)."""
        return 0 if self._vc is None else self._vc.count

    def __repr__(self) -> str:
        text = f"Tensor(shape={self.shape}, requires_grad={self._rg}"
        if self.name is not None:
            text += f", name={self.name}"
        if self._backend.device != "cpu":
            text += f", device={self._backend.device}"
        kind = dtype_name(self._data.dtype)
        if kind not in FLOAT_DTYPES:
            text += f", dtype={kind}"
        return text + ")"

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    __hash__ = object.__hash__  # by identity: == is element-wise

    def __contains__(self, value) -> bool:
        """``value in t``: whether an element equals ``value`` (NumPy's and PyTorch's rule;
        without this, Python would compare ``value`` with whole rows)."""
        equal = self == value
        if not isinstance(equal, Tensor):  # == does not take it (a string, None)
            raise TypeError(f"in: a tensor holds numbers; cannot look for a {type(value).__name__} in it")
        return bool(equal.any())

    # ---- Python scalars -----------------------------------------------------------
    def _scalar(self, op, traced=True):
        if traced and TRACER[0] is not None:
            _trace_note(f"{op}() of a tensor (its value read on the host: return the tensor, and convert the result)")
        data = self._data
        if math.prod(data.shape) != 1:
            raise TypeError(f"{op}: only a tensor of one element converts to a Python scalar, got shape {self.shape}")
        return host_number(self._backend, data)

    def __bool__(self) -> bool:
        if math.prod(self._data.shape) != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {self.shape} is ambiguous; use leanpass.any() or "
                "leanpass.all()"
            )
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        if dtype_name(self._data.dtype).startswith("complex"):
            raise TypeError("float() of a complex tensor; use leanpass.real() or complex()")
        value = float(self._scalar("float", traced=False))
        if TRACER[0] is not None:  # lp.compile: replayed where the function returns it as it is
            _trace_host_read(self, value, sys._getframe(1), "float() of a tensor (its value read on the host: "
                             "return it as it is, return float(t), or return the tensor)")
        return value

    def __int__(self) -> int:
        if dtype_name(self._data.dtype).startswith("complex"):
            raise TypeError("int() of a complex tensor")
        value = self._scalar("int")
        if isinstance(value, float) and not math.isfinite(value):
            raise (OverflowError if math.isinf(value) else ValueError)(f"int() of {value}")
        return int(value)

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        kind = dtype_name(self._data.dtype)
        if not kind.startswith(("int", "uint")):
            raise TypeError(f"only integer tensors can be used as an index, got dtype {kind}")
        return int(self._scalar("index"))

    def __format__(self, spec: str) -> str:
        if math.prod(self._data.shape) == 1 and (spec or not self._data.ndim):
            return format(self._scalar("format"), spec)
        if spec:
            raise TypeError(f"format: a spec ({spec!r}) needs a tensor of one element, got shape {self.shape}")
        return repr(self)

    # ---- conversions ------------------------------------------------------------
    def item(self):
        """The value of a one-element tensor as a Python number."""
        data = self._data
        if math.prod(data.shape) != 1:
            raise ValueError(f"item: only a tensor of one element converts to a number, got shape {self.shape}")
        value = host_number(self._backend, data)
        value = float(value) if dtype_name(data.dtype) in FLOAT_DTYPES else value
        if TRACER[0] is not None:  # lp.compile: replayed where the function returns it as it is
            _trace_host_read(self, value, sys._getframe(1), "Tensor.item() (a value read on the host: return it as "
                             "it is, return loss.item(), or return the tensor)")
        return value

    def numpy(self):
        """A NumPy copy of the data on the host."""
        if TRACER[0] is not None:
            _trace_note("Tensor.numpy() (values read on the host)")
        return self._backend.to_host(self._data)

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        """NumPy's view of a ``cpu`` tensor: its data (``numpy.asarray(t)``). Tensors on
        other devices raise ``TypeError``: copy them with ``.numpy()`` or ``.cpu()``.

        A tensor that requires grad, or belongs to a graph, raises ``TypeError`` too
        (PyTorch's rule): code that computes through NumPy and wraps the result back
        would drop its term from the gradient without a word. ``t.detach()`` says
        that the values alone are wanted; ``.numpy()`` and ``.data`` copy or give
        them explicitly."""
        if TRACER[0] is not None:
            _trace_note("numpy.asarray(tensor) (values read on the host)")
        if self._rg:
            raise TypeError(
                f"a tensor that requires grad ({self!r}) cannot be turned into a NumPy array implicitly: "
                "what is computed from that array would be lost from the gradient. Use t.detach() for the "
                "values outside the graph (asarray of t.detach()), or t.numpy() for a host copy"
            )
        if self._backend.library != "numpy":
            raise TypeError(
                f"a tensor on {self.device} cannot be turned into a NumPy array implicitly; "
                "use t.numpy() (a host copy) or t.cpu()"
            )
        data = self._data
        if dtype is not None and dtype != data.dtype:
            if copy is False:
                raise ValueError("__array__: copy=False, but converting the dtype needs a copy")
            return data.astype(dtype)
        if copy:
            return self._backend.copy(data)
        return data

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The data through DLPack (zero-copy where the consumer allows it). A tensor that
        requires grad raises ``BufferError``, as PyTorch's: the consumer's results would
        be outside the graph; export ``t.detach()``."""
        if self._rg:
            raise BufferError(
                f"__dlpack__: a tensor that requires grad ({self!r}) cannot be exported: what the consumer "
                "computes would be lost from the gradient. Export t.detach() for the values outside the graph"
            )
        if TRACER[0] is not None:
            _trace_note("__dlpack__ of a tensor (its values leave the recorded operations: numpy.from_dlpack...)")
        kwargs = {}
        if stream is not None:
            kwargs["stream"] = stream
        if max_version is not None:
            kwargs["max_version"] = max_version
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
        return self._backend.dlpack(self._data, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __array_namespace__(self, api_version=None):
        """The array API namespace of Tensors: :mod:`leanpass` itself."""
        if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"__array_namespace__: unsupported array API version {api_version!r}; "
                             "LeanPass implements 2024.12")
        return sys.modules[__package__]  # the package face, imported before any Tensor can exist

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data (and version counter), outside the graph."""
        if TRACER[0] is not None:  # lp.compile: the new tensor is one on this one's array (a state tensor's
            _trace_read(self)  # too, seen first here), not a constant of the trace
        return share_version(make(self._data, self._backend, "leaf", (), None, False), self)

    def to(self, device=None, dtype=None) -> Tensor:
        """This tensor on another device and/or dtype (itself if nothing changes).
        Differentiable: the gradient flows back to the original device and dtype."""
        if dtype is None and device is not None and _looks_like_dtype(device):
            device, dtype = None, device  # t.to("float32"): a dtype in the device's place
        for value in (device, dtype):
            if value is not None and not isinstance(value, str) and not hasattr(value, "device_type") \
                    and not _looks_like_dtype(value):
                raise TypeError(f"to: takes a device (such as 'cpu' or 'cuda:0') or a dtype (such as "
                                f"'float32'), got {type(value).__name__}")
        out = self
        if dtype is not None:
            out = out.astype(dtype)
        if device is not None:
            target = get_backend(device)
            if target is not out._backend:
                if TRACER[0] is not None:
                    _trace_note(f"Tensor.to({target.device!r}) (a move between devices)")
                moved, backward = ops.to.fn(out._backend, out._data, target)
                out = make(moved, target, ops.to, (out,), backward, out._rg, _replay_to(target.device))
        return out

    def to_device(self, device, /, *, stream=None) -> Tensor:
        """This tensor on ``device`` (the array API's name for :meth:`to`)."""
        return self.to(device)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self, index: int = 0) -> Tensor:
        return self.to(f"cuda:{index}")

    def astype(self, dtype, /, *, copy: bool = False, device=None) -> Tensor:
        """This tensor in another dtype (itself if the dtype is unchanged, unless
        ``copy=True``). Float to float is differentiable; a cast to any other dtype
        gives a tensor outside the graph. ``leanpass.astype`` copies by default, as
        the standard says."""
        dtype = as_dtype(dtype, "astype")
        out = self
        source = dtype_name(self._data.dtype)
        if source.startswith("complex") and not dtype.name.startswith("complex"):
            raise TypeError(f"astype: cannot cast {source} to {dtype.name} (the array API standard forbids it: "
                            "the imaginary part would be lost); take leanpass.real(x) first")
        if source != dtype.name:
            if self._rg and dtype.name.startswith("complex"):
                note_complex()
            op = ops.astype if dtype.name in GRAD_DTYPES else ops.astype_nograd
            out = run1(op, self, self._backend.dtype(dtype.name))
        elif copy:
            out = run1(ops.copy, self)
        if device is not None:
            out = out.to(device)
        return out

    # ---- autodiff ---------------------------------------------------------------
    def backward(self, gradient=None, *, retain_graph=None, create_graph: bool = False) -> None:
        """Add d(self)/d(leaf) times ``gradient`` into every leaf's ``.grad``.

        ``gradient`` (of this tensor's shape; the tensor keeps no reference to it) may
        be left out only for a tensor of one element: it is then 1, as in PyTorch.
        The graph is released afterwards unless ``retain_graph=True``: its saved
        arrays are freed, and the arrays of its intermediate tensors too (those
        nobody else holds). With ``create_graph=True`` the gradients written are
        Tensors in a graph (``.grad`` then holds a Tensor), to differentiate again;
        ``retain_graph`` then defaults to True, as in PyTorch.
        """
        if not self._rg:
            raise RuntimeError(
                f"backward: the tensor {self!r} does not require grad and has no graph; "
                "create its inputs with requires_grad=True"
            )
        backend, data = self._backend, self._data
        if gradient is None:
            if math.prod(data.shape) != 1:
                raise RuntimeError(
                    f"backward: grad can be implicitly created only for scalar outputs, got shape {self.shape}; "
                    "pass a gradient of that shape (t.backward(gradient)) or reduce first (t.sum().backward())"
                )
            if dtype_name(data.dtype).startswith("complex"):  # a loss is real: a complex value needs a direction
                raise RuntimeError(
                    f"backward: grad can be implicitly created only for real scalar outputs, got {self.dtype}; "
                    "take a real part first (lp.real(t), abs(t)) or pass a gradient (t.backward(gradient))"
                )
            grad = backend.ones(data.shape, data.dtype)
            if TRACER[0] is not None:
                _trace_implicit_seed(grad)
        elif create_graph and isinstance(gradient, Tensor):  # kept in the graph: d/d(gradient) too
            if gradient.shape != self.shape:
                raise ValueError(
                    f"backward: gradient of shape {gradient.shape} on {gradient.device} does not match the "
                    f"tensor of shape {self.shape} on {self.device}"
                )
            with enable_grad():  # kept in the graph under no_grad too, as backprop runs with grad mode on
                if gradient.device != self.device:  # moved, as without create_graph (the move is recorded)
                    gradient = gradient.to(self.device)
                grad = (gradient if gradient.dtype == self.dtype else gradient.astype(self.dtype)).clone()
        else:
            grad = as_tensor(gradient, device=backend.device, dtype=dtype_name(data.dtype))._data
            if TRACER[0] is not None and isinstance(gradient, Tensor) and grad is gradient._data:
                _trace_read(gradient)  # lp.compile: a replay starts from that tensor's array then
            if grad.shape != data.shape:
                raise ValueError(
                    f"backward: gradient of shape {tuple(grad.shape)} does not match the "
                    f"tensor of shape {self.shape}"
                )
            # not copied: the engine keeps no seed as a .grad without a copy (it counts it not fresh)
        if create_graph:
            if not isinstance(grad, Tensor):
                grad = make(grad, backend, "leaf", (), None, False)
            backprop((self,), (grad,), create_graph=True,
                     retain_graph=True if retain_graph is None else retain_graph)
        else:
            backprop((self,), (grad,), retain_graph=bool(retain_graph))

    def register_hook(self, hook):
        """Call ``hook(grad)`` with this tensor's gradient (a Tensor) each time a
        backward call (or ``autograd.grad``) has computed all of it, before it is
        used further or written into ``.grad``; a hook may return a Tensor of this
        shape to use instead, or None. Returns a handle whose ``remove()``
        unregisters it. As PyTorch's; ``RuntimeError`` on a tensor that does not
        require grad."""
        return add_grad_hook(self, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` each time a backward call has written this leaf's
        ``.grad`` (as PyTorch's hook of the same name); returns a handle whose
        ``remove()`` unregisters it. LeanPass writes every gradient of a backward call
        at its end, so the hooks run then, in the order the gradients were reached
        (the last layer's first); a hook may :func:`leanpass.autograd.queue_callback`
        work to run after all of them. Only for a leaf that requires grad
        (``RuntimeError`` otherwise)."""
        return add_post_accumulate_grad_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` during backward (a leaf
        keeps it anyway). ``RuntimeError`` for a tensor that does not require grad, as
        PyTorch's: it gets no gradient to keep."""
        if not self._rg:
            raise RuntimeError(f"retain_grad: the tensor of shape {self.shape} does not require grad, so it gets "
                               "no gradient to keep")
        node = self._node
        if node is not None:
            self._retain = True
            node._tensor = weakref.ref(self)  # the engine finds the tensor to keep the gradient in
            hooks.retaining = True

    @property
    def retains_grad(self) -> bool:
        """Whether :meth:`retain_grad` was called on this non-leaf tensor (PyTorch's name)."""
        return self._node is not None and getattr(self, "_retain", False)

    @property
    def grad_fn(self):
        """The graph node that made this tensor's value (its ``name()`` and ``str`` are the
        operation's name, ``inputs`` its parent edges), or ``None`` for a leaf and for a
        tensor outside any graph, as PyTorch's."""
        return self._node

    @property
    def _prev(self) -> tuple:
        """The parent edges of this tensor's node (SPEC's ``_prev``; read-only): for each
        tensor input, the node that made its value, or the input Tensor itself where it
        is a leaf; ``()`` for a leaf and for a result outside any graph. After a backward
        call released the graph: what it kept (non-empty; see ``zero_grad_all``)."""
        node = self._node
        return () if node is None else node._prev

    @property
    def _op(self):
        """The name of the operation that made this tensor (an ``Op``, a ``str``), or
        ``"leaf"`` for a leaf and a result outside any graph (the seed's attribute;
        read-only: the node holds it)."""
        node = self._node
        return "leaf" if node is None else node._op

    def zero_grad_all(self) -> None:
        """Reset ``.grad`` of every tensor in this tensor's graph (reads as zeros).
        After a backward call released the graph, that is every leaf it wrote a
        gradient into and every retained tensor still alive."""
        zero_graph_grads(self)  # (in a traced call it runs the call eagerly: a replay would not reset)

    # ---- copies and pickles -----------------------------------------------------
    def _copy_args(self, what: str) -> tuple:
        if self._node is not None:
            raise RuntimeError(
                f"{what}: this tensor (shape {tuple(self._data.shape)}) is the output of {self._op!r} in a "
                "graph; only leaves can be copied or pickled, as in PyTorch: use t.detach() to keep its values"
            )
        grad = self._grad
        if grad is not None and not self.has_grad:
            grad = None  # zeros read before any gradient arrived: the copy reads them too
        elif isinstance(grad, Tensor):  # from backward(create_graph=True): its values
            grad = grad._data
        return type(self), self._data, self._backend, self._rg, self.name, grad

    def __reduce_ex__(self, protocol):
        """``copy.deepcopy`` and ``pickle``: a new leaf with a copy of the data and of
        ``.grad``, the same ``requires_grad``, name, class and device, and a version
        counter of its own (one in-process counter cannot travel to another process).
        A tensor inside a graph refuses with ``RuntimeError``: ``detach()`` it first."""
        return _rebuild_tensor, self._copy_args("copy.deepcopy or pickle")

    def __copy__(self):
        """``copy.copy``: a new leaf sharing this tensor's array and ``.grad``; in-place
        changes through either count on the one version counter of that memory."""
        out = _rebuild_tensor(*self._copy_args("copy.copy"))
        out._vc = version_of(self)
        return out

    # ---- indexing ---------------------------------------------------------------
    def __getitem__(self, index) -> Tensor:
        with self._backend.context():  # index arrays are built and checked on this device
            return getitem(self, index)

    def __setitem__(self, index, value) -> None:
        with self._backend.context():
            setitem(self, index, value)


def _written(t) -> bool:
    """Whether the zeros that reading ``t.grad`` made (no gradient had arrived) have
    been written into since (``t.grad[0] = 5.0``): then they count as a gradient."""
    grad = t._grad
    if isinstance(grad, Tensor):
        grad = grad._data
    written = bool(t._backend.xp.any(grad != 0))
    if written:
        t._read_zeros = False
    return written


def _rebuild_tensor(cls, data, backend, requires_grad, name, grad):
    """A leaf of class ``cls`` holding ``data`` on ``backend`` (what copies and pickles
    of a tensor are made from; see :meth:`Tensor.__reduce_ex__`)."""
    src = backend_of_array(data)
    if src is not None and src is not backend:  # a GPU array unpickled on another GPU than its tensor's
        data = transfer(data, src, backend)
        grad = None if grad is None else transfer(grad, src, backend)
    t = object.__new__(cls)
    fill_leaf(t, data, backend, requires_grad, name, grad)
    return t


def host_number(backend, data):
    """The one value of the one-element array ``data`` as a Python number (on the host)."""
    return backend.to_host(backend.xp.reshape(data, ())).item()


def with_gradients(params) -> list:
    """``(tensor, data, gradient, backend)`` for each tensor in ``params`` that has a
    gradient (:attr:`Tensor.has_grad`): its array, its gradient as an array (the
    values of one made with ``create_graph=True``) and its backend. For optimizers,
    once per parameter group and step: one plain loop, no property calls."""
    found = []
    for p in params:
        grad = p._grad
        if grad is None or (p._read_zeros and not _written(p)):  # set wherever _grad is
            continue
        if type(grad) is Tensor:
            grad = grad._data
        found.append((p, p._data, grad, p._backend))
    return found


def clear_gradients(params, set_to_none: bool = True) -> None:
    """``p.grad = None`` for each tensor in ``params`` (an optimizer's ``zero_grad``);
    with ``set_to_none=False``, a gradient that exists is set to zeros in place
    instead (as PyTorch's ``zero_grad(set_to_none=False)``: optimizers then still
    step those parameters, with momentum)."""
    if set_to_none:
        for p in params:
            p._grad = None
            p._read_zeros = False
        return
    for p in params:
        grad = p._grad
        if grad is None:
            continue
        if isinstance(grad, Tensor) or p._backend.read_only(grad):  # in a graph, or not ours to write
            p._grad = p._backend.zeros(p._data.shape, p._data.dtype)
        else:
            with p._backend.context():
                grad[...] = 0


def _looks_like_dtype(value) -> bool:
    if isinstance(value, str):
        return value in DTYPES
    if hasattr(value, "device_type"):  # a Backend
        return False
    try:
        as_dtype(value)
    except TypeError:
        return False
    return True


# The layers below need the class: imported last.
above.tensor = Tensor  # the layers below make and recognise Tensors by it


def _replay_to(device):
    """The replay of a move to ``device`` (see :func:`leanpass._node.make`): the move,
    whose backward moves the gradient back, both on Tensors."""

    def replay(gb, prev):
        source = prev[0]
        return source.to(device), lambda g: (g.to(source.device),)

    return replay
