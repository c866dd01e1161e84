"""Making tensors: from user data (the constructor's rules), and as graph nodes from
operations (:func:`make`, the ``run*`` helpers, :func:`apply` for custom ops),
including in-place changes recorded in the graph (:func:`inplace`).

This is the layer between the Tensor class and :mod:`leanpass.ops`: it unwraps
Tensors to arrays, checks devices, calls an op's forward on the right device and
links the result into the graph.
"""

from __future__ import annotations

import numbers

from . import ops
from ._checks import broadcast_shapes, device_message
from ._dtypes import DTYPES, as_dtype, dtype_name
from ._graph.above import above
from ._graph.modes import OFF as _GRAD_OFF
from ._graph.modes import _state as _grad_state
from ._graph.modes import sequence as _sequence
from ._graph.node import COMPLEX, Node, note_complex
from ._graph.trace import TRACER
from ._graph.trace import note as _trace_note
from ._graph.trace import raised as _raised
from ._graph.versions import version_of
from .backends import GRAD_DTYPES, backend_of_array, get_backend, get_default_dtype, host_array, transfer
from .ops import Op
from .ops.conversion import gradient_as

__all__ = ["make", "leaf", "as_tensor", "apply", "run1", "run2", "run", "several", "inplace", "init_tensor"]

_new = object.__new__


# ---- graph nodes ----------------------------------------------------------------------------


def fill_leaf(t, data, backend, requires_grad, name, grad=None, python=False, source=None) -> None:
    """Make the new Tensor ``t`` a leaf holding ``data`` on ``backend`` (``python``: made
    from Python numbers, ``source``: what it was made of, for lp.compile's record)."""
    t._data = data
    t._backend = backend
    t._grad = grad
    t._read_zeros = False
    t._node = None
    t._vc = None
    t._rg = bool(requires_grad)
    t.name = name
    if requires_grad and dtype_name(data.dtype).startswith("complex"):
        note_complex()
    tracer = TRACER[0]
    if tracer is not None:  # a tensor made from data inside a traced call: a constant of the trace
        tracer.born(t, python, source)


def make(data, backend, op, prev, backward, requires_grad, replay=None):
    """Wrap an operation's output array as a Tensor linked into the graph: with a new
    :class:`Node` whose parents are the edges of the input Tensors ``prev``, where the
    result requires grad (and grad mode is on); outside any graph otherwise.

    ``replay`` says how to run the operation again on the Tensors ``prev`` with a
    :class:`leanpass.autograd.GraphBackend`, so that its backward builds a graph
    (``create_graph=True``; see ``leanpass.autograd._replayed``): the tuple of
    positional parameters after the inputs (the op's ``needs`` then come from the
    inputs), the dict of keyword parameters, or a function ``replay(gb, prev) ->
    (out, backward)``; None where the node cannot be run again. Storing parameters
    that exist anyway costs the training step nothing."""
    t = _new(above.tensor)
    if type(data) is not backend.array_type:  # NumPy returns scalars for 0-d results
        data = backend.as_array(data)
    t._data = data
    t._backend = backend
    t._grad = None
    t._vc = None
    t.name = None
    if requires_grad and (not _GRAD_OFF[0] or _grad_state.enabled):
        t._rg = True
        t._node = node = _new(Node)
        node._op = op
        if len(prev) == 1:  # the edges of the inputs (written out: this runs for every operation)
            a = prev[0]
            node._prev = (a if a._node is None else a._node,)
        elif len(prev) == 2:
            a, b = prev
            node._prev = (a if a._node is None else a._node, b if b._node is None else b._node)
        else:
            node._prev = tuple([p if p._node is None else p._node for p in prev])
        node._backward = backward
        node._replay = replay
        node._seq = next(_sequence)
        node._data = data
        node._backend = backend
        node._vc = None
        node._tensor = None
    else:
        t._rg = False
        t._node = None
    tracer = TRACER[0]
    if tracer is not None:  # lp.compile records the operation (replay: how to run it again)
        tracer.made(t, op, prev, replay)
    return t


def as_graph_tensor(node):
    """A Tensor whose value and graph are ``node``'s (a parent of a node, or the node
    itself, that a ``create_graph`` backward computes with); a Tensor edge is itself."""
    if type(node) is not Node:
        return node
    t = _new(above.tensor)
    t._data = node._data
    t._backend = node._backend
    t._grad = None
    t._vc = node._vc
    t.name = None
    t._rg = True
    t._node = node
    return t


def leaf(data, backend, op="leaf"):
    """A tensor outside any graph (a result that never carries gradients)."""
    return make(data, backend, op, (), None, False)


above.leaf = leaf  # the graph core wraps gradients handed to hooks and returned by grad with it


def share_version(out, source):
    """``out`` and ``source`` count in-place changes together (they share memory,
    or come from one node)."""
    vc = out._vc = version_of(source)
    if out._node is not None:
        out._node._vc = vc
    return out


