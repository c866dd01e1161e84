"""Differential fuzzing of ``lp.compile``: random training steps, compiled and eager.

Each example draws a small program -- element-wise functions, broadcasting binary
operations, reductions, a matrix product with a parameter, slices and an integer
index, ``layer_norm``, a concatenation, a Linear and a BatchNorm layer (in eval
mode at one call, or not; a parameter frozen at every other call, or not), a
float32 round trip, dropout, ``detach``, in-place
changes, item assignments and changes through a view of values the call made, an
EMA-like in-place update of a state tensor under ``no_grad`` (also through a
``detach`` of it), reads of a state tensor, singular values, complex spectra (rfft,
a complex product, irfft or abs) -- then a loss, maybe a gradient penalty
(``autograd.grad`` with ``create_graph``), ``backward`` (or two, the first with
``retain_graph``), maybe a second micro-batch's loss after it (cross-entropy, its
targets indexed from a state tensor, padded at one call), maybe gradient clipping, and
an update (SGD, Adam, one written out reading ``.grad``, or none), with hooks on the
parameters (clamping, reading or writing a state tensor, counting their calls, a
post-accumulate one) or on the argument inside the function, or none, and an
argument that requires grad or not, maybe made a leaf of the call whose gradient is
returned (FGSM's), and all but the update maybe in a closure given to
``opt.step(closure)``. Two identical worlds (parameters, state,
optimizer) run it: one eagerly, one through ``lp.compile``, for several calls with
new argument values and the same seeds. Everything must agree after every call: the
results, the argument's gradient, the parameters, their gradients, the state and the
optimizer's momentum. Bit for bit with ``fuse=False``; with ``fuse=True`` to a few
ulp (fusion may round in another order; docs/compile.md). A call the compiled
function runs eagerly (with its warning) is fine: the values are what is tested. A
program whose eager call raises (a value saved for the backward pass, changed in
place after) must raise the same error compiled, leaving the same state.

``LEANPASS_FUZZ_EXAMPLES`` multiplies the number of examples (default 1).
"""

from __future__ import annotations

import gc
import os
import warnings

import numpy as np
import pytest
from helpers import host
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import leanpass as lp
from leanpass import Tensor, nn, optim
from leanpass._graph import hooks

F = nn.functional
SCALE = int(os.environ.get("LEANPASS_FUZZ_EXAMPLES", "1"))
SHAPES = [(3, 4), (1, 4), (3, 1), (4,), ()]  # each broadcasts to (3, 4)
CALLS = 4

UNARY = {
    "tanh": lambda a: a.tanh(),
    "sigmoid": lambda a: F.sigmoid(a),
    "relu": lambda a: F.relu(a),
    "gelu": lambda a: F.gelu(a, approximate="tanh"),
    "softplus": lambda a: F.softplus(a),
    "silu": lambda a: F.silu(a),
    "sin": lambda a: a.sin(),
    "square": lambda a: a * a,
    "neg": lambda a: -a,
    "scale": lambda a: a * 0.7,
    "shift": lambda a: a + 0.3,
    "clamp": lambda a: a.clamp(-1.0, 1.0),
    "sqrt": lambda a: (a.abs() + 1.0).sqrt(),
    "log": lambda a: (a * a + 1.0).log(),
    "exp": lambda a: a.tanh().exp(),
    "clone": lambda a: a.clone(),
    "cumsum": lambda a: a.cumsum(-1) if a.ndim else a * 1.0,
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1.0),
    "maximum": lambda a, b: lp.maximum(a, b),
    "where": lambda a, b: lp.where(a > b, a, b),
}


def _reduced(shape, axis):
    return tuple(1 if i == axis % len(shape) else n for i, n in enumerate(shape))


