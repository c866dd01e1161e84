"""Linear algebra: ``leanpass.linalg`` and the main namespace's ``tensordot`` and
``vecdot``. Forward values against NumPy, gradients against finite differences
(leanpass.gradcheck) with batched and broadcast shapes, dtypes, and bad input, on
every device."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import other_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leanpass as lp
from leanpass import Tensor, gradcheck
from leanpass import linalg as L
from leanpass.backends import get_backend

RNG = np.random.default_rng(2024)
SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                    max_examples=25)


def rand(*shape):
    return RNG.uniform(-1.0, 1.0, size=shape)


def well_conditioned(*shape):
    """Random square matrices with a dominant diagonal: invertible, far from singular."""
    n = shape[-1]
    return rand(*shape) + 3.0 * np.eye(n)


def spread_symmetric(*shape):
    """Symmetric matrices with eigenvalues 1, 2, ..., n (well separated)."""
    n = shape[-1]
    q, _ = np.linalg.qr(rand(*shape))
    return (q * np.arange(1.0, n + 1)[..., None, :]) @ np.swapaxes(q, -1, -2)


def leaf(device, array):
    return Tensor(array, requires_grad=True, device=device)


def arr(device, array):
    return lp.asarray(np.asarray(array), device=device)


def host(device, array):
    return get_backend(device).to_host(array)


def gauge_free(v):
    """Products that do not change when a column of ``v`` flips sign (eigen/singular vectors)."""
    return v[..., :1, :] * v


def gauge_free_rows(v):
    return v[..., :, :1] * v


# ---- gradients --------------------------------------------------------------------------------

# name -> (function of tensors, input arrays). Inputs are well conditioned: invertible,
# symmetric positive definite where needed (built inside the function, so finite
# differences see a symmetric matrix), with distinct eigen/singular values.
GRADIENTS = {
    "inv": (L.inv, (well_conditioned(2, 3, 3),)),
    "solve_matrix": (L.solve, (well_conditioned(3, 3), rand(3, 2))),
    "solve_vector": (L.solve, (well_conditioned(2, 3, 3), rand(3))),
    "solve_broadcast": (L.solve, (well_conditioned(2, 1, 3, 3), rand(4, 3, 2))),
    "solve_broadcast_b": (L.solve, (well_conditioned(3, 3), rand(2, 3, 1))),
    "det": (L.det, (well_conditioned(2, 3, 3),)),
    "det_negative": (L.det, (-well_conditioned(3, 3),)),
    "slogdet": (lambda a: L.slogdet(a).logabsdet, (rand(2, 3, 3) + np.diag([2.0, -3.0, 4.0]),)),
    "cholesky": (lambda a: L.cholesky(a @ a.mT + lp.eye(3, device=a.device)), (rand(2, 3, 3),)),
    "cholesky_upper": (lambda a: L.cholesky(a @ a.mT + lp.eye(3, device=a.device), upper=True), (rand(3, 3),)),
    "eigvalsh": (lambda a: L.eigvalsh((a + a.mT) / 2), (spread_symmetric(2, 3, 3),)),
    "eigh_values": (lambda a: L.eigh((a + a.mT) / 2).eigenvalues, (spread_symmetric(3, 3),)),
    "eigh_vectors": (lambda a: gauge_free(L.eigh((a + a.mT) / 2).eigenvectors), (spread_symmetric(2, 4, 4),)),
    "svdvals_tall": (L.svdvals, (rand(2, 4, 3),)),
    "svdvals_wide": (L.svdvals, (rand(3, 5),)),
    "svd_u_tall": (lambda a: gauge_free(L.svd(a, full_matrices=False).U), (rand(2, 4, 3),)),
    "svd_vh_tall": (lambda a: gauge_free_rows(L.svd(a, full_matrices=False).Vh), (rand(4, 3),)),
    "svd_u_wide": (lambda a: gauge_free(L.svd(a, full_matrices=False).U), (rand(3, 5),)),
    "svd_vh_wide": (lambda a: gauge_free_rows(L.svd(a, full_matrices=False).Vh), (rand(2, 3, 5),)),
    "svd_full_matrices": (lambda a: gauge_free(L.svd(a).U[..., :3]), (rand(4, 3),)),
    "svd_product": (lambda a: (lambda r: (r.U * r.S[..., None, :]) @ r.Vh)(L.svd(a, full_matrices=False)),
                    (rand(3, 4),)),
    "qr_q_tall": (lambda a: L.qr(a).Q, (rand(2, 4, 3),)),
    "qr_r_tall": (lambda a: L.qr(a).R, (rand(4, 3),)),
    "qr_square": (lambda a: L.qr(a).Q + L.qr(a).R, (well_conditioned(3, 3),)),
    "qr_wide": (lambda a: L.qr(a).Q * 2.0 + L.qr(a).R[..., :2], (well_conditioned(2, 4, 4)[..., :2, :],)),
    "qr_complete_wide": (lambda a: L.qr(a, mode="complete").R, (rand(2, 4),)),
    "pinv_tall": (L.pinv, (rand(2, 4, 3),)),
    "pinv_wide": (L.pinv, (rand(3, 5),)),
    "matrix_power_3": (lambda a: L.matrix_power(a, 3), (rand(2, 3, 3),)),
    "matrix_power_1": (lambda a: L.matrix_power(a, 1), (rand(3, 3),)),
    "matrix_power_-2": (lambda a: L.matrix_power(a, -2), (well_conditioned(3, 3),)),
    "trace": (L.trace, (rand(2, 3, 4),)),
    "trace_offset": (lambda a: L.trace(a, offset=-1), (rand(3, 4),)),
    "diagonal": (L.diagonal, (rand(2, 3, 4),)),
    "diagonal_above": (lambda a: L.diagonal(a, offset=2), (rand(3, 4),)),
    "diagonal_below": (lambda a: L.diagonal(a, offset=-1), (rand(2, 4, 3),)),
    "cross": (L.cross, (rand(4, 3), rand(3))),
    "cross_axis": (lambda a, b: L.cross(a, b, axis=-2), (rand(3, 2), rand(2, 3, 1))),
    "outer": (L.outer, (rand(3), rand(4))),
    "matmul": (L.matmul, (rand(2, 3, 4), rand(4, 2))),
    "matrix_transpose": (L.matrix_transpose, (rand(2, 3, 4),)),
    "tensordot_2": (lp.tensordot, (rand(2, 3, 4), rand(3, 4, 5))),
    "tensordot_0": (lambda a, b: lp.tensordot(a, b, axes=0), (rand(3), rand(2, 2))),
    "tensordot_pairs": (lambda a, b: L.tensordot(a, b, axes=([2, 0], [0, 2])), (rand(2, 3, 4), rand(4, 5, 2))),
    "vecdot": (lp.vecdot, (rand(2, 3, 4), rand(4))),
    "vecdot_axis": (lambda a, b: L.vecdot(a, b, axis=-2), (rand(2, 3, 4), rand(3, 1))),
}
for _ord in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
    GRADIENTS[f"matrix_norm_{_ord}"] = (lambda a, o=_ord: L.matrix_norm(a, ord=o), (rand(2, 3, 4),))
GRADIENTS["matrix_norm_keepdims"] = (lambda a: L.matrix_norm(a, ord=1, keepdims=True), (rand(2, 4, 3),))
for _ord in (2, 1, -1, -2, 3, 0.5, 1.5, -0.5, math.inf, -math.inf):
    GRADIENTS[f"vector_norm_{_ord}"] = (lambda a, o=_ord: L.vector_norm(a, ord=o, axis=(0, -1)), (rand(2, 3, 4),))
GRADIENTS["vector_norm_all"] = (lambda a: L.vector_norm(a, keepdims=True), (rand(2, 3),))
del _ord


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradcheck(device, name):
    fn, arrays = GRADIENTS[name]
    assert gradcheck(fn, [leaf(device, a) for a in arrays])


def test_det_gradient_of_a_singular_matrix_is_its_cofactor_matrix(device):
    a = leaf(device, [[1.0, 2.0], [2.0, 4.0]])
    L.det(a).backward()
    np.testing.assert_allclose(host(device, a.grad), [[4.0, -2.0], [-2.0, 1.0]], atol=1e-12)


def test_slogdet_sign_passes_no_gradient(device):
    x = well_conditioned(3, 3) * np.array([1.0, -1.0, 1.0])
    a = leaf(device, x)
    sign, logabsdet = L.slogdet(a)
    (sign * logabsdet).backward()
    expected = np.sign(np.linalg.det(x)) * np.linalg.inv(x).T
    np.testing.assert_allclose(host(device, a.grad), expected, rtol=1e-10)


def test_vector_norm_ord_0_passes_no_gradient(device):
    a = leaf(device, [1.0, 0.0, -2.0])
    out = L.vector_norm(a, ord=0)
    assert out.item() == 2.0
    out.backward()
    np.testing.assert_array_equal(host(device, a.grad), [0.0, 0.0, 0.0])


def test_norm_gradients_at_zero_and_ties(device):
    a = leaf(device, [0.0, 0.0])
    L.vector_norm(a).backward()
    np.testing.assert_array_equal(host(device, a.grad), [0.0, 0.0])
    b = leaf(device, [3.0, -3.0, 1.0])
    L.vector_norm(b, ord=math.inf).backward()
    np.testing.assert_allclose(host(device, b.grad), [0.5, -0.5, 0.0])


def test_matrix_power_0_is_the_identity_with_zero_gradient(device):
    a = leaf(device, rand(2, 3, 3))
    out = L.matrix_power(a, 0)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(np.eye(3), (2, 3, 3)))
    assert out.requires_grad
    out.sum().backward()
    np.testing.assert_array_equal(host(device, a.grad), np.zeros((2, 3, 3)))


def test_qr_complete_of_a_tall_matrix_is_not_differentiable(device):
    a = leaf(device, rand(4, 2))
    q, r = L.qr(a, mode="complete")
    assert q.shape == (4, 4) and r.shape == (4, 2)
    with pytest.raises(RuntimeError, match="mode='reduced'"):
        q.sum().backward()


def test_outputs_of_a_decomposition_share_a_version(device):
    """Backward rules of eigh read both outputs: changing one in place makes the
    backward of the other raise instead of returning a wrong gradient."""
    a = leaf(device, spread_symmetric(3, 3))
    w, v = L.eigh(a)
    loss = v.sum()  # the eigenvectors' backward reads the eigenvalues
    w += 1.0
    with pytest.raises(RuntimeError, match="eigh"):
        loss.backward()


def test_float32_stays_float32(device):
    a = leaf(device, well_conditioned(3, 3).astype(np.float32))
    b = leaf(device, rand(3).astype(np.float32))
    for out in (L.inv(a), L.det(a), L.solve(a, b), L.svdvals(a), L.eigh((a + a.mT) / 2).eigenvectors,
                L.vector_norm(a, ord=3), L.matrix_norm(a, ord="nuc"), L.qr(a).R, L.pinv(a), L.cholesky(a @ a.mT),
                lp.vecdot(a, b), lp.tensordot(a, b, axes=1), L.cross(a, b), L.outer(b, b)):
        assert out.dtype == lp.float32, out._op
        out.sum().backward()
    assert a.grad.dtype == get_backend(device).dtype("float32")
    assert b.grad.dtype == get_backend(device).dtype("float32")


def test_mixed_float_dtypes_give_gradients_in_each_dtype(device):
    a = leaf(device, well_conditioned(3, 3).astype(np.float32))
    b = leaf(device, rand(3, 2))
    x = L.solve(a, b)
    assert x.dtype == lp.float64
    x.sum().backward()
    assert a.grad.dtype == get_backend(device).dtype("float32")
    assert b.grad.dtype == get_backend(device).dtype("float64")


# ---- forward values ---------------------------------------------------------------------------


def test_forward_against_numpy(device):
    a = well_conditioned(2, 3, 3)
    s = spread_symmetric(2, 3, 3)
    m = rand(2, 4, 3)
    b = rand(2, 3, 2)
    t = lambda x: arr(device, x)  # noqa: E731
    close = np.testing.assert_allclose
    close(L.inv(t(a)).numpy(), np.linalg.inv(a), rtol=1e-10)
    close(L.det(t(a)).numpy(), np.linalg.det(a), rtol=1e-10)
    close(L.solve(t(a), t(b)).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    close(L.solve(t(a), t(b[0, :, 0])).numpy(), np.linalg.solve(a, b[0, :, :1])[..., 0], rtol=1e-10)
    sign, logabsdet = L.slogdet(t(a))
    close(sign.numpy(), np.linalg.slogdet(a)[0])
    close(logabsdet.numpy(), np.linalg.slogdet(a)[1], rtol=1e-10)
    close(L.cholesky(t(s)).numpy(), np.linalg.cholesky(s), rtol=1e-10)
    close(L.cholesky(t(s), upper=True).numpy(), np.swapaxes(np.linalg.cholesky(s), -1, -2), rtol=1e-10)
    close(L.eigvalsh(t(s)).numpy(), np.linalg.eigvalsh(s), rtol=1e-10)
    w, v = L.eigh(t(s))
    close(w.numpy(), np.linalg.eigvalsh(s), rtol=1e-10)
    close((v.numpy() * w.numpy()[..., None, :]) @ np.swapaxes(v.numpy(), -1, -2), s, atol=1e-10)
    u, sv, vh = L.svd(t(m))
    assert u.shape == (2, 4, 4) and sv.shape == (2, 3) and vh.shape == (2, 3, 3)
    close(sv.numpy(), np.linalg.svd(m, compute_uv=False), rtol=1e-10)
    u, sv, vh = L.svd(t(m), full_matrices=False)
    close((u.numpy() * sv.numpy()[..., None, :]) @ vh.numpy(), m, atol=1e-10)
    close(L.svdvals(t(m)).numpy(), np.linalg.svd(m, compute_uv=False), rtol=1e-10)
    q, r = L.qr(t(m))
    assert q.shape == (2, 4, 3) and r.shape == (2, 3, 3)
    close(q.numpy() @ r.numpy(), m, atol=1e-10)
    q, r = L.qr(t(m), mode="complete")
    assert q.shape == (2, 4, 4) and r.shape == (2, 4, 3)
    close(L.pinv(t(m)).numpy(), np.linalg.pinv(m), rtol=1e-8)
    close(L.pinv(t(m), rtol=0.5).numpy(), np.linalg.pinv(m, rcond=0.5), rtol=1e-8)
    close(L.matrix_power(t(a), 5).numpy(), np.linalg.matrix_power(a, 5), rtol=1e-10)
    close(L.matrix_power(t(a), -3).numpy(), np.linalg.matrix_power(a, -3), rtol=1e-10)
    close(L.trace(t(m), offset=1).numpy(), np.trace(m, offset=1, axis1=-2, axis2=-1), rtol=1e-12)
    close(L.diagonal(t(m), offset=-1).numpy(), np.diagonal(m, offset=-1, axis1=-2, axis2=-1))
    close(L.outer(t(b[0, :, 0]), t(m[0, 0])).numpy(), np.outer(b[0, :, 0], m[0, 0]))
    close(L.cross(t(m), t(m[..., ::-1])).numpy(), np.cross(m, m[..., ::-1]), rtol=1e-12)
    close(L.cross(t(a), t(m[0, :3]), axis=-2).numpy(), np.cross(a, m[0, :3], axis=-2), rtol=1e-12)
    close(lp.vecdot(t(m), t(m[0, 0])).numpy(), (m * m[0, 0]).sum(-1), rtol=1e-12)
    close(lp.tensordot(t(m), t(b), axes=([0, 2], [0, 1])).numpy(), np.tensordot(m, b, axes=([0, 2], [0, 1])))
    close(L.tensordot(t(m), t(a[0]), axes=1).numpy(), np.tensordot(m, a[0], axes=1), rtol=1e-12)
    for ord_ in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        close(L.matrix_norm(t(m), ord=ord_).numpy(), np.linalg.norm(m, ord=ord_, axis=(-2, -1)), rtol=1e-10)
    close(L.matrix_norm(t(m), keepdims=True).numpy(), np.linalg.norm(m, axis=(-2, -1), keepdims=True))
    for ord_ in (2, 1, 0, -1, -2, 3, 0.5, np.inf, -np.inf):
        close(L.vector_norm(t(m), ord=ord_, axis=1).numpy(), np.linalg.norm(m, ord=ord_, axis=1), rtol=1e-10)
    close(L.vector_norm(t(m)).numpy(), np.linalg.norm(m.ravel()), rtol=1e-12)


def test_results_are_named_tuples(device):
    x = arr(device, spread_symmetric(3, 3))
    assert L.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert L.qr(x)._fields == ("Q", "R")
    assert L.slogdet(x)._fields == ("sign", "logabsdet")
    assert L.svd(x)._fields == ("U", "S", "Vh")
    result = L.svd(x)
    assert result.U is result[0] and result.S is result[1] and result.Vh is result[2]


def test_matrix_rank_is_int64_without_gradient(device):
    x = np.ones((2, 3, 3))
    x[1] = np.eye(3)
    a = leaf(device, x)
    rank = L.matrix_rank(a)
    assert rank.dtype == lp.int64 and not rank.requires_grad
    np.testing.assert_array_equal(rank.numpy(), [1, 3])
    rank = L.matrix_rank(a, rtol=arr(device, [0.1, 2.0]))
    np.testing.assert_array_equal(rank.numpy(), [1, 0])


def test_integer_and_complex_inputs(device):
    ints = arr(device, np.arange(12, dtype=np.int32).reshape(3, 4))
    assert L.trace(ints).dtype == lp.int64 and L.trace(ints).item() == 15
    assert L.trace(ints, dtype=lp.float32).dtype == lp.float32
    assert L.trace(arr(device, np.ones((2, 2), np.uint8))).dtype == lp.uint64
    np.testing.assert_array_equal(L.diagonal(ints, offset=1).numpy(), [1, 6, 11])
    assert L.diagonal(ints, offset=9).shape == (0,)
    np.testing.assert_array_equal(lp.tensordot(ints, ints, axes=([0, 1], [0, 1])).numpy(), (np.arange(12) ** 2).sum())
    np.testing.assert_array_equal(L.outer(arr(device, [1, 2]), arr(device, [3, 4])).numpy(), [[3, 4], [6, 8]])
    h = np.array([[2.0, 1j], [-1j, 3.0]])
    w, v = L.eigh(arr(device, h))
    assert w.dtype == lp.float64 and v.dtype == lp.complex128
    np.testing.assert_allclose(w.numpy(), np.linalg.eigvalsh(h))
    assert L.svdvals(arr(device, h)).dtype == lp.float64
    assert L.vector_norm(arr(device, h)).dtype == lp.float64
    assert complex(L.vecdot(arr(device, [1j, 2j, 3j]), arr(device, [1, 2j, 3]))) == 4 - 10j


# ---- properties ---------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_vector_norm_matches_numpy(device, data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple), label="shape")
    axes = data.draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                                          max_size=len(shape), unique_by=lambda a: a % len(shape)), label="axes")
    ord_ = data.draw(st.sampled_from([2, 1, 0, -1, -2, 3, 0.5, math.inf, -math.inf]), label="ord")
    keepdims = data.draw(st.booleans(), label="keepdims")
    x = RNG.uniform(0.5, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape)
    axis = None if axes is None else tuple(axes)
    out = L.vector_norm(arr(device, x), axis=axis, keepdims=keepdims, ord=ord_)
    flat_axes = tuple(range(len(shape))) if axis is None else tuple(a % len(shape) for a in axis)
    moved = np.moveaxis(x, flat_axes, tuple(range(len(flat_axes))))
    expected = np.linalg.norm(moved.reshape((-1,) + moved.shape[len(flat_axes):]), ord=ord_, axis=0)
    if keepdims:
        expected = expected.reshape(tuple(1 if i in flat_axes else n for i, n in enumerate(shape)))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10)


@SETTINGS
@given(data=st.data())
def test_tensordot_matches_numpy_and_differentiates(device, data):
    shape1 = data.draw(st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple), label="shape1")
    n = data.draw(st.integers(0, len(shape1)), label="n")
    contracted = data.draw(st.permutations(range(len(shape1))), label="perm")[:n]
    free2 = data.draw(st.lists(st.integers(1, 3), max_size=2), label="free2")
    positions = data.draw(st.permutations(range(n + len(free2))), label="positions")
    shape2 = [0] * (n + len(free2))
    for k, axis in enumerate(contracted):
        shape2[positions[k]] = shape1[axis]
    for k, size in enumerate(free2):
        shape2[positions[n + k]] = size
    axes = (list(contracted), list(positions[:n]))
    a, b = rand(*shape1), rand(*shape2)
    out = lp.tensordot(leaf(device, a), leaf(device, b), axes=axes)
    np.testing.assert_allclose(out.numpy(), np.tensordot(a, b, axes=axes), rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda x, y: lp.tensordot(x, y, axes=axes), [leaf(device, a), leaf(device, b)])


# ---- bad input --------------------------------------------------------------------------------


def _unchanged(xs, before):
    for x, data in zip(xs, before):
        np.testing.assert_array_equal(x.numpy(), data)
        assert x.grad is None or not np.any(host(x.device, x.grad))


BAD = {
    "inv_not_square": (ValueError, r"inv: .*square.*\(2, 3\)", lambda a, b: L.inv(b)),
    "det_1d": (ValueError, r"det: .*\(3,\)", lambda a, b: L.det(a[0])),
    "cholesky_not_square": (ValueError, "cholesky", lambda a, b: L.cholesky(b)),
    "solve_mismatch": (ValueError, r"solve: .*\(2, 3\).*\(3, 3\)", lambda a, b: L.solve(a, b)),
    "solve_vector_mismatch": (ValueError, r"solve: .*\(3,\)", lambda a, b: L.solve(b[:, :2], a[0])),
    "solve_batch_mismatch": (ValueError, r"solve: .*\(2,\).*\(3,\)",
                             lambda a, b: L.solve(Tensor(well_conditioned(2, 3, 3), device=a.device),
                                                  Tensor(rand(3, 3, 1), device=a.device))),
    "inv_integer": (TypeError, r"inv: .*int64", lambda a, b: L.inv(lp.asarray([[1, 2], [3, 4]], device=a.device))),
    "singular": (ValueError, "inv: ", lambda a, b: L.inv(a * 0.0)),
    "qr_mode": (ValueError, "qr: mode", lambda a, b: L.qr(a, mode="r")),
    "matrix_norm_ord": (ValueError, "matrix_norm: ord", lambda a, b: L.matrix_norm(a, ord=3)),
    "vector_norm_ord": (TypeError, "vector_norm: ord", lambda a, b: L.vector_norm(a, ord="fro")),
    "matrix_power_float": (TypeError, "matrix_power: n", lambda a, b: L.matrix_power(a, 1.5)),
    "tensordot_sizes": (ValueError, r"tensordot: .*\(3, 3\).*\(2, 3\)", lambda a, b: lp.tensordot(a, b, axes=1)),
    "tensordot_axes": (IndexError, "tensordot", lambda a, b: lp.tensordot(a, b, axes=([5], [0]))),
    "vecdot_sizes": (ValueError, r"vecdot: .*\(3, 3\).*\(2, 3\)", lambda a, b: lp.vecdot(a, b, axis=-2)),
    "cross_size": (ValueError, r"cross: .*size 3", lambda a, b: L.cross(a[:, :2], a[:, :2])),
    "outer_2d": (ValueError, "outer: .*1-D", lambda a, b: L.outer(a, b)),
    "matrix_transpose_1d": (ValueError, "matrix_transpose", lambda a, b: L.matrix_transpose(a[0])),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input(device, name):
    kind, message, call = BAD[name]
    a, b = leaf(device, well_conditioned(3, 3)), leaf(device, rand(2, 3))
    before = [a.numpy(), b.numpy()]
    with pytest.raises(kind, match=message):
        call(a, b)
    _unchanged([a, b], before)


@pytest.mark.parametrize("name", ["solve", "cross", "outer", "tensordot", "vecdot", "matmul"])
def test_mixed_devices_name_both(device, name):
    other = other_device(device)
    a = leaf(device, well_conditioned(3, 3))
    b = Tensor(rand(3, 3), device=other)
    call = {
        "solve": lambda: L.solve(a, b), "cross": lambda: L.cross(a, b), "outer": lambda: L.outer(a[0], b[0]),
        "tensordot": lambda: lp.tensordot(a, b), "vecdot": lambda: lp.vecdot(a, b), "matmul": lambda: L.matmul(a, b),
    }[name]
    with pytest.raises(ValueError) as info:
        call()
    assert device in str(info.value) and other in str(info.value)
    assert not np.any(host(device, a.grad))


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3, 0), (0, 4)), ((2, 3, 4), (4, 0)), ((0, 3, 4), (4, 5))])
def test_stacked_products_with_an_empty_axis(device, a_shape, b_shape):
    """A stack of rows times a matrix is one 2-D product (a reshape); with an empty
    axis it still gives PyTorch's shapes and zero gradients, for ``@`` and ``F.linear``."""
    from leanpass.nn import functional as F

    for product in (lambda a, b: a @ b, lambda a, b: F.linear(a, b.mT)):  # F.linear's weight is (out, in)
        a = Tensor(np.ones(a_shape), requires_grad=True, device=device)
        b = Tensor(np.ones(b_shape), requires_grad=True, device=device)
        out = product(a, b)
        assert out.shape == a_shape[:-1] + b_shape[1:]
        out.sum().backward()
        ones = np.ones(a_shape[:-1] + b_shape[1:])
        np.testing.assert_array_equal(lp.asarray(a.grad).numpy(), ones @ np.ones(b_shape).T)
        rows = math.prod(a_shape[:-1])
        np.testing.assert_array_equal(lp.asarray(b.grad).numpy(),
                                      np.ones((a_shape[-1], rows)) @ ones.reshape(rows, b_shape[1]))