def mark_view(out, base, key=None, remake=None, op=None):
    """``out`` is a view of ``base``'s memory, made by ``run1(op, base, *params)``
    (``remake = (op, params)``); ``key`` is the basic index that made it, if one did;
    ``op`` names the operation that made it, for messages (by default ``remake``'s).
    A recorded in-place change of the view is then also recorded on the base (as
    ``base[key] = view``), and one of the memory makes its live views anew from
    their changed base, so that every graph describes the values it sees. A view made
    in ``no_grad`` mode is not made anew: it stays outside the graph (PyTorch refuses
    to use one after such a change)."""
    vc = out._vc = version_of(base)
    if out._node is not None:
        out._node._vc = vc
    out._base = (base, key, remake, op if op is not None else remake[0] if remake else None)
    if _grad_state.enabled:
        vc.add_view(out)
    elif TRACER[0] is not None:  # lp.compile: a change of the memory recorded in the graph must see this view too
        TRACER[0].view_apart(vc, out)
    return out


def _guarded(fn, backend, *args, **params):
    """``fn(backend, *args)`` with the backend's device made current where it needs
    that (``cuda:N`` on a machine of several GPUs); a plain call everywhere else."""
    try:
        guard = backend.guard
        if guard is None:
            return fn(backend, *args, **params)
        with guard:
            return fn(backend, *args, **params)
    except Exception as exc:  # (a traced call may catch it: its replays would take that path whatever their values)
        _raised(exc)
        raise


class Parts:
    """The gradients of the outputs of one multi-output operation (a decomposition),
    gathered for its one backward: each output's node passes on its gradient as a
    ``Parts`` with only its own slot filled, and the engine adds them up (``+``) into
    the operation's node as it adds any two gradients. ``dtype`` is the operation's
    input's, so the engine's complex test reads it as it reads an array's."""

    __slots__ = ("grads", "dtype")

    def __init__(self, grads: tuple, dtype):
        self.grads = grads
        self.dtype = dtype

    def __add__(self, other: Parts) -> Parts:  # one output may reach the op twice (a second derivative's graph)
        return Parts(tuple(b if a is None else a if b is None else a + b for a, b in zip(self.grads, other.grads)),
                     self.dtype)


def _part_op(name: str) -> Op:
    """The op of one output of the multi-output operation ``name``: it only hands its
    gradient on (exact: the engine checks nothing; complex values pass as they are)."""
    return Op(name, _no_forward, saves=(), saves_out=False, exact=True, complex="own")


def _no_forward(be, *args):
    raise RuntimeError("an output of a multi-output operation is made by the operation, never alone")


def _part_backward(k: int, n: int, dtype):
    def backward(g):
        grads = [None] * n
        grads[k] = g
        return (Parts(tuple(grads), dtype),)

    return backward


class Outputs:
    """How a ``create_graph`` backward runs a multi-output operation again (the replay
    of its node, see :func:`several`): on the input as the node saw it, where it has
    not changed in place since; else, where the op has a rule on its outputs
    (``op.rule(be, outs, *params) -> backward(*grads)``, PyTorch's ``SavedVariable``s
    of the outputs), on the saved outputs, each a Tensor whose graph leads back to the
    node, so that the derivative of the rule goes through the decomposition again."""

    __slots__ = ("op", "params", "outs")

    def __init__(self, op: Op, params: tuple, outs: tuple):
        self.op, self.params, self.outs = op, params, outs  # the output arrays: the closure holds them anyway

    def __call__(self, gb, prev):
        _, rule = self.op.fn(gb, prev[0], *self.params)
        return None, lambda parts: rule(*parts.grads)

    def on_saved(self, gb, node, parts):
        """The input's gradient (a Tensor in a graph) from the saved outputs."""
        joint = as_graph_tensor(node)
        n, dtype = len(self.outs), node._data.dtype
        part = _part_op(str(self.op))
        outs = [make(out, node._backend, part, (joint,), _part_backward(k, n, dtype), True, _pass_on(k, n, dtype))
                for k, out in enumerate(self.outs)]
        return self.op.rule(gb, outs, *self.params)(*parts.grads)


def _pass_on(k: int, n: int, dtype):
    backward = _part_backward(k, n, dtype)
    return lambda gb, prev: (None, backward)


def several(op: Op, x, *params) -> list:
    """The outputs of ``op``, an operation of one tensor ``x`` with several outputs,
    each a Tensor. Its forward returns ``(outputs, backward)``, where ``backward(*grads)``
    takes one gradient per output (None for an output that got none) and returns
    ``x``'s: the rule sees every output's gradient at once, as PyTorch's (an SVD's
    loss may depend on the phases of ``U`` and ``V`` only together).

    In the graph, one node for the operation (its output is ``x``'s array, its
    version counter the outputs', its replay an :class:`Outputs`), and one node per
    output, whose backward passes its gradient on to it as :class:`Parts`. The
    outputs share one version counter: the rule reads all of them, so an in-place
    change of any one refuses the backward."""
    backend = x._backend
    outs, backward = _guarded(op.fn, backend, x._data, *params)
    tracer = TRACER[0]
    TRACER[0] = None  # lp.compile records the decomposition as one event (below), not its nodes one by one
    try:
        joint, results = _several_tensors(op, x, params, outs, backward)
    finally:
        TRACER[0] = tracer
    if tracer is not None:
        tracer.several(op, x, params, results, joint)
    return results


def _several_tensors(op, x, params, outs, backward):
    """``several``'s tensors: its joint node's tensor (None outside the graph) and the
    outputs."""
    backend = x._backend
    if not (x._rg and _grad_state.enabled):
        return None, [make(out, backend, op, (x,), None, False) for out in outs]
    n, dtype = len(outs), x._data.dtype
    joint = make(x._data, backend, op, (x,), lambda parts: backward(*parts.grads), True, Outputs(op, params, outs))
    part = _part_op(str(op))
    results = [make(out, backend, part, (joint,), _part_backward(k, n, dtype), True, _pass_on(k, n, dtype))
               for k, out in enumerate(outs)]
    for t in results[1:]:
        share_version(t, results[0])
    joint._node._vc = version_of(results[0])
    return joint, results


