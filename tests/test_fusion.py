"""``lp.compile``'s fusion (issue 29): runs of element-wise operations, and the backward
rules of those operations, replay as one program each.

Flat programs (every device, and the cpu before its runs are compiled) call the same
kernels in the same order as eager: bit for bit. Compiled ones (cpu with Numba, from
the second replay on) are one loop over the elements each: within a few ulp. What is
not element-wise, or broadcasts, stays an operation of its own.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor, _compile, nn
from leanpass._fusion import fusion_enabled
from leanpass.backends import _numba, get_backend

pytestmark = pytest.mark.skipif(not fusion_enabled(), reason="LEANPASS_FUSE=0 turns fusion off")
RNG = np.random.default_rng(31)
needs_numba = pytest.mark.skipif(not _numba.enabled(), reason="Numba (the fuse extra) is not installed")
TOL = {"float32": dict(rtol=2e-6, atol=1e-6), "float64": dict(rtol=1e-13, atol=1e-15)}


@pytest.fixture
def flat(monkeypatch):
    """Runs never compiled: flat programs only (what every backend without a compiler runs)."""
    monkeypatch.setattr(_compile.plan, "COMPILE_AFTER", 10**9)


def chain(x):
    """W2's chain, ten rounds: forward, backward, the sum returned."""
    y = x
    for _ in range(10):
        y = (y * x).tanh() * 0.5 + 0.25
    s = y.sum()
    s.backward()
    return s


def compare(fn, make_args, calls=4, exact=True, dtype="float64", **compile_kw):
    """``fn`` eagerly and compiled on equal arguments ``calls`` times: results and the
    arguments' gradients equal (bit for bit, or within TOL); the compiled function."""
    compiled = lp.compile(fn, **compile_kw)
    for _ in range(calls):
        seed = int(RNG.integers(1 << 30))
        eager_args, compiled_args = make_args(seed), make_args(seed)
        results = fn(*eager_args), compiled(*compiled_args)
        pairs = [results] + [(a.grad, b.grad) for a, b in zip(eager_args, compiled_args)
                             if isinstance(a, Tensor) and a.requires_grad]
        for a, b in pairs:
            if exact:
                np.testing.assert_array_equal(host(b), host(a))
            else:
                np.testing.assert_allclose(host(b), host(a), **TOL[dtype])
    return compiled


def tensors(device, *shapes, dtype="float64", low=0.1, high=0.9):
    def make(seed):
        rng = np.random.default_rng(seed)
        return [Tensor(rng.uniform(low, high, size=s).astype(dtype), requires_grad=True, device=device)
                for s in shapes]

    return make


def plan_of(compiled):
    (plan,) = compiled._entries.values()
    return plan


def test_a_chain_fuses_into_one_forward_run_and_one_backward_program_bit_for_bit(device, flat):
    compiled = compare(chain, tensors(device, (16,)))
    plan = plan_of(compiled)
    assert plan.runs == 1 and [e[0] for e in plan.events] == ["fused", "op", "backward"]  # the sum stays
    text = compiled.explain()
    assert "fusion: 40 of 41 operations in 1 forward runs and 1 backward programs; flat" in text


def test_fusion_plans_at_the_first_replay_not_at_the_trace():
    compiled = lp.compile(chain)
    compiled(Tensor(np.linspace(0.1, 0.9, 16), requires_grad=True))
    assert "fusion: planned at the first replay" in compiled.explain()
    assert [e[0] for e in plan_of(compiled).events].count("op") == 41  # the trace's operations, as recorded
    compiled(Tensor(np.linspace(0.1, 0.9, 16), requires_grad=True))
    assert "40 of 41 operations in 1 forward runs" in compiled.explain()


def compiles(device):
    """Skips a test on a device whose backend compiles no runs (flat programs only)."""
    if get_backend(device).fused.elementwise is None:
        pytest.skip(f"{device} compiles no runs (Numba, the fuse extra, on cpu; CUDA kernels on cuda)")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_runs_compile_on_every_device_that_compiles(device, dtype):
    """Numba's loops on cpu, generated CUDA kernels on cuda (tests/test_kernel_texts.py
    runs those on the CPU stand-in): within a few ulp of eager."""
    compiles(device)
    compiled = compare(chain, tensors(device, (3, 5), dtype=dtype), calls=5, exact=False, dtype=dtype)
    plan = plan_of(compiled)
    assert plan.kernels == 2  # the forward run and the backward program
    assert "2 compiled into one loop each" in compiled.explain()
    source = plan.events[0][1].source  # one loop over the elements, or one CUDA kernel
    assert "i0[j]" in source if device == "cpu" else source.startswith("T i0")