# ---- edge cases found by review ----------------------------------------------------------------


def _det_hessian(device, m):
    x = Tensor(m, requires_grad=True, device=device)
    (g,) = lp.autograd.grad(L.det(x).sum(), [x], create_graph=True)
    weights = lp.asarray(np.arange(m.size, dtype=float).reshape(m.shape), device=device)
    (h,) = lp.autograd.grad((g * weights).sum(), [x])
    return h.numpy()


def _det_gradient(device, m):
    x = Tensor(m, requires_grad=True, device=device)
    L.det(x).sum().backward()
    return get_backend(device).to_host(x.grad)


@pytest.mark.parametrize("kind", ["identity", "permutation", "random", "singular", "mixed batch"])
def test_det_second_derivative_is_finite_where_singular_values_repeat(device, kind):
    """det(A) A^-T at invertible matrices (the identity, a permutation: repeated singular
    values, where an SVD-based rule gives NaN); the SVD form at singular ones. Checked
    against finite differences of the gradient."""
    perm = np.array([[0.0, 1, 0], [1, 0, 0], [0, 0, 1]])
    singular = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])
    m = {"identity": np.eye(3), "permutation": perm, "random": rand(3, 3), "singular": singular,
         "mixed batch": np.stack([np.eye(3), singular, perm])}[kind]
    h = _det_hessian(device, m)
    assert not np.isnan(h).any()
    eps, weights = 1e-6, np.arange(m.size, dtype=float).reshape(m.shape)
    fd = np.zeros(m.shape)
    for index in np.ndindex(m.shape):
        step = np.zeros(m.shape)
        step[index] = eps
        fd[index] = ((_det_gradient(device, m + step) - _det_gradient(device, m - step)) * weights).sum() / (2 * eps)
    np.testing.assert_allclose(h, fd, atol=1e-6)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 0)])
