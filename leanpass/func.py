"""Function transforms, as JAX's and ``torch.func``'s: ``grad``, ``value_and_grad``,
``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp``.

Each takes a function of Tensors and gives a function (or values) computed by the
engine's reverse mode: :func:`leanpass.autograd.grad`, with ``create_graph=True``
where the result must be differentiable again. So they nest (``hessian`` is
``jacobian(grad(f))``), and they run on every device::

    import leanpass as lp

    f = lambda x: (x ** 3).sum()
    x = lp.asarray([1.0, 2.0])
    lp.grad(f)(x)                    # 3 x**2: [3., 12.]
    lp.hessian(f)(x)                 # diag(6 x): [[6., 0.], [0., 12.]]

``jvp`` (forward mode) is built from two reverse passes (the "double-vjp" trick):
``J t`` is the gradient, with respect to a cotangent ``u``, of ``<J^T u, t>``; it
costs about two backward passes, not one forward pass.

Inputs differentiated with respect to must be floating-point tensors (or numbers
and array-likes, made tensors of the default float dtype); an integer or bool
tensor raises ``TypeError``.
"""

from __future__ import annotations

import copy
import numbers

from . import autograd
from ._graph import trace
from ._graph.node import Node
from ._namespace import positive, stack, zeros, zeros_like
from .tensor import Tensor

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacobian", "hessian", "hvp"]


def _argnums(argnums, count, name):
    if isinstance(argnums, bool) or not isinstance(argnums, (int, tuple)):
        raise TypeError(f"{name}: argnums must be an int or a tuple of ints, got {argnums!r}")
    nums = (argnums,) if isinstance(argnums, int) else argnums
    if not nums:
        raise ValueError(f"{name}: argnums is empty")
    for n in nums:
        if isinstance(n, bool) or not isinstance(n, int) or not -count <= n < count:
            raise ValueError(f"{name}: argnums {argnums!r} does not name one of the {count} positional arguments")
    return tuple(n % count for n in nums)


def _input(x, name, where):
    """``x`` as a floating-point Tensor (numbers and array-likes converted)."""
    if not isinstance(x, Tensor):
        if isinstance(x, bool) or not isinstance(x, (numbers.Number, list, tuple)) and not hasattr(x, "__array__") \
                and not hasattr(x, "__dlpack__"):
            raise TypeError(f"{name}: {where} must be a Tensor or a number, got {type(x).__name__}")
        x = Tensor(x)
    if x.dtype not in ("float32", "float64"):
        raise TypeError(f"{name}: {where} has dtype {x.dtype} (shape {x.shape}); only floating-point tensors can be "
                        "differentiated with respect to")
    return x


def _differentiable(x):
    """The tensor to differentiate with respect to, for the argument ``x``, and whether
    ``x`` already carries gradients (an outer transform's input, or a tensor that
    requires grad). Then it is ``+x``, a new node of ``x``'s graph: the gradient
    counts only the paths through this argument, not those through other tensors
    computed from ``x`` (a closure's, an outer transform's, another argument's: JAX's
    "perturbation confusion"), and it still flows on to ``x``. Else a new leaf of
    ``x``'s values that requires grad."""
    if x.requires_grad:
        with autograd.enable_grad():
            return positive(x), True
    trace.read(x)  # (lp.compile: a tensor from outside, which the call may not have read yet)
    t = x.detach()  # (real floats only: _input checked)
    t._rg = True  # a leaf of its own that requires grad, on x's values (as Tensor(x.detach(), requires_grad=True))
    trace.new_leaf(t)  # a compiled call aims autograd.grad at it, apart from x
    return t, False


def _reaches_outer(outputs, ours) -> bool:
    """Whether the graph of ``outputs`` reaches a tensor that requires grad other than
    the inputs in ``ours`` (ids): then results must stay differentiable for it."""
    seen = set()
    stack_ = [o if o._node is None else o._node for o in outputs if o.requires_grad]
    while stack_:
        node = stack_.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        if type(node) is not Node:  # a leaf
            if key not in ours:
                return True
            continue
        if isinstance(node._prev, autograd.Released):
            return True
        stack_.extend(p for p in node._prev if p._rg)
    return False


