"""``lp.compile`` (issue 29, first slice): a function traced at its first call with each
kind of arguments and replayed at the next gives what the eager calls give, bit for
bit (results, ``.grad``, parameters, optimizer state); what a replay could not
reproduce runs eagerly, with one warning naming it; new shapes, a replaced layer, a
Python value trace again; an exception leaves no cache entry. (Fusion, on by default,
is tested in tests/test_fusion.py; the steps here have no run of element-wise
operations that Numba would compile, or say ``fuse=False``.)"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import functools
import gc
import importlib
import math
import pathlib
import random
import subprocess
import sys
import threading
import time
import tracemalloc
import warnings
import weakref
from random import gauss
from secrets import randbelow

import numpy as np
import pytest
from helpers import host, training_step
from numpy.random import default_rng

import leanpass as lp
from leanpass import Tensor, _compile, nn
from leanpass._graph import hooks

RNG = np.random.default_rng(29)


def mlp(device, dtype="float64", seed=0):
    lp.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16, device=device, dtype=dtype), nn.ReLU(),
                         nn.Linear(16, 8, device=device, dtype=dtype), nn.Tanh(),
                         nn.Linear(8, 3, device=device, dtype=dtype))


OPTIMIZERS = {
    "sgd": lambda ps: lp.optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: lp.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: lp.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: lp.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


def same(a, b):
    np.testing.assert_array_equal(host(a), host(b))


def _twins_step_alike(eager, compiled, models, device, calls):
    """``calls`` batches through the eager step and its compiled twin (of ``models``,
    made alike): results, parameters and gradients the same bit for bit."""
    for _ in range(calls):
        x = Tensor(RNG.normal(size=(10, 6)), device=device)
        y = lp.asarray(RNG.integers(0, 3, size=10), device=device)
        same(compiled(x, y), eager(x, y))
        for p, q in zip(models[0].parameters(), models[1].parameters()):
            same(q, p)
            same(q.grad, p.grad)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_compiled_training_step_is_the_eager_step_bit_for_bit(device, name):
    models = [mlp(device), mlp(device)]
    opts = [OPTIMIZERS[name](m.parameters()) for m in models]
    eager, compiled = training_step(models[0], opts[0]), lp.compile(training_step(models[1], opts[1]))
    _twins_step_alike(eager, compiled, models, device, 5)
    for a, b in zip(opts[0].state.values(), opts[1].state.values()):
        for key in a:
            same(a[key], b[key])
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}
    text = compiled.explain()
    assert "replays" in text and "1 backward pass" in text and "Optimizer.step" in text


def test_a_compiled_cnn_step_with_batch_norm_is_the_eager_step(device):
    def cnn():
        lp.manual_seed(1)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, device=device, dtype="float64"),
                             nn.BatchNorm2d(4, device=device, dtype="float64"), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(4 * 4 * 4, 3, device=device, dtype="float64"))

    models = [cnn(), cnn()]
    opts = [lp.optim.Adam(m.parameters(), lr=1e-2) for m in models]
    eager, compiled = training_step(models[0], opts[0]), lp.compile(training_step(models[1], opts[1]))
    for _ in range(4):
        x = Tensor(RNG.normal(size=(5, 1, 8, 8)), device=device)
        y = lp.asarray(RNG.integers(0, 3, size=5), device=device)
        same(eager(x, y), compiled(x, y))
    for a, b in zip(models[0].state_dict().values(), models[1].state_dict().values()):
        same(a, b)  # parameters and batch norm's running statistics
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


class TinyLM(nn.Module):
    def __init__(self, device):
        super().__init__()
        kw = dict(device=device, dtype="float64")
        self.tokens, self.positions = nn.Embedding(11, 8, **kw), nn.Embedding(6, 8, **kw)
        self.norm = nn.LayerNorm(8, **kw)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True, **kw)
        self.mlp = nn.Sequential(nn.Linear(8, 16, **kw), nn.GELU(approximate="tanh"), nn.Linear(16, 11, **kw))

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(np.arange(ids.shape[-1]))  # host indices: a constant
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True,
                          attn_mask=np.triu(np.ones((6, 6), dtype=bool), 1))[0]
        return self.mlp(x)


def test_a_compiled_transformer_step_with_clipping_and_a_schedule(device):
    """Embeddings (index tensors checked again at each replay), causal attention,
    AdamW, clip_grad_norm_ and a learning-rate schedule: eager's numbers."""
    def setup():
        lp.manual_seed(2)
        model = TinyLM(device)
        opt = lp.optim.AdamW(model.parameters(), lr=1e-2)
        return model, opt, lp.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def stepper(model, opt, schedule):
        def step(ids, targets):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(ids).reshape(-1, 11), targets.reshape(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            schedule.step()
            return loss
        return step

    a, b = setup(), setup()
    eager, compiled = stepper(*a), lp.compile(stepper(*b), fuse=False)  # (GELU fuses: tests/test_fusion.py)
    for _ in range(4):
        ids = lp.asarray(RNG.integers(0, 11, size=(3, 6)), device=device)
        targets = lp.asarray(RNG.integers(0, 11, size=(3, 6)), device=device)
        same(eager(ids, targets), compiled(ids, targets))
    for p, q in zip(a[0].parameters(), b[0].parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
    with pytest.raises(IndexError):
        compiled(lp.asarray(np.full((3, 6), 11), device=device), targets)  # out of range, as eagerly


def test_a_chain_of_small_operations_and_its_gradient(device):
    """W2's chain: forward and backward replayed, the argument's .grad written (each
    operation on its own: tests/test_fusion.py fuses it)."""
    from test_fusion import chain  # (tests/ is on sys.path)

    compiled = lp.compile(chain, fuse=False)
    data = RNG.uniform(0.1, 0.9, size=16)
    for _ in range(3):
        x, z = Tensor(data, requires_grad=True, device=device), Tensor(data, requires_grad=True, device=device)
        same(chain(x), compiled(z))
        same(x.grad, z.grad)
    assert compiled.calls["replayed"] == 2


def test_broadcast_gradients_are_summed_back_as_eager(device):
    w = Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True, device=device)
    b = Tensor(np.array(0.25), requires_grad=True, device=device)

    def f(x):
        w.grad = b.grad = None
        loss = ((x * w + b) ** 2).sum()
        loss.backward()
        return loss

    g = lp.compile(f)
    for _ in range(3):
        x = Tensor(RNG.normal(size=(4, 3)), device=device)
        loss = g(x)
        grads = [host(w.grad), host(b.grad)]
        same(f(x), loss)
        same(w.grad, grads[0])
        same(b.grad, grads[1])
    assert g.calls["replayed"] == 2


def test_inference_under_no_grad_and_new_shapes_trace_again(device):
    model = mlp(device)

    @lp.compile
    def predict(x):
        with lp.no_grad():
            return model(x).softmax(axis=-1)

    for rows in (4, 4, 7, 7, 4):
        x = Tensor(RNG.normal(size=(rows, 6)), device=device)
        with lp.no_grad():
            expected = model(x).softmax(axis=-1)
        same(predict(x), expected)
    assert predict.calls == {"traced": 2, "replayed": 3, "eager": 0}
    assert predict.explain().count("replays") == 2


@pytest.mark.parametrize("fuse", [False, True])
def test_an_op_under_no_grad_replays_with_the_needs_it_was_given(fuse):
    """Under no_grad an op is told no input needs a gradient; the trace records that,
    so a replay runs the op as the eager call did (found by review: a replayed unstable
    sort of an input that requires grad took the argsort path, whose ties of -0 and 0
    come out in another order than the plain sort's)."""
    data = np.random.default_rng(0).choice(np.array([0.0, -0.0, 1.0, np.nan], "float32"), size=(4, 5000))

    def f(x):
        with lp.no_grad():
            return lp.sort(x, stable=False)

    eager = f(Tensor(data, requires_grad=True)).numpy().tobytes()
    compiled = lp.compile(f, fuse=fuse)
    assert [compiled(Tensor(data, requires_grad=True)).numpy().tobytes() == eager for _ in range(3)] == [True] * 3
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_the_cache_keeps_at_most_cache_size_traces():
    """At most ``cache_size`` traces; the first one dropped warns, naming the argument
    that told the call from the one before (a step count passed as a number traces at
    every call)."""
    f = lp.compile(lambda x: x * 2.0 + 1.0, cache_size=2)
    with pytest.warns(RuntimeWarning, match=r"fills its cache of 2 traces.*argument 'x' differed") as seen:
        for n in (1, 2, 3, 1):
            same(f(Tensor(np.ones(n))), np.full(n, 3.0))
    assert f.calls["traced"] == 4 and len(f._entries) == 2  # 1 was evicted by 3, then traced again
    assert len(seen) == 1

    g = lp.compile(lambda x, it: x * float(it % 2), cache_size=3)
    with pytest.warns(RuntimeWarning, match=r"argument 'it' differed .*pass it as a tensor"):
        for it in range(6):
            same(g(Tensor(np.ones(2)), it), np.full(2, float(it % 2)))
    assert g.calls == {"traced": 6, "replayed": 0, "eager": 0}


def test_python_values_and_aliasing_are_part_of_the_key():
    f = lp.compile(lambda x, y, s: x * s + y)
    a, b = Tensor(np.array([1.0, 2.0])), Tensor(np.array([10.0, 20.0]))
    same(f(a, a, 2.0), [3.0, 6.0])
    same(f(a, b, 2.0), [12.0, 24.0])  # same kinds of tensors, but two of them: traced again
    same(f(a, b, 3.0), [13.0, 26.0])
    same(f(a, b, 3.0), [13.0, 26.0])
    assert f.calls == {"traced": 3, "replayed": 1, "eager": 0}


def traced_sum(model):
    """``model(x).sum()`` compiled, and an ``x``, traced once."""
    f = lp.compile(lambda x: model(x).sum().detach())
    x = Tensor(RNG.normal(size=(2, 6)))
    f(x)
    return f, x


def test_a_replaced_layer_traces_again():
    model = mlp("cpu")
    f, x = traced_sum(model)
    f(x)
    model[4] = nn.Linear(8, 5, dtype="float64")  # a state tensor of another shape
    same(f(x), model(x).sum())
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def dropout_mlp(device, seed=0):
    lp.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16, device=device, dtype="float64"), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(16, 3, device=device, dtype="float64"))


def test_a_step_replays_after_an_evaluation_between_eval_and_train(device):
    """The usual epoch: train steps, ``model.eval()``, an evaluation, ``model.train()``:
    the training flags are set back as the trace saw them, so the step replays (it traced
    again at every epoch before); dropout's masks stay eager's, draw for draw."""
    models = [dropout_mlp(device), dropout_mlp(device)]
    opts = [lp.optim.Adam(m.parameters(), lr=1e-2) for m in models]
    steps = [training_step(models[0], opts[0]), lp.compile(training_step(models[1], opts[1]))]
    x = Tensor(RNG.normal(size=(5, 10, 6)), device=device)
    y = lp.asarray(RNG.integers(0, 3, size=(5, 10)), device=device)
    results = []
    for model, step in zip(models, steps):
        lp.manual_seed(7)
        out = []
        for _ in range(3):
            model.train()
            out += [host(step(x[i], y[i])) for i in range(2)]
            model.eval()
            with lp.no_grad():
                out.append(host(model(x[4])))
        out += [host(p) for p in model.parameters()]
        results.append(out)
    for a, b in zip(*results):
        same(a, b)
    assert steps[1].calls == {"traced": 1, "replayed": 5, "eager": 0}


def test_a_step_in_eval_mode_traces_again_and_replays_when_set_back(device):
    """Called in eval mode (no dropout), a step traced in training mode is traced
    again; back in training mode it traces again too (one entry per key: the last
    trace's mode), each call as eager's."""
    model = dropout_mlp(device)
    f = lp.compile(lambda x: model(x).sum().detach(), fuse=False)
    x = Tensor(RNG.normal(size=(4, 6)), device=device)
    f(x)
    model.eval()
    same(f(x), model(x).sum())
    same(f(x), model(x).sum())
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_a_layer_replaced_then_put_back_replays_and_a_container_change_traces_again():
    model = mlp("cpu")
    first = model[4]
    f, x = traced_sum(model)
    other = nn.Linear(8, 3, dtype="float64")
    model[4].weight, kept = other.weight, model[4].weight
    same(f(x), model(x).sum())  # another weight: traced again
    model[4].weight = kept
    same(f(x), model(x).sum())  # the first entry's weight again: that trace was replaced, traced again
    model[4].weight = other.weight
    model[4].weight = kept  # set and set back since the last trace: replays
    same(f(x), model(x).sum())
    assert f.calls == {"traced": 3, "replayed": 1, "eager": 0}
    model.append(nn.Identity())
    model.pop()  # a container's change is not followed: traced again, as before
    same(f(x), model(x).sum())
    assert f.calls == {"traced": 4, "replayed": 1, "eager": 0}
    assert model[4] is first


def test_a_changed_attribute_behind_a_property_traces_again():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self._scale = 2.0

        @property
        def scale(self):
            return self._scale

        @scale.setter
        def scale(self, value):
            object.__setattr__(self, "_scale", value)  # (kept outside what the journal sees)

        def forward(self, x):
            return x * self.scale

    m = Scaled()
    m.flag = 1  # (journaled changes just before the trace: where a property's change were taken for one
    m.flag = 2  # of them, these would say it was undone)
    m.flag = 1
    f = lp.compile(lambda x: m(x), fuse=False)
    f(Tensor(np.ones(2)))
    m.scale = 3.0
    m.scale = 2.0  # set back, but through a property: not followed, traced again
    same(f(Tensor(np.ones(2))), [2.0, 2.0])
    m.scale = 5.0
    same(f(Tensor(np.ones(2))), [5.0, 5.0])
    assert f.calls == {"traced": 3, "replayed": 0, "eager": 0}


def test_journaled_modules_are_told_apart_by_identity_and_may_be_gone():
    """A module made and dropped after a trace (its journal entries then name a dead
    module), one whose class defines ``==`` (unhashable), and two equal ones: the
    replay is eager's (they broke the check, or merged two modules' changes)."""
    class Scale(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.s = s

        def forward(self, x):
            return x * self.s

        def __eq__(self, other):  # (equal modules, and no __hash__: unhashable)
            return type(other) is Scale

    a, b = Scale(2.0), Scale(2.0)
    f = lp.compile(lambda x: b(x), fuse=False)
    x = Tensor(np.ones(2))
    f(x)
    nn.Linear(3, 2)  # made and dropped
    b.eval()
    b.train()
    same(f(x), [2.0, 2.0])
    a.s = 3.0
    a.s = 2.0
    b.s = 7.0  # (b's change, after a's: its own)
    same(f(x), [7.0, 7.0])
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_a_tensor_made_a_buffer_or_no_longer_one_traces_again():
    """Whether a tensor is a buffer is not an attribute's value: deleted and set again,
    made a parameter and set back, or registered as a buffer where it was a
    parameter, the module holds the same tensors, but not as the trace saw them."""
    t = Tensor(np.full(3, 10.0))
    m = nn.Module()
    m.register_buffer("b", t)
    f = lp.compile(lambda x: x + sum(m.buffers()), fuse=False)
    x = Tensor(np.ones(3))
    f(x)
    f(x)
    del m.b
    m.b = t  # a plain tensor now, not a buffer
    same(f(x), [1.0, 1.0, 1.0])
    del m.b
    m.register_buffer("b", t)
    same(f(x), [11.0, 11.0, 11.0])
    m.b = nn.Parameter(np.zeros(3))
    m.b = t  # no longer a buffer (a Parameter took its name)
    with pytest.warns(RuntimeWarning, match="set before every call"):  # (the third such call in a row: eagerly)
        same(f(x), [1.0, 1.0, 1.0])
    assert f.calls == {"traced": 3, "replayed": 1, "eager": 1}


def test_the_journal_keeps_no_replaced_tensor_alive():
    """A forward that keeps its last state as a tuple of tensors (an RNN's (h, c)): the
    journal of its changes holds none of the old ones."""
    import gc
    import weakref

    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4, dtype="float64")
            self.hidden = None

        def forward(self, x):
            h = self.lin(x)
            self.hidden = (h, h * 2.0)
            return h

    m = Stateful()
    refs = []
    for _ in range(20):
        out = m(Tensor(np.ones((2, 4)), requires_grad=True))
        refs.append(weakref.ref(out))
        del out
    gc.collect()
    assert sum(r() is not None for r in refs) == 1  # the last, in m.hidden


def test_module_changes_the_call_undoes_or_makes_on_modules_it_drops_replay(device):
    """A loss module built in the step, ``model.eval()`` ... ``model.train()`` inside the
    call, a slice of a Sequential: the modules end as they began (or the changed ones
    are gone), so the call replays, as eager (each traced again at every call before)."""
    models = [dropout_mlp(device), dropout_mlp(device)]
    opts = [lp.optim.SGD(m.parameters(), lr=0.1) for m in models]

    def stepper(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.CrossEntropyLoss()(model(x), y)
            loss.backward()
            opt.step()
            model.eval()
            check = model[2:](model[:2](x)).sum().detach()  # (no dropout: eval mode)
            model.train()
            return loss, check
        return step

    steps = [stepper(models[0], opts[0]), lp.compile(stepper(models[1], opts[1]), fuse=False)]
    x = Tensor(RNG.normal(size=(4, 10, 6)), device=device)
    y = lp.asarray(RNG.integers(0, 3, size=(4, 10)), device=device)
    results = []
    for step in steps:
        lp.manual_seed(3)
        results.append([host(v) for i in range(4) for v in step(x[i], y[i])])
    for a, b in zip(*results):
        same(a, b)
    assert steps[1].calls == {"traced": 1, "replayed": 3, "eager": 0}
    assert models[1].training


def test_a_module_the_call_makes_and_keeps_traces_again():
    """A module the call makes and leaves in a live module's attribute: a replay would
    not make it, so the next call traces again, with the warning; a call that does so
    twice in a row does so at every call, and runs eagerly from then on."""
    model = mlp("cpu")
    f = lp.compile(lambda x: (setattr(model, "extra", nn.Identity()), model(x).sum().detach())[1])
    x = Tensor(RNG.normal(size=(2, 6)))
    with pytest.warns(RuntimeWarning, match="changed a module's attributes") as seen:
        for _ in range(4):
            f(x)
    assert f.calls == {"traced": 2, "replayed": 0, "eager": 2}
    assert sum("at two calls in a row" in str(w.message) for w in seen) == 1
    assert "at two calls in a row" in f.explain()


HELPER_CALLS = 0


def _counted_scale(x):
    """A helper that counts its calls in a global it rebinds."""
    global HELPER_CALLS
    HELPER_CALLS += 1
    return x * float(HELPER_CALLS)


def test_a_helper_that_rebinds_a_global_at_every_call_runs_eagerly_after_two_traces():
    """A helper rebinding a global at each call (a counter): the replay would not, so
    the call traces again; at the second trace in a row it runs eagerly from then on,
    each call as eagerly (a trace costs more than the eager call it makes)."""
    global HELPER_CALLS
    f = lp.compile(lambda x: _counted_scale(x).sum())
    x = Tensor(np.ones(3))
    HELPER_CALLS = 0
    with pytest.warns(RuntimeWarning, match="rebound a name it reads"):
        got = [float(f(x)) for _ in range(5)]
    assert got == [3.0, 6.0, 9.0, 12.0, 15.0] and HELPER_CALLS == 5
    assert f.calls == {"traced": 2, "replayed": 0, "eager": 3}


def test_a_change_at_the_first_call_alone_is_traced_once_more_then_replayed():
    """A module that sets up a cache at its first call (an attribute set once): one
    more trace, then replays; two such traces apart (the cache reset between calls,
    replays between them) never run the function eagerly."""
    class Cached(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = None

        def forward(self, x):
            if self.scale is None:
                self.scale = 2.0
            return x * self.scale

    m = Cached()
    f = lp.compile(lambda x: m(x).sum())
    x = Tensor(np.ones(3))
    with pytest.warns(RuntimeWarning, match="changed a module's attributes"):
        assert [float(f(x)) for _ in range(3)] == [6.0] * 3
        assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}
        m.scale = None  # (reset: the next call sets it again)
        assert [float(f(x)) for _ in range(3)] == [6.0] * 3
    assert f.calls["eager"] == 0 and f.calls["replayed"] >= 2


def test_an_argument_models_layers_are_checked_and_a_module_the_call_keeps_traces_again():
    """A model passed in, whose layers the call runs through a Sequential it builds:
    a layer replaced in its list since traces again (the built Sequential is gone after
    the call, and the model itself was never called). A module the call makes and
    keeps in a list of its caller's, its attributes as its class's: traced again at
    every call, as the replay would not make it."""
    x = Tensor(RNG.normal(size=(2, 4)))

    def run(compiled):
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4, dtype="float64"), nn.ReLU(), nn.Linear(4, 4, dtype="float64"),
                              nn.Tanh())
        f = lambda m, x: nn.Sequential(*m.layers[:-1])(x).sum().detach()  # noqa: E731
        f = lp.compile(f, fuse=False) if compiled else f
        out = [f(model, x), f(model, x)]
        model.layers[1] = nn.Identity()  # (in the list: no attribute set)
        out += [f(model, x), f(model, x)]
        return [host(o) for o in out], getattr(f, "calls", None)

    (eager, _), (compiled, calls) = run(False), run(True)
    for a, b in zip(eager, compiled):
        same(a, b)
    assert calls == {"traced": 2, "replayed": 2, "eager": 0}

    class Scale(nn.Module):
        factor = 2.0

        def __init__(self, factor=2.0):
            super().__init__()
            self.factor = factor

        def forward(self, h):
            return h * self.factor

    kept = []

    def step(x):
        s = Scale()
        kept.append(s)
        return s(x).sum().detach()

    g = lp.compile(step, fuse=False)
    with pytest.warns(RuntimeWarning, match="changed a module's attributes"):
        for _ in range(3):
            g(Tensor(np.ones(2)))
    assert len(kept) == 3 and g.calls == {"traced": 2, "replayed": 0, "eager": 1}


def test_an_attribute_deleted_and_set_again_traces_again():
    """``del m.a; m.a = a`` puts the same parameter back, but last among the module's
    attributes: its parameters come in another order, which the trace's do not."""
    m = nn.Module()
    m.a = nn.Parameter(np.array([1.0, 2.0]))
    m.b = nn.Parameter(np.array([10.0, 20.0, 30.0]))

    def f(x):
        return (lp.concat([p.reshape(-1) for p in m.parameters()]) * x).detach()

    g = lp.compile(f, fuse=False)
    x = Tensor(np.arange(1.0, 6.0))
    g(x)
    a = m.a
    del m.a
    m.a = a
    same(g(x), f(x))
    h = lp.compile(lambda x: (sum(p.sum() for p in m.parameters()) * x).detach(), fuse=False)
    h(x)
    del m.b  # (alone: a change, as before)
    same(h(x), x * 3.0)
    assert (g.calls, h.calls) == ({"traced": 2, "replayed": 0, "eager": 0}, {"traced": 2, "replayed": 0, "eager": 0})


def test_the_journal_keeps_no_long_value():
    """A long tuple or string an attribute held is not kept by value (the journal keeps
    4,096 entries): a change of it is one no later change undoes."""
    from leanpass.nn import module as module_

    m = nn.Module()
    long_tuple, long_text = tuple(range(1000)), "x" * 10_000
    m.table, m.text = long_tuple, long_text
    m.table, m.text = (1, 2), "short"
    m.table, m.text = (3, 4), "other"
    held = [entry[3] for entry in module_._JOURNAL if entry[2] in ("table", "text") and entry[1]() is m]
    assert not any(value is long_tuple or value is long_text for value in held)
    assert (1, 2) in held and "short" in held  # (short ones are kept, and compared by value)


