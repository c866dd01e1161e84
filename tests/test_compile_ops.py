"""``lp.compile`` over every row of tests/op_db.py: each op, on each of its samples,
applied in a function that also takes a loss of its outputs, runs ``backward`` and
returns the outputs and the inputs' gradients. Compiled and eager, over several calls
with new values of the same shapes: bit for bit with ``fuse=False`` (with gradients,
and under ``no_grad``), to a few ulp with ``fuse=True`` (Numba's loops on ``cpu`` from
the third call; docs/compile.md), in float64 and float32; and again with the op's
tensors held by the function (state, changed in place between calls) instead of
passed. A compiled call that runs eagerly does so only where LeanPass says it must (a
shape or an index computed from values: FALLS_BACK), with its warning, and gives
eager's results."""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from helpers import host
from op_db import OP_DB, Const, Known

import leanpass as lp
from leanpass import Tensor

# Rows whose function stores its tensors in a layer's attributes (``layer.weight = w``,
# op_db's _mlp and _recurrent): passed as arguments, a replay could not make that change
# (the call runs eagerly, as docs/compile.md says). Their tensors are held by the
# function instead, the same Tensors at each call, given new values in place between calls.
HELD = {"nn.linear_relu", "nn.mlp(2)", "rnn.elman", "rnn.lstm", "rnn.gru"}

# Samples ("row[i]", or "row" for all of them) whose compiled calls run eagerly, and a
# piece of the warning that names why; "grad:" for the calls with a backward pass only.
FALLS_BACK = {
    "conversion.to": "Tensor.to('{other}') (a move between devices)",
    "indexing.index_mask": "(an index computed from values)",  # a boolean mask
    "manipulation.repeat[1]": "repeat with a tensor of counts (a shape read from values)",
    "sets.gather_first": "unique: a value computed outside the recorded operations",  # a shape from values
    # an in-place change recorded in the graph, with a mask or an index array
    "grad:indexing.setitem[2]": "an in-place change recorded in the graph, with an array among its operands",
    "grad:indexing.setitem[3]": "an in-place change recorded in the graph, with an array among its operands",
    # under no_grad, an index array among the operands of the change
    "indexing.setitem[2]": "setitem: an array among its operands (an index), which a replay would not follow",
    "indexing.setitem[3]": "setitem: an array among its operands (an index), which a replay would not follow",
}


CASES = [pytest.param(row, i, id=f"{row.key}[{i}]") for row in OP_DB for i, _ in enumerate(row.make_samples())]


def _sample(sample):
    return sample.sample if isinstance(sample, Known) else sample


def _values(row, i, call, dtype, first=None):
    """Sample ``i`` of ``row`` drawn anew for call ``call``: the same shapes and dtypes
    at each call, other values where the row draws them; after call 0 (``first``), its
    integer and bool arrays (indices, targets, masks) permuted (the same values in
    other places: in range, as many negative ones), its other items the same Python
    objects as ``first``'s (a slice is keyed by identity: docs/compile.md)."""
    seed = zlib.crc32(row.key.encode()) + 7919 * call
    sample = _cast(_sample(row.samples(np.random.default_rng(seed))[i]), dtype)
    if first is None:
        return sample
    rng = np.random.default_rng(seed)
    out = []
    for new, old in zip(sample, first, strict=True):
        array, before = (x.array if isinstance(x, Const) else x for x in (new, old))
        if isinstance(array, np.ndarray):
            assert (array.shape, array.dtype) == (before.shape, before.dtype), row.key
            if array.dtype.kind not in "fc":
                new = rng.permutation(array.ravel()).reshape(array.shape)
            out.append(new)
        else:
            out.append(old)
    return tuple(out)


def _cast(sample, dtype):
    """The float arrays of ``sample`` (Const or not) in ``dtype``, its complex arrays in
    the complex dtype of that precision."""
    if dtype == "float64":
        return sample
    kinds = {"f": dtype, "c": {"float32": "complex64"}[dtype]}

    def cast(x):
        if isinstance(x, Const):
            return Const(cast(x.array))
        return x.astype(kinds[x.dtype.kind]) if isinstance(x, np.ndarray) and x.dtype.kind in kinds else x

    return tuple(cast(x) for x in sample)


def _refresh(held, sample):
    """The held Tensors given the values of ``sample`` in place, their gradients None."""
    with lp.no_grad():
        for t, x in zip(held, sample, strict=True):
            if isinstance(t, Tensor):
                t.grad = None
                t[...] = x.array if isinstance(x, Const) else x


def _flat(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _floating(outs):
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind in "fc" and o.requires_grad]


def _outputs(row, inputs):
    """The shape, real dtype and device of each floating output that requires grad (of
    an eager call on ``inputs``)."""
    real = {"complex64": "float32", "complex128": "float64"}
    return [(o.shape, real.get(str(o.dtype), str(o.dtype)), o.device) for o in _floating(_flat(row.fn(*inputs)))]


def _weights(outputs, rng):
    """Random weights for the loss: a Tensor for each of ``outputs`` (see _outputs)."""
    return tuple(Tensor(rng.uniform(0.5, 1.5, size=shape), dtype=dtype, device=device)
                 for shape, dtype, device in outputs)