@st.composite
def programs(draw):
    """``(w's shape, steps, loss terms, returned, optimizer)``: each step ``(kind, name,
    inputs)`` on the indices of the values before it; values 0, 1, 2 are the argument
    ``x`` (3, 4), the parameter ``w`` (of a drawn shape) and the state tensor ``s`` (3,
    4)."""
    shapes = [(3, 4), draw(st.sampled_from(SHAPES), label="w's shape"), (3, 4)]
    made = []  # indices of values the call made (in-place changes go to those only)
    steps = []
    for _ in range(draw(st.integers(2, 9), label="steps")):
        n = len(shapes)
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "matmul", "slice", "index",
                                     "layer_norm", "concat", "linear", "batch_norm", "cast", "dropout", "detach",
                                     "inplace", "setitem", "view_inplace", "state", "state_detach", "svd",
                                     "where_detach", "spectral", "spectral_abs"]), label="kind")
        a = draw(st.integers(0, 2) | st.integers(max(0, n - 2), n - 1), label="input")  # (x, w, s, or the last)
        shape = shapes[a]
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), (a,)))
        elif kind == "binary":
            b = draw(st.integers(0, n - 1), label="second input")
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), (a, b)))
            shape = np.broadcast_shapes(shape, shapes[b])
        elif kind == "reduce":
            if not shape:
                continue
            name = draw(st.sampled_from(["sum", "mean", "max", "softmax", "all"]), label="reduction")
            axis = draw(st.sampled_from([0, -1]), label="axis")
            steps.append(("reduce", (name, axis), (a,)))
            shape = () if name == "all" else shape if name == "softmax" else _reduced(shape, axis)
        elif kind in ("state_detach", "where_detach"):
            steps.append((kind, None, (a,)))
            shape = (3, 4) if kind == "state_detach" else shape
        elif kind in ("batch_norm", "svd"):
            if shape != (3, 4):
                continue
            steps.append((kind, None, (a,)))
            shape = (3, 1) if kind == "svd" else shape
        elif kind == "cast":
            steps.append((kind, None, (a,)))
        elif kind in ("matmul", "slice", "index", "layer_norm", "concat", "linear", "spectral", "spectral_abs"):
            if not shape or shape[-1] != 4:
                continue
            steps.append((kind, None, (a,)))
            shape = shape[:-1] + (1,) if kind in ("slice", "spectral_abs") else shape
        elif kind in ("dropout", "detach"):
            steps.append((kind, None, (a,)))
        elif kind == "inplace":
            targets = [i for i in made if np.broadcast_shapes(shapes[i], shape) == shapes[i]]
            if not targets:
                continue
            target = draw(st.sampled_from(targets), label="target")
            steps.append(("inplace", draw(st.sampled_from(["add", "mul"]), label="change"), (target, a)))
            continue  # (no new value)
        elif kind == "view_inplace":  # the rows after the first of a value the call made, scaled through a view
            targets = [i for i in made if shapes[i] == (3, 4)]
            if not targets:
                continue
            steps.append(("view_inplace", None, (draw(st.sampled_from(targets), label="target"),)))
            continue
        elif kind == "setitem":  # the first column of a value the call made, set from a
            targets = [i for i in made if shapes[i] and shapes[i][-1] == 4 and len(shapes[i]) == 2]
            if not targets or np.broadcast_shapes(shape, (3, 1)) != (3, 1):
                continue
            steps.append(("setitem", None, (draw(st.sampled_from(targets), label="target"), a)))
            continue
        else:  # the state, updated in place from a value under no_grad, then read as a value of the call
            steps.append(("state", None, (a,)))
            shape = (3, 4)
        made.append(len(shapes))
        shapes.append(tuple(shape))
    n = len(shapes)
    terms = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3), label="loss terms")
    returned = draw(st.lists(st.integers(0, n - 1), max_size=2), label="returned")
    update = draw(st.sampled_from(["sgd", "adam", "none", "by hand"]), label="update")
    options = {name: draw(st.booleans(), label=name) for name in ("x requires grad", "clip", "twice",
                                                                   "eval at call 2", "return state detach",
                                                                   "penalty", "micro-batch", "pad at call 2",
                                                                   "closure", "x a leaf of the call",
                                                                   "m frozen at odd calls")}
    options["micro-batch"] = draw(st.integers(0, n - 1), label="micro-batch logits") if options["micro-batch"] \
        else None
    options["hooks"] = draw(st.sampled_from(["none", "clamp", "state", "writes", "post", "counter", "x"]),
                            label="hooks")
    # (with gradient hooks registered, autograd.grad(create_graph=True) runs eagerly: drawn apart, the
    # penalty would leave fewer than half of the programs replaying)
    options["penalty"] = options["penalty"] and options["hooks"] in ("none", "post")
    if options["hooks"] != "none":  # (nor the second micro-batch: its check stays behind a hooked backward pass)
        options["micro-batch"] = None
    return shapes[1], steps, terms, returned, update, options