@pytest.mark.parametrize("change", ["pop", "clear", "update"])
def test_a_module_dict_changed_traces_again(change):
    d = nn.ModuleDict({"a": nn.Linear(2, 2, dtype="float64")})
    f = lp.compile(lambda x: d["a"](x).detach() if "a" in d else x * 1.0, fuse=False)
    x = Tensor(np.ones((1, 2)))
    f(x)
    f(x)
    if change == "pop":
        d.pop("a")
    elif change == "clear":
        d.clear()
    else:
        d.update({"a": nn.Linear(2, 2, dtype="float64")})
    same(f(x), (d["a"](x).detach() if "a" in d else x))
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_more_changes_than_the_journal_keeps_trace_again():
    from leanpass.nn import module as module_

    model = mlp("cpu")
    f, x = traced_sum(model)
    for _ in range(module_._JOURNAL.maxlen // 2 + 1):  # each a change and its undoing
        model.eval()
        model.train()
    assert not module_.restored(f._entries[next(iter(f._entries))].modules)
    same(f(x), model(x).sum())
    assert f.calls == {"traced": 2, "replayed": 0, "eager": 0}


ATTRIBUTE_SET = "an attribute its code reads, of an argument or of an object it names .a global cfg., was set"


class _Config:
    """A plain object in a global, as a script's ``cfg`` or ``args``."""


CONFIG = _Config()


def test_a_global_objects_attribute_set_between_calls_traces_again():
    """``cfg.t`` and ``cfg.scale`` read by the function, where ``cfg`` is a global
    plain object: set between calls, the call traces again (a replay read the trace's
    tensor and number before, silently); left alone, it replays."""
    CONFIG.t, CONFIG.scale = Tensor(np.ones(3)), 2.0
    f = lp.compile(lambda x: (x * CONFIG.t * CONFIG.scale).sum(), fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 6.0
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        CONFIG.t = Tensor(np.full(3, 2.0))
        assert float(f(x)) == 12.0
        CONFIG.scale = 3.0
        assert float(f(x)) == 18.0
    assert float(f(x)) == 18.0
    assert f.calls == {"traced": 3, "replayed": 2, "eager": 0}


def test_a_global_objects_attribute_set_again_to_an_equal_number_replays():
    """``cfg.scale`` set before each call to an equal float, a new object each time (a
    value parsed or computed again): the replay goes on, without a warning (the values
    are compared, not only the objects)."""
    CONFIG.t, CONFIG.scale = Tensor(np.ones(3)), 2.0
    f = lp.compile(lambda x: (x * CONFIG.t * CONFIG.scale).sum(), fuse=False)
    x = Tensor(np.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            CONFIG.scale = float("2.0")  # (not the one the trace read)
            assert float(f(x)) == 6.0
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


class _EqualByIdentity(type):
    """A metaclass that defines ``__eq__`` and so leaves its classes unhashable."""

    def __eq__(cls, other):
        return cls is other


class _UnhashableClassConfig(metaclass=_EqualByIdentity):
    def __init__(self):
        self.scale = 2.0


UNHASHABLE_CLASS_CONFIG = _UnhashableClassConfig()


def test_an_attribute_of_an_object_of_an_unhashable_class_set_between_calls_traces_again():
    """A global object whose class cannot be hashed (its metaclass defines ``__eq__``):
    its attributes were read as raising, the same at every call, so a replay kept the
    trace's ``scale`` (6.0 after it was set to 3.0, silently; found this session)."""
    UNHASHABLE_CLASS_CONFIG.scale = 2.0
    f = lp.compile(lambda x: (x * UNHASHABLE_CLASS_CONFIG.scale).sum(), fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 6.0
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        UNHASHABLE_CLASS_CONFIG.scale = 3.0
        assert float(f(x)) == 9.0
    assert float(f(x)) == 9.0
    assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}


class _HashRaises(type):
    def __eq__(cls, other):
        return cls is other

    def __hash__(cls):
        raise NotImplementedError("configuration classes are not hashable")


class _HashByMissingKey(type):  # (hashes a class attribute its classes lack: AttributeError)
    def __eq__(cls, other):
        return getattr(cls, "key", None) == getattr(other, "key", None)

    def __hash__(cls):
        return hash(cls.key)


class _EqualByName(type):  # (a class defined again, in a notebook, equals the first one)
    def __eq__(cls, other):
        return isinstance(other, _EqualByName) and cls.__name__ == other.__name__

    def __hash__(cls):
        return hash(cls.__name__)


class _EqualRaises(type):  # (== with another class, int's or float's, raises AttributeError)
    def __eq__(cls, other):
        return cls.fields == other.fields

    __hash__ = type.__hash__


def _odd_class_config(case):
    """``(set_scale, fn, argument)`` for an object of a class whose metaclass hashes or
    compares in odd ways (review of this session's fix): ``fn(x)`` reads its scale
    (``fn(x, config)`` where ``argument``)."""
    if case == "hash raises":
        config = _HashRaises("Config", (), {})()
    elif case == "hash raises AttributeError, as an argument":
        config = _HashByMissingKey("Config", (), {})()
        return (lambda v: setattr(config, "scale", v)), (lambda x, c=config: (x * c.scale).sum()), config
    elif case == "a class defined again, equal by name, other slots":
        first = _EqualByName("Config", (), {"__slots__": ("lr",)})()
        first.lr = 0.5
        lp.compile(lambda x: (x * first.lr).sum(), fuse=False)(Tensor(np.ones(3)))  # (its slots read first)
        config = _EqualByName("Config", (), {"__slots__": ("scale",)})()
    else:  # "an attribute replaced by an object of a class whose == raises"
        mode = _EqualRaises("Mode", (), {"fields": ("scale",)})
        config = _Config()

        def set_scale(v):
            config.mode = mode()  # (a new object: compared with the old one by ==)
            config.mode.scale = v

        return set_scale, lambda x: (x * config.mode.scale).sum(), None
    return (lambda v: setattr(config, "scale", v)), lambda x: (x * config.scale).sum(), None


@pytest.mark.parametrize("case", ["hash raises", "hash raises AttributeError, as an argument",
                                  "a class defined again, equal by name, other slots",
                                  "an attribute replaced by an object of a class whose == raises"])
def test_objects_of_classes_that_hash_or_compare_oddly_are_compared(case):
    """A configuration whose class's metaclass raises in ``hash``, or hashes two
    classes of one name alike, or raises in ``==`` with other classes: an attribute the
    function reads, set between calls, traces again (each replayed the trace's value
    silently, or raised where eager did not: found by review)."""
    set_scale, fn, argument = _odd_class_config(case)
    set_scale(2.0)
    x = Tensor(np.ones(3))
    f = lp.compile(fn, fuse=False)
    call = (lambda: f(x, argument)) if argument is not None else (lambda: f(x))
    assert float(call()) == float(call()) == 6.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (traced again: the attribute was set)
        set_scale(3.0)
        assert float(call()) == 9.0
    assert float(call()) == 9.0
    assert f.calls["traced"] == 2 and f.calls["replayed"] == 2


class _KeyErrorConfig:
    """A slotted configuration with a ``__dict__`` whose ``__getattr__`` raises
    ``KeyError`` (a common slip for ``AttributeError``): reading its unset slot raises."""

    __slots__ = ("scale", "extra", "__dict__")

    def __getattr__(self, name):
        return {}[name]


def test_an_object_whose_unset_slot_raises_when_read_is_compared():
    """Its slots are read through their descriptors, not its ``__getattr__`` (which
    raised for the unset one: the object was taken as unreadable, and the call ran
    eagerly; before that, one entry at every call replayed 6.0 where eager gave 9.0
    and 12.0, silently): it replays, and a value set since traces again."""
    config = _KeyErrorConfig()
    config.scale = 2.0
    f = lp.compile(lambda x: (x * config.scale).sum(), fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 6.0
    with pytest.warns(RuntimeWarning, match="traced again"):  # (once: a warning per reason)
        for scale in (3.0, 4.0):
            config.scale = scale
            assert float(f(x)) == float(f(x)) == 3 * scale
    assert f.calls == {"traced": 3, "replayed": 3, "eager": 0}


class _Settings:
    """Values kept in a dict and served by ``__getattr__`` (an EasyDict-like config)."""

    def __init__(self, **values):
        self._values = values

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None


SETTINGS = _Settings(scale=2.0)
TICKER = collections.Counter()


class _Logger:
    """Counts what it is told, as a logger or a progress bar does."""

    def __init__(self):
        self.seen = 0

    def log(self):
        self.seen += 1


LOGGER = _Logger()


def _count(x):
    CONFIG.calls += 1
    return x * 2.0


def _count_inner(x):
    CONFIG.inner.calls += 1
    return x * 2.0


def _drop_flag(x):
    if hasattr(CONFIG, "flag"):
        del CONFIG.flag
        return x * 2.0
    return x * 3.0


def _log(x):
    LOGGER.log()
    return x * 2.0


_CHANGING_STEPS = {"cfg.calls += 1": _count, "cfg.inner.calls += 1": _count_inner, "del cfg.flag": _drop_flag,
                   "logger.log()": _log}  # (each its own code: what it names decides what is checked)


@pytest.mark.parametrize("change", list(_CHANGING_STEPS))
def test_a_global_objects_attribute_the_function_changes_runs_it_eagerly(change):
    """A function that changes a global object's attribute itself (``cfg.calls += 1``,
    through a chain, by ``del``, or in a method it calls, as a logger's or a progress
    bar's): a replay would not, so the call runs eagerly (after one more trace), and
    the object ends as eagerly."""
    CONFIG.calls, CONFIG.inner, CONFIG.flag, LOGGER.seen = 0, _Config(), True, 0
    CONFIG.inner.calls = 0
    step = _CHANGING_STEPS[change]
    f = lp.compile(step, fuse=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [host(f(Tensor(np.ones(2))))[0] for _ in range(4)]
    if change != "del cfg.flag":
        assert [str(w.message) for w in caught if "lp.compile" in str(w.message)] and all(
            "of an object it names, changed by the function" in str(w.message) for w in caught)
    if change == "del cfg.flag":  # (the object is left alone from the second call on: traced again, replayed)
        assert results == [2.0, 3.0, 3.0, 3.0] and f.calls["replayed"] == 2
        return
    assert (CONFIG.calls, CONFIG.inner.calls, LOGGER.seen) == {
        "cfg.calls += 1": (4, 0, 0), "cfg.inner.calls += 1": (0, 4, 0), "logger.log()": (0, 0, 4)}[change]
    assert f.calls == {"traced": 2, "replayed": 0, "eager": 2}


def _take_request(x):
    try:
        del CONFIG.request  # (a one-shot request the caller may set: taken, and gone)
    except AttributeError:
        return x * 2.0
    return x * 0.0


def test_a_global_objects_attribute_the_function_only_deletes_is_checked():
    """``del cfg.request`` where no code reads the attribute (a one-shot request the
    caller sets, taken in a ``try``): the deletion is a change a replay would not make,
    and a request set since is one the call must see (replays once took the first
    call's branch, and left every later request in place)."""
    vars(CONFIG).pop("request", None)
    f = lp.compile(_take_request, fuse=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")  # (traced again, then eagerly: it changes what it names)
        for requested in [True, False, False, True, False, False]:
            x = Tensor(np.ones(2))
            if requested:
                CONFIG.request = True
            want = _take_request(x)
            if requested:
                CONFIG.request = True
            same(f(x), want)
            assert not hasattr(CONFIG, "request")


def test_what_a_global_object_holds_is_checked_as_the_code_reads_it():
    """The attributes loaded right on a global object's name are checked: not another
    object's of the same name (``CONFIG.step``, a loop's counter, beside a call of
    ``TICKER.update``'s kind), the items of a list attribute (``CONFIG.weights[0] =
    3.0``), and all of an object served by ``__getattr__``."""
    CONFIG.scale, CONFIG.weights, CONFIG.update, CONFIG.train = 2.0, [1.0], 0, _Config()
    CONFIG.train.lr = 1.0

    def step(x):
        TICKER.update()
        return (x * CONFIG.scale * CONFIG.weights[0] * SETTINGS.scale * CONFIG.train.lr).sum()

    f = lp.compile(step, fuse=False)
    x = Tensor(np.ones(3))
    for k in range(3):
        CONFIG.update = k  # (named like TICKER's method the code calls: not read on CONFIG)
        assert float(f(x)) == 12.0
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        CONFIG.weights[0] = 3.0
        assert float(f(x)) == 36.0
        SETTINGS._values["scale"] = 1.0
        assert float(f(x)) == 18.0
        assert float(f(x)) == 18.0  # (a replay between: three changes in a row would run eagerly)
        CONFIG.train.lr = 0.5  # (an attribute of an attribute)
        assert float(f(x)) == 9.0
    assert f.calls == {"traced": 4, "replayed": 3, "eager": 0}


class _OutsideContext:
    """A context-local proxy as flask's ``request``: outside its context, asking for its
    class or any attribute raises (as ``isinstance`` does)."""

    @property
    def __class__(self):
        raise RuntimeError("working outside of request context")

    def __getattr__(self, name):
        raise RuntimeError("working outside of request context")

    def __iter__(self):  # (werkzeug's LocalProxy has the iterator protocol on its class)
        raise RuntimeError("working outside of request context")

    def __next__(self):
        raise RuntimeError("working outside of request context")


REQUEST = _OutsideContext()


def test_a_proxy_that_raises_outside_its_context_is_left_alone():
    """A global, a closure's value, a default or an owner's attribute that raises when
    asked for its class is not looked into: the step traces and replays (the compiler
    crashed in its scan of what the function reads before)."""
    proxy = _OutsideContext()

    class Owner:  # (not a Module: PyTorch's refuses such an attribute, as its class cannot be asked for)
        def __init__(self):
            self.w = Tensor(np.ones(3), requires_grad=True)
            self.request = proxy

        def forward(self, x, r=proxy):
            if x.shape[0] == 7:
                return REQUEST.args, proxy.form, r.json, self.request.files
            return (x * self.w).sum().item()

    owner = Owner()
    f = lp.compile(owner.forward, fuse=False)
    assert [f(Tensor(np.ones(3))) for _ in range(3)] == [3.0] * 3
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}


HYPER = {"scale": 2.0, "train": {"lr": 1.0}}
COUNTS = {"calls": 0}
SHIFT = 0.0


class _Hyper:
    """A class used as a configuration (its attributes, not an instance's)."""

    scale = 2.0


class _ShiftedLayer(nn.Module):
    """A layer whose forward reads a global of the script's."""

    def forward(self, x):
        return x + SHIFT


def _scaled(x):
    """A helper of the script's that reads a global number."""
    return x * SHIFT


def test_a_global_dicts_items_set_between_calls_trace_again():
    """``HYPER["scale"]`` and ``HYPER["train"]["lr"]`` read by the function: set between
    calls, the call traces again (a replay kept the trace's numbers before, silently)."""
    HYPER["scale"], HYPER["train"]["lr"] = 2.0, 1.0
    f = lp.compile(lambda x: (x * HYPER["scale"] * HYPER["train"]["lr"]).sum(), fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 6.0
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        HYPER["scale"] = 3.0
        assert float(f(x)) == 9.0
        HYPER["train"]["lr"] = 0.5
        assert float(f(x)) == 4.5
    assert float(f(x)) == 4.5
    assert f.calls == {"traced": 3, "replayed": 2, "eager": 0}


def test_a_global_dict_the_function_changes_runs_it_eagerly():
    """``COUNTS["calls"] += 1`` in the function: a replay would not count (it did not,
    silently): the function runs eagerly, and every call counts."""
    COUNTS["calls"] = 0

    def step(x):
        COUNTS["calls"] += 1
        return (x * 2.0).sum()

    f = lp.compile(step, fuse=False)
    with pytest.warns(RuntimeWarning, match="COUNTS"):
        for _ in range(4):
            assert float(f(Tensor(np.ones(3)))) == 6.0
    assert COUNTS["calls"] == 4
    assert f.calls["replayed"] == 0


def test_a_config_module_and_class_read_by_the_function_are_checked(tmp_path, monkeypatch):
    """``config.scale`` of a module of the user's (``import config``) and ``Config.scale``
    of a class: set between calls, the call traces again. A library's module (``np``,
    ``lp``) is not looked into: its attributes are no configuration."""
    (tmp_path / "lp_test_config.py").write_text("scale = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lp_test_config as config

    _Hyper.scale = 2.0
    f = lp.compile(lambda x: (x * config.scale * _Hyper.scale * np.float64(1.0)).sum(), fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 12.0
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        config.scale = 3.0
        assert float(f(x)) == 18.0
        _Hyper.scale = 1.0
        assert float(f(x)) == 9.0
    assert f.calls == {"traced": 3, "replayed": 1, "eager": 0}
    assert any(obj is config for entry in f._entries.values() for obj, _ in entry.named)
    assert not any(obj is np or obj is lp for entry in f._entries.values() for obj, _ in entry.named)


def _scaled_by(x, cfg):
    """A helper given the configuration: what it reads of it is not in the step's code."""
    return x * cfg.scale


class _Stepper:
    """A trainer whose step calls a method of its own that reads an attribute."""

    def __init__(self):
        self.scale = 2.0

    def scaled(self, x):
        return x * self.scale

    def step(self, x):
        return self.scaled(x).sum()


def _aliased(x):
    c = CONFIG
    return (x * c.scale).sum()


_PASSED_ON = {  # (each its own code: what it names decides what is checked)
    "passed to a helper": lambda x: _scaled_by(x, CONFIG).sum(),
    "a local alias": _aliased,
    "getattr()": lambda x: (x * getattr(CONFIG, "scale")).sum(),  # noqa: B009 - getattr is what is tested
    "an argument passed to a helper": lambda x, cfg: _scaled_by(x, cfg).sum(),
    "the owner, in its own method": None,
}


@pytest.mark.parametrize("how", list(_PASSED_ON))
def test_a_configuration_used_other_than_by_its_attributes_is_checked_whole(how):
    """A global object passed to a helper (``helper(x, cfg)``), aliased (``c = cfg``) or
    read with ``getattr``; an argument passed on; the compiled method's object read in
    another method of its own: what is read of it is not in the step's code, so all of
    its attributes (or those the helpers reached name) are checked, and a new scale
    traces again (a replay kept the trace's before, silently)."""
    CONFIG.scale = 2.0
    stepper = _Stepper()
    step = stepper.step if how.startswith("the owner") else _PASSED_ON[how]
    f = lp.compile(step, fuse=False)
    extra = (CONFIG,) if how.startswith("an argument") else ()
    x = Tensor(np.ones(3))
    assert float(f(x, *extra)) == float(f(x, *extra)) == 6.0
    stepper.scale = CONFIG.scale = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(f(x, *extra)) == 9.0
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


ITERS = {}
_SECOND = {"scale": 2.0}


class _MixUp:
    """A plain augmentation object of the script's: its ``__call__`` draws on NumPy's
    global generator."""

    def __call__(self, x):
        return x * np.random.beta(0.4, 0.4)  # noqa: NPY002 - the legacy global generator is what is tested


class _Noise:
    def apply(self, x):
        return x * np.random.default_rng().uniform()


class _NoisyBlock(nn.Module):
    """A layer whose forward calls a helper method of its own that draws."""

    def forward(self, x):
        return self._noise(x)

    def _noise(self, x):
        return x * random.random()


_MIX, _NOISE, _BLOCK = _MixUp(), _Noise(), _NoisyBlock()


class _MixTrainer:
    def __init__(self):
        self.mix = _MixUp()

    def step(self, x):
        return self.mix(x).sum()


_UNVISITED_DRAWS = {
    "a plain object's __call__": lambda x: _MIX(x).sum(),
    "an object's plain object": _MixTrainer().step,
    "a plain object's method": lambda x: _NOISE.apply(x).sum(),
    "a layer's helper method": lambda x: _BLOCK(x).sum(),
}


@pytest.mark.parametrize("source", list(_UNVISITED_DRAWS))
def test_a_draw_in_a_method_the_code_reaches_runs_the_call_eagerly(source):
    """The methods of the user's classes of the plain objects and layers the code reaches
    are followed (a ``MixUp`` object's ``__call__``, a layer's helper method): a number
    drawn there on the host runs the call eagerly (a replay reused the trace's before,
    silently; found by review)."""
    compiled = lp.compile(_UNVISITED_DRAWS[source], fuse=False)
    x = Tensor(np.arange(1.0, 4.0))
    with pytest.warns(RuntimeWarning, match="drawn on the host outside LeanPass"):
        values = {float(compiled(x)) for _ in range(4)}
    assert len(values) == 4 and compiled.calls["replayed"] == 0


def _from_default(it=None):
    return next(it).sum()


@pytest.mark.parametrize("where", ["a global dict", "an object's dict", "a partial", "a default"])
def test_an_iterator_held_in_a_container_a_partial_or_a_default_runs_the_call_eagerly(where):
    """``next(ITERS["train"])``, ``next(self.loaders["train"])``, an iterator bound by
    ``functools.partial`` or as a default argument: counted as advanced, so each call
    runs eagerly on its own batch (the first batch was replayed before; found by review)."""
    batches = [Tensor(np.full(3, float(k))) for k in range(6)]
    ITERS["train"] = iter(batches)
    trainer = _Trainer2({"train": iter(batches)})
    trainer.step = lambda: next(trainer.data["train"]).sum()
    step = {"a global dict": lambda: next(ITERS["train"]).sum(),
            "an object's dict": None,
            "a partial": functools.partial(lambda it: next(it).sum(), iter(batches)),
            "a default": functools.partial(_from_default)}[where]
    if where == "a default":
        _from_default.__defaults__ = (iter(batches),)
        step = _from_default
    if where == "an object's dict":
        step = _Trainer3(iter(batches)).step
    f = lp.compile(step, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert [float(f()) for _ in range(4)] == [0.0, 3.0, 6.0, 9.0]
    assert f.calls["replayed"] == 0


class _Trainer3:
    def __init__(self, it):
        self.loaders = {"train": it}

    def step(self):
        return next(self.loaders["train"]).sum()


class _ScaledLayer(nn.Module):
    """A layer with a plain configuration object of its own, read in its forward."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, x):
        return x * self.cfg.scale * self._shift()

    def _shift(self):
        return _SECOND["scale"] / 2.0  # (a global read in a helper method)


def _scale_of(x, cfg):
    return x * cfg.scale


@pytest.mark.parametrize("case", ["a config module passed on", "an object in a global dict",
                                  "a dict inside a dict of tensors", "a layer's config object",
                                  "a global a layer's helper method reads", "a default dict", "a partial's dict"])
def test_configuration_reads_found_by_a_second_review_trace_again(case, tmp_path, monkeypatch):
    """Each of these read the trace's value at every replay, silently: a config module
    passed to a helper, an object held in a global dict, a dict of numbers inside a dict
    that also holds a tensor, a layer's plain configuration object and a global its
    helper method reads, a dict given as a default argument or bound by a partial."""
    (tmp_path / "lp_test_config2.py").write_text("scale = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = importlib.import_module("lp_test_config2")
    aug, hp = _Config(), {"scale": 2.0}
    aug.scale = 2.0
    box = {"aug": aug, "buf": Tensor(np.ones(3)), "hp": hp}
    layer = _ScaledLayer(aug)
    _SECOND["scale"] = 2.0

    def from_default(x, h=hp):
        return (x * h["scale"]).sum()

    step, change = {
        "a config module passed on": (lambda x: _scale_of(x, config).sum(), lambda: setattr(config, "scale", 3.0)),
        "an object in a global dict": (lambda x: (x * box["aug"].scale).sum(), lambda: setattr(aug, "scale", 3.0)),
        "a dict inside a dict of tensors": (lambda x: (x * box["buf"] * box["hp"]["scale"]).sum(),
                                            lambda: hp.update(scale=3.0)),
        "a layer's config object": (lambda x: layer(x).sum(), lambda: setattr(aug, "scale", 3.0)),
        "a global a layer's helper method reads": (lambda x: layer(x).sum(), lambda: _SECOND.update(scale=3.0)),
        "a default dict": (from_default, lambda: hp.update(scale=3.0)),
        "a partial's dict": (functools.partial(lambda x, h: (x * h["scale"]).sum(), h=hp),
                             lambda: hp.update(scale=3.0)),
    }[case]
    f = lp.compile(step, fuse=False)
    x = Tensor(np.ones(3))
    first = float(f(x))
    assert float(f(x)) == first == 6.0
    change()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(f(x)) == 9.0
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


_LOSS_REGISTRY = {"scaled": lambda out: (out * (1.0 - HYPER["smoothing"])).sum()}


class _Lookup:
    """A mapping of the user's: its values in a dict of its own."""

    def __init__(self, **values):
        self._values = values

    def __getitem__(self, key):
        return self._values[key]


_LOOKUP = _Lookup(scale=2.0)


def _chained_alias(x):
    a = b = HYPER  # noqa: F841 - the second name is what is tested
    return (x * a["scale"]).sum()


def _scale_by_hyper(x):
    return x * HYPER["scale"]


_WHOLE_DICT_READERS = {  # (each its own code)
    "a function kept in a dict": (lambda x: _LOSS_REGISTRY["scaled"](x * 2.0), "smoothing", 0.5, 3.0),
    "a mapping of the user's": (lambda x: (x * _LOOKUP["scale"]).sum(), None, 3.0, 9.0),
    "a chained alias": (_chained_alias, "scale", 3.0, 9.0),
    "a helper passed in": (lambda x, fn=_scale_by_hyper: fn(x).sum(), "scale", 3.0, 9.0),
}


@pytest.mark.parametrize("reader", list(_WHOLE_DICT_READERS))
def test_a_dict_a_reader_the_walk_does_not_reach_reads_is_checked_whole(reader):
    """A dict the step subscripts with constant keys is compared whole: another reader
    may read any key (a function kept in a dict, one passed in, a chained alias, a
    mapping's own dict). A first version compared the keys the step's code names alone,
    and replayed stale values there (found by review); a counter the script keeps in a
    dict the step reads therefore traces it again at every call: keep it elsewhere."""
    HYPER.update(smoothing=0.0, scale=2.0)
    _LOOKUP._values["scale"] = 2.0
    step, key, value, expected = _WHOLE_DICT_READERS[reader]
    f = lp.compile(step, fuse=False)
    x = Tensor(np.ones(3))
    assert float(f(x)) == float(f(x)) == 6.0
    if key is None:
        _LOOKUP._values["scale"] = value
    else:
        HYPER[key] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert float(f(x)) == expected == float(step(x))
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


HOOK_FREE = {"hidden": 16, "global_step": 0, "loss": []}


class _TrainerWithHabits:
    """A trainer whose loop keeps a counter, metrics and its data's iterator on itself
    and calls a model method, none of which its compiled step reads."""

    def __init__(self, data):
        lp.manual_seed(0)
        self.model = _RecordingNet()
        self.opt = lp.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.global_step, self.metrics, self.batches = 0, {"loss": 0.0}, iter(data)
        self.train_step = lp.compile(self._step, fuse=False)

    def _step(self, x, y):
        self.opt.zero_grad()
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def on_step_end(self, loss):
        self.global_step += 1
        self.metrics["loss"] = float(loss)
        self.model.record(loss)

    def fit(self, steps):
        for _ in range(steps):
            self.on_step_end(self.train_step(*next(self.batches)))


class _RecordingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, HOOK_FREE["hidden"], dtype="float64"), nn.ReLU(),
                                  nn.Linear(HOOK_FREE["hidden"], 3, dtype="float64"))

    def forward(self, x):
        return self.body(x)

    def record(self, loss):
        HOOK_FREE["global_step"] += 1
        HOOK_FREE["loss"].append(float(loss))


def test_a_trainers_habits_outside_its_step_leave_the_step_replaying():
    """What a training loop changes outside the compiled step (a counter and metrics on
    the trainer, its data's iterator, a model method that logs into a global dict the
    model's ``__init__`` read) is not read by the step: it replays (a first version
    followed every method of the user's classes, and traced every call; found by review)."""
    rng = np.random.default_rng(0)
    data = [(Tensor(rng.normal(size=(8, 4))), lp.asarray(rng.integers(0, 3, size=8))) for _ in range(6)]
    trainer = _TrainerWithHabits(data)
    trainer.fit(6)
    assert trainer.train_step.calls == {"traced": 1, "replayed": 5, "eager": 0}


@pytest.mark.parametrize("case", ["a hooked head", "post hooks and a gradient penalty"])
def test_a_leaf_hooked_before_the_trace_does_not_trace_every_call(case):
    """A leaf of a watched pass that had its hook at the trace already (one head of two
    clamps its gradient; post-accumulate hooks on a critic's parameters beside a
    gradient penalty): only a hook added since traces again (every call traced before;
    found by review)."""
    lp.manual_seed(0)
    if case == "a hooked head":
        body = nn.Embedding(6, 4, dtype="float64")
        heads = [nn.Linear(4, 6, dtype="float64") for _ in range(2)]
        heads[1].weight.register_hook(lambda g: g.clamp(-1.0, 1.0))
        opt = lp.optim.SGD([*body.parameters(), *heads[0].parameters(), *heads[1].parameters()], lr=0.1)

        def step(t1, t2):
            opt.zero_grad()
            total = 0.0
            for head, t in zip(heads, (t1, t2)):
                loss = nn.functional.cross_entropy(head(body(t[:, :-1])).reshape((-1, 6)), t[:, 1:].reshape((-1,)))
                loss.backward()
                total = total + loss.detach()
            opt.step()
            return total

        rng = np.random.default_rng(0)
        make = lambda: (lp.asarray(rng.integers(0, 6, size=(2, 5))), lp.asarray(rng.integers(0, 6, size=(2, 5))))  # noqa: E731
    else:
        critic = nn.Sequential(nn.Linear(3, 8, dtype="float64"), nn.Tanh(), nn.Linear(8, 1, dtype="float64"))
        for p in critic.parameters():
            p.register_post_accumulate_grad_hook(lambda p: None)
        opt = lp.optim.SGD(critic.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            x = x.detach().requires_grad_(True)
            out = critic(x).sum()
            (g,) = lp.autograd.grad(out, [x], create_graph=True)
            loss = out + ((g * g).sum() - 1.0) ** 2
            loss.backward()
            opt.step()
            return loss.detach()

        rng = np.random.default_rng(0)
        make = lambda: (Tensor(rng.normal(size=(4, 3))),)  # noqa: E731
    f = lp.compile(step, fuse=False)
    for _ in range(5):
        f(*make())
    assert f.calls == {"traced": 1, "replayed": 4, "eager": 0}


class _RaisingProxy:
    def __getattr__(self, name):
        raise RuntimeError("working outside of request context")


class _AugmentWithProxy:
    request = _RaisingProxy()  # (a class attribute whose __getattr__ raises)

    def __call__(self, x):
        return x * 2.0


_AUGMENT = _AugmentWithProxy()


def test_a_class_attribute_whose_getattr_raises_does_not_crash_the_walk():
    f = lp.compile(lambda x: _AUGMENT(x).sum(), fuse=False)
    assert [float(f(Tensor(np.ones(3)))) for _ in range(2)] == [6.0, 6.0]


def test_a_script_read_from_stdin_has_its_classes_walked():
    """A script piped into Python (``__file__`` is ``<stdin>``) is the user's: its
    ``MixUp`` object's draw runs the step eagerly (replayed stale before; found by review)."""
    script = (
        "import numpy as np, warnings, leanpass as lp\n"
        "warnings.simplefilter('ignore')\n"
        "class MixUp:\n"
        "    def __call__(self, x):\n"
        "        return x * np.random.beta(0.4, 0.4)\n"
        "mix = MixUp()\n"
        "f = lp.compile(lambda x: mix(x).sum())\n"
        "print(len({float(f(lp.ones(3))) for _ in range(4)}), f.calls['replayed'])\n")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["4", "0"], done.stderr


def test_one_global_named_by_many_layers_is_checked_once():
    """Thirty layer classes reading one global dict: it is one entry of the checks (each
    made its own copy before, 30 times the cost; found by review)."""
    layers = []
    for k in range(30):  # (each forward its own code, as thirty classes' are)
        space: dict = {}
        exec(compile("def forward(self, x):\n    return x * HYPER['scale']\n", f"<layer {k}>", "exec"),
             globals(), space)
        layers.append(type(f"Layer{k}", (nn.Module,), {"forward": space["forward"]})())
    HYPER["scale"] = 2.0
    model = nn.Sequential(*layers)
    f = lp.compile(lambda x: model(x).sum(), fuse=False)
    f(Tensor(np.ones(2)))
    entry = next(iter(f._entries.values()))
    assert sum(obj is HYPER for obj, _ in entry.named) == 1


def test_untaken_code_naming_a_deprecated_module_attribute_traces_quietly():
    """A step naming ``np.core`` (deprecated: NumPy warns when it is read) in a branch it
    does not take: the compiler reads no module attribute through ``__getattr__``, so no
    warning is raised there (it crashed under an error filter; found by review)."""
    def step(x):
        if x.shape[0] == 7:
            return np.core.multiarray.dot(x, x)
        return (x * 2.0).sum()

    f = lp.compile(step, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for _ in range(2):
            assert float(f(Tensor(np.ones(3)))) == 6.0


def test_a_hook_on_another_call_s_argument_keeps_the_check_in_place():
    """The trace's argument had no hook, a later call's has one (registered before the
    trace) that pads the second micro-batch's targets: that call traces again, where the
    check stays behind the pass, and gives eager's result (the replay moved the check
    past the pass before; found by review). Hooks registered and removed on another
    model each step leave the step replaying."""
    def world():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Embedding(6, 4, dtype="float64"), nn.Linear(4, 6, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1)

        def step(w, tok1, tok2):
            opt.zero_grad()
            total = 0.0
            for tok in (tok1, tok2):
                loss = nn.functional.cross_entropy(model(tok[:, :-1]).reshape((-1, 6)) * w,
                                                   tok[:, 1:].reshape((-1,)), ignore_index=0)
                loss.backward()
                total = total + loss.detach()
            opt.step()
            return total

        return step

    rng = np.random.default_rng(0)
    tokens = [[rng.integers(1, 6, size=(2, 5)) for _ in range(2)] for _ in range(4)]
    probe = nn.Linear(2, 2)

    def make(k):
        t1, t2 = lp.asarray(tokens[k][0].copy()), lp.asarray(tokens[k][1].copy())
        w = Tensor(np.ones(1), requires_grad=True)
        if k == 3:
            def pad(g, t2=t2):
                t2[0, 3] = 0
                return g

            w.register_hook(pad)
        return w, t1, t2

    calls = [[make(k) for k in range(4)] for _ in range(2)]
    eager, compiled = world(), lp.compile(world(), fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(4):
            probe.weight.register_hook(lambda g: g).remove()  # (another model's hooks, each step)
            same(compiled(*calls[1][k]), eager(*calls[0][k]))
    assert compiled.calls == {"traced": 2, "replayed": 2, "eager": 0}


def test_a_function_of_a_users_module_and_what_it_reads_are_checked(tmp_path, monkeypatch):
    """``utils.scale(x)``, ``utils`` a module of the user's: what ``scale`` reads by name
    (the module's ``FACTOR``) is checked, so a new factor traces again; the module's
    other names are not (a count the script keeps there, changed between calls, leaves
    the step replaying; a first version compared all of such a module on Python 3.10,
    whose code calls its functions as methods, or where it was bound by importlib)."""
    (tmp_path / "lp_test_utils.py").write_text(
        "FACTOR = 2.0\nCALLS = 0\n\n\ndef scale(x):\n    return x * FACTOR\n\n\n"
        "def count():\n    global CALLS\n    CALLS += 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    utils = importlib.import_module("lp_test_utils")
    f = lp.compile(lambda x: utils.scale(x).sum(), fuse=False)
    x = Tensor(np.ones(3))
    for _ in range(3):
        assert float(f(x)) == 6.0
        utils.count()
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}
    utils.FACTOR = 3.0
    assert float(f(x)) == 9.0
    assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("reader", ["a helper", "a layer's forward"])
def test_a_global_a_helper_or_a_layer_reads_rebound_traces_again(reader):
    """A global number a helper function or a layer's ``forward`` reads (not the
    function itself): rebound between calls, the call traces again (a replay kept the
    trace's before, silently)."""
    global SHIFT
    SHIFT = 1.0
    layer = _ShiftedLayer()
    step = (lambda x: _scaled(x).sum()) if reader == "a helper" else (lambda x: layer(x).sum())
    f = lp.compile(step, fuse=False)
    x = Tensor(np.ones(3))
    expected = (lambda: 3.0 * SHIFT) if reader == "a helper" else (lambda: 3.0 + 3.0 * SHIFT)
    assert float(f(x)) == float(f(x)) == expected()
    SHIFT = 2.0
    assert float(f(x)) == expected()
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


class _Batches:
    """An iterator object of the user's: a data loader's iterator, by its index."""

    def __init__(self, batches):
        self.batches, self.index = batches, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.index += 1
        return self.batches[self.index - 1]


class _Trainer2:
    """A trainer that keeps its data's iterator (``next(self.data)`` in its step)."""

    def __init__(self, data):
        self.data = data

    def step(self):
        return next(self.data).sum()


def _generate(batches):
    for batch in batches:  # noqa: UP028 - the loop's variable is what shows the generator moved
        yield batch


def _delegate(batches):
    yield from batches


class _Endless:
    """An endless loader's iterator: its state is the iterator it wraps (``self.it``)."""

    def __init__(self, batches):
        self.batches, self.it = batches, iter(batches)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.batches)
            return next(self.it)


def _sampled(batches):
    """A generator whose frame looks the same after each ``yield`` (same instruction,
    same locals): it samples its next batch from a generator it holds."""
    rng = np.random.default_rng(5)
    while True:
        yield batches[int(rng.integers(0, len(batches)))]


@pytest.mark.parametrize("kind", ["iter(list)", "a generator", "yield from", "an iterator object",
                                  "an object's iterator", "a wrapping iterator", "a sampling generator"])
def test_next_of_an_iterator_the_function_names_runs_it_eagerly(kind):
    """``x = next(it)`` in the step, ``it`` a global's, a closure's or an object's: a
    replay would not advance it, and read the first batch again (silently, before):
    the call runs eagerly, each call on its own batch, as eagerly."""
    batches = [Tensor(np.full(3, float(k))) for k in range(6)]
    data = {"iter(list)": lambda: iter(batches), "a generator": lambda: _generate(batches),
            "yield from": lambda: _delegate(batches), "a wrapping iterator": lambda: _Endless(batches),
            "a sampling generator": lambda: _sampled(batches),
            "an iterator object": lambda: _Batches(batches), "an object's iterator": lambda: iter(batches)}[kind]()
    trainer = _Trainer2(data)
    f = lp.compile(trainer.step if kind == "an object's iterator" else (lambda: next(data).sum()), fuse=False)
    expected = [0.0, 3.0, 6.0, 9.0]
    if kind == "a sampling generator":
        rng = np.random.default_rng(5)
        expected = [3.0 * int(rng.integers(0, 6)) for _ in range(4)]
    with pytest.warns(RuntimeWarning, match=r"an iterator it names advanced"):
        assert [float(f()) for _ in range(4)] == expected
    assert f.calls["replayed"] == 0


def test_an_argument_attribute_read_through_its_class_is_checked():
    """``c.scale`` where the trace found it on the class: set later on the object, or
    changed on the class, it traces again (a replay kept the trace's value before)."""
    class Cfg:
        scale = 2.0

    cfg = Cfg()
    f = lp.compile(lambda x, c: x * c.scale, fuse=False)
    same(f(Tensor(np.ones(2)), cfg), [2.0, 2.0])
    same(f(Tensor(np.ones(2)), cfg), [2.0, 2.0])
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        Cfg.scale = 4.0
        same(f(Tensor(np.ones(2)), cfg), [4.0, 4.0])
        cfg.scale = 3.0
        same(f(Tensor(np.ones(2)), cfg), [3.0, 3.0])
        same(f(Tensor(np.ones(2)), cfg), [3.0, 3.0])  # (a replay between: three changes in a row run eagerly)
        del cfg.scale
        same(f(Tensor(np.ones(2)), cfg), [4.0, 4.0])
    same(f(Tensor(np.ones(2)), cfg), [4.0, 4.0])
    assert f.calls == {"traced": 4, "replayed": 3, "eager": 0}

    class Scaler:  # no plain attribute its code reads at the trace: a method, later shadowed on the object
        def scale(self):
            return 2.0

    scaler = Scaler()
    g = lp.compile(lambda x, c: x * c.scale(), fuse=False)
    g(Tensor(np.ones(2)), scaler)
    g(Tensor(np.ones(2)), scaler)
    scaler.scale = lambda: 3.0
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        same(g(Tensor(np.ones(2)), scaler), [3.0, 3.0])
    assert g.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_a_name_bound_to_another_tensor_or_model_traces_again():
    """The closure cells and globals the function names are checked before a replay:
    another object there (a new model, another tensor) traces again."""
    w = Tensor(np.array([1.0, 2.0]))
    f = lp.compile(lambda x: x * w)
    same(f(Tensor(np.ones(2))), [1.0, 2.0])
    same(f(Tensor(np.ones(2))), [1.0, 2.0])
    w = Tensor(np.array([5.0, 6.0]))  # noqa: F841 - read by the lambda
    same(f(Tensor(np.ones(2))), [5.0, 6.0])
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_state_changed_in_place_outside_the_graph_is_replayed(device):
    """A buffer updated under no_grad (as a running statistic) and .grad reset inside
    the function: each replay does it again."""
    buf = Tensor(np.zeros(3), device=device)
    w = Tensor(np.ones(3), requires_grad=True, device=device)

    def step(x):
        w.grad = None
        with lp.no_grad():
            buf.__imul__(0.5)
            buf.__iadd__(x * 0.5)
        loss = (w * x).sum()
        loss.backward()
        return loss

    f = lp.compile(step)
    for k in range(1, 4):
        x = Tensor(np.full(3, float(k)), device=device)
        f(x)
        same(w.grad, np.full(3, float(k)))
    same(buf, np.full(3, 0.125 * 1 + 0.25 * 2 + 0.5 * 3))
    assert f.calls["replayed"] == 2


@pytest.mark.parametrize("what, body", [
    ("item()", lambda x: x.sum() * x.sum().item()),
    ("float()", lambda x: x * float(x.sum())),
    ("bool()", lambda x: x * 2.0 if bool(x.sum() > 0) else x),
    ("random draw", lambda x: x * (lp.manual_seed(1) or lp.rand(4))),  # (the draws are drawn again: below)
    ("Tensor.data", lambda x: Tensor(x.data * 2.0)),
])
def test_what_a_replay_cannot_reproduce_runs_eagerly_with_one_warning(what, body):
    f = lp.compile(body)
    lp.manual_seed(0)
    x = Tensor(np.array([0.5, 1.5, -2.0, 3.0]))
    with pytest.warns(RuntimeWarning, match="runs eagerly for these arguments"):
        first = f(x)
    lp.manual_seed(0)
    expected = body(x)
    same(first, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per function and reason
        lp.manual_seed(0)
        same(f(x), expected)
    assert f.calls == {"traced": 1, "replayed": 0, "eager": 1}
    assert "eager:" in f.explain()


@pytest.mark.parametrize("fuse", [True, False])
def test_a_hand_written_update_through_grad_is_replayed_as_eager_bit_for_bit(device, fuse):
    """``p.grad`` read in the call is a Tensor on the gradient's array, which a replay
    reads again at that point: an update written by hand (the gradient scaled in place
    and given back, ``p -= lr * p.grad``, a leaf's zeros read before any gradient came)
    replays, and gives eager's parameters and results, bit for bit."""
    def setup():
        model = mlp(device)
        params = list(model.parameters())
        spare = Tensor(np.zeros(3), requires_grad=True, device=device)  # no gradient ever reaches it

        def step(x, y):
            for p in params:
                p.grad = None
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            with lp.no_grad():
                for p in params:
                    p.grad *= 0.5
                    p -= 0.1 * p.grad
                spare.grad += 1.0  # zeros made at the first read, each call, as eagerly
            return loss, params[0].grad, spare.grad

        return step, params, spare

    eager, params, spare = setup()
    step, compiled_params, compiled_spare = setup()
    compiled = lp.compile(step, fuse=fuse)
    for _ in range(4):
        x = Tensor(RNG.normal(size=(8, 6)), device=device)
        y = lp.asarray(RNG.integers(0, 3, size=8), device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback
            got = compiled(x, y)
        want = eager(x, y)
        for a, b in zip(got, want):
            same(a, b)
        assert isinstance(got[1], Tensor)  # inside a compiled function .grad reads as a Tensor
        for p, q in zip(compiled_params, params):
            same(p, q)
        same(compiled_spare.grad, spare.grad)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def _twins(body, compiled_warns=None, calls=4):
    """``body(w, x)`` eagerly and compiled on twin leaves ``w``, several calls: the
    same results and gradients each time; ``compiled_warns``: the fallback's words."""
    ws = [Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True) for _ in range(2)]
    compiled = lp.compile(lambda x: body(ws[1], x))
    for k in range(calls):
        x = Tensor(np.array([1.0, 2.0, 3.0]) * (k + 1))
        want = body(ws[0], x)
        if compiled_warns and k == 0:
            with pytest.warns(RuntimeWarning, match=compiled_warns):
                got = compiled(x)
        else:
            got = compiled(x)
        for a, b in zip(got, want):
            same(a, b)
        same(ws[1].grad, ws[0].grad)
    return compiled


def test_a_gradient_handle_read_before_it_is_given_back_stays_apart_as_eagerly():
    """``w.grad *= 0.5`` sets ``.grad`` to a copy (the setter's): a handle read before
    is another array, which a replay leaves apart too."""
    def body(w, x):
        w.grad = None
        (w * x).sum().backward()
        with lp.no_grad():
            g = w.grad
            w.grad *= 0.5
            g *= 0.0
        return (x,)

    assert _twins(body).calls["replayed"] == 3


def test_a_gradient_changed_in_place_in_the_graph_runs_eagerly():
    """With grad on and an operand that requires grad, the change of a gradient read
    from ``.grad`` is recorded in the graph, where a replay would make it out of place
    (and never write the gradient): the call runs eagerly, with eager's values."""
    def body(w, x):
        w.grad = None
        (w * x).sum().backward()
        g = lp.as_tensor(w.grad)  # (the array eagerly, the Tensor compiled: a Tensor on it either way)
        g += 0.1 * w
        w.grad = g
        return (x,)

    compiled = _twins(body, "of a gradient read from .grad")
    assert compiled.calls["replayed"] == 0


def test_has_grad_and_a_tensor_gradient_run_eagerly():
    def decay(w, x):  # LeanPass's "if p.grad is None": a Python bool a replay would not read again
        loss = (w * x).sum()
        if x.shape[0] == 3:
            loss.backward()
        with lp.no_grad():
            if w.has_grad:
                w -= 0.1 * w.grad
        return (x,)

    assert _twins(decay, "has_grad").calls["replayed"] == 0
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    (w * w).sum().backward(create_graph=True)  # .grad holds a Tensor in a graph
    compiled = lp.compile(lambda x: x * w.grad)
    with pytest.warns(RuntimeWarning, match="Tensor.grad holding a Tensor"):
        same(compiled(Tensor(np.ones(2))), np.array([2.0, 4.0]))


def test_a_gradient_handed_in_is_not_taken_for_the_tensors_own():
    """``w.grad = h`` with ``h`` on ``w``'s gradient array at the trace, but handed in
    (an argument): not the gradient read and given back, so the call runs eagerly."""
    ws = [Tensor(np.ones(3), requires_grad=True) for _ in range(2)]

    def body(w, h):
        w.grad = h
        with lp.no_grad():
            w.sub_(0.1 * w.grad)

    compiled = lp.compile(lambda h: body(ws[1], h))
    for w in ws:
        (w * 2.0).sum().backward()
    for k in range(3):
        hs = [lp.as_tensor(w.grad) if k == 0 else Tensor(np.full(3, 10.0 * k)) for w in ws]
        body(ws[0], hs[0])
        if k == 0:
            with pytest.warns(RuntimeWarning, match="Tensor.grad = an array"):
                compiled(hs[1])
        else:
            compiled(hs[1])
        same(ws[1], ws[0])
        same(ws[1].grad, ws[0].grad)


def test_a_gradient_set_to_a_tensor_between_calls_makes_that_call_eager():
    """A gradient the call reads, set to a Tensor in a graph since the trace (a
    ``backward(create_graph=True)`` outside): the replay would meet it after changing
    state, so the call runs eagerly instead, before anything changed."""
    def make():
        w, v = Tensor(np.ones(3), requires_grad=True), Tensor(np.full(3, 2.0), requires_grad=True)

        def step(x):
            (w * x).sum().backward()
            with lp.no_grad():
                w.sub_(0.1 * w.grad)
                v.sub_(0.1 * v.grad)
            w.grad = None
            v.grad = None

        return step, w, v

    (eager, we, ve), (step, wc, vc) = make(), make()
    compiled = lp.compile(step)
    for k in range(3):
        x = Tensor(np.arange(3.0) + k)
        if k == 2:
            for v in (ve, vc):
                (v * v * x).sum().backward(create_graph=True)
        eager(x)
        if k == 2:
            with pytest.warns(RuntimeWarning, match="holds a Tensor"):
                compiled(x)
        else:
            compiled(x)
        same(wc, we)
        same(vc, ve)
    assert compiled.calls == {"traced": 1, "replayed": 1, "eager": 1}


def test_a_leaf_argument_and_a_value_of_a_graph_are_two_traces():
    """A leaf that requires grad gets a .grad from a backward in the call; a value of
    a graph made outside does not (its leaves do): not the same kind of argument."""
    def f(x):
        (x * x).sum().backward()

    compiled = lp.compile(f)
    leaf = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    compiled(leaf)
    base = Tensor(np.array([0.5, 1.0, 1.5]), requires_grad=True)
    with pytest.warns(RuntimeWarning, match="backward through a graph made before the call"):
        compiled(base * 2.0)  # traced again (a replay of the leaf's trace would write leaf.grad)
    same(base.grad, np.array([4.0, 8.0, 12.0]))
    same(leaf.grad, np.array([2.0, 4.0, 6.0]))
    assert compiled.calls == {"traced": 2, "replayed": 0, "eager": 0}


def test_a_gradient_read_as_none_runs_eagerly_with_a_warning():
    w = Tensor(np.ones(3), requires_grad=True)

    def f(x):
        h = x * w
        return h * 2.0 if h.grad is None else h  # a non-leaf's gradient: None

    compiled = lp.compile(f)
    x = Tensor(np.arange(3.0))
    with pytest.warns(RuntimeWarning, match="Tensor.grad read as None"):
        same(compiled(x), f(x))
    assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 0}
    same(compiled(x), f(x))
    assert compiled.calls["eager"] == 1


def test_dropout_and_randn_draw_again_at_each_replay_and_follow_the_seed(device):
    """A draw is replayed as a draw: fresh masks at each call, from lp.manual_seed's
    stream in eager's order (a seeded compiled run equals a seeded eager run)."""
    def setup():
        lp.manual_seed(4)
        model = nn.Sequential(nn.Linear(6, 16, device=device), nn.ReLU(), nn.Dropout(0.3),
                              nn.Linear(16, 3, device=device))
        return model, lp.optim.SGD(model.parameters(), lr=0.1)

    def stepper(model, opt):
        def step(x, y):
            opt.zero_grad()
            noise = lp.randn(8, 6, device=device) * 0.01
            loss = nn.functional.cross_entropy(nn.functional.dropout(model(x + noise), 0.2), y)
            loss.backward()
            opt.step()
            return loss

        return step

    (m1, o1), (m2, o2) = setup(), setup()
    eager, compiled = stepper(m1, o1), lp.compile(stepper(m2, o2), fuse=False)
    losses = []
    for i in range(4):
        x = Tensor(RNG.normal(size=(8, 6)), device=device)
        y = lp.asarray(RNG.integers(0, 3, size=8), device=device)
        lp.manual_seed(10 + i)
        expected = eager(x, y)
        lp.manual_seed(10 + i)
        losses.append(compiled(x, y))
        same(losses[-1], expected)
    for p, q in zip(m1.parameters(), m2.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
    assert "3 random draws" in compiled.explain()


DRAWS = {  # every way to draw, each inside a step that uses what it drew
    "randint": lambda x, w: x * lp.astype(lp.randint(0, 5, (4,), device=x.device), x.dtype),
    "randint_float": lambda x, w: x * lp.randint(-3, 3, (4,), dtype=x.dtype, device=x.device),
    "randperm": lambda x, w: lp.take(x, lp.randperm(4, device=x.device), axis=0),
    "rand": lambda x, w: x * lp.rand(4, dtype=x.dtype, device=x.device),
    "uniform_": lambda x, w: x * lp.zeros(4, dtype=x.dtype, device=x.device).uniform_(-1.0, 2.0),
    "normal_": lambda x, w: x + lp.empty(4, dtype=x.dtype, device=x.device).normal_(1.0, 0.5),
    "init.uniform_": lambda x, w: nn.init.uniform_(w, -0.1, 0.1) * x,
    "init.normal_": lambda x, w: nn.init.normal_(w, 0.0, 2.0) * x,
    "init.kaiming_uniform_": lambda x, w: nn.init.kaiming_uniform_(w.reshape(2, 2)).reshape(4) * x,
    "init.xavier_normal_": lambda x, w: nn.init.xavier_normal_(w.reshape(2, 2)).reshape(4) * x,
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_every_draw_is_drawn_again_at_each_replay_in_eagers_order(name, device):
    """randint, randperm, t.uniform_/normal_ and nn.init draw at each replay, from
    lp.manual_seed's stream in eager's order, as dropout and randn do."""
    def stepper(w):
        def step(x):
            y = DRAWS[name](x, w) * lp.rand(4, dtype=x.dtype, device=x.device)  # a draw after it, too
            return (y * y).sum()

        return step

    w1, w2 = (Tensor(np.zeros(4), device=device) for _ in range(2))
    eager, compiled = stepper(w1), lp.compile(stepper(w2))
    values = []
    for i in range(4):
        x = Tensor(np.array([0.5, 1.5, -2.0, 3.0]) * (i + 1), device=device)
        lp.manual_seed(20 + i)
        expected = eager(x)
        lp.manual_seed(20 + i)
        values.append(host(compiled(x)))
        same(values[-1], expected)
        same(w2, w1)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}, compiled.explain()
    assert len({float(v) for v in values}) == 4  # a new draw at each call


def test_a_parameter_changed_in_place_under_no_grad_replays(device):
    """``p.mul_()`` and ``p.copy_(clip(p))`` on a parameter under no_grad (weight decay
    or clipping by hand): a replay changes it as recorded, under no_grad (it raised at the first
    replay: grad mode was on there)."""
    def stepper(w):
        def step(x):
            w.grad = None
            loss = (w * x).sum()
            loss.backward()
            with lp.no_grad():
                w.mul_(0.5)
                w.copy_(lp.clip(w, -0.3, 0.3))
            return loss

        return step

    w1, w2 = (nn.Parameter(Tensor(np.array([1.0, -2.0, 0.2]), device=device)) for _ in range(2))
    eager, compiled = stepper(w1), lp.compile(stepper(w2))
    for i in range(3):
        x = Tensor(np.full(3, i + 1.0), device=device)
        same(compiled(x), eager(x))
        same(w2, w1)
        same(w2.grad, w1.grad)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_replay_draws_anew_without_a_seed():
    f = lp.compile(lambda x: nn.functional.dropout(x, 0.5))
    outs = [host(f(Tensor(np.ones(256)))) for _ in range(4)]
    assert f.calls["replayed"] == 3 and all(not np.array_equal(outs[0], o) for o in outs[1:])


def test_the_dropout_of_a_0d_tensor_draws_again_at_each_replay(device):
    """A 0-d mask times ``1 / keep`` is a NumPy scalar, which became a new array apart
    from the recorded draw: the trace's mask, a constant, at every replay (found by
    tests/test_compile_fuzz.py: a scalar parameter's dropout gave -0.0 at every replay
    where eager kept it)."""
    w = Tensor(np.array(-0.8), requires_grad=True, device=device)

    def f(x):
        return nn.functional.dropout(w, 0.3).detach() + x * lp.rand((), device=device) \
            + lp.randint(0, 5, (), device=device).astype(lp.float64)

    compiled = lp.compile(f, fuse=False)
    for seed in range(8):
        x = Tensor(np.array(2.0), device=device)
        lp.manual_seed(seed)
        want = host(f(x))
        lp.manual_seed(seed)
        same(compiled(x), want)
    assert compiled.calls == {"traced": 1, "replayed": 7, "eager": 0}, compiled.explain()
    assert "0 constants" in compiled.explain()


def test_a_detached_state_tensor_changed_in_place_changes_the_state_at_each_replay(device):
    """``s.detach()`` of a state tensor the call had not read before is a tensor on the
    state's array, not a copy made at the trace: ``d += x`` writes the state at each
    replay as eagerly (found by tests/test_compile_fuzz.py: the replay changed a copy,
    the state kept the trace's values)."""
    def world():
        s = Tensor(np.zeros((3, 4)), device=device)

        def step(x):
            d = s.detach()
            d += x
            return d * 2.0

        return step, s

    (eager, s1), (step, s2) = world(), world()
    compiled = lp.compile(step, fuse=False)
    for k in range(4):
        x = Tensor(np.full((3, 4), k + 1.0), device=device)
        same(compiled(x), host(eager(x)))
        same(s2, host(s1))
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}, compiled.explain()


def test_a_returned_detach_of_a_state_tensor_counts_changes_with_it(device):
    """``return s.detach()``: the replay's result shares the state's memory and, as
    eagerly, its count of in-place changes, so a graph that saved ``s`` refuses a
    backward after the result was changed in place (found by review: the replay's
    result had a count of its own, and the backward used the changed values)."""
    s = Tensor(np.array([1.0, 2.0]), device=device)
    w = Tensor(np.array([1.0, 1.0]), requires_grad=True, device=device)
    compiled = lp.compile(lambda x: s.detach())
    for _ in range(3):
        y = (w * s).sum()
        d = compiled(Tensor(np.zeros(1), device=device))
        d += 1.0
        with pytest.raises(RuntimeError, match="changed in place"):
            y.backward()
    assert compiled.calls["replayed"] == 2


def spectral_step(device, fuse=None):
    """A training step through complex values: a real layer, its rows' spectra (rfft)
    times complex weights made of two real parameters and a complex one (Adam's,
    which steps a complex parameter's parts as two real ones) plus a complex leaf
    times their conjugate (updated by hand), back (irfft); broadcasting complex
    products, holomorphic ops and ops of their own complex rules. Compiled with
    ``fuse`` unless None."""
    wr = Tensor(np.linspace(0.1, 0.9, 5), requires_grad=True, device=device)
    wi = Tensor(np.linspace(-0.5, 0.3, 5), requires_grad=True, device=device)
    z = Tensor(np.array([1 + 2j, 3 - 1j, 0.5j, 1, 2 - 2j]), requires_grad=True, device=device)
    lin = nn.Linear(8, 8, dtype="float64", device=device)
    lin.load_state_dict({"weight": np.eye(8) + 0.1 * np.arange(64.0).reshape(8, 8) / 64, "bias": np.zeros(8)})
    c = Tensor(np.array([1 - 0.5j, 0.2 + 1j, 1, -1j, 0.5 + 0.5j]), requires_grad=True, device=device)
    opt = lp.optim.Adam([wr, c, wi, *lin.parameters()], lr=0.01)

    def step(x):
        spectrum = lp.fft.rfft(lin(x), axis=-1)
        mixed = spectrum * (wr + wi * 1j) * c + z * lp.conj(spectrum)
        loss = (lp.fft.irfft(mixed, n=8, axis=-1) ** 2).mean() + lp.abs(mixed).sum() * 0.01
        loss.backward()
        opt.step()
        opt.zero_grad()
        with lp.no_grad():
            z.sub_(0.1 * z.grad)
        z.grad = None
        return loss

    return (step if fuse is None else lp.compile(step, fuse=fuse)), (wr, wi, c, z, *lin.parameters())


@pytest.mark.parametrize("fuse", [False, True])
def test_a_step_through_complex_values_replays_bit_for_bit(device, fuse):
    eager, eager_params = spectral_step(device)
    compiled, params = spectral_step(device, fuse)
    for i in range(4):
        x = Tensor(np.random.default_rng(i).normal(size=(3, 8)), device=device)
        same(compiled(x), eager(x))
        for p, q in zip(params, eager_params):
            same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_complex_argument_gets_its_gradient_in_replays(device):
    """A complex argument that requires grad: its ``.grad`` (conjugate Wirtinger, as
    PyTorch's) is written by each replay as eagerly, a real leaf's is real."""
    w = Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True, device=device)

    def f(x):
        w.grad = None
        loss = lp.real(x * lp.conj(x) * w + x * x).sum()
        loss.backward()
        return loss

    compiled = lp.compile(f)
    for i in range(3):
        values = np.random.default_rng(i).normal(size=(2, 3, 2)) @ [1, 1j]
        a, b = (Tensor(values, requires_grad=True, device=device) for _ in range(2))
        same(compiled(a), f(b))
        same(a.grad, b.grad)
        gw = w.grad
        f(b)
        same(gw, w.grad)
        assert "complex" not in str(gw.dtype)
    assert compiled.calls["replayed"] == 2


def test_a_real_parameters_gradient_through_complex_values_is_its_own_array():
    """A real parameter times a complex tensor: its gradient is the real part of a
    complex one, which eager's cast copies. A replay gives ``.grad`` an array of its
    own too, not a strided view holding the complex array alive (found by review)."""
    def world():
        w = Tensor(np.linspace(0.3, 1.2, 6).reshape(2, 3), requires_grad=True)
        c = Tensor(np.arange(6).reshape(2, 3) * (1 + 2j))

        def step(x):
            w.grad = None
            lp.abs(w * c + x).sum().backward()
            return w.grad * 1.0

        return step, w

    (eager, eager_w), (step, w) = world(), world()
    compiled = lp.compile(step, fuse=False)
    for i in range(3):
        x = Tensor(np.random.default_rng(i).normal(size=(2, 3)))
        same(compiled(x), eager(x))
        assert w.grad.flags.c_contiguous and w.grad.base is None and w.grad.dtype == eager_w.grad.dtype
    assert compiled.calls["replayed"] == 2


def test_a_second_order_pass_through_complex_values_replays(device):
    """``autograd.grad(create_graph=True)`` through an rfft (a gradient penalty): its
    rules, complex ones among them, are recorded and replayed, and the backward pass
    through them too."""
    w = Tensor(np.linspace(0.1, 0.9, 8), requires_grad=True, device=device)

    def f(x):
        spectrum = lp.fft.rfft(x * w)
        y = (lp.abs(spectrum) ** 2).sum() + lp.real(spectrum * spectrum).sum()
        (g,) = lp.autograd.grad(y, [w], create_graph=True)
        penalty = (g ** 2).sum()
        w.grad = None
        penalty.backward()
        return penalty, g.detach()

    compiled = lp.compile(f)
    for i in range(3):
        x = Tensor(np.random.default_rng(i).normal(size=(8,)), device=device)
        got = compiled(x)
        gw = w.grad
        want = f(x)
        same(got[0], want[0])
        same(got[1], want[1])
        same(gw, w.grad)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


class _Mixup:
    """Mixup's weight drawn from a generator the object holds (a method compiled)."""

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def step(self, x):
        return (x * self.rng.beta(0.4, 0.4)).sum()


_HOST_RNG = np.random.default_rng(0)
_SYSTEM_RNG = random.SystemRandom()


def _mixup_weight():
    """A helper of the script's that draws on NumPy's global generator."""
    return np.random.beta(0.4, 0.4)  # noqa: NPY002 - the legacy global generator is what is tested


@functools.singledispatch
def _mixed(batch):
    """A helper dispatched on its argument's type (its wrapper is functools' code, the
    registered function the script's): the weight from NumPy's global generator."""
    return batch * np.random.beta(0.4, 0.4)  # noqa: NPY002 - the legacy global generator is what is tested


class _MixupLayer(nn.Module):
    """A layer that scales its input by a number drawn from its own generators."""

    def __init__(self):
        self.rngs = [np.random.default_rng(1)]

    def forward(self, x):
        return x * self.rngs[0].uniform()


_MIXUP_MODEL = nn.Sequential(nn.Identity(), _MixupLayer())


class _Trainer:
    """A class-based trainer whose model holds a layer with its own generators."""

    def __init__(self):
        self.model = nn.Sequential(nn.Identity(), _MixupLayer())

    def step(self, x):
        return self.model(x).sum()


_DRAWING_STEPS = {  # (each its own code: what a step's code names decides which generators are compared)
    "np.random": lambda x: (x * np.random.beta(0.4, 0.4)).sum(),  # noqa: NPY002 - the legacy global generator
    "random": lambda x: (x * random.random()).sum(),
    "a global Generator": lambda x: (x * _HOST_RNG.uniform()).sum(),
    "the object's Generator": _Mixup().step,
    "a helper function": lambda x: (x * _mixup_weight()).sum(),
    "a singledispatch helper": lambda x: _mixed(x).sum(),  # (followed through functools' wrapper)
    "from secrets import randbelow": lambda x: (x * randbelow(2**53)).sum(),  # (a function of Python's)
    "a layer of a model": lambda x: _MIXUP_MODEL(x).sum(),
    "a layer of a trainer's model": _Trainer().step,
    "random.SystemRandom": lambda x: (x * _SYSTEM_RNG.random()).sum(),  # (no state: counts as drawn from)
    "from random import gauss": lambda x: (x * gauss(0.0, 1.0)).sum(),  # (a bound method of Python's generator)
    # generators made in the call without a seed: the system's entropy (the trace's numbers were replayed before)
    "np.random.default_rng()": lambda x: (x * np.random.default_rng().uniform()).sum(),
    "default_rng(None)": lambda x: (x * default_rng(None).uniform()).sum(),
    "random.Random()": lambda x: (x * random.Random().random()).sum(),
    "a helper's Generator(PCG64())": lambda x: (x * _fresh_generator().uniform()).sum(),
    "default_rng(seed=None)": lambda x: (x * np.random.default_rng(seed=None).uniform()).sum(),
}


def _fresh_generator():
    """A helper of the script's that makes a generator seeded from the system's entropy."""
    return np.random.Generator(np.random.PCG64())


def _augment(x, alpha=0.0, rng=None):
    """A helper that makes a generator without a seed on a path the step does not take."""
    if alpha <= 0:
        return x
    rng = np.random.default_rng() if rng is None else rng
    return x * rng.beta(alpha, alpha)


def test_a_generator_maker_on_a_path_not_taken_replays():
    """``np.random.default_rng()`` in a branch the call does not take: nothing is drawn
    from the system's entropy at the trace, so the step replays (a first version that
    only read the code made every such step eager)."""
    compiled = lp.compile(lambda x: (_augment(x) * 2.0).sum())
    for _ in range(3):
        assert float(compiled(Tensor(np.arange(4.0)))) == 12.0
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_generator_made_in_the_call_with_a_seed_replays():
    """``np.random.default_rng(0)`` made in the call draws the same numbers at every call:
    the replays give them, as eagerly."""
    compiled = lp.compile(lambda x: (x * np.random.default_rng(0).uniform()).sum())
    x = Tensor(np.arange(4.0))
    values = {float(compiled(x)) for _ in range(3)}
    assert values == {float((x * np.random.default_rng(0).uniform()).sum())}
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("source", list(_DRAWING_STEPS))
def test_a_number_drawn_on_the_host_makes_the_call_run_eagerly(source):
    """A random number drawn on the host outside LeanPass (mixup's weight from
    ``np.random.beta``) would be the trace's in every replay: the call runs eagerly,
    with one warning, and each call draws anew, as eagerly. The generators are found
    where the function's code leads: its names, a helper function it calls, a model's
    layers and their attributes (a list of them too), its object's attributes."""
    step = _DRAWING_STEPS[source]
    compiled = lp.compile(step)
    x = Tensor(np.arange(4.0))
    with pytest.warns(RuntimeWarning, match="drawn on the host outside LeanPass") as caught:
        values = {float(compiled(x)) for _ in range(4)}
    assert len(values) == 4
    assert len([w for w in caught if "lp.compile" in str(w.message)]) == 1
    assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 3}


def test_a_draw_on_the_host_outside_the_functions_code_replays():
    """A post-accumulate hook or an optimizer's step that draws on the host (gradient
    noise) runs again at every replay, so the call replays, as eager steps do: only
    what the function's own code reaches is looked at (a data loader's threads drawing
    meanwhile did not send every step eagerly either)."""
    def world():
        np.random.seed(0)  # noqa: NPY002 - the legacy global generator is what is tested
        lp.manual_seed(0)
        model = nn.Linear(3, 2, dtype="float64")
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        for p in model.parameters():
            def noise(p):
                p.grad[...] += np.random.normal(size=p.grad.shape) * 0.01  # noqa: NPY002

            p.register_post_accumulate_grad_hook(noise)

        def step(x):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            return model.weight.detach() * 1.0

        return step

    eager = world()
    wanted = [host(eager(Tensor(np.ones((2, 3)) * k))) for k in range(4)]
    compiled = lp.compile(world(), fuse=False)
    for k in range(4):
        same(compiled(Tensor(np.ones((2, 3)) * k)), wanted[k])
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_batch_norm_in_training_with_its_running_statistics(device):
    """Batch norm's running statistics are updated by a step of their own, replayed
    after the op has put the replay's batch statistics in its list."""
    layers = [nn.BatchNorm2d(3, dtype="float64", device=device) for _ in range(2)]
    g = lp.compile(lambda x: layers[1](x).sum().detach())
    for _ in range(3):
        x = Tensor(RNG.normal(size=(4, 3, 2, 2)) * 3 + 1, device=device)
        same(g(x), layers[0](x).sum())
    same(layers[0].running_mean, layers[1].running_mean)
    same(layers[0].running_var, layers[1].running_var)
    assert g.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_other_threads_are_not_recorded():
    """A data loader's worker making tensors while a call is traced: only the traced
    call's thread is recorded."""
    go, done = threading.Event(), threading.Event()

    def worker():
        go.wait(10)
        for _ in range(20):
            (Tensor(np.ones(3)) * 2.0).sum().item()  # operations and a host read, on another thread
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()

    def f(x):
        go.set()
        done.wait(10)
        return x * 3.0

    g = lp.compile(f)
    same(g(Tensor(np.ones(2))), [3.0, 3.0])
    thread.join()
    for _ in range(2):  # (the first call set the event it names, which a replay would not: one more trace)
        same(g(Tensor(np.ones(2))), [3.0, 3.0])
    assert g.calls == {"traced": 2, "replayed": 1, "eager": 0}
    assert "replays 1 operations" in g.explain()


def test_an_exception_propagates_and_leaves_no_cache_entry():
    fail = [True]  # (set between calls: a list the function reads is checked before a replay)

    def f(x):
        if fail[0]:
            raise KeyError("boom")
        return x + 1.0

    g = lp.compile(f)
    with pytest.raises(KeyError, match="boom"):
        g(Tensor(np.ones(2)))
    assert not g._entries
    fail[0] = False
    same(g(Tensor(np.ones(2))), [2.0, 2.0])
    same(g(Tensor(np.ones(2))), [2.0, 2.0])
    assert g.calls == {"traced": 1, "replayed": 1, "eager": 0}


def test_leanpass_compile_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("LEANPASS_COMPILE", "0")
    f = lp.compile(lambda x: x * 3.0)
    same(f(Tensor(np.ones(2))), [3.0, 3.0])
    same(f(Tensor(np.ones(2))), [3.0, 3.0])
    assert f.calls == {"traced": 0, "replayed": 0, "eager": 2}
    assert "compilation is off" in f.explain()


def test_bad_arguments():
    with pytest.raises(TypeError, match="compile: fn must be callable"):
        lp.compile(3)
    with pytest.raises(ValueError, match="cache_size must be a positive integer"):
        lp.compile(lambda x: x, cache_size=0)
    decorated = lp.compile(cache_size=2)(lambda x: x + 1.0)
    assert decorated.cache_size == 2


def test_results_are_detached_and_a_result_that_needs_its_graph_runs_eagerly():
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    f = lp.compile(lambda x: (w * x).sum())  # the caller would call backward on it: not replayed
    with pytest.warns(RuntimeWarning, match="a result that requires grad"):
        out = f(Tensor(np.ones(2)))
    out.backward()
    same(w.grad, [1.0, 1.0])
    out = f(Tensor(np.ones(2)))
    assert out.requires_grad  # eager: its graph is there


# ---- found by a review: each of these used to replay a wrong or stale result -----------------


def test_a_tensor_made_inside_is_a_new_one_at_every_call():
    def f(x):
        acc = lp.zeros(2)
        for _ in range(2):
            acc += x  # an in-place change outside the graph, of a tensor made in the call
        return acc

    g = lp.compile(f)
    outs = [g(Tensor(np.array([1.0, 2.0]))) for _ in range(3)]
    for out in outs:
        same(out, [2.0, 4.0])
    assert outs[1] is not outs[2] and g.calls["replayed"] == 2


def test_state_the_function_changes_in_python_is_never_replayed():
    """A module attribute rebound inside the call, or a global it rebinds: traced again
    (with a warning), then, at the second such trace in a row, eagerly: each call does
    what eager does."""
    class Average(nn.Module):
        def __init__(self):
            super().__init__()
            self.avg = Tensor(np.zeros(2))

        def forward(self, x):
            out = self.avg * 1.0
            self.avg = self.avg * 0.5 + x
            return out

    ours, theirs = Average(), Average()
    g = lp.compile(lambda x: ours(x))
    with pytest.warns(RuntimeWarning, match="changed a module's attributes"):
        for _ in range(3):
            x = Tensor(np.array([1.0, 2.0]))
            same(g(x), theirs(x))
    same(ours.avg, theirs.avg)


def test_an_argument_also_read_as_a_global_runs_eagerly():
    g = lp.compile(lambda x: x + SHARED)
    with pytest.warns(RuntimeWarning, match="also reads by name"):
        same(g(SHARED), [2.0, 4.0])
    same(g(Tensor(np.array([10.0, 20.0]))), [11.0, 22.0])


SHARED = Tensor(np.array([1.0, 2.0]))


def test_numpy_array_arguments_are_keyed_by_identity_and_the_warnings_say_pass_a_tensor():
    """A NumPy array is an argument by identity (NumPy code on it is not recorded): one
    given to an operation runs the call eagerly, and a new one at each call traces at
    each call; both warnings name it and say to pass a Tensor. Results are eager's."""
    w = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)

    def f(a, b):
        loss = (w * b).sum() + (w * Tensor(a)).sum()  # b: an operand as it is; a: a Tensor made of it
        loss.backward()
        return loss.detach()

    compiled = lp.compile(f, cache_size=2)
    rng = np.random.default_rng(0)
    with pytest.warns(RuntimeWarning) as caught:
        for _ in range(4):
            a, b = rng.normal(size=3), rng.normal(size=3)
            same(compiled(a, b), f(a, b))
    said = " ".join(str(x.message) for x in caught)
    assert "an array argument (not a Tensor" in said and "pass a Tensor, lp.asarray(a)" in said
    assert "an array argument is the same kind of call only as the same array object" in said
    assert compiled.calls["replayed"] == 0


def test_calls_each_of_a_new_kind_that_keep_no_trace_run_eagerly_for_a_while():
    """``lst.pop()`` on a list argument: each call a new kind (the items are in the key),
    each trace kept for nothing. Three in a row make the next 4 calls of new kinds run
    eagerly, untraced; then one more such trace, and 8 more eagerly. A kind seen before
    is traced once more (a cache filled at its first call). Results are eager's."""
    def f(lst, x):
        lst.pop()
        return x * 2.0

    compiled = lp.compile(f)
    items, x = list(range(40)), Tensor(np.ones(3))
    with pytest.warns(RuntimeWarning, match="run eagerly, untraced, for a while"):
        for _ in range(10):
            same(compiled(items, x), [2.0, 2.0, 2.0])
    assert len(items) == 30
    assert compiled.calls == {"traced": 4, "replayed": 0, "eager": 6}


def test_a_trace_kept_after_futile_ones_traces_new_kinds_again():
    """A layer that caches a tensor per length at its first call of that length: three
    new lengths in a row keep no trace (each call kept a tensor it made). A length seen
    before is traced once more and kept: from then on new lengths are traced again
    (once to fill the cache, once more to keep), not run eagerly."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = {}

        def forward(self, x):
            n = x.shape[0]
            if n not in self.cache:
                self.cache[n] = lp.arange(n, dtype="float64") + 1.0
            return x * self.cache[n]

    model = Scaled()
    compiled = lp.compile(model)
    with pytest.warns(RuntimeWarning, match="each of a new kind"):
        for n in (1, 2, 3):
            same(compiled(Tensor(np.ones(n))), np.arange(n) + 1.0)
    for n in (1, 4, 4, 4):
        same(compiled(Tensor(np.ones(n))), np.arange(n) + 1.0)
    assert compiled.calls == {"traced": 6, "replayed": 1, "eager": 0}


def test_a_kind_of_call_that_comes_back_during_an_eager_stretch_is_traced():
    """A decoding loop grows a cache in a dict argument (each call a new kind, each trace
    kept for nothing) long enough for a long eager stretch; then one kind of call,
    again and again: its second call is traced and the rest replay (the stretch ran a
    kind that came back eagerly, untraced, for as long as it lasted). A count of the
    stretch below zero (two threads took its last call) runs nothing eagerly."""
    lp.manual_seed(0)
    proj = nn.Linear(4, 4, dtype="float64")

    @lp.no_grad()
    def step(x, cache=None):
        y = proj(x)
        if cache is not None:
            cache["k"] = lp.concat([cache["k"], y], axis=0)
            return cache["k"].sum(axis=0)
        return y.sum(axis=0)

    compiled = lp.compile(step)
    mine, theirs = {"k": Tensor(np.zeros((1, 4)))}, {"k": Tensor(np.zeros((1, 4)))}
    with pytest.warns(RuntimeWarning, match="each of a new kind"):
        for k in range(40):
            x = Tensor(np.full((1, 4), float(k)))
            same(compiled(x, mine), step(x, theirs))
    assert compiled._skips > 0
    before = dict(compiled.calls)
    x = Tensor(RNG.normal(size=(8, 4)))
    for _ in range(10):
        same(compiled(x), step(x))
    assert {k: compiled.calls[k] - before[k] for k in before} == {"traced": 1, "replayed": 8, "eager": 1}

    compiled = lp.compile(step)
    compiled._skips = -1
    for _ in range(3):
        same(compiled(x), step(x))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_slice_holding_an_object_of_its_own_runs_the_call_eagerly():
    """A slice whose bound is an object with ``__index__`` (a position a decoding loop
    advances), new at each call or the same one: the position is read anew at each
    use, so every call runs eagerly, with a warning (the same slice object replayed
    the first call's position)."""
    class Position:
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    x, pos = Tensor(np.arange(8.0)), Position(1)
    kept = slice(pos, None)
    for fresh in (True, False):
        f = lp.compile(lambda x, s: x[s] * 2.0)
        with pytest.warns(RuntimeWarning, match="a slice argument whose bounds are objects"):
            for k in (1, 1, 3, 5, 6):
                pos.v = k
                same(f(x, slice(pos, None) if fresh else kept), np.arange(k, 8.0) * 2.0)
        assert f.calls == {"traced": 0, "replayed": 0, "eager": 5}


def test_a_tensor_made_of_an_array_argument_runs_the_call_eagerly():
    """A NumPy array argument refilled in place between calls (a batch buffer reused),
    made a Tensor inside the function (``Tensor(a)``, ``lp.asarray(a)``, from a list
    argument): a replay would start from the first call's values (it replayed them,
    with no warning); the call runs eagerly, with a warning that says to pass a
    Tensor. A layer made inside the function is named as such."""
    x = Tensor(np.ones(2))
    cases = [(lambda x, a: x * Tensor(a), "a"), (lambda x, a: x * lp.asarray(a), "a"),
             (lambda x, a: x * Tensor(a[0]), "[a]"),  # the array inside a list argument
             (lambda x, a: x * lp.from_dlpack(a), "a"), (lambda x, a: x * Tensor(memoryview(a)), "a"),
             (lambda x, a: x * Tensor([a[0], a[1]]).sum(), "rows"),  # a list of its rows
             (lambda x, a: x * Tensor(a[1:]).sum(), "a")]  # a view of an argument that is a view (of rows)
    for make, given in cases:
        rows = np.zeros((3, 2))
        a = rows[1]
        f = lp.compile(make)
        with pytest.warns(RuntimeWarning, match="a Tensor made of an array argument"):
            for k in range(4):
                a[:] = [k, k + 1.0]
                arg = [a] if given == "[a]" else rows if given == "rows" else a
                same(f(x, arg), make(x, arg))
        assert f.calls["replayed"] == 0, given
    f = lp.compile(lambda x: nn.Linear(2, 2, dtype="float64")(x))
    with pytest.warns(RuntimeWarning, match="a Parameter made inside the function"):
        f(Tensor(np.ones((1, 2))))


def test_values_numpy_computes_from_an_array_argument_refilled_in_place_are_never_stale():
    """A batch buffer refilled in place between calls, and a Tensor made of what NumPy
    computes from it (``Tensor(a / 2.0)``: a copy, which no trace can tell from a
    constant), of an array an argument's attribute holds (``batch.x``), of one in a
    list argument: the replay compares each array's values with the trace's copy (bit
    for bit: ``-0.0`` is not ``0.0``), traces again where they changed, with a warning,
    and runs eagerly from the third change in a row. Unchanged, they replay. An array
    the function changes with NumPy runs the call eagerly. Results are eager's; they
    replayed the first call's values, with no warning."""
    w = Tensor(np.array([1.0, 2.0, 3.0]))

    class Batch:
        pass

    batch = Batch()
    cases = [(lambda a: (Tensor(a / 2.0) * w).sum(), lambda: np.ones(3)),
             (lambda b: (Tensor(b.x.astype(np.float32)) * w).sum(), lambda: batch),
             (lambda pair: (Tensor(pair[0] * pair[1]) * w).sum(), lambda: [np.ones(3), np.full(3, 2.0)]),
             (lambda a: (Tensor(1.0 / a) * w).sum(), lambda: np.array([0.0, 1.0, 1.0]))]
    with np.errstate(divide="ignore"):  # (1 / -0.0, eagerly too)
        for fn, make in cases:
            batch.x = np.ones(3)
            arg = make()
            buffer = batch.x if arg is batch else arg[1] if isinstance(arg, list) else arg
            f = lp.compile(fn)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                same(f(arg), fn(arg))
                same(f(arg), fn(arg))
            assert f.calls == {"traced": 1, "replayed": 1, "eager": 0}
            buffer[0] = -0.0 if fn is cases[-1][0] else 5.0  # (1 / -0.0 is -inf, where 1 / 0.0 was inf)
            with pytest.warns(RuntimeWarning, match="traced again: the values of (an array argument|the array 'x') "
                              "changed"):
                same(f(arg), fn(arg))
            same(f(arg), fn(arg))  # (the new values: replayed)
            assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}
            with pytest.warns(RuntimeWarning, match="the values of (an array argument|the array 'x') change at "
                              "every call"):
                for k in range(4):
                    buffer[1] = 10.0 + k
                    same(f(arg), fn(arg))
            assert f.calls["eager"] >= 2

    def grows(a):
        a += 1.0  # NumPy's, not recorded
        return (Tensor(a * 1.0) * w).sum()

    f, a, b = lp.compile(grows), np.zeros(3), np.zeros(3)
    with pytest.warns(RuntimeWarning, match="an array argument changed in place by the function"):
        for _ in range(3):
            same(f(a), grows(b))
    np.testing.assert_array_equal(a, b)
    assert f.calls == {"traced": 1, "replayed": 0, "eager": 2}


def test_what_is_no_refillable_array_replays_as_before():
    """Found by review: a NumPy dtype class as an argument or an attribute (it has an
    array's ``shape`` and ``dtype`` too), and Tensors in a list argument updated in
    place, replay; an array argument that is the memory of a tensor the call changes
    in place runs the call eagerly, as one NumPy changes (a replay would keep what
    NumPy computed from it: it replayed stale values); an array bound in a
    ``functools.partial`` is compared; an array of another library refilled with
    ``-0.0`` traces again; an array of objects (whose items may change inside) is
    named in a warning; an evicted trace's last read arrays are freed."""
    w = Tensor(np.array([1.0, 2.0, 3.0]))

    class Cfg:
        dtype = np.float32

    cfg = Cfg()
    cases = [(lambda x, dt: x.astype(dt).sum(), (w, np.float32)),
             (lambda x, c: x.astype(c.dtype).sum(), (w, cfg)),
             (lambda ps: [p.sub_(0.5 * p) for p in ps][0].sum(), ([Tensor(np.ones(2)), Tensor(np.ones(3))],))]
    for fn, args in cases:
        f = lp.compile(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for _ in range(3):
                f(*args)
        assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}

    def step(p, view):
        p.add_(1.0)  # (view is p's memory: it changes too)
        return (p * 2.0).sum() + Tensor(view.max(keepdims=True))

    p, twin = Tensor(np.zeros(3)), Tensor(np.zeros(3))
    f, view = lp.compile(step), np.from_dlpack(p)
    with pytest.warns(RuntimeWarning, match="an array argument changed in place by the function"):
        for _ in range(4):
            same(f(p, view), step(twin, np.from_dlpack(twin)))
    assert f.calls == {"traced": 1, "replayed": 0, "eager": 3}

    scale = np.ones(3)
    f = lp.compile(functools.partial(lambda s, x: x * Tensor(s * 2.0), scale))
    same(f(w), [2.0, 4.0, 6.0])
    scale[:] = 3.0
    with pytest.warns(RuntimeWarning, match="the values of an array argument changed"):
        same(f(w), [6.0, 12.0, 18.0])

    buffer = np.ones(3)
    f = lp.compile(lambda a: (Tensor(a * 1.0) * w).sum(), cache_size=1)
    with pytest.warns(RuntimeWarning):
        for k in range(5):
            buffer[0] = k
            f(buffer)
        f(np.ones(3))  # (another array: the buffer's trace goes)
    kept = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert kept() is None

    xps = pytest.importorskip("array_api_strict")
    a = xps.asarray([0.0, 1.0])
    g = lp.compile(lambda a: (Tensor(np.array(1.0 / a, copy=True))).sum())
    with np.errstate(divide="ignore"):
        same(g(a), np.inf)
        a[0] = -0.0
        with pytest.warns(RuntimeWarning, match="the values of an array argument changed"):
            same(g(a), -np.inf)

    objects = np.empty(2, dtype=object)
    objects[:] = [[1.0], [2.0]]
    h = lp.compile(lambda o: (Tensor(np.array([v[0] for v in o])) * 2.0).sum())
    with pytest.warns(RuntimeWarning, match="of objects, or of NumPy.s StringDType"):
        same(h(objects), 6.0)


def test_an_array_argument_too_large_to_compare_is_named_in_a_warning(monkeypatch):
    """Above ``COMPARED_BYTES`` (16 MiB) an array argument's values are not kept nor
    compared (a dataset passed whole: a copy per trace, a pass per call): the trace
    warns that what NumPy computes from it replays as traced, and says to pass a
    Tensor; a smaller one beside it is still compared."""
    monkeypatch.setattr(lp._compile.state, "COMPARED_BYTES", 24)  # three float64 values
    f = lp.compile(lambda big, small: (Tensor(big[:3] * 1.0) + Tensor(small * 1.0)).sum())
    big, small = np.ones(4), np.ones(3)
    with pytest.warns(RuntimeWarning, match="from an array it is given as at the trace"):
        same(f(big, small), 6.0)
    same(f(big, small), 6.0)
    small[:] = 2.0
    with pytest.warns(RuntimeWarning, match="the values of an array argument changed"):
        same(f(big, small), 9.0)
    big[:] = 5.0
    same(f(big, small), 9.0)  # (as warned: the trace's values of big)

    def counts(a):  # (NumPy's in-place change of an array too large to compare: seen by a hash at the trace)
        a[:2] += 1.0
        return Tensor(np.asarray(a)[:2] * 1.0).sum()

    for make in (lambda: np.zeros(4), lambda: np.ma.masked_array(np.zeros(2), mask=[False, False])):
        f, a, b = lp.compile(counts), make(), make()
        with pytest.warns(RuntimeWarning, match="an array argument changed in place by the function"):
            for _ in range(3):
                same(f(a), counts(b))
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_refilled_array_an_object_holds_is_named_and_freed_with_its_key():
    """Review round 24: the warnings name the attribute whose array's values changed
    (a log the caller fills, which the code names in a branch it does not take); a
    key whose retrace raises keeps nothing of what its last call read (the array and
    its copy)."""
    class Trainer:
        def __init__(self):
            self.losses, self.verbose, self.w = np.zeros(4), False, Tensor(np.ones(2))

        def step(self, x):
            if self.verbose:
                print(self.losses)
            return (self.w * x).sum()

    t = Trainer()
    step, x = lp.compile(t.step), Tensor(np.ones(2))
    with pytest.warns(RuntimeWarning, match="the values of the array 'losses' chang") as caught:
        for k in range(4):
            same(step(x), 2.0)
            t.losses[k] = k + 1.0
    assert any("'losses' change at every call" in str(w.message) for w in caught)

    def fails(a, x):
        if float(a[0]) > 1.0:
            raise ValueError("too large")
        return x * Tensor(a * 1.0)

    f, buffer = lp.compile(fails), np.ones(2)
    f(buffer, x)
    f(buffer, x)
    buffer[0] = 5.0
    with pytest.warns(RuntimeWarning, match="an array argument holds other values|the values of an array"):
        with pytest.raises(ValueError, match="too large"):
            f(buffer, x)
    kept = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert kept() is None and not f._churning


def test_the_traced_calls_own_result_keeps_no_gradient_it_did_not_get():
    """A leaf made in the call and returned, which no pass reached: the traced call's
    result is eager's own, with no gradient made in it (a pass the caller runs then
    writes ``-0.0`` as eagerly, not ``0.0 + -0.0``); a constant that happens to equal an
    array argument is no Tensor made of it (it replays)."""
    def f(x):
        return x.detach().requires_grad_()

    compiled = lp.compile(f, fuse=False)
    w = Tensor(np.array([-0.0, 1.0]))
    got, want = compiled(Tensor(np.array([0.5, 1.5]))), f(Tensor(np.array([0.5, 1.5])))
    assert got._grad is None and not got.has_grad
    for t in (got, want):
        (t * w).sum().backward()
    np.testing.assert_array_equal(np.signbit(host(got.grad)), np.signbit(host(want.grad)))

    g = lp.compile(lambda x, buffer: x + lp.zeros(4, dtype="int64"))
    buffer = np.zeros(4, dtype=np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            same(g(Tensor(np.ones(4)), buffer), np.ones(4))
    assert g.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_slices_and_ranges_are_keyed_by_their_values():
    """A new but equal ``slice`` or ``range`` at each call is the same kind of call (they
    were keyed by identity: a trace at every call, with no warning); another one traces
    again, and each replays its own."""
    f = lp.compile(lambda x, s, r: x[s] * float(len(r)))
    x = Tensor(np.arange(6.0))
    for _ in range(3):
        same(f(x, slice(1, None), range(3)), np.arange(1.0, 6.0) * 3.0)
    same(f(x, slice(None, None, 2), range(3)), np.array([0.0, 2.0, 4.0]) * 3.0)
    same(f(x, slice(1, None), range(0, 3, 2)), np.arange(1.0, 6.0) * 2.0)
    same(f(x, slice(1, None), range(3)), np.arange(1.0, 6.0) * 3.0)
    assert f.calls == {"traced": 3, "replayed": 3, "eager": 0}


def test_a_value_computed_from_values_names_the_operation():
    """``unique``'s values, computed on the host, name ``unique`` in the warning (not a
    comprehension inside it, nor its private helper's name)."""
    f = lp.compile(lambda x: lp.unique_values(x) * 2.0)
    with pytest.warns(RuntimeWarning, match="unique: a value computed outside the recorded operations"):
        same(f(Tensor(np.array([1.0, 2.0, 2.0]))), [2.0, 4.0])


def test_a_numpy_float64_argument_is_not_the_python_float_it_equals():
    """``np.float64(0.2)`` is a float (a subclass) but not the same kind of call as
    ``0.2``: eagerly ``lp.asarray`` of it is float64 where the Python float takes the
    default dtype. A schedule of NumPy values after a Python one (a sampling
    temperature) replayed the Python float's trace, in float32. A review found it."""
    lp.set_default_dtype("float32")
    try:
        def f(x, temperature):
            return x / lp.asarray(temperature)

        compiled = lp.compile(f, fuse=False)
        x = Tensor(np.array([1.0, 2.0, 3.1]), dtype="float32")
        for t in (0.7, np.float64(0.7), 0.7, np.float64(0.7)):
            got, want = compiled(x, t), f(x, t)
            assert got.dtype == want.dtype
            same(got, want)
        assert compiled.calls == {"traced": 2, "replayed": 2, "eager": 0}
    finally:
        lp.set_default_dtype("float64")


def test_keys_tell_minus_zero_and_numpy_scalars_apart():
    g = lp.compile(lambda x, s: 1.0 / (x * s))
    x = Tensor(np.array([1.0, 2.0]))
    same(g(x, 0.0), [np.inf, np.inf])
    same(g(x, -0.0), [-np.inf, -np.inf])
    h = lp.compile(lambda x, s: x * s)
    for v in (1, 2, 3):
        same(h(x, np.float64(v)), [v, 2.0 * v])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("keyword", [False, True])
def test_a_step_given_a_closure_is_replayed_as_the_eager_step(device, name, keyword):
    """``opt.step(closure)`` (PyTorch's form, LBFGS's): the closure's operations are
    recorded as the call's own, then the step; each replay runs them again with the
    new batch, and returns the closure's loss."""
    models = [mlp(device), mlp(device)]
    opts = [OPTIMIZERS[name](m.parameters()) for m in models]

    def stepper(model, opt):
        def step(x, y):
            def closure():
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                return loss
            return opt.step(closure=closure) if keyword else opt.step(closure)
        return step

    eager, compiled = stepper(models[0], opts[0]), lp.compile(stepper(models[1], opts[1]))
    _twins_step_alike(eager, compiled, models, device, 4)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_closure_the_step_is_given_that_reads_the_host_falls_back():
    w = Tensor(np.ones((1, 3)), requires_grad=True)
    opt = lp.optim.SGD([w], lr=0.1)

    def step(x):
        def closure():
            opt.zero_grad()
            loss = (w * x).sum()
            loss.backward()
            return float(loss)
        return opt.step(closure)

    g = lp.compile(step)
    with pytest.warns(RuntimeWarning, match="float"):
        losses = [g(Tensor(np.full((1, 3), float(k + 1)))) for k in range(3)]
    assert losses == pytest.approx([3.0, 0.9 * 2 * 3, 0.7 * 3 * 3])
    same(w, np.ones((1, 3)) - 0.1 * (1 + 2 + 3))


def test_grad_reset_of_an_argument_and_a_second_backward_pass():
    def f(x):
        x.grad = None
        loss = (x * x).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        return loss

    g = lp.compile(f)
    for _ in range(3):
        x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
        x.grad = np.array([5.0, 5.0])
        g(x)
        same(x.grad, [4.0, 8.0])
    assert g.calls["replayed"] == 2


def test_class_indices_are_checked_again_in_a_replay():
    w = Tensor(np.ones((3, 4)) * 0.1, requires_grad=True)
    g = lp.compile(lambda x, y: nn.functional.cross_entropy(x @ w.T, y).detach())
    x = Tensor(RNG.normal(size=(4, 4)))
    g(x, lp.asarray(np.array([1, 2, 1, 2])))
    with pytest.raises(ValueError, match="class indices"):
        g(x, lp.asarray(np.array([1, 3, 1, 2])))  # out of range: the replay's check raises, the call runs eagerly
    ignored = lp.asarray(np.array([1, -100, 1, 2]))  # an ignored target the trace never saw: another path, traced
    same(g(x, ignored), nn.functional.cross_entropy(x @ w.T, ignored).detach())
    assert g.calls == {"traced": 2, "replayed": 0, "eager": 1}


def test_results_keep_their_kind():
    P = __import__("collections").namedtuple("P", "a b")
    a = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    g = lp.compile(lambda x: P(x.detach(), x.detach() * 2.0))
    for _ in range(2):
        out = g(a)
        assert isinstance(out, P) and not out.a.requires_grad and out.a is not a
        same(out.b, [2.0, 4.0])


def _replays_as_eager(run, replays=3):
    """``run(compiled)`` -> (arrays to compare, the function run): the compiled twin's
    arrays are the eager one's, dtypes and values bit for bit, and every call after the
    first replayed."""
    (eager, _), (compiled, f) = run(False), run(True)
    for a, b in zip(eager, compiled, strict=True):
        assert a.dtype == b.dtype
        same(b, a)
    assert f.calls == {"traced": 1, "replayed": replays, "eager": 0}


@pytest.mark.parametrize("use", ["returned", "computed with"])
def test_the_norm_clip_grad_norm_returns_is_a_value_of_each_replay(use):
    def run(compiled):
        lp.manual_seed(0)
        model = nn.Linear(3, 2, dtype="float64")
        opt = lp.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return (loss, norm) if use == "returned" else loss.detach() * norm

        f = lp.compile(step, fuse=False) if compiled else step
        rng = np.random.default_rng(0)
        outs = [f(Tensor(rng.normal(size=(4, 3)) * 10.0)) for _ in range(4)]
        return [host(o) for out in outs for o in (out if isinstance(out, tuple) else (out,))], f

    _replays_as_eager(run)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_norm_clipped_before_any_gradient_keeps_its_dtype_at_the_replays(dtype):
    # clipped at the top of the step: the trace's call has no gradient yet (the norm is 0, in the
    # parameters' dtype and on their device), the replays' have the last step's
    def run(compiled):
        lp.manual_seed(0)
        model = nn.Linear(3, 2, dtype=dtype)
        opt = lp.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            return loss, norm * 2.0

        f = lp.compile(step, fuse=False) if compiled else step
        outs = [f(Tensor(np.full((4, 3), 1.0 + k), dtype=dtype)) for k in range(4)]
        return [host(o) for out in outs for o in out] + [host(p) for p in model.parameters()], f

    _replays_as_eager(run)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_a_recurrent_training_step_replays_as_the_eager_step(kind):
    # the initial state (zeros, none given) is a constant of the trace, made anew at each replay
    def run(compiled):
        lp.manual_seed(0)
        model = getattr(nn, kind)(3, 4, num_layers=2, batch_first=True, dtype="float64")
        opt = lp.optim.Adam(model.parameters(), lr=0.01)

        def step(x):
            opt.zero_grad()
            out, _ = model(x)
            loss = (out ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = lp.compile(step, fuse=False) if compiled else step
        rng = np.random.default_rng(0)
        losses = [host(f(Tensor(rng.normal(size=(2, 5, 3))))) for _ in range(4)]
        return losses + [host(p) for p in model.parameters()], f

    _replays_as_eager(run)


class _Counter:
    def __init__(self):
        self.steps = 0

    @lp.compile(fuse=False)
    def step(self, x):
        self.steps += 1
        return x * 2.0


def test_python_state_a_call_changes_or_that_changes_between_calls_is_not_replayed_stale():
    # (found by review) each of these replayed the first call's Python state, silently
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        f = lp.compile(lambda lst: lst.pop() * 2.0, fuse=False)  # an argument list changed by the call
        for k in range(3):
            lst = [Tensor(np.ones(2)), Tensor(np.full(2, float(k)))]
            same(f(lst), np.full(2, 2.0 * k))
            assert len(lst) == 1
    counter = _Counter()  # a method's object, changed by the call
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for _ in range(4):
            counter.step(Tensor(np.ones(2)))
    assert counter.steps == 4

    class Batch:
        x = None

    lin = nn.Linear(2, 1, dtype="float64")
    g = lp.compile(lambda b: lin(b.x).detach(), fuse=False)  # an argument's attribute changed between calls
    batch = Batch()
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        for k in range(3):
            batch.x = Tensor(np.full((1, 2), float(k)))
            same(g(batch), host(lin(batch.x).detach()))
    batch.unread = 1  # (one its code does not read: no new trace)
    g(batch)
    assert g.calls["replayed"] == 1
    weights = [lp.ones(3, dtype="float64")]  # a list of tensors the function reads by name
    h = lp.compile(lambda x: x * weights[0], fuse=False)
    h(Tensor(np.arange(3.0)))
    h(Tensor(np.arange(3.0)))
    weights[0] = lp.zeros(3, dtype="float64")
    same(h(Tensor(np.arange(3.0))), np.zeros(3))
    bank = {"a": lp.zeros(3, dtype="float64"), "b": lp.ones(3, dtype="float64")}

    def swap(x):  # ... and changed by the call
        bank["a"], bank["b"] = bank["b"], bank["a"]
        return x * bank["a"]

    s = lp.compile(swap, fuse=False)
    with pytest.warns(RuntimeWarning, match="names, or an attribute .* changed by the function"):
        got = [host(s(Tensor(np.arange(3.0)))) for _ in range(4)]
    for k, value in enumerate(got):
        same(value, np.arange(3.0) * (k % 2 == 0))


def test_python_state_of_arguments_found_by_a_fourth_review():
    import types as pytypes

    counter = pytypes.SimpleNamespace(count=1000)  # two changes in one call: a number made at a freed one's place

    def twice(x, st):
        st.count += 1
        st.count += 1
        return x * 2.0

    f = lp.compile(twice, fuse=False)
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for _ in range(5):
            f(Tensor(np.ones(2)), counter)
    assert counter.count == 1010

    class Slotted:
        __slots__ = ("scale",)

    slotted, nested = Slotted(), pytypes.SimpleNamespace(train=pytypes.SimpleNamespace(scale=1.0))
    frames = collections.deque([Tensor(np.zeros(2)), Tensor(np.zeros(2))], maxlen=2)
    g = lp.compile(lambda x, s: x * s.scale, fuse=False)
    h = lp.compile(lambda x, cfg: x * cfg.train.scale, fuse=False)
    d = lp.compile(lambda fr: fr[0] + fr[1], fuse=False)
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        for k in range(3):  # a slot, an attribute's attribute and a deque's items, set by the caller
            slotted.scale, nested.train.scale = float(k + 1), float(k + 2)
            frames.append(Tensor(np.full(2, float(k))))
            same(g(Tensor(np.ones(2)), slotted), np.full(2, k + 1.0))
            same(h(Tensor(np.ones(2)), nested), np.full(2, k + 2.0))
            same(d(frames), np.full(2, (k - 1.0 if k else 0.0) + k))


@pytest.mark.parametrize("wrap", ["partial", "callable object", "bound method"])
def test_what_a_partial_a_callable_object_or_a_method_reads_is_checked(wrap):
    layers = [nn.Identity()]

    class Holder:
        def __init__(self):
            self.act = nn.Identity()

        def __call__(self, x):
            return self.act(x)

    def body(x, scale):
        for layer in layers:
            x = layer(x)
        return x * scale

    holder = Holder()
    f = lp.compile({"partial": functools.partial(body, scale=1.0), "callable object": holder,
                    "bound method": holder.__call__}[wrap], fuse=False)
    x = Tensor(np.ones(2))
    same(f(x), np.ones(2))
    if wrap == "partial":
        layers[0] = nn.Tanh()  # a list its function reads by name
    else:
        holder.act = nn.Tanh()  # the object's attribute
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(f(x), np.tanh(np.ones(2)))
    assert f.calls == {"traced": 2, "replayed": 0, "eager": 0}


def test_a_scheduler_passed_as_an_argument_replays():
    # its step (an action, made again by a replay) sets its count, which the function's code does
    # not read: no change of an argument
    model, opt, sched = _scheduled_linear()

    def step(x, scheduler):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        scheduler.step()
        return loss

    f = lp.compile(step, fuse=False)
    for k in range(4):
        f(Tensor(np.full((2, 3), float(k))), sched)
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0} and sched.last_epoch == 4

    def reads_the_count(x, scheduler):  # a number its step sets, read by the code: not replayed stale
        scheduler.step()
        return x * float(scheduler.last_epoch)

    g = lp.compile(reads_the_count, fuse=False)
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for k in range(4):
            same(g(Tensor(np.ones(2)), sched), np.full(2, 5.0 + k))


class _AnyKey:
    """A dict key equal to every other (``==`` and ``hash`` say so), holding a scale."""

    def __init__(self, scale):
        self.scale = scale

    def __eq__(self, other):
        return isinstance(other, _AnyKey)

    def __hash__(self):
        return 0


def test_the_keys_of_a_dict_argument_key_the_call_as_values_do():
    """A dict argument's keys are keyed as its values are: ``0.0`` is not ``-0.0``,
    ``1`` not ``True``, an object by identity with its attributes the code reads
    compared (a replay gave the first call's result for each of these)."""
    x = Tensor(np.array([1.0, 2.0]))
    sign = lp.compile(lambda x, d: x * math.copysign(1.0, next(iter(d))), fuse=False)
    same(sign(x, {0.0: None}), [1.0, 2.0])
    same(sign(x, {-0.0: None}), [-1.0, -2.0])
    kind = lp.compile(lambda x, d: x * (2.0 if next(iter(d)) is True else 3.0), fuse=False)
    same(kind(x, {1: None}), [3.0, 6.0])
    same(kind(x, {True: None}), [2.0, 4.0])
    scale = lp.compile(lambda x, d: x * next(iter(d)).scale, fuse=False)
    key = _AnyKey(2.0)
    same(scale(x, {key: 0}), [2.0, 4.0])
    same(scale(x, {_AnyKey(3.0): 0}), [3.0, 6.0])  # another object its == calls equal
    key.scale = 5.0
    with pytest.warns(RuntimeWarning, match="an attribute its code reads"):
        same(scale(x, {key: 0}), [5.0, 10.0])  # the same object, an attribute set since
    same(scale(x, {key: 0}), [5.0, 10.0])
    assert scale.calls["replayed"] == 1
    named = {_AnyKey(2.0): 0}  # a dict the code names, not an argument: its key's attribute compared too
    global_key = lp.compile(lambda x: x * next(iter(named)).scale, fuse=False)
    same(global_key(x), [2.0, 4.0])
    next(iter(named)).scale = 7.0
    with pytest.warns(RuntimeWarning, match="an attribute its code reads"):
        same(global_key(x), [7.0, 14.0])


class _CfgDict(dict):
    pass


class _CfgList(list):
    pass


class _CfgTuple(tuple):
    pass


class _SlottedList(list):
    __slots__ = ("scale",)


def _with_scale(kind, scale):
    made = kind()
    made.scale = scale
    return made


@pytest.mark.parametrize("kind", [_CfgDict, _CfgList, _CfgTuple, _SlottedList])
def test_the_attributes_of_a_subclass_of_dict_list_or_tuple_are_compared(kind):
    """A dict, list or tuple of a subclass with attributes of its own (``class
    Cfg(dict)``, ``cfg.scale``): an argument made anew, or set since, or one that an
    argument holds, a dict the code names holds, a layer holds, a partial holds, the
    default of an argument, or the code names, traces again (each replayed the first
    call's value)."""
    x = Tensor(np.array([1.0, 2.0]))
    f = lp.compile(lambda x, c: x * c.scale, fuse=False)
    same(f(x, _with_scale(kind, 2.0)), [2.0, 4.0])
    same(f(x, _with_scale(kind, 3.0)), [3.0, 6.0])  # (its attributes are part of the key)
    cfg = _with_scale(kind, 2.0)
    same(f(x, cfg), [2.0, 4.0])  # (another object, alike: the first trace)
    same(f(x, cfg), [2.0, 4.0])
    cfg.scale = 4.0
    same(f(x, cfg), [4.0, 8.0])
    same(f(x, cfg), [4.0, 8.0])
    assert f.calls == {"traced": 3, "replayed": 3, "eager": 0}

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = _with_scale(kind, 2.0)

        def forward(self, x):
            return x * self.cfg.scale

    holder = argparse.Namespace(cfg=_with_scale(kind, 2.0))
    named = {"cfg": _with_scale(kind, 2.0)}
    alone, default, layer = _with_scale(kind, 2.0), _with_scale(kind, 2.0), Layer()
    part = functools.partial(lambda c, x: x * c.scale, _with_scale(kind, 2.0))

    def with_default(x, c=default):
        return x * c.scale

    for read, obj in [(lambda x: x * holder.cfg.scale, holder.cfg), (lambda x: x * named["cfg"].scale, named["cfg"]),
                      (lambda x: x * alone.scale, alone), (with_default, default), (lambda x: layer(x), layer.cfg),
                      (lambda x: part(x), part.args[0])]:
        g = lp.compile(read, fuse=False)
        same(g(x), [2.0, 4.0])
        same(g(x), [2.0, 4.0])
        obj.scale = 5.0
        with pytest.warns(RuntimeWarning, match="traced again"):
            same(g(x), [5.0, 10.0])


def test_subclassed_containers_that_hold_themselves_or_mirror_their_items_replay():
    """A subclass container whose attribute is itself (``c.me = c``), a tree whose
    children point to their parent, an attribute dict whose ``__dict__`` is itself
    (ten levels deep), and an ``EasyDict`` (attributes mirroring its items) made anew
    at each call: keyed without walking their attributes (a RecursionError, or a key
    of 2**depth parts), and replayed."""
    x = Tensor(np.array([1.0, 2.0]))
    looped = _CfgDict(a=2.0)
    looped.me = looped
    root, child = _CfgList(), _CfgList()
    child.parent, root.scale = root, 2.0
    root.append(child)
    f = lp.compile(lambda x, c: x * c["a"], fuse=False)
    g = lp.compile(lambda x, n: x * n.scale, fuse=False)
    for _ in range(3):
        same(f(x, looped), [2.0, 4.0])
        same(g(x, root), [2.0, 4.0])
    assert f.calls == g.calls == {"traced": 1, "replayed": 2, "eager": 0}

    class AttrDict(dict):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.__dict__ = self

    class EasyDict(dict):
        def __init__(self, **kwargs):
            for name, value in kwargs.items():
                setattr(self, name, value)

        def __setattr__(self, name, value):
            value = EasyDict(**value) if type(value) is dict else value
            super().__setattr__(name, value)
            super().__setitem__(name, value)

    def nested(depth):
        return AttrDict(a=2.0, sub=nested(depth - 1)) if depth else AttrDict(a=2.0)

    h = lp.compile(lambda x, c: x * c.a, fuse=False)
    for _ in range(3):
        same(h(x, nested(10)), [2.0, 4.0])
        same(h(x, EasyDict(a=2.0, opt={"m": 0.9})), [2.0, 4.0])
    same(h(x, EasyDict(a=3.0, opt={"m": 0.9})), [3.0, 6.0])
    assert h.calls == {"traced": 3, "replayed": 4, "eager": 0}


def test_subclassed_containers_found_by_review_round_27_replay_as_eager_calls():
    """A frozenset iterated in another order than an equal one keys apart; sixteen
    ``OrderedDict``s without attributes in a dict the code names leave a plain object
    among them compared; a ``State(dict)`` the code subscripts does not compare an
    attribute the code does not read (``STATE.step``: it ran eagerly); an addict-like
    dict whose bookkeeping attributes are numbers and None replays when made anew; a
    path subclass's attribute is compared; a slot read past a ``__getattr__`` that
    raises; a slot beside a ``__dict__`` that is the object itself; a private slot of a
    class renamed since; an attribute the call sets on a named tuple's subclass."""
    x = Tensor(np.array([1.0, 2.0]))
    first = lp.compile(lambda x, s: x * next(iter(s)), fuse=False)
    ordered, reordered = frozenset([0, 8]), frozenset([8, 0])
    assert list(ordered) != list(reordered)  # (equal, their hashes collide: their orders differ)
    same(first(x, ordered), [0.0, 0.0])
    same(first(x, reordered), [8.0, 16.0])

    aug = argparse.Namespace(scale=2.0)
    table = {**{f"layer{i}": collections.OrderedDict(width=8) for i in range(16)}, "aug": aug}
    crowded = lp.compile(lambda x: x * table["aug"].scale * table["layer0"]["width"], fuse=False)
    same(crowded(x), [16.0, 32.0])
    aug.scale = 3.0
    with pytest.warns(RuntimeWarning, match="traced again"):
        same(crowded(x), [24.0, 48.0])

    state = _CfgDict(lr=0.5)
    state.step = 0
    subscripted = lp.compile(lambda x: x * state["lr"], fuse=False)
    for i in range(4):
        same(subscripted(x), [0.5, 1.0])
        state.step = i + 1
    assert subscripted.calls == {"traced": 1, "replayed": 3, "eager": 0}

    class Addict(dict):
        def __init__(self, **kwargs):
            object.__setattr__(self, "_parent", None)
            object.__setattr__(self, "_frozen", False)
            super().__init__(**kwargs)

        def __getattr__(self, name):
            return self[name]

    class SlotAttrDict(dict):
        __slots__ = ("_parent",)
        __getattr__ = dict.__getitem__

    scaled = lp.compile(lambda x, c: x * c.scale, fuse=False)
    for _ in range(3):
        same(scaled(x, Addict(scale=2.0)), [2.0, 4.0])
        same(scaled(x, SlotAttrDict(scale=2.0)), [2.0, 4.0])
    assert scaled.calls == {"traced": 2, "replayed": 4, "eager": 0}

    class Remote(pathlib.PurePosixPath):
        pass

    class SelfSlot(dict):
        __slots__ = ("scale", "__dict__")

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.__dict__ = self

    Private = _private_slot_list()
    Private.__name__ = "Renamed"
    for make in (Remote, SelfSlot, Private):
        g = lp.compile(lambda x, c: x * c.scale, fuse=False)
        for scale in (2.0, 5.0):
            made = make("a") if make is Remote else make() if make is SelfSlot else make(scale)
            if make is not Private:
                made.scale = scale
            same(g(x, made), [scale, 2.0 * scale])

    class Batch(collections.namedtuple("Batch", "x y")):
        pass

    def mark(b):
        b.processed = True
        return (b.x * b.y).sum()

    marked = lp.compile(mark, fuse=False)
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for _ in range(3):
            batch = Batch(Tensor(np.ones(2)), Tensor(np.ones(2)))
            marked(batch)
            assert batch.processed

    class Level(int):
        pass

    def seen(level, x):
        level.seen = True
        return x * int(level)

    leveled = lp.compile(seen, fuse=False)
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for _ in range(3):
            level = Level(2)
            same(leveled(level, x), [2.0, 4.0])
            assert level.seen


def test_keys_of_a_dict_the_code_names_leave_its_values_compared():
    """Object keys of a dict the code names come after its values among the 16 plain
    objects compared (nine keys pushed the ninth value out: stale)."""
    class Key:
        pass

    keys = [Key() for _ in range(9)]
    table = {k: argparse.Namespace(scale=2.0) for k in keys}
    x = Tensor(np.array([1.0, 2.0]))
    f = lp.compile(lambda x: x * table[keys[8]].scale, fuse=False)
    same(f(x), [2.0, 4.0])
    table[keys[8]].scale = 3.0
    with pytest.warns(RuntimeWarning, match="traced again"):
        same(f(x), [3.0, 6.0])


def test_a_plain_object_in_a_subclassed_dict_the_code_names_is_compared_whole():
    """The plain objects in a ``Cfg(dict)`` the code names are compared with all their
    attributes, as a plain dict's (``dataclasses.astuple(CFG["aug"])`` names none)."""
    @dataclasses.dataclass
    class Aug:
        scale: float

    cfg = _CfgDict(aug=Aug(2.0))
    x = Tensor(np.array([1.0, 2.0]))
    f = lp.compile(lambda x: x * sum(dataclasses.astuple(cfg["aug"])), fuse=False)
    same(f(x), [2.0, 4.0])
    cfg["aug"].scale = 3.0
    with pytest.warns(RuntimeWarning, match="traced again"):
        same(f(x), [3.0, 6.0])


def _private_slot_list():
    """A new list subclass whose ``scale`` is a private slot (``__scale``, stored as
    ``_Scaled__scale``) that a property reads."""
    class Scaled(list):
        __slots__ = ("__scale",)

        def __init__(self, scale):
            super().__init__()
            self.__scale = scale

        @property
        def scale(self):
            return self.__scale

    return Scaled


def test_subclassed_values_key_by_the_base_classs_value_and_class_attributes_are_compared():
    """An int or str of a subclass keys by its value as the base class has it (its own
    ``==`` and ``hash`` called two apart alike); an IntFlag's value of no name by its
    value; NumPy's complex by the signs of its parts; a private slot (``__scale``,
    stored as ``_Cls__scale``) is read; a subclassed dict's class attribute set since
    traces again; a new frozenset or path as a dict's key at each call replays."""
    x = Tensor(np.array([1.0, 2.0]))

    class Caseless(str):
        def __eq__(self, other):
            return isinstance(other, str) and self.lower() == other.lower()

        def __hash__(self):
            return hash(self.lower())

    class Mod4(int):
        def __eq__(self, other):
            return int(self) % 4 == int(other) % 4

        def __hash__(self):
            return int(self) % 4

    class Perm(enum.IntFlag):
        R = 1
        W = 2

    Scaled = _private_slot_list()
    class Hyper(dict):
        scale = 2.0

    upper = lp.compile(lambda x, s: x * (2.0 if s.isupper() else 3.0), fuse=False)
    same(upper(x, Caseless("A")), [2.0, 4.0])
    same(upper(x, Caseless("a")), [3.0, 6.0])
    number = lp.compile(lambda x, m: x * float(int(m)), fuse=False)
    same(number(x, Mod4(1)), [1.0, 2.0])
    same(number(x, Mod4(5)), [5.0, 10.0])
    same(number(x, Perm(4)), [4.0, 8.0])
    same(number(x, Perm(8)), [8.0, 16.0])
    sign = lp.compile(lambda x, z: x * math.copysign(1.0, z.imag), fuse=False)
    same(sign(x, np.complex128(complex(1.0, 0.0))), [1.0, 2.0])
    same(sign(x, np.complex128(complex(1.0, -0.0))), [-1.0, -2.0])
    scaled = lp.compile(lambda x, c: x * c.scale, fuse=False)
    same(scaled(x, Scaled(2.0)), [2.0, 4.0])
    same(scaled(x, Scaled(3.0)), [3.0, 6.0])
    hyper = Hyper()
    same(scaled(x, hyper), [2.0, 4.0])
    same(scaled(x, hyper), [2.0, 4.0])
    Hyper.scale = 3.0
    with pytest.warns(RuntimeWarning, match="traced again"):
        same(scaled(x, hyper), [3.0, 6.0])
    by_key = lp.compile(lambda x, d: x * next(iter(d.values())), fuse=False)
    for _ in range(3):
        same(by_key(x, {frozenset({1, 2}): 2.0}), [2.0, 4.0])
        same(by_key(x, {pathlib.Path("a"): 2.0}), [2.0, 4.0])
    assert by_key.calls == {"traced": 2, "replayed": 4, "eager": 0}


def test_a_call_that_changes_a_subclassed_arguments_attribute_is_not_replayed():
    """``c.hist.append(1)`` on an attribute of a ``Cfg(dict)`` argument: the change a
    replay would not make is seen (it was replayed: the list stayed empty)."""
    def step(x, c):
        c.hist.append(1)
        return x * 1.0

    f = lp.compile(step, fuse=False)
    x = Tensor(np.array([1.0, 2.0]))
    with pytest.warns(RuntimeWarning, match="changed by the function"):
        for _ in range(3):
            cfg = _CfgDict()
            cfg.hist = []
            f(x, cfg)
            assert cfg.hist == [1]
    assert f.calls["replayed"] == 0


def test_named_tuples_of_one_name_and_other_fields_key_apart():
    first, second = collections.namedtuple("P", "a b"), collections.namedtuple("P", "b a")
    x = Tensor(np.array([1.0, 2.0]))
    f = lp.compile(lambda x, p: x * p.a, fuse=False)
    same(f(x, first(1.0, 2.0)), [1.0, 2.0])
    same(f(x, second(1.0, 2.0)), [2.0, 4.0])  # (p.a is the second field: the first call's 1.0 was replayed)
    same(f(x, first(1.0, 2.0)), [1.0, 2.0])
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_enum_members_subclassed_numbers_and_complex_signs_key_apart():
    """An IntEnum's member is keyed by its class and name (two classes of one name,
    members of one value, were alike), a str of a subclass with its attributes, a
    complex number with the signs of its parts."""
    x = Tensor(np.array([1.0, 2.0]))
    first = enum.IntEnum("Mode", {"A": 1})
    second = enum.IntEnum("Mode", {"B": 1})
    named = lp.compile(lambda x, m: x * (2.0 if m.name == "A" else 3.0), fuse=False)
    same(named(x, first.A), [2.0, 4.0])
    same(named(x, second.B), [3.0, 6.0])

    class Label(str):
        pass

    def label(scale):
        made = Label("a")
        made.scale = scale
        return made

    scaled = lp.compile(lambda x, s: x * s.scale, fuse=False)
    same(scaled(x, label(2.0)), [2.0, 4.0])
    same(scaled(x, label(3.0)), [3.0, 6.0])
    sign = lp.compile(lambda x, z: x * math.copysign(1.0, z.imag), fuse=False)
    same(sign(x, complex(1.0, 0.0)), [1.0, 2.0])
    same(sign(x, complex(1.0, -0.0)), [-1.0, -2.0])
    assert (named.calls["traced"], scaled.calls["traced"], sign.calls["traced"]) == (2, 2, 2)


def test_a_dict_argument_whose_attributes_raise_runs_eagerly_with_a_warning():
    class Raising(dict):
        @property
        def __dict__(self):
            raise RuntimeError("no attributes here")

    f = lp.compile(lambda x, d: x * d["s"], fuse=False)
    x = Tensor(np.array([1.0, 2.0]))
    with pytest.warns(RuntimeWarning, match="whose attributes raise when read"):
        same(f(x, Raising(s=2.0)), [2.0, 4.0])
    same(f(x, Raising(s=3.0)), [3.0, 6.0])
    assert f.calls == {"traced": 0, "replayed": 0, "eager": 2}


def test_an_iterator_argument_runs_the_call_eagerly_and_dicts_key_in_their_order():
    f = lp.compile(lambda it: next(it) * 1.0, fuse=False)
    it = iter([Tensor(np.full(2, float(k))) for k in range(3)])
    with pytest.warns(RuntimeWarning, match="an iterator argument"):
        got = [host(f(it)) for _ in range(3)]
    for k, value in enumerate(got):
        same(value, np.full(2, float(k)))
    g = lp.compile(lambda d: next(iter(d.values())) * 1.0, fuse=False)
    a, b = Tensor(np.zeros(2)), Tensor(np.ones(2))
    same(g({"a": a, "b": b}), np.zeros(2))
    same(g({"b": b, "a": a}), np.ones(2))


def test_a_fallback_warning_names_the_callers_line():
    f = lp.compile(lambda x: x * float(x.sum().item()), fuse=False)
    with pytest.warns(RuntimeWarning, match="item") as caught:
        f(Tensor(np.ones(2)))
    assert caught[0].filename == __file__


def test_a_module_attribute_set_to_an_equal_value_in_forward_is_no_change():
    class Remember(nn.Module):
        def forward(self, x):
            self.rows, self.shape = x.shape[0], tuple(x.shape)  # equal values each call (ints past 256 too)
            return x * 2.0

    model = Remember()
    f = lp.compile(lambda x: model(x), fuse=False)
    with pytest.warns(RuntimeWarning, match="traced again"):  # (the first call sets them)
        f(Tensor(np.ones((300, 2))))
    for _ in range(3):
        f(Tensor(np.ones((300, 2))))
    assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}
    from leanpass.nn import module as module_

    count = module_._CHANGES[0]
    model.rows = int("300")  # (an equal int, another object: no change counted, so an MLP's check stays)
    assert module_._CHANGES[0] == count


def test_a_causal_mask_made_in_the_step_replays():
    def step(x):
        mask = nn.Transformer.generate_square_subsequent_mask(3, dtype="float64")
        return (x + mask).softmax(-1)

    f = lp.compile(step, fuse=False)
    for _ in range(3):
        x = Tensor(RNG.normal(size=(3, 3)))
        same(f(x), host(step(x)))
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("kind", ["named tuple", "OrderedDict"])
def test_values_of_the_call_in_a_named_tuple_or_an_ordered_dict_replay(kind):
    # their slots are the result's: kept to the end of the replay, not freed after their last use
    P = collections.namedtuple("P", "total y")

    def f(x):
        y = x * 2.0
        return P(y.sum(), y) if kind == "named tuple" else collections.OrderedDict(total=y.sum(), y=y)

    g = lp.compile(f, fuse=False)
    for k in range(3):
        x = Tensor(np.full(3, float(k)))
        out, want = g(x), f(x)
        assert type(out) is type(want)
        got, want = (out._asdict(), want._asdict()) if kind == "named tuple" else (out, want)
        for name in ("total", "y"):
            same(got[name], host(want[name]))
    assert g.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_gradient_hooks_registered_after_the_trace_run_in_the_replays():
    """A leaf's gradient hooks (``register_hook`` outside the function) run in each
    replayed backward pass on the leaf's gradient, as eagerly: the first ones
    registered since the trace trace again (a hook may write anything, which decides
    which checks may run first); after that, the hooks there are at each replay run,
    one added or removed since included, without tracing again."""
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)

    def f(x):
        w.grad = None
        (w * x).sum().backward()

    g = lp.compile(f)
    g(Tensor(np.ones(2)))
    g(Tensor(np.ones(2)))
    seen = []
    handle = w.register_hook(lambda grad: grad * 100)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g(Tensor(np.ones(2)))
            same(w.grad, [100.0, 100.0])
            g(Tensor(np.full(2, 2.0)))
            same(w.grad, [200.0, 200.0])
            second = w.register_hook(lambda grad: seen.append(host(grad)))  # sees the first hook's gradient
            g(Tensor(np.full(2, 3.0)))
            same(w.grad, [300.0, 300.0])
            second.remove()
            handle.remove()
            g(Tensor(np.full(2, 4.0)))
            same(w.grad, [4.0, 4.0])
    finally:
        handle.remove()
    np.testing.assert_array_equal(seen, [[300.0, 300.0]])
    assert g.calls["eager"] == 0 and g.calls["traced"] <= 2, g.explain()  # (2: no hook was left by other tests)


def test_the_first_gradient_hook_after_a_trace_keeps_its_checks_in_place():
    """A hook may write any tensor (here the indices an embedding reads after the
    backward pass): a check moved before the pass (nothing could change the indices
    there, without hooks) would pass on the old values and the replay would take row
    -1. The first gradient hooks after a trace trace again, and the check stays."""
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    table = Tensor(np.arange(8.0).reshape(4, 2))
    idx = lp.asarray(np.array([0, 1]))

    def f(x):
        w.grad = None
        (w * x).sum().backward()
        return nn.functional.embedding(idx, table)

    compiled, x = lp.compile(f), Tensor(np.ones(2))
    compiled(x)
    same(compiled(x), host(table)[:2])

    def hook(g):
        idx[...] = -1

    handle = w.register_hook(hook)
    try:
        with pytest.raises(IndexError, match="embedding: indices must be in"):
            f(x)
        idx[...] = 0
        with pytest.raises(IndexError, match="embedding: indices must be in"):
            compiled(x)
    finally:
        handle.remove()


@pytest.mark.parametrize("kind", ["tensor", "item", "numpy", "post tensor", "svd", "in place"])
def test_what_a_hook_makes_or_reads_on_the_host_for_the_code_after_it_runs_eagerly(kind):
    """A hook runs unrecorded (each replay runs it): a tensor it made, which the
    function reads after the backward pass, or a number a gradient hook read on the
    host, would be the first call's in a replay (found by review: 2, 2, 2 where eager
    gives 2, 8, 18). Such a call runs eagerly, with a warning naming it."""
    def make():
        w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
        box = {}
        if kind == "tensor":
            w.register_hook(lambda g: box.__setitem__("n", (g * g).sum()))
        elif kind == "item":
            w.register_hook(lambda g: box.__setitem__("n", (g * g).sum().item()))
        elif kind == "numpy":
            w.register_hook(lambda g: box.__setitem__("n", float((g * g).sum().numpy())))
        elif kind == "svd":  # (a decomposition's outputs are made apart from the other operations')
            w.register_hook(lambda g: box.__setitem__("n", lp.linalg.svd(lp.stack([g, g * 2.0]))[1]))
        elif kind == "in place":  # a value the function made, handed to the hook and changed there
            def add_into(g):
                buffer = box["buffer"]
                buffer += g.sum()

            w.register_hook(add_into)
        else:
            w.register_post_accumulate_grad_hook(lambda t: box.__setitem__("n", Tensor((t.grad * t.grad).sum())))

        def f(x):
            w.grad = None
            if kind == "in place":
                box["buffer"] = lp.zeros(())
            (w * x).sum().backward()
            return x * (box.pop("buffer") if kind == "in place" else box["n"])

        return f

    eager, compiled = make(), lp.compile(make())
    words = "a tensor made by a" if kind in ("tensor", "post tensor", "svd") else \
        "in-place change in a gradient hook of a value" if kind == "in place" else "in a gradient hook"
    with pytest.warns(RuntimeWarning, match=words):
        for k in (1.0, 2.0, 3.0):
            x = Tensor(np.full(2, k))
            same(compiled(x), host(eager(x)))
    assert compiled.calls["replayed"] == 0


def test_a_gradient_hook_added_or_removed_inside_the_function_runs_eagerly(device):
    """A replay would neither register the hook again (eagerly one more at each call)
    nor hook a value the call makes: such a call runs eagerly, with eager's values."""
    def hooked_leaf(w, x):
        handle = w.register_hook(lambda g: g * 3.0)
        (w * x).sum().backward()
        handle.remove()

    def hooked_value(w, x):
        h = w * x
        h.register_hook(lambda g: g * 3.0)
        (h * h).sum().backward()

    for fn in (hooked_leaf, hooked_value):
        w1 = Tensor(np.array([1.0, -2.0]), requires_grad=True, device=device)
        w2 = Tensor(np.array([1.0, -2.0]), requires_grad=True, device=device)
        compiled = lp.compile(fn)
        with pytest.warns(RuntimeWarning, match=r"gradient hook \(register_hook\) added or removed inside"):
            for k in range(3):
                x = Tensor(np.array([0.5, 4.0]) * (k + 1), device=device)
                compiled(w2, x)
                fn(w1, x)
                same(w2.grad, host(w1.grad))
        assert compiled.calls["replayed"] == 0


def test_gradient_hooks_on_a_models_parameters_replay_bit_for_bit(device):
    """Gradient clipping by hooks (``p.register_hook(lambda g: g.clamp(-c, c))``), with a
    hook that only looks and one on the input that requires grad: a compiled training
    step equals the eager one at every step, replayed, and a hook that raises raises
    from the replay as eagerly, before any gradient is written."""
    def setup():
        lp.manual_seed(3)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).to(device)
        seen = []
        for p in model.parameters():
            p.register_hook(lambda g: g.clamp(-0.05, 0.05))
        model[2].bias.register_hook(lambda g: seen.append(g * 1.0))  # (kept as a tensor: no host read)
        return model, lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), seen

    (m1, o1, seen1), (m2, o2, seen2) = setup(), setup()
    eager, compiled = training_step(m1, o1), lp.compile(training_step(m2, o2))
    inputs = []
    for _ in range(4):
        x1 = Tensor(RNG.normal(size=(5, 4)), requires_grad=True, device=device)
        x2 = Tensor(host(x1), requires_grad=True, device=device)
        for x in (x1, x2):
            x.register_hook(lambda g: g * 2.0)
        y = lp.asarray(RNG.integers(0, 2, size=5), device=device)
        same(compiled(x2, y), host(eager(x1, y)))
        same(x2.grad, host(x1.grad))
        inputs.append(x2)
    for p, q in zip(m1.parameters(), m2.parameters()):
        same(q, host(p))
    np.testing.assert_array_equal([host(t) for t in seen2], [host(t) for t in seen1])
    assert len(seen1) == 4 and compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}, compiled.explain()

    def fails(g):
        raise ArithmeticError("a hook's own error")

    handles = [m[0].weight.register_hook(fails) for m in (m1, m2)]
    before = [host(p) for p in m2.parameters()]
    for step, x in ((eager, x1), (compiled, inputs[0])):
        with pytest.raises(ArithmeticError, match="a hook's own error"):
            step(x, y)
    for handle in handles:
        handle.remove()
    for p, q in zip(m1.parameters(), m2.parameters()):  # (zero_grad ran: its gradients, no more)
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            same(q.grad, host(p.grad))
    for p, b in zip(m2.parameters(), before):
        same(p, b)


def test_a_replay_that_falls_back_after_a_draw_draws_as_eager_does():
    """A replay that meets what its trace did not see (here: an op's shape, made to
    differ) runs the call eagerly instead; the draws the replay made before that are
    given back to the generator first, so the call draws what an eager call draws and
    the stream goes on as eagerly (a seeded run stays a seeded run)."""

    def f(x):
        masked = nn.functional.dropout(x, 0.5)
        return (masked * 2.0).sum()

    compiled = lp.compile(f, fuse=False)
    x = Tensor(np.ones(64))
    compiled(x)  # traced
    plan = next(iter(compiled._entries.values()))
    after = [i for i, e in enumerate(plan.events) if e[0] == "draw"][0]
    i = next(i for i, e in enumerate(plan.events) if i > after and e[0] == "op")
    plan.events[i] = (*plan.events[i][:6], (65,), *plan.events[i][7:])  # a shape the replay will not see
    lp.manual_seed(3)
    eager = [host(f(x)), host(nn.functional.dropout(x, 0.5))]
    lp.manual_seed(3)
    with pytest.warns(RuntimeWarning, match="a replay met"):
        first = compiled(x)
    got = [host(first), host(nn.functional.dropout(x, 0.5))]
    assert compiled.calls["eager"] == 1 and "a replay met" in compiled.explain()
    assert isinstance(plan, _compile.plan.Plan)
    np.testing.assert_array_equal(got[0], eager[0])
    np.testing.assert_array_equal(got[1], eager[1])


def test_post_accumulate_hooks_run_after_each_replayed_backward():
    """A leaf's post-accumulate-grad hooks (DDP's averaging is made of them) run after
    every replayed backward, in eager's order, with the gradients written; a gradient
    hook (``register_hook``), which changes a gradient on the way, still makes the
    call run eagerly."""
    def setup():
        lp.manual_seed(2)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        seen = []
        for i, p in enumerate(model.parameters()):
            def halve(t, i=i):
                seen.append(i)
                t.grad[...] *= 0.5  # in place, as an all-reduce writes its average
            p.register_post_accumulate_grad_hook(halve)
        return model, lp.optim.SGD(model.parameters(), lr=0.1), seen

    (m1, o1, seen1), (m2, o2, seen2) = setup(), setup()
    eager, compiled = training_step(m1, o1), lp.compile(training_step(m2, o2))
    for _ in range(4):
        x, y = Tensor(RNG.normal(size=(5, 4))), lp.asarray(RNG.integers(0, 2, size=5))
        same(compiled(x, y), eager(x, y))
    for p, q in zip(m1.parameters(), m2.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
    assert seen2 == seen1 and len(seen1) == 4 * 4

    handles = [m[0].weight.register_hook(lambda g: g * 2.0) for m in (m1, m2)]  # before the post hooks, as eagerly
    for _ in range(2):
        same(compiled(x, y), eager(x, y))
    for p, q in zip(m1.parameters(), m2.parameters()):
        same(p, q)
    for handle in handles:
        handle.remove()
    assert seen2 == seen1 and compiled.calls["eager"] == 0 and compiled.calls["traced"] <= 2


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_an_optimizer_stepped_in_post_accumulate_hooks_replays(name):
    """PyTorch's "optimizer step in backward": one optimizer per parameter, stepped
    (and its gradient cleared) by the parameter's post-accumulate hook; the compiled
    step is the backward pass. Adam's state counts its steps, which the hooks change
    outside any recorded action: each replay runs the hooks again, so that is no
    change of the function's own (it ran eagerly from the third call), and the
    replays are eager's, bit for bit."""
    def setup():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
        opts = {id(p): getattr(lp.optim, name)([p], lr=0.01) for p in model.parameters()}

        def hook(p):
            opts[id(p)].step()
            opts[id(p)].zero_grad()
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(hook)

        def step(x, y):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss.detach()
        return model, step

    (m1, eager), (m2, step) = setup(), setup()
    compiled = lp.compile(step, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(5):
            x, y = Tensor(RNG.normal(size=(8, 4))), lp.asarray(RNG.integers(0, 3, size=8))
            same(compiled(x, y), eager(x, y))
    for p, q in zip(m1.parameters(), m2.parameters(), strict=True):
        same(q, p)
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


def test_an_option_a_hook_sets_read_after_the_backward_pass_runs_the_call_eagerly():
    """A post-accumulate hook halves the learning rate, and the function reads it after
    the backward pass (a manual update with it): a replay would use the trace's
    number, so the call runs eagerly, with a warning naming the hooks; results are
    eager's. (Round 16 of review: the hooks' changes, counted as an action's since
    Adam in hooks replays, let it replay with the stale rate.)"""
    def make():
        lp.manual_seed(0)
        lin = nn.Linear(4, 3, dtype="float64")
        opt = lp.optim.SGD(lin.parameters(), lr=0.1)

        def hook(p):
            if p is lin.weight:
                opt.param_groups[0]["lr"] *= 0.5
        for p in lin.parameters():
            p.register_post_accumulate_grad_hook(hook)

        def step(x):
            opt.zero_grad()
            loss = (lin(x) ** 2).mean()
            loss.backward()
            lr = opt.param_groups[0]["lr"]
            with lp.no_grad():
                for p in lin.parameters():
                    p -= lr * lp.as_tensor(p.grad)
            return loss.detach() * lr
        return lin, step

    (l1, eager), (l2, step) = make(), make()
    compiled = lp.compile(step, fuse=False)
    with pytest.warns(RuntimeWarning, match="read after the post-accumulate-grad hooks"):
        for _ in range(5):
            x = Tensor(RNG.normal(size=(8, 4)))
            same(compiled(x), eager(x))
    same(l2.weight, l1.weight)
    assert compiled.calls["replayed"] == 0


@pytest.mark.parametrize("reached", [True, False])
def test_a_returned_leaf_with_its_gradient_steps_as_eagerly(reached):
    """A leaf made in the call and returned comes back with its ``.grad``: ``has_grad``,
    an optimizer's step and ``clip_grad_norm_`` see it as eagerly; where no pass
    reached it, it has no gradient (its ``.grad`` reads as zeros, as eagerly)."""
    w = Tensor(np.array([1.0, -2.0]), requires_grad=True)

    def f(x):
        xa = x.detach().requires_grad_()
        (xa * w).sum().backward() if reached else (x * w).sum().backward()
        return xa

    compiled = lp.compile(f)
    for k in range(3):
        x = Tensor(np.array([0.5, 1.5]) * (k + 1))
        got, want = compiled(x), f(x)
        assert got.has_grad == want.has_grad == reached
        same(got.grad, want.grad)
        if reached:
            same(lp.nn.utils.clip_grad_norm_([got], 1.0), lp.nn.utils.clip_grad_norm_([want], 1.0))
        for t in (got, want):
            lp.optim.SGD([t], lr=0.5, momentum=0.9).step()
        same(got, want)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_an_option_read_after_hooks_that_only_step_their_optimizers_replays():
    """Adam stepped in post-accumulate hooks changes its step counts, not its options: an
    option of another optimizer read after the backward pass (a manual update of the
    head) is no option the hooks set, and the step replays, as eager's."""
    def make():
        lp.manual_seed(0)
        body, head = nn.Linear(4, 8, dtype="float64"), nn.Linear(8, 1, dtype="float64")
        adams = {id(p): lp.optim.Adam([p], lr=0.01) for p in body.parameters()}
        sgd = lp.optim.SGD(head.parameters(), lr=0.1)

        def hook(p):
            adams[id(p)].step()
            adams[id(p)].zero_grad()
        for p in body.parameters():
            p.register_post_accumulate_grad_hook(hook)

        def step(x):
            sgd.zero_grad()
            loss = (head(lp.tanh(body(x))) ** 2).mean()
            loss.backward()
            lr = sgd.param_groups[0]["lr"]
            with lp.no_grad():
                for p in head.parameters():
                    p -= lr * lp.as_tensor(p.grad)
            return loss.detach()
        return step

    eager, compiled = make(), lp.compile(make(), fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(5):
            x = Tensor(RNG.normal(size=(8, 4)))
            same(compiled(x), eager(x))
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


def test_zero_grad_all_inside_the_function_runs_it_eagerly():
    """``t.zero_grad_all()`` resets gradients apart from the recorded operations: a
    replay would skip it, and the next pass would add to the gradients (of a leaf, of a
    value that retains its own)."""
    w = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)

    def f(x):
        h = w * x
        h.retain_grad()
        loss = (h * h).sum()
        loss.backward(retain_graph=True)
        loss.zero_grad_all()
        (h * 3.0).sum().backward()
        return lp.as_tensor(w.grad) * 1.0, lp.as_tensor(h.grad) * 1.0

    compiled = lp.compile(f)
    with pytest.warns(RuntimeWarning, match="zero_grad_all"):  # (lp.autograd.zero_graph_grads(loss) alike)
        for k in range(3):
            x = Tensor(np.array([1.0, 2.0, 3.0]) * (k + 1))
            w.grad = None
            got = compiled(x)
            w.grad = None
            want = f(x)
            for a, b in zip(got, want, strict=True):
                same(a, b)
    assert compiled.calls["replayed"] == 0


def test_a_post_accumulate_hook_added_inside_the_function_runs_eagerly():
    """A replay runs the hooks there are; one the function adds (or removes) would not
    be added again, so such a call runs eagerly (with a warning), with eager's values."""
    def halve(p):
        p.grad[...] *= 0.5

    def setup():
        lp.manual_seed(0)
        model = nn.Linear(3, 1)
        return model, lp.optim.SGD(model.parameters(), lr=0.1)

    def stepper(model, opt):
        def step(x):
            opt.zero_grad()
            loss = model(x).sum()
            handle = model.weight.register_post_accumulate_grad_hook(halve)
            loss.backward()
            handle.remove()
            opt.step()
            return loss
        return step

    (m1, o1), (m2, o2) = setup(), setup()
    eager, compiled = stepper(m1, o1), lp.compile(stepper(m2, o2), fuse=False)
    x = Tensor(np.arange(6.0).reshape(2, 3))
    with pytest.warns(RuntimeWarning, match="post-accumulate-grad hook added or removed"):
        for _ in range(3):
            same(compiled(x), eager(x))
    same(m2.weight, m1.weight)
    assert compiled.calls["replayed"] == 0


# ---- autograd.grad and lp.func inside a compiled function -----------------------------------


def test_autograd_grad_in_a_step_replays_without_writing_grad(device):
    """A step that takes its gradients with autograd.grad and updates the parameters by
    hand, under no_grad: replayed (no .grad written, as eagerly), equal to eager bit
    for bit."""
    def setup():
        lp.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8, device=device), nn.Tanh(), nn.Linear(8, 1, device=device))

    def stepper(model):
        params = list(model.parameters())

        def step(x, y):
            loss = ((model(x) - y) ** 2).mean()
            grads = lp.autograd.grad(loss, params)
            with lp.no_grad():
                for p, g in zip(params, grads):
                    p -= 0.1 * g
            return loss, grads[0]

        return step

    m1, m2 = setup(), setup()
    eager, compiled = stepper(m1), lp.compile(stepper(m2))
    for _ in range(4):
        x, y = Tensor(RNG.normal(size=(5, 4)), device=device), Tensor(RNG.normal(size=(5, 1)), device=device)
        (l1, g1), (l2, g2) = eager(x, y), compiled(x, y)
        same(l2, l1)
        same(g2, g1)
        assert not g2.requires_grad
    for p, q in zip(m1.parameters(), m2.parameters()):
        same(q, p)
        assert not q.has_grad and not p.has_grad  # (.grad reads as zeros, as it did before)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
    assert "1 backward pass (1 of them autograd.grad)" in compiled.explain()


def loss_of(w, x, y):
    return ((x @ w - y) ** 2).mean()


FUNCTIONAL = {  # a step written with lp.func (JAX's style): the gradient for an argument
    "grad": lambda w, x, y: (w - 0.1 * lp.func.grad(loss_of)(w, x, y),),
    "value_and_grad": lambda w, x, y: lp.func.value_and_grad(loss_of)(w, x, y),
    "grad argnums": lambda w, x, y: lp.func.grad(loss_of, argnums=(0, 1))(w, x, y),
    "grad has_aux": lambda w, x, y: lp.func.grad(lambda w, x, y: (loss_of(w, x, y), x.sum()), has_aux=True)(w, x, y),
    "vjp": lambda w, x, y: lp.func.vjp(lambda w: x @ w, w)[1](y),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL))
def test_lp_func_transforms_replay(name, device):
    """lp.func.grad's input is a new leaf on the argument's values (a value of its own in
    the trace, so that the gradient is aimed at it, not at the argument)."""
    fn = FUNCTIONAL[name]
    compiled = lp.compile(fn)
    for _ in range(4):
        w, x, y = (Tensor(RNG.normal(size=s), device=device) for s in ((4, 1), (5, 4), (5, 1)))
        expected, got = fn(w, x, y), compiled(w, x, y)
        for a, b in zip(jax_leaves(expected), jax_leaves(got)):
            same(b, a)
        assert w.grad is None and not w.requires_grad
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}, compiled.explain()