def run1(op: Op, a, *params):
    """A unary operation on ``a``."""
    backend = a._backend
    try:
        if backend.guard is None:
            out, backward = op.fn(backend, a._data, *params)
        else:
            out, backward = _guarded(op.fn, backend, a._data, *params)
    except Exception as exc:  # (as _guarded's)
        _raised(exc)
        raise
    rg = a._rg and op.differentiable
    t = make(out, backend, op, (a,), backward, rg, params if rg or TRACER[0] is not None else None)
    if op.view and (not op.copies or backend.shares_memory(out, a._data)):
        mark_view(t, a, None, (op, params))
    return t


def note_complex_mix(tensors, dtype) -> None:
    """Note (for the engine's complex rules) that a real tensor that requires grad goes
    into a result of the complex ``dtype``. Called where the operands' dtypes differ."""
    if not COMPLEX[0] and dtype_name(dtype).startswith("complex") and any(t._rg for t in tensors):
        note_complex()


def _cast_back(backward, xp, dtypes):
    """Gradients returned in the dtype of each input (mixed-dtype operands): the real
    part of a complex gradient for a real input (PyTorch's rule)."""

    def cast(g):
        return tuple(
            grad if grad is None or grad.dtype == dtype else gradient_as(xp, grad, dtype)
            for grad, dtype in zip(backward(g), dtypes)
        )

    cast.casts = True  # (lp.compile replays the rule without this wrapper, and casts first as it does)
    return cast


def run2(op: Op, a, b, *params):
    """A binary operation on two tensors (broadcasting; dtypes promoted by the library)."""
    backend = a._backend
    if b._backend is not backend:
        raise ValueError(device_message(op, a, b))
    ra, rb = a._rg, b._rg
    try:
        if op.needs:  # (under no_grad no input needs a gradient: no node is made)
            needs = (ra, rb) if not _GRAD_OFF[0] or _grad_state.enabled else (False, False)
            out, backward = _guarded(op.fn, backend, a._data, b._data, *params, needs=needs)
        elif backend.guard is None:
            out, backward = op.fn(backend, a._data, b._data, *params) if params else op.fn(backend, a._data, b._data)
        else:
            out, backward = _guarded(op.fn, backend, a._data, b._data, *params)
    except (ValueError, TypeError) as exc:
        _raised(exc)  # (as _guarded's)
        broadcast_shapes(op, a.shape, b.shape)
        raise (TypeError if isinstance(exc, TypeError) else ValueError)(
            f"{op}: not defined for tensors of dtypes {a.dtype} and {b.dtype} (shapes {a.shape} and "
            f"{b.shape}): {exc}"
        ) from None
    requires_grad = (ra or rb) and op.differentiable
    da, db = a._data.dtype, b._data.dtype
    if requires_grad and da is not db and da != db:
        note_complex_mix((a, b), out.dtype)
        backward = _cast_back(backward, backend.xp, (da, db))
    return make(out, backend, op, (a, b), backward, requires_grad,
                params if requires_grad or TRACER[0] is not None else None)


def run(op: Op, args, *params, **kw):
    """An operation on any mix of tensors and plain values in ``args`` (plain values
    are passed through; only the tensors become graph inputs). All tensors must be
    on one device."""
    backend = None
    arrays = []
    tensors = []
    positions = []
    first = None
    for i, x in enumerate(args):
        if isinstance(x, above.tensor):
            if backend is None:
                backend, first = x._backend, x
            elif x._backend is not backend:
                raise ValueError(device_message(op, first, x))
            arrays.append(x._data)
            tensors.append(x)
            positions.append(i)
        else:
            arrays.append(x)
    if backend is None:
        raise TypeError(f"{op}: at least one argument must be a Tensor")
    requires_grad = op.differentiable and any(t._rg for t in tensors)
    if op.needs:  # (under no_grad no input needs a gradient: no node is made)
        grad = not _GRAD_OFF[0] or _grad_state.enabled
        kw["needs"] = tuple(grad and isinstance(x, above.tensor) and x._rg for x in args)
    out, backward = _guarded(op.fn, backend, *arrays, *params, **kw)
    if requires_grad:
        dtypes = [t._data.dtype for t in tensors]
        if len(tensors) != len(args):  # keep the gradients of the tensors only
            inner = backward

            def backward(g):
                grads = inner(g)
                return tuple(grads[i] for i in positions)

        out_dtype = getattr(out, "dtype", None)  # a NumPy scalar for a 0-d result has one too
        if out_dtype is not None and any(d != out_dtype for d in dtypes):
            if _grad_state.enabled:
                note_complex_mix(tensors, out_dtype)
            if isinstance(out, backend.array_type):
                backward = _cast_back(backward, backend.xp, dtypes)

    others = [None if isinstance(x, above.tensor) else x for x in args]  # (a replay keeps no Tensor of the call)

    def replay(gb, prev):  # on Tensors with a GraphBackend, or on arrays with the backend (lp.compile)
        full = list(others)
        for i, p in zip(positions, prev):
            full[i] = p
        out, backward = op.fn(gb, *full, *params, **kw)
        if len(prev) == len(others):
            return out, backward
        return out, lambda g: tuple(backward(g)[i] for i in positions)

    replay.on_arrays = True

    if requires_grad and len(tensors) == len(args) and kw.keys() <= {"needs"}:
        replay = params  # every argument a tensor: the parameters are the whole replay (and an Op.rule's)
    elif TRACER[0] is not None and any(backend.is_array(x) and hasattr(x, "shape")
                                       for x in (*args, *params, *kw.values())):
        replay = None  # an array among the arguments, which lp.compile cannot follow: it falls back
    t = make(out, backend, op, tuple(tensors), backward, requires_grad,
             replay if requires_grad or TRACER[0] is not None else None)
    if op.view and tensors:
        mark_view(t, tensors[0], op=op)  # no remake: a recorded change of its memory raises (_view_bases)
    return t