def _call(f, args, nums, name, kwargs=None):
    """``f(*args, **kwargs)`` with the positional arguments ``nums`` made differentiable:
    (output, inputs, nested). Keyword arguments are passed through as they are."""
    args = list(args)
    inputs, nested = [], False
    for n in nums:
        x, outer = _differentiable(_input(args[n], name, f"argument {n}"))
        nested = nested or outer
        args[n] = x
        inputs.append(x)
    with autograd.enable_grad():
        out = f(*args, **(kwargs or {}))
    return out, inputs, nested


def _split_aux(result, name):
    """``(output, aux)`` of a function called with ``has_aux=True`` (``TypeError`` for
    any other form: a length-2 Tensor must not be split along its first axis)."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(f"{name}: with has_aux=True the function must return a tuple (output, aux), got "
                        f"{type(result).__name__}")
    return result


def _plain_aux(aux, inputs, keep: bool):
    """``aux`` with its Tensors detached from the transform's inputs (as ``torch.func``
    returns it), unless ``keep`` (an outer transform differentiates the results) or a
    Tensor in it reaches a tensor outside the inputs that requires grad."""
    found = []

    def walk(value):
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk(aux)
    if keep or not found or _reaches_outer(found, {id(x) for x in inputs}):
        return aux

    def detached(value):
        if isinstance(value, Tensor):
            return value.detach()
        if isinstance(value, tuple):
            items = [detached(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)  # namedtuples too
        if isinstance(value, (list, dict)):
            out = copy.copy(value)  # its own type (a defaultdict keeps its factory)
            for k in range(len(out)) if isinstance(out, list) else list(out):
                out[k] = detached(out[k])
            return out
        return value

    return detached(aux)


def _zeros_for_none(grads, inputs):
    return tuple(zeros_like(x) if g is None else g for g, x in zip(grads, inputs))


def _scalar(out, name):
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}: the function must return a Tensor, got {type(out).__name__}")
    if out.ndim != 0 and out.size != 1:
        raise RuntimeError(f"{name}: the function must return a scalar (one element), got a tensor of shape "
                           f"{out.shape}; use jacobian or vjp for other outputs")
    if out.dtype not in ("float32", "float64"):
        raise TypeError(f"{name}: the function returned dtype {out.dtype}; only a floating-point result can be "
                        "differentiated")
    return out


def _gradients(out, inputs, nested):
    """The gradients of ``out`` for ``inputs``, and whether they (and ``out``) stay in a
    graph: where an outer transform, or a tensor outside, needs them differentiable."""
    if not out.requires_grad:  # the output does not depend on the inputs
        return tuple(zeros_like(x) for x in inputs), False
    create = nested or _reaches_outer([out], {id(x) for x in inputs})
    grads = autograd.grad(out, inputs, create_graph=create, allow_unused=True)
    return _zeros_for_none(grads, inputs), create


def value_and_grad(f, argnums=0, has_aux=False):
    """``g(*args, **kwargs) -> (f(*args, **kwargs), gradient)``: the value and the
    gradient of ``f`` (which returns a scalar) with respect to positional argument
    ``argnums`` (a tuple: a tuple of gradients); keyword arguments are passed through,
    not differentiated, as in JAX and ``torch.func``. With ``has_aux``, ``f`` returns
    ``(value, aux)`` and ``g`` returns ``((value, aux), gradient)``, as JAX's
    ``value_and_grad``."""
    name = "value_and_grad"

    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args), name)
        result, inputs, nested = _call(f, args, nums, name, kwargs)
        out, aux = _split_aux(result, name) if has_aux else (result, None)
        out = _scalar(out, name)
        if has_aux:  # before the pass below releases the graph, in which an aux's way to the inputs is seen
            keep = out.requires_grad and (nested or _reaches_outer([out], {id(x) for x in inputs}))
            aux = _plain_aux(aux, inputs, keep)
        grads, create = _gradients(out, inputs, nested)
        grads = grads[0] if isinstance(argnums, int) else grads
        value = out if create else out.detach()
        return ((value, aux), grads) if has_aux else (value, grads)

    return wrapper


def grad(f, argnums=0, has_aux=False):
    """``g(*args, **kwargs)``: the gradient of ``f`` (which returns a scalar Tensor) with
    respect to positional argument ``argnums`` (an int; or a tuple, for a tuple of
    gradients), as ``torch.func.grad``; keyword arguments are passed through. With
    ``has_aux``, ``f`` returns ``(value, aux)`` and ``g`` returns ``(gradient, aux)``.
    ``RuntimeError`` if ``f`` returns more than one value."""
    both = value_and_grad(f, argnums, has_aux)

    def wrapper(*args, **kwargs):
        value, grads = both(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper


def _outputs(out, name):
    outs = out if isinstance(out, tuple) else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(f"{name}: the function must return a Tensor or a tuple of Tensors; output {i} is a "
                            f"{type(o).__name__}")
    return outs


def vjp(f, *primals, has_aux=False):
    """``(f(*primals), vjp_fn)``, as ``torch.func.vjp``: ``vjp_fn(cotangents)`` (one per
    output of ``f``, of its shape) returns a tuple with one vector-Jacobian product per
    primal. ``vjp_fn`` may be called many times. With ``has_aux``: ``(out, vjp_fn, aux)``."""
    name = "vjp"
    result, inputs, nested = _call(f, primals, tuple(range(len(primals))), name)
    result, aux = _split_aux(result, name) if has_aux else (result, None)
    outs = _outputs(result, name)
    create = nested or _reaches_outer(outs, {id(x) for x in inputs})
    if has_aux:
        aux = _plain_aux(aux, inputs, create)

    def vjp_fn(*cotangents):
        # one tuple of cotangents for a tuple of outputs (torch.func's form), or one each
        if len(cotangents) == 1 and isinstance(cotangents[0], tuple) and isinstance(result, tuple):
            cotangents = cotangents[0]
        if len(cotangents) != len(outs):
            raise ValueError(f"vjp_fn: {len(cotangents)} cotangents for {len(outs)} outputs")
        used = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
        if not used:
            return tuple(zeros_like(x) for x in inputs)
        for o, c in used:
            if tuple(getattr(c, "shape", ())) != o.shape:
                raise ValueError(f"vjp_fn: a cotangent of shape {getattr(c, 'shape', ())} for an output of shape "
                                 f"{o.shape}")
        # a cotangent that requires grad (vjp inside grad or jacobian) keeps the products
        # differentiable, with respect to it too
        again = create or any(isinstance(c, Tensor) and c.requires_grad for _, c in used)
        grads = autograd.grad([o for o, _ in used], inputs, [c for _, c in used], retain_graph=True,
                              create_graph=again, allow_unused=True)
        return _zeros_for_none(grads, inputs)

    value = result if create else (tuple(o.detach() for o in outs) if isinstance(result, tuple) else result.detach())
    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def _tuple(x, name, what):
    if not isinstance(x, tuple):
        raise TypeError(f"{name}: {what} must be a tuple (one entry per argument), got {type(x).__name__}")
    return x


def _call_with_tangents(f, primals, tangents, name):
    """``f(*primals)`` with every primal made differentiable, as :func:`_call`, and the
    tangents (a tuple, one per primal, of its shape) as Tensors."""
    primals, tangents = _tuple(primals, name, "primals"), _tuple(tangents, name, "tangents")
    if len(primals) != len(tangents):
        raise ValueError(f"{name}: {len(primals)} primals but {len(tangents)} tangents")
    tangents = tuple(_input(t, name, f"tangent {i}") for i, t in enumerate(tangents))
    result, inputs, nested = _call(f, primals, tuple(range(len(primals))), name)
    for i, (x, t) in enumerate(zip(inputs, tangents)):
        if t.shape != x.shape:
            raise ValueError(f"{name}: tangent {i} has shape {t.shape}, primal {i} {x.shape}")
    return result, inputs, nested, tangents


def jvp(f, primals, tangents):
    """``(f(*primals), J @ tangents)``, as ``torch.func.jvp``: the Jacobian-vector product
    of ``f`` at ``primals`` (a tuple) along ``tangents`` (a tuple of the same shapes).
    Built from two reverse passes: the gradient with respect to a cotangent ``u`` of
    ``<J^T u, tangents>``."""
    name = "jvp"
    result, inputs, nested, tangents = _call_with_tangents(f, primals, tangents, name)
    outs = _outputs(result, name)
    create = nested or _reaches_outer(outs, {id(x) for x in inputs}) or any(t.requires_grad for t in tangents)
    products = []
    for o in outs:
        if not o.requires_grad:
            products.append(zeros_like(o))
            continue
        u = zeros_like(o).detach().requires_grad_()  # the cotangent the result is linear in (a leaf)
        grads = autograd.grad(o, inputs, u, retain_graph=True, create_graph=True, allow_unused=True)
        pairs = [(g, t) for g, t in zip(grads, tangents) if g is not None and g.requires_grad]
        if not pairs:
            products.append(zeros_like(o))
            continue
        (jt,) = autograd.grad([g for g, _ in pairs], u, [t for _, t in pairs], create_graph=create,
                              allow_unused=True, retain_graph=True)
        products.append(zeros_like(o) if jt is None else jt)
    value = result if create else (tuple(o.detach() for o in outs) if isinstance(result, tuple) else result.detach())
    return value, (tuple(products) if isinstance(result, tuple) else products[0])


def jacobian(f, argnums=0, has_aux=False):
    """``J(*args)``: the Jacobian of ``f`` with respect to argument ``argnums``, of shape
    ``output.shape + input.shape`` (a tuple of them for a tuple ``argnums``), as
    ``torch.func.jacrev``: one reverse pass per output element; keyword arguments are
    passed through. With ``has_aux``, ``f`` returns ``(output, aux)`` and ``J``
    returns ``(jacobian, aux)``."""
    name = "jacobian"

    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args), name)
        result, inputs, nested = _call(f, args, nums, name, kwargs)
        result, aux = _split_aux(result, name) if has_aux else (result, None)
        if not isinstance(result, Tensor):
            raise TypeError(f"{name}: the function must return a Tensor, got {type(result).__name__}")
        out = result
        if out.dtype not in ("float32", "float64"):
            raise TypeError(f"{name}: the function returned dtype {out.dtype}; only floating-point outputs have a "
                            "Jacobian")
        if not out.requires_grad:
            jac = tuple(_zeros(out, x) for x in inputs)
        else:
            create = nested or _reaches_outer([out], {id(x) for x in inputs})
            with autograd.enable_grad():  # recorded under an outer no_grad too, as f was (torch.func)
                flat = out.reshape((-1,))
                rows = [[] for _ in inputs]
                for k in range(flat.shape[0]):
                    cotangent = _unit(flat.shape[0], k, out)
                    grads = autograd.grad(flat, inputs, cotangent, retain_graph=True, create_graph=create,
                                          allow_unused=True)
                    for row, g, x in zip(rows, grads, inputs):
                        row.append(zeros_like(x) if g is None else g)
                jac = tuple(stack(row).reshape(out.shape + x.shape) if row else _zeros(out, x)
                            for row, x in zip(rows, inputs))
        jac = jac[0] if isinstance(argnums, int) else jac
        if has_aux:
            keep = nested or (out.requires_grad and _reaches_outer([out], {id(x) for x in inputs}))
            return jac, _plain_aux(aux, inputs, keep)
        return jac

    return wrapper


def _unit(n, k, like):
    e = zeros((n,), dtype=like.dtype, device=like.device)
    e[k] = 1.0
    return e


def _zeros(out, x):
    return zeros(out.shape + x.shape, dtype=x.dtype, device=x.device)


def hessian(f, argnums=0):
    """``H(*args)``: the Hessian of the scalar ``f`` with respect to argument ``argnums``
    (an int), of shape ``input.shape + input.shape``: ``jacobian(grad(f))``."""
    if not isinstance(argnums, int) or isinstance(argnums, bool):
        raise TypeError(f"hessian: argnums must be an int, got {argnums!r}")
    return jacobian(grad(f, argnums), argnums)


def hvp(f, primals, tangents):
    """``(f(*primals), H @ tangents)``: the Hessian-vector product of the scalar ``f`` at
    ``primals`` (a tuple) along ``tangents`` (a tuple of the same shapes), one tuple
    entry per primal, by reverse-over-reverse: the gradient of ``<grad f, tangents>``."""
    name = "hvp"
    out, inputs, nested, tangents = _call_with_tangents(f, primals, tangents, name)
    out = _scalar(out, name)
    if not out.requires_grad:
        return out, tuple(zeros_like(x) for x in inputs)
    create = nested or _reaches_outer([out], {id(x) for x in inputs}) or any(t.requires_grad for t in tangents)
    grads = autograd.grad(out, inputs, create_graph=True, allow_unused=True)
    pairs = [(g, t) for g, t in zip(grads, tangents) if g is not None and g.requires_grad]
    if not pairs:
        return (out if create else out.detach()), tuple(zeros_like(x) for x in inputs)
    products = autograd.grad([g for g, _ in pairs], inputs, [t for _, t in pairs], create_graph=create,
                             allow_unused=True)
    return (out if create else out.detach()), _zeros_for_none(products, inputs)