def _world(program, device):
    """The parameter ``w``, a (4, 4) matrix ``m``, the state ``s``, an index, a Linear
    layer, a BatchNorm layer and the optimizer, from one seed; the step function of
    ``program`` over them, and a function giving their state."""
    w_shape, steps, terms, returned, kind, options = program
    rng = np.random.default_rng(5)
    w = Tensor(rng.normal(size=w_shape), requires_grad=True, device=device)
    m = Tensor(rng.normal(size=(4, 4)) * 0.5, requires_grad=True, device=device)
    s = Tensor(rng.normal(size=(3, 4)), device=device)
    index = lp.asarray(np.array([2, 0, 3, 1]), device=device)
    labels, order = (lp.asarray(np.array(v), device=device) for v in ([0, 3, 1], [2, 0, 1]))  # (micro-batch)
    spectral = Tensor(np.array([1 + 0.5j, 0.3 - 1j, 0.7 + 0.2j]), device=device)  # rfft's 3 bins of 4 values
    lp.manual_seed(5)
    linear = nn.Linear(4, 4, device=device, dtype="float64")
    norm = nn.BatchNorm1d(4, device=device, dtype="float64")
    params = [w, m, *linear.parameters(), *norm.parameters()]
    opt = optim.SGD(params, lr=0.1, momentum=0.9) if kind == "sgd" else \
        optim.Adam(params, lr=0.01) if kind == "adam" else None
    hooked = options["hooks"]  # gradient hooks: clamping, reading or writing a state tensor, counting calls
    hs = Tensor(rng.normal(size=(4,)), device=device)
    count = [0]

    def counter(g):
        count[0] += 1
        return g * (1.0 + 0.1 * (count[0] % 3))

    def writes(g):
        with lp.no_grad():
            hs.mul_(0.5).add_(g.sum() * 0.01)

    for p in params:
        if hooked == "clamp":
            p.register_hook(lambda g: g.clamp(-0.5, 0.5))
        elif hooked == "state":
            p.register_hook(lambda g: g * (hs[0] * 0.1 + 1.0))
        elif hooked == "writes":
            p.register_hook(writes)
        elif hooked == "post":
            p.register_post_accumulate_grad_hook(lambda q: q.grad.__imul__(0.5))
        elif hooked == "counter":
            p.register_hook(counter)
    x_grad = options["x requires grad"]

    def step(x):
        if options["closure"] and opt is not None:  # (PyTorch's opt.step(closure): all but the update in it)
            box = []
            opt.step(lambda: box.extend(body(x)) or box[0])
            loss, values, leaf = box
        else:
            loss, values, leaf = body(x)
            if opt is not None:
                opt.step()
            elif kind == "by hand":  # an update written out, reading the gradients as tensors
                with lp.no_grad():
                    for p in params:
                        if p.requires_grad:  # (m frozen: no gradient; the flag is part of what a replay checks)
                            p -= 0.1 * p.grad
        grads = [x.grad * 1.0] if x_grad else []  # (not x.grad read as None: a call that reads it runs eagerly)
        if leaf is not None:  # (FGSM's: the gradient of a leaf made in the call, zeros where no pass reached it)
            grads.append(lp.as_tensor(leaf.grad) * 1.0)
        extra = [s.detach()] if options["return state detach"] else []
        return [loss.detach()] + [values[i].detach() for i in returned] + grads + extra

    def body(x):
        if opt is not None:
            opt.zero_grad()
        else:
            for p in params:
                p.grad = None
        if hooked == "x" and x_grad:  # (registered inside the function: such a call runs eagerly)
            x.register_hook(lambda g: g * 2.0)
        leaf = x.detach().requires_grad_() if options["x a leaf of the call"] else None
        values = [x if leaf is None else leaf, w, s]
        for kind_, name, inputs in steps:
            a = values[inputs[0]]
            if kind_ == "unary":
                values.append(UNARY[name](a))
            elif kind_ == "binary":
                values.append(BINARY[name](a, values[inputs[1]]))
            elif kind_ == "reduce":
                what, axis = name
                if what == "all":
                    values.append(a.sum())
                elif what == "softmax":
                    values.append(a.softmax(axis))
                else:
                    values.append(getattr(a, what)(axis=axis, keepdims=True))
            elif kind_ == "matmul":
                values.append(a @ m)
            elif kind_ == "slice":
                values.append(a[..., 1:2])
            elif kind_ == "index":
                values.append(a[..., index])
            elif kind_ == "layer_norm":
                values.append(F.layer_norm(a, (4,)))
            elif kind_ == "concat":
                values.append(lp.concat([a, a * 0.5], axis=-1)[..., 2:6])
            elif kind_ == "linear":
                values.append(linear(a))
            elif kind_ == "batch_norm":
                values.append(norm(a))
            elif kind_ == "cast":
                values.append((a.astype(lp.float32) * 1.5).astype(lp.float64))
            elif kind_ == "dropout":
                values.append(F.dropout(a, 0.3))
            elif kind_ == "detach":
                values.append(a.detach())
            elif kind_ == "inplace":
                target, other = values[inputs[0]], values[inputs[1]]
                if name == "add":
                    target += other
                else:
                    target *= other.tanh()
            elif kind_ == "setitem":
                values[inputs[0]][:, 0:1] = values[inputs[1]] * 0.5
            elif kind_ == "view_inplace":
                rows = values[inputs[0]][1:]
                rows *= 0.5
            elif kind_ == "state_detach":  # the state changed through a detach of it, under no_grad
                with lp.no_grad():
                    d = s.detach()
                    d.mul_(0.5).add_(a.detach() * 0.5)
                values.append(s * 1.0)
            elif kind_ == "where_detach":
                values.append(a * lp.where(a.detach() > 0, a.detach(), 0.5))
            elif kind_ == "svd":
                values.append(lp.linalg.svd(a)[1].reshape(3, 1))
            elif kind_ == "spectral":  # complex values in the graph: rfft, a complex product, irfft
                values.append(lp.fft.irfft(lp.fft.rfft(a, axis=-1) * spectral, n=4, axis=-1))
            elif kind_ == "spectral_abs":
                values.append(lp.abs(lp.fft.rfft(a, axis=-1) * spectral).sum(axis=-1, keepdims=True))
            else:
                with lp.no_grad():
                    s.mul_(0.9).add_(a * 0.1)
                values.append(s * 1.0)
        loss = sum((values[i] * values[i]).mean() for i in terms) + sum((p * p).sum() * 0.01 for p in params)
        if options["penalty"]:  # a gradient penalty: autograd.grad(create_graph=True), then through it
            (gm,) = lp.autograd.grad(loss, [m], create_graph=True)
            loss = loss + (gm * gm).sum() * 0.1
        if options["twice"]:
            loss.backward(retain_graph=True)
            (loss * 0.5).backward()
        else:
            loss.backward()
        if options["micro-batch"] is not None:  # a second loss after a backward pass, on targets computed from
            # a state tensor (labels[order], -100 at call 2 maybe): their check moves to the front with the index
            logits = lp.broadcast_to(values[options["micro-batch"]].detach(), (3, 4)) + m[0]
            F.cross_entropy(logits, labels[order], ignore_index=-100).backward()
        if options["clip"]:
            nn.utils.clip_grad_norm_(params, 1.0)
        return loss, values, leaf

    def state():
        out = {"s": s, "running mean": norm.running_mean, "running var": norm.running_var, "hook state": hs,
               "hook calls": Tensor(float(count[0]))}
        for i, p in enumerate(params):
            out[f"parameter {i}"], out[f"parameter {i}.grad"] = p, p.grad
        if opt is not None:
            for i, p in enumerate(params):
                for key, value in opt.state.get(id(p), {}).items():
                    if isinstance(value, Tensor) or hasattr(value, "shape"):
                        out[f"{key} {i}"] = value
        return out

    return step, state, norm, labels, m