# ---- custom operations --------------------------------------------------------------------


def apply(fn, *inputs, op: str | None = None, **params):
    """Apply an operation to Tensors on one device.

    ``fn`` is an :class:`leanpass.ops.Op`, or a function ``fn(backend, *arrays,
    **params)`` that computes the output array with ``backend.xp`` and returns it
    with ``backward(grad_out) -> one gradient per input`` (arrays, or None); see
    :mod:`leanpass.ops` for examples. The result is linked into the graph under
    the name ``op`` (default: the op's or function's name). A plain function is
    treated conservatively: its backward may read every input and the output, and
    may return the incoming gradient itself (the engine then copies it). Its
    backward's result is checked when it runs: a tuple of one gradient per input
    (``TypeError`` otherwise), each ``None`` or an array whose shape broadcasts back
    to its input's (``ValueError`` otherwise); the error leaves every ``.grad`` as
    it was. An :class:`Op` is trusted as it is.
    """
    if not inputs:
        raise TypeError("apply: give at least one input Tensor")
    # No cache of the Ops made here: it would keep every function ever given alive (a
    # closure made anew at each call, and what it captured), growing without bound.
    user = not isinstance(fn, Op)
    if not user:
        operation = fn if op is None else fn.renamed(op)
    elif callable(fn):
        name = op or fn.__name__
        # its backward is its author's, complex gradients included (PyTorch's convention)
        operation = Op(name, _checked(fn, name), fresh=False, needs=True, doc=fn.__doc__ or "", complex="own")
    else:
        raise TypeError(f"apply: fn must be an Op or a function, got {type(fn).__name__}")
    backend = None
    for t in inputs:  # plain loops, no calls per input: this runs for every layer of every step
        if not isinstance(t, above.tensor):
            raise TypeError(f"apply: the inputs must be Tensors, got {type(t).__name__}")
        if backend is None:
            backend = t._backend
        elif t._backend is not backend:
            raise ValueError(device_message(operation, inputs[0], t))
    arrays = [t._data for t in inputs]
    grad = not _GRAD_OFF[0] or _grad_state.enabled  # (under no_grad no input needs a gradient: no node is made)
    needs = [grad and t._rg for t in inputs]
    if operation.needs:
        params["needs"] = needs
    try:
        if backend.guard is None:
            out, backward = operation.fn(backend, *arrays, **params)
        else:
            out, backward = _guarded(operation.fn, backend, *arrays, **params)
    except Exception as exc:  # (as _guarded's)
        _raised(exc)
        raise
    rg = operation.differentiable and any(needs)
    if rg and _grad_state.enabled and any(out.dtype != a.dtype for a in arrays):  # mixed: real into complex?
        note_complex_mix(inputs, out.dtype)
    if not user:
        return make(out, backend, operation, inputs, backward, rg, params if rg or TRACER[0] is not None else None)
    # a plain function: integer and bool results never require grad, and a result that
    # is an input's memory (the input itself, a view of it) counts changes with it
    rg = rg and dtype_name(out.dtype) in GRAD_DTYPES
    t = make(out, backend, operation, inputs, backward, rg, params if rg or TRACER[0] is not None else None)
    for x in inputs:
        if backend.shares_memory(t._data, x._data):
            mark_view(t, x, op=operation)  # no remake: a recorded change of it raises (_view_bases)
            break
    return t


def _checked(fn, name):
    """``fn`` (a user's forward function) with its backward's result checked (see
    :func:`apply`) for the inputs that require grad, as PyTorch checks a custom Function's."""

    def forward(be, *arrays, needs, **params):
        result = fn(be, *arrays, **params)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError(f"apply: {name!r} must return (output array, backward function), got "
                            f"{type(result).__name__}")
        out, backward = result
        tensors = be.array_type is above.tensor
        if not (isinstance(out, above.tensor) if tensors else be.is_array(out)) or not callable(backward):
            raise TypeError(f"apply: {name!r} must return (output array, backward function), got "
                            f"({type(out).__name__}, {type(backward).__name__}); compute the output with be.xp")
        shapes = tuple(tuple(a.shape) if need else None for a, need in zip(arrays, needs))
        real = tuple(not dtype_name(a.dtype).startswith("complex") for a in arrays)

        def checked(g):
            grads = backward(g)
            _check_gradients(name, grads, shapes, tensors=be.array_type is above.tensor, backend=be, real=real)
            return grads

        return out, checked

    return forward


