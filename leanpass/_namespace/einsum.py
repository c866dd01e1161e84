"""``einsum``: Einstein summation, as ``torch.einsum`` and ``numpy.einsum``.

The array API standard has no einsum, so it is reduced here to the namespace's own
differentiable functions: a label repeated within one operand takes the diagonal
(``linalg.diagonal``), a label no other operand or the output needs is summed out
at once, then the operands are contracted left to right, two at a time, as one
batched ``matmul`` (a ``multiply`` where nothing is contracted), and the result's
axes are put in the output's order. Gradients, higher derivatives and every device
come for free from those functions.

The equation: a term of letters (``a``-``z``, ``A``-``Z``) per operand, separated by
commas, optionally ``->`` and the output's letters; ``...`` stands for the axes no
letter names (broadcast between operands, right-aligned). Without ``->`` the output
is the ellipsis' axes, then the letters that appear once, in alphabetical order
(upper case first), as PyTorch and NumPy. Spaces are ignored. A label's sizes must
agree between operands, except that a size 1 broadcasts (PyTorch's rule).
"""

from __future__ import annotations

from .. import ops
from .._node import run
from ..tensor import Tensor
from ._records import recorded
from ._util import tensors
from .manipulation import broadcast_to, permute_dims, reshape
from .operators import matmul
from .statistical import sum as _sum

__all__ = ["einsum"]

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _term(text, equation, where):
    """The labels of one term: letters, and at most one ``"..."``."""
    labels = []
    i = 0
    while i < len(text):
        if text.startswith("...", i):
            if "..." in labels:
                raise ValueError(f"einsum: the {where} of {equation!r} has more than one ellipsis ('...')")
            labels.append("...")
            i += 3
        elif text[i] in _LETTERS:
            labels.append(text[i])
            i += 1
        else:
            raise ValueError(f"einsum: {text[i]!r} in the {where} of {equation!r} is not a letter (a-z, A-Z) "
                             "or an ellipsis ('...')")
    return labels


