"""LeanPass against its peers on the CPU, side by side in one process.

    python benchmarks/run.py                 # everything, 1 and 2 BLAS threads
    python benchmarks/run.py --only W1 W2 --rounds 15 --json results.json
    python benchmarks/run.py --only W1 --rounds 21 --processes 7   # W1 over 7 fresh processes

Contestants run interleaved, round by round, so drifts in the machine's speed
hit all of them alike; each figure is a median over rounds, and each ratio is
to the table's first column.

- W1: one training step of an MLP 784-256-128-10, batch 128, cross-entropy and
  SGD, float32 and float64: NumPy by hand (the floor), LeanPass, PyTorch.
  Also minor page faults per step. With ``--processes N`` it runs in N fresh
  processes one after another and reports the median of their figures and the
  range of their ratios: the ratio moves by several percent from one process to
  the next (at two threads, two instances of the by-hand step in one process
  differ by up to 7%), more than between the rounds of one process.
- W2: a chain of 300 element-wise operations on a 16-element float64 tensor,
  forward plus backward: microseconds per operation (NumPy: forward only).
- W3: backward through a 100,000-operation chain: its time against the
  forward's, and the peak memory (tracemalloc) of forward plus backward.
- W4: peak memory (tracemalloc) of one W1 step, LeanPass against NumPy by hand.
- W7: a Hessian-vector product of the mean cross-entropy loss of an MLP
  784-256-128-10 with tanh hidden layers (batch 128, float32 and float64) as a
  function of its six weight and bias tensors, the forward included: PyTorch's
  torch.func ``jvp(grad(f), (params,), (v,))`` (forward-over-reverse, the
  reference), PyTorch's reverse-over-reverse (``torch.autograd.grad`` with
  ``create_graph=True``, then again along v) and ``leanpass.hvp``
  (reverse-over-reverse). tanh, not ReLU: ReLU's second derivative is 0 almost
  everywhere, so with ReLU the Hessian's activation terms vanish and an HVP
  could skip most of its work. Also one plain first-order gradient (forward
  plus ``autograd.grad``) of the same loss per framework, for the HVP / grad
  cost ratio. Before timing, the HVPs must agree with the reference
  (rtol 1e-6 in float64, 1e-3 in float32, relative to each tensor's largest
  entry where entries are near 0) or it raises.
- W5: one Conv2d forward plus backward (weight and bias gradients; the input is
  data), batch 64, 1x28x28 -> 32 channels, 3x3, float32 and float64: LeanPass
  against PyTorch; also 32 -> 64 channels at 14x14 (W5b), to see that the
  one-channel case is not the only fast one. Before timing, the outputs and
  gradients must agree (rtol 1e-4 in float32, 1e-10 in float64) or it raises.
- W5c: one training step of benchmarks/models.py's CNN (two 3x3 conv + BatchNorm +
  ReLU blocks, a 2x2 max-pool, global average pool, Linear) on a (64, 1, 28, 28)
  batch: forward, cross-entropy, backward, SGD; PyTorch's initial weights loaded
  into LeanPass, and the first step's losses must agree (same tolerances).
- W6: one transformer block's forward plus backward (the gradients of its input
  and of all its parameters): GPT-2's pre-LayerNorm block with causal
  ``MultiheadAttention`` (4 heads) and a 4x GELU MLP, batch 16, sequence 128,
  width 128, float32 and float64 (``benchmarks/models.py``), LeanPass with
  PyTorch's weights against PyTorch. Before timing, the outputs and input
  gradients must agree as in W5 or it raises.
- W6a: W6 and then an ``AdamW`` step (lr 1e-3, weight decay 0.01; PyTorch's default
  implementation), issue 29's W6 target (forward, backward and AdamW). Every framework
  takes the same three steps first, so that the checked step starts from the same
  parameters and moments. Not in the default set: ``--only W6a``.

- W8: one GroupNorm layer's forward plus backward (the gradients of its input, weight
  and bias), 8 groups of a (32, 64, 32, 32) input, float32 and float64: LeanPass
  with PyTorch's weights against PyTorch. Before timing, the outputs and gradients
  must agree as in W5 or it raises.
- W9, W9b: a 2-layer, 256-wide LSTM (W9) or GRU (W9b) over 50 steps of a batch of
  64 (``(50, 64, 256)``, time first), forward plus backward (the gradients of the
  input and of every parameter, the output's gradient given), float32 and float64:
  LeanPass with PyTorch's initial weights against PyTorch. Checked as W5 first.
  Not in the default set (about a minute each): ``--only W9 W9b``.
- W10: one ConvTranspose2d forward plus backward (input, weight and bias gradients),
  (16, 64, 16, 16) -> 32 channels, 4x4 kernel, stride 2, padding 1 (a decoder's 2x
  upsampling), float32 and float64, PyTorch's weights. Checked as W5 first.

Thread pools (OpenBLAS, PyTorch's OpenMP) are limited with threadpoolctl and
torch.set_num_threads for every contestant alike: pools that spin after a call
steal the next contestant's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

# OpenMP pools (PyTorch's) sleep instead of spinning after a call, so the next
# contestant gets the cores; must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from models import transformer_block  # noqa: E402
from steps import CompiledLeanPassStep, HandStep, LeanPassStep, TorchStep, make_problem, model_steps  # noqa: E402

import leanpass  # noqa: E402
from leanpass import Tensor  # noqa: E402

try:
    import torch
except ImportError:  # PyTorch is optional: its columns are left out
    torch = None


@contextlib.contextmanager
def threads(n):
    """Limit BLAS/OpenMP pools (NumPy's and PyTorch's) to n threads."""
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads() if torch else None
    if torch:
        torch.set_num_threads(n)
    with threadpool_limits(limits=n):
        yield
    if torch:
        torch.set_num_threads(old)


def interleaved(contestants: dict, rounds: int, repeat: int) -> dict:
    """Median seconds per call of each contestant, measured round-robin; the order
    rotates each round so that no contestant always runs after the same one."""
    times = {name: [] for name in contestants}
    for fn in contestants.values():  # warm up
        fn()
    order = list(contestants.items())
    for r in range(rounds):
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            start = time.perf_counter()
            for _ in range(repeat):
                fn()
            times[name].append((time.perf_counter() - start) / repeat)
    return {name: statistics.median(t) for name, t in times.items()}


def minor_faults(fn, repeat=20) -> float:
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeat):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / repeat


def peak_bytes(fn) -> int:
    """Peak traced memory of one call (after a warm-up call)."""
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- W1 and W4: an MLP training step ------------------------------------------------

SIZES, BATCH = [784, 256, 128, 10], 128


def step_fn(step):
    def run():
        step()
        step.sync()

    return run


def w1(dtype, rounds, n_threads):
    classes = [HandStep, LeanPassStep, CompiledLeanPassStep] + ([TorchStep] if torch else [])
    with threads(n_threads):
        steps = {cls.name: cls(SIZES, BATCH, dtype=dtype) for cls in classes}
        fns = {name: step_fn(s) for name, s in steps.items()}
        medians = interleaved(fns, rounds, repeat=10)
        faults = {name: minor_faults(fn) for name, fn in fns.items()}
    return {name: {"ms": medians[name] * 1e3, "faults": faults[name]} for name in fns}


def w1_processes(args) -> list:
    """W1 run in ``args.processes`` fresh interpreters, one after another: a list of
    their W1 results. What a process draws (where its arrays and threads land)
    moves the ratio by several percent, more than the rounds inside one run do."""
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.processes):
            out = os.path.join(folder, f"w1-{i}.json")
            command = [sys.executable, os.path.abspath(__file__), "--only", "W1", "--rounds", str(args.rounds),
                       "--threads", *map(str, args.threads), "--json", out]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs.append(json.load(f)["W1"])
    return runs


def w4(rounds):
    out = {}
    for dtype in ("float32", "float64"):
        steps = {cls.name: step_fn(cls(SIZES, BATCH, dtype=dtype)) for cls in (HandStep, LeanPassStep)}
        with threads(1):
            out[dtype] = {name: peak_bytes(fn) for name, fn in steps.items()}
    return out


# ---- W2: a chain of small element-wise operations ---------------------------------------

CHAIN, ELEMENTS = 300, 16


def chain_leanpass(x0):
    def run():
        x = Tensor(x0, requires_grad=True)
        y = x
        for _ in range(CHAIN // 4):
            y = (y * x).tanh() * 0.5 + 0.25  # four operations
        y.sum().backward()

    return run


def chain_compiled(x0):
    """:func:`chain_leanpass` through ``leanpass.compile`` (traced once, then replayed)."""
    def chain(x):
        y = x
        for _ in range(CHAIN // 4):
            y = (y * x).tanh() * 0.5 + 0.25
        y.sum().backward()

    compiled = leanpass.compile(chain)

    def run():
        compiled(Tensor(x0, requires_grad=True))

    return run


def chain_torch(x0):
    t0 = torch.tensor(x0)

    def run():
        x = t0.clone().requires_grad_(True)
        y = x
        for _ in range(CHAIN // 4):
            y = (y * x).tanh() * 0.5 + 0.25
        y.sum().backward()

    return run


def chain_numpy(x0):
    def run():
        x = x0.copy()
        y = x
        for _ in range(CHAIN // 4):
            y = np.tanh(y * x) * 0.5 + 0.25

    return run


def w2(rounds, n_threads):
    x0 = np.random.default_rng(0).uniform(0.1, 0.9, size=ELEMENTS)
    fns = {}
    if torch:
        fns["pytorch"] = chain_torch(x0)
    fns["leanpass"] = chain_leanpass(x0)
    fns["leanpass compiled"] = chain_compiled(x0)
    fns["numpy (forward only)"] = chain_numpy(x0)
    with threads(n_threads):
        medians = interleaved(fns, rounds, repeat=20)
    return {name: t / CHAIN * 1e6 for name, t in medians.items()}


# ---- W3: a 100,000-operation chain ------------------------------------------------------

def w3(rounds):
    depth = 100_000

    def forward():
        x = Tensor(np.ones(4), requires_grad=True)
        y = x
        for _ in range(depth // 2):
            y = y * 1.0
            y = y + 0.0
        return y.sum()

    fwd, bwd = [], []
    for _ in range(max(3, rounds // 3)):
        gc.collect()
        start = time.perf_counter()
        root = forward()
        middle = time.perf_counter()
        root.backward()
        end = time.perf_counter()
        fwd.append(middle - start)
        bwd.append(end - middle)
        del root
    peak = peak_bytes(lambda: forward().backward())
    f, b = statistics.median(fwd), statistics.median(bwd)
    return {"forward_s": f, "backward_s": b, "ratio": b / f, "peak_bytes": peak}


# ---- W5: a convolution layer's forward and backward -------------------------------------

CONV_CASES = {"W5": (64, 1, 28, 32), "W5b": (64, 32, 14, 64)}  # batch, in channels, size, out channels
CONV_RTOL = {"float32": 1e-4, "float64": 1e-10}


def conv_step(case, dtype, framework):
    """One forward plus backward of a 3x3 Conv2d with the gradient of the output
    given: returns the step and a function giving (output, weight grad, bias grad)."""
    batch, cin, size, cout = CONV_CASES[case]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, cin, size, size)).astype(dtype)
    g = rng.normal(size=(batch, cout, size - 2, size - 2)).astype(dtype)
    w = (rng.uniform(-1, 1, size=(cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(dtype)
    b = rng.uniform(-0.1, 0.1, size=cout).astype(dtype)
    if framework == "pytorch":
        layer = torch.nn.Conv2d(cin, cout, 3, dtype=getattr(torch, dtype))
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(w))
            layer.bias.copy_(torch.tensor(b))
        x, g = torch.tensor(x), torch.tensor(g)
    else:
        layer = leanpass.nn.Conv2d(cin, cout, 3, dtype=dtype)
        layer.load_state_dict({"weight": w, "bias": b}, layout="torch")
        x, g = Tensor(x), Tensor(g)
    out = []

    def step():
        layer.weight.grad = layer.bias.grad = None
        y = layer(x)
        y.backward(g)
        out[:] = [y]

    def result():
        step()
        return [np.asarray(t.detach().numpy() if framework == "pytorch" else t.data)
                for t in (out[0], layer.weight.grad, layer.bias.grad)]

    return step, result


def compared(make, case, dtype, rounds, n_threads, repeat=5, compiled=False):
    """Milliseconds per step of PyTorch's (when installed) and LeanPass's ``make(framework)``
    = (step, result), interleaved (``repeat`` steps per round), after checking that
    their results agree; with ``compiled``, also ``make("leanpass compiled")``'s."""
    names = (["pytorch"] if torch else []) + ["leanpass"] + ["leanpass compiled"] * compiled
    with threads(n_threads):
        steps = {name: make(name) for name in names}
        if torch:
            reference = steps["pytorch"][1]()  # once: a step with an optimizer changes the state it starts from
            for name in names[1:]:
                for got, ref in zip(steps[name][1](), reference):
                    if not np.allclose(got, ref, rtol=CONV_RTOL[dtype], atol=CONV_RTOL[dtype] * np.abs(ref).max()):
                        error = np.abs(got - ref).max()
                        raise RuntimeError(f"{case}: {name} disagrees with pytorch, max error {error}")
        medians = interleaved({name: s[0] for name, s in steps.items()}, rounds, repeat=repeat)
    return {name: t * 1e3 for name, t in medians.items()}


