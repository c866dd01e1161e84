"""Fuzzing the public entry points with bad values (SPEC "Bad input").

Each example calls one entry point -- ``Tensor()``, ``asarray``, reductions along
axes, ``reshape``, ``concat``, ``matmul``, indexing, ``clip``, ``nn.Linear``, the
losses, ``optim.SGD``/``Adam`` -- with values drawn from a pool of bad ones: NaN
and infinite numbers and hyper-parameters, wrong dtypes, empty and 0-d arrays,
wrong Python types, out-of-range axes, tensors on another device. The call must
either succeed or raise one of the standard exceptions below with a message; and
whatever existed before -- tensors, gradients, parameters, optimizer state, the
call's own arguments -- must be exactly as it was.

NumPy's floating-point warnings ("overflow encountered in multiply" for inf * 0 and
the like) are what LeanPass gives for arithmetic on NaN and inf, as NumPy does: they
are let through. Any other warning (a ComplexWarning, a DeprecationWarning) fails.

``LEANPASS_FUZZ_EXAMPLES`` multiplies the number of examples (default 1).
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings

import numpy as np
import pytest
from helpers import host, other_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor, nn, optim
from leanpass.backends import get_backend

ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, OverflowError)
SCALE = int(os.environ.get("LEANPASS_FUZZ_EXAMPLES", "1"))


def fuzz(examples):
    return settings(max_examples=examples * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ---- snapshots -------------------------------------------------------------------------------------


def _host(backend, array):
    return np.array(backend.to_host(array), copy=True)


def _tensor_state(t: Tensor):
    backend = get_backend(t.device)
    grad = None if t._grad is None else _host(backend, t._grad)
    return (t.shape, str(t.dtype), t.device, t.requires_grad, t._op, t._version, _host(backend, t.data), grad)


def _same(before, after, label):
    if isinstance(before, np.ndarray):
        assert isinstance(after, np.ndarray), f"{label}: an array became {after!r}"
        assert before.dtype == after.dtype and before.shape == after.shape, f"{label}: array changed"
        np.testing.assert_array_equal(after, before, err_msg=label)
    elif isinstance(before, (tuple, list)):
        assert type(before) is type(after) and len(before) == len(after), f"{label}: {before!r} -> {after!r}"
        for i, (b, a) in enumerate(zip(before, after)):
            _same(b, a, f"{label}[{i}]")
    elif isinstance(before, dict):
        assert before.keys() == after.keys(), f"{label}: keys {list(before)} -> {list(after)}"
        for k in before:
            _same(before[k], after[k], f"{label}[{k!r}]")
    elif isinstance(before, float) and math.isnan(before):
        assert isinstance(after, float) and math.isnan(after), f"{label}: nan -> {after!r}"
    else:
        assert before == after, f"{label}: {before!r} -> {after!r}"


def _optimizer_state(opt):
    state = opt.state_dict()
    plain = {}
    for i, fields in state["state"].items():
        plain[i] = {k: (_host(get_backend(v.device), v.data) if isinstance(v, Tensor) else
                        np.array(host(v), copy=True) if hasattr(v, "shape") else v) for k, v in fields.items()}
    return plain, state["param_groups"]


class Snapshot:
    """Everything in ``tensors`` and ``optimizers`` now; :meth:`check` asserts it is unchanged."""

    def __init__(self, tensors=(), optimizers=()):
        self.tensors = [t for t in tensors if isinstance(t, Tensor)]
        self.optimizers = list(optimizers)
        self.before = self._take()

    def _take(self):
        return [_tensor_state(t) for t in self.tensors], [_optimizer_state(o) for o in self.optimizers]

    def check(self, label):
        _same(self.before, self._take(), label)


class World:
    """Tensors in every state a call could disturb, a model and an optimizer with state."""

    def __init__(self, device):
        a = Tensor(np.arange(6.0).reshape(2, 3) - 2.5, requires_grad=True, device=device, name="a")
        (a * a).sum().backward()
        b = Tensor([1.0, -2.0], device=device, name="b")
        c = Tensor(np.ones(3, np.float32), requires_grad=True, device=device, name="c")  # no gradient array
        h = a * 2.0  # a non-leaf
        model = nn.Linear(3, 2, device=device)
        opt = optim.Adam(model.parameters(), lr=0.01)
        for _ in range(2):
            nn.mse_loss(model(a), Tensor(np.zeros((2, 2)), device=device)).backward()
            opt.step()
        self.tensors = [a, b, c, h, *model.parameters()]
        self.snapshot = Snapshot(self.tensors, [opt])


@contextlib.contextmanager
def numeric_warnings_pass():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".* encountered in ", category=RuntimeWarning)
        yield


def run_call(call, label, args=()):
    """``call()`` succeeds or raises an allowed exception with a message; the Tensors
    in ``args`` are unchanged afterwards either way (none of the calls writes into
    its arguments). Returns the result, or None after an error."""
    snapshot = Snapshot(args)
    try:
        with numeric_warnings_pass():
            result = call()
    except ALLOWED as exc:
        assert str(exc).strip(), f"{label}: {type(exc).__name__} without a message"
        result = None
    snapshot.check(f"{label}: an argument")
    return result


# ---- strategies ------------------------------------------------------------------------------------

NASTY_SCALARS = [math.nan, math.inf, -math.inf, 0, -1, 1, 0.0, -0.5, 1e308, -1e-320, 2**70, -(2**64), True, False,
                 None, "x", "float32", b"1", [], [[]], [[1.0], [1.0, 2.0]], {}, {"a": 1}, (), (1, 2), slice(1),
                 Ellipsis, object(), 1 + 2j, np.float32(np.nan), np.int64(-3), np.bool_(True)]
DTYPES = [np.float64, np.float32, np.int64, np.int8, np.uint8, np.bool_, np.complex128]


def arrays(max_dims=3):
    return hnp.arrays(dtype=st.sampled_from(DTYPES),
                      shape=hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=3))


def float_arrays(max_dims=3):
    return hnp.arrays(
        dtype=st.sampled_from([np.float64, np.float32]),
        shape=hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=3),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    )


def tensors(device, max_dims=3):
    """Tensors on ``device`` (rarely on another), of any dtype, 0-d and empty included."""
    def make(array, requires_grad, elsewhere):
        floating = array.dtype.kind == "f"
        return Tensor(array, requires_grad=requires_grad and floating,
                      device=other_device(device) if elsewhere else device)
    return st.builds(make, st.one_of(float_arrays(max_dims), arrays(max_dims)), st.booleans(),
                     st.sampled_from([False] * 9 + [True]))


def bad_values(device):
    return st.one_of(
        st.sampled_from(NASTY_SCALARS),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-10, 10),
        arrays(),
        float_arrays(),
        st.sampled_from([np.array(["a", "b"]), np.array([object()], dtype=object), np.ma.array([1.0, 2.0]),
                         np.zeros((0, 3)), np.float64(np.inf)]),
        st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
        tensors(device),
    )


def axes():
    return st.one_of(
        st.none(), st.integers(-5, 5), st.booleans(), st.floats(-2, 2), st.sampled_from(["0", [0, 1], (0, 0), ()]),
        st.tuples(st.integers(-4, 4)), st.tuples(st.integers(-4, 4), st.integers(-4, 4)),
    )


def devices(device):
    return st.sampled_from([None, device, device, other_device(device), "tpu", "cpu:x", "strict:9", 3, ""])


def dtypes():
    return st.sampled_from([None, None, "float32", "float64", "int64", "bool", "complex64", "float16", "nope",
                            np.float32, np.int32, float, int, 3, np.ones(2), lp.float32, lp.int8])


def draw_args(data, strategy, n):
    return [data.draw(strategy, label=f"arg{i}") for i in range(n)]


# ---- the tests -----------------------------------------------------------------------------------


@pytest.fixture
def world(device):
    w = World(device)
    yield w
    w.snapshot.check("the world")


def test_fuzz_construction(device, world):
    """``Tensor()``, ``as_tensor`` and ``asarray`` of anything."""
    @fuzz(100)
    @given(data=st.data())
    def run(data):
        value = data.draw(bad_values(device), label="value")
        kind = data.draw(st.sampled_from(["Tensor", "as_tensor", "asarray"]), label="entry")
        dtype, dev = data.draw(dtypes(), label="dtype"), data.draw(devices(device), label="device")
        requires_grad = data.draw(st.sampled_from([False, True, 1, "yes", None]), label="requires_grad")
        copy = data.draw(st.sampled_from([None, True, False, "no"]), label="copy")
        calls = {
            "Tensor": lambda: Tensor(value, requires_grad=requires_grad, dtype=dtype, device=dev),
            "as_tensor": lambda: lp.as_tensor(value, dtype=dtype, device=dev),
            "asarray": lambda: lp.asarray(value, dtype=dtype, device=dev, copy=copy),
        }
        out = run_call(calls[kind], kind, [value])
        if out is not None:
            assert isinstance(out, Tensor)
            assert out.numpy().shape == out.shape
        world.snapshot.check(f"{kind}: the world")

    run()


REDUCTIONS = {"sum": lp.sum, "mean": lp.mean, "max": lp.max, "min": lp.min, "prod": lp.prod, "std": lp.std,
              "argmax": lp.argmax}


def test_fuzz_reductions(device, world):
    """``sum``/``mean``/``max``... along any axis, and backward through them."""
    @fuzz(100)
    @given(data=st.data())
    def run(data):
        x = data.draw(st.one_of(tensors(device), bad_values(device)), label="x")
        name = data.draw(st.sampled_from(list(REDUCTIONS)), label="reduction")
        axis = data.draw(axes(), label="axis")
        keepdims = data.draw(st.sampled_from([False, True, 0, "yes", None]), label="keepdims")
        kwargs = {"axis": axis} if name == "argmax" and keepdims is None else {"axis": axis, "keepdims": keepdims}
        out = run_call(lambda: REDUCTIONS[name](x, **kwargs), name, [x])
        if isinstance(out, Tensor) and out.requires_grad:
            run_call(lambda: out.sum().backward(), f"{name}.backward")
        world.snapshot.check(f"{name}: the world")

    run()


def test_fuzz_shapes_and_indexing(device, world):
    """``reshape``, ``concat``, ``matmul``, ``t[index]`` and ``clip``."""
    indices = st.one_of(
        st.integers(-5, 5), st.none(), st.just(Ellipsis), st.booleans(), st.floats(-3, 3),
        st.slices(4), st.lists(st.integers(-5, 5), max_size=3), st.sampled_from(["a", (0, "a"), {0: 1}, (..., ...)]),
        st.tuples(st.integers(-4, 4), st.slices(3)), arrays(max_dims=2), tensors(device, max_dims=2),
    )
    shapes = st.one_of(
        st.tuples(), st.lists(st.integers(-2, 7), max_size=4).map(tuple), st.integers(-2, 7),
        st.sampled_from([None, "3", (2.0, 3), [2, 3], (True, 6), (np.int64(6),), (-1, -1)]),
    )

    @fuzz(150)
    @given(data=st.data())
    def run(data):
        x = data.draw(tensors(device), label="x")
        kind = data.draw(st.sampled_from(["reshape", "concat", "matmul", "matmul_op", "getitem", "clip"]),
                         label="entry")
        other, third = draw_args(data, st.one_of(tensors(device), bad_values(device)), 2)
        if kind == "reshape":
            shape = data.draw(shapes, label="shape")
            call = lambda: lp.reshape(x, shape)  # noqa: E731
        elif kind == "concat":
            axis = data.draw(axes(), label="axis")
            seq = data.draw(st.sampled_from(["list", "tuple", "bare", "empty"]), label="seq")
            arg = {"list": [x, other], "tuple": (x, other, third), "bare": x, "empty": []}[seq]
            call = lambda: lp.concat(arg, axis=axis)  # noqa: E731
        elif kind == "matmul":
            call = lambda: lp.matmul(x, other)  # noqa: E731
        elif kind == "matmul_op":
            call = lambda: other @ x  # noqa: E731
        elif kind == "getitem":
            index = data.draw(indices, label="index")
            call = lambda: x[index]  # noqa: E731
        else:
            call = lambda: lp.clip(x, min=other, max=third)  # noqa: E731
        out = run_call(call, kind, [x, other, third])
        if isinstance(out, Tensor) and out.requires_grad:
            run_call(lambda: out.sum().backward(), f"{kind}.backward")
        world.snapshot.check(f"{kind}: the world")

    run()


def test_fuzz_nn(device, world):
    """``nn.Linear`` made with bad sizes and options, its forward on bad inputs, and the losses."""
    sizes = st.one_of(st.integers(-2, 4), st.sampled_from([0, 2.0, 2.5, "2", None, True, np.int64(3), math.inf]))
    losses = {"mse": nn.mse_loss, "cross_entropy": nn.cross_entropy_loss, "bce": nn.binary_cross_entropy_loss}

    @fuzz(100)
    @given(data=st.data())
    def run(data):
        kind = data.draw(st.sampled_from(["Linear", "forward", *losses]), label="entry")
        if kind == "Linear":
            n_in, n_out = draw_args(data, sizes, 2)
            bias = data.draw(st.sampled_from([True, False, 0, "no", None]), label="bias")
            dtype, dev = data.draw(dtypes(), label="dtype"), data.draw(devices(device), label="device")
            layer = run_call(lambda: nn.Linear(n_in, n_out, bias, dtype=dtype, device=dev), kind)
            if layer is not None:
                assert all(p.requires_grad for p in layer.parameters())
        elif kind == "forward":
            layer = nn.Linear(3, 2, device=device)
            x = data.draw(st.one_of(tensors(device), bad_values(device)), label="x")
            snapshot = Snapshot(layer.parameters())
            out = run_call(lambda: layer(x), kind, [x])
            snapshot.check("forward: a parameter")
            if isinstance(out, Tensor) and out.requires_grad:
                run_call(lambda: out.sum().backward(), "forward.backward")
        else:
            prediction = data.draw(st.one_of(tensors(device), bad_values(device)), label="prediction")
            target = data.draw(st.one_of(tensors(device), bad_values(device)), label="target")
            out = run_call(lambda: losses[kind](prediction, target), kind, [prediction, target])
            if out is not None:
                assert isinstance(out, Tensor) and out.shape == ()
                if out.requires_grad:
                    run_call(out.backward, f"{kind}.backward")
        world.snapshot.check(f"{kind}: the world")

    run()


def test_fuzz_optimizers(device, world):
    """``SGD``/``Adam``/``AdamW`` made with bad hyper-parameters and parameters, then a step.
    A step that fails leaves parameters, gradients and state as they were."""
    numbers = st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1.0, 2.0, True, None, "0.1", [0.1],
                         np.float32(0.5), np.nan]),
        st.floats(-2, 2),
    )
    betas = st.one_of(st.tuples(numbers, numbers), numbers, st.sampled_from([(0.9,), (0.9, 0.99, 0.1), "ab"]))

    @fuzz(100)
    @given(data=st.data())
    def run(data):
        model = nn.Linear(3, 2, device=device)
        x = Tensor(np.ones((4, 3)), device=device)
        model(x).sum().backward()
        kind = data.draw(st.sampled_from(["SGD", "Adam", "AdamW"]), label="optimizer")
        params = data.draw(st.sampled_from(["list", "generator", "groups", "tensor", "empty", "floats",
                                            "non_leaf", "repeated"]), label="params")
        p = list(model.parameters())
        given_params = {
            "list": lambda: p, "generator": model.parameters, "tensor": lambda: p[0], "empty": lambda: [],
            "groups": lambda: [{"params": p[:1], "lr": data.draw(numbers, label="group lr")}, {"params": p[1:]}],
            "floats": lambda: [1.0, 2.0], "non_leaf": lambda: [p[0] * 2.0], "repeated": lambda: [p[0], p[0]],
        }[params]()
        if kind == "SGD":
            options = {"lr": numbers, "momentum": numbers, "weight_decay": numbers,
                       "nesterov": st.sampled_from([False, True, 1, "yes", None])}
        else:
            options = {"lr": numbers, "betas": betas, "eps": numbers, "weight_decay": numbers}
        kwargs = {k: data.draw(v, label=k) for k, v in options.items() if data.draw(st.booleans(), label=f"set {k}")}
        opt = run_call(lambda: getattr(optim, kind)(given_params, **kwargs), kind, p)
        if opt is not None:
            snapshot = Snapshot(p, [opt])
            try:
                with numeric_warnings_pass():
                    opt.step()
            except ALLOWED as exc:
                assert str(exc).strip(), f"{kind}.step: {type(exc).__name__} without a message"
                snapshot.check(f"{kind}.step failed, but changed")
        world.snapshot.check(f"{kind}: the world")

    run()