def jax_leaves(value):
    if isinstance(value, Tensor):
        return [value]
    return [t for v in value for t in jax_leaves(v)]


def test_autograd_grad_of_an_intermediate_and_of_an_unused_input(device):
    w = Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True, device=device)
    unused = Tensor(np.ones(3), requires_grad=True, device=device)

    def f(x):
        h = x * w
        loss = (h.tanh() ** 2).sum()
        gh, gw, gu, gh2 = lp.autograd.grad(loss, [h, w, unused, h], allow_unused=True)
        return gh, gw, gu, gh2

    compiled = lp.compile(f, fuse=False)  # (bit for bit: fused, the tanh run is a Numba loop from the third call)
    for k in range(3):
        x = Tensor(np.array([1.0, 2.0, -0.5]) * (k + 1), device=device)
        (a1, b1, c1, d1), (a2, b2, c2, d2) = f(x), compiled(x)
        same(a2, a1)
        same(b2, b1)
        same(d2, d1)  # (one tensor asked for twice)
        assert c1 is None and c2 is None
    assert not w.has_grad and compiled.calls["replayed"] == 2


def _hvp(w, x, v):
    value, (hv, _) = lp.func.hvp(lambda w, x: (lp.tanh(x @ w) ** 2).sum(), (w, x), (v, lp.zeros_like(x)))
    return value, hv