def _check_gradients(name, grads, shapes, tensors=False, backend=None, real=None):
    if type(grads) is not tuple:
        raise TypeError(
            f"backward of {name!r} must return a tuple of one gradient per input ({len(shapes)}), "
            f"got {type(grads).__name__}"
        )
    if len(grads) != len(shapes):
        raise TypeError(
            f"backward of {name!r} returned {len(grads)} gradient{'s' * (len(grads) != 1)} for "
            f"{len(shapes)} input{'s' * (len(shapes) != 1)}; return one per input (None for an input that needs none)"
        )
    for position, (g, shape) in enumerate(zip(grads, shapes)):
        if g is None or shape is None:  # none, or one the engine drops (its input needs none)
            continue
        if isinstance(g, above.tensor) is not tensors or not (hasattr(g, "shape") and hasattr(g, "dtype")):
            raise TypeError(
                f"backward of {name!r}: the gradient for input {position} must be "
                f"{'a Tensor' if tensors else 'an array'} (or None), "
                f"got {type(g).__name__}"
            )
        if not tensors and backend is not None and not backend.is_array(g):
            raise TypeError(
                f"backward of {name!r}: the gradient for input {position} must be an array of the library of "
                f"{backend.device} (compute it with be.xp), got {type(g).__module__}.{type(g).__name__}"
            )
        if real is not None and real[position] and dtype_name(g.dtype).startswith("complex"):
            raise TypeError(
                f"backward of {name!r}: the gradient for the real input {position} is complex ({g.dtype}); "
                "a real input takes a real gradient (its imaginary part would be dropped)"
            )
        have = tuple(g.shape)
        lead = len(have) - len(shape)
        if lead < 0 or any(n != 1 and n != m for n, m in zip(shape, have[lead:])):
            raise ValueError(
                f"backward of {name!r}: the gradient for input {position} has shape {have}, which does not "
                f"broadcast back to the input's shape {shape}"
            )


# ---- in-place changes ----------------------------------------------------------------------


def inplace(t, op: Op, others, *params, name: str | None = None, write=None, _outer=True):
    """Change ``t`` itself to ``op(t, *others, *params)``.

    Without a graph to record (grad mode off, or nothing requires grad) the new
    values are written into ``t``'s array by ``write(array, *other_arrays, *params)``
    (the library's own in-place operator) or, when ``write`` is None or the operands'
    dtypes differ, computed by ``op`` and copied in. Otherwise the change is
    recorded: ``t`` keeps its identity but becomes the output of ``op``, whose input
    is ``t``'s state before the change. A leaf that requires grad cannot be changed
    in place while grad mode is on (PyTorch's rule). A result of another shape, or
    of another kind of dtype (``int_t += 1.5``), raises before anything changes;
    one of the same kind is cast to ``t``'s dtype (``float32 += float64``, as NumPy
    and PyTorch). Either way ``t``'s version counter is bumped, so backward through
    a graph that saved the old values raises.
    """
    tracer = TRACER[0]
    if tracer is not None and _outer:
        if tracer.records():  # lp.compile records the change, then makes it
            return tracer.inplace(t, op, others, params, name, write)
        tracer.changed_unrecorded(t, name or op)  # (in a hook: a value of the call would be left unchanged)
    label = name or op
    backend = t._backend
    if backend.read_only(t._data):  # NumPy's flag would refuse below; CuPy has none, and its writes would race
        raise ValueError(
            f"{label}: cannot change the tensor of shape {t.shape} on {t.device} in place: its array is read-only "
            "(a broadcast view, whose elements share memory, or a read-only buffer); nothing was written: "
            "change a copy (t = t.copy())"
        )
    arrays = []
    mixed = False
    for o in others:
        if isinstance(o, above.tensor):
            if o._backend is not backend:
                raise ValueError(device_message(label, t, o))
            arrays.append(o._data)
            mixed = mixed or o._data.dtype != t._data.dtype
        else:
            arrays.append(o)
    if _grad_state.enabled and getattr(t, "_base", None) is not None:
        _refuse_no_grad_view(t, label)
    recording = _grad_state.enabled and (t._rg or any(isinstance(o, above.tensor) and o._rg for o in others))
    if not recording:
        if write is None or mixed:
            out = _inplace_forward(label, t, op, t._data, arrays, params, others)[0]
            _write(t, out)
        else:
            try:
                with backend.context():
                    backend.quietly(write, t._data, *arrays, *params)  # IEEE results, no NumPy warning
            except (TypeError, ValueError) as exc:
                raise (TypeError if isinstance(exc, TypeError) else ValueError)(
                    f"{label}: cannot change the tensor of shape {t.shape} and dtype {t.dtype} in place: {exc}"
                ) from None
        version_of(t).bump()
        return t
    if t._rg and t._node is None:
        raise RuntimeError(
            f"{label}: a leaf tensor that requires grad ({t!r}) cannot be changed in place while grad "
            "mode is on; wrap the change in `with leanpass.no_grad():` (as for an optimizer step), or "
            "change a copy (t = t + ...)"
        )
    if not op.differentiable:
        raise TypeError(f"{label}: the result of {op!r} carries no gradient and cannot be written into a tensor "
                        "that requires grad")
    bases = _view_bases(t, label)
    vc = version_of(t)
    if _outer:
        _check_remakes(vc, t, bases, label)
    current = t._data
    source = backend.copy(current) if op.saved(0) else current
    # An operand that is t, or a view of it, would change under the op's saved array.
    aliases = [isinstance(o, above.tensor) and (o is t or o._vc is vc) for o in others]
    if any(aliases):
        arrays = [backend.copy(a) if alias and op.saved(i + 1) else a
                  for i, (a, alias) in enumerate(zip(arrays, aliases))]
    out, backward = _inplace_forward(label, t, op, source, arrays, params, others)
    old = _state(t)
    if source is not current:  # the op read a copy of t's old values: the old state holds them (the nodes
        old._data = source  # made before the change, and replays, read them there)
    replay = _inplace_replay(op, others, params)
    if out is not current:
        _write(t, out)
    if _outer:  # one change of the memory: its bases (below) share the counter, counted once
        vc.bump()
    # the edges of the operands as they are now, before the change: an operand that is one
    # of t's bases (``v = h[:]; v += h``) enters as the node it has now, not the one its
    # own change below gives it
    tensors = tuple(old if o is t else o if o._node is None else o._node
                    for o in others if isinstance(o, above.tensor))
    keep = (0, *(i + 1 for i, o in enumerate(others) if isinstance(o, above.tensor)))  # op inputs: the node's parents
    if len(tensors) != len(others):
        inner = backward

        def backward(g):
            grads = inner(g)
            return tuple(grads[i] for i in keep)

    if mixed:  # each input's gradient in its own dtype
        note_complex_mix((t, *tensors), t._data.dtype)  # a real tensor that requires grad into a complex one
        backward = _cast_back(backward, backend.xp, (current.dtype, *(o._data.dtype for o in tensors)))
    # Of t's memory, backward reads only copies (t's old values, an operand that is t or
    # a view of it) and the output computed before it was written into t: a later
    # change of t does not reach them, so the node saves none of these arrays.
    saves = tuple(j for j, i in enumerate(keep) if i and op.saved(i) and not aliases[i - 1])
    if saves != op.saves or (op.saves_out and out is not current):
        op = Op(op, op.fn, saves=saves, saves_out=op.saves_out and out is current, fresh=op.fresh,
                needs=op.needs, differentiable=op.differentiable, doc=op.__doc__, exact=op.exact and not mixed,
                complex=op.complex)
    node = _new(Node)  # t's new node: the nodes made before keep the old one, ``old``
    node._op = op
    node._prev = (old, *tensors)
    node._backward = backward
    node._replay = replay
    node._seq = next(_sequence)
    node._data = t._data
    node._backend = backend
    node._vc = vc
    node._tensor = _take_owner(t)
    t._node = node
    t._rg = True
    if bases:  # t is a slice of another tensor: that changed too (and, in this call, what it is a slice of)
        base, _key, remake = bases[0]
        set_key, set_shape = remake[1][1], remake[1][2]
        value = t if set_shape is None else run1(ops.reshape, t, tuple(set_shape))
        inplace(base, ops.setitem, [value], "basic", set_key, name=label, _outer=False)
    if _outer:
        _remake_views(vc, (t, *(b for b, _, _ in bases)))
    return t