def w5(case, dtype, rounds, n_threads):
    return compared(lambda name: conv_step(case, dtype, name), case, dtype, rounds, n_threads)


# ---- W6: a transformer block's forward and backward -------------------------------------

BLOCK = (16, 128, 128, 4)  # batch, sequence, width, heads


def block_step(dtype, framework, adamw=False):
    """One forward plus backward of :func:`models.transformer_block` with the gradient
    of its output given, PyTorch's weights (seed 0) in both frameworks (then, with
    ``adamw``, an ``AdamW`` step): returns the step and a function giving (output,
    input gradient)."""
    batch, length, width, heads = BLOCK
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, length, width)).astype(dtype)
    g = rng.normal(size=(batch, length, width)).astype(dtype)
    above = np.triu(np.ones((length, length), dtype=bool), 1)  # where a position may not look
    torch.manual_seed(0)
    reference = transformer_block(torch.nn, width, heads, dtype=getattr(torch, dtype))
    if framework == "pytorch":
        block, x, g, mask = reference, torch.tensor(x, requires_grad=True), torch.tensor(g), torch.tensor(above)
    else:  # "leanpass", "leanpass compiled"
        block = transformer_block(leanpass.nn, width, heads, dtype=dtype)
        block.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()}, layout="torch")
        x, g, mask = Tensor(x, requires_grad=True), Tensor(g), leanpass.asarray(above)
    params = list(block.parameters())
    opt = None
    if adamw:
        optim = torch.optim if framework == "pytorch" else leanpass.optim
        opt = optim.AdamW(params, lr=1e-3, weight_decay=0.01)

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        y = block(x, mask)
        y.backward(g)
        if opt is not None:
            opt.step()
        return y

    if framework == "leanpass compiled":
        step = leanpass.compile(step)
    if framework == "leanpass compiled" or adamw:
        for _ in range(3):  # traced, replayed, its fused runs compiled (all frameworks alike with AdamW)
            step()

    def result():
        out = step()
        return [np.asarray(t.detach().numpy() if framework == "pytorch" else t.data) for t in (out, x.grad)]

    return step, result


