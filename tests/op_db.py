"""OP_DB: one row per differentiable operation of :mod:`leanpass.ops`, in the manner
of PyTorch's ``op_db: list[OpInfo]`` (tests/test_op_db.py reads it).

A row names its :class:`~leanpass.ops.Op` by where it lives (``"linalg.solve"``: the
attribute ``solve`` of ``leanpass.ops.linalg``; ``"nn.mlp(2)"``: the op the factory
``leanpass.ops.nn.mlp`` makes for 2) and gives

- ``fn``: the public function that applies the op (``lp.exp``, ``lp.linalg.solve``,
  ``F.conv2d``, ``t + 2.5``), called on the Tensors of a sample;
- ``samples(rng)``: a few inputs, each a tuple of float64 NumPy arrays (Tensors that
  require grad), integer or bool arrays and :class:`Const` arrays (Tensors that do
  not), and anything else (Python numbers), passed on as it is. Shapes broadcast
  where the op broadcasts, and values keep away from kinks, ties, poles and
  ill-conditioned matrices, where finite differences mean nothing;
- ``doc``: its public name, as the docs write it;
- ``gradgrad`` (default True): whether ``leanpass.gradgradcheck`` passes, and where
  it does not, ``reason``: why;
- ``tol``: gradcheck's ``eps``/``atol``/``rtol`` where the defaults do not fit;
- ``not_on``: the device types the op does not run on, and why.

A sample wrapped in :class:`Known` shows a known library bug: the check it names must
fail there (and the test fails once the bug is fixed, until the wrapper goes).

Every ``Op`` whose ``differentiable`` is False is listed in :data:`NOT_DIFFERENTIABLE`
instead: it needs no row.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass

import numpy as np

import leanpass as lp
import leanpass.nn.functional as F
import leanpass.special as special
from leanpass import Tensor, ops
from leanpass.ops import Op

# ---- discovery ------------------------------------------------------------------------------


def _ops_in(value, where, note, depth=0):
    """Note every Op in ``value`` (an Op, or a dict, list, tuple or dataclass holding
    Ops, as ``elementwise.UNARY`` holds ``Entry`` records) under the name ``where``."""
    if isinstance(value, Op):
        note(value, where)
    elif depth > 2:
        return
    elif isinstance(value, dict):
        for key, item in value.items():
            _ops_in(item, f"{where}[{key}]", note, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _ops_in(item, f"{where}[{i}]", note, depth + 1)
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            _ops_in(getattr(value, f.name), f"{where}.{f.name}", note, depth + 1)


def _makes_ops(value, module) -> bool:
    """Whether ``value`` is a public function of ``module`` annotated to return an Op
    (a factory, as ``nn.mlp(depth) -> Op``)."""
    if not inspect.isfunction(value) or value.__module__ != module.__name__:
        return False
    returns = value.__annotations__.get("return")
    return returns is Op or (isinstance(returns, str) and returns.split("[")[0].split(".")[-1] == "Op")


def discover():
    """``(found, factories)``: ``found`` maps the id of every Op of the modules of
    :mod:`leanpass.ops` to ``(op, names)`` (each place it is reachable at: module
    attributes, the tables' entries, dicts such as ``fft.TRANSFORMS``), ``factories`` is
    the set of ``"module.function"`` of the functions that make Ops on demand.
    Private names (``_MLP_OPS``, a cache of a factory's products) are not walked."""
    found, factories = {}, set()

    def note(operation, where):
        found.setdefault(id(operation), (operation, []))[1].append(where)

    for info in sorted(pkgutil.walk_packages(ops.__path__, f"{ops.__name__}."), key=lambda m: m.name):
        name = info.name.removeprefix(f"{ops.__name__}.")  # "linalg", or "sub.module" in a subpackage
        if any(part.startswith("_") for part in name.split(".")):
            continue
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            _ops_in(value, f"{name}.{attr}", note)
            if _makes_ops(value, module):
                factories.add(f"{name}.{attr}")
    return found, factories


# ---- the rows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    """A float array that enters as a Tensor that does not require grad."""

    array: np.ndarray


@dataclass(frozen=True)
class Known:
    """A sample where a check fails because of a library bug: ``bugs`` maps
    ``"gradcheck"``/``"gradgradcheck"`` to the bug."""

    sample: tuple
    bugs: dict


@dataclass(frozen=True)
class OpInfo:
    key: str  # where the Op lives in leanpass.ops: "module.attribute", or "module.factory(args)"
    fn: Callable  # the public function that applies it, on a sample's tensors
    samples: Callable  # samples(rng) -> list of input tuples
    doc: str  # the public name, as the docs write it
    gradgrad: bool = True  # whether second derivatives are checked
    reason: str = ""  # why gradgrad is False
    tol: dict = field(default_factory=dict)  # gradcheck's eps / atol / rtol, where the defaults do not fit
    not_on: dict = field(default_factory=dict)  # device type -> why the op does not run there

    def inputs(self, device, sample):
        """A sample's arrays as Tensors on ``device`` (see the module's docstring)."""
        out = []
        for x in sample.sample if isinstance(sample, Known) else sample:
            if isinstance(x, Const):
                out.append(Tensor(x.array, device=device))
            elif isinstance(x, np.ndarray) and x.dtype.kind in "fc":
                out.append(Tensor(x, requires_grad=True, device=device))
            elif isinstance(x, np.ndarray):
                out.append(lp.asarray(x, device=device))
            else:
                out.append(x)
        return tuple(out)

    def make_samples(self):
        """The row's samples, from a generator seeded by its key (the same on every run)."""
        return self.samples(np.random.default_rng(zlib.crc32(self.key.encode())))


# The functions lp.special takes from SciPy (cupyx.scipy.special on cuda): array_api_strict has none.
NO_SPECIAL = {"strict": "array_api_strict has no special functions (NotImplementedError, as documented)"}


# ---- known library bugs (see Known) ---------------------------------------------------------------

NEXTAFTER = ("nextafter's gradient is zero ('step-like': ops/elementwise.py, docs/array-api.md), but nextafter(a, b) "
             "is a to within one ulp: its derivative in a is 1 (PyTorch: not implemented)")
POW_AT_0 = ("pow(a, b)'s mixed second derivative d2/da db at b == 0 is 0, not 1/a: the rule for a, where(b == 0, 0, "
            "g b a**(b-1)), is constant in b when differentiated again (PyTorch's too)")


# ---- sample values ---------------------------------------------------------------------------


def uniform(rng, *shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, size=shape)


def complex_uniform(rng, *shape, low=-2.0, high=2.0):
    """A complex sample (a tensor of it requires grad: PyTorch's convention, see
    tests/test_complex_autodiff.py)."""
    return rng.uniform(low, high, size=shape) + 1j * rng.uniform(low, high, size=shape)


def positive(rng, *shape, low=0.5, high=2.0):
    return rng.uniform(low, high, size=shape)


def away(rng, *shape, low=0.5, high=2.0):
    """Values in ±[low, high]: away from a kink or a pole at 0."""
    return np.asarray(rng.uniform(low, high, size=shape) * rng.choice([-1.0, 1.0], size=shape))


def distinct(rng, *shapes, low=-2.0, high=2.0):
    """Arrays of ``shapes`` whose values all differ by at least ``(high - low) / (2 n)``
    (``n`` values in all): no ties between them, for max, sort and their kin."""
    sizes = [math.prod(s) for s in shapes]
    n = sum(sizes)
    values = np.linspace(low, high, 2 * n)[::2] + rng.uniform(0.0, (high - low) / (4 * n), size=n)
    values = rng.permutation(values)
    out, start = [], 0
    for shape, size in zip(shapes, sizes):
        out.append(values[start:start + size].reshape(shape))
        start += size
    return out


def off_grid(rng, *shape):
    """Values at least 0.15 from every integer and half-integer: step functions
    (floor, round...) are flat there."""
    whole = rng.integers(-3, 3, size=shape)
    return np.asarray(whole + rng.choice([0.15, 0.35, 0.65, 0.85], size=shape) + rng.uniform(-0.05, 0.05, size=shape))


def _off(rng, kinks, *shape):
    """Values in [-2, 2] at least 0.2 from each of ``kinks`` (hardtanh's bounds)."""
    x = uniform(rng, *shape)
    for kink in kinks:
        near = np.abs(x - kink) < 0.2
        x = np.where(near, kink + np.where(x < kink, -0.3, 0.3), x)
    return x


def well_conditioned(rng, *shape):
    """Square matrices ``(..., n, n)`` near ``2 I``: invertible and well conditioned."""
    n = shape[-1]
    return rng.uniform(-0.5, 0.5, size=shape) + 2.0 * np.eye(n)


def symmetric(x):
    """A symmetric matrix from any square ``x`` (the input of eigh, cholesky...: a
    perturbation of one element then stays symmetric, as the rules assume)."""
    return x + x.mT


def spd(x):
    """A symmetric positive-definite matrix from any square ``x``."""
    return x @ x.mT + lp.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _other_device(x):
    return "strict" if x.device == "cpu" else "cpu"


def _mlp(depth, bias_last=True):
    """A function of ``(x, w0, ..., b0, ...)`` through an ``nn.MLP`` of ``depth`` layers
    (2 inputs, 2 hidden, 2 outputs) holding those tensors as its weights and biases,
    and its samples: stock layers with biases make one ``mlp`` node; without the last
    bias, the hidden layers are ``linear_relu`` nodes."""
    model = lp.nn.MLP([2] * (depth + 1))

    def fn(x, *params):
        weights, biases = params[:depth], params[depth:]
        for i, layer in enumerate(model.layers):
            layer.weight = weights[i]
            layer.bias = biases[i] if i < len(biases) else None
        return model(x)

    def samples(rng):
        weights = [uniform(rng, 2, 2) for _ in range(depth)]
        biases = [uniform(rng, 2) + 0.5 for _ in range(depth if bias_last else depth - 1)]
        return [(uniform(rng, 3, 2), *weights, *biases)]

    return fn, samples


def _recurrent(cls, **options):
    """A function of ``(x, h0, [c0,] weight_ih, weight_hh, bias_ih, bias_hh)`` through
    ``cls(2, 2, **options)`` (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``: one graph node per
    direction) holding those tensors as its parameters, and its samples: a sequence of
    3 steps, a batch of 1. It returns the output and the last cell state (LSTM)."""
    model = cls(2, 2, **options)
    lstm = cls is lp.nn.LSTM
    directions = 2 if options.get("bidirectional") else 1

    names = [p.name for layer in model.all_weights for p in layer]  # weight_ih_l0, ..., bias_hh_l0_reverse

    def fn(x, *tensors):
        states = tensors[:2] if lstm else tensors[:1]
        for name, value in zip(names, tensors[len(states):]):
            setattr(model, name, value)
        out, state = model(x, tuple(states) if lstm else states[0])
        return lp.concat([lp.reshape(out, (-1,)), lp.reshape(state[1], (-1,))]) if lstm else out

    def samples(rng):
        gates = {lp.nn.RNN: 1, lp.nn.LSTM: 4, lp.nn.GRU: 3}[cls]
        states = [uniform(rng, directions, 1, 2, low=-1.0, high=1.0) for _ in range(2 if lstm else 1)]
        params = [uniform(rng, *shape, low=-1.0, high=1.0) for _ in range(directions)
                  for shape in ((2 * gates, 2), (2 * gates, 2), (2 * gates,), (2 * gates,))]
        return [(uniform(rng, 3, 1, 2), *states, *params)]

    return fn, samples


def _unary(key, fn, values, doc=None, **kw):
    """A row for a function of one tensor, on a ``(2, 3)`` and a 0-d sample of
    ``values(rng, *shape)``."""
    return OpInfo(key, fn, lambda rng: [(values(rng, 2, 3),), (values(rng),)], doc or fn.__name__, **kw)


def _binary(key, fn, a=uniform, b=uniform, doc=None, **kw):
    """A row for a function of two tensors, on broadcast shapes, and with the first
    one constant (the op's ``needs`` then skip its gradient)."""
    return OpInfo(key, fn, lambda rng: [(a(rng, 3, 1), b(rng, 1, 4)), (a(rng, 2, 3), b(rng, 3)),
                                        (Const(a(rng, 3)), b(rng, 2, 3))], doc or fn.__name__, **kw)


def _scalar(key, fn, values, doc):
    """A row for ``tensor (op) number``, the op's variant for a Python number."""
    return OpInfo(key, fn, lambda rng: [(values(rng, 2, 3),)], doc)


def _remainder_pair(rng, *_):
    """``(a, b)`` of shapes (2, 3) and (3,) with ``a / b`` at least 0.2 from an integer."""
    b = positive(rng, 3, low=1.0, high=2.0)
    return b * (rng.integers(-2, 3, size=(2, 3)) + rng.uniform(0.2, 0.8, size=(2, 3))), b


def _clip_sample(rng):
    """``(x, low, high)`` at least 0.4 apart in every element, in every order (``low >
    high`` too, where the result is ``high``), and ``(x, low, None)`` with ``low`` broadcast."""
    base = uniform(rng, 2, 4, 1, low=-1.0, high=1.0)
    x, low, high = np.moveaxis(base + 0.4 * rng.permuted(np.broadcast_to([0.0, 1.0, 2.0], (2, 4, 3)), axis=-1), -1, 0)
    x2, low2 = distinct(rng, (2, 4), (4,))
    return [(x, low, high), (x2, low2, None), (x, Const(low), Const(high))]


def _where_sample(rng):
    return [(np.array([[True, False, True], [False, True, True]]), uniform(rng, 2, 3), uniform(rng, 3))]


def _eigh(x):
    w, v = lp.linalg.eigh(symmetric(x))
    return lp.concat([w, lp.reshape(v * v, (-1,))])  # v * v: free of each eigenvector's sign


def _svd(x):
    u, s, vh = lp.linalg.svd(x, full_matrices=False)
    return lp.concat([s, lp.reshape(u @ vh, (-1,))])  # u @ vh: free of the singular vectors' signs


def _qr(x):
    q, r = lp.linalg.qr(x)
    return lp.concat([lp.reshape(q, (-1,)), lp.reshape(r, (-1,))])


def _setitem(x, v, key):
    y = x * 1.0  # not x itself: a leaf that requires grad cannot change in place
    y[key] = v
    return y


def _setitem_samples(rng):
    """A basic key (``v`` broadcast too), a boolean mask, integer arrays."""
    mask = np.array([[True, False, False, True], [False, False, True, False], [True, False, False, False]])
    return [(uniform(rng, 3, 4), uniform(rng, 2, 2), (slice(1, None), slice(None, None, 2))),
            (uniform(rng, 3, 4), uniform(rng, 2), (slice(1, None), slice(None, None, 2))),
            (uniform(rng, 3, 4), uniform(rng, 4), mask),
            (uniform(rng, 3, 4), uniform(rng, 2, 4), np.array([2, 0]))]


def _diff(x, before, after):
    return lp.diff(x, axis=1, n=2, prepend=before, append=after)


def _attention(q, k, v, mask, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def _self_attention(qkv, mask, causal=False):
    """Multi-head self-attention's core (2 heads of 2 features) on packed projections,
    as ``MultiheadAttention(x, x, x, need_weights=False)`` runs it; ``causal``: with
    ``is_causal`` (the mask not given but used, a block of queries at a time)."""
    inputs = (qkv,) if mask is None else (qkv, mask)
    return lp.tensor.apply(ops.self_attention, *inputs, heads=2, scale=1 / math.sqrt(2), causal=causal)


def _batch_norm(x, weight, bias):
    return F.batch_norm(x, None, None, weight, bias, training=True)


def _batch_norm_relu(x, weight, bias):
    """A Sequential's BatchNorm then ReLU, one node."""
    return F.batch_norm(x, None, None, weight, bias, training=True, _relu=True)


def _layer_norm(x, weight, bias):
    return F.layer_norm(x, (3,), weight, bias)


def _pool_input(rng):
    return [(distinct(rng, (1, 2, 4, 4))[0],)]


OP_DB: list[OpInfo] = [
    # ---- conv -----------------------------------------------------------------------------------
    OpInfo("conv.convolution", lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=(1, 2)),
           lambda rng: [(uniform(rng, 1, 2, 3, 3), uniform(rng, 2, 2, 2, 2), uniform(rng, 2)),
                        (uniform(rng, 1, 2, 3, 3), Const(uniform(rng, 2, 2, 2, 2)), None)], "conv2d"),
    OpInfo("conv.conv_transpose", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
           lambda rng: [(uniform(rng, 1, 2, 2, 2), uniform(rng, 2, 2, 2, 2), uniform(rng, 2)),
                        (uniform(rng, 1, 2, 2, 2), Const(uniform(rng, 2, 1, 2, 2)), None)], "conv_transpose2d"),
    OpInfo("conv.unfold", lambda x: F.unfold(x, kernel_size=2, padding=1, stride=2),
           lambda rng: [(uniform(rng, 1, 2, 3, 3),)], "unfold"),
    OpInfo("conv.fold", lambda x: F.fold(x, output_size=(3, 3), kernel_size=2),
           lambda rng: [(uniform(rng, 1, 4, 4),)], "fold"),
    # ---- conversion -----------------------------------------------------------------------------
    # float32 keeps 7 digits: steps of 1e-6 would be lost in rounding, larger ones see a linear map
    OpInfo("conversion.astype", lambda x: x.astype("float32"), lambda rng: [(uniform(rng, 2, 3),)], "astype",
           tol={"eps": 1e-2}),
    OpInfo("conversion.copy", lambda x: x.copy(), lambda rng: [(uniform(rng, 2, 3),)], "copy"),
    OpInfo("conversion.to", lambda x: x.to(_other_device(x)), lambda rng: [(uniform(rng, 2, 3),)], "to"),
    # ---- creation -------------------------------------------------------------------------------
    OpInfo("creation.tril", lambda x: lp.tril(x, k=-1), lambda rng: [(uniform(rng, 2, 3, 3),)], "tril"),
    OpInfo("creation.triu", lambda x: lp.triu(x, k=1), lambda rng: [(uniform(rng, 3, 4),)], "triu"),
    # ---- elementwise: arithmetic ----------------------------------------------------------------
    _binary("elementwise.add", lp.add),
    _binary("elementwise.sub", lp.subtract),
    _binary("elementwise.mul", lp.multiply),
    _binary("elementwise.div", lp.divide, b=away),
    OpInfo("elementwise.pow", lp.pow,
           lambda rng: [(positive(rng, 3, 1), uniform(rng, 1, 4)), (positive(rng, 2, 3), uniform(rng, 3)),
                        Known((np.array([0.5, 1.5]), np.array([2.0, 0.0])), {"gradgradcheck": POW_AT_0})], "pow"),
    _scalar("elementwise.add_scalar", lambda x: x + 2.5, uniform, "add"),
    _scalar("elementwise.sub_scalar", lambda x: x - 2.5, uniform, "subtract"),
    _scalar("elementwise.rsub_scalar", lambda x: 2.5 - x, uniform, "subtract"),
    _scalar("elementwise.mul_scalar", lambda x: 2.5 * x, uniform, "multiply"),
    _scalar("elementwise.div_scalar", lambda x: x / 2.5, uniform, "divide"),
    _scalar("elementwise.rdiv_scalar", lambda x: 2.5 / x, away, "divide"),
    # x ** p for the exponents pow_scalar treats apart (2, 0, 0.5) and for others
    OpInfo("elementwise.pow_scalar", lambda x, p: x**p,
           lambda rng: [(positive(rng, 2, 3), p) for p in (2, 0, 0.5, 3, -1.5)], "pow"),
    OpInfo("elementwise.rpow_scalar", lambda x, s: s**x,
           lambda rng: [(uniform(rng, 2, 3), s) for s in (2.5, 0.5)], "pow"),
    _unary("elementwise.neg", lp.negative, uniform),
    _unary("elementwise.positive", lp.positive, uniform),
    _unary("elementwise.abs", lp.abs, away),
    _unary("elementwise.exp", lp.exp, uniform),
    _unary("elementwise.expm1", lp.expm1, uniform),
    _unary("elementwise.log", lp.log, positive),
    _unary("elementwise.log1p", lp.log1p, lambda rng, *s: uniform(rng, *s, low=-0.5, high=2.0)),
    _unary("elementwise.log2", lp.log2, positive),
    _unary("elementwise.log10", lp.log10, positive),
    _unary("elementwise.sqrt", lp.sqrt, positive),
    _unary("elementwise.square", lp.square, uniform),
    _unary("elementwise.reciprocal", lp.reciprocal, away),
    # ---- elementwise: trigonometric and hyperbolic ----------------------------------------------
    _unary("elementwise.sin", lp.sin, uniform),
    _unary("elementwise.cos", lp.cos, uniform),
    _unary("elementwise.tan", lp.tan, lambda rng, *s: uniform(rng, *s, low=-1.2, high=1.2)),
    _unary("elementwise.asin", lp.asin, lambda rng, *s: uniform(rng, *s, low=-0.9, high=0.9)),
    _unary("elementwise.acos", lp.acos, lambda rng, *s: uniform(rng, *s, low=-0.9, high=0.9)),
    _unary("elementwise.atan", lp.atan, uniform),
    _unary("elementwise.sinh", lp.sinh, uniform),
    _unary("elementwise.cosh", lp.cosh, uniform),
    _unary("elementwise.tanh", lp.tanh, uniform),
    _unary("elementwise.asinh", lp.asinh, uniform),
    _unary("elementwise.acosh", lp.acosh, lambda rng, *s: uniform(rng, *s, low=1.2, high=3.0)),
    _unary("elementwise.atanh", lp.atanh, lambda rng, *s: uniform(rng, *s, low=-0.9, high=0.9)),
    # ---- elementwise: complex parts (real tensors: the identity, its conjugate, zeros) ----------
    _unary("elementwise.conj", lp.conj, uniform),
    _unary("elementwise.real", lp.real, uniform),
    _unary("elementwise.imag", lp.imag, uniform),
    # ---- elementwise: steps (gradient zero, away from their jumps) ------------------------------
    _unary("elementwise.ceil", lp.ceil, off_grid),
    _unary("elementwise.floor", lp.floor, off_grid),
    _unary("elementwise.trunc", lp.trunc, off_grid),
    _unary("elementwise.round", lp.round, off_grid),
    _unary("elementwise.sign", lp.sign, away),
    OpInfo("elementwise.complex_sign", lp.sign, lambda rng: [(complex_uniform(rng, 2, 3),), (complex_uniform(rng, 4),)],
           "sign"),  # complex input: PyTorch's sgn, z / |z|, with its gradient
    OpInfo("elementwise.floor_divide", lp.floor_divide, lambda rng: [_remainder_pair(rng)], "floor_divide"),
    OpInfo("elementwise.nextafter", lp.nextafter, lambda rng: [Known(s, {"gradcheck": NEXTAFTER}) for s in (
        (uniform(rng, 3, 1), uniform(rng, 1, 4)), (uniform(rng, 2, 3), uniform(rng, 3)))], "nextafter"),
    # ---- elementwise: two operands --------------------------------------------------------------
    _binary("elementwise.atan2", lp.atan2, a=away, b=away),
    _binary("elementwise.copysign", lp.copysign, a=away, b=away),
    _binary("elementwise.hypot", lp.hypot, a=away, b=away),
    _binary("elementwise.logaddexp", lp.logaddexp),
    OpInfo("elementwise.maximum", lp.maximum,
           lambda rng: [distinct(rng, (3, 1), (1, 4)), distinct(rng, (2, 3), (3,))], "maximum"),
    OpInfo("elementwise.minimum", lp.minimum,
           lambda rng: [distinct(rng, (3, 1), (1, 4)), distinct(rng, (2, 3), (3,))], "minimum"),
    OpInfo("elementwise.remainder", lp.remainder, lambda rng: [_remainder_pair(rng)], "remainder"),
    OpInfo("elementwise.clip", lp.clip, _clip_sample, "clip"),
    # ---- fft ------------------------------------------------------------------------------------
    OpInfo("fft.fftshift", lambda x: lp.fft.fftshift(x, axes=(0, 1)), lambda rng: [(uniform(rng, 3, 4),)],
           "fftshift"),
    OpInfo("fft.ifftshift", lambda x: lp.fft.ifftshift(x), lambda rng: [(uniform(rng, 3, 4),)], "ifftshift"),
    OpInfo("fft.TRANSFORMS[fft].op", lambda x: lp.fft.fft(x, n=5, axis=0, norm="ortho"),
           lambda rng: [(complex_uniform(rng, 4, 3),), (uniform(rng, 4),)], "fft"),
    OpInfo("fft.TRANSFORMS[ifft].op", lambda x: lp.fft.ifft(x, n=3), lambda rng: [(complex_uniform(rng, 2, 4),)],
           "ifft"),
    OpInfo("fft.TRANSFORMS[fftn].op", lambda x: lp.fft.fftn(x, s=(3, 5), axes=(0, 1), norm="forward"),
           lambda rng: [(complex_uniform(rng, 2, 4),)], "fftn"),
    OpInfo("fft.TRANSFORMS[ifftn].op", lambda x: lp.fft.ifftn(x), lambda rng: [(complex_uniform(rng, 3, 2),)], "ifftn"),
    OpInfo("fft.TRANSFORMS[rfft].op", lambda x: lp.fft.rfft(x, n=7), lambda rng: [(uniform(rng, 2, 6),)], "rfft"),
    OpInfo("fft.TRANSFORMS[irfft].op", lambda x: lp.fft.irfft(x, n=6, norm="ortho"),
           lambda rng: [(complex_uniform(rng, 2, 4),)], "irfft"),
    OpInfo("fft.TRANSFORMS[rfftn].op", lambda x: lp.fft.rfftn(x), lambda rng: [(uniform(rng, 3, 4),)], "rfftn"),
    OpInfo("fft.TRANSFORMS[irfftn].op", lambda x: lp.fft.irfftn(x, s=(3, 5), axes=(0, 1)),
           lambda rng: [(complex_uniform(rng, 2, 3),)], "irfftn"),
    OpInfo("fft.TRANSFORMS[hfft].op", lambda x: lp.fft.hfft(x, norm="forward"),
           lambda rng: [(complex_uniform(rng, 4),)], "hfft"),
    OpInfo("fft.TRANSFORMS[ihfft].op", lambda x: lp.fft.ihfft(x, n=5), lambda rng: [(uniform(rng, 6),)], "ihfft"),
    # ---- indexing: t[key] in its forms, take, t[key] = v ----------------------------------------
    OpInfo("indexing.index_basic", lambda x: x[1:, None, ::2], lambda rng: [(uniform(rng, 3, 4),)], "t[...]"),
    OpInfo("indexing.index_mask", lambda x, mask: x[mask],
           lambda rng: [(uniform(rng, 3, 2), np.array([True, False, True]))], "t[...]"),
    OpInfo("indexing.take_at", lambda x, i: x[:, i], lambda rng: [(uniform(rng, 2, 3), np.array([2, -3, 2, -1]))],
           "t[...]"),
    OpInfo("indexing.getitem_shape", lambda x, i: x[i],
           lambda rng: [(uniform(rng, 3, 2), np.array([[0, 2], [2, 1]]))], "t[...]"),
    OpInfo("indexing.getitem_reshape", lambda x, i, j: x[i, j],
           lambda rng: [(uniform(rng, 3, 2), np.array([0, 2, 2]), np.array([1, 0, 1]))], "t[...]"),
    OpInfo("indexing.getitem_permute", lambda x, i: x[i, :, i],
           lambda rng: [(uniform(rng, 2, 2, 3), np.array([1, 0, 1]))], "t[...]"),
    OpInfo("indexing.setitem", _setitem, _setitem_samples, "t[...] = v"),
    OpInfo("indexing.take_positions", lambda x, i: lp.take(x, i, axis=1),
           lambda rng: [(uniform(rng, 2, 3), np.array([2, -3, 2, -1]))], "take"),
    OpInfo("indexing.take_along_axis", lambda x, i: lp.take_along_axis(x, i, axis=1),
           lambda rng: [(uniform(rng, 2, 3), np.array([[2, 0, 2, 2], [1, 1, 0, 2]]))], "take_along_axis"),
    # ---- linalg: products -----------------------------------------------------------------------
    OpInfo("linalg.matmul", lp.matmul,
           lambda rng: [(uniform(rng, 2, 2, 3), uniform(rng, 3, 2)), (uniform(rng, 3), uniform(rng, 2, 3, 2)),
                        (uniform(rng, 2, 3), uniform(rng, 3)), (uniform(rng, 2, 3), Const(uniform(rng, 3, 2)))],
           "matmul"),
    OpInfo("linalg.tensordot", lambda a, b: lp.tensordot(a, b, axes=([0, 2], [2, 0])),
           lambda rng: [(uniform(rng, 2, 3, 2), uniform(rng, 2, 2, 2))], "tensordot"),
    OpInfo("linalg.vecdot", lp.vecdot, lambda rng: [(uniform(rng, 2, 3), uniform(rng, 3))], "vecdot"),
    OpInfo("linalg.cross", lp.linalg.cross, lambda rng: [(uniform(rng, 2, 3), uniform(rng, 3))], "cross"),
    OpInfo("linalg.outer", lp.linalg.outer, lambda rng: [(uniform(rng, 3), uniform(rng, 2))], "outer"),
    OpInfo("linalg.diagonal", lambda x: lp.linalg.diagonal(x, offset=1),
           lambda rng: [(uniform(rng, 2, 3, 4),)], "diagonal"),
    OpInfo("linalg.trace", lambda x: lp.linalg.trace(x, offset=-1), lambda rng: [(uniform(rng, 2, 3, 3),)],
           "trace"),
    # ---- linalg: inverses, determinants ---------------------------------------------------------
    OpInfo("linalg.inv", lp.linalg.inv, lambda rng: [(well_conditioned(rng, 2, 3, 3),)], "inv"),
    OpInfo("linalg.solve", lp.linalg.solve,
           lambda rng: [(well_conditioned(rng, 2, 3, 3), uniform(rng, 3, 2)),
                        (well_conditioned(rng, 3, 3), uniform(rng, 3)),
                        (Const(well_conditioned(rng, 3, 3)), uniform(rng, 3, 2)),
                        (well_conditioned(rng, 3, 3), Const(uniform(rng, 3)))], "solve"),
    OpInfo("linalg.pinv", lp.linalg.pinv, lambda rng: [(uniform(rng, 2, 3),), (uniform(rng, 3, 2),)], "pinv"),
    OpInfo("linalg.det", lp.linalg.det, lambda rng: [(well_conditioned(rng, 2, 3, 3),)], "det"),
    OpInfo("linalg.slogdet", lambda x: lp.linalg.slogdet(x).logabsdet,
           lambda rng: [(well_conditioned(rng, 2, 3, 3) * np.array([1.0, -1.0, 1.0]),)], "slogdet"),
    OpInfo("linalg.identity_power", lambda x: lp.linalg.matrix_power(x, 0), lambda rng: [(uniform(rng, 2, 2, 2),)],
           "matrix_power"),
    # ---- linalg: decompositions (of inputs made symmetric where the rule assumes it) ------------
    OpInfo("linalg.cholesky", lambda x: lp.linalg.cholesky(spd(x)), lambda rng: [(uniform(rng, 2, 3, 3),)],
           "cholesky"),
    OpInfo("linalg.eigh", _eigh, lambda rng: [(uniform(rng, 3, 3),)], "eigh"),
    OpInfo("linalg.eigvalsh", lambda x: lp.linalg.eigvalsh(symmetric(x)), lambda rng: [(uniform(rng, 2, 3, 3),)],
           "eigvalsh"),
    OpInfo("linalg.svd", _svd, lambda rng: [(uniform(rng, 3, 2),), (uniform(rng, 2, 3),)], "svd"),
    OpInfo("linalg.svdvals", lp.linalg.svdvals, lambda rng: [(uniform(rng, 2, 3, 2),)], "svdvals"),
    OpInfo("linalg.qr", _qr, lambda rng: [(uniform(rng, 3, 2),), (uniform(rng, 2, 3),)], "qr"),
    # ---- linalg: norms --------------------------------------------------------------------------
    OpInfo("linalg.vector_norm", lambda x, o: lp.linalg.vector_norm(x, axis=1, ord=o),
           lambda rng: [(distinct(rng, (2, 3))[0], o) for o in (2, 1, math.inf, 3.0, 0.5)], "vector_norm"),
    # ---- manipulation ---------------------------------------------------------------------------
    OpInfo("manipulation.reshape", lambda x: lp.reshape(x, (3, 2)), lambda rng: [(uniform(rng, 2, 3),)], "reshape"),
    OpInfo("manipulation.expand_dims", lambda x: lp.expand_dims(x, axis=1), lambda rng: [(uniform(rng, 2, 3),)],
           "expand_dims"),
    OpInfo("manipulation.squeeze", lambda x: lp.squeeze(x, axis=1), lambda rng: [(uniform(rng, 2, 1, 3),)],
           "squeeze"),
    OpInfo("manipulation.permute_dims", lambda x: lp.permute_dims(x, (2, 0, 1)),
           lambda rng: [(uniform(rng, 2, 3, 2),)], "permute_dims"),
    OpInfo("manipulation.moveaxis", lambda x: lp.moveaxis(x, 0, -1), lambda rng: [(uniform(rng, 2, 3, 2),)],
           "moveaxis"),
    OpInfo("manipulation.broadcast_to", lambda x: lp.broadcast_to(x, (2, 3, 4)),
           lambda rng: [(uniform(rng, 3, 1),)], "broadcast_to"),
    OpInfo("manipulation.flip", lambda x: lp.flip(x, axis=1), lambda rng: [(uniform(rng, 2, 3),)], "flip"),
    OpInfo("manipulation.roll", lambda x: lp.roll(x, (1, -2), axis=(0, 1)), lambda rng: [(uniform(rng, 2, 3),)],
           "roll"),
    OpInfo("manipulation.concat", lambda a, b: lp.concat([a, b, a], axis=1),
           lambda rng: [(uniform(rng, 2, 1), uniform(rng, 2, 3))], "concat"),
    OpInfo("manipulation.stack", lambda a, b: lp.stack([a, b], axis=1),
           lambda rng: [(uniform(rng, 2, 3), uniform(rng, 2, 3))], "stack"),
    OpInfo("manipulation.unstack_part", lambda x: lp.unstack(x, axis=1)[1], lambda rng: [(uniform(rng, 2, 3),)],
           "unstack"),
    OpInfo("manipulation.repeat", lambda x, r: lp.repeat(x, r, axis=1),
           lambda rng: [(uniform(rng, 2, 3), 2), (uniform(rng, 2, 3), np.array([2, 0, 1]))], "repeat"),
    OpInfo("manipulation.tile", lambda x: lp.tile(x, (2, 1, 2)), lambda rng: [(uniform(rng, 2, 3),)], "tile"),
    OpInfo("manipulation.meshgrid_part", lambda a, b: lp.stack(lp.meshgrid(a, b, indexing="ij")),
           lambda rng: [(uniform(rng, 3), uniform(rng, 2))], "meshgrid"),
    # ---- nn: activations ------------------------------------------------------------------------
    _unary("nn.relu", F.relu, away),
    OpInfo("nn.leaky_relu", lambda x, slope: F.leaky_relu(x, slope),
           lambda rng: [(away(rng, 2, 3), 0.1), (away(rng, 2, 3), -0.5)], "leaky_relu"),
    _unary("nn.sigmoid", F.sigmoid, uniform),
    OpInfo("nn.softplus", lambda x: x.softplus(), lambda rng: [(uniform(rng, 2, 3),)], "softplus"),
    OpInfo("nn.gelu", lambda x: F.gelu(x, approximate="tanh"), lambda rng: [(uniform(rng, 2, 3),)], "gelu"),
    OpInfo("nn.softmax", lambda x: F.softmax(x, axis=1), lambda rng: [(uniform(rng, 2, 3),)], "softmax"),
    OpInfo("nn.log_softmax", lambda x: F.log_softmax(x, axis=0), lambda rng: [(uniform(rng, 2, 3),)],
           "log_softmax"),
    OpInfo("nn.gelu_erf", F.gelu, lambda rng: [(uniform(rng, 2, 3),)], "gelu", not_on=NO_SPECIAL),
    # ---- activations ----------------------------------------------------------------------------
    _unary("activations.silu", F.silu, uniform),
    OpInfo("activations.softplus_threshold", lambda x, beta, threshold: F.softplus(x, beta, threshold),
           lambda rng: [(uniform(rng, 2, 3), 1.0, 20.0), (0.5 + away(rng, 2, 3, low=0.2), 2.0, 1.0)], "softplus"),
    OpInfo("activations.elu", lambda x, alpha: F.elu(x, alpha),
           lambda rng: [(away(rng, 2, 3, low=0.2), 1.0), (away(rng, 2, 3, low=0.2), 0.5)], "elu"),
    _unary("activations.mish", F.mish, uniform),
    OpInfo("activations.hardtanh", lambda x, low, high: F.hardtanh(x, low, high),
           lambda rng: [(_off(rng, (-1.0, 1.0), 2, 3), -1.0, 1.0), (_off(rng, (-0.5, 1.5), 2, 3), -0.5, 1.5)],
           "hardtanh"),
    # ---- nn: losses -----------------------------------------------------------------------------
    OpInfo("nn.cross_entropy", lp.nn.cross_entropy_loss,
           lambda rng: [(uniform(rng, 2, 3), positive(rng, 2, 3) / 3.0),
                        (uniform(rng, 2, 3), Const(positive(rng, 2, 3)))], "cross_entropy_loss"),
    OpInfo("nn.cross_entropy_index", lambda x, target: F.cross_entropy(x, target),
           lambda rng: [(uniform(rng, 3, 4, 2), np.array([[0, 3], [2, 2], [1, 0]]))], "cross_entropy"),
    # ---- nn: layers as one node -----------------------------------------------------------------
    OpInfo("nn.linear", F.linear, lambda rng: [(uniform(rng, 2, 2, 3), uniform(rng, 2, 3), uniform(rng, 2)),
                                               (uniform(rng, 2, 3), uniform(rng, 2, 3), None),
                                               (Const(uniform(rng, 2, 3)), uniform(rng, 2, 3), uniform(rng, 2)),
                                               (uniform(rng, 2, 3), Const(uniform(rng, 2, 3)), Const(uniform(rng, 2)))],
           "linear"),
    OpInfo("nn.linear_relu", *_mlp(2, bias_last=False), "MLP"),
    OpInfo("nn.mlp(2)", *_mlp(2), "MLP"),
    OpInfo("nn.layer_norm", _layer_norm,
           lambda rng: [(uniform(rng, 2, 3), uniform(rng, 3), uniform(rng, 3)),
                        (uniform(rng, 2, 3), Const(uniform(rng, 3)), uniform(rng, 3)),
                        (uniform(rng, 2, 3), None, None)],
           "layer_norm"),
    OpInfo("nn.attention", _attention,
           lambda rng: [(uniform(rng, 2, 3, 2), uniform(rng, 2, 2), uniform(rng, 2, 2), uniform(rng, 3, 2)),
                        (uniform(rng, 3, 2), Const(uniform(rng, 2, 2)), uniform(rng, 2, 2), Const(uniform(rng, 3, 2))),
                        (uniform(rng, 3, 2), uniform(rng, 2, 2), uniform(rng, 2, 2), None),
                        # is_causal: 5 queries (one block), 34 (blocks of 32, then 2: the keys after 32 skipped)
                        (uniform(rng, 2, 5, 2), uniform(rng, 2, 5, 2), uniform(rng, 2, 5, 3), None, True),
                        (uniform(rng, 34, 1), uniform(rng, 34, 1), uniform(rng, 34, 1), None, True),
                        (uniform(rng, 3, 2), uniform(rng, 5, 2), Const(uniform(rng, 5, 2)), None, True),
                        (uniform(rng, 5, 2), Const(uniform(rng, 3, 2)), uniform(rng, 3, 2), None, True)],
           "scaled_dot_product_attention"),
    OpInfo("nn.self_attention", _self_attention,
           lambda rng: [(uniform(rng, 2, 3, 12), uniform(rng, 3, 3)),
                        (uniform(rng, 1, 3, 12), np.tril(np.ones((3, 3), bool))),
                        (uniform(rng, 2, 3, 12), None),
                        (uniform(rng, 2, 5, 12), None, True)],
           "MultiheadAttention"),
    OpInfo("norm.group_norm", lambda x, w, b: F.group_norm(x, 2, w, b),
           lambda rng: [(uniform(rng, 2, 4, 2), uniform(rng, 4), uniform(rng, 4)), (uniform(rng, 1, 4, 3), None, None)],
           "group_norm"),
    OpInfo("norm.batch_norm", _batch_norm,
           lambda rng: [(uniform(rng, 3, 2, 2), uniform(rng, 2), uniform(rng, 2)),
                        (uniform(rng, 4, 2), Const(uniform(rng, 2)), uniform(rng, 2)),
                        (uniform(rng, 3, 2), None, None)],
           "batch_norm"),
    OpInfo("norm.batch_norm_relu", _batch_norm_relu,
           lambda rng: [(uniform(rng, 3, 2, 2), uniform(rng, 2), uniform(rng, 2)),
                        (uniform(rng, 4, 2, 3), Const(uniform(rng, 2)), uniform(rng, 2)),
                        (uniform(rng, 3, 2), None, None)],
           "batch_norm_relu"),
    # ---- recurrent layers --------------------------------------------------------------------
    OpInfo("rnn.elman", *_recurrent(lp.nn.RNN, bidirectional=True), "RNN"),
    OpInfo("rnn.lstm", *_recurrent(lp.nn.LSTM), "LSTM"),
    OpInfo("rnn.gru", *_recurrent(lp.nn.GRU), "GRU"),
    # ---- pooling --------------------------------------------------------------------------------
    OpInfo("pool.max_pool2d", lambda x: F.max_pool2d(x, 2, stride=1, padding=1), _pool_input, "max_pool2d"),
    OpInfo("pool.avg_pool2d", lambda x: F.avg_pool2d(x, 2, stride=2, padding=1, count_include_pad=False),
           _pool_input, "avg_pool2d"),
    # ---- searching, sets, sorting ---------------------------------------------------------------
    OpInfo("searching.where", lp.where, _where_sample, "where"),
    OpInfo("sets.gather_first", lp.unique_values, lambda rng: [tuple(distinct(rng, (2, 3)))], "unique_values"),
    OpInfo("sorting.sort", lambda x: lp.sort(x, axis=0, descending=True),
           lambda rng: [tuple(distinct(rng, (3, 2)))], "sort"),
    # ---- special ---------------------------------------------------------------------------------
    _unary("special.erf", special.erf, uniform, not_on=NO_SPECIAL),
    _unary("special.erfc", special.erfc, uniform, not_on=NO_SPECIAL),
    _unary("special.erfinv", special.erfinv, lambda rng, *s: uniform(rng, *s, low=-0.9, high=0.9), not_on=NO_SPECIAL),
    _unary("special.ndtr", special.ndtr, uniform, not_on=NO_SPECIAL),
    _unary("special.log_ndtr", special.log_ndtr, uniform, not_on=NO_SPECIAL),
    _unary("special.gammaln", special.gammaln, lambda rng, *s: positive(rng, *s, high=4.0), not_on=NO_SPECIAL),
    _unary("special.digamma", special.digamma, lambda rng, *s: positive(rng, *s, high=4.0), not_on=NO_SPECIAL),
    OpInfo("special.polygamma", lambda x, n: special.polygamma(n, x),
           lambda rng: [(positive(rng, 2, 3), n) for n in (0, 1, 2)], "polygamma", not_on=NO_SPECIAL),
    _unary("special.i0", special.i0, uniform, not_on=NO_SPECIAL),
    _unary("special.i1", special.i1, uniform, not_on=NO_SPECIAL),
    # with eps, the values clamped to [eps, 1 - eps] (gradient 0) keep 0.05 from its ends
    OpInfo("special.logit", special.logit,
           lambda rng: [(uniform(rng, 2, 3, low=0.1, high=0.9), None),
                        (np.array([[0.05, 0.1, 0.3], [0.5, 0.7, 0.95]]) + uniform(rng, 2, 3, low=-0.02, high=0.02),
                         0.2)], "logit"),
    OpInfo("special.sinc", special.sinc,
           lambda rng: [(uniform(rng, 2, 3),), (np.array([0.0, 0.5, -1.3, 4e-4]),)],
           "sinc"),
    _binary("special.xlogy", special.xlogy, b=positive),
    _binary("special.xlog1py", special.xlog1py, b=lambda rng, *s: uniform(rng, *s, low=-0.5, high=2.0)),
    # ---- statistical ----------------------------------------------------------------------------
    OpInfo("statistical.sum", lambda x: lp.sum(x, axis=1), lambda rng: [(uniform(rng, 2, 3),)], "sum"),
    OpInfo("statistical.mean", lambda x: lp.mean(x, axis=(0, 2), keepdims=True),
           lambda rng: [(uniform(rng, 2, 3, 2),)], "mean"),
    OpInfo("statistical.prod", lambda x: lp.prod(x, axis=1),
           lambda rng: [(uniform(rng, 2, 3),), (np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 1.2]]),)], "prod"),
    OpInfo("statistical.max", lambda x: lp.max(x, axis=1), lambda rng: [tuple(distinct(rng, (2, 3)))], "max"),
    OpInfo("statistical.min", lambda x: lp.min(x), lambda rng: [tuple(distinct(rng, (2, 3)))], "min"),
    OpInfo("statistical.var", lambda x: lp.var(x, axis=1, correction=1), lambda rng: [(uniform(rng, 2, 3),)], "var"),
    OpInfo("statistical.std", lambda x: lp.std(x, axis=0), lambda rng: [(uniform(rng, 3, 2),)], "std"),
    OpInfo("statistical.cumulative_sum", lambda x: lp.cumulative_sum(x, axis=1, include_initial=True),
           lambda rng: [(uniform(rng, 2, 3),)], "cumulative_sum"),
    OpInfo("statistical.cumulative_prod", lambda x: lp.cumulative_prod(x, axis=1),
           lambda rng: [(uniform(rng, 2, 3),), (np.array([[1.5, 0.0, -2.0, 0.5], [0.0, 1.2, 0.0, 2.0]]),)],
           "cumulative_prod"),
    OpInfo("statistical.diff", _diff, lambda rng: [(uniform(rng, 2, 3), uniform(rng, 2, 1), uniform(rng, 2, 2))],
           "diff"),
]


# Ops whose outputs never carry gradients (``differentiable=False``): no row needed.
NOT_DIFFERENTIABLE = {
    "conversion.astype_nograd",
    "elementwise.bitwise_and", "elementwise.bitwise_invert", "elementwise.bitwise_left_shift",
    "elementwise.bitwise_or", "elementwise.bitwise_right_shift", "elementwise.bitwise_xor",
    "elementwise.equal", "elementwise.not_equal", "elementwise.greater", "elementwise.greater_equal",
    "elementwise.less", "elementwise.less_equal",
    "elementwise.isfinite", "elementwise.isinf", "elementwise.isnan", "elementwise.signbit",
    "elementwise.logical_and", "elementwise.logical_not", "elementwise.logical_or", "elementwise.logical_xor",
    "linalg.matrix_rank",
    "pool.max_pool2d_indices",
    "searching.argmax", "searching.argmin", "searching.count_nonzero", "searching.nonzero",
    "searching.searchsorted",
    "sets.unique_all", "sets.unique_counts", "sets.unique_inverse", "sets.unique_values",
    "sorting.argsort",
    "statistical.all", "statistical.any",
}