def _state(t):
    """The edge of ``t``'s value now, which stays that value's when ``t`` changes in place:
    its node, or for a tensor outside the graph a new one outside it holding its array."""
    if t._node is not None:
        return t._node
    return leaf(t._data, t._backend)


def _take_owner(t):
    """The weak reference by which ``t``'s node finds ``t`` (for its hooks and
    ``retain_grad``), taken from the node for the one ``t`` gets now: the hooks and the
    retained gradient are the tensor's, for its value of the moment (None: none)."""
    node = t._node
    if node is None:
        return None
    owner = node._tensor
    node._tensor = None
    return owner


def _check_remakes(vc, t, bases, label):
    """Raise, before a recorded change of ``t``'s memory, if a live view of it (other
    than ``t`` and its bases) cannot be made anew from its changed base: a view made
    by a custom op (``apply``), whose graph would describe values it no longer holds."""
    if not vc.views:
        return
    for view in vc.live_views():
        if view._base[2] is None and view is not t and not any(view is b for b, _, _ in bases):
            raise RuntimeError(
                f"{label}: {view!r} is a view of this tensor's memory made by {view._base[3]!r}, which cannot be "
                "made anew after an in-place change while a graph is recorded; make that op return a copy, or "
                "change a copy of this tensor"
            )


def _remake_views(vc, changed):
    """After a recorded in-place change of the memory of ``vc``: each live view of it
    (but those in ``changed``) becomes anew the view of its changed base, as PyTorch
    does; nodes made before the change still see the view's earlier state."""
    remade = False
    for view in vc.live_views():
        if any(view is c for c in changed):
            continue
        base, _key, remake, _ = view._base
        fresh = run1(remake[0], base, *remake[1])
        owner = _take_owner(view)
        view._node, view._rg = fresh._node, fresh._rg
        if fresh._node is not None:
            fresh._node._tensor = owner
        remade = True
    if remade:  # nodes made before now that use a view reach its earlier state
        vc.remade()


def _refuse_no_grad_view(t, label):
    """``t`` is a view: raise if it, or a view it is made from, was made in ``no_grad``
    mode of a tensor in a graph (as PyTorch): the change of the shared memory could
    not be recorded in that graph, whose gradients would silently go wrong."""
    view = t
    while getattr(view, "_base", None) is not None:
        base = view._base[0]
        if base._rg and not view._rg:
            raise RuntimeError(
                f"{label}: {t!r} is a view made in no_grad mode (or before its base required grad) of a tensor "
                f"in a graph ({base!r}), and is being changed in place with grad mode on: the graph cannot record "
                "it (as in PyTorch). Make the view with grad mode on, so that the change is recorded"
            )
        view = base


