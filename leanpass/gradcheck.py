"""Finite-difference gradient checking, on any device."""

from __future__ import annotations

import math
import numbers
import random

from ._graph.node import Node
from .autograd import no_grad
from .tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError"]


class GradcheckError(AssertionError):
    """An analytic gradient disagrees with its finite-difference estimate.

    Attributes: ``input`` (position of the input), ``index`` (the element),
    ``analytic`` and ``numeric`` (the two values).
    """

    def __init__(self, message, *, input, index, analytic, numeric):
        super().__init__(message)
        self.input = input
        self.index = index
        self.analytic = analytic
        self.numeric = numeric


def _indices(shape):
    """Every multi-index of ``shape``, in C order."""
    for flat in range(math.prod(shape)):
        index = []
        for n in reversed(shape):
            flat, i = divmod(flat, n)
            index.append(i)
        yield tuple(reversed(index))


def _weights(shape, backend):
    """Fixed pseudo-random weights in [0.5, 1.5) that reduce an output to a scalar."""
    rng = random.Random(0)
    values = [rng.uniform(0.5, 1.5) for _ in range(math.prod(shape))]
    return Tensor(values, device=backend, dtype="float64").reshape(shape)


def _element(array, index) -> complex:
    return complex(array[index + (Ellipsis,)])


def _is_complex(t) -> bool:
    return t.dtype.kind == "c"


def _reduced(result, weights):
    """``result`` as the real scalar the check differentiates: ``sum(result * w)``, and
    for a complex result ``sum(real(result) * w) + sum(imag(result) * w')`` (both
    parts checked; PyTorch's gradcheck checks them one at a time)."""
    if weights is None:
        return _real_sum(result, 1.0, 0.5) if _is_complex(result) else result
    if _is_complex(result):
        return _real_sum(result, weights, weights * 0.75)
    return (result * weights).sum()


def _real_sum(result, w_real, w_imag):
    from ._namespace.elementwise import imag, real

    return (real(result) * w_real).sum() + (imag(result) * w_imag).sum()