def test_fuse_false_and_leanpass_fuse_0_replay_each_operation():
    compiled = compare(chain, tensors("cpu", (16,)), fuse=False)
    assert plan_of(compiled).runs == 0 and "fusion: none" in compiled.explain()
    script = ("import leanpass as lp, numpy as np\n"
              "def f(x):\n    return ((x * 2).exp() + 1).sum()\n"
              "c = lp.compile(f)\nx = lp.Tensor(np.ones(3))\nc(x); c(x)\n"
              "print(next(iter(c._entries.values())).runs)")
    out = subprocess.run([sys.executable, "-c", script], env={"LEANPASS_FUSE": "0", "PATH": ""},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


UNARY = {  # element-wise functions and activations, each with its backward rule
    "exp": lambda x: x.exp(), "log": lambda x: x.log(), "sqrt": lambda x: x.sqrt(), "sin": lp.sin,
    "cos": lp.cos, "tanh": lp.tanh, "abs": lambda x: abs(x - 0.5), "square": lp.square,
    "expm1": lp.expm1, "log1p": lp.log1p, "reciprocal": lambda x: 1 / x, "sigmoid": nn.functional.sigmoid,
    "relu": nn.functional.relu, "gelu": nn.functional.gelu,
    "gelu_tanh": lambda x: nn.functional.gelu(x, approximate="tanh"), "silu": nn.functional.silu,
    "softplus": nn.functional.softplus, "elu": nn.functional.elu, "leaky_relu": nn.functional.leaky_relu,
    "pow": lambda x: x ** 3, "pow_half": lambda x: x ** 0.5, "maximum": lambda x: lp.maximum(x, 0.5),
    "clip": lambda x: lp.clip(x, 0.3, 0.7), "where": lambda x: lp.where(x > 0.5, x * 2, x - 1),
    "div": lambda x: x / (x + 1), "sub": lambda x: 1 - x * x, "neg": lambda x: -x * x,
}


def unary_step(f):
    """A run around ``f`` (a product before, a product and a sum after) and its backward."""
    def fn(x, w):
        y = f(x * w) * w + x
        y.sum().backward()
        return y

    return fn


@pytest.mark.parametrize("name", list(UNARY))
def test_element_wise_functions_fuse_with_their_backward(name, device, flat):
    if name == "gelu" and device.startswith("strict"):
        pytest.skip("strict has no erf (exact GELU)")
    compiled = compare(unary_step(UNARY[name]), tensors(device, (4, 3), (4, 3)), calls=3)
    assert plan_of(compiled).runs >= 1, compiled.explain()


@pytest.mark.parametrize("name", list(UNARY))
def test_element_wise_functions_compile_within_a_few_ulp(name, device):
    compiles(device)
    compiled = compare(unary_step(UNARY[name]), tensors(device, (4, 3), (4, 3)), calls=4, exact=False)
    assert plan_of(compiled).kernels >= 1, compiled.explain()


def test_a_value_from_inside_a_run_read_later_and_gradients_into_a_leaf_used_elsewhere(device, flat):
    """The run's middle value feeds a product outside it (so the run hands it out), and
    the leaf w takes gradients from the run and from the product (added as eagerly)."""
    def fn(x, w):
        h = (x * w).tanh()
        z = h * 2.0 + 1.0
        out = (z @ w.mT).sum() + (h @ w.mT).sum()
        out.backward()
        return out

    compiled = compare(fn, tensors(device, (3, 4), (3, 4)))
    assert plan_of(compiled).runs >= 1


def test_broadcasting_and_other_dtypes_stay_operations_of_their_own(device, flat):
    def fn(x, b):
        y = ((x + b) * 2.0).exp()  # x + b broadcasts: not in a run
        z = (y * y).sin().cos()
        z.sum().backward()
        return z

    compiled = compare(fn, tensors(device, (4, 3), (3,)))
    plan = plan_of(compiled)
    assert [e[0] for e in plan.events][:2] == ["op", "fused"]


def test_a_training_step_with_gelu_and_adamw_fuses_and_matches_eager_bit_for_bit(device, flat):
    def setup():
        lp.manual_seed(3)
        model = nn.Sequential(nn.Linear(6, 16, device=device), nn.GELU(approximate="tanh"),
                              nn.Linear(16, 3, device=device))
        return model, lp.optim.AdamW(model.parameters(), lr=1e-2)

    (m1, o1), (m2, o2) = setup(), setup()

    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss((model(x) * 0.5).tanh(), y)
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = step_of(m1, o1), lp.compile(step_of(m2, o2))
    for _ in range(4):
        x, y = RNG.normal(size=(8, 6)), RNG.normal(size=(8, 3))
        np.testing.assert_array_equal(host(compiled(Tensor(x, device=device), Tensor(y, device=device))),
                                      host(eager(Tensor(x, device=device), Tensor(y, device=device))))
    for p, q in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_array_equal(host(q), host(p))
    assert plan_of(compiled).runs >= 1


@needs_numba
def test_kernels_are_cached_on_disk_for_the_next_process(tmp_path):
    script = ("import leanpass as lp, numpy as np\n"
              "def f(x):\n    y = ((x * 1.5).sin() * x).sum()\n    y.backward()\n    return y\n"
              "c = lp.compile(f)\n"
              "for _ in range(3): c(lp.Tensor(np.ones(5), requires_grad=True))\n"
              "print(next(iter(c._entries.values())).kernels)")
    env = {"LEANPASS_CACHE_DIR": str(tmp_path), "PATH": ""}
    for _ in range(2):  # the second process loads what the first compiled
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "2"
    assert len(list((tmp_path / "kernels").glob("k*.py"))) == 2
    assert list((tmp_path / "kernels" / "__pycache__").glob("*.nbi"))  # Numba's index of compiled code


def test_the_symbolic_backend_refuses_what_is_not_element_wise():
    from leanpass._fusion import NotFusible, Sym, SymBackend

    sb = SymBackend(get_backend("cpu"))
    x = Sym("in", (0,), get_backend("cpu").xp.float64, (3,))
    for attempt in (lambda: bool(x), lambda: x[0], lambda: sb.xp.sum(x), lambda: sb.matmul(x, x),
                    lambda: float(x), lambda: sb.xp.astype(x, sb.xp.bool)):
        with pytest.raises(NotFusible):
            attempt()


# ---- what a review found (each once silently wrong, or a crash) ------------------------------

MODES = ["flat", "compiled"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    """"flat": runs never compiled (bit for bit); "compiled": cpu's Numba loops from the
    second replay (within TOL; skipped without Numba)."""
    if request.param == "flat":
        monkeypatch.setattr(_compile.plan, "COMPILE_AFTER", 10**9)
    elif not _numba.enabled():
        pytest.skip("Numba (the fuse extra) is not installed")
    return request.param


def check(fn, make_args, mode, calls=5):
    return compare(fn, make_args, calls=calls, exact=mode == "flat")


def test_a_change_in_place_between_forward_and_backward_is_not_read_by_the_backward(mode):
    """The compiled backward computes forward values again from the run's inputs only
    where nothing changed them since; here c changes (it saves nothing eagerly)."""
    def make(seed):
        return tensors("cpu", (5,))(seed) + [Tensor(np.linspace(0, 1, 5))]

    def fn(x, c):
        y = (x + c).tanh() * 2.0
        c.add_(1.0)
        y.sum().backward()
        return y

    check(fn, make, mode)


def test_a_step_between_two_backward_passes_of_one_forward(mode):
    def setup():
        lp.manual_seed(5)
        b = nn.Parameter(Tensor(np.linspace(-1, 1, 5)))
        return b, lp.optim.SGD([b], lr=0.5)

    (be, oe), (bc, oc) = setup(), setup()

    def step_of(b, opt):
        def step(x):  # x + b saves nothing: eagerly the second pass reads tanh's saved output
            opt.zero_grad()
            loss = ((x + b).tanh() * 3.0).sum()
            loss.backward(retain_graph=True)
            opt.step()
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = step_of(be, oe), lp.compile(step_of(bc, oc))
    for _ in range(5):
        x = RNG.uniform(0.1, 0.9, size=5)
        eager(Tensor(x)), compiled(Tensor(x))
        np.testing.assert_allclose(host(bc), host(be), **(TOL["float64"] if mode == "compiled" else dict(rtol=0)))


def test_two_leaves_given_one_gradient_array_get_their_own(mode):
    """x + p hands one gradient to both: clipping p.grad in place must not clip x.grad."""
    p = [Tensor(np.linspace(0, 1, 4), requires_grad=True) for _ in range(2)]

    def fn_of(q):
        def fn(x):
            q.grad = None
            y = ((x + q) * 2.0).exp()
            y.sum().backward()
            nn.utils.clip_grad_value_([q], 0.5)
            return y

        return fn

    make = tensors("cpu", (4,), low=-1, high=1)
    eager, compiled = fn_of(p[0]), lp.compile(fn_of(p[1]))
    for _ in range(5):
        seed = int(RNG.integers(1 << 30))
        a, b = make(seed), make(seed)
        eager(*a), compiled(*b)
        np.testing.assert_allclose(host(b[0].grad), host(a[0].grad), **TOL["float64"])
        assert host(b[0].grad).max() > 0.5  # not clipped


@pytest.mark.parametrize("shapes", [((), ()), ((4, 3), (4, 3))])
def test_two_tensors_from_outside_in_one_backward_stretch(mode, shapes):
    """Leaves are told apart by identity (Tensor == compares values: equal 0-d
    parameters were once one leaf, and (4, 3) ones raised)."""
    def params():
        return [Tensor(np.full(s, 0.5), requires_grad=True) for s in shapes]

    def fn_of(a, b):
        def fn(x):
            a.grad = b.grad = None
            w = (b * a).tanh() * b * x
            w.sum().backward()
            return w

        return fn

    pe, pc = params(), params()
    eager, compiled = fn_of(*pe), lp.compile(fn_of(*pc))
    for _ in range(5):
        x = RNG.uniform(0.1, 0.9, size=shapes[0])
        eager(Tensor(x)), compiled(Tensor(x))
        for p, q in zip(pe, pc):
            np.testing.assert_allclose(host(q.grad), host(p.grad), **TOL["float64"])


def test_constants_a_loop_must_spell_and_a_rule_that_drops_its_gradient(mode):
    """inf, nan and ints beyond 64 bits in a compiled loop; round's gradient is zeros
    whatever comes in (a program once mistook a new value for the dropped input)."""
    def fn(x):
        y = lp.clip(x * 3.0, -math.inf, 2.0) + lp.round(x * 1.0) + (x * 2**70) * 1e-21 + 0.0 ** x
        y.sum().backward()
        return y

    check(fn, tensors("cpu", (6,)), mode)


def test_a_run_nothing_reads_is_left_out_and_sign_of_minus_zero():
    def fn(x):
        unused = (x * 2.0).exp()  # noqa: F841
        return 1 / lp.sign(x * 1.0)

    compiled = lp.compile(fn)
    for _ in range(4):
        out = compiled(Tensor(np.array([-0.0, 1.0, -2.0])))
    np.testing.assert_array_equal(host(out), [np.inf, 1.0, -1.0])


def test_a_call_with_autograd_grad_fuses_around_its_targets(device, flat):
    """Runs fuse in a call that takes its gradients with autograd.grad, but not the
    values it asks the gradient of (a fused stretch of the pass would not show it):
    flat, bit for bit; the target's gradient, a leaf's and an argument's."""
    w = Tensor(np.linspace(0.2, 0.8, 12).reshape(3, 4), requires_grad=True, device=device)

    def f(x):
        h = (x * w).tanh() * 0.5 + 0.25
        mid = h * h
        loss = ((mid - 0.1).exp() * 2.0).sum()
        return lp.concat([g.reshape(-1) for g in lp.autograd.grad(loss, [mid, w, x])])

    compiled = compare(f, tensors(device, (3, 4)), calls=4)
    plan = plan_of(compiled)
    assert plan.runs >= 1, compiled.explain()
    assert any(type(e).__name__ == "BackwardRun" for ev in plan.events if ev[0] == "autograd" for e in ev[2])
    assert "1 of them autograd.grad" in compiled.explain() and "in 2 forward runs" in compiled.explain()


@needs_numba
def test_a_call_with_autograd_grad_compiles_within_a_few_ulp():
    w = Tensor(np.linspace(0.2, 0.8, 12).reshape(3, 4), requires_grad=True)

    def f(x):
        loss = (((x * w).tanh() * 0.5 + 0.25) ** 2).sum()
        return lp.concat([g.reshape(-1) for g in lp.autograd.grad(loss, [w, x])])

    compiled = compare(f, tensors("cpu", (3, 4)), calls=5, exact=False)
    assert plan_of(compiled).kernels >= 2, compiled.explain()


def _permuted_then_flattened(x):
    y = x.permute(0, 2, 3, 1) * 0.5 + 0.1  # (a run whose input is a permuted view: eagerly, y is too)
    flat = y.flatten(1)  # eagerly a copy (y is not C-ordered); of a C-ordered y, a view
    flat.clamp_(0.0, 0.2)
    return y.sum(), flat.sum()


def _transposed_then_reshaped(x):
    y = x.T * 2.0 + 1.0  # (eagerly F-ordered)
    z = y.T.reshape(-1)  # eagerly a view of y; of a C-ordered y, a copy
    z.mul_(0.0)
    return y


@needs_numba
@pytest.mark.parametrize("fn, shape", [(_permuted_then_flattened, (2, 3, 4, 4)), (_transposed_then_reshaped, (3, 5))])
def test_a_compiled_run_lays_its_outputs_out_as_eager_does(fn, shape):
    """A run whose inputs are not in C's order (a permuted or transposed view) gives
    outputs laid out as eager's (NumPy's operations follow their inputs'), so a later
    ``reshape``/``flatten`` is a view or a copy as eagerly and an in-place change
    through it reaches what it reaches eagerly (the compiled loop's C-ordered outputs
    made ``y.sum()`` the clamped ``flat.sum()`` from the third call on, silently)."""
    compiled = lp.compile(fn)
    for i in range(6):
        x = Tensor(np.random.default_rng(i).normal(size=shape).astype(np.float32))
        for got, want in zip(np.atleast_1d(host(compiled(x))), np.atleast_1d(host(fn(x)))):
            np.testing.assert_array_equal(got, want)
    assert compiled.calls == {"traced": 1, "replayed": 5, "eager": 0}
    assert "compiled into one loop" in compiled.explain()


@needs_numba
def test_a_compiled_runs_broadcast_and_flipped_inputs_keep_the_loop():
    """Inputs laid out in C's order but for broadcast or reversed axes (a bias, ``x[::-1]``):
    NumPy's outputs are C-ordered then, and the compiled loop runs (as eager, up to
    Numba's ``exp``: an ulp)."""
    b = Tensor(np.arange(4.0))

    def fn(x):
        return ((x[::-1] * 2.0 + b) * 0.5).exp()

    compiled = lp.compile(fn)
    for i in range(5):
        x = Tensor(np.random.default_rng(i).normal(size=(3, 4)))
        out = compiled(x)
        np.testing.assert_allclose(host(out), host(fn(x)), rtol=1e-15, atol=0)
        assert host(out).flags.c_contiguous
    assert "compiled into one loop" in compiled.explain()


@needs_numba
@pytest.mark.parametrize("how", ["func.grad", "detached leaf"])
def test_a_run_read_only_by_a_leaf_made_in_the_call_replays(how):
    """A fused run's value read only by a leaf the call makes of it (``lp.func.grad``'s
    input, ``y.detach().requires_grad_()``): the run keeps it as an output (the replay
    read None, failed and ran every call eagerly, with no warning)."""
    def fn(x):
        y = (x * 2.0 + 1.0) * 0.5
        if how == "func.grad":
            return lp.func.grad(lambda t: (t.tanh() * t).sum())(y)
        z = y.detach().requires_grad_()
        (g,) = lp.autograd.grad((z.tanh() * z).sum(), [z])
        return g

    compiled = lp.compile(fn)
    for i in range(5):
        x = Tensor(np.random.default_rng(i).normal(size=(3, 4)))
        np.testing.assert_allclose(host(compiled(x)), host(fn(x)), rtol=1e-15, atol=1e-15)
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}


@needs_numba
def test_a_compiled_backward_program_run_op_by_op_gives_each_leaf_its_own_gradient():
    """A backward program whose inputs are not in C's order runs its operations one by
    one; where two leaves get one value (``(a + b) * c``: ``g * c`` for both), each
    ``.grad`` is an array of its own, as the compiled loop's are (a change of one left
    the other as it was eagerly)."""
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.normal(size=(3, 4)), requires_grad=True) for _ in range(2))

    def step(c):
        a.grad = b.grad = None
        ((a + b) * c).exp().sum().backward()

    compiled = lp.compile(step)
    for i in range(5):
        c = Tensor(np.asfortranarray(np.random.default_rng(i).normal(size=(3, 4))))
        compiled(c)
        got = host(a.grad).copy(), host(b.grad).copy()
        a.grad *= 2.0  # (in place: b's stays)
        np.testing.assert_array_equal(host(b.grad), got[1])
        step(c)
        np.testing.assert_allclose(got[0], host(a.grad), rtol=1e-15)
        np.testing.assert_allclose(got[1], host(b.grad), rtol=1e-15)
    assert "compiled into one loop" in compiled.explain() and compiled.calls["replayed"] == 4


def test_a_value_read_last_by_a_run_is_kept_until_the_run(mode):
    """h is read by the sum, then last by the run after it: the replay drops it only
    once the run has read it (dropped after the sum, the run read None and every call
    ran eagerly, with no warning)."""
    def fn(x, w):
        h = x @ w
        s = h.sum()
        return ((h * 2.0).tanh() * 0.5 + 1.0) * s

    def make(seed):
        return [x.detach() for x in tensors("cpu", (3, 4), (4, 5))(seed)]

    compiled = check(fn, make, mode)
    assert plan_of(compiled).runs == 1, compiled.explain()
    assert compiled.calls == {"traced": 1, "replayed": 4, "eager": 0}