def _view_bases(t, label):
    """The chain of tensors ``t`` is a basic-index view of, checked before a recorded
    in-place change of ``t``: each must be recordable too."""
    chain = []
    view = t
    while getattr(view, "_base", None) is not None:
        base, key, remake, made_by = view._base
        if key is None:
            raise RuntimeError(
                f"{label}: {t!r} is a view (made by {made_by}) of another tensor; changing it in place while "
                "a graph is recorded is not supported. Change a copy (t = t.copy()), or the original tensor"
            )
        if base._rg and base._node is None:
            raise RuntimeError(
                f"{label}: {t!r} is a view of a leaf tensor that requires grad ({base!r}), which cannot be "
                "changed in place while grad mode is on; wrap the change in `with leanpass.no_grad():`"
            )
        chain.append((base, key, remake))
        view = base
    return chain


def _inplace_forward(label, t, op, source, arrays, params, others):
    """``op``'s forward for an in-place change of ``t``: ``(out, backward)``, ``out``
    of ``t``'s shape and dtype (cast within its kind), or the error, with nothing changed."""
    try:
        out, backward = _guarded(op.fn, t._backend, source, *arrays, *params, **_needs(op, t, others))
    except (TypeError, ValueError) as exc:
        raise (TypeError if isinstance(exc, TypeError) else ValueError)(
            f"{label}: cannot change the tensor of shape {t.shape} and dtype {t.dtype} in place: {exc}"
        ) from None
    if tuple(out.shape) != tuple(t._data.shape):
        raise ValueError(
            f"{label}: the result has shape {tuple(out.shape)}, but an in-place operation cannot change the "
            f"shape of the tensor ({t.shape})"
        )
    if out.dtype != t._data.dtype:
        have, want = DTYPES[dtype_name(out.dtype)].kind, DTYPES[dtype_name(t._data.dtype)].kind
        if have != want and {have, want} != {"i", "u"}:
            raise TypeError(
                f"{label}: the result has dtype {dtype_name(out.dtype)}, but an in-place operation cannot change "
                f"the dtype of the tensor ({t.dtype}) to another kind; use an out-of-place operation"
            )
        out = t._backend.xp.astype(out, t._data.dtype)
    return out, backward


def _inplace_replay(op, others, params):
    """How a ``create_graph`` backward runs an in-place change again on Tensors
    (``replay(gb, prev)``, see :func:`make`): on a copy of the old state ``prev[0]``
    (an op may write into its first input, as ``setitem`` does), with the Tensor
    operands from ``prev[1:]`` and the others as they were. The old state holds the
    old values where the op reads them (the copy the forward read); where it does not,
    the engine replays only ops whose backward reads neither (see ``_graph_grads``)."""
    tensor = above.tensor
    positions = [i for i, o in enumerate(others) if isinstance(o, tensor)]
    plain = [None if isinstance(o, tensor) else o for o in others]
    keep = (0, *(i + 1 for i in positions))

    def replay(gb, prev):
        values = list(plain)
        for i, p in zip(positions, prev[1:]):
            values[i] = p
        first = gb.copy(prev[0])
        kw = {"needs": (prev[0]._rg, *(isinstance(v, tensor) and v._rg for v in values))} if op.needs else {}
        out, backward = op.fn(gb, first, *values, *params, **kw)
        if len(positions) == len(others):
            return out, backward

        def kept(g):
            grads = backward(g)
            return tuple(grads[i] for i in keep)

        return out, kept

    return replay


def _needs(op, t, others):
    if not op.needs:
        return {}
    if _GRAD_OFF[0] and not _grad_state.enabled:  # (under no_grad no input needs a gradient)
        return {"needs": (False,) * (1 + len(others))}
    return {"needs": (t._rg, *(isinstance(o, above.tensor) and o._rg for o in others))}


def _write(t, out):
    backend = t._backend
    with backend.context():
        t._data[...] = out


# ---- tensors from user data ----------------------------------------------------------------

_FLOATING = ("float32", "float64")


def _default_complex():
    return "complex64" if get_default_dtype() == "float32" else "complex128"


def _check_grad_dtype(name, requires_grad, op="Tensor"):
    """Refuse ``requires_grad`` for a tensor of dtype ``name`` that cannot carry gradients
    (only floating-point and complex ones can); note a complex one for the engine."""
    if requires_grad and name not in GRAD_DTYPES:
        raise ValueError(
            f"{op}: only floating-point tensors can require gradients (real or complex ones), got dtype {name}"
        )
    if requires_grad and name.startswith("complex"):
        note_complex()