def _tolerance(want) -> dict:
    """Few-ulp tolerances for a fused run against eager's ``want``: to the array's scale (a
    value that is rounding noise, a key bias's gradient in attention, is as far off as its
    neighbours; RMSprop divides such noise by its own size), and never below 1e-10: a
    parameter that only rounding noise moved (Adam's steps of lr * noise / eps, from a
    gradient that is zero but for rounding) is that noise, whose size fused rounding
    changes (9.5e-11 eagerly, 1.0e-10 fused, in a CI run's random program)."""
    finite = np.abs(want[np.isfinite(want)])  # (NaN and inf compare as themselves: the scale is the rest's)
    scale = float(finite.max()) if finite.size else 0.0
    return {"rtol": 1e-10, "atol": 1e-10 * max(scale, 1.0)}


def _compare(got, want, exact, what):
    got, want = np.asarray(host(got), dtype=float), np.asarray(host(want), dtype=float)
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, err_msg=what, **_tolerance(want))


def _conditioned(moved, want) -> bool:
    """Whether the results and state ``moved``, of an eager run whose input moved by an
    ulp or two, are eager's ``want`` to the tolerance of a fused run: a program whose
    results eager's own rounding decides is none to compare to a few ulp. (A gradient
    that is zero but for rounding noise: Adam makes steps of lr * noise / eps of it,
    then of about lr; a gradient penalty through a batch norm's bias feeds it back into
    the other gradients. Eager itself moved such a bias by 100%.)"""
    for a, b in zip(moved, want, strict=True):
        if (a is None) != (b is None):
            return False
        if a is not None:
            a, b = np.asarray(host(a), dtype=float), np.asarray(host(b), dtype=float)
            if a.shape != b.shape or not np.allclose(a, b, equal_nan=True, **_tolerance(b)):
                return False
    return True