def test_matrix_norm_of_empty_matrices_as_numpy(device, shape):
    """The largest of nothing is 0 (NumPy, PyTorch); the smallest of nothing raises,
    naming matrix_norm."""
    x = lp.zeros(shape, device=device)
    m, n = shape[-2:]
    for ord in ("fro", "nuc", 2, 1, math.inf, -1, -math.inf, -2):
        smallest_of_nothing = (ord == -2) or (ord == -1 and not n) or (ord == -math.inf and not m)
        if smallest_of_nothing:
            with pytest.raises(ValueError, match="matrix_norm"):
                L.matrix_norm(x, ord=ord)
        else:
            np.testing.assert_array_equal(L.matrix_norm(x, ord=ord).numpy(), np.zeros(shape[:-2]))


def test_matrix_power_one_is_a_new_tensor(device):
    w = lp.asarray(np.eye(2), device=device)
    y = L.matrix_power(w, 1)
    assert y is not w
    y += 1
    np.testing.assert_array_equal(w.numpy(), np.eye(2))


@pytest.mark.parametrize("name", ["vecdot", "outer", "outer_reversed", "cross"])
def test_products_of_an_integer_and_a_float_tensor_differentiate(device, name):
    """Libraries that allow the mixed product (array_api_strict's vecdot, outer, cross)
    must not fail in its backward."""
    i = lp.asarray(np.array([1, 2, 3], dtype=np.int32), device=device)
    v = Tensor(np.array([1.0, 2.0, 4.0]), requires_grad=True, device=device, dtype="float32")
    f = {"vecdot": lambda: L.vecdot(i, v), "outer": lambda: L.outer(i, v),
         "outer_reversed": lambda: L.outer(v, i), "cross": lambda: L.cross(i, v)}[name]
    expected = {"vecdot": [1, 2, 3], "outer": [6, 6, 6], "outer_reversed": [6, 6, 6], "cross": [1, -2, 1]}[name]
    try:
        out = f()
    except TypeError as exc:  # a library that refuses the mixed product says so, naming the function
        assert name.split("_")[0] in str(exc)
        return
    out.sum().backward()
    np.testing.assert_allclose(get_backend(device).to_host(v.grad), expected)
    assert v.dtype == v.grad.dtype  # leanpass dtypes compare equal to the library's


