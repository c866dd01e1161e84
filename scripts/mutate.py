"""Mutation testing: make realistic single bugs in ``leanpass/``, one at a time, and
see whether the test suite catches each (a test fails).

    python scripts/mutate.py              # every mutant, the score at the end
    python scripts/mutate.py --list       # the mutants, without running them
    python scripts/mutate.py --only clip-bounds relu-kink
    python scripts/mutate.py --json out.json

Each mutant replaces one exact piece of text (it must occur exactly once, or the
mutant is reported STALE and the run fails: the code moved, so the mutant must be
updated) in a copy of the repository, then runs the test files it names on the
CPU devices (``cpu`` and ``strict``; ``-k "not cuda"``), stopping at the first
failure. The working tree is never touched. A mutant survives when the tests pass.
The score is caught / (caught + survived); the target is at least 90%.

Each set of test files is first run on the unchanged copy (the baseline): a set
that fails there would "catch" every mutant, so the run stops with an error.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # relative to the repository root
    old: str
    new: str
    tests: tuple[str, ...]  # test files (or node ids) that should catch it
    why: str = ""


MUTANTS = [
    # ---- backward rules -----------------------------------------------------------------
    Mutant("relu-kink", "leanpass/backends/_base.py", "return g * xp.astype(~(out <= 0), g.dtype)",
           "return g * xp.astype(~(out < 0), g.dtype)", ("tests/test_reliability.py", "tests/test_ops.py"),
           "relu's gradient at 0 is 0 (PyTorch), not 1"),
    Mutant("relu-stops-at-nan", "leanpass/backends/_base.py", "return g * xp.astype(~(out <= 0), g.dtype)",
           "return g * xp.astype(out > 0, g.dtype)", ("tests/test_edge_cases.py",),
           "PyTorch's relu passes the gradient at NaN (0 only where the result is <= 0)"),
    Mutant("abs-grad-nan-at-nan", "leanpass/ops/elementwise.py", "        return (g * sgn(xp, a),)",
           "        return (g * xp.sign(a),)", ("tests/test_edge_cases.py",), "torch's sgn(nan) is 0"),
    Mutant("cumprod-length-one-divides", "leanpass/ops/statistical.py", "        if a.shape[axis] == 1:",
           "        if False:", ("tests/test_edge_cases.py",),
           "g * x / x is inf at 1e308, 0 at denormals, NaN at inf: the gradient is g itself"),
    Mutant("pow-half-by-pow", "leanpass/ops/elementwise.py",
           '    if isinstance(p, float) and p == 0.5 and xp.isdtype(a.dtype, "real floating"):',
           "    if False:", ("tests/test_edge_cases.py",), "PyTorch's x ** 0.5 is sqrt, its gradient 0.5 rsqrt(x)"),
    Mutant("gelu-overflows", "leanpass/ops/nn.py", "    out *= 0.5\n    out *= a", "    out *= a\n    out *= 0.5",
           ("tests/test_edge_cases.py",), "0.5 x (1 + tanh) is inf for x > max / 2 if x is multiplied first"),
    Mutant("asarray-copy-unchecked", "leanpass/_namespace/creation.py", '    copy = _copy_flag(copy, "asarray")\n',
           "", ("tests/test_edge_cases.py",), "copy='x' must not be taken as True"),
    Mutant("tanh-grad-sign", "leanpass/ops/elementwise.py", "return (g - g * out * out,)",
           "return (g + g * out * out,)", ("tests/test_ops.py", "tests/test_elementwise.py")),
    Mutant("cos-grad-sign", "leanpass/ops/elementwise.py", "lambda xp, x, out, g: -g * xp.sin(x)",
           "lambda xp, x, out, g: g * xp.sin(x)", ("tests/test_elementwise.py",)),
    Mutant("atan2-grad-swap", "leanpass/ops/elementwise.py", "lambda d: g * b / d),",
           "lambda d: g * a / d),", ("tests/test_elementwise.py",)),
    Mutant("div-grad-b", "leanpass/ops/elementwise.py", "return g / b, -(g * a) / (b * b)",
           "return g / b, (g * a) / (b * b)", ("tests/test_ops.py",)),
    Mutant("mul-grad-swap", "leanpass/ops/elementwise.py", "        return g * b, g * a\n",
           "        return g * a, g * b\n", ("tests/test_ops.py",)),
    Mutant("mean-count", "leanpass/ops/statistical.py", "return (xp.broadcast_to(g / count if count else g, shape),)",
           "return (xp.broadcast_to(g / (count + 1) if count else g, shape),)", ("tests/test_statistical.py",)),
    Mutant("max-ties-first", "leanpass/ops/statistical.py",
           "return (winners * (g / xp.sum(winners, axis=axes, keepdims=True)),)",
           "return (winners * g,)", ("tests/test_statistical.py", "tests/test_ops.py"),
           "ties share the gradient evenly (PyTorch's max over a dim with ties: amax rule)"),
    Mutant("var-factor", "leanpass/ops/statistical.py", "return ((g * (2.0 / divisor)) * d,)",
           "return ((g * (1.0 / divisor)) * d,)", ("tests/test_statistical.py",)),
    Mutant("matmul-grad-transpose", "leanpass/ops/linalg.py",
           "ga = be.matmul(g, _transpose(xp, B)) if need_a else None",
           "ga = be.matmul(g, B if B.shape[-1] == B.shape[-2] else _transpose(xp, B)) if need_a else None",
           ("tests/test_linalg.py", "tests/test_ops.py")),
    Mutant("vecdot-grad", "leanpass/ops/linalg.py",
           "return (conj_g * _as_grad(xp, b, g) if needs[0] else None), (g * _as_grad(xp, a, g) if needs[1] else None)",
           "return (conj_g * _as_grad(xp, a, g) if needs[0] else None), (g * _as_grad(xp, b, g) if needs[1] else None)",
           ("tests/test_linalg.py",)),
    Mutant("vecdot-complex-unconjugated", "leanpass/ops/linalg.py",
           "conj_g = xp.conj(g) if xp.isdtype(g.dtype, \"complex floating\") else g", "conj_g = g",
           ("tests/test_complex_autodiff.py",)),
    Mutant("reshape-copy-marked-view", "leanpass/_node.py",
           "if op.view and (not op.copies or backend.shares_memory(out, a._data)):", "if op.view:",
           ("tests/test_inplace.py",), "a copy made anew from its changed base holds other values than its graph"),
    Mutant("pow-shortcut-ignores-dtype", "leanpass/ops/elementwise.py", "if p == 2 and same_dtype:", "if p == 2:",
           ("tests/test_elementwise.py",)),
    Mutant("host-operand-wraps", "leanpass/_namespace/_util.py",
           "if int(host.min()) < limits.min or int(host.max()) > limits.max:", "if False:",
           ("tests/test_elementwise.py",)),
    Mutant("batch-norm-empty-batch-updates-stats", "leanpass/nn/functional.py", "if count == 0:", "if False:",
           ("tests/test_norm_attention.py",)),
    Mutant("apply-int-result-requires-grad", "leanpass/_node.py",
           "rg = rg and dtype_name(out.dtype) in GRAD_DTYPES", "rg = rg", ("tests/test_autograd.py",)),
    Mutant("apply-result-not-a-view", "leanpass/_node.py", "if backend.shares_memory(t._data, x._data):",
           "if False:", ("tests/test_autograd.py",), "a change of the shared memory goes unseen"),
    Mutant("grad-none-allowed-silently", "leanpass/autograd.py",
           "    if not allow_unused:  # reached, but no gradient arrived",
           "    if False:  # reached, but no gradient arrived", ("tests/test_autograd.py",)),
    Mutant("constructor-shares-foreign-memory", "leanpass/_node.py", "if copy and array is host and not made:",
           "if copy and array is data:", ("tests/test_interop.py",)),
    Mutant("gradcheck-widens-indices", "leanpass/gradcheck.py",
           'dtype={"f": "float64", "c": "complex128"}.get(x.dtype.kind, x.dtype.name))', 'dtype="float64")',
           ("tests/test_autograd.py",)),
    Mutant("backward-after-move-unchecked", "leanpass/_graph/engine.py",
           "if parent._backend is not node._backend and not create_graph:  # a leaf moved (model.to) since",
           "if False:  # a leaf moved (model.to) since",
           ("tests/test_autograd.py",), "a gradient of the old device stored into a moved parameter"),
    Mutant("registry-device-from-class", "leanpass/backends/__init__.py", "if backend.device != name:",
           "if False:", ("tests/test_backends.py",)),
    Mutant("parameter-stays-buffer", "leanpass/nn/module.py", "if isinstance(value, (Parameter, Module)):",
           "if False:", ("tests/test_module.py",), "optimizers never see a Parameter set on a buffer's name"),
    Mutant("buffer-takes-anything", "leanpass/nn/module.py", "            elif not isinstance(value, Tensor):",
           "            elif False:", ("tests/test_module.py",)),
    Mutant("attention-scale-dropped", "leanpass/backends/numpy_backend.py", "        x *= s\n        return x",
           "        return x", ("tests/test_norm_attention.py",)),
    Mutant("det-svd-rule-at-invertible", "leanpass/ops/linalg.py",
           "return ((g * d)[..., None, None] * _transpose(xp, inv),)",
           "return (g[..., None, None] * _svd_cofactor(be, a),)", ("tests/test_linalg.py",),
           "the SVD rule's second derivative is NaN where singular values repeat (the identity)"),
    Mutant("det-near-singular-takes-the-inverse", "leanpass/ops/linalg.py",
           "invertible = nonzero & (cond < 1.0 / math.sqrt(xp.finfo(a.dtype).eps))", "invertible = nonzero",
           ("tests/test_linalg.py",), "det(A) A^-T cancels in its derivative at a practically singular A"),
    Mutant("ddp-evaluation-disarms-the-backward", "leanpass/nn/parallel.py",
           "        if recording:\n"
           "            object.__setattr__(self, \"_sync_next\", not self._no_sync)",
           "        object.__setattr__(self, \"_sync_next\", not self._no_sync and recording)",
           ("tests/test_distributed.py",)),
    Mutant("det-svd-of-unmasked-batch", "leanpass/ops/linalg.py",
           "singular = _svd_cofactor(be, xp.where(mask, distinct, a))", "singular = _svd_cofactor(be, a)",
           ("tests/test_linalg.py",), "a NaN in the branch not taken poisons the second derivative"),
    Mutant("product-backward-keeps-int", "leanpass/ops/linalg.py",
           "return x if x.dtype == g.dtype else xp.astype(x, g.dtype)", "return x", ("tests/test_linalg.py",)),
    Mutant("transform-argument-not-aliased", "leanpass/func.py",
           "            return positive(x), True", "            return x, True", ("tests/test_higher_order.py",)),
    Mutant("permute-inverse", "leanpass/ops/manipulation.py", "return (xp.permute_dims(g, inverse),)",
           "return (xp.permute_dims(g, axes),)", ("tests/test_manipulation.py",)),
    Mutant("roll-back", "leanpass/ops/manipulation.py", "return (xp.roll(g, back, axis=axes),)",
           "return (xp.roll(g, shift, axis=axes),)", ("tests/test_manipulation.py",)),
    Mutant("flip-grad", "leanpass/ops/manipulation.py", "return (xp.flip(g, axis=axes),)", "return (g,)",
           ("tests/test_manipulation.py",)),
    Mutant("take-add-at", "leanpass/backends/numpy_backend.py",
           "np.add.at(buf, (slice(None),) * axis + (index,), values)",
           "buf[(slice(None),) * axis + (index,)] += values",
           ("tests/test_indexing_functions.py", "tests/test_indexing.py"),
           "repeated indices must accumulate"),
    Mutant("mask-grad", "leanpass/ops/indexing.py", "        buf[mask] = g\n", "        buf[mask] = g * 0.5\n",
           ("tests/test_indexing.py",)),
    Mutant("setitem-grad-a", "leanpass/ops/indexing.py", "            be.index_set(ga, kind, key, 0)\n",
           "            pass\n", ("tests/test_indexing.py", "tests/test_inplace.py"),
           "the overwritten part of the target gets no gradient"),
    Mutant("sort-inverse", "leanpass/ops/sorting.py", "return (xp.take_along_axis(g, inverse, axis=axis),)",
           "return (xp.take_along_axis(g, order, axis=axis),)", ("tests/test_searching_sorting_sets.py",)),
    Mutant("axis-negative", "leanpass/_checks.py", "    return axis % ndim\n", "    return axis if axis >= 0 else 0\n",
           ("tests/test_statistical.py", "tests/test_manipulation.py")),
    # ---- nn, losses, optimizers ---------------------------------------------------------------
    Mutant("apply-no-device-check", "leanpass/_node.py", "        elif t._backend is not backend:\n",
           "        elif False:\n", ("tests/test_nn.py", "tests/test_bad_input.py"),
           "Linear on cpu given an input on strict:1 must name both devices"),
    Mutant("ce-drops-target-mass", "leanpass/ops/nn.py",
           "softmax = e / total * xp.sum(probs, axis=axis, keepdims=True)", "softmax = e / total",
           ("tests/test_nn.py",), "soft targets whose rows do not sum to 1"),
    Mutant("mlp-node-no-relu-mask", "leanpass/backends/numpy_backend.py",
           "return np.multiply(g, ~(out <= 0), out=g)", "return g", ("tests/test_ops.py",)),
    Mutant("generic-relu-mask-dropped", "leanpass/backends/_base.py",
           "return g * xp.astype(~(out <= 0), g.dtype)", "return g", ("tests/test_ops.py",),
           "the strict device's MLP node"),
    Mutant("mlp-node-no-relu", "leanpass/backends/numpy_backend.py",
           "return np.maximum(x, 0, out=x)", "return x", ("tests/test_ops.py",)),
    Mutant("bias-gradient-drops-a-row", "leanpass/backends/numpy_backend.py",
           "return ones @ g", "return ones[1:] @ g[1:]",
           ("tests/test_ops.py",)),
    Mutant("nested-view-change-counted-twice", "leanpass/_node.py",
           "    if _outer:  # one change of the memory: its bases (below) share the counter, counted once\n"
           "        vc.bump()",
           "    vc.bump()", ("tests/test_inplace.py",)),
    Mutant("setitem-value-gradient-a-view", "leanpass/ops/indexing.py",
           "                gv = be.copy(gv)", "                pass", ("tests/test_inplace.py",)),
    Mutant("ddp-models-never-compared", "leanpass/distributed.py",
           "        if other != everyone[0]:", "        if False:", ("tests/test_distributed.py",)),
    Mutant("linear-weight-not-transposed", "leanpass/ops/nn.py", "    out = rows @ w.T\n", "    out = rows @ w\n",
           ("tests/test_nn.py",), "a square Linear computes x @ W, not PyTorch's x @ W.T"),
    Mutant("mlp-node-stops-too-early", "leanpass/ops/nn.py",
           "below.append(below[-1] or bool(needs[1 + i]) or bool(needs[1 + depth + i]))",
           "below.append(below[-1] or bool(needs[1 + i]))", ("tests/test_ops.py",)),
    Mutant("numpy-xp-sum-reduces-first-axis", "leanpass/backends/numpy_backend.py",
           "return functools.partial(ufunc.reduce, axis=None)",
           "return functools.partial(ufunc.reduce)", ("tests/test_backends.py",)),
    Mutant("ce-integer-tensor-indices-unchecked", "leanpass/nn/losses.py",
           "        valid = backend.all_in_range(data, classes)", "        valid = True", ("tests/test_nn.py",)),
    Mutant("ce-index-other-device", "leanpass/nn/losses.py", "        if device != logits.device:\n",
           "        if False:\n", ("tests/test_nn.py",)),
    Mutant("backend-copies-are-new-objects", "leanpass/backends/__init__.py",
           "return (get_backend, (backend.device,))", "return (type(backend), (backend.index,))",
           ("tests/test_serialization.py",)),
    Mutant("mlp-fusion-ignores-member-changes", "leanpass/nn/layers.py",
           "if (fusion is None or fusion[0] != _CHANGES[0] or fusion[1] != layers",
           "if (fusion is None or fusion[1] != layers", ("tests/test_ops.py",)),
    Mutant("class-index-range-inclusive", "leanpass/backends/numpy_backend.py",
           "index.view(unsigned), axis=None) < high)", "index.view(unsigned), axis=None) <= high)",
           ("tests/test_nn.py",)),
    Mutant("class-index-range-first-axis", "leanpass/backends/numpy_backend.py",
           "index.view(unsigned), axis=None) < high)", "index.view(unsigned)) < high)",
           ("tests/test_backends.py",)),
    Mutant("ce-index-grad-no-one-hot", "leanpass/backends/numpy_backend.py",
           "buf[numbers, index] -= value", "buf[numbers, index] -= 0",
           ("tests/test_nn.py",)),
    Mutant("module-to-keeps-grad", "leanpass/nn/module.py",
           "p.grad = None if grad is None else Tensor(grad, device=moved.device, dtype=dtype_name(moved.dtype)).data",
           "pass", ("tests/test_nn.py",)),
    Mutant("inplace-replay-reads-new-values", "leanpass/_node.py",
           "        old._data = source  # made before the change, and replays, read them there)\n", "        pass\n",
           ("tests/test_saved_values.py", "tests/test_higher_order.py")),
    Mutant("max-tie-not-split", "leanpass/ops/elementwise.py",
           "- 0.5 * xp.astype(a == b, g.dtype))", "- 0.0 * xp.astype(a == b, g.dtype))",
           ("tests/test_output_changed_in_place.py",)),
    Mutant("create-graph-replays-changed-input", "leanpass/_graph/engine.py",
           "        changed = True\n    return changed", "    return changed", ("tests/test_saved_values.py",)),
    Mutant("data-assignment-not-a-change", "leanpass/tensor.py",
           "        if changed:\n            version_of(self).bump()", "        pass",
           ("tests/test_saved_values.py",)),
    Mutant("saved-value-rule-ignores-output", "leanpass/ops/elementwise.py",
           "def _exp_rule(xp, inputs, out, g):\n    return (g * out,)",
           "def _exp_rule(xp, inputs, out, g):\n    return (g * xp.exp(inputs[0]),)", ("tests/test_saved_values.py",)),
    Mutant("mlp-tanh-is-sigmoid", "leanpass/nn/layers.py", '"tanh": Tanh,', '"tanh": Sigmoid,', ("tests/test_nn.py",)),
    Mutant("load-state-not-strict-loads-nothing", "leanpass/nn/module.py",
           "        for p, array, transposed in updates:",
           "        for p, array, transposed in (updates if strict else ()):", ("tests/test_nn.py",)),
    Mutant("linear-any-dtype", "leanpass/nn/layers.py", '        dtype = _parameter_dtype(dtype, "Linear")\n',
           "", ("tests/test_nn.py",)),
    Mutant("optim-state-keeps-dtype", "leanpass/optim/optimizers.py",
           "value = as_tensor(value, device=p.device, dtype=dtype_name(p.dtype)).data",
           "value = as_tensor(value, device=p.device).data", ("tests/test_optim.py",)),
    Mutant("optim-bare-tensor", "leanpass/optim/optimizers.py", "if isinstance(params, (Tensor, dict, set)):",
           "if isinstance(params, (dict, set)):", ("tests/test_optim.py",)),
    Mutant("optim-nan-lr", "leanpass/optim/optimizers.py", "if not 0.0 <= value < math.inf:", "if value < 0:",
           ("tests/test_optim.py",)),
    Mutant("optim-read-only-unchecked", "leanpass/optim/optimizers.py",
           "or grad.dtype != dtype or backend.read_only(data)\n", "or grad.dtype != dtype\n",
           ("tests/test_optim.py",)),
    Mutant("sgd-momentum-decay", "leanpass/optim/optimizers.py",
           "                buf *= momentum\n", "", ("tests/test_optim.py",)),
    Mutant("adam-bias-correction", "leanpass/optim/optimizers.py",
           "step_size, bc2_sqrt = lr / (1.0 - b1**t), math.sqrt(1.0 - b2**t)",
           "step_size, bc2_sqrt = lr, math.sqrt(1.0 - b2**t)", ("tests/test_optim.py",)),
    Mutant("adam-eps-inside-sqrt", "leanpass/optim/optimizers.py",
           "backend.add_scaled(data, -step_size, m / (backend.xp.sqrt(v) / bc2_sqrt + eps))",
           "backend.add_scaled(data, -step_size, m / (backend.xp.sqrt(v + eps) / bc2_sqrt))", ("tests/test_optim.py",)),
    Mutant("adam-no-lerp", "leanpass/optim/optimizers.py", "m += (1.0 - b1) * (grad - m)  # PyTorch's lerp",
           "m += (1.0 - b1) * grad", ("tests/test_optim.py",)),
    Mutant("adam-amsgrad-no-maximum", "leanpass/optim/optimizers.py", "v_max[...] = xp.maximum(v_max, v)",
           "v_max[...] = v", ("tests/test_optim_torch_options.py",),
           "AMSGrad divides by the largest second moment so far, not the current one"),
    Mutant("loader-threads-left-running", "leanpass/data.py",
           "    if workers is not None:\n        workers.close()\n", "    pass\n",
           ("tests/test_dataloader_workers.py",),
           "a loop that stops (break, the end, an error) must stop its worker threads"),
    Mutant("dropout-no-rescale", "leanpass/nn/layers.py", "* (1.0 / keep)", "", ("tests/test_nn.py",)),
    Mutant("softplus-grad-branch", "leanpass/ops/nn.py", "return (g * xp.where(a >= 0, r, e * r),)",
           "return (g * xp.where(a >= 0, e * r, r),)", ("tests/test_nn.py", "tests/test_ops.py")),
    Mutant("gelu-constant", "leanpass/ops/nn.py", "slope = a * (3.0 * _GELU_K)",
           "slope = a * (1.0 * _GELU_K)", ("tests/test_nn.py", "tests/test_ops.py")),
    Mutant("gelu-exact-grad-drops-pdf", "leanpass/ops/nn.py", "return (g * (cdf + a * pdf),)",
           "return (g * cdf,)", ("tests/test_special.py",), "the exact GELU's gradient is cdf + x pdf"),
    Mutant("erf-grad-constant", "leanpass/ops/special.py", "_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)",
           "_TWO_OVER_SQRT_PI = 1.0 / math.sqrt(math.pi)", ("tests/test_special.py",),
           "erf' = 2 / sqrt(pi) exp(-x^2) (erfc's too)"),
    Mutant("xlogy-grad-unmasked", "leanpass/ops/special.py",
           "    return xp.where((a == 0) & (b <= 0), xp.zeros_like(grad), grad)\n", "    return grad\n",
           ("tests/test_special.py",), "torch's d/dx xlogy is 0 where x == 0 and y <= 0 (not log(y): nan, -inf)"),
    Mutant("mul-forward-warns", "leanpass/ops/elementwise.py", "return be.quietly(operator.mul, a, b), backward",
           "return a * b, backward", ("tests/test_no_warnings.py",), "inf * 0 must give nan without a RuntimeWarning"),
    Mutant("backward-pass-warns", "leanpass/_graph/engine.py",
           "no_grad(), quiet:", "no_grad():", ("tests/test_no_warnings.py",),
           "the backward rules (log's g / x at 0) run with floating-point warnings off"),
    Mutant("module-zero-grad-noop", "leanpass/nn/module.py",
           "        clear_gradients(self.parameters(), set_to_none)",
           "        pass", ("tests/test_nn.py", "tests/test_training.py")),
    Mutant("optimizer-copy-keeps-ids", "leanpass/optim/optimizers.py",
           "        self.state = {id(params[i]): v for i, v in state[\"state\"].items()}\n", "",
           ("tests/test_optim.py",)),
    Mutant("tensor-copy-keeps-version", "leanpass/tensor.py",
           "    fill_leaf(t, data, backend, requires_grad, name, grad)\n",
           "    fill_leaf(t, data, backend, requires_grad, name, grad)\n    from .autograd import version_of\n"
           "    version_of(t).bump()\n", ("tests/test_serialization.py",)),
    Mutant("state-dict-integers-to-float", "leanpass/nn/module.py",
           "array = as_tensor(value, device=p.device, dtype=want).data",
           "array = as_tensor(value, device=p.device).data",
           ("tests/test_module.py",)),
    Mutant("zero-grad-in-place-drops", "leanpass/tensor.py",
           "            with p._backend.context():\n                grad[...] = 0\n",
           "            p._grad = None\n", ("tests/test_optim.py",)),
    Mutant("grad-mode-global", "leanpass/_graph/modes.py", "class _GradState(threading.local):",
           "class _GradState:", ("tests/test_autograd.py", "tests/test_threads.py")),
    # ---- save and load -------------------------------------------------------------------------
    Mutant("file-of-0.3-loads-untransposed", "leanpass/nn/module.py",
           "        if layout == \"leanpass\" and isinstance(version, int) and version < TORCH_LAYOUTS:\n",
           "        if False:\n", ("tests/test_serialization.py",),
           "a square Linear weight of a 0.3 file, (in, out), loads without error and computes the wrong function"),
    Mutant("bare-tensor-loads-as-array", "leanpass/serialization.py", "return decode_tensor(tree[\"tensor\"])",
           "return decode(tree[\"tensor\"][\"data\"], \"\")", ("tests/test_serialization.py",)),
    Mutant("save-in-place", "leanpass/serialization.py", 'with os.fdopen(fd, "wb") as f,',
           'with open(target, "wb") as f,', ("tests/test_serialization.py",), "an interrupted save keeps the old file"),
    Mutant("save-any-dtype", "leanpass/serialization.py",
           "            if host.dtype.kind not in _ARRAY_KINDS or host.dtype.name not in _STANDARD_DTYPES:",
           "            if False:", ("tests/test_serialization.py",)),
    Mutant("load-no-cap", "leanpass/serialization.py",
           "if self.max_bytes is not None and self.used + nbytes > self.max_bytes:", "if False:",
           ("tests/test_serialization.py",)),
    # ---- input checks, gradcheck ------------------------------------------------------------------
    Mutant("clip-blocks-at-bounds", "leanpass/ops/elementwise.py", "            inside = a >= low\n",
           "            inside = a > low\n", ("tests/test_bad_input.py", "tests/test_elementwise.py"),
           "clip(-1, 1) at -1 passes the gradient (torch.clamp)"),
    Mutant("gradcheck-first-input-only", "leanpass/gradcheck.py", "    for i, again in zip(checked, pruned):\n",
           "    for i, again in zip(checked[:1], pruned):\n", ("tests/test_autograd.py", "tests/test_bad_input.py")),
    Mutant("state-dict-drops-tied-names", "leanpass/nn/module.py",
           "self._walk(torch=torch, unique=False)", "self._walk(torch=torch)", ("tests/test_module.py",)),
    Mutant("logaddexp-rounded-rule", "leanpass/ops/elementwise.py",
           "lambda xp, a, b, out, g: g / (1.0 + xp.exp(b - a)),",
           "lambda xp, a, b, out, g: g * xp.exp(a - xp.logaddexp(a, b)),", ("tests/test_reliability.py",)),
    Mutant("atan2-nan-at-origin", "leanpass/ops/elementwise.py",
           "_zero_where_zero(xp, a * a + b * b, lambda d: g * b / d)", "g * b / (a * a + b * b)",
           ("tests/test_reliability.py",)),
    Mutant("all-reduce-max-drops-nan", "leanpass/distributed.py",
           "    if nan is not None and nan.any():", "    if False:", ("tests/test_distributed.py",)),
    Mutant("index-mask-not-copied", "leanpass/_indexing.py",
           "        return array if made else backend.copy(array)", "        return array", ("tests/test_inplace.py",)),
    Mutant("take-result-is-a-view", "leanpass/_indexing.py", "return run1(ops.getitem_shape, taken, out_shape)",
           "return run1(ops.getitem_reshape, taken, out_shape)", ("tests/test_inplace.py",)),
    Mutant("no-grad-view-changes-unchecked", "leanpass/_node.py",
           "    if _grad_state.enabled and getattr(t, \"_base\", None) is not None:\n        _refuse_no_grad_view",
           "    if False:\n        _refuse_no_grad_view", ("tests/test_inplace.py",)),
    Mutant("sequential-slice-is-a-list", "leanpass/nn/layers.py", "            return Sequential(self.layers[i])",
           "            return self.layers[i]", ("tests/test_module.py",)),
    Mutant("deleted-buffer-stays", "leanpass/nn/module.py",
           "        if buffers and name in buffers:  # the name may hold a parameter next",
           "        if False:  # the name may hold a parameter next", ("tests/test_module.py",)),
    Mutant("written-zeros-ignored", "leanpass/tensor.py", "    written = bool(t._backend.xp.any(grad != 0))",
           "    written = False", ("tests/test_optim.py",)),
    Mutant("grad-prunes-the-paths-below-a-node", "leanpass/_graph/engine.py",
           "            if key in targets or any(id(p) in needed for p in node._prev):",
           "            if key in targets:", ("tests/test_higher_order.py",)),
    Mutant("max-method-reads-a-positional-axis", "leanpass/_namespace/_records.py",
           "            if len(args) > many:\n", "            if False:\n", ("tests/test_torch_names.py",),
           "t.max(1)[1] (PyTorch's indices) would silently take a row of maxima"),
    Mutant("method-gathers-no-tuple", "leanpass/_namespace/_records.py",
           "if len(rest) == 1 and isinstance(rest[0], (tuple, list)):", "if False:", ("tests/test_records.py",),
           "t.reshape((2, 3)) would be read as a shape of one tuple"),
    Mutant("method-keeps-the-functions-default", "leanpass/_namespace/_records.py",
           "repr(p.default) != repr(theirs[p.name])}", "False}", ("tests/test_records.py",),
           "t.squeeze() would need an axis, as lp.squeeze does"),
    Mutant("record-skips-a-manipulations-saves", "leanpass/ops/manipulation.py",
           '@op("roll", saves=(), saves_out=False, complex="holomorphic")',
           '@op("roll", saves=None, saves_out=False, complex="holomorphic")', ("tests/test_records.py",),
           "roll's backward would claim to read its input, and raise after an in-place change"),
    Mutant("engine-skips-the-heap-check", "leanpass/_graph/engine.py",
           "if following is not None and heap and heap[0][0] < -following._seq:", "if False:",
           ("tests/test_autograd.py",), "a node would pass on part of its gradient, its hooks seeing each part"),
    Mutant("col2im-kernel-overwrites", "leanpass/backends/_numba.py",
           "row[numba.uint64(j) + off] += part[j]", "row[numba.uint64(j) + off] = part[j]",
           ("tests/test_fused.py",), "overlapping patches would keep only the last one's gradient"),
    Mutant("fallback-keeps-the-replays-draws", "leanpass/_compile.py",
           "                _backends_base._host_rng.bit_generator.state = drawn", "                pass",
           ("tests/test_compile.py",), "a call that fell back midway drew its masks twice"),
    Mutant("replay-skips-post-accumulate-hooks", "leanpass/_compile.py",
           "            hooks._run_post_hooks(leaves)", "            pass",
           ("tests/test_distributed.py::test_ddp_scenarios_on_two_processes[compiled]",),
           "a compiled DDP step would average its gradients at the trace only: every replay stepped alone"),
    Mutant("ddp-forward-arms-outside-the-replay", "leanpass/nn/parallel.py",
           "    @trace.action  # lp.compile: a replay arms", "    # lp.compile: a replay arms",
           ("tests/test_distributed.py::test_ddp_scenarios_on_two_processes[compiled]",),
           "a replay would not arm the wrapper: its hooks would not average"),
    Mutant("ddp-replay-reads-the-callers-grad-mode", "leanpass/nn/parallel.py",
           "        if recording:\n", "        if autograd.is_grad_enabled():\n",
           ("tests/test_distributed.py::test_ddp_scenarios_on_two_processes[compiled]",),
           "a compiled evaluation armed the next backward; a step called under no_grad never averaged"),
    Mutant("clip-promotes-to-the-bound", "leanpass/_namespace/elementwise.py",
           "if bound.dtype != x.dtype:  # the result has x's dtype (the standard): so does each bound",
           "if False:",
           ("tests/test_elementwise.py",)),
    Mutant("nccl-buffer-reads-writeable", "leanpass/distributed.py",
           "and not backend.read_only(data):", "and data.flags.writeable:", ("tests/test_distributed.py",),
           "CuPy's flags have no writeable: every NCCL collective raised AttributeError"),
    Mutant("solve-saves-not-a", "leanpass/ops/linalg.py",
           '@op("solve", saves=(0,), saves_out=True, needs=True, rule=_solve_rule, complex="holomorphic")',
           '@op("solve", saves=(), saves_out=True, needs=True, rule=_solve_rule, complex="holomorphic")',
           ("tests/test_op_db.py",), "A changed after solve: its gradient read the new A, silently"),
    Mutant("view-base-operand-enters-as-its-new-node", "leanpass/_node.py",
           "    tensors = tuple(old if o is t else o if o._node is None else o._node\n",
           "    tensors = tuple(old if o is t else o\n",
           ("tests/test_inplace.py",), "v = h[:]; v += h must see h as it was"),
    Mutant("create-graph-grad-shared", "leanpass/autograd.py", "            grad = run1(ops.copy, grad)\n",
           "            grad = grad\n", ("tests/test_autograd.py",),
           "(a + b)'s one gradient Tensor in two leaves' .grad: clip_grad_norm_ scaled it twice"),
    Mutant("setitem-repeats-all-get-gradient", "leanpass/ops/indexing.py",
           "gv = _written_last(be, shape, key, gv)", "gv = gv", ("tests/test_indexing.py",)),
    Mutant("mask-among-others-kept-as-mask", "leanpass/_indexing.py",
           "out.extend(t._backend.xp.nonzero(p))", "out.append(p)", ("tests/test_indexing.py",)),
    Mutant("tensor-hooks-skipped", "leanpass/_graph/engine.py",
           "                if hooked:\n                    grad = _with_grad_hooks(node, grad)\n"
           "                owner = node._tensor",
           "                owner = node._tensor", ("tests/test_autograd.py",)),
    Mutant("flatten-start-after-end", "leanpass/_namespace/methods.py", "    if start > end:  # PyTorch",
           "    if False:  # PyTorch", ("tests/test_bad_input.py", "tests/test_manipulation.py")),
    Mutant("masked-array-mask-lost", "leanpass/backends/_base.py", "    if isinstance(data, np.ma.MaskedArray):",
           "    if False:", ("tests/test_bad_input.py",)),
    # ---- the engine -------------------------------------------------------------------------
    Mutant("unbroadcast-keep-lead", "leanpass/_graph/engine.py",
           "return xp.sum(grad, axis=tuple(range(lead)))",
           "return xp.sum(grad, axis=tuple(range(lead))) if lead > 1 else grad[0]",
           ("tests/test_autograd.py", "tests/test_ops.py")),
    Mutant("nonleaf-no-accumulate", "leanpass/_graph/engine.py", "pending[parent] = old + pgrad",
           "pending[parent] = pgrad", ("tests/test_autograd.py",)),
    Mutant("leaf-no-accumulate", "leanpass/_graph/engine.py", "else (old[0] + pgrad, True)",
           "else (pgrad, True)", ("tests/test_autograd.py",)),
    Mutant("retained-grad-not-copied", "leanpass/_graph/engine.py", "_store(tensor, g, fresh=False)",
           "_store(tensor, g, fresh=True)", ("tests/test_autograd.py",), "a retained gradient owns its array"),
    Mutant("kept-loss-pins-graph", "leanpass/_graph/engine.py",
           "        node._prev = released\n", "", ("tests/test_autograd.py",)),
    Mutant("no-grad-generator", "leanpass/_graph/modes.py", "        if inspect.isgeneratorfunction(func):",
           "        if False:", ("tests/test_autograd.py",)),
    Mutant("custom-op-unchecked", "leanpass/_node.py",
           "operation = Op(name, _checked(fn, name), fresh=False, needs=True, doc=fn.__doc__ or \"\", complex=\"own\")",
           "operation = Op(name, fn, fresh=False, doc=fn.__doc__ or \"\", complex=\"own\")",
           ("tests/test_autograd.py",)),
    Mutant("version-check-off", "leanpass/_graph/engine.py",
           "if vc is not None and vc.changed > seq:\n                    _check_output",
           "if False:\n                    _check_output", ("tests/test_inplace.py",)),
    Mutant("exact-binary-ops", "leanpass/ops/elementwise.py",
           "for one_tensor in ((operation,) if arity == 1 else ()) + (scalar_op, rscalar_op):",
           "for one_tensor in (operation, scalar_op, rscalar_op):", ("tests/test_op_db.py",)),
    Mutant("complex-without-conjugates", "leanpass/_graph/engine.py",
           "grads = [None if g is None else xp.conj(g) for g in rule(xp.conj(grad))]", "grads = list(rule(grad))",
           ("tests/test_complex_autodiff.py",), "every complex gradient of a holomorphic op conjugated: wrong"),
    Mutant("svd-phase-check-off", "leanpass/ops/linalg.py",
           "            if bool(xp.any(xp.abs(total) > 1e-2 + 1e-2 * xp.abs(phases[-1]))):",
           "            if False:", ("tests/test_complex_autodiff.py",),
           "a loss of complex singular vectors that depends on their phases gets a gradient"),
    Mutant("svd-complex-diagonal-dropped", "leanpass/ops/linalg.py",
           "            if uhgu is not None:\n                inner = inner + _diagonal_matrix(",
           "            if False:\n                inner = inner + _diagonal_matrix(",
           ("tests/test_complex_autodiff.py",),
           "the phase term i Im(U^H gU)_jj / s_j of a complex SVD's gradient"),
    Mutant("qr-complex-diagonal-whole", "leanpass/ops/linalg.py",
           "            lower = lower - 0.5 * _diagonal_matrix(", "            lower = lower - 0.0 * _diagonal_matrix(",
           ("tests/test_complex_autodiff.py",), "R's real diagonal takes half of the diagonal of a complex QR's inner"),
    Mutant("complex-sign-holomorphic", "leanpass/ops/elementwise.py",
           "        return ((g - xp.astype(xp.real(xp.conj(phase) * g), a.dtype) * phase) * inverse,)",
           "        return (g * inverse,)", ("tests/test_complex_autodiff.py",),
           "sgn's gradient drops its component along the phase"),
    Mutant("several-loses-a-part", "leanpass/_node.py",
           "        return Parts(tuple(b if a is None else a if b is None else a + b",
           "        return Parts(tuple(b if a is None else a",
           ("tests/test_saved_values.py", "tests/test_linalg.py"),
           "two gradients of one output of a decomposition (a second derivative's graph): only the first kept"),
    Mutant("group-norm-kernel-shift-sign", "leanpass/backends/_numba.py",
           "                out[r, k] = x[r, k] * a + b", "                out[r, k] = x[r, k] * a - b",
           ("tests/test_fused.py", "tests/test_groupnorm_upsample.py"), "the fused row map's shift"),
    Mutant("compile-replay-drops-leaf-gradients", "leanpass/_compile.py",
           "                _store(t, g, fresh)", "                pass", ("tests/test_compile.py",),
           "a replayed backward pass writes no .grad"),
    Mutant("compile-ignores-replaced-layers", "leanpass/_compile.py",
           "        if _MODULE_CHANGES[0] != self.modules:", "        if False:", ("tests/test_compile.py",),
           "a replay after a layer was replaced reads the old layer's weights"),
    Mutant("compile-skips-unbroadcast", "leanpass/_compile.py",
           "                        if tuple(pg.shape) != shape:", "                        if False:",
           ("tests/test_compile.py",), "a bias's gradient left of the output's shape"),
    Mutant("compile-key-ignores-aliasing", "leanpass/_compile.py",
           "    return key + (aliasing,), tensors", "    return key, tensors", ("tests/test_compile.py",),
           "f(a, a) replayed for f(a, b)"),
    Mutant("compile-constants-shared", "leanpass/_compile.py",
           "                slots[event[2]] = event[3].copy(event[1])", "                slots[event[2]] = event[1]",
           ("tests/test_compile.py",), "a tensor made in the call is one object across replays"),
    Mutant("compile-checks-not-replayed", "leanpass/_compile.py",
           "                event[1](*[get(src) for src in event[2]])", "                pass",
           ("tests/test_compile.py",), "class indices out of range pass silently in a replay"),
    Mutant("complex-leaf-not-noted", "leanpass/_node.py",
           "    if requires_grad and name.startswith(\"complex\"):\n        note_complex()",
           "    if False:\n        note_complex()", ("tests/test_complex_autodiff.py",),
           "a complex leaf's graph run by the real rules: conjugates missing, silently"),
    Mutant("irfft-bins-not-doubled", "leanpass/ops/fft.py", "        h = h * double\n", "        h = h\n",
           ("tests/test_fft.py",)),
    Mutant("seed-kept-as-grad", "leanpass/_graph/engine.py",
           "leaves[root] = (g, False) if old is None", "leaves[root] = (g, True) if old is None",
           ("tests/test_autograd.py",), "x.backward(g) on a leaf: x.grad is the caller's g"),
    Mutant("latest-change-not-noted", "leanpass/_graph/versions.py",
           "self.changed = self.last = latest_change[0] = now = next(sequence)",
           "self.changed = self.last = now = next(sequence)", ("tests/test_inplace.py", "tests/test_saved_values.py")),
    Mutant("blas-axpy-wrong-sign", "leanpass/backends/_blas.py",
           "out = routine(x.reshape(-1), flat, a=a)", "out = routine(x.reshape(-1), flat, a=-a)",
           ("tests/test_blas.py",)),
    Mutant("blas-axpy-strided-y", "leanpass/backends/_blas.py",
           "not (fx.c_contiguous and fy.c_contiguous and fx.aligned", "not (fx.c_contiguous and fx.aligned",
           ("tests/test_blas.py",)),
    Mutant("blas-axpy-zero-alpha", "leanpass/backends/_blas.py",
           "or y.dtype not in _ZERO_BELOW or abs(a) <= _ZERO_BELOW[y.dtype]):", "or y.dtype not in _ZERO_BELOW):",
           ("tests/test_blas.py",)),
    Mutant("blas-axpy-no-length-limit", "leanpass/backends/_blas.py",
           "if (routine is None or y.size > LARGEST\n", "if (routine is None\n", ("tests/test_blas.py",)),
    Mutant("blas-axpy-overlap-allowed", "leanpass/backends/_blas.py",
           "or np.may_share_memory(x, y)):", "or False):", ("tests/test_blas.py",)),
    # ---- PyTorch's activations, losses, GroupNorm, padding (issue 28, item 3) ------------------
    Mutant("hardtanh-passes-at-its-bounds", "leanpass/ops/activations.py",
           "    blocked = (a <= min_val) | (a >= max_val)", "    blocked = (a < min_val) | (a > max_val)",
           ("tests/test_activations_torch.py",), "PyTorch's hardtanh passes 0 at exactly min_val and max_val"),
    Mutant("cross-entropy-mean-counts-ignored-targets", "leanpass/nn/losses.py",
           "        loss = loss.mean() if total is None else _ratio(loss.sum(), total)",
           "        loss = loss.mean()", ("tests/test_losses_torch.py",),
           "'mean' divides by the weights of the targets that count, not by every target"),
    Mutant("group-norm-grad-drops-the-variance-term", "leanpass/ops/norm.py",
           "            coef = -m2 * inv3 * inv3  #", "            coef = 0 * m2 * inv3  #",
           ("tests/test_groupnorm_upsample.py",),
           "the input's gradient through the group's variance"),
    Mutant("reflect-pad-repeats-the-edge", "leanpass/nn/padding.py",
           "        return xp.where(j > n - 1, 2 * (n - 1) - j, j)",
           "        return xp.where(j > n - 1, 2 * n - 1 - j, j)", ("tests/test_groupnorm_upsample.py",),
           "reflect mirrors about the edge value (symmetric padding repeats it)"),
    # ---- recurrent layers and transposed convolutions ---------------------------------------------
    Mutant("lstm-forget-gate-derivative-sign", "leanpass/ops/rnn.py", "(dc * c_prev) * (f - f * f)",
           "(dc * c_prev) * (f + f * f)", ("tests/test_rnn.py",),
           "BPTT through the forget gate: the sigmoid's derivative is f (1 - f)"),
    Mutant("rnn-reverse-direction-last-state", "leanpass/nn/rnn.py", "last = 0 if direction else steps - 1",
           "last = steps - 1", ("tests/test_rnn.py",),
           "the reverse direction ends at time 0: h_n[..._reverse] is its output at t = 0"),
    Mutant("conv-transpose-output-padding-ignored", "leanpass/ops/conv.py",
           "    padded = tuple((m - 1) * s + d * (kk - 1) + 1 + extra\n",
           "    padded = tuple((m - 1) * s + d * (kk - 1) + 1 + 0 * extra\n", ("tests/test_conv_transpose.py",),
           "output_padding adds entries after the last of each axis (they get only the bias)"),
    Mutant("conv-transpose-scatter-band-start", "leanpass/backends/_numba.py",
           "\n                    y = (start + b) * s0 - p0 + k0 * d0",
           "\n                    y = b * s0 - p0 + k0 * d0",
           ("tests/test_fused.py",), "each band of the forward's product adds into its own output rows"),
    Mutant("conv-transpose-patches-outside-not-zero", "leanpass/backends/_numba.py",
           "out[b, j, n, k0, k1, c] = 0", "out[b, j, n, k0, k1, c] = 1", ("tests/test_fused.py",),
           "the gradient's patches are zero outside the gradient (the output's padding)"),
    Mutant("replay-inplace-in-grad-mode", "leanpass/_compile.py",
           "with no_grad():  # as recorded: under no_grad, or with nothing that requires grad",
           "if True:  # as recorded: under no_grad, or with nothing that requires grad", ("tests/test_compile.py",),
           "a parameter changed in place under no_grad: a replay changes it under no_grad too"),
    Mutant("randint-drawn-outside-the-trace", "leanpass/_namespace/torch_names.py",
           "return requiring_grad(leaf(draw(fn, backend, *params), backend), requires_grad, op)",
           "return requiring_grad(leaf(fn(backend, *params), backend), requires_grad, op)", ("tests/test_compile.py",),
           "rand, randint, randperm: a draw a compiled call makes again at each replay"),
    Mutant("compiled-grad-merges-leaves-on-one-array", "leanpass/func.py",
           "    trace.new_leaf(t)  # a compiled call", "    0 and trace.new_leaf(t)  # a compiled call",
           ("tests/test_compile.py",), "lp.func.grad's inputs: each a value of its own in a trace"),
    Mutant("compiled-grad-misses-an-intermediate", "leanpass/_compile.py",
           "                    found.update((k, g) for k in wanted[slot])", "                    pass",
           ("tests/test_compile.py",), "autograd.grad for a tensor inside the graph: its gradient when complete"),
    Mutant("in-place-method-reads-the-changed-input", "leanpass/_namespace/methods.py",
           "return t.clone() if isinstance(t, Tensor) and t.requires_grad and is_grad_enabled() else t",
           "return t", ("tests/test_torch_names.py",), "t.abs_() in a graph: abs's rule reads the value before"),
    Mutant("in-place-method-casts-floats-into-integers", "leanpass/_namespace/methods.py",
           "if _kind(result.dtype) > _kind(self.dtype):", "if False:", ("tests/test_torch_names.py",),
           "t.sqrt_() of an integer tensor: a TypeError, as PyTorch's"),
    Mutant("replay-keeps-every-value", "leanpass/_compile.py",
           "for slot in free.get(i, ()):", "for slot in ():", ("tests/test_compile.py",),
           "a replay drops each value after its last use: its peak memory is at most eager's"),
    Mutant("encoder-layer-norm-after-the-sum-dropped", "leanpass/nn/transformer.py",
           "if self.norm_first else norm(x + block(x))", "if self.norm_first else x + block(x)",
           ("tests/test_transformer_layers.py",), "a post-norm layer: LayerNorm after each residual sum"),
    Mutant("decoder-attends-to-itself-not-memory", "leanpass/nn/transformer.py",
           "self.multihead_attn, self.dropout2, x, memory,", "self.multihead_attn, self.dropout2, x, x,",
           ("tests/test_transformer_layers.py",), "a decoder layer's second attention reads the encoder's output"),
    Mutant("fusion-swallows-a-gradient-target", "leanpass/_fusion.py",
           "        if slot in targets:\n", "        if slot in ():\n", ("tests/test_fusion.py",),
           "a value autograd.grad is asked the gradient of stays an operation of its own"),
    Mutant("cuda-kernel-maximum-drops-nan", "leanpass/backends/cupy_backend.py",
           '"maximum": "({0} > {1} || {0} != {0}) ? {0} : {1}"', '"maximum": "{0} > {1} ? {0} : {1}"',
           ("tests/test_kernel_texts.py",), "a generated CUDA kernel's maximum: NaN propagates, as NumPy's"),
    Mutant("cuda-kernel-constant-left-double", "leanpass/backends/cupy_backend.py",
           'return f"((T){value!r})"', 'return f"({value!r})"',
           ("tests/test_kernel_texts.py",), "a generated CUDA kernel's constants: cast to T, as NumPy's weak scalars"),
    Mutant("numba-long-runs-of-tanh", "leanpass/backends/_numba.py",
           '"scalar_calls": True', '"scalar_calls": False',
           ("tests/test_kernel_texts.py",), "no long run of tanh on cpu (Numba calls it one element at a time)"),
    Mutant("fusion-flat-neg-drops-sign", "leanpass/_fusion.py",
           '_FLAT = {"neg": "-{0}",', '_FLAT = {"neg": "{0}",', ("tests/test_fusion.py",),
           "a fused program's negation (flat: the backend's own operator)"),
    Mutant("fusion-kernel-where-branches-swapped", "leanpass/backends/_numba.py",
           '"where": "{1} if {0} else {2}"', '"where": "{2} if {0} else {1}"',
           ("tests/test_fusion.py",), "a compiled loop's where: the first value where the condition holds"),
    Mutant("fusion-run-hands-out-too-little", "leanpass/_fusion.py",
           "if last_read.get(slot, -1) >= run.stop", "if last_read.get(slot, -1) > run.stop",
           ("tests/test_fusion.py",), "a run keeps every value an event after it reads, the next one included"),
    Mutant("fusion-liveness-ignores-runs", "leanpass/_compile.py",
           '            elif kind == "fused":\n                for kind_, ref in event[2]:\n'
           '                    if kind_ == VAL:\n                        last[ref] = i',
           '            elif kind == "fused":\n                pass', ("tests/test_fusion.py",),
           "a replay keeps the values a fused run reads until it runs"),
    Mutant("fusion-admits-broadcasting", "leanpass/_fusion.py",
           "if meta(src) != (self.shape, self.dtype):", "if meta(src)[1] != self.dtype:",
           ("tests/test_fusion.py",), "a run's inputs have its shape: no gradient is summed back to a smaller one"),
    Mutant("cpu-adam-kernel-moment-sign", "leanpass/backends/_numba.py",
           "mk = m[k] + one_minus_b1 * (g - m[k])", "mk = m[k] + one_minus_b1 * (m[k] - g)",
           ("tests/test_fused.py",), "Adam's first moment moves toward the gradient (PyTorch's lerp)"),
    Mutant("cpu-momentum-kernel-drops-nesterov", "leanpass/backends/_numba.py",
           "(g + momentum * b if nesterov else b)", "(b)",
           ("tests/test_fused.py",), "Nesterov's step looks ahead along the momentum"),
]


def copy_repo(dest: Path) -> None:
    ignore = shutil.ignore_patterns(".git", ".venv", ".nox", "__pycache__", "*.egg-info", ".pytest_cache",
                                    ".hypothesis", "build", "dist")
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)


def run_tests(where: Path, tests, timeout: float) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "not cuda",
           "--no-header", "-o", "addopts=", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start
    seconds = time.perf_counter() - start
    return {0: "survived", 1: "caught"}.get(proc.returncode, f"error (pytest exit {proc.returncode})"), seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="run only these mutants")
    p.add_argument("--list", action="store_true", help="list the mutants and stop")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mutant")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--no-baseline", action="store_true", help="skip the runs of the unchanged copy")
    args = p.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.only and len(mutants) != len(set(args.only)):
        known = {m.name for m in MUTANTS}
        p.error(f"unknown mutants: {sorted(set(args.only) - known)}")
    if args.list:
        for m in mutants:
            print(f"{m.name:28s} {m.file:32s} {' '.join(m.tests)}")
        return 0
    stale = []
    for m in mutants:
        count = (ROOT / m.file).read_text().count(m.old)
        if count != 1:
            stale.append(f"{m.name}: the text to mutate occurs {count} times in {m.file}")
    if stale:
        print("STALE mutants (update them to the code):\n  " + "\n  ".join(stale))
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="leanpass-mutants-") as tmp:
        where = Path(tmp)
        copy_repo(where)
        if not args.no_baseline:
            for tests in sorted({m.tests for m in mutants}):
                outcome, seconds = run_tests(where, tests, args.timeout)
                print(f"{'baseline':28s} {'passed' if outcome == 'survived' else outcome:10s} {seconds:6.1f} s  "
                      f"{' '.join(tests)}", flush=True)
                if outcome != "survived":
                    print("the unchanged code fails these tests: fix that first")
                    return 2
        for m in mutants:
            path = where / m.file
            original = path.read_text()
            path.write_text(original.replace(m.old, m.new, 1))
            try:
                outcome, seconds = run_tests(where, m.tests, args.timeout)
            finally:
                path.write_text(original)
            results.append({"name": m.name, "file": m.file, "outcome": outcome, "seconds": round(seconds, 1)})
            print(f"{m.name:28s} {outcome:10s} {seconds:6.1f} s", flush=True)
    caught = sum(r["outcome"] == "caught" for r in results)
    survived = [r["name"] for r in results if r["outcome"] == "survived"]
    other = [r for r in results if r["outcome"] not in ("caught", "survived")]
    judged = caught + len(survived)
    score = caught / judged if judged else 0.0
    tail = f"; survived: {', '.join(survived)}" if survived else ""
    print(f"\ncaught {caught} of {judged} mutants ({score:.0%}){tail}")
    for r in other:
        print(f"  {r['name']}: {r['outcome']} (not counted)")
    if args.json:
        Path(args.json).write_text(json.dumps({"score": score, "results": results}, indent=1))
    return 0 if not other else 1


if __name__ == "__main__":
    sys.exit(main())