def w6(dtype, rounds, n_threads, adamw=False):
    return compared(lambda name: block_step(dtype, name, adamw), "W6a" if adamw else "W6", dtype, rounds,
                    n_threads, compiled=True)


# ---- W8: a GroupNorm layer's forward and backward ------------------------------------------

GROUP_NORM = (32, 64, 32, 32, 8)  # batch, channels, height, width, groups


def groupnorm_step(dtype, framework):
    """One forward plus backward of a GroupNorm layer with the gradient of its output
    given, the same weights in both frameworks: returns the step and a function giving
    (output, input gradient, weight gradient, bias gradient)."""
    batch, channels, height, width, groups = GROUP_NORM
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, channels, height, width)).astype(dtype)
    g = rng.normal(size=x.shape).astype(dtype)
    state = {"weight": rng.normal(size=channels).astype(dtype), "bias": rng.normal(size=channels).astype(dtype)}
    if framework == "pytorch":
        layer = torch.nn.GroupNorm(groups, channels, dtype=getattr(torch, dtype))
        layer.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        x, g = torch.tensor(x, requires_grad=True), torch.tensor(g)
    else:
        layer = leanpass.nn.GroupNorm(groups, channels, dtype=dtype)
        layer.load_state_dict(state)
        x, g = Tensor(x, requires_grad=True), Tensor(g)
    out = []

    def step():
        x.grad = layer.weight.grad = layer.bias.grad = None
        y = layer(x)
        y.backward(g)
        out[:] = [y]

    def result():
        step()
        return [np.asarray(t.detach().numpy() if framework == "pytorch" else t.data)
                for t in (out[0], x.grad, layer.weight.grad, layer.bias.grad)]

    return step, result


