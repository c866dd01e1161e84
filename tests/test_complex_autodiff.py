"""Complex autodiff with PyTorch's convention (issue 28): a tensor's gradient is
``dL/dRe + i dL/dIm`` of a real loss ``L`` (the conjugate Wirtinger derivative times
2), a real input gets the real part. Each operation that has a complex rule is
compared with torch in value and gradient, on every device; the others raise
``TypeError`` in backward rather than drop a term; gradcheck handles complex inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor
from leanpass.tensor import apply

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(28)


def crand(*shape):
    return RNG.uniform(-1, 1, size=shape) + 1j * RNG.uniform(-1, 1, size=shape)


def rand(*shape):
    return RNG.uniform(0.5, 1.5, size=shape)


def real_loss(out, m, weights):
    """A real loss of every element of ``out`` (ours, ``m=lp``, or torch's)."""
    re, im = weights
    if m is lp:
        if out.dtype.kind == "c":
            return (lp.real(out) * re).sum() + (lp.imag(out) * im).sum()
        return (out * re).sum()
    if out.is_complex():
        return (out.real * re).sum() + (out.imag * im).sum()
    return (out * re).sum()


def same_as_torch(device, f, *arrays, constants=(), atol=1e-10):
    """``f(m, *tensors, *constants)`` with m = lp and m = torch: values and gradients agree."""
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours_c = [lp.asarray(c, device=device) for c in constants]
    theirs_c = [torch.tensor(c) for c in constants]
    out = f(lp, *ours, *ours_c)
    expected = f(torch, *theirs, *theirs_c)
    np.testing.assert_allclose(out.numpy(), expected.detach().resolve_conj().numpy(), atol=atol)
    weights = [RNG.uniform(0.5, 1.5, size=tuple(expected.shape)) for _ in range(2)]
    real_loss(out, lp, [lp.asarray(w, device=device) for w in weights]).backward()
    real_loss(expected, torch, [torch.tensor(w) for w in weights]).backward()
    for i, (a, t) in enumerate(zip(ours, theirs)):
        if t.grad is None:  # an input the function does not use
            assert not np.any(host(a.grad)), f"input {i}"
            continue
        assert str(a.grad.dtype).endswith(str(a.dtype)), f"input {i}: gradient of dtype {a.grad.dtype}"
        np.testing.assert_allclose(host(a.grad), t.grad.resolve_conj().numpy(), atol=atol, err_msg=f"input {i}")


CASES = {
    "add, sub": lambda m, z, w: z + w - 2.5 * z,
    "mul": lambda m, z, w: z * w * (0.5 - 1j),
    "div": lambda m, z, w: z / w + 1.0 / z - w / (2 + 1j),
    "power by a number": lambda m, z, w: z ** 3 + z ** 2 + 2.0 ** z,
    "neg, square": lambda m, z, w: -m.square(z),
    "exp, log": lambda m, z, w: m.exp(z) + m.log(w),
    "sqrt, reciprocal": lambda m, z, w: m.sqrt(z) * m.reciprocal(w),
    "trigonometric": lambda m, z, w: m.sin(z) * m.cos(w) + m.tan(z) - m.sinh(w) + m.cosh(z) * m.tanh(w),
    "inverse trigonometric": lambda m, z, w: m.asin(z) + m.acos(w) + m.atan(z) + m.asinh(w) + m.atanh(z),
    "expm1, log1p, log2, log10": lambda m, z, w: m.expm1(z) + m.log1p(w) + m.log2(z) + m.log10(w),
    "abs": lambda m, z, w: m.abs(z * w),
    "real, imag, conj": lambda m, z, w: m.real(z * w) * m.imag(z) + m.conj(w) * z,
    "sum, mean, prod": lambda m, z, w: (z * w).sum() + z.mean() * w.prod(),
    "running totals": lambda m, z, w: z.cumsum(0) * w.cumprod(0),
    "reshape, transpose, flip, getitem": lambda m, z, w: (
        m.flip(z.reshape(3, 2).T, **{"dims" if m is torch else "axis": (0,)}) * w.reshape(2, 3))[1, ::2],
    "concat, stack": lambda m, z, w: m.stack([m.cat([z, w]), m.cat([w, z])]),
    "matmul": lambda m, z, w: z.reshape(2, 3) @ w.reshape(3, 2),
    "where": lambda m, z, w: m.where(m.real(z) > 0, z, w),
}


@pytest.mark.parametrize("name", list(CASES))
def test_complex_gradients_are_torchs(device, name):
    same_as_torch(device, CASES[name], crand(6) + 0.1, crand(6) + 0.1)


def test_acosh_and_a_negative_base_to_a_complex_power(device):
    """Found by a review: acosh's rule g / sqrt(z*z - 1) has the wrong sign where Re z < 0
    (the derivative is 1 / (sqrt(z - 1) sqrt(z + 1))), and (-2) ** z needs the complex log."""
    same_as_torch(device, lambda m, z: m.acosh(z) + (-2.0) ** z, np.array([-2 + 0.1j, 0.5 + 0.5j, 1.5 - 0.3j]))


def test_real_tensors_into_complex_results_get_the_real_part(device):
    """A real tensor that meets a complex one (an operand, a constant, a cast, a
    joined tensor): the result is complex, the real tensor's gradient the real part of
    the complex one, as torch's."""
    def f(m, x, c):
        z = x * c + 1j * x + x.to(torch.complex128) if m is torch else x * c + 1j * x + x.astype("complex128")
        half = m.real(x * 0.5) * 1j
        both = m.cat([z, x.to(torch.complex128) if m is torch else x.astype("complex128")])
        chosen = m.where(m.real(m.cat([z, z])) > 1.0, m.cat([half, half]), m.cat([x, x]) * c[0])
        return (both + chosen) * m.exp(m.cat([c, c]))
    same_as_torch(device, f, rand(4), constants=[crand(4)])


def test_linear_algebra_with_complex_matrices(device):
    a = crand(3, 3) + 3 * np.eye(3)
    b = crand(3, 2)
    same_as_torch(device, lambda m, a, b: m.linalg.solve(a, b) + m.linalg.inv(a) @ b, a, b, atol=1e-9)
    same_as_torch(device, lambda m, a, b: m.tensordot(a, b, dims=1) if m is torch else lp.tensordot(a, b, axes=1),
                  a, b)
    same_as_torch(device, lambda m, a, b: lp.linalg.outer(a[0], b[:, 0]) if m is lp else m.outer(a[0], b[:, 0]), a, b)


@pytest.mark.parametrize("order", [2, 1, 3, 0.5, float("inf"), -float("inf")])
def test_vector_norms_of_complex_vectors(device, order):
    same_as_torch(device, lambda m, z: m.linalg.vector_norm(z, ord=order, **{"dim" if m is torch else "axis": 1}),
                  crand(3, 4))


def test_determinant_and_frobenius_norm_of_complex_matrices(device):
    same_as_torch(device, lambda m, a: m.linalg.det(a) * (1 - 2j) + m.linalg.matrix_norm(a), crand(3, 3) + np.eye(3),
                  atol=1e-9)


def test_slogdet_of_complex_matrices(device):
    """Both outputs: the sign (a unit complex number) and logabsdet pass gradients."""
    same_as_torch(device, lambda m, a: m.linalg.slogdet(a)[1] + m.real(m.linalg.slogdet(a)[0] * (0.3 - 2j)),
                  crand(3, 3) + np.eye(3), atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.slogdet(a)[0] * 1.5, crand(3, 3) + np.eye(3), atol=1e-9)


def _hermitian(m, z):
    """A Hermitian positive-definite matrix from any square ``z``."""
    return z @ (z.mH if m is torch else lp.conj(lp.matrix_transpose(z))) + 3 * (torch.eye(3) if m is torch
                                                                           else lp.eye(3, device=z.device))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_of_hermitian_matrices(device, upper):
    same_as_torch(device, lambda m, z: m.linalg.cholesky(_hermitian(m, z), upper=upper), crand(3, 3), atol=1e-9)


def test_eigh_of_hermitian_matrices(device):
    """Eigenvalues, and functions of the eigenvectors that do not depend on their
    phases (abs): torch's gradients."""
    def f(m, z):
        w, v = m.linalg.eigh(_hermitian(m, z))
        return w * 0.7 + m.abs(v).sum() + m.linalg.eigvalsh(_hermitian(m, z)) * 0.3
    same_as_torch(device, f, crand(3, 3), atol=1e-9)


def test_eigh_refuses_a_loss_that_depends_on_the_eigenvectors_phases(device):
    z = Tensor(crand(3, 3), requires_grad=True, device=device)
    _, v = lp.linalg.eigh(_hermitian(lp, z))
    with pytest.raises(RuntimeError, match="defined up to a phase"):
        lp.real(v).sum().backward()


SHAPES = [(3, 3), (4, 2), (2, 4), (2, 3, 3)]  # square, tall, wide, a stack


def _svd_loss(m, a, full):
    """A loss of U, S and Vh together that does not depend on the singular vectors'
    phases: U diag(S) Vh (which is A), U Vh, |U| and |Vh|."""
    u, s, vh = m.linalg.svd(a, full_matrices=full)
    k = s.shape[-1]
    u, vh = u[..., :k], vh[..., :k, :]
    pairs = (u @ vh) * (0.3 - 0.5j)
    return (pairs + (u * (s[..., None, :] + 0j)) @ vh).sum(-1) + m.abs(u).sum(-1)[..., :1] * m.abs(vh).sum(-2)[..., :1]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("full", [False, True])
def test_svd_of_complex_matrices(device, shape, full):
    """The gradients of U, S and Vh, each alone and all together: torch's."""
    a = crand(*shape)
    same_as_torch(device, lambda m, a: _svd_loss(m, a, full), a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.abs(m.linalg.svd(a, full_matrices=full)[0]) ** 3, a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.abs(m.linalg.svd(a, full_matrices=full)[2]) ** 3, a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.svd(a, full_matrices=full)[1] * 1.5, a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.svdvals(a) ** 2, a, atol=1e-9)


@pytest.mark.parametrize("which", [0, 2, "both"])
def test_svd_refuses_a_loss_that_depends_on_the_singular_vectors_phases(device, which):
    """A loss of U alone, of Vh alone, or of both, that changes when a column of U and
    the matching row of Vh turn by one phase: refused, as torch does, and nothing is
    written (U Vh together, which does not depend on it, passes above)."""
    z = Tensor(crand(3, 3), requires_grad=True, device=device)
    result = lp.linalg.svd(z)
    loss = lp.real(result[0]).sum() if which == 0 else lp.real(result[2]).sum() if which == 2 else lp.real(
        result[0][:, :1] * result[2][:1, :]).sum() * 0 + lp.real(result[0]).sum() + lp.imag(result[2]).sum()
    with pytest.raises(RuntimeError, match="defined up to a phase"):
        loss.backward()
    assert not np.any(host(z.grad))
    t = torch.tensor(z.numpy(), requires_grad=True)
    u, _, vh = torch.linalg.svd(t)
    with pytest.raises(RuntimeError, match="phase"):
        (u.real.sum() if which == 0 else vh.real.sum() if which == 2 else u.real.sum() + vh.imag.sum()).backward()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qr_and_pinv_of_complex_matrices(device, shape):
    """Q and R (R's diagonal is real: only the imaginary part of Q^H dQ's diagonal is
    free, which the rule halves), and the pseudo-inverse: torch's."""
    a = crand(*shape)
    same_as_torch(device, lambda m, a: m.linalg.qr(a)[0] * (1 + 2j), a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.qr(a)[1] * (0.5 - 1j), a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.qr(a)[0].sum(-1) + m.linalg.qr(a)[1].sum(-2)[..., :1], a, atol=1e-9)
    same_as_torch(device, lambda m, a: m.linalg.pinv(a), a, atol=1e-9)


def test_power_and_sign_of_complex_tensors(device):
    """z ** w is holomorphic in both (a real negative base takes the complex log; 0 **
    w has no slope in w for real w >= 0, as torch); sign is torch's sgn, z / |z| (0 at
    0), which is not holomorphic."""
    z, w = crand(5) + 0.1, crand(5)
    same_as_torch(device, lambda m, z, w: z ** w + w ** 2.5, z, w)
    same_as_torch(device, lambda m, z, x: z ** x + x ** z, z, np.array([-1.5, 0.5, 2.0, -0.3, 1.2]))
    same_as_torch(device, lambda m, z, x: (x + 0j) ** z, z, np.array([0.0, 0.5, 2.0, 0.0, 1.2]))
    # a complex Python exponent (its test for 0 is a bool, which array_api_strict's where refused)
    same_as_torch(device, lambda m, z: z ** (1 + 1j) + z ** 0j + z ** (0.5 + 0j), z)
    same_as_torch(device, lambda m, z: (m.sgn(z) if m is torch else lp.sign(z)) * (1 - 0.5j) * z,
                  np.array([1 + 1j, 0j, -2 + 0.5j, 0.3j]))


def test_layers_of_complex_tensors(device):
    """Linear maps differentiate complex input as torch does: linear, conv2d,
    conv_transpose2d, tril/triu, sigmoid; rounding passes 0."""
    F, tF = lp.nn.functional, torch.nn.functional
    same_as_torch(device, lambda m, x, w, b: (F if m is lp else tF).linear(x, w, b), crand(4, 3), crand(5, 3), crand(5))
    same_as_torch(device, lambda m, x, w: (F if m is lp else tF).conv2d(x, w, padding=1, stride=2), crand(2, 3, 5, 5),
                  crand(4, 3, 3, 3))
    same_as_torch(device, lambda m, x, w: (F if m is lp else tF).conv_transpose2d(x, w, stride=2), crand(1, 2, 3, 3),
                  crand(2, 3, 3, 3))
    same_as_torch(device, lambda m, a: m.tril(a) + m.triu(a, **{"diagonal" if m is torch else "k": 1}) * 2j,
                  crand(3, 3))
    same_as_torch(device, lambda m, z: m.sigmoid(z) if m is torch else F.sigmoid(z), crand(5))
    z = Tensor(crand(4), requires_grad=True, device=device)
    lp.real(lp.round(z * 3)).sum().backward()
    assert not np.any(host(z.grad))


def test_vecdot_conjugates_its_first_argument(device):
    """vecdot(a, b) = sum(conj(a) * b): its gradient in a is conj(g) b, in b g a (torch's)."""
    same_as_torch(device, lambda m, a, b: m.linalg.vecdot(a, b), crand(2, 3), crand(2, 3))
    same_as_torch(device, lambda m, a, b: m.linalg.vecdot(a * (1 + 0j), b * (1 + 1j)), rand(3), crand(3))


def test_an_op_without_a_complex_rule_raises_in_backward_and_changes_nothing(device):
    """Every op that takes complex input has a complex rule now (the public functions
    that have none refuse complex input in the forward); the engine's last guard stays:
    an op whose record says nothing about complex values (``Op.complex`` None) raises
    TypeError naming it in a backward that reaches it with one, and no .grad is written."""
    from leanpass._node import run1
    from leanpass.ops import Op

    def double(be, a):
        return a * 2, lambda g: (g * 2,)

    untold = Op("double", double, saves=(), saves_out=False)
    z = Tensor(crand(3, 3), requires_grad=True, device=device)
    x = Tensor(rand(3), requires_grad=True, device=device)
    out = lp.real(run1(untold, z)).sum() + (x * x).sum()
    with pytest.raises(TypeError, match="backward through 'double': complex gradients are not supported"):
        out.backward()
    assert not np.any(host(z.grad)) and not np.any(host(x.grad))  # .grad reads as zeros: nothing was written


F = lp.nn.functional
REAL_ONLY = {
    "relu": F.relu, "gelu": lambda z: F.gelu(z, approximate="tanh"), "softmax": lambda z: F.softmax(z, -1),
    "log_softmax": lambda z: z.log_softmax(-1), "layer_norm": lambda z: F.layer_norm(z, (3,)),
    "mse_loss": lambda z: F.mse_loss(z, z), "batch_norm": lambda z: F.batch_norm(z, None, None, training=True),
    "group_norm": lambda z: F.group_norm(z, 1),
    "cross_entropy": lambda z: F.cross_entropy(z, lp.asarray([0, 1], device=z.device)),
}


@pytest.mark.parametrize("name, call", list(REAL_ONLY.items()), ids=list(REAL_ONLY))
def test_functions_pytorch_defines_for_real_numbers_refuse_complex_input(device, name, call):
    """Where PyTorch refuses complex input, so does LeanPass, in the forward, naming the
    function (its real arithmetic would give a complex result that means nothing)."""
    z = Tensor(crand(2, 3), requires_grad=True, device=device)
    with pytest.raises(TypeError, match=f"{name}: not defined for complex input"):
        call(z)
    torch_call = {"relu": torch.relu, "softmax": lambda t: torch.softmax(t, -1),
                  "mse_loss": lambda t: torch.nn.functional.mse_loss(t, t)}
    if name in torch_call:
        with pytest.raises((RuntimeError, NotImplementedError)):
            torch_call[name](torch.tensor(crand(2, 3)))


def test_a_complex_output_needs_a_gradient_to_start_from(device):
    z = Tensor(crand(1), requires_grad=True, device=device)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for real scalar outputs"):
        (z * 2).sum().backward()
    (z * 2).sum().backward(lp.asarray(np.array(1 - 1j), device=device))  # as torch: d/dz of conj-weighted
    t = torch.tensor(z.numpy(), requires_grad=True)
    (t * 2).sum().backward(torch.tensor(1 - 1j, dtype=torch.complex128))
    np.testing.assert_allclose(host(z.grad), t.grad.numpy())


def test_gradcheck_takes_complex_inputs_and_outputs(device):
    """gradcheck perturbs the real and the imaginary part of each complex input, and
    checks both parts of a complex output; a wrong complex rule fails it."""
    z = Tensor(crand(3), requires_grad=True, device=device)
    x = Tensor(rand(3), requires_grad=True, device=device)
    assert lp.gradcheck(lambda z, x: lp.exp(z) * x + lp.abs(z), [z, x])
    assert lp.gradgradcheck(lambda z: lp.abs(z * z * lp.sin(z)), [z])

    def wrong(be, a):  # the real rule's shape, without the conjugate: wrong for complex input
        return a * a, lambda g: (g * 2 * a,)

    with pytest.raises(lp.GradcheckError):
        lp.gradcheck(lambda z: apply(wrong, z), [z])


# Each way a complex value can first enter a graph, alone in a fresh interpreter: the
# engine runs its complex rules only once one has (``leanpass._graph.node.COMPLEX``),
# so a way that did not say so would run the real rules: conjugates missing, silently.
FIRST_COMPLEX = {
    "constructor": ("z = lp.Tensor([1 + 2j], requires_grad=True); lp.real(z * z).sum().backward(); g = z.grad",
                    [2 - 4j]),
    "requires_grad_": ("z = lp.asarray([1 + 2j]); z.requires_grad_(); lp.real(z * z).sum().backward(); g = z.grad",
                       [2 - 4j]),
    "complex operand": ("x = lp.Tensor([1.5], requires_grad=True); c = lp.asarray([1 + 2j]); "
                        "lp.imag((x * c) * (x * c)).sum().backward(); g = x.grad", [12.0]),
    "complex number": ("x = lp.Tensor([1.5], requires_grad=True); lp.imag((x * (1 + 2j)) ** 2).sum().backward(); "
                       "g = x.grad", [12.0]),
    "astype": ("x = lp.Tensor([1.5], requires_grad=True); z = x.astype('complex128') * (1 + 2j); "
               "lp.imag(z * z).sum().backward(); g = x.grad", [12.0]),
    "fft": ("x = lp.Tensor([1.5, -0.5], requires_grad=True); f = lp.fft.fft(x) * (1 + 2j); "
            "lp.imag(f * f).sum().backward(); g = x.grad", [24.0, -8.0]),
    "where": ("x = lp.Tensor([1.5], requires_grad=True); "
              "w = lp.where(lp.asarray([True]), x, lp.asarray([1j])) * (1 + 2j); "
              "lp.imag(w * w).sum().backward(); g = x.grad", [12.0]),
    "concat": ("x = lp.Tensor([1.5], requires_grad=True); w = lp.concat([x, lp.asarray([1j])]) * (1 + 2j); "
               "lp.imag(w * w).sum().backward(); g = x.grad", [12.0]),
    ".data": ("z = lp.Tensor([1.0], requires_grad=True); z.data = np.array([1 + 2j]); "
              "lp.real(z * z).sum().backward(); g = z.grad", [2 - 4j]),
    "load": ("lp.save(lp.Tensor([1 + 2j], requires_grad=True), PATH); z = lp.load(PATH); "
             "lp.real(z * z).sum().backward(); g = z.grad", [2 - 4j]),
    # found by a review: a 0-d result (a NumPy scalar), an in-place change of a complex
    # tensor by a real one, a reduction to a complex dtype, a custom op's later input
    "vecdot of vectors": ("x = lp.Tensor([1.5, -0.5], requires_grad=True); "
                          "w = lp.vecdot(x, lp.asarray([1 + 1j, 2 - 1j])); "
                          "lp.imag(w * w).backward(); g = x.grad", [5.0, 7.0]),
    "in place": ("x = lp.Tensor([1.5, -0.5], requires_grad=True); b = lp.asarray([1j, 2 + 1j]); b += x; "
                 "lp.imag(b * b).sum().backward(); g = x.grad", [2.0, 2.0]),
    "sum to complex": ("x = lp.Tensor([1.5, -0.5], requires_grad=True); "
                       "w = lp.sum(x, dtype=lp.complex128) * (1 + 1j); "
                       "lp.imag(w * w).backward(); g = x.grad", [4.0, 4.0]),
    "running sum to complex": ("x = lp.Tensor([1.5, -0.5], requires_grad=True); "
                               "w = lp.cumulative_sum(x, dtype=lp.complex128) * (1 + 1j); "
                               "lp.imag(w * w).sum().backward(); g = x.grad", [10.0, 4.0]),
    "custom op": ("from leanpass.tensor import apply\n"
                  "def f(be, c, a, needs=None):\n"
                  "    return c * a, lambda g: (None, be.xp.real(be.xp.conj(c) * g))\n"
                  "x = lp.Tensor([1.5, -0.5], requires_grad=True); w = apply(f, lp.asarray([1 + 1j, 2 - 1j]), x)\n"
                  "lp.imag(w * w).sum().backward(); g = x.grad", [6.0, 4.0]),
}


@pytest.mark.parametrize("route", list(FIRST_COMPLEX))
def test_every_way_a_complex_value_first_enters_a_graph_turns_the_complex_rules_on(route, tmp_path):
    import subprocess
    import sys

    code, expected = FIRST_COMPLEX[route]
    program = ("import numpy as np, leanpass as lp\n"
               f"PATH = {str(tmp_path / 'z.lp')!r}\n{code}\nprint(repr(np.asarray(g).tolist()))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(eval(done.stdout.strip()), expected, err_msg=route)  # noqa: S307 - our own output