def _number(value, what, positive=False) -> float:
    """``value`` as a finite float (``> 0`` if ``positive``, else ``>= 0``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"gradcheck: {what} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"gradcheck: {what} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    return value


def _inputs(inputs, name):
    """``inputs`` as a tuple, and the positions of the Tensors in it that require grad
    (``ValueError`` if there are none)."""
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError(f"{name}: no input is a Tensor with requires_grad=True")
    return inputs, checked


def gradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3) -> bool:
    """Compare ``fn``'s backward with central finite differences, in float64.

    ``fn(*inputs)`` must return a Tensor; a non-scalar output is reduced as
    ``sum(output * w)`` with fixed random weights ``w``. Every input Tensor that
    requires grad is checked element by element, its gradient both from
    ``backward()`` and from :func:`leanpass.autograd.grad` (which prunes the graph
    to the paths that reach the inputs, as the transforms do): ``|analytic -
    numeric|`` must be at most ``atol + rtol * |numeric|``. An output that does not
    require grad has the analytic gradient 0 (a detached result then fails). The
    ``.grad`` of tensors other than ``inputs`` (those ``fn`` closes over) is left
    as it was, and their hooks do not run. Returns True, or raises
    :class:`GradcheckError` naming the input, the index and both values.
    """
    eps = _number(eps, "eps", positive=True)
    atol = _number(atol, "atol")
    rtol = _number(rtol, "rtol")
    inputs, checked = _inputs(inputs, "gradcheck")
    wide = [  # floating-point tensors in float64 (complex in complex128); indices and masks as they are
        Tensor(x.detach(), requires_grad=x.requires_grad, name=x.name,
               dtype={"f": "float64", "c": "complex128"}.get(x.dtype.kind, x.dtype.name))
        if isinstance(x, Tensor) else x
        for x in inputs
    ]
    out = fn(*wide)
    if not isinstance(out, Tensor):
        raise TypeError(f"gradcheck: fn must return a Tensor, got {type(out).__name__}")
    weights = _weights(out.shape, out._backend) if out.ndim else None

    def scalar(result):
        return _reduced(result, weights)

    if out.requires_grad:
        _backward_leaving_others(scalar(out), wide)
        # the same gradients through autograd.grad, which prunes the graph to the paths
        # that reach the inputs (the path of lp.grad, lp.hessian and the other transforms)
        from .autograd import grad

        pruned = grad(scalar(fn(*wide)), [wide[i] for i in checked], allow_unused=True)
    else:  # no graph: the analytic gradient is zero (right for a constant, wrong for a detached result)
        pruned = [None] * len(checked)

    for i, again in zip(checked, pruned):
        x = wide[i]
        data = x._data
        backend = x._backend
        analytic = x.grad if out.requires_grad else backend.zeros(data.shape, data.dtype)
        # a complex input: the real and imaginary parts in turn, PyTorch's convention
        # (the gradient is dL/dRe + i dL/dIm)
        directions = (1.0, 1j) if _is_complex(x) else (1.0,)
        for index in _indices(x.shape):
            numeric = 0.0
            for direction in directions:
                step = backend.zeros(data.shape, data.dtype)
                step[index + (Ellipsis,)] = eps * direction
                with no_grad(), backend.context():
                    args = list(wide)
                    args[i] = Tensor(data + step, device=backend)
                    plus = scalar(fn(*args)).item()
                    args[i] = Tensor(data - step, device=backend)
                    minus = scalar(fn(*args)).item()
                numeric += direction * (plus - minus) / (2.0 * eps)
            if not _is_complex(x):
                numeric = numeric.real if isinstance(numeric, complex) else numeric
            value = _element(analytic, index)
            other = 0.0 if again is None else _element(again._data, index)
            if not _is_complex(x):
                value, other = value.real, complex(other).real
            for path, found in (("analytic gradient", value), ("analytic gradient by autograd.grad", other)):
                if not _close(found, numeric, atol, rtol):
                    label = f"input {i}" + (f" ({x.name})" if x.name else "")
                    raise GradcheckError(
                        f"gradcheck: {label} of shape {x.shape} at index {index}: {path} "
                        f"{found!r} != numeric {numeric!r} (atol={atol}, rtol={rtol})",
                        input=i, index=index, analytic=found, numeric=numeric,
                    )
    return True


def _close(found, numeric, atol, rtol) -> bool:
    """``|found - numeric| <= atol + rtol * |numeric|``, for the real and the imaginary
    parts apart (for real values, the imaginary parts are 0)."""
    found, numeric = complex(found), complex(numeric)
    return all(abs(f - n) <= atol + rtol * abs(n)
               for f, n in ((found.real, numeric.real), (found.imag, numeric.imag)))


def _backward_leaving_others(root, wide) -> None:
    """``root.backward()``, leaving the tensors outside ``wide`` that ``fn`` closes over
    (a model's parameters, a retained intermediate) as they were, as PyTorch's
    gradcheck leaves them: their ``.grad`` is put back, their post-accumulate-grad
    hooks do not run, and their graph is kept (``retain_graph``)."""
    ours = {id(x) for x in wide}
    others, hooked, seen, stack = [], [], set(), [root if root._node is None else root._node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is Node:
            stack.extend(node._prev)
            if getattr(node, "_hooks", None) is not None:
                hooked.append((node, node._hooks))  # gradient hooks registered on an intermediate value
                node._hooks = None
            node = node._tensor() if node._tensor is not None else None  # a tensor retaining its gradient
            if node is None:
                continue
        if node._rg and id(node) not in ours:
            others.append(node)
    saved = [(t, t._grad, getattr(t, "_read_zeros", False), getattr(t, "_hooks", None)) for t in others]
    for t in others:
        t._hooks = None
    try:
        root.backward(retain_graph=True)
    finally:
        for t, g, read_zeros, hooks in saved:
            t._grad, t._read_zeros, t._hooks = g, read_zeros, hooks
        for node, hooks in hooked:
            node._hooks = hooks


def gradgradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3) -> bool:
    """Check ``fn``'s second derivatives against finite differences of its first ones.

    The backward of ``fn`` is taken with ``create_graph=True`` (each operation's
    backward rule run again on Tensors); the function checked by :func:`gradcheck`
    is ``x -> sum_i <d scalar(fn(x)) / d x_i, v_i>`` with fixed random ``v_i``, so its
    analytic gradient is a Hessian-vector product computed through that graph, and
    its numeric one comes from first derivatives alone. Returns True, or raises
    :class:`GradcheckError`."""
    from .autograd import enable_grad, grad

    inputs, checked = _inputs(inputs, "gradgradcheck")

    def first(*xs):
        with enable_grad():
            xs = list(xs)
            for position in checked:
                if not xs[position].requires_grad:  # a finite-difference probe: differentiate it here
                    probe = xs[position].detach()
                    xs[position] = Tensor(probe, requires_grad=True,
                                          dtype="complex128" if _is_complex(probe) else "float64")
            out = fn(*xs)
            scalar = _reduced(out, _weights(out.shape, out._backend) if out.ndim else None)
            targets = [xs[i] for i in checked]
            total = (targets[0] * 0.0).sum()  # keeps the result in the graph if every term is None
            if not scalar.requires_grad:  # no graph (a constant, a detached result): first derivatives 0
                return total
            grads = grad(scalar, targets, create_graph=True, allow_unused=True)
            for g, x in zip(grads, targets):
                if g is not None:
                    total = total + (g * _weights(x.shape, x._backend)).sum()
            return total

    return gradcheck(first, inputs, eps=eps, atol=atol, rtol=rtol)