def w8(dtype, rounds, n_threads):
    return compared(lambda name: groupnorm_step(dtype, name), "W8", dtype, rounds, n_threads)


def w5c(dtype, rounds, n_threads):
    """ms per training step of ``benchmarks/models.py``'s CNN (``steps.model_steps``),
    after checking that the first step's losses agree."""
    with threads(n_threads):
        steps = model_steps("cnn", 64, dtype=dtype, width=32, compiled=True)
        losses = {name: step.loss_value(step()) for name, step in steps.items()}
        for name in ("leanpass", "leanpass compiled"):  # (the compiled one has taken three steps more)
            if name == "leanpass" and not np.isclose(losses[name], losses["pytorch"], rtol=CONV_RTOL[dtype]):
                raise RuntimeError(f"W5c: {name}'s loss {losses[name]} is not pytorch's {losses['pytorch']}")
        medians = interleaved(steps, rounds, repeat=3)
    return {name: t * 1e3 for name, t in medians.items()}


# ---- W7: a Hessian-vector product of an MLP loss ----------------------------------------

HVP_RTOL = {"float64": 1e-6, "float32": 1e-3}


def mlp_loss(xp, x, labels, cross_entropy):
    """The mean cross-entropy of an MLP with tanh hidden layers, as a function of its
    weights and biases (w1, b1, w2, b2, ...; w of shape (fan_in, fan_out))."""

    def loss(*params):
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i < len(params) - 2:
                h = xp.tanh(h)
        return cross_entropy(h, labels)

    return loss


