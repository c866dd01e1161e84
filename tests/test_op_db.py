"""Every operation, from one table (tests/op_db.py, PyTorch's ``op_db`` of ``OpInfo``
rows): each differentiable :class:`~leanpass.ops.Op` of :mod:`leanpass.ops` has a row,
and through its public function passes ``leanpass.gradcheck`` and (unless its row
says why not) ``leanpass.gradgradcheck`` on every device, and has its name in the docs."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import graph_nodes
from op_db import NOT_DIFFERENTIABLE, OP_DB, Known, discover

import leanpass as lp
from leanpass import ops
from leanpass._node import Parts

DOCS = Path(__file__).resolve().parents[1] / "docs"

# Public names the docs do not mention yet: expected failures of test_docs_name (an
# XPASS once the docs name one: take it out of here).
DOCS_MISSING: set[str] = set()


def _row_params():
    return [pytest.param(row, id=row.key) for row in OP_DB]


_discovered = functools.cache(discover)


def _made_by(key):
    """The Op a factory row (``"nn.mlp(2)"``) names: the factory called with its arguments."""
    name, _, args = key.partition("(")
    module, _, attr = name.rpartition(".")
    factory = getattr(importlib.import_module(f"{ops.__name__}.{module}"), attr)
    return factory(*ast.literal_eval(f"({args[:-1]},)"))


# ---- completeness ------------------------------------------------------------------------------


def test_every_differentiable_op_has_a_row():
    """Every Op of leanpass.ops, under any of its names, is either a row of OP_DB or in
    NOT_DIFFERENTIABLE (as its ``differentiable`` says); every factory of Ops has a
    row; and neither list names anything that is not there."""
    found, factories = _discovered()
    rows = {row.key for row in OP_DB}
    assert len(rows) == len(OP_DB), "two rows for one key"
    missing, misplaced, named = [], [], set()
    for op, names in found.values():
        names = set(names)
        named |= names
        listed = names & (rows if op.differentiable else NOT_DIFFERENTIABLE)
        if names & (NOT_DIFFERENTIABLE if op.differentiable else rows):
            misplaced.append(min(names))
        elif not listed:
            missing.append(min(names))
        assert len(listed) <= 1, f"{op!r} is listed under more than one of its names: {sorted(listed)}"
    missing += [f for f in factories if not any(key.startswith(f + "(") for key in rows)]
    stale = [k for k in rows | NOT_DIFFERENTIABLE if k not in named and k.partition("(")[0] not in factories]
    problems = [f"{what}: {sorted(keys)}" for what, keys in (
        ("ops without a row in tests/op_db.py (or, if not differentiable, in NOT_DIFFERENTIABLE)", missing),
        ("differentiable ops in NOT_DIFFERENTIABLE, or non-differentiable ones with a row", misplaced),
        ("rows or NOT_DIFFERENTIABLE entries that name no op of leanpass.ops", stale)) if keys]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("row", _row_params())
def test_row_applies_its_op(row):
    """The row's public function really records its op in the graph (not another one)."""
    found, _ = _discovered()
    by_key = {name: op for op, names in found.values() for name in names}
    op = _made_by(row.key) if "(" in row.key else by_key[row.key]
    out = row.fn(*row.inputs("cpu", row.make_samples()[0]))
    applied = [node._op for node in graph_nodes(out)]
    # an in-place change records a copy of its op (its own saved inputs): the same name and forward
    assert any(a is op or (isinstance(a, ops.Op) and a == op and a.fn is op.fn and a.view == op.view)
               for a in applied), f"{row.key}: {row.fn} does not apply {op!r} (the graph has {sorted(set(applied))})"


# ---- derivatives -------------------------------------------------------------------------------


def _check(check, row, device):
    """``check`` (gradcheck or gradgradcheck) on each sample of ``row``; where a sample
    is :class:`Known` to fail it, it must fail (a fixed bug: take the ``Known`` away)."""
    reason = row.not_on.get(device.partition(":")[0])
    if reason:
        pytest.skip(f"{row.key} on {device}: {reason}")
    for sample in row.make_samples():
        bug = sample.bugs.get(check.__name__) if isinstance(sample, Known) else None
        if bug is None:
            assert check(row.fn, row.inputs(device, sample), **row.tol)
        else:
            with pytest.raises(lp.GradcheckError):  # DID NOT RAISE: fixed
                check(row.fn, row.inputs(device, sample), **row.tol)


@pytest.mark.parametrize("row", _row_params())
def test_gradcheck(row, device):
    _check(lp.gradcheck, row, device)


@pytest.mark.parametrize("row", _row_params())
def test_gradgradcheck(row, device):
    if not row.gradgrad:
        pytest.skip(row.reason)
    _check(lp.gradgradcheck, row, device)


def test_rows_say_why():
    """A row that skips second derivatives says why; one that checks them does not."""
    assert not [row.key for row in OP_DB if row.gradgrad == bool(row.reason)]


# ---- docs ----------------------------------------------------------------------------------------


@functools.cache
def _code_spans():
    """The text of every inline code span of the docs' pages."""
    spans = set()
    for page in DOCS.rglob("*.md"):
        spans.update(re.findall(r"`([^`\n]+)`", page.read_text()))
    return spans