def _third_derivative(w, x, v):
    g, = lp.autograd.grad((w ** 3 * v).sum(), w, create_graph=True)
    h, = lp.autograd.grad(g.sum(), w, create_graph=True)
    t, = lp.autograd.grad(h.sum(), w)
    return g.detach(), h.detach(), t


def _gradient_penalty(model, opt):
    def step(w, x, v):  # (w and v unused: the scenarios share a signature)
        opt.zero_grad()
        out = model(x).sum()
        g, = lp.autograd.grad(out, x, create_graph=True)
        loss = out + ((lp.linalg.vector_norm(g, axis=1) - 1) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


def _through_a_change(w, x, v):  # w ** 3 by an in-place power of a value made in the call (the change saves it)
    y = w * 1.0
    y **= 3
    g, = lp.autograd.grad((y * v).sum(), w, create_graph=True)
    h, = lp.autograd.grad(g.sum(), w)
    return g.detach(), h


def _through_a_change_outside_the_graph(w, x, v):  # ... of a value with no node: its old state is a new leaf
    buf = x.detach()[:3, :2] * 2
    buf *= w
    g, = lp.autograd.grad((buf ** 2 * v).sum(), w, create_graph=True)
    h, = lp.autograd.grad(g.sum(), w)
    return g.detach(), h


def _third_order_gelu(w, x, v):  # GELU's rule changes its own fresh values in place (grad *= g)
    g, = lp.autograd.grad(nn.functional.gelu(w, approximate="tanh").sum(), w, create_graph=True)
    h, = lp.autograd.grad(g.sum(), w, create_graph=True)
    t, = lp.autograd.grad((h * v).sum(), w)
    return g.detach(), h.detach(), t


_TANGENT = {}  # the tangent a function reads from outside (state, changed in place between calls)


def _hvp_along_state(w, x, v):  # the tangent is state: autograd.grad's grad_outputs from outside the call
    tangent = _TANGENT[w.device]
    return lp.func.hvp(lambda w: (lp.sin(w) * w ** 3).sum(), (w,), (tangent,))


def _jvp(w, x, v):  # forward mode from two reverse passes (a cotangent leaf made in the call)
    return lp.func.jvp(lambda w: lp.tanh(x @ w) * 2.0, (w,), (v,))


SECOND_ORDER = {"hvp": _hvp, "third derivative": _third_derivative, "through a change": _through_a_change,
                "through a change outside the graph": _through_a_change_outside_the_graph,
                "third order GELU": _third_order_gelu, "hvp along a tangent from outside": _hvp_along_state,
                "jvp": _jvp}


def _cnn(device):
    """Convolutions (padded and not, and transposed), batch norm, max-pooling (2 x 2,
    and overlapping windows with padding) and average pooling: their rules' scatters
    of patches."""
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1, device=device), nn.BatchNorm2d(3, device=device), nn.Tanh(),
        nn.MaxPool2d(3, stride=1, padding=1), nn.MaxPool2d(2), nn.Conv2d(3, 2, 3, device=device), nn.Tanh(),
        nn.ConvTranspose2d(2, 2, 2, stride=2, device=device), nn.Tanh(),
        nn.AvgPool2d(2, stride=1), nn.Flatten(), nn.Linear(18, 1, device=device))