@pytest.mark.parametrize("fuse", [False, True])
def test_a_compiled_random_step_is_the_eager_one(device, fuse):
    @settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(program=programs())
    def run(program):
        eager, eager_state, eager_norm, eager_labels, eager_m = _world(program, device)
        compiled_fn, compiled_state, compiled_norm, compiled_labels, compiled_m = _world(program, device)
        # fused: a third world, eager, whose input moves by an ulp or two (_conditioned)
        twin, twin_state, twin_norm, twin_labels, twin_m = _world(program, device) if fuse else (None,) * 5
        compiled = lp.compile(compiled_fn, fuse=fuse)
        rng = np.random.default_rng(11)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="lp.compile: .* runs eagerly", category=RuntimeWarning)
            warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*(overflow|invalid value)")
            for call in range(CALLS):
                x = rng.normal(size=(3, 4))
                x_grad = program[-1]["x requires grad"]
                evaluating = call == 2 and program[-1]["eval at call 2"]
                worlds = [(eager_labels, eager_norm, eager_m), (compiled_labels, compiled_norm, compiled_m)]
                for labels, norm, m in worlds + ([(twin_labels, twin_norm, twin_m)] if fuse else []):
                    labels[1] = -100 if call == 2 and program[-1]["pad at call 2"] else 3  # (a padded target in
                    norm.train(not evaluating)  # the second micro-batch)
                    m.requires_grad_(not (call % 2 and program[-1]["m frozen at odd calls"]))  # (a state
                    # tensor's flag that comes back: its traces are kept)
                lp.manual_seed(call)
                try:
                    want, error = eager(Tensor(x, device=device, requires_grad=x_grad)), None
                except (RuntimeError, ValueError) as exc:  # (eager's own: a value saved then changed in place)
                    want, error = None, exc
                if fuse and error is None:
                    lp.manual_seed(call)
                    try:
                        moved = twin(Tensor(x * (1 + 4e-16), device=device, requires_grad=x_grad))
                    except (RuntimeError, ValueError):
                        moved = None
                    theirs = eager_state()
                    assume(moved is not None and _conditioned([*moved, *twin_state().values()],
                                                              [*want, *theirs.values()]))
                lp.manual_seed(call)
                if error is not None:
                    with pytest.raises(type(error)):
                        compiled(Tensor(x, device=device, requires_grad=x_grad))
                else:
                    got = compiled(Tensor(x, device=device, requires_grad=x_grad))
                    assert len(got) == len(want)
                    for k, (g, w) in enumerate(zip(got, want)):
                        _compare(g, w, not fuse, f"call {call}: result {k} of {program}")
                mine, theirs = compiled_state(), eager_state()
                assert mine.keys() == theirs.keys()
                for key in theirs:
                    assert (mine[key] is None) == (theirs[key] is None), f"call {call}: {key} of {program}"
                    if theirs[key] is not None:
                        _compare(mine[key], theirs[key], not fuse, f"call {call}: {key} of {program}")
                if error is not None:
                    break  # (the same error, the same state: a program that fails stops there)
        counts["examples"] += 1  # (at the end: an example left out by assume counts not)
        counts["replayed"] += compiled.calls["replayed"] > 0

    counts = {"examples": 0, "replayed": 0}
    run()
    # most programs replay (a fuzzer whose calls all ran eagerly would test nothing of the replays)
    assert counts["replayed"] >= counts["examples"] // 2, counts