@pytest.mark.parametrize("fn", ["trace", "diagonal"])
def test_a_float_offset_raises_type_error_naming_the_function(device, fn):
    with pytest.raises(TypeError, match=f"{fn}: offset must be an integer"):
        getattr(L, fn)(lp.eye(3, device=device), offset=1.0)


def test_det_second_derivative_at_a_rank_deficient_product(device):
    """A = B @ C of rank 3 (det is rounding noise, not 0): the Hessian-vector product
    of det is the derivative of the cofactor matrix, a polynomial, so central
    differences of the (exact) cofactor have an error of order h^2 only. det(A) A^-T
    cancelled there (errors of 10%)."""
    rng = np.random.default_rng(0)
    a0 = rng.normal(size=(4, 3)) @ rng.normal(size=(3, 4))
    v0 = rng.normal(size=(4, 4))

    def cofactor(m):
        return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(m, i, 0), j, 1)) for j in range(4)]
                         for i in range(4)])

    h = 1e-5
    want = (cofactor(a0 + h * v0) - cofactor(a0 - h * v0)) / (2 * h)
    a = leaf(device, a0)
    (g,) = lp.autograd.grad(L.det(a), [a], create_graph=True)
    (hv,) = lp.autograd.grad((g * arr(device, v0)).sum(), [a])
    np.testing.assert_allclose(np.asarray(lp.asarray(hv).numpy()), want, atol=1e-7 * np.abs(want).max())