def documented(name: str) -> bool:
    """Whether a code span of the docs is ``name``, calls it (``name(``), or ends with it
    after a dot (``lp.linalg.solve``, ``t.softplus()``)."""
    pattern = re.compile(r"(?:^|[\s.(])" + re.escape(name) + r"(?:$|[\s(])")
    return any(span == name or pattern.search(span) for span in _code_spans())


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.xfail(reason="not in the docs yet")] if name in DOCS_MISSING
                 else []) for name in sorted({row.doc for row in OP_DB})])
def test_docs_name(name):
    assert documented(name), f"no page of docs/ mentions `{name}` in a code span"


# ---- saved values: what an op declares it saves is what its backward reads ------------------------


def _loss(out, rng):
    """A fixed random projection of every float output that requires grad (a sum could
    hide a term by symmetry)."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    total = None
    for o in outs:
        if isinstance(o, lp.Tensor) and o.requires_grad:
            if o.dtype.kind == "c":  # a real loss: both parts
                o = lp.real(o) + lp.imag(o) * 0.75
            w = lp.Tensor(rng.uniform(0.5, 1.5, size=o.shape), dtype=str(o.dtype), device=o.device)
            term = (o * w).sum()
            total = term if total is None else total + term
    return total


@pytest.mark.parametrize("row", _row_params())
def test_a_backward_never_reads_an_input_changed_since_unless_it_raises(row):
    """PyTorch's saved-values rule, differentially: for each input that requires grad,
    change it in place (under ``no_grad``, as an optimizer step) after the forward; the
    backward must then raise ``RuntimeError`` (the op saved it) or give exactly the
    gradients of the unchanged graph (it never read it). A backward that reads an input
    its ``Op`` does not declare in ``saves`` gives neither: a silently wrong gradient
    (``linalg.solve`` did, reading ``A``)."""
    sample = row.make_samples()[0]
    sample = sample.sample if isinstance(sample, Known) else sample
    reference = row.inputs("cpu", sample)
    loss = _loss(row.fn(*reference), np.random.default_rng(0))
    if loss is None:
        pytest.skip(f"{row.key}: no output requires grad")
    leaves = [x for x in reference if isinstance(x, lp.Tensor) and x.requires_grad]
    expected = lp.autograd.grad(loss, leaves, allow_unused=True)
    for i in range(len(leaves)):
        inputs = row.inputs("cpu", sample)
        ours = [x for x in inputs if isinstance(x, lp.Tensor) and x.requires_grad]
        loss = _loss(row.fn(*inputs), np.random.default_rng(0))
        with lp.no_grad():
            ours[i] += 0.25
        try:
            got = lp.autograd.grad(loss, ours, allow_unused=True)
        except RuntimeError as exc:
            assert "changed in place" in str(exc), exc
            continue
        for k, (g, e) in enumerate(zip(got, expected)):
            assert (g is None) == (e is None), f"{row.key}: input {k}"
            if g is not None:
                np.testing.assert_allclose(
                    g.numpy(), e.numpy(), rtol=1e-12, atol=1e-12,
                    err_msg=f"{row.key}: input {i} changed after the forward, and the gradient of input {k} "
                            "read its new values (the op's saves do not declare it)")


# ---- exact ops: the engine trusts their gradients' shapes and dtypes --------------------------


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("row", _row_params())
def test_an_exact_op_gives_gradients_of_its_inputs_shapes_and_dtypes(row, dtype, device):
    """An Op marked ``exact`` (element-wise, of one tensor) promises gradients of its
    inputs' shapes and dtypes, and the engine skips summing them back and casting them:
    its backward, on every node of the row's graph that has it, keeps that promise,
    in float32 (a float64 constant in a rule would promote) as in float64."""
    if row.not_on.get(device.partition(":")[0]):
        pytest.skip(row.not_on[device.partition(":")[0]])
    sample = row.make_samples()[0]
    sample = sample.sample if isinstance(sample, Known) else sample
    sample = tuple(x.astype(dtype) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x for x in sample)
    out = row.fn(*row.inputs(device, sample))
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if not isinstance(o, lp.Tensor):
            continue
        for node in graph_nodes(o):
            if not node._op.exact:
                continue
            grads = node._backward(node._backend.xp.ones_like(node._data))
            for parent, g in zip(node._prev, grads):
                if isinstance(g, Parts):  # an output of a decomposition hands its gradient on to the op
                    assert g.dtype == parent._data.dtype and sum(p is not None for p in g.grads) == 1
                elif g is not None:
                    assert (tuple(g.shape), g.dtype) == (tuple(parent._data.shape), parent._data.dtype), (
                        f"{row.key}: {node._op!r} is exact, yet gives a gradient of shape {tuple(g.shape)} and "
                        f"dtype {g.dtype} for an input of shape {tuple(parent._data.shape)}, {parent._data.dtype}")


def test_exact_ops_are_the_elementwise_ones_of_one_tensor():
    """Among the ops of leanpass.ops, ``exact`` is set by the element-wise table only:
    on its unary ops and on its binary ops' variants for a Python number, never on an
    op of two tensors (the outputs of a decomposition, made by leanpass._node.several,
    have it too: they hand their gradients on as they are)."""
    from leanpass.ops import elementwise as table

    marked = {id(op) for op, _ in _discovered()[0].values() if op.exact}
    one_tensor = {id(e.op) for e in table.UNARY.values() if e.op.differentiable}
    one_tensor |= {id(o) for e in table.BINARY.values() for o in (e.scalar_op, e.rscalar_op) if o is not None}
    assert marked and marked <= one_tensor
    assert not any(e.op.exact for e in table.BINARY.values())