# ---- random models: layers, a loss, an optimizer and a scheduler ----------------------------------

IMAGE_BLOCKS = ["conv", "batch_norm", "group_norm", "relu", "gelu", "tanh", "max_pool", "avg_pool", "dropout"]
SEQUENCE_BLOCKS = ["layer_norm", "attention", "causal attention", "encoder", "gru", "linear", "gelu", "dropout"]


@st.composite
def models(draw):
    """``(kind, blocks, optimizer, scheduler, micro-batches, eval call)``: an image model
    (a (4, 3, 8, 8) input) or a sequence model (token ids (4, 5)), each ending in a
    classifier of 3 classes, trained on the batch or on its two halves (gradient
    accumulation: the second half's targets are checked after the first's backward
    pass), with a padded target (``ignore_index``) at the last call or not."""
    kind = draw(st.sampled_from(["image", "sequence"]), label="kind")
    pool = IMAGE_BLOCKS if kind == "image" else SEQUENCE_BLOCKS
    blocks = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5), label="blocks")
    optimizer = draw(st.sampled_from(["sgd", "nesterov", "adam", "adamw", "rmsprop"]), label="optimizer")
    scheduler = draw(st.sampled_from(["none", "step", "cosine"]), label="scheduler")
    micro = draw(st.sampled_from(["one", "two", "two, padded at the last call"]), label="micro-batches")
    return kind, blocks, optimizer, scheduler, micro, draw(st.sampled_from([None, 1, 2]), label="eval call")