def test_matrix_rank_of_empty_matrices_and_trace_dtype(device):
    for shape, rank in (((0, 0), 0), ((0, 3), 0), ((2, 3, 0), [0, 0]), ((2, 0, 0), [0, 0])):
        got = L.matrix_rank(arr(device, np.zeros(shape)))
        assert got.dtype == lp.int64 and got.numpy().tolist() == rank
    z = arr(device, np.array([[1 + 2j, 0], [0, 3 + 4j]]))
    with pytest.raises(TypeError, match="trace: dtype=float64 would discard the imaginary part"):
        L.trace(z, dtype=lp.float64)
    assert complex(L.trace(z)) == 4 + 6j


def test_det_second_derivative_of_a_well_conditioned_matrix_with_repeated_singular_values(device):
    """block_diag of five [[1, .99], [.99, 1]]: condition 199, det 3e-9 (small against
    the product of the row norms in 10 dimensions) and repeated singular values: the
    smooth det(A) A^-T rule (the SVD form would be NaN there), also in a batch with a
    singular matrix."""
    block = np.array([[1.0, 0.99], [0.99, 1.0]])
    a0 = np.kron(np.eye(5), block)
    v0 = np.random.default_rng(1).normal(size=(10, 10))

    def cofactor(m):
        return np.linalg.det(m) * np.linalg.inv(m).T

    h = 1e-6
    want = (cofactor(a0 + h * v0) - cofactor(a0 - h * v0)) / (2 * h)
    singular = np.ones((10, 10))
    a = leaf(device, np.stack([a0, singular]))
    (g,) = lp.autograd.grad(L.det(a).sum(), [a], create_graph=True)
    (hv,) = lp.autograd.grad((g * arr(device, np.stack([v0, np.zeros((10, 10))]))).sum(), [a])
    got = np.asarray(lp.asarray(hv).numpy())[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-6 * np.abs(want).max())


