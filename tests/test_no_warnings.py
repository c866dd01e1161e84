"""Operations emit no NumPy floating-point warnings (SPEC, "Between libraries"): the
results are IEEE's (inf, nan, -0.0), as the array API standard and PyTorch give them,
without a RuntimeWarning that ``-W error`` (scikit-learn's test suites, pytest's
``filterwarnings = error``) would turn into a failure.

Every element-wise function of the table in ``leanpass.ops.elementwise`` (UNARY and
BINARY, with tensor and Python-number operands), and every ``lp.special`` function,
runs forward and backward on 0, -0, ±inf, nan, negatives and huge values under
``warnings.simplefilter("error")`` on every device; then scikit-learn's
``StandardScaler`` on a LeanPass tensor with a zero-variance column under ``-W error``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import SCIPY_DISPATCH, SKLEARN_DISPATCH, skip_below

import leanpass as lp
from leanpass.backends import get_backend
from leanpass.ops.elementwise import BINARY, UNARY

SPECIAL_VALUES = {
    "float64": [0.0, -0.0, np.inf, -np.inf, np.nan, -2.5, -1.0, -0.5, 0.5, 1.0, 2.5, 1e300, -1e300, 1e-310],
    "float32": [0.0, -0.0, np.inf, -np.inf, np.nan, -2.5, -1.0, -0.5, 0.5, 1.0, 2.5, 3e38, -3e38, 1e-40],
}
INTEGERS = [0, -1, 1, 2, -(2**62), 2**62]
NUMBERS = [0.0, -0.0, np.inf, -np.inf, np.nan, -2.0, 0.5, 1.0, 3.0, 1e300, 0, -3, 2]
REFUSED = (TypeError, ValueError, OverflowError, NotImplementedError)  # "not defined for these": fine


def floats(device, dtype, requires_grad=False):
    return lp.Tensor(np.array(SPECIAL_VALUES[dtype], dtype=dtype), dtype=dtype, device=device,
                     requires_grad=requires_grad)


def _backward(y, *inputs):
    if y._rg:
        y.backward(lp.ones_like(y))
        for x in inputs:
            if isinstance(x, lp.Tensor) and x.requires_grad:
                assert x.grad is not None


@pytest.fixture(autouse=True)
def warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_warn_nothing(device, dtype, name):
    fn = getattr(lp, name)
    differentiable = UNARY[name].op.differentiable
    x = floats(device, dtype, requires_grad=differentiable)
    try:
        y = fn(x)
    except REFUSED:  # bitwise_invert of a float: not defined
        y = None
    if y is not None:
        _backward(y, x)
    for ints in (INTEGERS, [True, False]):  # integer and bool input, where defined
        try:
            fn(lp.asarray(ints, device=device))
        except REFUSED:
            pass


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_functions_warn_nothing(device, dtype, name):
    fn = getattr(lp, name)
    differentiable = BINARY[name].op.differentiable
    values = np.array(SPECIAL_VALUES[dtype], dtype=dtype)
    a = lp.Tensor(values[:, None], dtype=dtype, device=device, requires_grad=differentiable)
    b = lp.Tensor(values[None, :], dtype=dtype, device=device, requires_grad=differentiable)
    try:
        y = fn(a, b)
    except REFUSED:  # bitwise operators on floats
        y = None
    if y is not None:
        _backward(y, a, b)
    for s in NUMBERS:  # a Python number on either side: the fast scalar operations
        for args in ((a, s), (s, a)):
            x = lp.Tensor(values, dtype=dtype, device=device, requires_grad=differentiable)
            args = tuple(x if arg is a else arg for arg in args)
            try:
                y = fn(*args)
            except REFUSED:
                continue
            _backward(y, x)
    ints = lp.asarray(np.array(INTEGERS)[:, None], device=device)
    for other in (lp.asarray(np.array(INTEGERS)[None, :], device=device), 0, -1, 3):
        for args in ((ints, other), (other, ints)):
            try:
                fn(*args)
            except REFUSED:
                pass


def test_operators_warn_nothing(device):
    """The operators (``/``, ``**``, ``%``, ``//``...) run the same operations."""
    values = np.array(SPECIAL_VALUES["float64"])
    a = lp.Tensor(values[:, None], device=device, requires_grad=True)
    b = lp.Tensor(values[None, :], device=device, requires_grad=True)
    for y in (a + b, a - b, a * b, a / b, a ** b, -a, abs(a), 1.0 / a, a / 0.0, 0.0 / a, a ** 0.5, a ** 2,
              a * 0.0, a * np.inf, a + np.inf, 2.0 ** a, 0.0 ** a, a ** -1):
        y.backward(lp.ones_like(y))
    with lp.no_grad():
        a % b, a // b, a % 0.0, a // 0.0  # noqa: B018


def test_reductions_warn_nothing(device):
    """A sum or mean that overflows or meets inf - inf gives inf or nan."""
    x = lp.Tensor(np.array([1e308, 1e308, np.inf, -np.inf, np.nan]), device=device, requires_grad=True)
    for y in (lp.sum(x), lp.mean(x), lp.sum(x[:2]), lp.prod(x), lp.var(x), lp.std(x)):
        y.backward()


def test_in_place_operators_warn_nothing(device):
    for op in ("+=", "-=", "*=", "/=", "**=", "//=", "%="):
        t = lp.asarray([np.inf, 0.0, 1e308, np.nan], device=device)
        exec(f"t {op} other", {"t": t, "other": lp.asarray([np.inf, 0.0, 1e308, 1.0], device=device)})
        exec(f"t {op} 0.0", {"t": t})


def test_other_operations_warn_nothing(device):
    """Matrix products, softmax, running totals and casts of inf, nan and huge values."""
    x = lp.Tensor(np.array([[np.inf, -np.inf, 1e308], [1e308, 1.0, np.nan]]), device=device, requires_grad=True)
    w = lp.Tensor(np.array([[0.0, 1.0], [1.0, 0.0], [1e308, 2.0]]), device=device, requires_grad=True)
    for y in (x @ w, x.softmax(), x.log_softmax(), lp.cumulative_sum(x, axis=1), lp.cumulative_prod(x, axis=1),
              x.astype("float32"), lp.linalg.vector_norm(x)):
        y.backward(lp.ones_like(y))
    with lp.no_grad():
        x.astype("int64"), x.astype("int32"), x.astype("bool")  # noqa: B018 - nan and inf to integers


SPECIAL = ["erf", "erfc", "erfinv", "expit", "logit", "gammaln", "digamma", "ndtr", "log_ndtr", "i0", "i1", "sinc"]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", SPECIAL)
def test_special_functions_warn_nothing(device, dtype, name):
    x = floats(device, dtype, requires_grad=True)
    try:
        y = getattr(lp.special, name)(x)
    except NotImplementedError:  # not on this device
        assert not get_backend(device).special.available
        return
    _backward(y, x)


@pytest.mark.parametrize("name", ["xlogy", "xlog1py"])
def test_special_binary_functions_warn_nothing(device, name):
    values = np.array(SPECIAL_VALUES["float64"])
    a = lp.Tensor(values[:, None], device=device, requires_grad=True)
    b = lp.Tensor(values[None, :], device=device, requires_grad=True)
    _backward(getattr(lp.special, name)(a, b), a, b)


def test_gelu_warns_nothing(device):
    for approximate in ("none", "tanh"):
        x = floats(device, "float64", requires_grad=True)
        try:
            y = x.gelu(approximate=approximate)
        except NotImplementedError:  # the exact form needs erf
            assert approximate == "none" and not get_backend(device).special.available
            continue
        _backward(y, x)


_SCALER = """
import warnings
warnings.simplefilter("error")
import numpy as np
import sklearn
try:
    sklearn.set_config(array_api_dispatch=True)
except Exception as exc:
    print("no array API dispatch:", exc)
    raise SystemExit(0)
from sklearn.preprocessing import StandardScaler
import leanpass as lp
X = lp.asarray(np.array([[1.0, 2.0, 5.0], [1.0, 4.0, 7.0], [1.0, 9.0, 1.0], [1.0, 0.5, 2.0]]))
out = StandardScaler().fit_transform(X)
assert isinstance(out, lp.Tensor), type(out)
expected = np.asarray(X.numpy())
expected = (expected - expected.mean(0)) / np.where(expected.std(0) == 0, 1.0, expected.std(0))
np.testing.assert_allclose(out.numpy(), expected, atol=1e-12)
print("ok")
"""


def test_standard_scaler_on_a_tensor_with_a_constant_column_warns_nothing():
    """scikit-learn's array API dispatch runs StandardScaler's arithmetic on the tensor
    (a constant column: a variance of 0, divided and handled by sklearn); under ``-W
    error`` that used to fail with NumPy's 'invalid value encountered in divide'. In a
    fresh process: SciPy (which scikit-learn imports) reads SCIPY_ARRAY_API once."""
    skip_below("sklearn", *SKLEARN_DISPATCH)
    skip_below("scipy", *SCIPY_DISPATCH)
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run([sys.executable, "-W", "error", "-c", _SCALER], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.startswith("no array API dispatch"):
        pytest.skip(f"scikit-learn's array API dispatch is not available: {done.stdout.strip()}")
    assert done.stdout.split() == ["ok"]


def test_quiet_calls_leave_the_callers_error_state_and_work_nested_and_on_threads():
    """``Backend.quietly`` runs a call in a per-thread context in which NumPy ignores
    floating-point errors: the caller's own ``np.errstate`` is untouched (an overflow
    outside still raises under ``errstate(over="raise")``), a quiet call inside a quiet
    call works, and threads each get their own context (a context entered by two
    threads at once would raise)."""
    import threading

    quietly = get_backend("cpu").quietly
    big = np.array([1e300])
    with np.errstate(over="raise"):
        assert np.isinf(quietly(np.multiply, big, big)).all()
        assert np.isinf(quietly(lambda a: quietly(np.multiply, a, a), big)).all()  # nested
        with pytest.raises(FloatingPointError):
            np.multiply(big, big)
    results, errors = [], []

    def work():
        try:
            for _ in range(2000):
                results.append(bool(np.isinf(quietly(np.multiply, big, big)).all()))
        except Exception as exc:  # pragma: no cover - the failure reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8000 and all(results)