def _model_world(spec, device):
    kind, blocks, optimizer, scheduler, micro, _ = spec
    lp.manual_seed(3)
    layers = []
    if kind == "image":
        channels, size = 3, 8
        for k, block in enumerate(blocks):
            if block == "conv":  # (no bias before batch norm: its gradient is rounding noise, which Adam and
                # RMSprop scale up to steps that fusion's rounding moves by more than any tolerance of ulps)
                after = [b for b in blocks[k + 1:] if b not in ("max_pool", "avg_pool")]  # (a shift passes pooling)
                bias = after[:1] != ["batch_norm"]
                layers.append(nn.Conv2d(channels, 4, 3, padding=1, bias=bias, device=device, dtype="float64"))
                channels = 4
            elif block == "batch_norm":
                layers.append(nn.BatchNorm2d(channels, device=device, dtype="float64"))
            elif block == "group_norm" and channels % 2 == 0:
                layers.append(nn.GroupNorm(2, channels, device=device, dtype="float64"))
            elif block in ("max_pool", "avg_pool") and size >= 2:
                layers.append(nn.MaxPool2d(2) if block == "max_pool" else nn.AvgPool2d(2))
                size //= 2
            elif block == "dropout":
                layers.append(nn.Dropout(0.2))
            elif block in ("relu", "gelu", "tanh"):
                layers.append(nn.GELU(approximate="tanh") if block == "gelu" else nn.ReLU() if block == "relu"
                              else nn.Tanh())
        layers += [nn.Flatten(), nn.Linear(channels * size * size, 3, device=device, dtype="float64")]
        body = nn.Sequential(*layers)
        model = body
    else:
        width = 8
        embed = nn.Embedding(10, width, device=device, dtype="float64")
        for block in blocks:
            if block == "layer_norm":
                layers.append(nn.LayerNorm(width, device=device, dtype="float64"))
            elif block in ("attention", "causal attention"):
                layers.append(_Attend(width, block == "causal attention", device))
            elif block == "encoder":
                layers.append(nn.TransformerEncoderLayer(width, 2, 16, dropout=0.1, batch_first=True,
                                                         device=device, dtype="float64"))
            elif block == "gru":
                layers.append(_Recurrent(width, device))
            elif block == "linear":
                layers.append(nn.Linear(width, width, device=device, dtype="float64"))
            elif block == "gelu":
                layers.append(nn.GELU(approximate="tanh"))
            else:
                layers.append(nn.Dropout(0.2))
        model = _Sequence(embed, nn.Sequential(*layers), nn.Linear(width, 3, device=device, dtype="float64"))
    params = list(model.parameters())
    opt = {"sgd": lambda: optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3),
           "nesterov": lambda: optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True),
           "adam": lambda: optim.Adam(params, lr=1e-2),
           "adamw": lambda: optim.AdamW(params, lr=1e-2, weight_decay=0.1),
           "rmsprop": lambda: optim.RMSprop(params, lr=1e-2)}[optimizer]()
    sched = None if scheduler == "none" else optim.lr_scheduler.StepLR(opt, 2, 0.5) if scheduler == "step" \
        else optim.lr_scheduler.CosineAnnealingLR(opt, 4)

    def step(x, y):
        opt.zero_grad()
        if micro == "one":
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            loss.backward()
        else:  # two micro-batches, their gradients accumulated
            half, loss = x.shape[0] // 2, 0.0
            for part in (slice(0, half), slice(half, None)):
                part_loss = F.cross_entropy(model(x[part]), y[part], ignore_index=-100) / 2
                part_loss.backward()
                loss = loss + part_loss.detach()
        opt.step()
        return loss.detach()

    def state():
        out = {f"parameter {i}": p for i, p in enumerate(params)}
        out.update({f"buffer {i}": b for i, b in enumerate(model.buffers())})
        for i, p in enumerate(params):
            for key, value in opt.state.get(id(p), {}).items():
                if isinstance(value, Tensor) or hasattr(value, "shape"):
                    out[f"{key} {i}"] = value
        return out

    return step, state, model, sched