def test_matrix_rank_of_empty_matrices_broadcasts_rtol(device):
    got = L.matrix_rank(arr(device, np.zeros((0, 3))), rtol=arr(device, np.array([0.1, 0.2, 0.3, 0.4])))
    assert got.shape == (4,) and got.numpy().tolist() == [0, 0, 0, 0]


# ---- found by review (2026-12-02) ------------------------------------------------------------------


def test_trace_to_an_integer_dtype_carries_no_gradient(device):
    x = lp.Tensor(np.array([[1.7, 0.0], [0.0, 2.6]]), device=device, requires_grad=True)
    for dtype in (lp.int64, lp.bool):
        y = lp.linalg.trace(x, dtype=dtype)
        assert not y.requires_grad and y.dtype == dtype
    assert int(lp.linalg.trace(x, dtype=lp.int64)) == 3
    assert lp.linalg.trace(x).requires_grad


def test_numpy_scalars_are_numbers_for_rtol_ord_and_axes(device):
    x = lp.asarray(np.diag([1.0, 0.05, 1e-3]), device=device)
    assert int(lp.linalg.matrix_rank(x, rtol=np.float32(0.01))) == 2
    assert int(lp.linalg.matrix_rank(x, rtol=np.array(0.01))) == 2  # host data: on x's device
    assert lp.linalg.pinv(x, rtol=np.float64(0.01)).device == x.device
    a = lp.asarray([[3.0, 4.0], [1.0, 2.0]], device=device)
    assert float(lp.linalg.vector_norm(a, ord=np.int64(1))) == 10.0
    assert float(lp.linalg.matrix_norm(a, ord=np.int64(1))) == 6.0
    assert lp.linalg.tensordot(a, a, axes=(np.int64(1), np.int64(0))).tolist() == [[13.0, 20.0], [5.0, 8.0]]
    with pytest.raises(TypeError, match="tensordot: axes must be"):
        lp.linalg.tensordot(a, a, axes=(True, 0))