def hvp_problem(dtype, seed=0):
    """Data, weights and a tangent (one array per weight), as host arrays of ``dtype``."""
    x, labels, weights = make_problem(SIZES, BATCH, seed)
    params = [a.astype(dtype) for pair in weights for a in pair]
    rng = np.random.default_rng(seed + 1)
    tangents = [rng.normal(size=a.shape).astype(dtype) for a in params]
    return x.astype(dtype), labels, params, tangents


def hvp_leanpass(x, labels, params, tangents):
    """Two calls: the HVPs by ``leanpass.hvp`` (it also returns the value), and the plain gradient."""
    from leanpass import autograd, nn

    f = mlp_loss(leanpass, Tensor(x), leanpass.asarray(labels), nn.cross_entropy_loss)
    primals = tuple(Tensor(a) for a in params)
    vs = tuple(Tensor(a) for a in tangents)
    leaves = [Tensor(a, requires_grad=True) for a in params]
    return (lambda: leanpass.hvp(f, primals, vs)[1]), (lambda: autograd.grad(f(*leaves), leaves))


def hvp_torch(x, labels, params, tangents):
    """Three calls: the HVPs by torch.func (``jvp(grad(f))``), by reverse-over-reverse,
    and the plain gradient."""
    from torch.func import grad, jvp

    f = mlp_loss(torch, torch.tensor(x), torch.tensor(labels), torch.nn.functional.cross_entropy)
    primals = tuple(torch.tensor(a) for a in params)
    vs = tuple(torch.tensor(a) for a in tangents)
    leaves = [torch.tensor(a, requires_grad=True) for a in params]
    gradient = grad(lambda ps: f(*ps))

    def twice():
        g = torch.autograd.grad(f(*leaves), leaves, create_graph=True)
        return torch.autograd.grad(g, leaves, vs)

    return (lambda: jvp(gradient, (primals,), (vs,))[1]), twice, lambda: torch.autograd.grad(f(*leaves), leaves)


def check_hvps(name, got, reference, rtol):
    """Raise ``RuntimeError`` unless the HVPs ``got`` agree with ``reference``: within
    ``rtol``, relative to each entry and to its tensor's largest entry."""
    if len(got) != len(reference):
        raise RuntimeError(f"W7: {name} gave {len(got)} HVPs, the reference {len(reference)}")
    for i, (g, r) in enumerate(zip(got, reference)):
        g, r = np.asarray(g), np.asarray(r)
        if g.shape != r.shape or not np.allclose(g, r, rtol=rtol, atol=rtol * float(np.abs(r).max())):
            error = np.abs(g - r).max() if g.shape == r.shape else f"shape {g.shape} against {r.shape}"
            raise RuntimeError(f"W7: {name} disagrees with the reference on HVP {i}: max error {error}, rtol {rtol}")


def w7(dtype, rounds, n_threads):
    problem = hvp_problem(dtype)
    lp_hvp, lp_grad = hvp_leanpass(*problem)
    hvps, grads = {}, {}
    if torch:
        func, twice, torch_grad = hvp_torch(*problem)
        hvps["pytorch"], hvps["pytorch double backward"], grads["pytorch"] = func, twice, torch_grad
    hvps["leanpass"], grads["leanpass"] = lp_hvp, lp_grad
    with threads(n_threads):
        reference = next(iter(hvps.values()))()  # the check runs once, outside timing
        for name, fn in list(hvps.items())[1:]:
            check_hvps(name, fn(), reference, HVP_RTOL[dtype])
        fns = {**{f"hvp {k}": v for k, v in hvps.items()}, **{f"grad {k}": v for k, v in grads.items()}}
        medians = interleaved(fns, rounds, repeat=2)
    return {"hvp_ms": {k: medians[f"hvp {k}"] * 1e3 for k in hvps},
            "grad_ms": {k: medians[f"grad {k}"] * 1e3 for k in grads}}


# ---- W9, W9b, W10: recurrent layers and a transposed convolution ---------------------------

RECURRENT = (50, 64, 256, 2)  # steps, batch, width (input and hidden), layers
CONV_TRANSPOSE = (16, 64, 16, 32)  # batch, in channels, size, out channels (4x4 kernel, stride 2, padding 1)


def _values(framework, tensors) -> list:
    """Host copies of Tensors (or torch tensors) and of LeanPass's gradient arrays."""
    if framework == "pytorch":
        return [t.detach().numpy() for t in tensors]
    return [t.numpy() if isinstance(t, Tensor) else np.asarray(t) for t in tensors]