@pytest.mark.parametrize("name", [*SECOND_ORDER, "gradient penalty", "gradient penalty through a CNN"])
def test_second_derivatives_are_replayed(device, name):
    """``autograd.grad(create_graph=True)`` inside the function (``lp.func.hvp``,
    ``lp.func.jvp``, a gradient penalty in a training step, through a CNN too, a third
    derivative): the pass records its rules as operations, which replay like any other
    (with the in-place changes the rules make on their own fresh values: ``linear``'s
    ``out += b``), bit for bit as eagerly. A tangent read from outside is read again at
    each replay (changed in place here between calls)."""
    _TANGENT[device] = Tensor(RNG.normal(size=(3, 2)), device=device)
    penalty = name.startswith("gradient penalty")
    if penalty:
        def setup():
            lp.manual_seed(0)
            if name == "gradient penalty":
                model = nn.Sequential(nn.Linear(3, 8, device=device), nn.Tanh(), nn.Linear(8, 1, device=device))
            else:
                model = _cnn(device)
            return model, lp.optim.Adam(model.parameters(), lr=1e-2)

        (m1, o1), (m2, o2) = setup(), setup()
        eager, compiled = _gradient_penalty(m1, o1), lp.compile(_gradient_penalty(m2, o2), fuse=False)
    else:
        eager = SECOND_ORDER[name]
        compiled = lp.compile(eager, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            w, v = Tensor(RNG.normal(size=(3, 2)), device=device), Tensor(RNG.normal(size=(3, 2)), device=device)
            shape = (2, 1, 8, 8) if name == "gradient penalty through a CNN" else (5, 3)
            x = Tensor(RNG.normal(size=shape), device=device, requires_grad=penalty)
            if name in ("third derivative", "through a change", "through a change outside the graph",
                        "third order GELU"):
                w.requires_grad_(True)
            for a, b in zip(jax_leaves(eager(w, x, v)), jax_leaves(compiled(w, x, v))):
                same(b, a)
            with lp.no_grad():
                _TANGENT[device].mul_(1.5)
    if penalty:
        for p, q in zip(m1.parameters(), m2.parameters()):
            same(q, p)
        for p, q in zip(m1.buffers(), m2.buffers()):
            same(q, p)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}, compiled.explain()


@pytest.mark.parametrize("kind", ["invertible", "singular", "mixed"])
def test_an_hvp_through_det_replays_bit_for_bit(device, kind):
    """While a call is traced ``det``'s rule takes its masked form (it reads nothing on
    the host to choose), grouped as its other forms: an hvp through it replays eager's
    values bit for bit, for a batch of invertible matrices, of singular ones, and of
    both (found by review: 2.7e-15 off)."""
    rng = np.random.default_rng(3)
    weights = Tensor(rng.normal(size=(4,)), device=device)

    def f(a, v):
        return lp.func.hvp(lambda a: (lp.linalg.det(a) * weights).sum(), (a,), (v,))[1][0]

    compiled = lp.compile(f, fuse=False)
    for _ in range(3):
        a = rng.normal(size=(4, 3, 3))
        if kind != "invertible":
            a[1, 0] = a[1, 1]  # a repeated row: det 0
        if kind == "singular":
            a[:, 0] = a[:, 1]
        a, v = Tensor(a, device=device), Tensor(rng.normal(size=(4, 3, 3)), device=device)
        same(compiled(a, v), f(a, v))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}, compiled.explain()


def test_a_hook_registered_after_the_trace_of_a_second_derivative_traces_again(device):
    """A plan whose one backward pass is ``autograd.grad(create_graph=True)`` (recorded as
    its operations) is stale once a gradient hook is registered, as any plan with a pass
    (a review found the hook ignored)."""
    w = Tensor(np.array([1.0, 2.0]), device=device, requires_grad=True)

    def f(x):
        g, = lp.autograd.grad((w ** 2 * x).sum(), w, create_graph=True)
        return g.detach()

    compiled = lp.compile(f)
    x = Tensor(np.ones(2), device=device)
    same(compiled(x), f(x))
    same(compiled(x), f(x))
    w.register_hook(lambda g: g * 100)
    with pytest.warns(RuntimeWarning, match="gradient hooks"):
        same(compiled(x), f(x))


def test_backward_with_create_graph_inside_the_function_runs_eagerly_with_one_warning():
    """``backward(create_graph=True)`` writes ``.grad`` as Tensors in a graph: not replayed."""
    def f(w):
        (w ** 3).sum().backward(create_graph=True)
        g = w.grad
        w.grad = None
        return g.detach()

    compiled = lp.compile(f)
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.warns(RuntimeWarning, match="runs eagerly for these arguments: backward.create_graph=True."):
        same(compiled(w), 3 * np.array([1.0, 2.0]) ** 2)
    same(compiled(w), 3 * np.array([1.0, 2.0]) ** 2)  # (no second warning: errors in tests)
    assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 1}


IN_PLACE = {  # a change of a value made in the call, recorded in the graph: (x, w) -> a tensor
    "h += x": lambda x, w: _changed(x * w, "__iadd__", x),
    "h -= 1.5": lambda x, w: _changed(x * w, "__isub__", 1.5),
    "h += w[0] (broadcast)": lambda x, w: _changed(x * 1, "__iadd__", w[0]),
    "h.mul_(w)": lambda x, w: (x + 1).mul_(w),
    "h.clamp_(lo, hi)": lambda x, w: (x * w).clamp_(-0.5, 0.5),
    "h.exp_()": lambda x, w: (x * w).exp_(),
    "y[:, 0] = 0.0": lambda x, w: _changed(x * w, "__setitem__", (slice(None), 0), 0.0),
    "y[:, 0] = w[:, 0]": lambda x, w: _changed(x * 1, "__setitem__", (slice(None), 0), w[:, 0]),
    "y.masked_fill_(x > 0, 0.5)": lambda x, w: (x * w).masked_fill_(x > 0, 0.5),
}
IN_PLACE_EAGERLY = {  # ... and the changes a replay of the change out of place would get wrong
    "of a view": lambda x, w: _changed(x * 1, "__getitem__", slice(1, None)).__imul__(w[1:]),
    "a detached tensor on its array": lambda x, w: (lambda h, d: _changed(h, "__iadd__", w) * d)(
        *(lambda h: (h, h.detach()))(x * 1)),
    "an integer-array index": lambda x, w: _changed(x * 1, "__setitem__", lp.asarray([0, 2], device=x.device), w[:2]),
    "an operand on its own memory": lambda x, w: (lambda h: _changed(h, "__iadd__", h))(x * w),
}


def _changed(t, method, *args):
    out = getattr(t, method)(*args)
    return t if method == "__setitem__" else out


@pytest.mark.parametrize("name", list(IN_PLACE) + list(IN_PLACE_EAGERLY))
def test_in_place_changes_in_the_graph(device, name):
    """An in-place change recorded in the graph, of a value made in the call, replays as
    its operation out of place (bit for bit as eagerly, forward and backward); where the
    change's memory is seen some other way (a view, another tensor on its array, an
    index array) the call runs eagerly, with one warning, and its results stay eager's."""
    replayed = name in IN_PLACE
    change = IN_PLACE[name] if replayed else IN_PLACE_EAGERLY[name]

    def step(x, w):
        out = change(x, w)
        loss = (out * out).sum()
        loss.backward()
        return loss

    compiled = lp.compile(step, fuse=False)
    weights = RNG.normal(size=(4, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            data = RNG.normal(size=(4, 5))
            xs = [Tensor(data, device=device, requires_grad=True) for _ in range(2)]
            ws = [Tensor(weights, device=device, requires_grad=True) for _ in range(2)]
            same(compiled(xs[1], ws[1]), step(xs[0], ws[0]))
            same(xs[1].grad, xs[0].grad)
            same(ws[1].grad, ws[0].grad)
    messages = [str(w.message) for w in caught]
    if replayed:
        assert not messages and compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
    else:
        assert len(messages) == 1 and "an in-place change recorded in the graph" in messages[0], messages
        assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 3}


def test_a_gradient_from_autograd_grad_changed_or_used_in_place(device):
    """``p.sub_(g)`` and ``g.clamp_()`` with autograd.grad's gradient: the replay makes
    those changes on the gradient's value of the call (a review found them raising)."""
    def stepper(w):
        def step(x):
            loss = ((w * x) ** 2).sum()
            (g,) = lp.autograd.grad(loss, [w])
            with lp.no_grad():
                g.clamp_(-2.0, 2.0)
                w.sub_(g * 0.1)
            return loss

        return step

    w1, w2 = (Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True, device=device) for _ in range(2))
    eager, compiled = stepper(w1), lp.compile(stepper(w2))
    for k in range(3):
        x = Tensor(np.array([1.0, 2.0, -0.5]) * (k + 1), device=device)
        same(compiled(x), eager(x))
        same(w2, w1)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_autograd_grad_with_a_hook_added_since_or_a_result_in_a_live_graph(device):
    """A gradient hook of an input registered since the trace: its replays run it, as
    eager's autograd.grad does; a result in a graph still alive runs eagerly."""
    w = Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True, device=device)

    def f(x):
        return lp.autograd.grad((w * x).sum(), [w])[0]

    compiled = lp.compile(f)
    x = Tensor(np.ones(3), device=device)
    compiled(x)
    handle = w.register_hook(lambda g: g * 10)
    same(compiled(x), np.full(3, 10.0))
    same(compiled(x * 2.0), np.full(3, 20.0))
    handle.remove()
    same(compiled(x), np.ones(3))
    assert compiled.calls["eager"] == 0 and compiled.calls["traced"] <= 2, compiled.explain()

    def g(x):
        lp.autograd.grad((w * x).sum(), [w])
        return w * x  # in a graph still alive: eagerly a result that requires grad

    compiled = lp.compile(g)
    with pytest.warns(RuntimeWarning, match="a graph still alive"):
        assert compiled(x).requires_grad
    assert compiled(x).requires_grad and compiled.calls["eager"] == 1


def test_lp_func_grad_of_one_tensor_passed_twice_keeps_the_two_gradients_apart(device):
    """Two new leaves on one array (argnums 0 and 1, the same tensor): each its own value
    in the trace, or their gradients would be summed into one."""
    fn = lp.func.grad(lambda a, b: (a * b * b).sum(), argnums=(0, 1))
    compiled = lp.compile(fn)
    for k in range(3):
        x = Tensor(np.array([1.0, 2.0, -0.5]) * (k + 1), device=device)
        (ga, gb), (ca, cb) = fn(x, x), compiled(x, x)
        same(ca, ga)  # b * b
        same(cb, gb)  # 2 a b
        same(ca, host(x) ** 2)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


# ---- memory: a replay holds no more than the eager call ------------------------------------------


def _mlp_step():
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.Tanh(), nn.Linear(32, 10))
    step = training_step(model, lp.optim.Adam(model.parameters()))
    return step, (Tensor(RNG.normal(size=(128, 64))), lp.asarray(RNG.integers(0, 10, 128)))


def _attention_step():
    norm, attn = nn.LayerNorm(32), nn.MultiheadAttention(32, 4, batch_first=True)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 32))
    opt = lp.optim.AdamW([*norm.parameters(), *attn.parameters(), *mlp.parameters()])

    def step(x):
        opt.zero_grad()
        h = norm(x)
        h = x + attn(h, h, h, need_weights=False)[0]
        loss = ((h + mlp(h)) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step, (Tensor(RNG.normal(size=(8, 24, 32))),)


def _cnn_step():
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    step = training_step(model, lp.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    return step, (Tensor(RNG.normal(size=(16, 1, 20, 20))), lp.asarray(RNG.integers(0, 10, 16)))


def _inference():
    weights = [Tensor(RNG.normal(size=(96, 96)) / 10) for _ in range(6)]

    @lp.no_grad()
    def predict(x):
        for w in weights:
            x = (x @ w).tanh() * 2.0
        return x.sum()

    return predict, (Tensor(RNG.normal(size=(256, 96))),)


@pytest.mark.parametrize("make", [_mlp_step, _attention_step, _cnn_step, _inference],
                         ids=["mlp", "attention", "cnn", "inference"])
@pytest.mark.parametrize("fuse", [True, "flat", False])
def test_a_replay_holds_no_more_memory_than_the_eager_call(make, fuse, monkeypatch):
    """Issue 29's rule: the replay drops each value after its last use, so its peak
    (NumPy's allocations and Python's, as tracemalloc counts them) is at most the eager
    step's, give or take the replay's own bookkeeping (under a kilobyte: 414 bytes more
    than eager's 591 kB for the inference; without the drops, 3.5 MB). ``"flat"``: the
    fused runs as Python programs (without Numba, and before they are compiled), which
    drop their temporaries and inputs as they go (they held the attention step's 1 MB
    more, and the inference's 197 kB)."""
    if fuse == "flat":  # (as without Numba: no compiler of runs, so runs of every size are formed)
        cpu = lp.backends.get_backend("cpu")
        monkeypatch.setattr(cpu, "fused", dataclasses.replace(cpu.fused, elementwise=None, scalar_calls=False))
    def peak(fn, args):
        for _ in range(4):  # (the plan is fused and compiled by then)
            fn(*args)
        tracemalloc.start()
        try:
            fn(*args)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    lp.manual_seed(0)
    eager, args = make()
    lp.manual_seed(0)
    step, _ = make()
    compiled = lp.compile(step, fuse=bool(fuse))
    eager_peak, compiled_peak = peak(eager, args), peak(compiled, args)
    assert compiled.calls["replayed"] == 4
    assert compiled_peak <= eager_peak + 4096, (compiled_peak, eager_peak)  # (the replay's own lists: < 1 kB)


INTEGER_INDEXES = {  # (the index of a (4, 5, 6) tensor, from index arrays of length 3; whether negatives come in)
    "x[i]": (lambda x, i, j: x[i], False), "x[:, i]": (lambda x, i, j: x[:, i], False),
    "x[i, j]": (lambda x, i, j: x[i, j], False), "x[i, 1:, j]": (lambda x, i, j: x[i, 1:, j], False),
    "x[i, :, 2]": (lambda x, i, j: x[i, :, 2], False), "x[-1, j]": (lambda x, i, j: x[-1, j], False),
    "x[i[:, None], j]": (lambda x, i, j: x[i[:, None], j], False),
    "x[neg]": (lambda x, i, j: x[i - 4], True), "x[:, neg]": (lambda x, i, j: x[:, j - 5], True),
    "take(x, neg, axis=2)": (lambda x, i, j: lp.take(x, j - 5, axis=2), True),
}


@pytest.mark.parametrize("name", list(INTEGER_INDEXES))
def test_integer_array_indexes_are_replayed_with_the_new_index_values(device, name):
    """An integer-array index (and ``lp.take``), negative positions among it or not, is
    replayed: each replay computes the positions from the index's values of that call,
    forward and backward, as eagerly, and warns of nothing."""
    index, _ = INTEGER_INDEXES[name]
    data = RNG.normal(size=(4, 5, 6))
    w = [Tensor(data, device=device, requires_grad=True) for _ in range(2)]

    def step(x, i, j):
        loss = (index(x, i, j) ** 2).sum()
        loss.backward()
        return loss

    compiled = lp.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            i = lp.asarray(RNG.integers(0, 4, size=3), device=device)
            j = lp.asarray(RNG.integers(0, 5, size=3), device=device)
            w[0].grad = w[1].grad = None
            same(step(w[0], i, j), compiled(w[1], i, j))
            same(w[0].grad, w[1].grad)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_replay_checks_the_index_values_as_eagerly(device):
    """Out of range raises ``IndexError`` in a replay as eagerly; negative positions are
    wrapped in a replay whether the trace met any or not (per index array: a review found
    a replay refusing what eager takes, after the step it had already made)."""
    x = Tensor(RNG.normal(size=(4, 5)), device=device)
    compiled = lp.compile(lambda x, i, j: x[i, j] * 2)
    calls = [([0, 1], [2, 3]), ([3, 2], [-1, 0]), ([-4, 1], [4, -5]), ([1, 1], [0, 0])]
    for i, j in calls:
        i, j = lp.asarray(i, device=device), lp.asarray(j, device=device)
        same(compiled(x, i, j), x[i, j] * 2)
    for bad in (([0, 4], [0, 0]), ([0, 0], [-6, 0])):  # the replay's check raises: the call runs eagerly, and raises
        with pytest.raises(IndexError):
            compiled(x, *(lp.asarray(b, device=device) for b in bad))
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 2}


def test_an_index_tensor_from_outside_replays_with_its_values_at_each_call(device):
    """An index tensor the function reads by name (``x[..., order]``, ``labels[order]``):
    its positions are checked and followed at each replay, changed in place between
    calls or not; out of range raises as eagerly. (It made every call run eagerly:
    its array was unknown to the trace.)"""
    order = lp.asarray([2, 0, 3, 1], device=device)
    labels = lp.asarray([0, 2, 1, 3], device=device)
    w = Tensor(RNG.normal(size=(3, 4)), requires_grad=True, device=device)

    def f(x):
        w.grad = None
        y = (x * w)[..., order] + labels[order[:3]].reshape((3, 1)).astype(lp.float64)
        y.sum().backward()
        return y.detach(), w.grad * 1.0

    compiled = lp.compile(f, fuse=False)
    for k in range(4):
        x = Tensor(RNG.normal(size=(3, 4)), device=device)
        if k == 2:
            order[0] = 1  # changed in place between calls
        for got, want in zip(compiled(x), f(x)):
            same(got, want)
    order[1] = 4
    with pytest.raises(IndexError, match="out of range"):
        compiled(x)
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 1}


def test_the_gradient_of_an_index_does_not_follow_a_later_change_of_the_index(device):
    """``y = x[i]; i += 1``: the gradient goes where ``y`` came from (the positions are a
    new array, not the index's memory), eagerly and in a replay."""
    def f(x, i):
        y = x[i]
        i += 1
        y.sum().backward()

    compiled = lp.compile(f, fuse=False)
    for values in ([-1, 0, 2], [0, 1, 2], [1, 1, 3]):
        expected = np.zeros(5)
        np.add.at(expected, np.array(values), 1.0)
        for fn in (f, compiled):
            x = Tensor(np.arange(5.0), device=device, requires_grad=True)
            fn(x, lp.asarray(values, device=device))
            same(x.grad, expected)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_write_into_a_value_that_a_fused_run_read(device):
    """``y[:] = 3.0`` after a fused run of element-wise operations read ``y``: the run's
    backward computes its values again from what it read, so a replay writes into a copy
    of ``y`` (eagerly the rules saved what they read; a review found the write reaching
    the run's backward: gradients off by 50)."""
    weights = RNG.normal(size=(16, 5))

    def step(x, w):
        y = x @ w.T @ w  # (not element-wise: the run starts after it)
        z = ((y.tanh() * 2 + 1).sin() * 0.5).exp()
        y[:] = 3.0
        loss = z.sum() + y.sum()
        loss.backward()
        return loss

    compiled = lp.compile(step)
    for _ in range(5):
        data = RNG.normal(size=(16, 5))
        xs = [Tensor(data, device=device, requires_grad=True) for _ in range(2)]
        ws = [Tensor(weights, device=device, requires_grad=True) for _ in range(2)]
        np.testing.assert_allclose(host(compiled(xs[1], ws[1])), host(step(xs[0], ws[0])), rtol=1e-13)
        np.testing.assert_allclose(host(xs[1].grad), host(xs[0].grad), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(host(ws[1].grad), host(ws[0].grad), rtol=1e-12, atol=1e-12)
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


DECOMPOSITIONS = {
    "svd": lambda a: (lp.linalg.svd(a, full_matrices=False)[1] ** 2).sum() + lp.linalg.svd(a)[0][:, 0].sum() ** 2,
    "qr": lambda a: (lp.linalg.qr(a)[1] ** 2).sum() + lp.linalg.qr(a)[0][0].sum(),
    "eigh": lambda a: (lp.linalg.eigh(a @ a.mT)[0] * lp.arange(4.0, device=a.device)).sum(),
    "slogdet": lambda a: lp.linalg.slogdet(a @ a.mT + lp.eye(4, device=a.device))[1],
}


@pytest.mark.parametrize("name", list(DECOMPOSITIONS))
def test_decompositions_are_replayed(device, name):
    """A decomposition is one event of the replay: its outputs are values, and in the
    graph each output's node hands its gradient to the decomposition's one node, whose
    rule sees every output's gradient at once, as eagerly (bit for bit); under no_grad
    too."""
    fn = DECOMPOSITIONS[name]

    def step(a):
        loss = fn(a)
        loss.backward()
        return loss

    compiled, inference = lp.compile(step, fuse=False), lp.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            data = RNG.normal(size=(4, 4))
            a, b = (Tensor(data, device=device, requires_grad=True) for _ in range(2))
            same(compiled(b), step(a))
            same(b.grad, a.grad)
            with lp.no_grad():
                same(inference(Tensor(data, device=device)), fn(Tensor(data, device=device)))
    assert compiled.calls == inference.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_wgan_gp_step_with_requires_grad_on_a_mix_of_inputs(device):
    """A WGAN-GP critic step: a random mix of two batches made a leaf with
    ``.detach().requires_grad_()``, the gradient penalty on its gradient
    (``create_graph=True``), Adam: replayed bit for bit, with fresh draws each call;
    the mix returned comes back with its own ``.grad``, which the backward writes, as
    eagerly."""
    def setup():
        lp.manual_seed(0)
        critic = nn.Sequential(nn.Linear(4, 8, device=device), nn.Tanh(), nn.Linear(8, 1, device=device))
        return critic, lp.optim.Adam(critic.parameters(), lr=1e-2)

    def stepper(critic, opt, give_mix=False):
        def step(real, fake):
            opt.zero_grad()
            eps = lp.rand(real.shape[0], 1, device=device)
            mix = (eps * real + (1 - eps) * fake).detach().requires_grad_(True)
            g, = lp.autograd.grad(critic(mix).sum(), mix, create_graph=True)
            penalty = ((lp.linalg.vector_norm(g, axis=1) - 1) ** 2).mean()
            loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
            loss.backward()
            opt.step()
            return (loss, mix) if give_mix else loss
        return step

    def compare(eager, compiled, calls):
        """``calls`` calls of both, each pair with the same draws: the results (and the
        mix's ``.grad``, where it is returned) eager's, bit for bit."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for k in range(calls):
                real, fake = (Tensor(RNG.normal(size=(6, 4)), device=device) for _ in range(2))
                lp.manual_seed(k)
                want = eager(real, fake)
                lp.manual_seed(k)
                got = compiled(real, fake)
                for a, b in zip(*((r,) if isinstance(r, Tensor) else r for r in (got, want)), strict=True):
                    same(a, b)
                    if b.grad is not None:
                        same(a.grad, b.grad)
        assert compiled.calls == {"traced": 1, "replayed": calls - 1, "eager": 0}

    (c1, o1), (c2, o2) = setup(), setup()
    compare(stepper(c1, o1), lp.compile(stepper(c2, o2), fuse=False), 4)
    for p, q in zip(c1.parameters(), c2.parameters()):
        same(q, p)
    compare(stepper(*setup(), give_mix=True), lp.compile(stepper(*setup(), give_mix=True), fuse=False), 3)


def test_requires_grad_set_on_an_argument_runs_eagerly():
    """``x.requires_grad_()`` on an argument changes the caller's tensor: not replayed."""
    compiled = lp.compile(lambda x: (x.requires_grad_(True) * 2).sum())
    x = Tensor(np.ones(3))
    with pytest.warns(RuntimeWarning, match="requires_grad set inside the function, on an argument"):
        assert float(compiled(x)) == 6.0
    assert x.requires_grad


def test_an_error_caught_inside_the_function_makes_it_run_eagerly():
    # a replay would run what raised without the error: a backward pass through a saved
    # value changed in place, an in-place change of the wrong shape
    def backward_refused(x, w):
        s = (x * w).exp().sum()
        try:
            e = (x * w).exp()
            e.add_(1.0)  # exp saved its output
            e.sum().backward()
        except RuntimeError:
            pass
        s.backward()
        return s

    def change_refused(x, w):
        y = x * 2.0
        try:
            y.add_(Tensor(np.ones(5)))
        except ValueError:
            pass
        return y * w

    for fn in (backward_refused, change_refused):
        w_eager = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
        w_compiled = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
        g = lp.compile(fn)
        for k in range(4):
            x = Tensor(np.array([0.1, 0.2, 0.3]) * (k + 1))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = g(x, w_compiled)
            assert k > 0 or "raised an error inside the function" in str(caught[0].message)
            same(got, fn(x, w_eager))
            assert (w_eager.grad is None) == (w_compiled.grad is None)
            if w_eager.grad is not None:
                same(w_compiled.grad, w_eager.grad)
        assert g.calls["replayed"] == 0 and "raised an error" in g.explain()


def _host_read_twins(make, calls=4):
    """Run ``make(w)``'s function eagerly and compiled on twin weights: the results of
    each call, and the compiled function."""
    w_eager, w_compiled = (Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True) for _ in range(2))
    eager, compiled = make(w_eager), lp.compile(make(w_compiled))
    pairs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(calls):
            x = Tensor(np.array([0.1, 0.2, 0.3]) * (k + 1))
            pairs.append((eager(x), compiled(x)))
            same(w_compiled.grad, w_eager.grad)
    return pairs, compiled, [str(c.message) for c in caught]