def _step(row):
    """The function compiled: the op, a weighted sum of its floating outputs (a complex
    one's two parts), its backward pass; it returns the outputs and the gradients of
    the inputs."""

    def step(weights, *inputs):
        outs = _flat(row.fn(*inputs))
        loss = None
        for o, w in zip(_floating(outs), weights, strict=True):
            if o.dtype.kind == "c":
                o = lp.real(o) + lp.imag(o) * 0.75
            term = (o * w).sum()
            loss = term if loss is None else loss + term
        if loss is not None:
            loss.backward()
        grads = tuple(None if x.grad is None else lp.as_tensor(x.grad)
                      for x in inputs if isinstance(x, Tensor) and x.requires_grad)
        return outs, grads

    return step


def _forward(row):
    def forward(weights, *inputs):
        with lp.no_grad():
            return _flat(row.fn(*inputs))

    return forward


def _arrays(result):
    """The Tensors of a result (nested tuples) as host arrays (copies), other items as they are."""
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in _arrays(r)]
    if isinstance(result, Tensor):
        return [np.array(host(result), copy=True)]
    return [result]


def _compare(got, want, what, exact):
    """Bit for bit (``exact``: the values and their bytes, the sign of a zero too), or
    within a few ulp: rtol 1e-12 in float64 (1e-5 in float32), and an atol scaled to
    the largest value (a sum of terms that cancel keeps their rounding)."""
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want)):
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            assert a is None and b is None or a == b, f"{what}: item {k}: {a!r} != {b!r}"
            continue
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{what}: item {k}"
        if exact or a.dtype.kind not in "fc":
            np.testing.assert_array_equal(a, b, err_msg=f"{what}: item {k}")
            assert not exact or np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), (
                f"{what}: item {k}: the same values, other bits (the sign of a zero)")
            continue
        single = a.dtype in (np.float32, np.complex64)
        scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
        rtol, atol = (1e-5, 1e-6 * scale) if single else (1e-12, 1e-13 * scale)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{what}: item {k}")


def _fallback(row, i, device, backward):
    for key in (f"{row.key}[{i}]", row.key):
        for name in ((f"grad:{key}", key) if backward else (key,)):
            if name in FALLS_BACK:
                return FALLS_BACK[name].format(other="strict" if device == "cpu" else "cpu")
    return None


def _sweep(row, i, device, dtype, *, backward, fuse, calls, hold=False):
    """``calls`` calls of the function (``_step`` or ``_forward``), eagerly and compiled,
    on twin arguments with new values at each call (the same for both). Bit for bit
    unfused, and fused where the programs run as flat NumPy calls (``strict``, and the
    first replay on ``cpu``: Numba compiles at the second); to a few ulp otherwise.
    Without a fallback, the compiled function warns nothing and replays every call
    after the first. With ``hold`` (and for the rows of ``HELD``), the function holds
    the op's tensors (state, not arguments: the same Tensors at each call, given new
    values in place and their gradients set to None before each call)."""
    hold = hold or row.key in HELD
    reason = row.not_on.get(device.partition(":")[0])
    if reason:
        pytest.skip(f"{row.key} on {device}: {reason}")
    first = _values(row, i, 0, dtype)
    fn = (_step if backward else _forward)(row)
    if hold:
        held = row.inputs(device, first)
        outputs = _outputs(row, held)  # (a layer takes the held tensors now: the calls change no attribute)
        function = lambda weights: fn(weights, *held)  # noqa: E731
    else:
        outputs = _outputs(row, row.inputs(device, first))
        function = fn
    expected = _fallback(row, i, device, backward)
    compiled = lp.compile(function, fuse=fuse)
    caught = []
    for call in range(calls):
        sample = _values(row, i, call, dtype, first)
        weights = _weights(outputs, np.random.default_rng(call))
        results = []
        for f in (function, compiled):
            if hold:
                _refresh(held, sample)
                args = (weights,)
            else:
                args = (weights, *row.inputs(device, sample))
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                results.append(_arrays(f(*args)))
            if f is compiled:
                caught += [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
        exact = not fuse or device == "strict" or call < 2 or expected is not None
        _compare(results[1], results[0], f"{row.key}[{i}] {dtype}, call {call}", exact)
    if expected is None:
        assert not caught, caught
        assert compiled.calls == {"traced": 1, "replayed": calls - 1, "eager": 0}
    else:
        assert any(expected in m for m in caught), (expected, caught)
        assert compiled.calls == {"traced": 1, "replayed": 0, "eager": calls - 1}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(("backward", "fuse"), [(True, False), (False, False), (True, True), (False, True)],
                         ids=["backward", "no_grad", "backward-fused", "no_grad-fused"])
@pytest.mark.parametrize(("row", "i"), CASES)
def test_compiled_op_is_eager(row, i, device, dtype, backward, fuse):
    """Bit for bit with ``fuse=False`` over 3 calls; to a few ulp with ``fuse=True`` over
    5 (Numba's loops from the third)."""
    _sweep(row, i, device, dtype, backward=backward, fuse=fuse, calls=5 if fuse else 3)


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize(("row", "i"), CASES)
def test_compiled_op_of_tensors_the_function_holds_is_eager(row, i, device, fuse):
    _sweep(row, i, device, "float64", backward=True, fuse=fuse, calls=5 if fuse else 3, hold=True)