def recurrent_step(kind, dtype, framework, sizes=RECURRENT):
    """One forward plus backward of ``torch.nn.<kind>`` (``"LSTM"``, ``"GRU"``) or
    LeanPass's namesake over a ``(steps, batch, width)`` sequence with the output's
    gradient given, PyTorch's initial weights (seed 0) in both: returns the step and a
    function giving (output, input gradient, every parameter's gradient)."""
    steps, batch, width, layers = sizes
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps, batch, width)).astype(dtype)
    g = rng.normal(size=(steps, batch, width)).astype(dtype)
    torch.manual_seed(0)
    reference = getattr(torch.nn, kind)(width, width, num_layers=layers, dtype=getattr(torch, dtype))
    if framework == "pytorch":
        layer, x, g = reference, torch.tensor(x, requires_grad=True), torch.tensor(g)
    else:
        layer = getattr(leanpass.nn, kind)(width, width, num_layers=layers, dtype=dtype)
        layer.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
        x, g = Tensor(x, requires_grad=True), Tensor(g)
    params = list(layer.parameters())
    out = []

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        y = layer(x)[0]
        y.backward(g)
        out[:] = [y]

    def result():
        step()
        return _values(framework, [out[0], x.grad, *(p.grad for p in params)])

    return step, result


def conv_transpose_step(dtype, framework, sizes=CONV_TRANSPOSE):
    """One forward plus backward of a ConvTranspose2d (4x4, stride 2, padding 1) with the
    output's gradient given, PyTorch's initial weights: returns the step and a function
    giving (output, input gradient, weight gradient, bias gradient)."""
    batch, cin, size, cout = sizes
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, cin, size, size)).astype(dtype)
    g = rng.normal(size=(batch, cout, 2 * size, 2 * size)).astype(dtype)
    torch.manual_seed(0)
    reference = torch.nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, dtype=getattr(torch, dtype))
    if framework == "pytorch":
        layer, x, g = reference, torch.tensor(x, requires_grad=True), torch.tensor(g)
    else:
        layer = leanpass.nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1, dtype=dtype)
        layer.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
        x, g = Tensor(x, requires_grad=True), Tensor(g)
    out = []

    def step():
        x.grad = layer.weight.grad = layer.bias.grad = None
        y = layer(x)
        y.backward(g)
        out[:] = [y]

    def result():
        step()
        return _values(framework, [out[0], x.grad, layer.weight.grad, layer.bias.grad])

    return step, result


def w9(kind, dtype, rounds, n_threads):
    case = "W9" if kind == "LSTM" else "W9b"
    return compared(lambda name: recurrent_step(kind, dtype, name), case, dtype, rounds, n_threads, repeat=1)


def w10(dtype, rounds, n_threads):
    return compared(lambda name: conv_transpose_step(dtype, name), "W10", dtype, rounds, n_threads)


# ---- report ---------------------------------------------------------------------------

def ms_table(results, case, measure, thread_counts, title):
    """Run ``measure(dtype, threads)`` -> {contestant: ms} for both dtypes and each
    thread count into ``results[case]``, and print the table, ratios to the first."""
    results[case] = {}
    rows = []
    for dtype in ("float32", "float64"):
        for n in thread_counts:
            r = results[case][f"{dtype}/{n}"] = measure(dtype, n)
            base = next(iter(r.values()))
            rows.append([dtype, n] + [f"{v:.3f} ({v / base:.2f}x)" for v in r.values()])
    print(f"## {case}: {title}, ms per step")
    print(table(["dtype", "threads", *[f"{k} ms (ratio)" for k in r]], rows), end="\n\n")