def test_a_number_read_on_the_host_and_returned_as_it_is_is_read_again_in_each_replay():
    def plain(w):
        def step(x):
            w.grad = None
            loss = (x * w).exp().sum()
            loss.backward()
            return loss.item()
        return step

    def displays(w):
        def step(x):
            w.grad = None
            loss = (x * w).exp().sum()
            loss.backward()
            return {"loss": loss.item(),
                    "both": (float(loss * 2.0), [w.grad.sum().item()]),
                    "out": loss}
        return step

    for make in (plain, displays):
        pairs, compiled, caught = _host_read_twins(make)
        assert not caught and compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}
        assert "numbers read on the host" in compiled.explain()
        for eager, got in pairs:
            if isinstance(eager, dict):
                assert type(got["loss"]) is float and type(got["both"][0]) is float
                assert (eager["loss"], eager["both"][0], eager["both"][1]) == \
                       (got["loss"], got["both"][0], got["both"][1])
                same(got["out"], eager["out"])
            else:
                assert type(got) is float and got == eager
        assert len({p[1] if isinstance(p[1], float) else p[1]["loss"] for p in pairs}) == 4  # read again each time


def _used_after_the_read(w):
    def step(x):
        loss = (x * w).sum()
        value = loss.item()
        if value > 1.0:  # Python steered by the value: a replay would not follow it
            return value
        return -value
    return step


def _passed_to_a_function(w):
    def step(x):
        loss = (x * w).sum()
        return min(loss.item(), 1.0), (x * w).prod().item()  # (the read itself at the trace, 0.45: not later)
    return step


def _in_a_conditional_expression(w):
    def step(x):
        loss = (x * w).sum()
        return loss.item() if loss.item() > 1.0 else -1.0
    return step


def _on_the_line_of_an_if(w):
    def step(x):
        loss = (x * w).sum()
        if x.shape[0] == 3: return loss.item()  # noqa: E701 - the test's point: the if's code shares the line
        return 0.0
    return step


def _returned_changed(w):
    def step(x):
        return (x * w).sum().item() * 2.0
    return step


def _an_integer(w):
    def step(x):
        return ((x * w) > 0.5).astype("int64").sum().item()
    return step


def _in_a_helper(w):
    def helper(t):
        return t.item() + 1.0

    def step(x):
        return helper((x * w).sum())
    return step


def _recursive(w):
    def step(x, depth=1):
        if depth:
            return min(step(x, depth - 1), 0.5)  # (the inner read itself at the trace, 0.45: not later)
        return (x * w).sum().item()
    return step


def _dropped(w):
    def step(x):
        return {"loss": (x * w).sum().item(), "loss": None}  # noqa: F601 - the first value is not in the result
    return step


@pytest.mark.parametrize("make", [_used_after_the_read, _passed_to_a_function, _in_a_conditional_expression,
                                  _on_the_line_of_an_if, _returned_changed, _an_integer, _in_a_helper, _recursive,
                                  _dropped])
def test_a_number_read_on_the_host_that_code_may_see_runs_eagerly(make):
    pairs, compiled, caught = _host_read_twins(make)
    assert compiled.calls["replayed"] == 0, compiled.explain()
    assert len(caught) == 1 and "read on the host" in caught[0]
    for eager, got in pairs:
        assert got == eager


def test_a_number_read_on_the_host_in_a_lambda_runs_eagerly():
    w = Tensor(np.array([0.5, -1.0, 2.0]))
    f = lp.compile(lambda x: (x * w).sum().item())
    with pytest.warns(RuntimeWarning, match=r"Tensor.item\(\)"):
        f(Tensor(np.ones(3)))
    assert f(Tensor(np.full(3, 2.0))) == 3.0 and f.calls["replayed"] == 0


def test_a_method_and_a_decorated_function_returning_a_number_read_on_the_host_replay():
    class Model:
        def __init__(self):
            self.w = Tensor(np.array([0.5, -1.0, 2.0]))

        def score(self, x):
            return (x * self.w).sum().item()

    model = Model()
    bound = lp.compile(model.score)

    @lp.compile
    def decorated(x):
        return (x * model.w).sum().item()

    for k in range(3):
        x = Tensor(np.full(3, float(k)))
        assert bound(x) == decorated(x) == model.score(x) == 1.5 * k
    assert bound.calls == decorated.calls == {"traced": 1, "replayed": 2, "eager": 0}


_SCALE = Tensor(np.ones(3))


def test_a_global_named_only_inside_a_comprehension_or_lambda_rebound_traces_again():
    global _SCALE

    def f(x):
        return lp.stack([_SCALE * t for t in (x, x)]).sum(axis=0) + (lambda: _SCALE)()

    g = lp.compile(f, fuse=False)
    try:
        for k in range(4):
            if k == 2:
                _SCALE = Tensor(np.full(3, 5.0))
            same(g(Tensor(np.ones(3))), f(Tensor(np.ones(3))))
    finally:
        _SCALE = Tensor(np.ones(3))
    assert g.calls == {"traced": 2, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("change", [lambda: lp.set_grad_enabled(False), lambda: lp.set_default_dtype("float32")])
def test_a_mode_the_function_sets_and_leaves_runs_it_eagerly(change):
    def f(x):
        change()
        return x * 2.0

    g = lp.compile(f, fuse=False)
    try:
        for _ in range(3):
            lp.set_grad_enabled(True)
            lp.set_default_dtype("float64")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g(Tensor(np.ones(2)))
            assert (lp.is_grad_enabled(), lp.get_default_dtype()) != (True, "float64")  # as eagerly
    finally:
        lp.set_grad_enabled(True)
        lp.set_default_dtype("float64")
    assert g.calls["replayed"] == 0 and "left so" in g.explain()


@pytest.mark.parametrize("inside", ["set by hand", "a scheduler"])
def test_an_optimizer_option_set_inside_the_function_by_hand_traces_again(inside):
    # a learning rate written into the groups by the function's own code (even the value it
    # had) is not replayed: each call traces again; a scheduler's step is, and replays
    def run(compiled):
        model = mlp("cpu")
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        sched = lp.optim.lr_scheduler.StepLR(opt, 2)

        def step(x, lr):
            if inside == "set by hand":
                for group in opt.param_groups:
                    group["lr"] = lr
            opt.zero_grad()
            loss = model(x).sum()
            loss.backward()
            opt.step()
            if inside == "a scheduler":
                sched.step()
            return loss

        f = lp.compile(step, fuse=False) if compiled else step
        for k, lr in enumerate([0.1, 0.1, 0.01, 0.01, 0.1, 0.1]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f(Tensor(RNG.normal(size=(4, 6)) * 0 + k), lr)
        return [host(p) for p in model.parameters()], opt.param_groups[0]["lr"], getattr(f, "calls", None)

    (eager, lr, _), (compiled, clr, calls) = run(False), run(True)
    assert lr == clr
    for a, b in zip(eager, compiled):
        same(b, a)
    assert calls["replayed"] == (0 if inside == "set by hand" else 4)


def _scheduled_linear(outputs=2, step_size=2):
    """A seeded ``Linear(3, outputs)``, its SGD (lr 0.1) and a StepLR halving the rate."""
    lp.manual_seed(0)
    model = nn.Linear(3, outputs, dtype="float64")
    opt = lp.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, lp.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=0.5)


@pytest.mark.parametrize("read", ["before the scheduler's step", "after it"])
def test_an_optimizer_option_the_step_reads_as_a_number_follows_the_scheduler(read):
    # lr read by the function's own code is a number in the trace: a replay checks it still holds
    def run(compiled):
        model, opt, sched = _scheduled_linear()

        def step(x):
            opt.zero_grad()
            loss = model(x).sum()
            loss.backward()
            if read == "after it":
                sched.step()
            with lp.no_grad():
                for p in opt.param_groups[0]["params"]:
                    p -= opt.param_groups[0]["lr"] * p.grad
            if read != "after it":
                sched.step()
            return loss

        f = lp.compile(step, fuse=False) if compiled else step
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in range(6):
                f(Tensor(np.full((4, 3), 1.0 + k)))
        return host(model.weight), f, caught

    (eager, _, _), (compiled, f, caught) = run(False), run(True)
    same(compiled, eager)
    if read == "after it":  # which number a replay would need is the scheduler's to say: eagerly
        assert f.calls["replayed"] == 0 and any("read after" in str(w.message) for w in caught)
    else:  # traced again where the scheduler set another rate (every second step)
        assert f.calls == {"traced": 3, "replayed": 3, "eager": 0}


class _LazyMomentum(lp.optim.Optimizer):
    """A hand-written optimizer in PyTorch's style: its state made at the first step."""

    def __init__(self, params):
        super().__init__(params, dict(lr=0.1))

    def step(self):
        with lp.no_grad():
            for p in self.param_groups[0]["params"]:
                state = self.state.setdefault(id(p), {})
                if "buf" not in state:
                    state["buf"] = lp.zeros_like(p)
                state["buf"].mul_(0.9).add_(p.grad)
                p.sub_(0.1 * state["buf"])


@pytest.mark.parametrize("keep", ["optimizer state made at the first step", "a list of losses"])
def test_a_tensor_made_in_the_call_and_kept_after_it_runs_the_call_eagerly(keep):
    def run(compiled):
        model = mlp("cpu")
        opt = _LazyMomentum(model.parameters()) if keep.startswith("optimizer") else lp.optim.SGD(
            model.parameters(), lr=0.1)
        history = []

        def step(x):
            opt.zero_grad()
            out = model(x)
            loss = (out * out).mean()
            loss.backward()
            opt.step()
            history.append(loss.detach())
            return loss, out.detach()[0]  # (a view: its base is kept by the result, not outside it)

        f = lp.compile(step, fuse=False) if compiled else step
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in range(4):
                f(Tensor(np.full((4, 6), 0.1 * k)))
        return [host(p) for p in model.parameters()], [host(h) for h in history], caught, f

    (params, history, _, _), (c_params, c_history, caught, f) = run(False), run(True)
    for a, b in zip(params + history, c_params + c_history):
        same(b, a)
    assert f.calls["replayed"] == 0 and any("kept after it" in str(w.message) for w in caught)


@pytest.mark.parametrize("keep", ["a result kept too", "its base kept", "an argument kept", "a result list kept",
                                  "an argument's view returned, the argument kept", "a detached argument kept"])
def test_what_the_call_keeps_beside_its_result_runs_the_call_eagerly(keep):
    # eagerly, state holds this call's tensor; a replay would leave the first call's there
    def run(compiled):
        model, state = mlp("cpu"), {}

        def step(x):
            h = model(x)
            if keep == "a result kept too":
                state["h"] = h
                return h
            if keep == "its base kept":
                state["h"] = h
                return h[0]
            if keep == "an argument kept":
                state["prev"] = x
                return h
            if keep == "a result list kept":
                state["out"] = out = [h]
                return out
            if keep == "a detached argument kept":  # (a tensor of its own on the argument's array)
                state["prev"] = x.detach()
                return h
            state["prev"] = x
            return x[0], h

        f = lp.compile(step, fuse=False) if compiled else step
        seen = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with lp.no_grad():
                for k in range(4):
                    f(Tensor(np.full((4, 6), 0.1 * k)))
                    seen.append(host(next(v for v in state.values()) if keep != "a result list kept"
                                     else state["out"][0]))
        return seen, caught, f

    (seen, _, _), (c_seen, caught, f) = run(False), run(True)
    for a, b in zip(seen, c_seen):
        same(b, a)
    assert f.calls["replayed"] == 0 and any("kept" in str(w.message) for w in caught)


def test_what_the_call_returns_and_keeps_only_in_its_result_replays():
    # the same step, nothing kept beside the result: views, the graph's leaves, an argument returned
    model = mlp("cpu")
    opt = lp.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return {"loss": loss, "x": x, "first": x[0], "out": [out.detach(), out.detach()[1:]]}, (loss,)

    f = lp.compile(step, fuse=False)
    for _ in range(4):
        f(Tensor(RNG.normal(size=(4, 6))), lp.asarray([0, 1, 2, 0]))
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


@pytest.mark.parametrize("keep", [True, False])
def test_an_argument_list_the_call_keeps_runs_it_eagerly_one_it_returns_replays(keep):
    state = {}

    def f(batch):
        if keep:
            state["last"] = batch
        return batch, batch[0] * 2.0

    g = lp.compile(f, fuse=False)
    for k in range(4):
        batch = [Tensor(np.full(2, float(k)))]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = g(batch)
        assert any("the list it came in" in str(w.message) for w in caught) == (keep and k == 1)
        assert out[0][0] is batch[0]  # (a replay returns a new list of the same tensors)
        same(out[1], np.full(2, 2.0 * k))
        if keep:
            assert state["last"] is batch
    assert g.calls == ({"traced": 2, "replayed": 0, "eager": 2} if keep else {"traced": 1, "replayed": 3, "eager": 0})


def test_a_cycle_in_the_step_moved_to_the_oldest_generation_holds_nothing_kept():
    # an exception caught inside leaves a frame <-> traceback cycle holding the call's values; a long
    # trace moves it to the oldest generation, which the check collects before it counts again
    model = nn.Linear(6, 3, dtype="float64")
    opt = lp.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        try:
            scale = {}["scale"]
        except KeyError as e:
            err = e  # noqa: F841 - kept: the cycle
            scale = 1.0
        junk = [[] for _ in range(50000)]  # (allocations enough to move the cycle on)
        del junk
        opt.zero_grad()
        loss = (model(x) * scale).square().mean()
        loss.backward()
        opt.step()
        return loss

    f = lp.compile(step, fuse=False)
    for k in range(4):
        f(Tensor(np.full((4, 6), float(k))))
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_cache_the_first_call_fills_with_an_argument_replays_after():
    # an argument kept at the first call only (a lazily set reference): traced once more, then replayed
    cache = {}

    def f(x):
        cache.setdefault("first", x)
        return x * 2.0

    g = lp.compile(f, fuse=False)
    for k in range(4):
        same(g(Tensor(np.full(3, float(k)))), np.full(3, 2.0 * k))
    assert g.calls == {"traced": 2, "replayed": 2, "eager": 0}


def test_a_result_that_is_a_view_replays():
    f = lp.compile(lambda x: (x * 2.0)[1:])
    for k in range(3):
        same(f(Tensor(np.arange(4.0) + k)), (np.arange(4.0) + k)[1:] * 2.0)
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_tensors_from_outside_that_share_an_array_stay_apart():
    # a constant on the array of the first call's argument, and two parameters on one array
    table = np.arange(4.0)
    w = lp.as_tensor(table)

    def f(x):
        return (x * 2.0 + w).sum()

    g = lp.compile(f, fuse=False)
    for x in (lp.as_tensor(table), Tensor(np.zeros(4)), Tensor(np.ones(4))):
        same(g(x), f(x))
    assert g.calls == {"traced": 1, "replayed": 2, "eager": 0}

    def tied():
        a, b = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True), Tensor(np.zeros(3), requires_grad=True)
        b.data = a.data

        def step(x):
            a.grad = b.grad = None
            ((a * x).sum() + (b * 10.0 * x).sum()).backward()
        return a, b, step

    (a, b, eager), (c, d, step) = tied(), tied()
    compiled = lp.compile(step, fuse=False)
    for k in range(3):
        x = Tensor(np.arange(3.0) + k)
        eager(x)
        compiled(x)
        same(c.grad, a.grad)
        same(d.grad, b.grad)
    assert compiled.calls["replayed"] == 2


class _Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = [nn.Linear(4, 4, dtype="float64"), nn.Linear(4, 4, dtype="float64")]
        self.heads = {"out": nn.Linear(4, 2, dtype="float64")}
        self.stages = ([[nn.Linear(4, 4, dtype="float64")]],)  # (a list of lists in a tuple)

    def forward(self, x):
        for block in self.blocks:
            x = block(x).tanh()
        for stage in self.stages[0]:
            x = stage[0](x)
        return self.heads["out"](x)


@pytest.mark.parametrize("replace", ["Sequential.layers", "MLP.layers", "a custom module's list",
                                     "a custom module's dict", "a list inside a list"])
def test_a_member_replaced_inside_a_list_or_dict_traces_again(replace):
    lp.manual_seed(0)
    model = {"Sequential.layers": lambda: nn.Sequential(nn.Linear(4, 2, dtype="float64"), nn.Tanh()),
             "MLP.layers": lambda: nn.MLP([4, 3, 2], dtype="float64")}.get(replace, _Blocks)()
    spare = nn.Linear(4, 3 if replace == "MLP.layers" else 4 if "list" in replace else 2, dtype="float64")
    f = lp.compile(lambda x: model(x).detach(), fuse=False)
    x = Tensor(RNG.normal(size=(2, 4)))
    f(x)
    f(x)
    if replace == "a custom module's list":
        model.blocks[1] = spare
    elif replace == "a custom module's dict":
        model.heads["out"] = spare
    elif replace == "a list inside a list":
        model.stages[0][0][0] = spare
    else:
        model.layers[0] = spare
    same(f(x), model(x).detach())
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


def _eager_and_compiled(make, inputs, fuse=False):
    """``make()`` -> (function, tensors to compare); runs it eagerly and compiled on twin
    setups over ``inputs`` (each a tuple of arguments, made by a function), comparing
    each result, error and the tensors after every call: the compiled function."""
    (eager, e_state), (step, c_state) = make(), make()
    compiled = lp.compile(step, fuse=fuse)
    agree = (lambda a, b: np.testing.assert_allclose(host(a), host(b), rtol=1e-12)) if fuse else same
    for args in inputs:
        results = []
        for fn in (eager, compiled):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # (a fallback's: explain() says it)
                    results.append(fn(*args()))
            except RuntimeError as exc:
                results.append(type(exc))
        if isinstance(results[0], type):
            assert results[1] is results[0]
        else:
            agree(results[1], results[0])
        for a, b in zip(e_state, c_state):
            agree(b.grad if a.grad is not None else b, a.grad if a.grad is not None else a)
    return compiled


def test_a_view_made_in_no_grad_mode_sees_a_recorded_change_of_its_base():
    def make():
        w = Tensor(np.ones(3), requires_grad=True)

        def step(x):
            w.grad = None
            y = w * x
            with lp.no_grad():
                v = y[:2]
            y += 1.0  # recorded in the graph: eagerly v sees it (one memory)
            ((y[:2] - 2 * v) ** 2).sum().backward()
            return v * 1.0
        return step, [w]

    compiled = _eager_and_compiled(make, [lambda k=k: (Tensor(np.arange(3.0) + k),) for k in range(3)])
    assert compiled.calls["replayed"] == 0 and "with views" in compiled.explain()


def test_a_post_accumulate_hook_that_steps_the_parameter_between_two_backward_passes():
    def make():
        w = Tensor(np.linspace(-1, 1, 6), requires_grad=True)

        def sgd_in_backward(p):
            with lp.no_grad():
                p -= 0.5 * lp.as_tensor(p._grad)
            p._grad = None

        w.register_post_accumulate_grad_hook(sgd_in_backward)

        def step(x):
            a = (w + x).tanh()
            b = (w - x).sin()  # its backward reads w - x as the forward saw it
            a.sum().backward()
            b.sum().backward()
            return a.detach()
        return step, [w]

    for fuse in (False, True):
        compiled = _eager_and_compiled(make, [lambda k=k: (Tensor(np.full(6, 0.1 * k)),) for k in range(4)], fuse=fuse)
        assert compiled.calls["replayed"] == 3


def test_a_mixed_dtype_broadcast_gradient_is_cast_then_summed_as_eagerly():
    def make():
        b = Tensor(np.zeros(3, dtype=np.float32), requires_grad=True)

        def step(x):
            b.grad = None
            ((x + b) ** 2).mean().backward()  # the rule casts to float32, then the engine sums
        return step, [b]

    compiled = _eager_and_compiled(make, [lambda k=k: (Tensor(np.random.default_rng(k).normal(size=(4096, 3))),)
                             for k in range(4)])
    assert compiled.calls["replayed"] == 3


def test_take_along_axis_follows_new_negative_indices_in_a_replay():
    def make():
        w = Tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)

        def step(idx):
            w.grad = None
            y = lp.take_along_axis(w, idx, axis=1)
            (y * lp.arange(4.0).reshape(4, 1)).sum().backward()
            return y.detach()
        return step, [w]

    indices = [[0, 1, 2, 0], [1, 1, 2, 0], [0, -1, 2, 0], [-3, -1, -2, 2]]
    compiled = _eager_and_compiled(make, [lambda i=i: (lp.asarray(np.array(i).reshape(4, 1)),) for i in indices])
    assert compiled.calls["replayed"] == 3
    same(compiled(lp.asarray(np.array(indices[3]).reshape(4, 1))),
         np.take_along_axis(np.arange(12.0).reshape(4, 3), np.array(indices[3]).reshape(4, 1), axis=1))


def test_arguments_that_share_memory_are_another_kind_of_call():
    def make():
        w = Tensor(np.ones(3), requires_grad=True)

        def step(a, b):
            w.grad = None
            y = (w * a).sum()  # saves a
            with lp.no_grad():
                b += 1.0  # b may be a's memory: eagerly, the backward then refuses
            y.backward()
            return y.detach()
        return step, [w]

    def args(kind):
        a = Tensor(np.arange(3.0))
        return a, {"apart": lambda: Tensor(np.zeros(3)), "detached": a.detach, "view": lambda: a[:]}[kind]()

    compiled = _eager_and_compiled(make, [lambda k=k: args(k) for k in ("apart", "apart", "detached", "view")])
    assert compiled.calls["replayed"] == 1


def test_a_tensor_twice_in_the_result_is_one_object_as_eagerly():
    f = lp.compile(lambda x: (lambda y: (y, {"again": y}, y.detach()))(x * 2.0))
    for _ in range(3):
        y, d, other = f(Tensor(np.ones(2)))
        assert d["again"] is y and other is not y
        same(other, [2.0, 2.0])
    assert f.calls["replayed"] == 2


def test_batch_norm_with_a_cumulative_average_replays():
    def make():
        lp.manual_seed(0)
        return nn.BatchNorm1d(3, momentum=None, dtype="float64")

    eager, layer = make(), make()
    f = lp.compile(lambda x: layer(x).sum().detach(), fuse=False)
    for k in range(4):
        x = Tensor(RNG.normal(size=(8, 3)) + k)
        same(f(x), eager(x).sum())
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            same(getattr(layer, name), getattr(eager, name))
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


_LOSSES = {
    "nll_loss": lambda o, y: nn.functional.nll_loss(nn.functional.log_softmax(o, axis=-1), y),
    "label smoothing": lambda o, y: nn.functional.cross_entropy(o, y, label_smoothing=0.1),
    "x[rows, y]": lambda o, y: -nn.functional.log_softmax(o, axis=-1)[lp.arange(8), y].mean(),
    "take_along_axis": lambda o, y: -lp.take_along_axis(o, y.reshape(8, 1), axis=1).mean(),
    "take": lambda o, y: lp.take(o.reshape(-1), y).sum(),
    "x[:, y]": lambda o, y: o[:, y].sum(),
}


def _linear_and_sgd(inputs, outputs):
    lp.manual_seed(0)
    model = nn.Linear(inputs, outputs, dtype="float64")
    return model, lp.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("loss", list(_LOSSES))
def test_a_step_that_indexes_a_value_of_the_call_with_labels_replays(loss):
    # (the checks of the labels keep no tensor of the call: nothing outlives the call)
    def make():
        model, opt = _linear_and_sgd(4, 3)

        def step(x, y):
            opt.zero_grad()
            value = _LOSSES[loss](model(x), y)
            value.backward()
            opt.step()
            return value.item()
        return step, list(model.parameters())

    rng = np.random.default_rng(3)
    batches = [(Tensor(rng.normal(size=(8, 4))), lp.asarray(rng.integers(0, 3, size=8))) for _ in range(4)]
    compiled = _eager_and_compiled(make, [lambda b=b: b for b in batches])
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_python_number_in_the_result_runs_the_call_eagerly():
    def make():
        model, opt, sched = _scheduled_linear(outputs=1, step_size=1)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            lr = opt.param_groups[0]["lr"]  # (before the scheduler's step: after it, that alone runs eagerly)
            sched.step()
            return {"loss": loss.item(), "lr": lr}
        return step

    eager, compiled = make(), lp.compile(make())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = Tensor(RNG.normal(size=(4, 3)))
            assert compiled(x) == eager(x)
    assert compiled.calls["replayed"] == 0 and "a Python float in the result" in str(caught[0].message)


def test_results_of_numbers_and_the_kinds_of_containers():
    # an int (a scheduler's count, a batch's size) is the trace's in a replay: eagerly; named tuples
    # and ordered dicts keep their kind; a tuple of another kind (its own __new__) runs eagerly
    import collections

    Pair = collections.namedtuple("Pair", "loss y")

    class Custom(tuple):
        def __new__(cls, a, b):
            return super().__new__(cls, (a, b))

    def step(x):
        y = (x * 2.0).sum()
        return Pair(y, x), collections.OrderedDict(flag="on", y=y)

    f = lp.compile(step)
    for k in range(3):
        got, want = f(Tensor(np.full(4, float(k)))), step(Tensor(np.full(4, float(k))))
        assert type(got[0]) is Pair and type(got[1]) is collections.OrderedDict and got[1]["y"] is got[0].loss
        same(got[0].loss, want[0].loss)
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 0}
    for fn, message in ((lambda x: Custom(x * 2.0, x), "a result of type Custom"),
                        (lambda x: ((x * 2.0).sum(), x.shape[0]), "a Python int in the result")):
        g = lp.compile(fn)
        with pytest.warns(RuntimeWarning, match=message):
            g(Tensor(np.ones(2)))


def _implicit_reads(a, b):
    return sorted(map(float, [a.sum(), b.sum()]))  # float() called by map, on the return's line


def test_a_read_made_by_a_call_in_the_return_runs_eagerly():
    compiled = lp.compile(_implicit_reads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, y in [(1.0, 2.0), (3.0, 4.0), (5.0, 1.0)]:
            a, b = Tensor(np.array([x])), Tensor(np.array([y]))
            assert compiled(a, b) == _implicit_reads(a, b)
    assert compiled.calls["replayed"] == 0


def test_an_error_in_a_replay_before_any_change_runs_the_call_eagerly():
    # an error the function catches takes its eager path; zero_grad before it changes nothing more
    def make():
        model, opt = _linear_and_sgd(3, 4)

        def step(x, y):
            opt.zero_grad()
            out = model(x)
            try:
                loss = nn.functional.cross_entropy(out, y)
            except ValueError:  # labels out of range: another loss
                loss = (out ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return step, list(model.parameters())

    rng = np.random.default_rng(4)
    batches = [(Tensor(rng.normal(size=(5, 3))), lp.asarray(labels))
               for labels in ([0, 1, 2, 3, 0], [1, 1, 2, 0, 3], [0, 7, 2, 1, 1], [3, 2, 1, 0, 0])]
    compiled = _eager_and_compiled(make, [lambda b=b: b for b in batches])
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 1}

    def factor(a):
        try:
            return lp.linalg.cholesky(a)
        except Exception:  # not positive definite
            return lp.linalg.cholesky(a + 10.0 * lp.eye(2, dtype=a.dtype))

    f = lp.compile(factor)
    for scale in (1.0, 2.0, -1.0, 1.0):
        a = Tensor(np.array([[2.0, 0.0], [0.0, 1.0]]) * scale)
        same(f(a), factor(a))
    assert f.calls == {"traced": 1, "replayed": 2, "eager": 1}


def test_a_sequential_iterated_and_an_ordered_dict_of_members_are_checked():
    lp.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 3, dtype="float64"), nn.Tanh(), nn.Linear(3, 1, dtype="float64"))

    def f(x):
        for layer in seq:  # the Sequential itself is never called
            x = layer(x)
        return x.sum().detach()

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = __import__("collections").OrderedDict(a=nn.Linear(3, 1, dtype="float64"))

        def forward(self, x):
            return self.heads["a"](x)

    heads = Heads()
    spares = nn.Linear(3, 3, dtype="float64"), nn.Linear(3, 1, dtype="float64")  # (made before: a new layer
    g = lp.compile(lambda x: heads(x).sum().detach())  # sets attributes, which would trace again anyway)
    compiled = lp.compile(f)
    x = Tensor(np.ones((2, 3)))
    for fn in (compiled, g):
        fn(x)
        fn(x)
    seq.layers[0], heads.heads["a"] = spares
    same(compiled(x), f(x))
    same(g(x), heads(x).sum().detach())
    assert compiled.calls == g.calls == {"traced": 2, "replayed": 1, "eager": 0}


def test_a_group_updated_with_or_counts_as_a_write():
    w = Tensor(np.ones(1), requires_grad=True)
    opt = lp.optim.SGD([w], lr=0.1)
    before = lp._graph.trace.WRITES[0]
    opt.param_groups[0] |= {"lr": 0.2}
    assert lp._graph.trace.WRITES[0] == before + 1 and opt.param_groups[0]["lr"] == 0.2


def test_a_callable_object_that_falls_back_warns_with_its_name():
    class Scorer:
        def __call__(self, x):
            return x.numpy().sum()

    f = lp.compile(Scorer())
    with pytest.warns(RuntimeWarning, match="Scorer"):
        f(Tensor(np.ones(2)))


_LATE = None


def test_a_global_bound_after_compile_and_attribute_names_are_told_apart():
    global _LATE

    @lp.compile
    def f(x, opt):
        opt.step()  # an attribute named like a global counter: no global read
        return x * _LATE

    globals()["step"] = 0  # a global counter named as the method the function calls
    w = Tensor(np.ones(1), requires_grad=True)
    opt = lp.optim.SGD([w], lr=0.1)
    try:
        for k in range(4):
            _LATE = 3.0 if k < 2 else 30.0
            globals()["step"] = k
            same(f(Tensor(np.ones(1)), opt), [_LATE])
    finally:
        _LATE = None
        globals().pop("step", None)
    assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}


def test_a_tensor_cached_at_the_first_call_traces_once_more_then_replays():
    masks = {}

    def f(x):
        n = x.shape[0]
        if n not in masks:
            masks[n] = lp.triu(lp.ones((n, n), dtype=x.dtype), k=1)
        return (x @ masks[n]).sum()

    compiled = lp.compile(f)
    for k in range(5):
        same(compiled(Tensor(np.ones((3, 3)) * k)), f(Tensor(np.ones((3, 3)) * k)))
    assert compiled.calls == {"traced": 2, "replayed": 3, "eager": 0}