class _Attend(nn.Module):
    def __init__(self, width, causal, device):
        super().__init__()
        self.attention = nn.MultiheadAttention(width, 2, batch_first=True, device=device, dtype="float64")
        self.causal = causal

    def forward(self, h):
        mask = lp.triu(lp.ones((h.shape[1], h.shape[1]), dtype=lp.bool, device=h.device), k=1) if self.causal \
            else None
        return h + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]


class _Recurrent(nn.Module):
    def __init__(self, width, device):
        super().__init__()
        self.gru = nn.GRU(width, width, batch_first=True, device=device, dtype="float64")

    def forward(self, h):
        return self.gru(h)[0]


class _Sequence(nn.Module):
    def __init__(self, embed, body, head):
        super().__init__()
        self.embed, self.body, self.head = embed, body, head

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)).mean(axis=1))


@pytest.mark.parametrize("fuse", [False, True])
def test_a_compiled_random_models_step_is_the_eager_one(device, fuse):
    """Random models (convolutions, normalisations, pooling, attention, a GRU, dropout)
    trained by a compiled step and an eager one (on the batch, or on two micro-batches
    whose second may hold a padded target at the last call), with a scheduler stepped between calls,
    an evaluation forward at one of them and a smaller batch at the third: the same
    losses, parameters, buffers and optimizer state after each call."""
    @settings(max_examples=25 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(spec=models())
    def run(spec):
        # (a hooked tensor of an earlier test, garbage not yet collected, counts as a hook that may write
        # anything: a micro-batch's check would not move ahead of a backward pass, and the step not replay)
        gc.collect()
        eager, eager_state, eager_model, eager_sched = _model_world(spec, device)
        compiled_fn, compiled_state, compiled_model, compiled_sched = _model_world(spec, device)
        compiled = lp.compile(compiled_fn, fuse=fuse)
        rng = np.random.default_rng(13)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="lp.compile: .* runs eagerly", category=RuntimeWarning)
            for call in range(CALLS):
                batch = 2 if call == 2 else 4  # (a smaller batch, as a last one: a second trace; then the first's)
                batch *= 1 if spec[4] == "one" else 2  # (micro-batches of 2 at least: batch norm needs 2 values)
                if spec[0] == "image":
                    x = Tensor(rng.normal(size=(batch, 3, 8, 8)), device=device)
                else:
                    x = lp.asarray(rng.integers(0, 10, size=(batch, 5)), device=device)
                y = rng.integers(0, 3, size=batch)
                if call == CALLS - 1 and spec[4].endswith("padded at the last call"):
                    y[-1] = -100  # (a padded target in the second micro-batch: that call runs eagerly)
                y = lp.asarray(y, device=device)
                lp.manual_seed(call)
                want = eager(x, y)
                lp.manual_seed(call)
                got = compiled(x, y)
                _compare(got, want, not fuse, f"call {call}: the loss of {spec}")
                mine, theirs = compiled_state(), eager_state()
                for key in theirs:
                    _compare(mine[key], theirs[key], not fuse, f"call {call}: {key} of {spec}")
                for sched in (eager_sched, compiled_sched):
                    if sched is not None:
                        sched.step()
                if call == spec[-1]:  # an evaluation between two training calls
                    outs = []
                    for model in (eager_model, compiled_model):
                        model.eval()
                        with lp.no_grad():
                            outs.append(model(x))
                        model.train()
                    _compare(outs[1], outs[0], not fuse, f"call {call}: the evaluation of {spec}")
        counts["replayed"] += compiled.calls["replayed"] > 0
        counts["examples"] += 1
        if not compiled.calls["replayed"]:  # (what made it run eagerly, should too few replay)
            counts.setdefault("why", []).append((spec, compiled.explain()[-300:], "hooks registered:",
                                                 hooks._grad_hooks_registered, hooks._hooks_registered))

    counts = {"examples": 0, "replayed": 0}
    run()
    assert counts["replayed"] >= counts["examples"] // 2, counts