def init_tensor(self, data, requires_grad, name, device, dtype, copy, infer="float"):
    """Fill a new Tensor from ``data``.

    ``infer="float"`` (the constructor): integers and booleans become the default
    float dtype, float arrays keep theirs. ``infer="standard"`` (``asarray``): the
    standard's rules (bool -> bool, int -> int64, float -> the default float).
    ``copy``: True always copies, False never (``ValueError`` if it must), None
    copies only when a conversion needs it.
    """
    if dtype is not None:
        dtype = as_dtype(dtype, "Tensor" if infer == "float" else "asarray").name
    if isinstance(data, above.tensor):
        _trace_note("Tensor(t) or asarray(t, copy=True) of a tensor (a copy made apart from the recorded operations)")
        src, array = data._backend, data._data
    else:
        src, array = backend_of_array(data), data
    given = array
    if src is None:  # host data
        backend = get_backend(device)
        if copy is False and not hasattr(data, "dtype"):
            raise ValueError("asarray: copy=False, but Python data must be copied to make an array")
        host = host_array(data, "Tensor" if infer == "float" else "asarray", dtype)
        if dtype is None:
            dtype = _infer(data, host, infer)
        converted = dtype_name(host.dtype) != dtype
        if copy is False and converted:
            raise ValueError(f"asarray: copy=False, but converting {dtype_name(host.dtype)} to {dtype} needs a copy")
        # NumPy made new memory from Python numbers; any array, buffer or __array__
        # object may have handed over its own (the constructor copies it, copy=False
        # keeps it); a NumPy scalar's array is new but cannot be shared
        made = not _array_like(data)
        array = backend.from_host(host, dtype)
        if copy is False and (made or array is not host or isinstance(data, numbers.Number)):
            kind = type(data)
            raise ValueError(f"asarray: copy=False, but {kind.__module__.partition('.')[0]}.{kind.__qualname__} data "
                             f"on {backend.device} needs a copy (a scalar, another byte order, or a device that "
                             "copies host data)")
        if copy and array is host and not made:  # taken as it was: take a copy the tensor owns
            array = backend.copy(array)
    else:
        backend = src if device is None else get_backend(device)
        name_ = dtype_name(array.dtype)
        if dtype is None:
            if name_ not in DTYPES:
                raise TypeError(f"Tensor: arrays of dtype {name_} are not supported")
            dtype = name_ if (infer != "float" or name_ in _FLOATING or name_.startswith("complex")) \
                else get_default_dtype()
        if name_ != dtype:
            if copy is False:
                raise ValueError(f"asarray: copy=False, but converting {name_} to {dtype} needs a copy")
            if name_.startswith("complex") and not dtype.startswith("complex"):  # the standard forbids it
                raise TypeError(f"{'Tensor' if infer == 'float' else 'asarray'}: cannot cast {name_} to {dtype}: "
                                "the imaginary part would be lost; take the real part first")
            with src.context():
                array = src.xp.astype(array, src.dtype(dtype))
        if backend is not src:
            if copy is False:
                raise ValueError(f"asarray: copy=False, but moving {src.device} to {backend.device} needs a copy")
            array = transfer(array, src, backend)
        if type(array) is not backend.array_type:
            array = backend.xp.asarray(array)
        elif copy and array is given:  # nothing converted it: take a copy the tensor owns
            array = backend.copy(array)
    _check_grad_dtype(dtype_name(array.dtype), requires_grad)
    fill_leaf(self, array, backend, requires_grad, name,
              python=TRACER[0] is not None and isinstance(data, (bool, int, float, complex, list, tuple)),
              source=data)


def _infer(data, host, infer):
    """The dtype of host data when none is given."""
    kind = host.dtype.kind
    name = dtype_name(host.dtype)
    from_array = _array_like(data)  # arrays, buffers and NumPy scalars keep their own dtype
    if infer == "float":
        if kind == "f" and from_array and name in _FLOATING:
            return name
        if kind == "c":
            return name if from_array and name in DTYPES else _default_complex()
        return get_default_dtype()
    if from_array:
        if name not in DTYPES:
            raise TypeError(f"asarray: arrays of dtype {name} are not in the array API standard")
        return name
    if kind == "b":
        return "bool"
    if kind in "iu":
        if name == "uint64" and host.size and int(host.max()) > 2**63 - 1:  # a Python int beyond int64
            raise OverflowError(f"asarray: a Python integer does not fit in int64 (dtype would be {name})")
        return name if name in DTYPES else "int64"  # NumPy integer scalars in a list keep theirs
    if kind == "f":
        return get_default_dtype()
    return _default_complex()


def _array_like(data) -> bool:
    """Whether ``data`` carries its own dtype: an array (``dtype``, ``__array__``,
    ``__array_interface__``), a NumPy scalar, or a buffer (``memoryview``,
    ``array.array``, ``bytes``), rather than Python numbers."""
    if hasattr(data, "dtype") or hasattr(data, "__array__") or hasattr(data, "__array_interface__"):
        return True
    if isinstance(data, (list, tuple, int, float, complex, bool)):
        return False
    try:
        memoryview(data)
    except TypeError:
        return False
    return True


def as_tensor(data, *, device=None, dtype=None):
    """A Tensor sharing ``data``'s memory where it can (same library, device and
    dtype), as ``torch.as_tensor``; ``Tensor(data)`` always copies. A Tensor that
    needs no conversion is returned itself (``torch.as_tensor`` too): a second leaf
    on its array would count its in-place changes apart; one converted to another
    dtype or device stays in the graph (differentiable), as with ``torch.as_tensor``."""
    if isinstance(data, above.tensor):  # converted in the graph, as torch.as_tensor (and asarray) do
        out = data
        if dtype is not None and as_dtype(dtype, "as_tensor").name != dtype_name(data._data.dtype):
            out = out.astype(dtype)
        if device is not None and get_backend(device) is not out._backend:
            out = out.to(device)
        return out
    t = _new(above.tensor)
    init_tensor(t, data, False, None, device, dtype, copy=None)
    return t
