"""The standard's manipulation functions (and ``meshgrid``) on every device: forward
values as NumPy computes them, gradients by finite differences and against NumPy
references, dtypes, views and versions, Tensor methods, bad input, and properties."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import other_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import leanpass as lp
from leanpass import Tensor
from leanpass.backends import get_backend

SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RNG = np.random.default_rng(7)
X = RNG.uniform(-2.0, 2.0, size=(2, 3, 4))  # distinct values


def host(device, array):
    return np.array(get_backend(device).to_host(array), copy=True)


def leaf(x, device, dtype="float64"):
    return Tensor(np.asarray(x, dtype=dtype), requires_grad=True, device=device)


def ints(x, device):
    return lp.asarray(np.asarray(x, dtype=np.int64), device=device)


# ---- forward values against NumPy ------------------------------------------------------------

# id -> (leanpass function of x, NumPy function of x, shape of x)
FORWARD = {
    "reshape": (lambda x: lp.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), (2, 3, 4)),
    "reshape_0d": (lambda x: lp.reshape(x, (1, 1)), lambda x: x.reshape(1, 1), ()),
    "permute_dims": (lambda x: lp.permute_dims(x, (2, 0, 1)), lambda x: x.transpose(2, 0, 1), (2, 3, 4)),
    "moveaxis": (lambda x: lp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1), (2, 3, 4)),
    "moveaxis_tuple": (lambda x: lp.moveaxis(x, (0, 1), (2, 0)), lambda x: np.moveaxis(x, (0, 1), (2, 0)), (2, 3, 4)),
    "expand_dims_0": (lambda x: lp.expand_dims(x, axis=0), lambda x: np.expand_dims(x, 0), (2, 3)),
    "expand_dims_end": (lambda x: lp.expand_dims(x, axis=-1), lambda x: np.expand_dims(x, -1), (2, 3)),
    "expand_dims_first_neg": (lambda x: lp.expand_dims(x, axis=-3), lambda x: np.expand_dims(x, 0), (2, 3)),
    "expand_dims_0d": (lambda x: lp.expand_dims(x, axis=0), lambda x: np.expand_dims(x, 0), ()),
    "squeeze": (lambda x: lp.squeeze(x, axis=1), lambda x: np.squeeze(x, 1), (2, 1, 3)),
    "squeeze_tuple": (lambda x: lp.squeeze(x, axis=(0, -1)), lambda x: np.squeeze(x, (0, 3)), (1, 2, 3, 1)),
    "squeeze_nothing": (lambda x: lp.squeeze(x, axis=()), lambda x: x, (2, 3)),
    "broadcast_to": (lambda x: lp.broadcast_to(x, (4, 2, 3)), lambda x: np.broadcast_to(x, (4, 2, 3)), (2, 1)),
    "broadcast_to_same": (lambda x: lp.broadcast_to(x, (2, 3)), lambda x: x, (2, 3)),
    "broadcast_to_0d": (lambda x: lp.broadcast_to(x, (3, 2)), lambda x: np.broadcast_to(x, (3, 2)), ()),
    "broadcast_to_empty": (lambda x: lp.broadcast_to(x, (0, 3)), lambda x: np.broadcast_to(x, (0, 3)), (1, 3)),
    "flip_all": (lambda x: lp.flip(x), lambda x: np.flip(x), (2, 3, 4)),
    "flip_axis": (lambda x: lp.flip(x, axis=1), lambda x: np.flip(x, 1), (2, 3, 4)),
    "flip_axes": (lambda x: lp.flip(x, axis=(0, -1)), lambda x: np.flip(x, (0, 2)), (2, 3, 4)),
    "flip_0d": (lambda x: lp.flip(x), lambda x: x, ()),
    "roll_flat": (lambda x: lp.roll(x, 5), lambda x: np.roll(x, 5), (2, 3, 4)),
    "roll_flat_neg": (lambda x: lp.roll(x, -7), lambda x: np.roll(x, -7), (2, 3, 4)),
    "roll_axis": (lambda x: lp.roll(x, 2, axis=1), lambda x: np.roll(x, 2, 1), (2, 3, 4)),
    "roll_axes": (lambda x: lp.roll(x, (1, -3), axis=(0, 2)), lambda x: np.roll(x, (1, -3), (0, 2)), (2, 3, 4)),
    "roll_int_shift_axes": (lambda x: lp.roll(x, 1, axis=(1, 2)), lambda x: np.roll(x, 1, (1, 2)), (2, 3, 4)),
    "roll_repeated_axis": (lambda x: lp.roll(x, (1, 1), axis=(2, 2)), lambda x: np.roll(x, (1, 1), (2, 2)), (2, 3, 4)),
    "roll_big_shift": (lambda x: lp.roll(x, 11, axis=-1), lambda x: np.roll(x, 11, -1), (2, 3, 4)),
    "roll_0d": (lambda x: lp.roll(x, 3), lambda x: np.roll(x, 3), ()),
    "repeat_flat": (lambda x: lp.repeat(x, 2), lambda x: np.repeat(x, 2), (2, 3)),
    "repeat_axis": (lambda x: lp.repeat(x, 3, axis=1), lambda x: np.repeat(x, 3, 1), (2, 3, 4)),
    "repeat_zero": (lambda x: lp.repeat(x, 0, axis=0), lambda x: np.repeat(x, 0, 0), (2, 3)),
    "repeat_0d": (lambda x: lp.repeat(x, 3), lambda x: np.repeat(x, 3), ()),
    "tile": (lambda x: lp.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), (2, 3, 4)),
    "tile_short_reps": (lambda x: lp.tile(x, (2,)), lambda x: np.tile(x, (2,)), (2, 3)),
    "tile_long_reps": (lambda x: lp.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), (3,)),
    "tile_zero": (lambda x: lp.tile(x, (0, 2)), lambda x: np.tile(x, (0, 2)), (2, 3)),
    "tile_0d": (lambda x: lp.tile(x, (3,)), lambda x: np.tile(x, (3,)), ()),
    "concat_self": (lambda x: lp.concat([x, x * 2.0], axis=1), lambda x: np.concatenate([x, x * 2.0], 1), (2, 3, 4)),
    "concat_neg_axis": (lambda x: lp.concat((x, x), axis=-1), lambda x: np.concatenate((x, x), -1), (2, 3)),
    "concat_none": (lambda x: lp.concat([x, x[0]], axis=None), lambda x: np.concatenate([x.ravel(), x[0].ravel()]),
                    (2, 3)),
    "concat_one": (lambda x: lp.concat([x]), lambda x: x, (2, 3)),
    "stack": (lambda x: lp.stack([x, -x]), lambda x: np.stack([x, -x]), (2, 3)),
    "stack_last": (lambda x: lp.stack([x, -x, x], axis=-1), lambda x: np.stack([x, -x, x], -1), (2, 3)),
    "stack_middle": (lambda x: lp.stack((x, x), axis=1), lambda x: np.stack((x, x), 1), (2, 3)),
    "stack_0d": (lambda x: lp.stack([x, x]), lambda x: np.stack([x, x]), ()),
    "unstack_0": (lambda x: lp.stack(lp.unstack(x)[::-1]), lambda x: x[::-1], (3, 2)),
    "unstack_1": (lambda x: lp.unstack(x, axis=1)[2], lambda x: x[:, 2], (2, 3, 4)),
    "unstack_neg": (lambda x: lp.unstack(x, axis=-1)[0], lambda x: x[..., 0], (2, 3, 4)),
    "broadcast_arrays": (lambda x: lp.broadcast_arrays(x, x[:1, None, :])[1],
                         lambda x: np.broadcast_arrays(x, x[:1, None, :])[1], (2, 3)),
    "meshgrid_xy": (lambda x: lp.meshgrid(x[0], x[1, :2])[1], lambda x: np.meshgrid(x[0], x[1, :2])[1], (2, 3)),
    "meshgrid_ij": (lambda x: lp.meshgrid(x[0], x[1, :2], indexing="ij")[0],
                    lambda x: np.meshgrid(x[0], x[1, :2], indexing="ij")[0], (2, 3)),
    "meshgrid_3": (lambda x: lp.meshgrid(x[0], x[1, :2], x[0, :1])[2],
                   lambda x: np.meshgrid(x[0], x[1, :2], x[0, :1])[2], (2, 3)),
    "meshgrid_1": (lambda x: lp.meshgrid(x[0])[0], lambda x: np.meshgrid(x[0])[0], (2, 3)),
}


def _x(shape):
    return RNG.permutation(60)[: int(np.prod(shape))].reshape(shape) * 0.1 - 3.0


@pytest.mark.parametrize("case", list(FORWARD))
def test_forward_matches_numpy(device, case):
    fn, ref, shape = FORWARD[case]
    x_np = _x(shape)
    out = fn(leaf(x_np, device))
    want = ref(x_np)
    assert out.shape == want.shape
    assert out.device == lp.Tensor(0.0, device=device).device
    assert out.dtype == lp.float64
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "complex64", "float32"])
@pytest.mark.parametrize("case", ["flip_axes", "roll_axes", "repeat_axis", "tile", "concat_none", "stack_last",
                                  "unstack_1", "moveaxis_tuple", "broadcast_to", "squeeze_tuple", "meshgrid_ij"])
def test_dtypes_are_kept_and_integers_carry_no_grad(device, case, dtype):
    fn, ref, shape = FORWARD[case]
    fn = {"concat_none": lambda x: lp.concat([x, x[0]], axis=None),
          "stack_last": lambda x: lp.stack([x, x], axis=-1)}.get(case, fn)
    ref = {"concat_none": lambda x: np.concatenate([x.ravel(), x[0].ravel()]),
           "stack_last": lambda x: np.stack([x, x], -1)}.get(case, ref)
    x_np = (np.arange(int(np.prod(shape))).reshape(shape) % 7).astype(dtype)
    x = lp.asarray(x_np, device=device)
    out = fn(x)
    assert out.dtype == getattr(lp, dtype)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), ref(x_np))


def test_repeat_with_an_array_of_counts(device):
    x_np = _x((2, 3))
    x = leaf(x_np, device)
    for counts, axis in (([1, 0, 2], 1), ([3], 0), ([2, 1], 0), ([0, 0, 0, 1, 2, 1], None)):
        out = lp.repeat(x, ints(counts, device), axis=axis)
        np.testing.assert_array_equal(out.numpy(), np.repeat(x_np, counts, axis))
    out = lp.repeat(x, lp.asarray(np.array([2, 1, 1], dtype=np.uint8), device=device), axis=1)
    np.testing.assert_array_equal(out.numpy(), np.repeat(x_np, [2, 1, 1], 1))


def test_concat_and_stack_promote_dtypes(device):
    a = lp.asarray(np.array([1, 2], dtype=np.int32), device=device)
    b = lp.asarray(np.array([3], dtype=np.int64), device=device)
    assert lp.concat([a, b]).dtype == lp.int64
    f32 = leaf([1.0, 2.0], device, "float32")
    f64 = leaf([3.0, 4.0], device)
    out = lp.stack([f32, f64])
    assert out.dtype == lp.float64
    out.sum().backward()
    assert f32.grad.dtype == f32.data.dtype
    np.testing.assert_array_equal(host(device, f32.grad), [1.0, 1.0])
    with pytest.raises(TypeError, match="concat"):
        lp.concat([a, f64])


def test_meshgrid_of_nothing_and_empty_axes(device):
    assert lp.meshgrid() == []
    x = leaf([1.0, 2.0], device)
    e = leaf(np.zeros(0), device)
    grids = lp.meshgrid(x, e)
    assert [g.shape for g in grids] == [(0, 2), (0, 2)]
    grids = lp.meshgrid(x, e, indexing="ij")
    assert [g.shape for g in grids] == [(2, 0), (2, 0)]


def test_meshgrid_grids_are_writable_arrays_of_their_own(device):
    x = Tensor([1.0, 2.0, 3.0], device=device)
    gx, gy = lp.meshgrid(x, x)
    gx[0, 0] = 9.0
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    assert gy.numpy()[0, 0] == 1.0


# ---- gradients ----------------------------------------------------------------------------------

# id -> (function of one float64 tensor, shape of the input)
GRADS = {
    "reshape": (lambda z: lp.reshape(z, (3, -1)), (2, 3, 2)),
    "permute_dims": (lambda z: lp.permute_dims(z, (1, 2, 0)), (2, 3, 2)),
    "moveaxis": (lambda z: lp.moveaxis(z, (0, 2), (1, 0)), (2, 3, 4)),
    "expand_dims": (lambda z: lp.expand_dims(z, axis=1), (2, 3)),
    "squeeze": (lambda z: lp.squeeze(z, axis=(0, 2)), (1, 3, 1)),
    "broadcast_to_lead": (lambda z: lp.broadcast_to(z, (4, 2, 3)), (2, 3)),
    "broadcast_to_inner": (lambda z: lp.broadcast_to(z, (2, 5, 3)), (2, 1, 3)),
    "broadcast_to_0d": (lambda z: lp.broadcast_to(z, (2, 2)), ()),
    "broadcast_arrays": (lambda z: lp.broadcast_arrays(z, z[:, :1], z[0])[1] * lp.broadcast_arrays(z[0], z)[0],
                         (3, 4)),
    "flip": (lambda z: lp.flip(z) * z, (2, 3, 4)),
    "flip_axes": (lambda z: lp.flip(z, axis=(-1, 0)), (2, 3, 4)),
    "roll": (lambda z: lp.roll(z, 4), (2, 3, 4)),
    "roll_axes": (lambda z: lp.roll(z, (-1, 2), axis=(0, 2)), (2, 3, 4)),
    "roll_repeated_axis": (lambda z: lp.roll(z, (1, 2), axis=(1, 1)), (2, 3)),
    "repeat_flat": (lambda z: lp.repeat(z, 3), (2, 3)),
    "repeat_axis": (lambda z: lp.repeat(z, 2, axis=-1), (2, 3, 2)),
    "repeat_counts": (lambda z: lp.repeat(z, lp.asarray([2, 0, 3], device=z.device), axis=1), (2, 3, 2)),
    "repeat_counts_flat": (lambda z: lp.repeat(z, lp.asarray([1, 2, 0, 4], device=z.device)), (2, 2)),
    "tile": (lambda z: lp.tile(z, (2, 1, 3)), (2, 3)),
    "tile_short": (lambda z: lp.tile(z, (2,)), (2, 3)),
    "concat": (lambda z: lp.concat([z, z[:, :1] * 2.0, z], axis=1), (2, 3)),
    "concat_none": (lambda z: lp.concat([z, z[0]], axis=None), (2, 3)),
    "stack": (lambda z: lp.stack([z, z * z, z[::-1]], axis=1), (2, 3)),
    "unstack": (lambda z: lp.unstack(z, axis=1)[0] * lp.unstack(z, axis=1)[2] + lp.unstack(z, axis=1)[0], (2, 3, 2)),
    "meshgrid_xy": (lambda z: lp.meshgrid(z[0], z[1, :2], z[0, 1:])[0] * lp.meshgrid(z[0], z[1, :2], z[0, 1:])[2],
                    (2, 3)),
    "meshgrid_ij": (lambda z: lp.meshgrid(z[0], z[1], indexing="ij")[1], (2, 3)),
}


@pytest.mark.parametrize("case", list(GRADS))
def test_gradcheck(device, case):
    fn, shape = GRADS[case]
    z = leaf(RNG.uniform(0.5, 1.5, size=shape), device)
    assert lp.gradcheck(fn, (z,))


def test_concat_gradcheck_of_several_inputs(device):
    a, b, c = (leaf(RNG.uniform(-1, 1, size=s), device) for s in ((2, 1, 3), (2, 4, 3), (2, 2, 3)))
    assert lp.gradcheck(lambda a, b, c: lp.concat([a, b, c, a], axis=1), (a, b, c))
    assert lp.gradcheck(lambda a, b, c: lp.concat([a, b, c], axis=None), (a, b, c))


def test_stack_gradcheck_of_several_inputs(device):
    a, b = leaf(RNG.uniform(-1, 1, size=(2, 3)), device), leaf(RNG.uniform(-1, 1, size=(2, 3)), device)
    assert lp.gradcheck(lambda a, b: lp.stack([a, b, a], axis=-1), (a, b))


def test_integer_input_among_float_inputs_gets_no_grad(device):
    a = leaf([1.0, 2.0], device)
    b = lp.asarray(np.array([3.0, 4.0], dtype=np.float32), device=device)
    out = lp.concat([a, b])
    out.sum().backward()
    np.testing.assert_array_equal(host(device, a.grad), [1.0, 1.0])
    assert b.grad is None


def test_repeat_gradient_counts_the_copies(device):
    x = leaf([1.0, 2.0, 3.0], device)
    lp.repeat(x, ints([2, 0, 5], device)).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), [2.0, 0.0, 5.0])


def test_float32_gradients_stay_float32(device):
    for fn in (lambda z: lp.tile(z, (2, 2)), lambda z: lp.repeat(z, 2, axis=0), lambda z: lp.roll(z, 1),
               lambda z: lp.meshgrid(z[0], z[1])[0], lambda z: lp.unstack(z)[1],
               lambda z: lp.broadcast_to(z, (3, 2, 2))):
        z = leaf(np.ones((2, 2)), device, "float32")
        out = fn(z)
        assert out.dtype == lp.float32
        out.sum().backward()
        assert z.grad.dtype == z.data.dtype


# ---- views and versions --------------------------------------------------------------------------

VIEWS = {
    "reshape": lambda h: lp.reshape(h, (-1,)),
    "expand_dims": lambda h: lp.expand_dims(h, axis=0),
    "squeeze": lambda h: lp.squeeze(h[:1], axis=0),
    "permute_dims": lambda h: lp.permute_dims(h, (1, 0)),
    "moveaxis": lambda h: lp.moveaxis(h, 0, 1),
    "flip": lambda h: lp.flip(h),
    "broadcast_to": lambda h: lp.broadcast_to(h, (2, 2, 3)),
    "unstack": lambda h: lp.unstack(h)[1],
}


@pytest.mark.parametrize("case", list(VIEWS))
def test_an_in_place_change_of_the_source_invalidates_a_view_saved_for_backward(device, case):
    """A view shares its source's version counter: changing the source in place
    after the view was saved makes backward raise instead of returning a wrong gradient."""
    x = leaf(RNG.uniform(size=(2, 3)), device)
    h = x * 1.0
    v = VIEWS[case](h)
    loss = (v * v).sum()
    h += 1.0
    with pytest.raises(RuntimeError, match="version"):
        loss.backward()


@pytest.mark.parametrize("case", ["concat", "stack", "tile", "roll", "repeat", "meshgrid"])
def test_copies_do_not_share_versions(device, case):
    fn = {"concat": lambda h: lp.concat([h, h]), "stack": lambda h: lp.stack([h]), "tile": lambda h: lp.tile(h, (2,)),
          "roll": lambda h: lp.roll(h, 1), "repeat": lambda h: lp.repeat(h, 2),
          "meshgrid": lambda h: lp.meshgrid(h[0], h[1])[0]}[case]
    x = leaf(RNG.uniform(size=(2, 3)), device)
    h = x * 1.0
    v = fn(h)
    loss = (v * v).sum()
    h += 1.0
    loss.backward()  # nothing saved was changed
    assert x.grad.shape == (2, 3)


# ---- Tensor methods ------------------------------------------------------------------------------


def test_methods(device):
    x_np = _x((2, 1, 3))
    x = leaf(x_np, device)
    np.testing.assert_array_equal(x.squeeze().numpy(), x_np.squeeze())
    np.testing.assert_array_equal(x.squeeze(1).numpy(), x_np.squeeze(1))
    np.testing.assert_array_equal(x.unsqueeze(0).numpy(), x_np[None])
    np.testing.assert_array_equal(x.expand_dims(-1).numpy(), x_np[..., None])
    np.testing.assert_array_equal(x.flip().numpy(), np.flip(x_np))
    np.testing.assert_array_equal(x.flip(2).numpy(), np.flip(x_np, 2))
    np.testing.assert_array_equal(x.roll(1).numpy(), np.roll(x_np, 1))
    np.testing.assert_array_equal(x.roll(1, 2).numpy(), np.roll(x_np, 1, 2))
    np.testing.assert_array_equal(x.tile((2, 1)).numpy(), np.tile(x_np, (2, 1)))
    np.testing.assert_array_equal(x.tile(2, 1, 1).numpy(), np.tile(x_np, (2, 1, 1)))
    np.testing.assert_array_equal(x.broadcast_to((4, 2, 5, 3)).numpy(), np.broadcast_to(x_np, (4, 2, 5, 3)))
    np.testing.assert_array_equal(x.expand(4, -1, 5, -1).numpy(), np.broadcast_to(x_np, (4, 2, 5, 3)))
    np.testing.assert_array_equal(x.expand((2, 2, 3)).numpy(), np.broadcast_to(x_np, (2, 2, 3)))
    np.testing.assert_array_equal(x.moveaxis(0, -1).numpy(), np.moveaxis(x_np, 0, -1))
    np.testing.assert_array_equal(x.swapaxes(0, 2).numpy(), np.swapaxes(x_np, 0, 2))
    # t.repeat is PyTorch's (tiling: SPEC Part 3); NumPy's element repetition is lp.repeat, and
    # NumPy's t.repeat(n, axis=...) is refused rather than read as PyTorch's
    np.testing.assert_array_equal(x.repeat(1, 2, 1).numpy(), np.tile(x_np, (1, 2, 1)))
    with pytest.raises(TypeError, match=r"lp.repeat\(t, repeats, axis=...\)"):
        x.repeat(2, axis=0)
    assert lp.gradcheck(lambda z: z.expand(3, -1, 2, -1).swapaxes(1, -1).squeeze(), (x,))


# ---- bad input ------------------------------------------------------------------------------------

# id -> (call on x of shape (2, 3, 4), exception type, words the message must contain)
BAD = {
    "expand_dims_axis": (lambda x: lp.expand_dims(x, axis=4), IndexError, ["expand_dims", "4"]),
    "expand_dims_neg_axis": (lambda x: lp.expand_dims(x, axis=-5), IndexError, ["expand_dims", "-5"]),
    "expand_dims_tuple": (lambda x: lp.expand_dims(x, axis=(0, 1)), TypeError, ["expand_dims"]),
    "squeeze_not_one": (lambda x: lp.squeeze(x, axis=1), ValueError, ["squeeze", "(2, 3, 4)", "3"]),
    "squeeze_axis": (lambda x: lp.squeeze(x, axis=3), IndexError, ["squeeze", "3"]),
    "squeeze_repeated": (lambda x: lp.squeeze(lp.reshape(x, (1, 24)), axis=(0, 0)), ValueError, ["squeeze"]),
    "flip_axis": (lambda x: lp.flip(x, axis=3), IndexError, ["flip", "3"]),
    "flip_repeated": (lambda x: lp.flip(x, axis=(1, -2)), ValueError, ["flip"]),
    "roll_axis": (lambda x: lp.roll(x, 1, axis=-4), IndexError, ["roll", "-4"]),
    "roll_lengths": (lambda x: lp.roll(x, (1, 2), axis=(0, 1, 2)), ValueError, ["roll"]),
    "roll_tuple_shift_no_axis": (lambda x: lp.roll(x, (1, 2)), ValueError, ["roll"]),
    "roll_float_shift": (lambda x: lp.roll(x, 1.5), TypeError, ["roll"]),
    "moveaxis_axis": (lambda x: lp.moveaxis(x, 3, 0), IndexError, ["moveaxis", "3"]),
    "moveaxis_lengths": (lambda x: lp.moveaxis(x, (0, 1), 0), ValueError, ["moveaxis"]),
    "moveaxis_repeated": (lambda x: lp.moveaxis(x, (0, 0), (1, 2)), ValueError, ["moveaxis"]),
    "permute_dims_short": (lambda x: lp.permute_dims(x, (0, 1)), ValueError, ["permute_dims", "(2, 3, 4)"]),
    "broadcast_to_shape": (lambda x: lp.broadcast_to(x, (2, 5, 4)), ValueError, ["broadcast_to", "(2, 3, 4)",
                                                                                 "(2, 5, 4)"]),
    "broadcast_to_fewer_axes": (lambda x: lp.broadcast_to(x, (3, 4)), ValueError, ["broadcast_to", "(3, 4)"]),
    "broadcast_arrays": (lambda x: lp.broadcast_arrays(x, x[:, :2]), ValueError, ["broadcast_arrays", "(2, 3, 4)",
                                                                                 "(2, 2, 4)"]),
    "concat_shapes": (lambda x: lp.concat([x, x[:, :, :2]], axis=1), ValueError, ["concat", "(2, 3, 4)",
                                                                                  "(2, 3, 2)"]),
    "concat_ranks": (lambda x: lp.concat([x, x[0]]), ValueError, ["concat", "(2, 3, 4)", "(3, 4)"]),
    "concat_0d": (lambda x: lp.concat([x[0, 0, 0], x[0, 0, 1]]), ValueError, ["concat", "()"]),
    "concat_axis": (lambda x: lp.concat([x, x], axis=3), IndexError, ["concat", "3"]),
    "concat_empty": (lambda x: lp.concat([]), ValueError, ["concat"]),
    "concat_tensor": (lambda x: lp.concat(x), TypeError, ["concat"]),
    "concat_list": (lambda x: lp.concat([x, [[[1.0]]]]), TypeError, ["concat"]),
    "stack_shapes": (lambda x: lp.stack([x, x[:1]]), ValueError, ["stack", "(2, 3, 4)", "(1, 3, 4)"]),
    "stack_axis": (lambda x: lp.stack([x, x], axis=4), IndexError, ["stack", "4"]),
    "unstack_axis": (lambda x: lp.unstack(x, axis=3), IndexError, ["unstack", "3"]),
    "unstack_0d": (lambda x: lp.unstack(x[0, 0, 0]), IndexError, ["unstack"]),
    "repeat_negative": (lambda x: lp.repeat(x, -1), ValueError, ["repeat", "-1"]),
    "repeat_axis": (lambda x: lp.repeat(x, 2, axis=3), IndexError, ["repeat", "3"]),
    "repeat_counts_shape": (lambda x: lp.repeat(x, lp.asarray([1, 2], device=x.device), axis=1), ValueError,
                            ["repeat", "(2,)", "3"]),
    "repeat_counts_2d": (lambda x: lp.repeat(x, lp.asarray([[1, 2, 3]], device=x.device), axis=1), ValueError,
                         ["repeat", "(1, 3)"]),
    "repeat_counts_negative": (lambda x: lp.repeat(x, lp.asarray([1, -2, 3], device=x.device), axis=1), ValueError,
                               ["repeat", "non-negative"]),
    "repeat_counts_float": (lambda x: lp.repeat(x, lp.asarray([1.0, 2.0, 3.0], device=x.device), axis=1), TypeError,
                            ["repeat", "float64"]),
    "repeat_bool": (lambda x: lp.repeat(x, True), TypeError, ["repeat"]),
    "tile_negative": (lambda x: lp.tile(x, (2, -1)), ValueError, ["tile", "-1"]),
    "tile_int": (lambda x: lp.tile(x, 2), TypeError, ["tile"]),
    "reshape_size": (lambda x: lp.reshape(x, (5, -1)), ValueError, ["reshape", "(2, 3, 4)", "(5, -1)"]),
    "reshape_no_copy": (lambda x: lp.reshape(lp.permute_dims(x, (2, 1, 0)), (24,), copy=False), ValueError,
                        ["reshape", "copy=False"]),
    "meshgrid_2d": (lambda x: lp.meshgrid(x[0], x[1]), ValueError, ["meshgrid", "1-D"]),
    "meshgrid_indexing": (lambda x: lp.meshgrid(x[0, 0], indexing="yx"), ValueError, ["meshgrid", "yx"]),
    "not_a_tensor": (lambda x: lp.flip([1.0, 2.0]), TypeError, ["flip"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_a_clear_error_and_changes_nothing(device, case):
    call, kind, words = BAD[case]
    x = leaf(X, device)
    with pytest.raises(kind) as info:
        call(x)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    np.testing.assert_array_equal(x.numpy(), X)
    assert x._grad is None


@pytest.mark.parametrize("fn", [
    lambda a, b: lp.concat([a, b]),
    lambda a, b: lp.stack([a, b]),
    lambda a, b: lp.broadcast_arrays(a, b),
    lambda a, b: lp.meshgrid(a, b),
    lambda a, b: lp.repeat(a, lp.asarray([1, 2], device=b.device)),
], ids=["concat", "stack", "broadcast_arrays", "meshgrid", "repeat"])
def test_device_mismatch_names_both_devices(device, fn):
    other = other_device(device)
    a = leaf([1.0, 2.0], device)
    b = leaf([3.0, 4.0], other)
    with pytest.raises(ValueError) as info:
        fn(a, b)
    message = str(info.value)
    assert a.device in message and other in message, message
    assert re.search(r"concat|stack|broadcast_arrays|meshgrid|repeat", message)


# ---- properties ----------------------------------------------------------------------------------

shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4)


def _float(data, shape, label="x"):
    return data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-3, 3)), label=label)


@SETTINGS
@given(data=st.data())
def test_concat_then_split_gives_back_the_parts(device, data):
    base = data.draw(shapes, label="shape")
    axis = data.draw(st.integers(-len(base), len(base) - 1), label="axis")
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4), label="sizes")
    parts = [_float(data, base[:axis % len(base)] + (n,) + base[axis % len(base) + 1:], f"part{i}")
             for i, n in enumerate(sizes)]
    tensors = [leaf(p, device) for p in parts]
    out = lp.concat(tensors, axis=axis)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(parts, axis=axis))
    g = _float(data, out.shape, "g")
    out.backward(g)
    start = 0
    for p, t in zip(parts, tensors):
        n = p.shape[axis]
        key = (slice(None),) * (axis % len(base)) + (slice(start, start + n),)
        np.testing.assert_array_equal(out[key].numpy(), p)
        np.testing.assert_array_equal(host(device, t.grad), g[key])
        start += n


@SETTINGS
@given(data=st.data())
def test_stack_then_unstack_gives_back_the_parts(device, data):
    shape = data.draw(shapes, label="shape")
    n = data.draw(st.integers(1, 3), label="n")
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="axis")
    parts = [_float(data, shape, f"part{i}") for i in range(n)]
    out = lp.stack([leaf(p, device) for p in parts], axis=axis)
    np.testing.assert_array_equal(out.numpy(), np.stack(parts, axis=axis))
    back = lp.unstack(out, axis=axis)
    assert len(back) == n
    for p, b in zip(parts, back):
        np.testing.assert_array_equal(b.numpy(), p)


@SETTINGS
@given(data=st.data())
def test_roll_and_flip_undo_themselves(device, data):
    shape = data.draw(shapes, label="shape")
    x_np = _float(data, shape)
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=3, unique=True), label="axes")
    shifts = tuple(data.draw(st.lists(st.integers(-9, 9), min_size=len(axes), max_size=len(axes)), label="shifts"))
    x = leaf(x_np, device)
    rolled = lp.roll(x, shifts, axis=tuple(axes))
    np.testing.assert_array_equal(rolled.numpy(), np.roll(x_np, shifts, tuple(axes)))
    np.testing.assert_array_equal(lp.roll(rolled, tuple(-s for s in shifts), axis=tuple(axes)).numpy(), x_np)
    flipped = lp.flip(x, axis=tuple(axes))
    np.testing.assert_array_equal(flipped.numpy(), np.flip(x_np, tuple(axes)))
    np.testing.assert_array_equal(lp.flip(flipped, axis=tuple(axes)).numpy(), x_np)
    g = _float(data, shape, "g")
    (rolled * leaf(g, device)).sum().backward()
    np.testing.assert_array_equal(host(device, x.grad), np.roll(g, tuple(-s for s in shifts), tuple(axes)))


@SETTINGS
@given(data=st.data())
def test_broadcast_to_gradient_sums_over_the_broadcast_axes(device, data):
    shapes_ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=1, max_dims=4, max_side=4), label="shapes")
    shape, target = shapes_.input_shapes[0], shapes_.result_shape
    target = data.draw(st.lists(st.integers(0, 3), max_size=2), label="lead").__add__(list(target))
    target = tuple(target)
    x_np = _float(data, shape)
    x = leaf(x_np, device)
    out = lp.broadcast_to(x, target)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(x_np, target))
    g = _float(data, target, "g")
    out.backward(g)
    lead = len(target) - len(shape)
    want = g.sum(axis=tuple(range(lead)))
    want = want.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)
    np.testing.assert_allclose(host(device, x.grad), want.reshape(shape), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(data=st.data())
def test_tile_and_repeat_gradients_sum_the_copies(device, data):
    shape = data.draw(shapes, label="shape")
    x_np = _float(data, shape)
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=5), label="reps"))
    x = leaf(x_np, device)
    out = lp.tile(x, reps)
    want = np.tile(x_np, reps)
    np.testing.assert_array_equal(out.numpy(), want)
    g = _float(data, want.shape, "g")
    out.backward(g)
    # the reference: each element of x receives the sum of g over its copies
    ndim = max(len(reps), x_np.ndim)
    r = (1,) * (ndim - len(reps)) + reps
    s = (1,) * (ndim - x_np.ndim) + x_np.shape
    split = g.reshape(tuple(n for pair in zip(r, s) for n in pair))
    np.testing.assert_allclose(host(device, x.grad), split.sum(axis=tuple(range(0, 2 * ndim, 2))).reshape(shape),
                               rtol=1e-12, atol=1e-12)

    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1), label="axis")
    n = int(np.prod(shape)) if axis is None else shape[axis]
    counts = data.draw(st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=n, max_size=n), label="counts")
    y = leaf(x_np, device)
    out = lp.repeat(y, counts if isinstance(counts, int) else ints(counts, device), axis=axis)
    want = np.repeat(x_np, counts, axis)
    np.testing.assert_array_equal(out.numpy(), want)
    g = _float(data, want.shape, "g2")
    out.backward(g)
    flat_axis = 0 if axis is None else axis % len(shape)
    source = np.repeat(np.arange(n), counts)  # which element each output slot came from
    moved = np.moveaxis(g, flat_axis, 0)
    grad = np.zeros((n,) + moved.shape[1:])
    np.add.at(grad, source, moved)
    grad = np.moveaxis(grad, 0, flat_axis).reshape(shape)
    np.testing.assert_allclose(host(device, y.grad), grad, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(data=st.data())
def test_squeeze_expand_dims_and_moveaxis_match_numpy(device, data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3), label="shape")
    x_np = _float(data, shape)
    x = leaf(x_np, device)
    axis = data.draw(st.integers(-x_np.ndim - 1, x_np.ndim), label="axis")
    np.testing.assert_array_equal(lp.expand_dims(x, axis=axis).numpy(), np.expand_dims(x_np, axis))
    ones = tuple(i for i, n in enumerate(shape) if n == 1)
    np.testing.assert_array_equal(lp.squeeze(x, axis=ones).numpy(), np.squeeze(x_np, ones))
    if x_np.ndim:
        src = data.draw(st.lists(st.integers(0, x_np.ndim - 1), unique=True, max_size=x_np.ndim), label="src")
        dst = data.draw(st.permutations(range(x_np.ndim)), label="dst")[: len(src)]
        np.testing.assert_array_equal(lp.moveaxis(x, tuple(src), tuple(dst)).numpy(),
                                      np.moveaxis(x_np, src, dst))