def _parse(equation, n):
    """``(input labels per operand, output labels or None for the implicit output)``."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum: the equation must be a string such as 'ij,jk->ik', got {type(equation).__name__}")
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        raise ValueError(f"einsum: {equation!r} has more than one '->'")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != n:
        raise ValueError(f"einsum: {equation!r} has {len(terms)} operand term{'s' if len(terms) != 1 else ''}, "
                         f"but {n} operand{'s were' if n != 1 else ' was'} given")
    found = [_term(t, equation, f"operand term {i}") for i, t in enumerate(terms)]
    return found, (_term(output, equation, "output") if arrow else None)


def _expand(labels, t, i, equation):
    """The labels of operand ``i``, with its ellipsis as ``("...", k)`` labels of its
    axes, counted from the right (``k = 0`` is the last axis the ellipsis covers)."""
    named = [lab for lab in labels if lab != "..."]
    if "..." not in labels:
        if len(named) != t.ndim:
            raise ValueError(f"einsum: operand term {i} of {equation!r} names {len(named)} axes, but operand {i} "
                             f"has shape {t.shape} ({t.ndim} axes)")
        return list(labels), 0
    extra = t.ndim - len(named)
    if extra < 0:
        raise ValueError(f"einsum: operand term {i} of {equation!r} names {len(named)} axes, more than operand {i} "
                         f"of shape {t.shape} has")
    at = labels.index("...")
    ellipsis = [("...", k) for k in range(extra - 1, -1, -1)]
    return labels[:at] + ellipsis + labels[at + 1:], extra


def _diagonals(t, labels):
    """``t`` with each label repeated within it replaced by the diagonal of its axes."""
    while len(set(labels)) != len(labels):
        label = next(lab for lab in labels if labels.count(lab) > 1)
        p = labels.index(label)
        q = labels.index(label, p + 1)
        rest = [a for a in range(t.ndim) if a not in (p, q)]
        t = run(ops.diagonal, [permute_dims(t, tuple(rest) + (p, q))], 0)  # the last two axes' diagonal
        labels = [labels[a] for a in rest] + [label]
    return t, labels


def _summed(t, labels, keep):
    """``t`` summed over the axes whose labels are not in ``keep`` (in its own dtype)."""
    axes = tuple(a for a, lab in enumerate(labels) if lab not in keep)
    if not axes:
        return t, labels
    return _sum(t, axis=axes, dtype=t.dtype), [lab for lab in labels if lab in keep]


def _arranged(t, labels, order):
    """``t`` with its axes in the order of the labels ``order``."""
    perm = tuple(labels.index(lab) for lab in order)
    return t if perm == tuple(range(len(perm))) else permute_dims(t, perm)


def _contract(a, la, b, lb, keep, sizes):
    """``a`` and ``b`` multiplied and summed over their shared labels not in ``keep``."""
    batch = [lab for lab in la if lab in lb and lab in keep]
    inner = [lab for lab in la if lab in lb and lab not in keep]
    left = [lab for lab in la if lab not in lb]
    right = [lab for lab in lb if lab not in la]
    a = _arranged(a, la, batch + left + inner)
    b = _arranged(b, lb, batch + inner + right)
    # a size 1 shared with a larger size broadcasts (PyTorch's rule)
    shape_a = tuple(sizes[lab] for lab in batch + left + inner)
    shape_b = tuple(sizes[lab] for lab in batch + inner + right)
    if a.shape != shape_a:
        a = broadcast_to(a, shape_a)
    if b.shape != shape_b:
        b = broadcast_to(b, shape_b)
    nb, nl, nr = len(batch), len(left), len(right)
    if not inner:  # nothing summed: an outer product over the batch, by broadcasting
        out = reshape(a, shape_a + (1,) * nr) * reshape(b, shape_b[:nb] + (1,) * nl + shape_b[nb:])
        return out, batch + left + right
    bsize = [sizes[lab] for lab in batch]
    m, k, n = (_product(sizes[lab] for lab in group) for group in (left, inner, right))
    out = matmul(reshape(a, (*bsize, m, k)), reshape(b, (*bsize, k, n)))
    return reshape(out, tuple(sizes[lab] for lab in batch + left + right)), batch + left + right


def _product(values):
    out = 1
    for v in values:
        out *= v
    return out


@recorded(None, "linear algebra", dtype="promote")
def einsum(equation, *operands):
    """Einstein summation over ``operands`` as ``equation`` says (``"ij,jk->ik"``,
    ``"bij,bjk->bik"``, ``"ii->i"``, ``"...ij->...ji"``, ``"i,j"``...), as
    ``torch.einsum``; the operands may also be given as one list. Differentiable in
    every floating-point operand. See the module's docstring for the rules."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum: at least one operand is needed")
    if isinstance(equation, Tensor):
        raise TypeError("einsum: the equation comes first, einsum('ij,jk->ik', a, b) (PyTorch's order); the "
                        "sublist form einsum(a, [0, 1], ...) is not supported")
    terms, output = _parse(equation, len(operands))
    ts = tensors("einsum", *operands)
    labels, widths = zip(*(_expand(lab, t, i, equation) for i, (lab, t) in enumerate(zip(terms, ts))))
    labels = list(labels)
    width = max(widths)
    if output is None:
        counts = {}
        for lab in (lab for term in terms for lab in term if lab != "..."):
            counts[lab] = counts.get(lab, 0) + 1
        letters = sorted(lab for lab, c in counts.items() if c == 1)
        output = [("...", k) for k in range(width - 1, -1, -1)] + letters
    else:
        named = [lab for lab in output if lab != "..."]
        for lab in named:
            if named.count(lab) > 1:
                raise ValueError(f"einsum: the output of {equation!r} names {lab!r} more than once")
            if not any(lab in term for term in terms):
                raise ValueError(f"einsum: the output of {equation!r} names {lab!r}, which no operand term has")
        if "..." in output:
            at = output.index("...")
            output = output[:at] + [("...", k) for k in range(width - 1, -1, -1)] + output[at + 1:]
    sizes = {}
    for i, (t, lab) in enumerate(zip(ts, labels)):
        if len(set(lab)) != len(lab):
            for label in set(lab):
                dims = {t.shape[a] for a, x in enumerate(lab) if x == label}
                if len(dims) > 1:
                    raise ValueError(f"einsum: label {label!r} repeats in operand term {i} of {equation!r} on axes "
                                     f"of different sizes (operand {i} of shape {t.shape})")
        for axis, label in enumerate(lab):
            size = t.shape[axis]
            known = sizes.get(label)
            if known is None or known == 1:
                if known is None or size != 1:
                    sizes[label] = size
            elif size not in (1, known):
                where = "the ellipsis' axes" if isinstance(label, tuple) else f"label {label!r}"
                raise ValueError(f"einsum: {where} of {equation!r} has size {known} in one operand and {size} in "
                                 f"operand {i} (shapes {', '.join(str(u.shape) for u in ts)})")
    keep_out = set(output)
    current = []
    for i, (t, lab) in enumerate(zip(ts, labels)):
        t, lab = _diagonals(t, lab)
        others = {x for j, other in enumerate(labels) if j != i for x in other}
        t, lab = _summed(t, lab, keep_out | others)
        current.append((t, lab))
    t, lab = current[0]
    for j in range(1, len(current)):
        later = {x for _, other in current[j + 1:] for x in other}
        b, lb = current[j]
        t, lab = _contract(t, lab, b, lb, keep_out | later, sizes)
    t, lab = _summed(t, lab, keep_out)  # a single operand's labels the output leaves out
    if len(output) == len(lab) and t.shape != tuple(sizes[x] for x in lab):  # broadcast sizes a lone operand kept
        t = broadcast_to(t, tuple(sizes[x] for x in lab))
    return _arranged(t, lab, output)