def test_values_read_through_dlpack_run_the_call_eagerly():
    f = lp.compile(lambda x: lp.asarray(np.from_dlpack(x.detach()).copy()) * 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(3):
            same(f(Tensor(np.full(2, float(k)))), [2.0 * k, 2.0 * k])
    assert f.calls["replayed"] == 0


def test_a_source_edited_after_import_is_not_taken_for_the_code(tmp_path, monkeypatch):
    # the return the file now shows is not the code's: the read runs eagerly
    import importlib
    import linecache

    path = tmp_path / "edited_step.py"
    path.write_text("def step(a):\n    return max(a.sum().item(), 1.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_step")
    path.write_text("def step(a):\n    return  [  a.sum().item(), 1.0]\n")  # the read where it stood
    linecache.checkcache(str(path))
    f = lp.compile(module.step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in (5.0, 0.5, -3.0):
            assert f(Tensor(np.array([value]))) == max(value, 1.0)
    assert f.calls["replayed"] == 0


def _hi_lo(a, b):
    return float(max(x := a.sum().item(), y := b.sum().item())), float(min(x, y))  # reads inside a read


def _through_the_namespace(x):
    return lp.exp(x).sum().item()  # (lp.exp: a name the file imported, loaded as its compiler loads it)


def test_reads_inside_a_read_run_eagerly_and_a_read_after_a_namespace_call_replays():
    f, g = lp.compile(_hi_lo, fuse=False), lp.compile(_through_the_namespace, fuse=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a0, b0 in ((1.0, 2.0), (3.0, 1.0), (0.0, 5.0), (7.0, -1.0)):
            a, b = Tensor(np.array([a0])), Tensor(np.array([b0]))
            assert f(a, b) == _hi_lo(a, b)
            assert g(a) == _through_the_namespace(a)
    assert f.calls["replayed"] == 0 and g.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_gradient_read_before_zero_grad_makes_a_later_error_propagate():
    # an eager call after the replay's zero_grad would read no gradient: the error propagates, as after a step
    w = Tensor(np.ones(2), requires_grad=True)
    opt = lp.optim.SGD([w], lr=0.1)

    def f(a):
        g = lp.as_tensor(w.grad).sum() * 1.0
        opt.zero_grad()
        try:
            factor = lp.linalg.cholesky(a)
        except Exception:
            factor = a * 0.0
        return g, factor

    compiled = lp.compile(f, fuse=False)
    for scale in (1.0, 2.0):
        w.grad = np.full(2, 3.0)
        same(compiled(Tensor(np.eye(2) * scale))[0], 6.0)
    w.grad = np.full(2, 3.0)
    with pytest.raises(Exception, match="positive definite|Matrix is not"):
        compiled(Tensor(-np.eye(2)))
    assert not compiled._entries  # (a replay that raised leaves no entry: the next call traces again)
    w.grad = np.full(2, 3.0)
    same(compiled(Tensor(np.eye(2)))[0], 6.0)
    assert compiled.calls["traced"] == 2


def test_a_change_under_no_grad_of_a_value_of_the_call_is_no_change_of_state():
    def factor(a):
        y = a * 1.0
        with lp.no_grad():
            y.add_(0.0)
        try:
            return lp.linalg.cholesky(y)
        except Exception:
            return lp.linalg.cholesky(y + 10.0 * lp.eye(2, dtype=y.dtype))

    compiled = lp.compile(factor, fuse=False)
    for scale in (1.0, 2.0, -1.0):
        a = Tensor(np.eye(2) * scale)
        same(compiled(a), factor(a))
    assert compiled.calls == {"traced": 1, "replayed": 1, "eager": 1}


def test_a_change_under_no_grad_of_a_view_of_an_argument_is_a_change_of_state():
    # the view writes into the argument: an eager call after the replay's error would add again
    def f(x, a):
        v = x[:2]
        with lp.no_grad():
            v.add_(1.0)
        try:
            return lp.linalg.cholesky(a)
        except Exception:
            return a * 0.0

    compiled = lp.compile(f, fuse=False)
    x = Tensor(np.zeros(3))
    for scale in (1.0, 2.0):
        compiled(x, Tensor(np.eye(2) * scale))
    with pytest.raises(Exception, match="positive definite|Matrix is not"):
        compiled(x, Tensor(-np.eye(2)))
    same(x, [3.0, 3.0, 0.0])  # one change per call, none twice



def test_a_gradient_changed_in_place_is_a_change_of_state():
    # (scaled in place, the gradient is the parameter's: an eager call after the replay's error would scale again)
    def run(compiled):
        w = Tensor(np.ones(3), requires_grad=True)
        w.grad = np.ones(3)

        def f(x, i):
            with lp.no_grad():
                g = w.grad
                g *= 0.5
            return x[i]

        fn = lp.compile(f, fuse=False) if compiled else f
        for index in (0, 1, 2, 7):
            try:
                fn(Tensor(np.arange(3.0)), lp.asarray(np.array([index])))
            except IndexError:
                pass
        return host(w.grad)

    same(run(True), run(False))


def test_compile_as_a_method_decorator_binds_the_instance():
    class Scaler:
        def __init__(self, k):
            self.k = Tensor(np.array([k]))

        @lp.compile
        def scale(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    for _ in range(3):
        same(a.scale(Tensor(np.ones(1))), [2.0])
        same(b.scale(Tensor(np.ones(1))), [3.0])
    assert Scaler.scale.calls == {"traced": 2, "replayed": 4, "eager": 0}


class _NormedEncoder(nn.Module):
    """A BatchNorm1d (its running statistics: a step of the call) before a causal encoder."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8, dtype="float64")
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype="float64"), 1)

    def forward(self, x, mask):
        return self.enc(self.bn(x.reshape((-1, 8))).reshape(x.shape), mask=mask)


@pytest.mark.parametrize("case", ["class indices after a backward pass", "a mask found causal after a step"])
def test_a_check_of_an_argument_runs_before_the_replay_changes_state(case):
    """A check of an argument's values recorded after the call changed state (a backward
    pass, BatchNorm's running statistics) runs first at a replay: a batch it refuses
    (a padded target, a mask no longer causal) makes that call run eagerly, as eager
    code takes its other path, where the replay would have raised half-way through."""
    rng = np.random.default_rng(0)

    def setup():
        lp.manual_seed(0)
        model = nn.Linear(4, 3, dtype="float64") if case.startswith("class") else _NormedEncoder()
        opt = lp.optim.SGD(model.parameters(), lr=0.1)

        def step(x1, y1, x2, y2):
            opt.zero_grad()
            if case.startswith("class"):  # two micro-batches: the second's check comes after a backward pass
                first = nn.functional.cross_entropy(model(x1), y1, ignore_index=-100)
                first.backward()
                second = nn.functional.cross_entropy(model(x2), y2, ignore_index=-100)
                second.backward()
                loss = first + second
            else:
                loss = model(x1, y1).pow(2).mean()
                loss.backward()
            opt.step()
            return loss.detach()

        return model, step

    batches = []
    for k in range(4):
        if case.startswith("class"):
            y2 = rng.integers(0, 3, size=6)
            if k == 2:
                y2[1] = -100  # a padded target
            batches.append((Tensor(rng.normal(size=(6, 4))), lp.asarray(rng.integers(0, 3, size=6)),
                            Tensor(rng.normal(size=(6, 4))), lp.asarray(y2)))
        else:
            mask = np.triu(np.full((5, 5), -np.inf), 1)
            if k == 2:
                mask[0, 1] = 0.0  # no longer causal
            batches.append((Tensor(rng.normal(size=(5, 2, 8))), lp.asarray(mask), None, None))
    (eager_model, eager), (model, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    for batch in batches:
        np.testing.assert_array_equal(host(compiled(*batch)), host(eager(*batch)))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            np.testing.assert_array_equal(host(p), host(q))
    assert compiled.calls == {"traced": 2, "replayed": 2, "eager": 0}


def test_an_error_the_function_catches_at_its_trace_makes_it_run_eagerly():
    """A value an operation refuses at the trace (a matrix that is not positive
    definite), caught by the function: its replays would take the ``except`` path
    whatever their values, so every call runs eagerly, with a warning."""
    def step(m):
        try:
            return lp.linalg.cholesky(m).sum()
        except ValueError:  # (LinAlgError)
            return m.sum() * 0.0 - 1.0

    compiled = lp.compile(step, fuse=False)
    with pytest.warns(RuntimeWarning, match="an error raised inside the function"):
        assert float(compiled(Tensor(-np.eye(3)))) == -1.0
    for scale in (2.0, 3.0):
        assert float(compiled(Tensor(scale * np.eye(3)))) == float(step(Tensor(scale * np.eye(3))))
    assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 2}


@pytest.mark.parametrize("case", ["embedding, a negative index", "one_hot, a class too large",
                                  "one_hot, the classes inferred", "allclose"])
def test_a_value_read_on_the_host_is_checked_again_or_runs_eagerly(case):
    """What a function reads of its arguments' values on the host: checked again at each
    replay where it is a check (an index out of range raises as eagerly), or the call
    runs eagerly where it decides a shape or a Python value (one_hot's inferred
    classes, allclose's bool)."""
    table = Tensor(np.arange(20.0).reshape(10, 2))

    def step(x):
        if case.startswith("embedding"):
            return nn.functional.embedding(x, table).sum()
        if case == "one_hot, a class too large":
            return nn.functional.one_hot(x, 3).sum(axis=0)
        if case == "one_hot, the classes inferred":
            return nn.functional.one_hot(x).sum(axis=0)
        return lp.asarray(1.0) if lp.allclose(x, lp.zeros_like(x)) else lp.asarray(2.0)

    compiled = lp.compile(step, fuse=False)
    good = [lp.asarray(np.array([0, 1, 2])), lp.asarray(np.array([2, 2, 1]))]
    if case == "allclose":
        good = [Tensor(np.zeros(3)), Tensor(np.ones(3))]
    elif case == "one_hot, the classes inferred":
        good = [good[0], lp.asarray(np.array([0, 1, 1]))]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for x in good:
            np.testing.assert_array_equal(host(compiled(x)), host(step(x)))
    bad = lp.asarray(np.array([0, -1, 2]) if case.startswith("embedding") else np.array([0, 3, 1]))
    if case in ("embedding, a negative index", "one_hot, a class too large"):
        error = IndexError if case.startswith("embedding") else ValueError
        with pytest.raises(error):
            step(bad)
        with pytest.raises(error):
            compiled(bad)
        assert compiled.calls["replayed"] >= 1
    else:
        assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 1}


def test_an_int_tensor_and_a_float_replay_on_a_library_that_refuses_the_mix(device):
    """LeanPass catches array_api_strict's TypeError for an int tensor and a Python float
    (and computes in float64): an error of dtypes, the same at each replay, which does
    not make the call run eagerly."""
    if not device.startswith("strict"):
        pytest.skip("only array_api_strict refuses an int tensor with a float")

    def step(y):
        return lp.multiply(y, 0.5) * lp.maximum(y, 0.5)

    compiled = lp.compile(step, fuse=False)
    for k in range(3):
        y = lp.asarray(np.array([0, 1, 2 + k]), device=device)
        np.testing.assert_array_equal(host(compiled(y)), host(step(y)))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_check_after_an_in_place_change_through_a_view_stays_in_its_place():
    """A check of an argument the call changed in place through a view (``y[1:] -= 1``)
    is not moved ahead of that change: a replay checks the changed values, and raises
    where eager raises."""
    table = Tensor(np.arange(8.0).reshape(4, 2))

    def step(y):
        y[1:] -= 1
        return nn.functional.embedding(y, table).sum()

    compiled = lp.compile(step, fuse=False)
    for labels in ([1, 1, 1], [1, 2, 2]):
        np.testing.assert_array_equal(host(compiled(lp.asarray(np.array(labels)))),
                                      host(step(lp.asarray(np.array(labels)))))
    with pytest.raises(IndexError, match="indices must be in"):
        step(lp.asarray(np.array([1, 0, 0])))
    with pytest.raises(IndexError, match="indices must be in"):
        compiled(lp.asarray(np.array([1, 0, 0])))
    assert compiled.calls == {"traced": 1, "replayed": 1, "eager": 0}  # (the third raised in its replay)


@pytest.mark.parametrize("case", ["computed from the argument", "computed from a random draw"])
def test_a_mask_made_in_the_step_and_found_causal_after_a_change_of_state(case):
    """Whether a mask is causal decides a path (never an error), checked after the call
    changed state (BatchNorm's statistics moved). A mask the step computes from its
    argument is checked first, with the operations computing it: the step replays, and
    the call whose mask is not causal runs eagerly before changing anything. One that
    also depends on a random draw cannot be checked first: the call runs eagerly from
    the trace on, with a warning."""
    def setup():
        lp.manual_seed(0)
        model = _NormedEncoder()

        def step(x, blocked):
            if case.endswith("draw"):
                blocked = blocked | (lp.rand(5, 5) > 2.0)  # (never: a draw the mask depends on)
            mask = lp.where(blocked, lp.asarray(-np.inf), 0.0)
            with lp.no_grad():
                return model(x, mask)[..., 0].sum()

        return model, step

    (eager_model, eager), (model, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    rng = np.random.default_rng(0)
    causal = np.triu(np.ones((5, 5), bool), 1)
    other = causal.copy()
    other[4, 0] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for blocked in (causal, causal, other, causal):
            x = lp.asarray(rng.normal(size=(5, 2, 8)))
            np.testing.assert_array_equal(host(compiled(x, lp.asarray(blocked))), host(eager(x, lp.asarray(blocked))))
    np.testing.assert_array_equal(host(model.bn.running_mean), host(eager_model.bn.running_mean))
    messages = [str(w.message) for w in caught if "lp.compile" in str(w.message)]
    if case.endswith("draw"):
        assert len(messages) == 1 and "decides a path" in messages[0]
        assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 3}
    else:
        assert not messages and compiled.calls == {"traced": 2, "replayed": 2, "eager": 0}


def test_a_mask_made_in_the_step_before_any_change_of_state_replays():
    """A causal mask the step makes (``generate_square_subsequent_mask``), found causal
    before the call changes state: its check stays in its place and the step replays;
    a failing check there would still run the call eagerly."""
    lp.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype="float64"), 1)
    opt = lp.optim.SGD(encoder.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = encoder(x, mask=nn.Transformer.generate_square_subsequent_mask(x.shape[0], dtype="float64")).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = lp.compile(step, fuse=False)
    for _ in range(3):
        compiled(Tensor(np.ones((5, 2, 8))))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


def _micro_batch_world():
    """A step over two micro-batches whose second one's targets (``tok[:, 1:]``) are
    checked for ``ignore_index`` after the first one's backward pass."""
    lp.manual_seed(0)
    model = nn.Sequential(nn.Embedding(6, 4, dtype="float64"), nn.Linear(4, 6, dtype="float64"))
    opt = lp.optim.SGD(model.parameters(), lr=0.1)

    def step(tok1, tok2):
        opt.zero_grad()
        for tok in (tok1, tok2):
            logits = model(tok[:, :-1]).reshape((-1, 6))
            nn.functional.cross_entropy(logits, tok[:, 1:].reshape((-1,)), ignore_index=0).backward()
        opt.step()
        return model[1].bias.detach() * 1.0

    return model, step


@pytest.mark.parametrize("elsewhere", ["on garbage not yet collected", "on another model"])
def test_hooks_elsewhere_leave_a_micro_batch_check_moved(elsewhere):
    """A check moves past a backward pass unless a leaf of that pass has a hook: hooks on
    another model's parameters, or on tensors that are garbage in a cycle not yet
    collected, do not keep the step eager (they did: a fuzz run in CI met the garbage)."""
    gc.collect()
    gc.disable()
    try:
        if elsewhere.startswith("on garbage"):
            for _ in range(3):
                t = Tensor(np.ones(2), requires_grad=True)
                t.register_hook(lambda g, t=t: g)  # (the hook holds its tensor: a cycle)
                t.register_post_accumulate_grad_hook(lambda p, t=t: None)
                del t
        else:
            other = nn.Linear(2, 2)
            for p in other.parameters():
                p.register_hook(lambda g: g * 2.0)
        assert hooks._grad_hooks_registered  # (the count the old rule looked at)
        (_, eager), (_, step) = _micro_batch_world(), _micro_batch_world()
        compiled = lp.compile(step, fuse=False)
        rng = np.random.default_rng(0)
        for _ in range(3):
            tokens = [lp.asarray(rng.integers(1, 6, size=(2, 5))) for _ in range(2)]
            same(compiled(*tokens), eager(*tokens))
        assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}
    finally:
        gc.enable()
        gc.collect()


def test_a_hook_added_since_on_a_leaf_of_a_pass_a_check_moved_past_traces_again():
    """A gradient hook registered after the trace on a parameter the micro-batches'
    passes reach (it may write what a moved check reads): the call traces again, where
    the check stays behind the pass, so it runs eagerly from then on, with a warning,
    and the hook runs as eagerly."""
    (eager_model, eager), (model, step) = _micro_batch_world(), _micro_batch_world()
    compiled = lp.compile(step, fuse=False)
    rng = np.random.default_rng(0)
    for k in range(4):
        if k == 2:
            for m in (eager_model, model):
                m[1].bias.register_hook(lambda g: g * 0.5)
        tokens = [lp.asarray(rng.integers(1, 6, size=(2, 5))) for _ in range(2)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            same(compiled(*tokens), eager(*tokens))
        assert bool(caught) == (k == 2) and all("decides a path" in str(w.message) for w in caught)
    assert compiled.calls == {"traced": 2, "replayed": 1, "eager": 1}


@pytest.mark.parametrize("case", ["computed", "indexed by positions made in the call", "changed in place after",
                                  "computed from a tensor the call writes"])
def test_a_padded_target_computed_in_a_later_micro_batch(case):
    """Targets that are a value of the call (``tok[:, 1:]``) checked for ``ignore_index``
    after a backward pass: the check moves to the front with the operations that
    compute them, so the call replays, and a padded one makes that call run eagerly
    before it changed anything, as eager code takes another path. Not moved where the
    targets are changed in place after they are computed (by a mask read from
    outside), or computed from a tensor the call writes first: those run eagerly from
    the trace on. Results as eager's throughout."""
    def setup():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Embedding(6, 4, dtype="float64"), nn.Linear(4, 6, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        keep = lp.asarray(np.ones(8, dtype=np.int64))  # 0 pads a target (changed between calls)
        written = lp.asarray(np.zeros((2, 5), dtype=np.int64))

        def step(tok1, tok2):
            opt.zero_grad()
            total = 0.0
            for k, tok in enumerate((tok1, tok2)):  # two micro-batches: the second's check after a backward pass
                if case.startswith("computed from") and k:
                    written[...] = tok
                    tok = written * 1
                targets = tok[:, 1:].reshape((-1,))
                if case.startswith("indexed"):  # (a tensor made from host values: the same at each replay)
                    targets = targets[lp.asarray(np.arange(8)[::-1].copy())]
                if case.startswith("changed"):
                    targets = targets * 1
                    targets *= keep
                loss = nn.functional.cross_entropy(model(tok[:, :-1]).reshape((-1, 6)), targets, ignore_index=0)
                loss.backward()
                total = total + loss.detach()
            opt.step()
            return total

        return model, keep, step

    (eager_model, eager_keep, eager), (model, keep, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(4):
            tokens = [rng.integers(1, 6, size=(2, 5)) for _ in range(2)]
            if k == 2:
                if case.startswith("changed"):
                    keep[3] = 0  # a target padded by the mask from outside, after the targets were computed
                    eager_keep[3] = 0
                else:
                    tokens[1][0, 3] = 0  # a padded token in the second micro-batch
            args = [lp.asarray(t) for t in tokens]
            np.testing.assert_array_equal(host(compiled(*args)), host(eager(*args)))
            if k == 2 and case.startswith("changed"):
                keep[3] = eager_keep[3] = 1
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_array_equal(host(p), host(q))
    messages = [str(w.message) for w in caught if "lp.compile" in str(w.message)]
    if case in ("computed", "indexed by positions made in the call"):
        assert compiled.calls == {"traced": 2, "replayed": 2, "eager": 0} and not messages
    else:
        assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 3}
        assert len(messages) == 1 and "decides a path" in messages[0]


def test_a_moved_check_of_state_follows_an_argument_the_call_writes():
    """The targets of a second micro-batch computed from a state tensor (``labels[2:] *
    1``), checked after the call wrote an argument: a replay whose argument is a view of
    that state (``labels[2:]``) runs eagerly, as the write pads a target eager code
    then masks (a review found a replay training on the stale targets, silently); one
    whose argument is a tensor of its own replays (the trace kept no argument alive,
    which had made such a step trace twice, then run eagerly)."""
    def setup():
        lp.manual_seed(0)
        model = nn.Linear(3, 4, dtype="float64")
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        labels = lp.asarray(np.array([1, 2, 3, 1]))

        def step(x, a):
            opt.zero_grad()
            first = nn.functional.cross_entropy(model(x), labels[:2] * 1, ignore_index=0)
            first.backward()
            with lp.no_grad():
                a.sub_(1)
            second = nn.functional.cross_entropy(model(x), labels[2:] * 1, ignore_index=0)
            second.backward()
            opt.step()
            return first.detach() + second.detach()

        return model, labels, step

    (eager_model, eager_labels, eager), (model, labels, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    x = Tensor(np.arange(6.0).reshape(2, 3))
    for k in range(4):
        a, b = (lp.asarray(np.array([5, 5])) for _ in range(2))
        if k == 2:
            a, b = eager_labels[2:], labels[2:]
        same(compiled(x, b), eager(x, a))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            same(p, q)
        for t in (labels, eager_labels):  # (the call wrote them through the view: a pad, back to 3, 1)
            t[2:] = lp.asarray(np.array([3, 1]))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 1}


@pytest.mark.parametrize("case", ["a post-accumulate hook writes it", "the argument is a view of it"])
def test_a_check_is_not_moved_ahead_of_what_writes_its_tensor(case):
    """A check of targets is not moved ahead of a backward pass whose post-accumulate
    hook writes them, and a moved check of an argument does not read it before the call
    writes a tensor the argument turns out to share memory with (``f(state[:])``, where
    the trace had another tensor): that call runs eagerly, with eager's results."""
    def setup():
        lp.manual_seed(0)
        model = nn.Linear(3, 4, dtype="float64")
        state = lp.asarray(np.array([3, 3] if case.startswith("a post") else [1, 2]))
        if case.startswith("a post"):
            def hook(p):
                with lp.no_grad():
                    state.sub_(1)

            model.bias.register_post_accumulate_grad_hook(hook)

            def step(x, t, y):
                model.zero_grad()
                model(x).sum().backward()  # the hook moves the targets
                with lp.no_grad():
                    return nn.functional.cross_entropy(model(x), state, ignore_index=0)
        else:
            def step(x, t, y):
                with lp.no_grad():
                    state.copy_(y)
                    return nn.functional.cross_entropy(model(x), t, ignore_index=0)
        return state, step

    (eager_state, eager), (state, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    x = lp.asarray(np.arange(6.0).reshape(2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for k in range(3):
            t, et = (lp.asarray(np.array([1, 2])),) * 2 if k == 0 else (state[:], eager_state[:])
            y = lp.asarray(np.array([0, 1]) if k == 2 else np.array([1, 2]))
            np.testing.assert_array_equal(host(compiled(x, t, y)), host(eager(x, et, y)))
    assert compiled.calls["eager"] == 2


def test_a_step_after_the_model_changes_mode_runs_the_new_mode():
    """``model.eval()`` (and ``train()`` again) between calls: the next call traces the
    mode it finds (dropout off, then on again), as eagerly, under one seed."""
    def setup():
        lp.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 4, dtype="float64"), nn.Dropout(0.5))

    eager_model, model = setup(), setup()

    def make(m):
        def step(x):
            with lp.no_grad():
                return m(x)
        return step

    eager, compiled = make(eager_model), lp.compile(make(model), fuse=False)
    x = Tensor(np.ones((3, 4)))
    for mode in ("train", "train", "eval", "eval", "train"):
        for m in (eager_model, model):
            getattr(m, mode)()
        lp.manual_seed(1)
        expected = host(eager(x))
        lp.manual_seed(1)
        np.testing.assert_array_equal(host(compiled(x)), expected)


class _AttrDict:
    """A configuration whose values live in a dict behind ``__getattr__`` (an
    ``EasyDict``-like object)."""

    def __init__(self, **values):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._values[name] = value


class _Trainer:
    def __init__(self):
        self.cfg = _AttrDict(scale=2.0)
        self.backend = lp.backends.get_backend("cpu")  # (LeanPass's own: no configuration)

    def factor(self):
        return 1.0


TRAINER = _Trainer()


def test_an_attribute_dict_inside_an_object_whose_methods_the_step_calls_is_compared():
    """A global object whose method the step calls (all its attributes compared) holds
    an attribute dict the step reads (``TRAINER.cfg.scale``): set between calls, the
    step traces again (its values are behind ``__getattr__``, so all of them are read);
    the backend it also holds, LeanPass's own object, adds no entry."""
    f = lp.compile(lambda x: (x * TRAINER.cfg.scale * TRAINER.factor()).sum())
    x = Tensor(np.ones(3))
    TRAINER.cfg.scale = 2.0
    out = [float(f(x)), float(f(x))]
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        TRAINER.cfg.scale = 5.0
        out += [float(f(x)), float(f(x))]
    assert out == [6.0, 6.0, 15.0, 15.0] and f.calls == {"traced": 2, "replayed": 2, "eager": 0}
    (entry,) = f._entries.values()
    assert not any(obj is TRAINER.backend for obj, _, _ in entry.named_state)


class _Aug:
    def __init__(self):
        self.k = 2.0

    def apply(self, v):
        return v * self.k


def _scaled_by_k(v, cfg):
    return v * cfg.k


def _k_times(cfg, v):
    return v * cfg.k


AUG = _Aug()
AUG_APPLY = AUG.apply  # (a global bound method used as a helper)
PARTIAL_CFG = _Aug()
PARTIAL = functools.partial(_scaled_by_k, cfg=PARTIAL_CFG)
PARTIAL_ARG = _Aug()
PARTIAL_POSITIONAL = functools.partial(_k_times, PARTIAL_ARG)


class _Transforms:
    def __init__(self):
        self.aug = _Aug()
        self.transform = self.aug.apply


TRANSFORMS = _Transforms()


@pytest.mark.parametrize("case", ["bound method", "partial's argument", "partial's keyword argument",
                                  "partial's keywords", "held bound method"])
def test_a_helper_reached_as_a_bound_method_or_a_partial_has_its_object_checked(case):
    """A helper the step reaches as a global bound method (``apply = aug.apply``), a
    ``functools.partial`` (``partial(helper, cfg=obj)``) or a bound method an object
    holds (``tr.transform = tr.aug.apply``): what its object's code reads, set between
    calls, traces again (a replay used the trace's value: 2 where eager gave 3)."""
    fn, obj = {"bound method": (lambda x: AUG_APPLY(x), AUG),
               "partial's argument": (lambda x: PARTIAL_POSITIONAL(x), PARTIAL_ARG),
               "partial's keyword argument": (lambda x: PARTIAL(x), PARTIAL_CFG),
               "partial's keywords": (lambda x: PARTIAL(x), None),
               "held bound method": (lambda x: TRANSFORMS.transform(x), TRANSFORMS.aug)}[case]
    AUG.k = PARTIAL_CFG.k = PARTIAL_ARG.k = TRANSFORMS.aug.k = 2.0
    PARTIAL.keywords["cfg"] = PARTIAL_CFG
    f = lp.compile(fn, fuse=False)
    x = Tensor(np.ones(2))
    same(f(x), [2.0, 2.0])
    same(f(x), [2.0, 2.0])
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        if obj is None:
            other = _Aug()
            other.k = 3.0
            PARTIAL.keywords["cfg"] = other
        else:
            obj.k = 3.0
        same(f(x), [3.0, 3.0])
    same(f(x), [3.0, 3.0])
    assert f.calls == {"traced": 2, "replayed": 2, "eager": 0}
    PARTIAL.keywords["cfg"] = PARTIAL_CFG


class _Stage:
    def __init__(self):
        self.scale = 2.0


class _Holder:
    def __init__(self):
        self.stages = [_Stage()]
        self.pair = (_Stage(),)
        self.cfg = _Stage()

    def factor(self):
        return 1.0


HOLDER = _Holder()
NESTED = {"t": (_Stage(),), "tl": ([2.0],), "lt": [(_Stage(),)]}


@pytest.mark.parametrize("case", ["list attribute", "tuple attribute", "tuple in a dict", "list in a tuple in a dict",
                                  "tuple in a list in a dict", "object whose method is called"])
def test_plain_objects_deep_in_a_named_configuration_are_compared(case):
    """The plain objects and numbers a step reads inside a named configuration's lists
    and tuples (``cfg.stages[0].scale``, ``cfg.pair[0].scale``, ``CFG["t"][0].scale``,
    ``CFG["tl"][0][0]``), and the attributes it reads on an object of an object whose
    methods it calls (``TRAINER.cfg.scale`` beside ``TRAINER.factor()``): changed between
    calls, the step traces again (a replay used the trace's 2.0)."""
    HOLDER.stages[0].scale = HOLDER.pair[0].scale = HOLDER.cfg.scale = NESTED["t"][0].scale = 2.0
    NESTED["lt"][0][0].scale = 2.0
    NESTED["tl"][0][0] = 2.0
    fn, change = {
        "list attribute": (lambda x: x * HOLDER.stages[0].scale, lambda: setattr(HOLDER.stages[0], "scale", 3.0)),
        "tuple attribute": (lambda x: x * HOLDER.pair[0].scale, lambda: setattr(HOLDER.pair[0], "scale", 3.0)),
        "tuple in a dict": (lambda x: x * NESTED["t"][0].scale, lambda: setattr(NESTED["t"][0], "scale", 3.0)),
        "list in a tuple in a dict": (lambda x: x * NESTED["tl"][0][0], lambda: NESTED["tl"][0].__setitem__(0, 3.0)),
        "tuple in a list in a dict": (lambda x: x * NESTED["lt"][0][0].scale,
                                      lambda: setattr(NESTED["lt"][0][0], "scale", 3.0)),
        "object whose method is called": (lambda x: x * HOLDER.cfg.scale * HOLDER.factor(),
                                          lambda: setattr(HOLDER.cfg, "scale", 3.0)),
    }[case]
    f = lp.compile(fn, fuse=False)
    x = Tensor(np.ones(2))
    same(f(x), [2.0, 2.0])
    same(f(x), [2.0, 2.0])
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        change()
        same(f(x), [3.0, 3.0])
    assert f.calls == {"traced": 2, "replayed": 1, "eager": 0}


class _NestedConfig:
    class train:  # noqa: N801 - a configuration's section, as users write them
        lr = 2.0


SIZES = [257]


def test_a_nested_class_as_a_configuration_and_a_list_grown_long_are_compared():
    """``Config.train.lr`` (a class of the user's inside a configuration class) set
    between calls traces again; so does a one-item list grown past 256 items (its
    entry, the length alone, is told apart from one item that is a number)."""
    _NestedConfig.train.lr = 2.0
    f = lp.compile(lambda x: x * _NestedConfig.train.lr, fuse=False)
    x = Tensor(np.ones(2))
    same(f(x), [2.0, 2.0])
    same(f(x), [2.0, 2.0])
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        _NestedConfig.train.lr = 3.0
        same(f(x), [3.0, 3.0])
    SIZES[:] = [257]
    g = lp.compile(lambda x: x * float(len(SIZES)), fuse=False)
    same(g(x), [1.0, 1.0])
    same(g(x), [1.0, 1.0])
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        SIZES.extend([0] * 256)
        same(g(x), [257.0, 257.0])


class _DictRaises:
    """A proxy whose ``__dict__`` raises outside its context."""

    def __getattribute__(self, name):
        if name == "__dict__":
            raise RuntimeError("outside its context")
        return object.__getattribute__(self, name)


class _Locked:
    __slots__ = ("scale", "extra")
    locked = [True]

    def __getattribute__(self, name):
        if name == "extra" and _Locked.locked[0]:
            raise RuntimeError("outside its context")
        return object.__getattribute__(self, name)


class _Lockable:
    """A proxy whose ``__dict__`` raises once it is locked (outside its context)."""

    locked = [False]

    def __getattribute__(self, name):
        if name == "__dict__" and _Lockable.locked[0]:
            raise RuntimeError("outside its context")
        return object.__getattribute__(self, name)


def test_an_argument_whose_attributes_start_to_raise_is_named_so_and_runs_eagerly():
    """Read well at the trace, raising at the next call's check: the warning says that
    its attributes raise when read (not that one was set), and from the third such call
    in a row it runs eagerly."""
    proxy = _Lockable()
    proxy.scale = 2.0
    f = lp.compile(lambda x, cfg: x * cfg.scale, fuse=False)
    x = Tensor(np.ones(2))
    same(f(x, proxy), [2.0, 2.0])
    _Lockable.locked[0] = True
    try:
        with pytest.warns(RuntimeWarning, match="raise when read"):
            same(f(x, proxy), [2.0, 2.0])
        with pytest.warns(RuntimeWarning, match="runs eagerly"):
            for _ in range(3):
                same(f(x, proxy), [2.0, 2.0])
        assert f.calls["eager"] >= 1
    finally:
        _Lockable.locked[0] = False


def test_objects_whose_attributes_raise_are_compiled_and_read_again():
    """An argument whose ``__dict__`` raises compiles (it crashed the compiler), and
    runs eagerly, with a warning: a replay could not tell a change of its attributes
    (it replayed, and kept the trace's 2.0 once one was set to 3.0). One whose
    ``__getattribute__`` raises for a slot while locked has its slots read through
    their descriptors: a value set on it since traces again (a replay used the
    trace's 2.0)."""
    proxy = _DictRaises()
    proxy.scale = 2.0
    f = lp.compile(lambda x, cfg: x * cfg.scale, fuse=False)
    x = Tensor(np.ones(2))
    with pytest.warns(RuntimeWarning, match="raise when read"):
        for _ in range(5):
            same(f(x, proxy), [2.0, 2.0])
    proxy.scale = 3.0
    same(f(x, proxy), [3.0, 3.0])
    assert f.calls["replayed"] == 0 and f.calls["eager"] >= 2  # (unreadable at every read: traced 3 times, then eager)
    cfg = _Locked()
    cfg.scale, cfg.extra = 2.0, 1.0
    _Locked.locked[0] = True
    g = lp.compile(lambda x, cfg, extra=False: x * cfg.scale + cfg.extra if extra else x * cfg.scale, fuse=False)
    same(g(x, cfg), [2.0, 2.0])
    _Locked.locked[0] = False
    try:
        same(g(x, cfg), [2.0, 2.0])
        with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
            cfg.scale = 3.0
            same(g(x, cfg), [3.0, 3.0])
        same(g(x, cfg), [3.0, 3.0])
        assert g.calls == {"traced": 2, "replayed": 2, "eager": 0}
    finally:
        _Locked.locked[0] = True


class _Loop:
    """A training loop object that holds its compiled step."""

    def __init__(self):
        self.calls = 0.0  # (a number the step reads: unchanged)
        self.w = Tensor(np.array([1.0, 2.0]))
        self.run = lp.compile(_loop_step, fuse=False)

    def offset(self):
        return self.calls


def _loop_step(x):
    return (x * LOOP.w).sum() + LOOP.offset() + LOOP.calls


LOOP = _Loop()


def test_leanpass_objects_an_object_holds_are_not_its_configuration():
    """A global object whose method the step calls (all its attributes compared) holds
    the compiled step itself, whose ``calls`` counts change at every call (a name the
    step also reads): LeanPass's own objects are no configuration, and the step replays
    (it traced again, then ran eagerly)."""
    x = Tensor(np.ones(2))
    for _ in range(4):
        same(LOOP.run(x), 3.0)
    assert LOOP.run.calls == {"traced": 1, "replayed": 3, "eager": 0}


HYPER_COUNTED = {"lr": 2.0, "global_step": 0}


def test_state_set_before_every_call_runs_eagerly_until_it_stays():
    """A counter the script keeps in a dict the step reads (``HP["global_step"] += 1``)
    is a change before every call: traced again twice, then run eagerly while it
    changes (a trace costs more than the eager call), and traced again once it stays
    as it is, then replayed; every call gives eager's result."""
    HYPER_COUNTED.update(lr=2.0, global_step=0)
    f = lp.compile(lambda x: (x * HYPER_COUNTED["lr"]).sum(), fuse=False)
    x = Tensor(np.ones(3))
    got = [float(f(x))]
    with pytest.warns(RuntimeWarning) as seen:
        for k in range(6):
            HYPER_COUNTED["global_step"] += 1
            HYPER_COUNTED["lr"] = 2.0 + (k == 3)  # (one real change among them: eagerly, as every call there)
            got.append(float(f(x)))
    assert [" ".join(str(w.message).split()[2:5]) for w in seen] == ["traced again: an", "runs eagerly while"]
    assert got == [6.0, 6.0, 6.0, 6.0, 9.0, 6.0, 6.0]
    assert f.calls == {"traced": 3, "replayed": 0, "eager": 4}
    got = [float(f(x)) for _ in range(3)]  # (it stays: traced again, then replayed)
    assert got == [6.0] * 3 and f.calls == {"traced": 4, "replayed": 2, "eager": 4}
    for change in (True, True, False, True):  # (a replay between: the changes are not in a row)
        HYPER_COUNTED["global_step"] += change
        assert float(f(x)) == 6.0
    assert f.calls == {"traced": 7, "replayed": 3, "eager": 4}


class _Tempered(nn.Module):
    """A layer that keeps its settings in a dict and a list (a Lightning-style
    ``hparams``)."""

    def __init__(self):
        self.fc = nn.Linear(4, 2, dtype="float64")
        self.hparams = {"temperature": 1.0}
        self.scales = [1.0]

    def forward(self, x):
        return self.fc(x) / self.hparams["temperature"] * self.scales[0]


def test_a_dict_or_list_of_numbers_a_layer_of_the_users_holds_is_compared():
    """``self.hparams["temperature"]`` and ``self.scales[0]`` read in a layer's
    ``forward``, changed in place between calls: the step traces again (a replay used
    the trace's values, silently: an in-place change goes through no attribute)."""
    lp.manual_seed(0)
    model = _Tempered()
    f = lp.compile(lambda x: model(x).sum().detach(), fuse=False)
    x = Tensor(np.ones((3, 4)))
    want = float(model(x).sum())
    assert float(f(x)) == float(f(x)) == want
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        model.hparams["temperature"] = 4.0
        assert float(f(x)) == float(f(x)) == float(model(x).sum()) != want
        model.scales[0] = 2.0
        assert float(f(x)) == float(f(x)) == float(model(x).sum())
    assert f.calls == {"traced": 3, "replayed": 3, "eager": 0}


@pytest.mark.parametrize("first_padded", [False, True])
def test_padded_and_unpadded_batches_each_replay_their_own_trace(first_padded):
    """``cross_entropy(..., ignore_index=0)`` on batches with padding and without, in
    either order: each path is traced once and replayed (the other path ran every such
    call eagerly, silently; a padded first batch made every call eager), bit for bit
    as eager."""
    def setup():
        lp.manual_seed(0)
        model = nn.Linear(3, 5, dtype="float64")
        opt = lp.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y, ignore_index=0)
            loss.backward()
            opt.step()
            return loss.detach()

        return model, step

    (eager_model, eager), (model, compiled) = setup(), setup()
    compiled = lp.compile(compiled)
    rng = np.random.default_rng(0)
    for i in range(10):
        y = rng.integers(1, 5, size=8)
        if (i % 2 == 0) == first_padded:
            y[:3] = 0
        x = Tensor(rng.normal(size=(8, 3)))
        np.testing.assert_array_equal(host(compiled(x, lp.asarray(y))), host(eager(x, lp.asarray(y))))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_array_equal(host(p), host(q))
    assert compiled.calls == {"traced": 2, "replayed": 8, "eager": 0}


def _all_positive(values):
    if not bool(np.all(values > 0)):
        raise ValueError("a value that is not positive")


def _path_by_sign(x):
    """Two paths, as LeanPass's own functions take them: a check that decides the path
    where the values are all positive; a host read (which cannot be traced) elsewhere."""
    if bool(np.all(x._data > 0)):
        lp._graph.trace.check(_all_positive, x, branch=True)
        return x * 2.0
    lp._graph.trace.note("a value that is not positive (read on the host)")
    return x * 3.0


def test_a_path_that_cannot_be_traced_runs_eagerly_beside_the_path_that_replays():
    """A key whose other path cannot be traced: calls on it run eagerly (not traced at
    each), with one warning; calls on the traced path go on replaying."""
    f = lp.compile(_path_by_sign, fuse=False)
    signs = [1, 1, -1, 1, -1, -1, 1]
    with pytest.warns(RuntimeWarning) as seen:
        for s in signs:
            same(f(Tensor(np.full(3, float(s)))), np.full(3, 2.0 if s > 0 else -3.0))
    assert f.calls == {"traced": 2, "replayed": 3, "eager": 2}
    assert any("cannot be traced" in str(w.message) for w in seen)


class _StepCounting:
    """A trainer whose loop keeps a count named like the optimizer's method."""

    def __init__(self):
        lp.manual_seed(0)
        self.model = nn.Linear(4, 3, dtype="float64")
        self.opt = lp.optim.SGD(self.model.parameters(), lr=0.1)
        self.step = 0
        self.cfg = argparse.Namespace(smoothing=0.1, step=0, transform=lambda v: v)

    @lp.compile
    def train_step(self, x, y):
        self.opt.zero_grad()
        loss = nn.functional.cross_entropy(self.cfg.transform(self.model(x)), y, label_smoothing=self.cfg.smoothing)
        loss.backward()
        self.opt.step()
        return loss.detach()


def test_a_count_named_like_a_method_the_step_calls_is_not_read():
    """``self.step`` and ``self.cfg.step``, counts the loop keeps, named like the
    ``opt.step()`` the code calls: not a value the step reads, so it replays (it ran
    eagerly from the third call); a callable of a name the code calls
    (``self.cfg.transform(...)``) replaced, and ``self.cfg.smoothing`` set, trace
    again."""
    t = _StepCounting()
    rng = np.random.default_rng(0)

    def call():
        return t.train_step(Tensor(rng.normal(size=(8, 4))), lp.asarray(rng.integers(0, 3, 8)))

    for _ in range(6):
        call()
        t.step += 1
        t.cfg.step += 1
    assert _StepCounting.train_step.calls == {"traced": 1, "replayed": 5, "eager": 0}
    x, y = Tensor(rng.normal(size=(8, 4))), lp.asarray(rng.integers(0, 3, 8))
    want = nn.functional.cross_entropy(t.model(x) * 2.0, y, label_smoothing=0.1).detach()
    with pytest.warns(RuntimeWarning, match=ATTRIBUTE_SET):
        t.cfg.transform = lambda v: v * 2.0
        same(t.train_step(x, y), want)
    assert _StepCounting.train_step.calls["traced"] == 2


def test_hooks_of_an_autograd_pass_before_a_path_check_run_once():
    """A later micro-batch's padded targets checked after an ``autograd.grad`` pass whose
    leaf has a gradient hook: the hook's run is a change of state, so a replay that
    met the other path could not try again (the hook ran once more per try, a sum it
    kept came out larger than eager's): such a call runs eagerly, with eager's sums."""
    def run(compiled):
        lp.manual_seed(0)
        model = nn.Linear(4, 5, dtype="float64")
        seen = []
        model.weight.register_hook(lambda g: seen.append(1) or g)

        def step(x, y):
            l1 = nn.functional.cross_entropy(model(x[:4]), y[:4], ignore_index=-100)
            (g1,) = lp.autograd.grad(l1, [model.weight])
            l2 = nn.functional.cross_entropy(model(x[4:]), y[4:], ignore_index=-100)
            (g2,) = lp.autograd.grad(l2, [model.weight])
            with lp.no_grad():
                model.weight.sub_(0.1 * (g1 + g2))
            return l1.detach() + l2.detach()

        f = lp.compile(step) if compiled else step
        rng = np.random.default_rng(0)
        out = []
        for padded in (0, 0, 1, 1, 0, 1):
            x, y = Tensor(rng.normal(size=(8, 4))), rng.integers(0, 5, 8)
            if padded:
                y[5] = -100
            out.append(host(f(x, lp.asarray(y))))
        return out, len(seen), host(model.weight)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (eager, hooks_eager, w_eager), (compiled, hooks_compiled, w_compiled) = run(False), run(True)
    assert hooks_compiled == hooks_eager
    np.testing.assert_array_equal(w_compiled, w_eager)
    for a, b in zip(compiled, eager):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_padded_targets_of_any_integer_dtype_replay(dtype):
    """int32 and uint8 targets with padding replay as int64 ones do (their positions
    were cast outside the recorded operations: every padded call ran eagerly)."""
    ignore = 255 if dtype == np.uint8 else -100
    c = lp.compile(lambda x, y: nn.functional.cross_entropy(x, y, ignore_index=ignore))
    for first in (0, 1):
        for i in range(4):
            y = np.array([1, 2, 3, 4], dtype)
            y[0] = ignore if i % 2 == first else 1
            x = Tensor(np.random.default_rng(i).normal(size=(4, 5)))
            same(c(x, lp.asarray(y)), nn.functional.cross_entropy(x, lp.asarray(y), ignore_index=ignore))
    assert c.calls == {"traced": 2, "replayed": 6, "eager": 0}


def test_an_error_in_the_trace_of_another_path_keeps_the_keys_traces():
    """A call on a new path that raises (an index out of range among padded targets)
    leaves the key's trace: the next good call replays."""
    x = Tensor(np.random.default_rng(0).normal(size=(4, 3)))
    c = lp.compile(lambda x, y: nn.functional.cross_entropy(x, y, ignore_index=-100))
    good = lp.asarray(np.array([0, 1, 2, 1]))
    c(x, good)
    c(x, good)
    with pytest.raises(ValueError, match="class indices"):
        c(x, lp.asarray(np.array([0, -100, 7, 1])))
    c(x, good)
    assert c.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_an_error_after_a_hooked_autograd_pass_is_raised_with_the_hook_run_once():
    """An operation that raises after an ``autograd.grad`` pass whose leaf has a hook (a
    matrix no longer positive definite): the replay raises it, as eager does, the hook
    run once (a replay that ran the call eagerly again ran the hook twice)."""
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    runs = []
    w.register_hook(lambda g: runs.append(1) or g)

    def step(a):
        (g,) = lp.autograd.grad((w * w).sum(), [w])
        return lp.linalg.cholesky(a) * g.sum()

    f = lp.compile(step)
    good = Tensor(np.eye(2) * 2.0)
    for _ in range(3):
        same(f(good), step(good))
    runs.clear()
    bad = Tensor(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError):
        f(bad)
    assert len(runs) == 1


def test_a_step_that_changes_a_sequentials_layers_in_place_runs_eagerly():
    """The step sets the other head into ``model.layers`` for the next call (an item
    replaced in place: no attribute set): the call changed a list of modules it reads
    by name, which a replay would leave as the first call left it. It runs eagerly,
    with eager's results, also where two kinds of calls (a smaller last batch) take turns."""
    def setup():
        lp.manual_seed(0)
        heads = [nn.Linear(4, 2, dtype="float64"), nn.Linear(4, 2, dtype="float64")]
        model = nn.Sequential(nn.Linear(3, 4, dtype="float64"), nn.Tanh(), heads[0])

        def step(x):  # the two heads take turns
            out = model(x)
            model.layers[-1] = heads[1] if model.layers[-1] is heads[0] else heads[0]
            return out.detach()
        return step, model, heads

    (eager, eager_model, eager_heads), (step, model, heads) = setup(), setup()
    compiled = lp.compile(step, fuse=False)
    rng = np.random.default_rng(0)
    with pytest.warns(RuntimeWarning, match="a list or dict of tensors or modules the function reads by name"):
        for n in (4, 2, 4, 2, 4, 2):
            x = Tensor(rng.normal(size=(n, 3)))
            same(compiled(x), eager(x))
            assert (model.layers[-1] is heads[1]) == (eager_model.layers[-1] is eager_heads[1])
    for p, q in zip(model.parameters(), eager_model.parameters()):
        same(p, q)
    assert compiled.calls["replayed"] == 0


def test_an_error_in_a_replay_after_zero_grad_still_runs_the_call_eagerly():
    # zero_grad run again by the eager call changes nothing more: the error the function catches takes its eager
    # path, also where no moved check but an operation met it (a matrix no longer positive definite)
    def make():
        model, opt = _linear_and_sgd(2, 2)

        def step(a):
            opt.zero_grad()
            try:
                factor = lp.linalg.cholesky(a)
            except Exception:  # not positive definite: shifted
                factor = lp.linalg.cholesky(a + 10.0 * lp.eye(2, dtype=a.dtype))
            loss = (model(factor) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return step, list(model.parameters())

    matrix = np.array([[2.0, 0.5], [0.5, 1.0]])
    compiled = _eager_and_compiled(make, [lambda s=s: (Tensor(matrix * s),) for s in (1.0, 2.0, -1.0, 1.0)])
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 1}


def test_a_gradient_changed_in_place_through_a_handle_makes_a_later_error_propagate():
    # the gradient halved in place (its memory: no .grad given back) is a change of state: an eager call after
    # the replay's error would halve it twice; the error propagates, as after a step, the gradient halved once
    ws = [Tensor(np.ones(2), requires_grad=True) for _ in range(2)]

    def f(w, a):
        lp.as_tensor(w.grad).mul_(0.5)  # (the array eagerly, the Tensor compiled: a Tensor on it either way)
        try:
            return lp.linalg.cholesky(a)
        except Exception:
            return a * 0.0

    compiled = lp.compile(lambda a: f(ws[1], a), fuse=False)
    for scale in (1.0, 2.0, -1.0):
        for w in ws:
            (w * 3.0).sum().backward()
        a = Tensor(np.eye(2) * scale)
        want = f(ws[0], a)
        if scale > 0:
            same(compiled(a), want)
        else:
            with pytest.raises(Exception, match="positive definite|Matrix is not"):
                compiled(a)
        same(ws[1].grad, ws[0].grad)
    assert compiled.calls == {"traced": 1, "replayed": 1, "eager": 0}


def test_a_padded_target_changed_in_place_before_any_change_of_state_replays():
    """Targets shifted in place (``targets -= 1``: labels from 1, a padding 0 becomes
    ``ignore_index=-1``): their check cannot move to the front, but stays before any
    change of state (``zero_grad`` changes none), so a replay that fails it still runs
    the call eagerly: each path is traced once and replayed, as eager bit for bit."""
    def setup():
        model, opt = _linear_and_sgd(3, 4)

        def step(x, y):
            opt.zero_grad()
            targets = y * 1
            targets -= 1
            loss = nn.functional.cross_entropy(model(x), targets, ignore_index=-1)
            loss.backward()
            opt.step()
            return loss.detach()
        return model, step

    (eager_model, eager), (model, compiled) = setup(), setup()
    compiled = lp.compile(compiled, fuse=False)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        for i in range(6):
            y = rng.integers(1, 5, size=8)
            if i in (2, 3):
                y[:3] = 0
            x = Tensor(rng.normal(size=(8, 3)))
            same(compiled(x, lp.asarray(y)), eager(x, lp.asarray(y)))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 2, "replayed": 4, "eager": 0}


@pytest.mark.parametrize("read", ["momentum buffer", "step count", "state_dict"])
def test_an_optimizers_state_read_inside_the_step_runs_it_eagerly(read):
    """``opt.state`` read by the step's own code (a buffer logged, Adam's step count
    ramping a loss in, ``opt.state_dict()``): its arrays change in place at each step
    and its counts go up, so a replay, which gave the trace's, runs eagerly instead,
    with a warning; read between calls, it leaves the replays alone."""
    def run(compiled):
        model, _ = _linear_and_sgd(3, 1)
        opt = lp.optim.Adam(model.parameters(), lr=0.1) if read == "step count" else \
            lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            if read == "step count" and opt.state:
                loss = loss + min(1.0, opt.state[id(model.weight)]["step"] / 4) * (model.weight ** 2).sum()
            loss.backward()
            opt.step()
            if read == "momentum buffer":
                return lp.as_tensor(opt.state[id(model.weight)]["momentum_buffer"]).abs().sum()
            if read == "state_dict":
                return loss.detach() + float(opt.state_dict()["state"][0]["momentum_buffer"].sum())
            return loss.detach()

        f = lp.compile(step) if compiled else step
        out = [host(f(Tensor(np.full((2, 3), float(k + 1))))) for k in range(4)]
        return out, [host(p) for p in model.parameters()], f

    want, want_params, _ = run(False)
    with pytest.warns(RuntimeWarning, match=r"an optimizer's state read inside the function \(opt.state\)"):
        got, got_params, f = run(True)
    for a, b in zip([*got, *got_params], [*want, *want_params], strict=True):
        same(a, b)
    assert f.calls["replayed"] == 0


def test_an_optimizers_state_read_between_calls_leaves_the_replays():
    model, _ = _linear_and_sgd(3, 1)
    opt = lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    f, seen = lp.compile(step), []
    for k in range(4):
        f(Tensor(np.full((2, 3), float(k + 1))))
        seen.append(float(np.abs(opt.state[id(model.weight)]["momentum_buffer"]).sum()))
        seen.append(sum(float(np.abs(v["momentum_buffer"]).sum()) for v in opt.state.values()))
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0} and len(set(seen)) == 8


class _HeadsTrainer:
    """A plain object holding a model whose last layer the step swaps in place."""

    def __init__(self):
        lp.manual_seed(0)
        self.heads = [nn.Linear(4, 2, dtype="float64"), nn.Linear(4, 2, dtype="float64")]
        self.model = nn.Sequential(nn.Linear(3, 4, dtype="float64"), nn.Tanh(), self.heads[0])

    def step(self, x):  # the two heads take turns: the other one set into the list, then the model called
        layers = self.model.layers
        layers[-1] = self.heads[1] if layers[-1] is self.heads[0] else self.heads[0]
        return self.model(x).detach()


_HEADS = [None]  # (the global trainer of the "a global's" case)


def _swap_global_heads(x):
    return _HEADS[0].step(x)


@pytest.mark.parametrize("reach", ["the owner's", "an argument's", "a global's"])
def test_a_model_reached_through_an_object_whose_layers_the_step_swaps_runs_eagerly(reach):
    """A Sequential reached through a plain object (a trainer's ``self.model``,
    ``run.model``, ``RUN.model``), whose ``layers`` the step changes in place before it
    calls the model: the module's own check, made when it is called, saw the changed
    list, so replays kept the first call's layer (eager alternates). The change is now
    seen against the list as it was before the call: the call runs eagerly."""
    eager, trainer = _HeadsTrainer(), _HeadsTrainer()
    if reach == "the owner's":
        run = lp.compile(trainer.step)
    elif reach == "an argument's":
        f = lp.compile(lambda t, x: t.step(x))
        run = functools.partial(f, trainer)
    else:
        _HEADS[0], f = trainer, lp.compile(_swap_global_heads)
        run = f
    rng = np.random.default_rng(0)
    with pytest.warns(RuntimeWarning, match="through an object, changed by it"):
        for _ in range(4):
            x = Tensor(rng.normal(size=(2, 3)))
            same(run(x), eager.step(x))
            assert (trainer.model.layers[-1] is trainer.heads[1]) == (eager.model.layers[-1] is eager.heads[1])


def test_a_layer_frozen_at_every_other_call_replays_a_trace_of_each_state():
    """``requires_grad_`` set outside the step, alternately (a phase that trains the
    head alone): each state traces once and the key keeps both traces, so the calls
    after replay; they traced at every call before (one trace dropped the other)."""
    def setup():
        lp.manual_seed(0)
        encoder = nn.Sequential(nn.Linear(5, 12, dtype="float64"), nn.Tanh())
        model = nn.Sequential(encoder, nn.Linear(12, 2, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return model, encoder, step

    (eager_model, eager_encoder, eager), (model, encoder, step) = setup(), setup()
    compiled = lp.compile(step)
    rng = np.random.default_rng(1)
    for i in range(8):
        for m in (eager_encoder, encoder):
            m.requires_grad_(i % 2 == 0)
        x, y = Tensor(rng.normal(size=(8, 5))), Tensor(rng.normal(size=(8, 2)))
        same(compiled(x, y), eager(x, y))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            same(p, q)
    assert compiled.calls == {"traced": 2, "replayed": 6, "eager": 0}


def test_a_compiled_function_a_compiled_step_calls_by_name_is_recorded_in_its_trace():
    """A compiled forward (also used for inference elsewhere) called by a compiled
    step: it runs eagerly inside the trace, its operations recorded there, and its
    counts, which change at that call, are no state of the step's (the step ran
    eagerly at every call, its warning blaming a dict argument)."""
    def make(compiled):
        model, opt = _linear_and_sgd(4, 2)
        forward = lp.compile(lambda x: model(x)) if compiled else model

        def step(x):
            opt.zero_grad()
            loss = (forward(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return model, (lp.compile(step) if compiled else step)

    (eager_model, eager), (model, compiled) = make(False), make(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(5):
            x = Tensor(np.full((3, 4), float(k)))
            same(compiled(x), eager(x))
    for p, q in zip(model.parameters(), eager_model.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


def test_an_adversarial_step_reading_its_inputs_gradient_replays():
    """FGSM's step: the input made a leaf in the call (``x.detach().requires_grad_()``),
    a backward pass, its ``.grad`` read to perturb the batch, then the step on both
    batches. The leaf's gradient is a value of each replay (it ran eagerly at every
    call): eager bit for bit."""
    def make():
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16, dtype="float64"), nn.ReLU(), nn.Linear(16, 3, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            xa = x.detach().requires_grad_(True)
            opt.zero_grad()
            nn.functional.cross_entropy(model(xa), y).backward()
            x_adv = (x + 0.1 * lp.sign(lp.as_tensor(xa.grad))).detach()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y) + nn.functional.cross_entropy(model(x_adv), y)
            loss.backward()
            opt.step()
            return loss.detach(), lp.as_tensor(xa.grad).abs().sum()
        return model, step

    (eager_model, eager), (model, step) = make(), make()
    compiled = lp.compile(step)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(5):
            x, y = Tensor(rng.normal(size=(8, 6))), lp.asarray(rng.integers(0, 3, 8))
            for a, b in zip(compiled(x, y), eager(x, y), strict=True):
                same(a, b)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


@pytest.mark.parametrize("read_first", [False, True])
def test_a_leaf_made_in_the_call_keeps_its_gradient_over_two_passes(read_first):
    """Its ``.grad`` read before any pass (zeros, kept: the passes add to them), and
    after each of two: as eagerly, -0.0 and all."""
    w = Tensor(np.array([1.0, -2.0, -0.0]), requires_grad=True)

    def f(x):
        xa = x.detach().requires_grad_()
        first = lp.as_tensor(xa.grad) * 1.0 if read_first else x * 0.0
        (xa * w).sum().backward()
        once = lp.as_tensor(xa.grad) * 1.0
        (xa * xa * -0.5).sum().backward()
        return first, once, lp.as_tensor(xa.grad) * 1.0

    compiled = lp.compile(f)
    for k in range(4):
        x = Tensor(np.array([0.0, 1.0, -3.0]) * k)
        want = f(x)
        got = compiled(x)
        for a, b in zip(got, want, strict=True):
            same(a, b)
            np.testing.assert_array_equal(np.signbit(host(a)), np.signbit(host(b)))
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def _falls_back_as_eager(run, match):
    """``run(compiled)`` -> (arrays, the function run): compiled, it warns ``match`` and
    never replays, and its arrays are eager's, bit for bit."""
    want, _ = run(False)
    with pytest.warns(RuntimeWarning, match=match):
        got, f = run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls["replayed"] == 0


def _square_step(model, opt):
    """The step of several tests below: ``opt.zero_grad()``, the mean square of
    ``model(x)``, backward, ``opt.step()``; the loss, detached."""
    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _square_runs(make_opt, calls, before=None):
    """``calls`` calls of :func:`_square_step` on ``mlp("cpu")`` with the optimizer
    ``make_opt(params)``, eagerly, then compiled (``fuse=False``) on a twin;
    ``before(k, opt, model)`` runs before call ``k``. The compiled run's losses and
    final parameters must be the eager run's, bit for bit. Returns the compiled
    function and the warnings its run gave."""
    def run(compiled):
        model = mlp("cpu")
        opt = make_opt(model.parameters())
        step = _square_step(model, opt)
        f = lp.compile(step, fuse=False) if compiled else step
        out = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in range(calls):
                if before is not None:
                    before(k, opt, model)
                out.append(host(f(Tensor(np.full((4, 6), 0.1 * k)))))
        return out + [host(p) for p in model.parameters()], f, caught

    (want, _, _), (got, f, caught) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    return f, caught


class _TensorMomentum(lp.optim.Optimizer):
    """A hand-written optimizer that keeps Tensors in ``self.state`` and reads them in
    its own ``step``, traced as the call's code (no action)."""

    def __init__(self, params):
        super().__init__(params, dict(lr=0.1))
        for p in self.param_groups[0]["params"]:
            self.state[id(p)] = {"buf": lp.zeros_like(p)}

    def step(self):
        with lp.no_grad():
            for p in self.param_groups[0]["params"]:
                buf = self.state[id(p)]["buf"]
                buf.mul_(0.9).add_(p.grad)
                p.sub_(0.1 * buf)


def test_a_hand_written_optimizer_keeping_tensors_in_its_state_replays():
    f, _ = _square_runs(_TensorMomentum, 4)
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


@pytest.mark.parametrize("how", ["setdefault", "a dict fetched before", "a view of its buffer"])
def test_an_optimizers_state_array_read_any_way_runs_the_call_eagerly(how):
    """``opt.state.setdefault(...)`` (a read too), or a parameter's state dict fetched
    before the calls (no read of ``opt.state`` in the call): a tensor made on its
    buffer runs the call eagerly (replays gave the first call's buffer)."""
    def run(compiled):
        model, _ = _linear_and_sgd(3, 1)
        opt = lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        (model(Tensor(np.ones((1, 3)))) ** 2).sum().backward()
        opt.step()  # (the state made)
        inner = dict.__getitem__(opt.state, id(model.weight))

        def step(x):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
            buf = opt.state.setdefault(id(model.weight), {}) if how == "setdefault" else inner
            if how == "a view of its buffer":  # (its first row: a NumPy view of the state's array)
                return lp.as_tensor(buf["momentum_buffer"][0]).abs().sum()
            return lp.as_tensor(buf["momentum_buffer"]).abs().sum()

        f = lp.compile(step) if compiled else step
        return [host(f(Tensor(np.full((2, 3), float(k + 1))))) for k in range(4)], f

    _falls_back_as_eager(run, "optimizer's state")


def test_opt_step_given_none_as_its_closure_replays():
    def run(compiled):
        model, opt = _linear_and_sgd(3, 1)

        def step(x, closure=None):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step(closure)  # (generic code: no closure given)
            return loss.detach()

        f = lp.compile(step) if compiled else step
        return [host(f(Tensor(np.full((2, 3), float(k + 1))))) for k in range(4)], f

    (want, _), (got, f) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_replaced_layer_leaves_no_trace_holding_it():
    """A key keeps its earlier traces only where a state tensor's flag, shape, dtype or
    device tells them from the call (a change that may be undone): a head replaced at
    each epoch leaves none behind (they held every old head alive), and a path taken
    later (a target equal to ignore_index) still gets a trace of its own."""
    lp.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8, dtype="float64"), nn.Tanh(), nn.Linear(8, 3, dtype="float64"))
    opt = lp.optim.SGD(model.parameters(), lr=0.1)
    f = lp.compile(training_step(model, opt))
    rng, heads = np.random.default_rng(0), []
    x = Tensor(rng.normal(size=(6, 4)))
    for epoch in range(4):
        if epoch:
            heads.append(weakref.ref(model[2].weight))
            model[2] = nn.Linear(8, 3, dtype="float64")
            opt.param_groups[0]["params"][-2:] = [model[2].weight, model[2].bias]
        for _ in range(2):
            f(x, lp.asarray(rng.integers(0, 3, 6)))
    gc.collect()
    assert [h() for h in heads] == [None] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            y = rng.integers(0, 3, 6)
            y[0] = -100
            f(x, lp.asarray(y))
    assert f.calls == {"traced": 5, "replayed": 6, "eager": 0}


_HEADS_BY_NAME = {}


def test_a_compiled_function_in_a_dict_the_step_names_is_no_configuration():
    lp.manual_seed(0)
    model = nn.Linear(4, 2, dtype="float64")
    opt = lp.optim.SGD(model.parameters(), lr=0.1)
    _HEADS_BY_NAME["cls"] = lp.compile(lambda x: model(x))

    def step(x):
        opt.zero_grad()
        loss = (_HEADS_BY_NAME["cls"](x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    f = lp.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(5):
            f(Tensor(np.full((3, 4), float(k))))
    assert f.calls == {"traced": 1, "replayed": 4, "eager": 0}


@pytest.mark.parametrize("kernel", [False, True])
def test_a_fused_runs_inputs_are_not_held_past_it(kernel, monkeypatch):
    """A fused run reads ``x @ w`` last: the replay holds it no longer than the run
    (a flat program, or a kernel compiled where Numba is installed, which leaves its
    list of inputs as it was), so a draw after it allocates no more than eagerly."""
    if not kernel:
        monkeypatch.setattr(_compile.plan, "COMPILE_AFTER", 10**9)
    w = Tensor(np.eye(256))

    def infer(x):
        g = ((x @ w) * 2.0 + 1.0) * 3.0
        return g, lp.rand(256, 256, dtype="float64")

    def peak(fn, calls):
        for _ in range(calls):
            fn(x)
        tracemalloc.start()
        try:
            fn(x)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    x = Tensor(RNG.normal(size=(256, 256)))
    eager_peak = peak(infer, 1)
    f = lp.compile(infer)
    assert peak(f, 5) <= eager_peak + 4096  # (a flat program, or the kernel: made and compiled by now)
    assert f.calls == {"traced": 1, "replayed": 5, "eager": 0}


def test_replays_that_meet_an_error_at_three_calls_in_a_row_warn():
    """A replay that meets an error before any change of state runs the call eagerly
    (its ``except`` path): at three such calls in a row a warning says so, with the
    error, and ``explain()`` counts them (each pays for the replay too)."""
    def f(a):
        try:
            return lp.linalg.cholesky(a)
        except Exception:
            return a * 0.0

    compiled = lp.compile(f, fuse=False)
    compiled(Tensor(np.eye(2)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(4):
            a = Tensor(-np.eye(2) * (k + 1))
            same(compiled(a), f(a))
    assert [str(w.message).count("at 3 calls in a row") for w in caught] == [1]
    assert compiled.calls == {"traced": 1, "replayed": 0, "eager": 4}
    assert "4 calls run eagerly after their replay met an error" in compiled.explain()
    compiled(Tensor(np.eye(2)))
    assert compiled.calls["replayed"] == 1


def test_a_hand_written_optimizers_state_tensor_replaced_between_calls_traces_again():
    """A momentum buffer reset by assignment between calls (another Tensor in
    ``opt.state``): the replay checks the state holds what the trace read, and traces
    again (replays read the old buffer)."""
    def reset(k, opt, model):
        if k == 3:
            for p in model.parameters():
                opt.state[id(p)]["buf"] = lp.zeros_like(p)

    f, _ = _square_runs(_TensorMomentum, 6, reset)
    assert f.calls == {"traced": 2, "replayed": 4, "eager": 0}


class _CountingSGD(lp.optim.Optimizer):
    """A hand-written optimizer counting its steps in Python: on itself, or in a state
    dict of its own (PyTorch's style), for a decaying rate."""

    def __init__(self, params, where):
        super().__init__(params, dict(lr=0.1))
        self.where, self.t = where, 0
        if where == "state":
            self.state = collections.defaultdict(dict)

    def step(self):
        with lp.no_grad():
            for p in self.param_groups[0]["params"]:
                if self.where == "state":
                    self.state[id(p)]["step"] = t = self.state[id(p)].get("step", 0) + 1
                else:
                    t = self.t + 1
                p.sub_(0.1 / t * p.grad)
        self.t += self.where != "state"


@pytest.mark.parametrize("where", ["self", "state"])
def test_a_hand_written_optimizer_counting_its_steps_in_python_runs_eagerly(where):
    """Its ``step`` is traced as the call's own code: a replay would not count (it baked
    the trace's count in), so the call runs eagerly, with a warning."""
    f, caught = _square_runs(lambda params: _CountingSGD(params, where), 5)
    assert f.calls["replayed"] == 0 and caught


def test_an_optimizer_made_inside_the_step_runs_it_eagerly():
    """A fresh optimizer at each call (its momentum starts at zero each time): a replay
    would step the trace's, its momentum carried over, so the call runs eagerly (after
    one more trace: see the next test)."""
    def run(compiled):
        model = mlp("cpu")

        def step(x):
            opt = lp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        f = lp.compile(step, fuse=False) if compiled else step
        return [host(f(Tensor(np.full((4, 6), 0.1 * k)))) for k in range(4)] + [
            host(p) for p in model.parameters()], f

    _falls_back_as_eager(run, "SGD made inside the function")


def test_a_step_called_in_eval_and_train_mode_at_alternate_calls_replays_each():
    """``model.eval()`` and ``model.train()`` at alternate calls of one compiled step
    (dropout and BatchNorm take another path in each): the key keeps both traces, as a
    module's flag set since may be undone, and each call replays its mode's, as eager
    bit for bit (it traced at every call)."""
    def run(compiled):
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8, dtype="float64"), nn.BatchNorm1d(8, dtype="float64"), nn.ReLU(),
                              nn.Dropout(0.3), nn.Linear(8, 3, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        f = lp.compile(training_step(model, opt), fuse=False) if compiled else training_step(model, opt)
        rng, out = np.random.default_rng(0), []
        for k in range(8):
            model.train(k % 2 == 0)
            out.append(host(f(Tensor(rng.normal(size=(10, 6))), lp.asarray(rng.integers(0, 3, 10)))))
        return out + [host(t) for t in (*model.parameters(), *model.buffers())], f

    (want, _), (got, f) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls == {"traced": 2, "replayed": 6, "eager": 0}


def test_two_threads_making_the_first_call_at_once_leave_a_whole_trace():
    """Two threads call a new compiled function at once: one traces, the other runs
    eagerly (one tracer at a time), and later calls replay the whole trace (both traced
    before, into one tracer: the trace kept missed operations, its replays were wrong)."""
    def f(x):
        y = x * 2.0
        time.sleep(0.02)  # (slow Python in the step: the other thread runs meanwhile)
        return (y + 1.0).exp()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(5):
            compiled, barrier, out = lp.compile(f), threading.Barrier(2), {}

            def work(k, compiled=compiled, barrier=barrier, out=out):
                x = Tensor(np.full(3, float(k)))
                barrier.wait()
                out[k] = compiled(x)

            threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for k in range(2):
                same(out[k], f(Tensor(np.full(3, float(k)))))
            for v in (0.5, 1.5):
                same(compiled(Tensor(np.full(3, v))), f(Tensor(np.full(3, v))))
            assert compiled.calls["traced"] == 1
    finally:
        sys.setswitchinterval(interval)


class _PickledNet(nn.Module):
    """A module whose forward the tests compile on the instance (pickled by its module)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2, dtype="float64")

    def forward(self, x):
        return self.fc(x).tanh()


def test_a_model_with_a_compiled_forward_is_copied_and_pickled_after_calls():
    """``model.forward = lp.compile(model.forward)``, called, then ``copy.deepcopy`` or
    pickled (it raised: a trace holds modules): the copy's forward is compiled afresh,
    bound to the copy, and gives the copy's results."""
    import copy
    import pickle

    lp.manual_seed(0)
    model = _PickledNet()
    model.forward = lp.compile(model.forward)
    x = Tensor(RNG.normal(size=(4, 3)))
    with lp.no_grad():  # (an inference: a result that requires grad runs eagerly)
        for _ in range(2):
            model(x)
        for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
            twin.fc.weight.mul_(2.0)
            same(twin(x), (x @ twin.fc.weight.T + twin.fc.bias).tanh())
            assert twin.forward.calls["traced"] == 1 and twin.forward.fn.__self__ is twin
        same(model(x), (x @ model.fc.weight.T + model.fc.bias).tanh())
    assert model.forward.calls == {"traced": 1, "replayed": 2, "eager": 0}


def test_a_module_attribute_set_before_every_call_runs_eagerly_until_it_stays():
    """The caller sets a module's attribute before each call (``model.past = kv``, a
    tensor of another shape each time): traced at each call, which costs more than the
    eager call, so from the third such call in a row eagerly, with a warning, and traced
    again once it stays."""
    lp.manual_seed(0)
    model = nn.Linear(4, 4, dtype="float64")
    model.past = Tensor(np.zeros((1, 4)))

    @lp.no_grad()
    def decode(x):
        return lp.concat([model.past, model(x)], axis=0).sum(axis=0)

    compiled = lp.compile(decode)
    with pytest.warns(RuntimeWarning, match="set before every call"):
        for k in range(6):
            model.past = Tensor(np.ones((k + 1, 4)))
            x = Tensor(np.full((2, 4), float(k)))
            same(compiled(x), decode(x))
    assert compiled.calls == {"traced": 3, "replayed": 0, "eager": 3}
    for _ in range(3):  # (it stays: traced again, then replayed)
        same(compiled(x), decode(x))
    assert compiled.calls == {"traced": 4, "replayed": 2, "eager": 3}


def test_a_cache_grown_in_a_dict_argument_at_every_call_warns():
    """A decoding step that grows a key-value cache in a dict argument: each call is of
    a new kind (its shapes) and keeps its tensors, so each is traced and no trace is
    kept; at the third such call in a row a warning says so (it was silent), and the
    next calls run eagerly, untraced (a trace at each cost more than the eager call)."""
    lp.manual_seed(0)
    proj = nn.Linear(4, 4, dtype="float64")

    @lp.no_grad()
    def decode(x, cache):
        cache["k"] = lp.concat([cache["k"], proj(x)], axis=0)
        return cache["k"].sum(axis=0)

    compiled = lp.compile(decode)
    mine, theirs = {"k": Tensor(np.zeros((1, 4)))}, {"k": Tensor(np.zeros((1, 4)))}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(6):
            x = Tensor(np.full((1, 4), float(k)))
            same(compiled(x, mine), decode(x, theirs))
    assert [str(w.message).count("traced at 3 calls in a row, each of a new kind") for w in caught] == [1]
    assert compiled.calls == {"traced": 3, "replayed": 0, "eager": 3}


def test_an_optimizer_made_at_the_first_call_and_kept_replays_after():
    """A trainer that makes its optimizer at the first step (``if self.opt is None``):
    traced once more, then replayed (the check for optimizers made in the call ran
    such a step eagerly for good)."""
    class Trainer:
        def __init__(self):
            self.model, self.opt = mlp("cpu"), None

        def step(self, x):
            if self.opt is None:
                self.opt = lp.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
            self.opt.zero_grad()
            loss = (self.model(x) ** 2).mean()
            loss.backward()
            self.opt.step()
            return loss.detach()

    eager, trainer = Trainer(), Trainer()
    compiled = lp.compile(trainer.step, fuse=False)
    for k in range(6):
        x = Tensor(np.full((4, 6), 0.1 * k))
        same(compiled(x), eager.step(x))
    for p, q in zip(trainer.model.parameters(), eager.model.parameters()):
        same(p, q)
    assert compiled.calls == {"traced": 2, "replayed": 4, "eager": 0}


def test_module_flags_set_in_four_ways_replay_a_trace_of_each():
    """``train()``/``eval()`` at alternate calls and a layer frozen at every third: four
    kinds of state, all kept by one key (at most 4 traces), so no call runs eagerly (the
    rule for modules changed before every call took the fourth kind for one)."""
    def run(compiled):
        lp.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8, dtype="float64"), nn.Dropout(0.2), nn.Linear(8, 3, dtype="float64"))
        opt = lp.optim.SGD(model.parameters(), lr=0.1)
        f = lp.compile(training_step(model, opt), fuse=False) if compiled else training_step(model, opt)
        rng, out = np.random.default_rng(0), []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for k in range(12):
                model.train(k % 2 == 0)
                model[0].requires_grad_(k % 3 != 0)
                out.append(host(f(Tensor(rng.normal(size=(10, 6))), lp.asarray(rng.integers(0, 3, 10)))))
        return out + [host(p) for p in model.parameters()], f

    (want, _), (got, f) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls["eager"] == 0 and f.calls["traced"] <= 4


def test_a_scheduler_made_inside_the_step_runs_it_eagerly():
    """A fresh ``StepLR`` at each call (eagerly the rate never decays): a replay would
    step the trace's, whose count carried over (the rate halved every other call)."""
    def run(compiled):
        model, opt = _linear_and_sgd(3, 1)

        def step(x):
            sched = lp.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            sched.step()
            return loss.detach()

        f = lp.compile(step, fuse=False) if compiled else step
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for k in range(6):
                out += [host(f(Tensor(np.full((2, 3), float(k + 1))))), np.array(opt.param_groups[0]["lr"])]
        return out + [host(p) for p in model.parameters()], f

    (want, _), (got, f) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls["replayed"] == 0


def test_a_hand_written_optimizers_option_set_between_calls_traces_again():
    """A hand-written optimizer's own number (``self.beta``, read by its ``step``, traced
    as the call's code), set by the caller between calls: compared before each replay,
    as any object's (replays kept the trace's)."""
    class Momentumless(lp.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))
            self.beta = 0.9

        def step(self):
            with lp.no_grad():
                for p in self.param_groups[0]["params"]:
                    p.sub_(0.1 * self.beta * p.grad)

    def set_beta(k, opt, model):
        opt.beta = 0.9 if k < 3 else 0.0

    f, _ = _square_runs(Momentumless, 6, set_beta)
    assert f.calls["traced"] == 2


@lp.compile
def _compiled_by_name(x):
    return x * 2.0


def test_a_compiled_function_a_module_names_pickles_and_copies_as_itself():
    import copy
    import pickle

    same(_compiled_by_name(Tensor(np.ones(2))), [2.0, 2.0])
    assert pickle.loads(pickle.dumps(_compiled_by_name)) is _compiled_by_name
    assert copy.deepcopy({"f": _compiled_by_name})["f"] is _compiled_by_name


class _ScaledAdam(lp.optim.Adam):
    """A subclass of the user's of a built-in optimizer: its ``step`` scales the
    gradients by its own ``scale``, then runs Adam's."""

    def __init__(self, params, scale):
        super().__init__(params, lr=0.01)
        self.scale = scale

    def step(self, closure=None):
        with lp.no_grad():
            for p in self.param_groups[0]["params"]:
                lp.as_tensor(p.grad).mul_(self.scale)
        return super().step(closure)


@pytest.mark.parametrize("held", ["by name", "in a dict"])
def test_a_users_subclass_of_an_optimizer_replays_and_its_own_numbers_are_checked(held):
    """Its own attributes are compared as any object's (``scale`` set between calls:
    traced again), not those of the base, which Adam's step changes at each call (it
    ran every call eagerly once compared)."""
    def run(compiled):
        model = mlp("cpu")
        opt = _ScaledAdam(model.parameters(), 0.5)
        box = {"opt": opt}

        def step(x):
            o = box["opt"] if held == "in a dict" else opt
            o.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            o.step()
            return loss.detach()

        f = lp.compile(step, fuse=False) if compiled else step
        out = []
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "lp.compile: step traced again", RuntimeWarning)  # (scale set)
            for k in range(8):
                opt.scale = 0.5 if k < 5 else 2.0
                out.append(host(f(Tensor(np.full((4, 6), 0.1 * k)))))
        return out + [host(p) for p in model.parameters()], f

    (want, _), (got, f) = run(False), run(True)
    for a, b in zip(got, want, strict=True):
        same(a, b)
    assert f.calls == {"traced": 2, "replayed": 6, "eager": 0}


# ---- retain_grad: a value of the call keeps its gradient ------------------------------------------------


@pytest.mark.parametrize("fuse", [False, True])
def test_a_retained_gradient_read_in_the_call_replays(device, fuse):
    """Grad-CAM's pattern in a training step: a layer's output retains its gradient
    (``h.retain_grad()``), the loss's backward pass, then ``h.grad`` read and used (a
    saliency returned). It ran eagerly at every call: each replay now reads the
    gradient its own pass gave, bit for bit with eager's, and the step is eager's."""
    def make():
        lp.manual_seed(0)
        first = nn.Sequential(nn.Linear(5, 8, device=device, dtype="float64"), nn.Tanh())
        head = nn.Linear(8, 3, device=device, dtype="float64")
        opt = lp.optim.SGD([*first.parameters(), *head.parameters()], lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            h = first(x)
            h.retain_grad()
            loss = nn.functional.cross_entropy(head(h * 2.0 + 1.0), y)
            loss.backward()
            opt.step()
            return loss.detach(), (lp.as_tensor(h.grad) * h.detach()).sum(axis=1)
        return [*first.parameters(), *head.parameters()], step

    (eager_params, eager), (params, step) = make(), make()
    compiled = lp.compile(step, fuse=fuse)
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(6):
            x = Tensor(rng.normal(size=(4, 5)), device=device)
            y = lp.asarray(rng.integers(0, 3, 4), device=device)
            for a, b in zip(compiled(x, y), eager(x, y), strict=True):
                same(a, b)
    for p, q in zip(params, eager_params, strict=True):
        same(p, q)
    assert compiled.calls == {"traced": 1, "replayed": 5, "eager": 0}


@pytest.mark.parametrize("read_first", [False, True])
def test_a_retained_gradient_adds_up_over_two_passes_and_comes_back_with_its_tensor(read_first):
    """Read before any pass (zeros, kept), after each of two passes (``retain_graph``:
    they add up, as a leaf's), and returned: the tensor comes back with its
    ``.grad``, as eagerly (its value at the end of the call)."""
    w = Tensor(np.array([1.0, -2.0, -0.0]), requires_grad=True)

    def f(x):
        h = x * w
        h.retain_grad()
        first = lp.as_tensor(h.grad) * 1.0 if read_first else x * 0.0
        (h * h).sum().backward(retain_graph=True)
        once = lp.as_tensor(h.grad) * 1.0
        (h * -0.5).sum().backward()
        return first, once, h

    compiled = lp.compile(f)
    for k in range(4):
        x = Tensor(np.array([0.0, 1.0, -3.0]) * k)
        want = f(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = compiled(x)
        for a, b in zip(got, want, strict=True):
            same(a, b)
            np.testing.assert_array_equal(np.signbit(host(a)), np.signbit(host(b)))
        same(got[2].grad, want[2].grad)
        np.testing.assert_array_equal(np.signbit(host(got[2].grad)), np.signbit(host(want[2].grad)))
    assert compiled.calls == {"traced": 1, "replayed": 3, "eager": 0}


def test_a_retained_gradient_of_a_value_no_pass_reaches_reads_as_zeros():
    """``h`` retains its gradient but the pass starts elsewhere: its ``.grad`` reads as
    zeros at each replay, as eagerly; and a leaf made in the call comes back from the
    call with its gradient."""
    w = Tensor(np.array([1.0, 2.0]), requires_grad=True)

    def f(x):
        xa = x.detach().requires_grad_()
        h = xa * 3.0
        h.retain_grad()
        (xa * w).sum().backward()
        return lp.as_tensor(h.grad) + 1.0, xa

    compiled = lp.compile(f)
    for k in range(3):
        x = Tensor(np.array([1.0, -1.0]) * k)
        want, got = f(x), compiled(x)
        same(got[0], want[0])
        same(got[1], want[1])
        same(got[1].grad, want[1].grad)
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}