def table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def machine():
    from threadpoolctl import threadpool_info

    from leanpass.backends import _mkl

    mkl = _mkl.available()  # (loaded now, before any thread limit: a limit reaches only the libraries loaded)
    blas = [f"{i['internal_api']} {i.get('version') or ''} {i.get('architecture') or ''}".strip()
            for i in threadpool_info() if i["user_api"] == "blas"]
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    return {
        "date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cores": os.cpu_count(),
        "python": platform.python_version(), "numpy": np.__version__, "blas": ", ".join(blas),
        "torch": torch.__version__ if torch else "not installed", "leanpass": leanpass.__version__,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", "unset"),
        "leanpass products": "MKL's from 2^23 multiply-adds (the mkl extra), NumPy's below" if mkl
        else "NumPy's (the mkl extra is installed: by default it multiplies on Intel's CPUs only; LEANPASS_BLAS=mkl)"
        if _mkl._library() is not None and (os.environ.get("LEANPASS_BLAS") or "auto").strip().lower() == "auto"
        else "NumPy's",
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=["W1", "W2", "W3", "W4", "W5", "W5b", "W6", "W7", "W8"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", nargs="*", type=int, default=[1, 2], help="thread counts (first is the headline)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--processes", type=int, default=1,
                   help="run W1 in this many fresh processes, one after another, and report the median "
                        "and the range of their ratios (the ratio moves by several percent between processes)")
    args = p.parse_args(argv)
    info = machine()
    results = {"machine": info}
    print(f"# LeanPass benchmarks, {info['date']}")
    print(f"{info['cpu']}, {info['cores']} cores; Python {info['python']}, NumPy {info['numpy']} ({info['blas']}), "
          f"PyTorch {info['torch']}, LeanPass {info['leanpass']}; OPENBLAS_CORETYPE={info['OPENBLAS_CORETYPE']}; "
          f"LeanPass's 2-D matrix products on the CPU: {info['leanpass products']}\n")

    if "W1" in args.only:
        names = ["by hand", "leanpass", "leanpass compiled"] + (["pytorch"] if torch else [])
        rows = []
        if args.processes > 1:
            runs = results["W1 processes"] = w1_processes(args)
            results["W1"] = {}
            for key in runs[0]:
                dtype, n = key.split("/")
                ms = {k: statistics.median(run[key][k]["ms"] for run in runs) for k in names}
                ratios = {k: sorted(run[key][k]["ms"] / run[key]["by hand"]["ms"] for run in runs) for k in names}
                results["W1"][key] = {k: {"ms": ms[k], "ratio": statistics.median(ratios[k]),
                                          "ratio_range": [ratios[k][0], ratios[k][-1]]} for k in names}
                rows.append([dtype, n, f"{ms[names[0]]:.3f} (1.00x)"]
                             + [f"{ms[k]:.3f} ({statistics.median(ratios[k]):.2f}x, "
                                f"{ratios[k][0]:.2f}–{ratios[k][-1]:.2f})" for k in names[1:]])
            print(f"## W1: one MLP training step (784-256-128-10, batch 128, cross-entropy, SGD), ms per step: "
                  f"medians of {len(runs)} processes, each ratio with its range")
            print(table(["dtype", "threads", f"{names[0]} ms", *[f"{k} ms (ratio, range)" for k in names[1:]]], rows),
                  end="\n\n")
        else:
            results["W1"] = {}
            for dtype in ("float32", "float64"):
                for n in args.threads:
                    r = results["W1"][f"{dtype}/{n}"] = w1(dtype, args.rounds, n)
                    base = r["by hand"]["ms"]
                    rows.append([dtype, n] + [f"{r[k]['ms']:.3f} ({r[k]['ms'] / base:.2f}x)" for k in names]
                                + [" / ".join(f"{r[k]['faults']:.0f}" for k in names)])
            print("## W1: one MLP training step (784-256-128-10, batch 128, cross-entropy, SGD), ms per step")
            print(table(["dtype", "threads", *[f"{k} ms (ratio)" for k in names], "minor faults/step"], rows),
                  end="\n\n")

    if "W2" in args.only:
        results["W2"] = {}
        rows = []
        for n in args.threads:
            r = results["W2"][n] = w2(args.rounds, n)
            first = next(iter(r.values()))
            rows.append([n] + [f"{v:.2f} ({v / first:.2f}x)" for v in r.values()])
        print(f"## W2: chain of {CHAIN} element-wise ops on {ELEMENTS} float64 elements, forward + backward, "
              "µs per op")
        print(table(["threads", *[f"{k} µs (ratio)" for k in results["W2"][args.threads[0]]]], rows), end="\n\n")

    if "W3" in args.only:
        r = results["W3"] = w3(args.rounds)
        print("## W3: backward through a 100,000-operation chain")
        print(table(["forward s", "backward s", "backward / forward", "peak MiB (fwd + bwd)"],
                    [[f"{r['forward_s']:.3f}", f"{r['backward_s']:.3f}", f"{r['ratio']:.2f}x",
                      f"{r['peak_bytes'] / 2**20:.1f}"]]), end="\n\n")

    if "W4" in args.only:
        r = results["W4"] = w4(args.rounds)
        rows = [[dtype, f"{v['by hand'] / 2**20:.2f}", f"{v['leanpass'] / 2**20:.2f}",
                 f"{v['leanpass'] / v['by hand']:.2f}x"] for dtype, v in r.items()]
        print("## W4: peak memory of one W1 step (tracemalloc)")
        print(table(["dtype", "by hand MiB", "leanpass MiB", "ratio"], rows), end="\n\n")

    for case in ("W5", "W5b"):
        if case in args.only:
            batch, cin, size, cout = CONV_CASES[case]
            ms_table(results, case, lambda dtype, n, case=case: w5(case, dtype, args.rounds, n), args.threads,
                     f"Conv2d forward + backward (weight and bias gradients), batch {batch}, {cin}x{size}x{size} -> "
                     f"{cout} channels, 3x3")
    if "W5c" in args.only or "W6" in args.only or "W6a" in args.only:
        if torch is None:
            print("## W5c, W6, W6a: left out (they need PyTorch, whose weights they load)\n")
        if "W5c" in args.only and torch:
            ms_table(results, "W5c", lambda dtype, n: w5c(dtype, args.rounds, n), args.threads,
                     "one CNN training step (benchmarks/models.py's cnn, batch 64, 1x28x28, cross-entropy, SGD)")
        if "W6" in args.only and torch:
            batch, length, width, heads = BLOCK
            ms_table(results, "W6", lambda dtype, n: w6(dtype, args.rounds, n), args.threads,
                     f"transformer block forward + backward (pre-LayerNorm, causal MultiheadAttention with {heads} "
                     f"heads, 4x GELU MLP), batch {batch}, sequence {length}, width {width}")
        if "W6a" in args.only and torch:
            batch, length, width, heads = BLOCK
            ms_table(results, "W6a", lambda dtype, n: w6(dtype, args.rounds, n, adamw=True), args.threads,
                     f"W6 then an AdamW step (lr 1e-3, weight decay 0.01): the transformer block's forward, backward "
                     f"and optimizer step, batch {batch}, sequence {length}, width {width}")

    if "W7" in args.only:
        results["W7"] = {}
        rows = []
        for dtype in ("float32", "float64"):
            for n in args.threads:
                r = results["W7"][f"{dtype}/{n}"] = w7(dtype, args.rounds, n)
                hvp, grad = r["hvp_ms"], r["grad_ms"]
                base, grad_base = next(iter(hvp.values())), next(iter(grad.values()))
                rows.append([dtype, n] + [f"{v:.2f} ({v / base:.2f}x)" for v in hvp.values()]
                            + [f"{v:.2f} ({v / grad_base:.2f}x)" for v in grad.values()]
                            + [" / ".join(f"{hvp[k] / grad[k]:.1f}" for k in grad)])
        hvp_names = {"pytorch": "pytorch torch.func", "pytorch double backward": "pytorch double backward",
                     "leanpass": "leanpass"}
        first, grad_first = hvp_names[next(iter(r["hvp_ms"]))], next(iter(r["grad_ms"]))
        print(f"## W7: Hessian-vector product of an MLP loss (784-256-128-10, tanh, batch {BATCH}, cross-entropy) "
              f"with respect to its weights, ms per HVP (forward included); ratios to {first} (HVPs) and to "
              f"{grad_first} (plain gradients)")
        header = ["dtype", "threads", *[f"{hvp_names[k]} HVP ms (ratio to {first})" for k in r["hvp_ms"]],
                  *[f"{k} grad ms (ratio to {grad_first})" for k in r["grad_ms"]],
                  f"HVP / grad ({' / '.join(hvp_names[k] for k in r['grad_ms'])})"]
        print(table(header, rows), end="\n\n")

    if "W8" in args.only:
        batch, channels, height, width, groups = GROUP_NORM
        ms_table(results, "W8", lambda dtype, n: w8(dtype, args.rounds, n), args.threads,
                 f"GroupNorm forward + backward (input, weight and bias gradients), {groups} groups, "
                 f"({batch}, {channels}, {height}, {width})")

    for case, kind in (("W9", "LSTM"), ("W9b", "GRU")):
        if case in args.only and torch is None:
            print(f"## {case}: left out (it needs PyTorch, whose weights it loads)\n")
        elif case in args.only:
            steps, batch, width, layers = RECURRENT
            ms_table(results, case, lambda dtype, n, kind=kind: w9(kind, dtype, args.rounds, n), args.threads,
                     f"{kind} forward + backward (input and parameter gradients), {layers} layers, width {width}, "
                     f"batch {batch}, {steps} steps")
    if "W10" in args.only and torch is None:
        print("## W10: left out (it needs PyTorch, whose weights it loads)\n")
    elif "W10" in args.only:
        batch, cin, size, cout = CONV_TRANSPOSE
        ms_table(results, "W10", lambda dtype, n: w10(dtype, args.rounds, n), args.threads,
                 f"ConvTranspose2d forward + backward (input, weight and bias gradients), batch {batch}, "
                 f"{cin}x{size}x{size} -> {cout} channels, 4x4, stride 2, padding 1")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