def test_host_data_beside_a_tensor_takes_its_device_and_dtype(device):
    """As with ``A @ h``: lp.matmul, solve, vecdot, cross, outer, tensordot."""
    a = lp.asarray(np.eye(2) * 2, dtype=lp.float32, device=device)
    h = np.ones(2)
    for out in (lp.matmul(a, h), lp.matmul(h, a), lp.linalg.solve(a, h), lp.vecdot(a, h), lp.linalg.outer(h, a[0]),
                lp.linalg.tensordot(a, h, axes=1), lp.linalg.cross(np.ones(3), lp.ones(3, dtype=lp.float32,
                                                                                      device=device))):
        assert out.dtype == lp.float32 and out.device == a.device
    np.testing.assert_array_equal(lp.matmul(a, h).numpy(), (a @ h).numpy())
    with pytest.raises(TypeError, match="matmul: operands must be Tensors, got Tensor and float"):
        lp.matmul(a, 2.0)


def test_errors_name_the_function_once(device):
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    x = lp.Tensor(singular, device=device, requires_grad=True)
    # a singular inverse raises on every device (CuPy's linalg is checked: docs/devices.md)
    with pytest.raises(ValueError, match="slogdet: the gradient of logabsdet at a singular matrix"):
        lp.linalg.slogdet(x).logabsdet.backward()
    assert x._grad is None  # nothing written
    with pytest.raises(ValueError, match="^matrix_power: "):
        lp.linalg.matrix_power(lp.asarray(singular, device=device), -1)
    other = "strict" if device != "strict" else "cpu"
    with pytest.raises(ValueError, match="^pinv: operands are on different devices"):
        lp.linalg.pinv(lp.eye(2, device=device), rtol=lp.asarray(0.1, device=other))
    for call, text in ((lambda: lp.linalg.cholesky(lp.eye(2, device=device), upper="no"), "cholesky: upper"),
                       (lambda: lp.linalg.svd(lp.eye(2, device=device), full_matrices=None), "svd: full_matrices"),
                       (lambda: lp.linalg.matrix_norm(lp.eye(2, device=device), keepdims=1), "matrix_norm: keepdims")):
        with pytest.raises(TypeError, match=f"{text} must be a bool"):
            call()
    with pytest.raises(ZeroDivisionError, match="fftfreq: the sample spacing d must not be 0"):
        lp.fft.fftfreq(4, d=0, device=device)
