"""One record for every family (issue 27, item 4): each public function of the namespace
and of ``leanpass.linalg`` / ``leanpass.fft`` is made from a record, the element-wise
op table's, a :class:`~leanpass.ops.statistical.Reduction`, a
:class:`~leanpass.ops.fft.Transform`, or a :class:`~leanpass._namespace._records.Record`
(manipulation, searching, sorting, sets, indexing, linear algebra, ...); only the
functions that make a tensor from nothing (``zeros``, ``asarray``, ``fftfreq``...) and
the dtype queries have none. These tests hold each record to what it says: the
function it names is the public one, its axis kind and dtype policy are what the
function does, a manipulation's backward saves no array, and each method a record
lists calls its function (with the signature its line declares, PyTorch's ``dim=``
where there is an axis)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import leanpass as lp
from leanpass import fft, linalg
from leanpass._namespace import SECTIONS, methods
from leanpass._namespace._records import AXES, DTYPES, RECORDS, Method, _parameters
from leanpass.ops import Op
from leanpass.ops import elementwise as table
from leanpass.ops.fft import TRANSFORMS
from leanpass.ops.statistical import REDUCTIONS

# Functions that make a tensor from no tensor, or answer a question about dtypes: no op
# runs on a tensor, so they have no record.
MAKERS = {"asarray", "arange", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like", "linspace", "ones",
          "ones_like", "zeros", "zeros_like", "can_cast", "finfo", "iinfo", "isdtype", "result_type", "astype",
          "fftfreq", "rfftfreq"}

ELEMENTWISE = {entry.name for entry in (*table.UNARY.values(), *table.BINARY.values())}


def _public():
    """(module, name) of every public function of the namespace and its extensions."""
    found = [(lp, name) for names in SECTIONS.values() for name in names]
    found += [(lp, "einsum")]
    found += [(linalg, name) for name in linalg.__all__]
    found += [(fft, name) for name in fft.__all__]
    return found


def test_every_public_function_comes_from_one_record():
    unrecorded, twice = [], []
    for module, name in _public():
        sources = [name in ELEMENTWISE and module is lp, name in REDUCTIONS and module is lp,
                   name in TRANSFORMS and module is fft, name in RECORDS, name in MAKERS]
        if module is linalg and getattr(linalg, name) is getattr(lp, name, None):
            continue  # matmul, tensordot...: the main namespace's, listed there
        if sum(sources) == 0:
            unrecorded.append(f"{module.__name__}.{name}")
        elif sum(sources) > 1:
            twice.append(f"{module.__name__}.{name}")
    assert not unrecorded, f"public functions made from no record: {unrecorded}"
    assert not twice, f"public functions with two records: {twice}"


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_record_is_the_public_function(name):
    record = RECORDS[name]
    module = {"linalg": linalg, "fft": fft}.get(record.section, lp)
    assert getattr(module, name) is record.function
    assert record.function.__name__ == name
    assert record.function.__doc__, f"{name} has no docstring"
    assert record.dtype in DTYPES and (record.axes is None or record.axes in AXES)
    assert record.op is None or isinstance(record.op, Op)


def test_a_manipulation_saves_no_array():
    """What a manipulation's backward needs is its input's shape, never its values: each
    manipulation record's op saves no input and not its output, so an in-place change of
    either after the forward never makes its backward raise."""
    for record in RECORDS.values():
        if record.section == "manipulation":
            assert record.op.saves == () and not record.op.saves_out, record.name


# ---- one call of each function, on float32 tensors -------------------------------------------


def _t(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return lp.asarray(rng.standard_normal(shape).astype(dtype))


def _spd(dtype="float32"):
    a = _t((3, 3), dtype)
    return a @ a.mT + 3 * lp.eye(3, dtype=dtype)


X = (2, 3, 4)
SAMPLES = {  # name: (function of a dtype giving the call's result, the axis argument's bad value call)
    "reshape": lambda d: lp.reshape(_t(X, d), (4, 6)),
    "permute_dims": lambda d: lp.permute_dims(_t(X, d), (2, 0, 1)),
    "moveaxis": lambda d: lp.moveaxis(_t(X, d), 0, -1),
    "expand_dims": lambda d: lp.expand_dims(_t(X, d), axis=3),
    "squeeze": lambda d: lp.squeeze(_t((2, 1, 4), d), axis=1),
    "broadcast_to": lambda d: lp.broadcast_to(_t(X, d), (5, 2, 3, 4)),
    "broadcast_arrays": lambda d: lp.broadcast_arrays(_t(X, d), _t((3, 4), d)),
    "flip": lambda d: lp.flip(_t(X, d), axis=(0, 2)),
    "roll": lambda d: lp.roll(_t(X, d), 1, axis=2),
    "unstack": lambda d: lp.unstack(_t(X, d), axis=1),
    "repeat": lambda d: lp.repeat(_t(X, d), 2, axis=1),
    "tile": lambda d: lp.tile(_t(X, d), (2, 1, 1)),
    "concat": lambda d: lp.concat([_t(X, d), _t(X, d)], axis=1),
    "stack": lambda d: lp.stack([_t(X, d), _t(X, d)], axis=3),
    "nonzero": lambda d: lp.nonzero(_t(X, d)),
    "searchsorted": lambda d: lp.searchsorted(lp.sort(_t((5,), d)), _t((3,), d)),
    "where": lambda d: lp.where(_t(X, d) > 0, _t(X, d), 0.0),
    "argsort": lambda d: lp.argsort(_t(X, d), axis=1),
    "sort": lambda d: lp.sort(_t(X, d), axis=1),
    "diff": lambda d: lp.diff(_t(X, d), axis=1),
    "take": lambda d: lp.take(_t(X, d), lp.asarray([2, 0]), axis=1),
    "take_along_axis": lambda d: lp.take_along_axis(_t(X, d), lp.argsort(_t(X, d), axis=1), axis=1),
    "unique_all": lambda d: lp.unique_all(_t(X, d)),
    "unique_counts": lambda d: lp.unique_counts(_t(X, d)),
    "unique_inverse": lambda d: lp.unique_inverse(_t(X, d)),
    "unique_values": lambda d: lp.unique_values(_t(X, d)),
    "matrix_transpose": lambda d: lp.matrix_transpose(_t(X, d)),
    "tensordot": lambda d: lp.tensordot(_t(X, d), _t((4, 5), d), axes=1),
    "vecdot": lambda d: lp.vecdot(_t(X, d), _t((3, 4), d), axis=-1),
    "matmul": lambda d: lp.matmul(_t(X, d), _t((4, 5), d)),
    "einsum": lambda d: lp.einsum("ijk,kl->ijl", _t(X, d), _t((4, 5), d)),
    "tril": lambda d: lp.tril(_t(X, d), k=1),
    "triu": lambda d: lp.triu(_t(X, d), k=-1),
    "meshgrid": lambda d: lp.meshgrid(_t((2,), d), _t((3,), d)),
    "clip": lambda d: lp.clip(_t(X, d), min=-0.5, max=0.5),
    "fftshift": lambda d: fft.fftshift(_t(X, d), axes=(0, 2)),
    "ifftshift": lambda d: fft.ifftshift(_t(X, d), axes=1),
    "cross": lambda d: linalg.cross(_t((2, 3), d), _t((2, 3), d, 1)),
    "outer": lambda d: linalg.outer(_t((2,), d), _t((3,), d)),
    "diagonal": lambda d: linalg.diagonal(_t(X, d), offset=1),
    "trace": lambda d: linalg.trace(_t(X, d)),
    "inv": lambda d: linalg.inv(_spd(d)),
    "solve": lambda d: linalg.solve(_spd(d), _t((3, 2), d)),
    "pinv": lambda d: linalg.pinv(_t((3, 2), d)),
    "det": lambda d: linalg.det(_spd(d)),
    "slogdet": lambda d: linalg.slogdet(_spd(d)),
    "matrix_power": lambda d: linalg.matrix_power(_spd(d), 2),
    "matrix_rank": lambda d: linalg.matrix_rank(_spd(d)),
    "cholesky": lambda d: linalg.cholesky(_spd(d)),
    "eigh": lambda d: linalg.eigh(_spd(d)),
    "eigvalsh": lambda d: linalg.eigvalsh(_spd(d)),
    "qr": lambda d: linalg.qr(_t((3, 2), d)),
    "svd": lambda d: linalg.svd(_t((3, 2), d)),
    "svdvals": lambda d: linalg.svdvals(_t((3, 2), d)),
    "vector_norm": lambda d: linalg.vector_norm(_t(X, d), axis=(0, 2)),
    "matrix_norm": lambda d: linalg.matrix_norm(_t(X, d)),
    "norm": lambda d: linalg.norm(_t(X, d)),
}
# An axis out of range, for each record that has an axis: IndexError naming the function.
BAD_AXIS = {
    "moveaxis": lambda: lp.moveaxis(_t(X), 3, 0),
    "expand_dims": lambda: lp.expand_dims(_t(X), axis=4),
    "squeeze": lambda: lp.squeeze(_t((2, 1)), axis=2),
    "flip": lambda: lp.flip(_t(X), axis=(0, 3)),
    "roll": lambda: lp.roll(_t(X), 1, axis=-4),
    "unstack": lambda: lp.unstack(_t(X), axis=3),
    "repeat": lambda: lp.repeat(_t(X), 2, axis=3),
    "concat": lambda: lp.concat([_t(X), _t(X)], axis=3),
    "stack": lambda: lp.stack([_t(X), _t(X)], axis=4),
    "argsort": lambda: lp.argsort(_t(X), axis=3),
    "sort": lambda: lp.sort(_t(X), axis=-4),
    "diff": lambda: lp.diff(_t(X), axis=3),
    "take": lambda: lp.take(_t(X), lp.asarray([0]), axis=3),
    "take_along_axis": lambda: lp.take_along_axis(_t(X), lp.zeros(X, dtype="int64"), axis=3),
    "vecdot": lambda: lp.vecdot(_t(X), _t(X), axis=-4),
    "fftshift": lambda: fft.fftshift(_t(X), axes=3),
    "ifftshift": lambda: fft.ifftshift(_t(X), axes=(0, -4)),
    "cross": lambda: linalg.cross(_t((2, 3)), _t((2, 3)), axis=-3),
    "vector_norm": lambda: linalg.vector_norm(_t(X), axis=3),
}


def test_every_record_has_a_sample_and_every_axis_a_bad_one():
    assert set(SAMPLES) == set(RECORDS)
    assert set(BAD_AXIS) == {name for name, r in RECORDS.items() if r.axes is not None}


def _tensors(result):
    if isinstance(result, lp.Tensor):
        return [result]
    return [t for part in result for t in _tensors(part)]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_dtype_policy(name):
    """float32 in, then: "keep", "promote" and "floating" give float32; "index" int64;
    "bool" bool ("own": each function's docstring says)."""
    record = RECORDS[name]
    results = _tensors(SAMPLES[name]("float32"))
    expected = {"keep": "float32", "promote": "float32", "floating": "float32", "index": "int64",
                "bool": "bool"}.get(record.dtype)
    if expected is not None:
        assert {str(t.dtype) for t in results} == {expected}, name
    if record.dtype == "floating":  # integer input: refused, naming the function
        with pytest.raises(TypeError, match=name):
            SAMPLES[name]("int64")


@pytest.mark.parametrize("name", sorted(BAD_AXIS))
def test_an_axis_out_of_range_is_an_index_error_naming_the_function(name):
    with pytest.raises(IndexError, match=rf"^{name}: "):
        BAD_AXIS[name]()


# ---- methods --------------------------------------------------------------------------------


def _listed():
    return [(r, m, spec.line if isinstance(spec, Method) else spec) for r in RECORDS.values()
            for m, spec in r.methods.items()]


@pytest.mark.parametrize(("record", "name", "line"), _listed(), ids=[m for _, m, _ in _listed()])
def test_a_records_method_is_tensors_with_the_signature_its_line_declares(record, name, line):
    method = getattr(lp.Tensor, name)
    assert methods.REGISTRY[name] is method
    declared = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                  *_parameters(line)])
    shown = str(inspect.signature(method))
    assert shown.startswith(str(declared)[:-1]), (shown, declared)
    assert ("dim=None" in shown) == ("axis" in line)


METHOD_CALLS = {  # a method call and the function call it is
    "reshape": (lambda t: t.reshape(4, 6), lambda t: lp.reshape(t, (4, 6))),
    "view": (lambda t: t.view((-1,)), lambda t: lp.reshape(t, (-1,))),
    "permute": (lambda t: t.permute(2, 0, 1), lambda t: lp.permute_dims(t, (2, 0, 1))),
    "moveaxis": (lambda t: t.moveaxis(0, 2), lambda t: lp.moveaxis(t, 0, 2)),
    "movedim": (lambda t: t.movedim((0, 1), (2, 0)), lambda t: lp.moveaxis(t, (0, 1), (2, 0))),
    "expand_dims": (lambda t: t.expand_dims(1), lambda t: lp.expand_dims(t, axis=1)),
    "unsqueeze": (lambda t: t.unsqueeze(dim=-1), lambda t: lp.expand_dims(t, axis=-1)),
    "squeeze": (lambda t: t[:, :1].squeeze(), lambda t: lp.squeeze(t[:, :1], axis=1)),
    "broadcast_to": (lambda t: t.broadcast_to((2, 2, 3, 4)), lambda t: lp.broadcast_to(t, (2, 2, 3, 4))),
    "flip": (lambda t: t.flip(dim=1), lambda t: lp.flip(t, axis=1)),
    "roll": (lambda t: t.roll(2, 1), lambda t: lp.roll(t, 2, axis=1)),
    "unbind": (lambda t: t.unbind(2), lambda t: lp.unstack(t, axis=2)),
    "tile": (lambda t: t.tile(2, 1, 1), lambda t: lp.tile(t, (2, 1, 1))),
    "nonzero": (lambda t: t.nonzero(), lambda t: lp.nonzero(t)),
    "argsort": (lambda t: t.argsort(None, True), lambda t: lp.argsort(t, axis=-1, descending=True)),
    "diff": (lambda t: t.diff(2, 1), lambda t: lp.diff(t, n=2, axis=1)),
    "matmul": (lambda t: t.matmul(other=t.mT), lambda t: lp.matmul(t, t.mT)),
    "tril": (lambda t: t.tril(diagonal=1), lambda t: lp.tril(t, k=1)),
    "triu": (lambda t: t.triu(), lambda t: lp.triu(t)),
    "det": (lambda t: (t[0, :3, :3] + 3 * lp.eye(3)).det(), lambda t: linalg.det(t[0, :3, :3] + 3 * lp.eye(3))),
    "matrix_power": (lambda t: t[:, :3, :3].matrix_power(3), lambda t: linalg.matrix_power(t[:, :3, :3], 3)),
    "cholesky": (lambda t: _spd("float64").cholesky(True), lambda t: linalg.cholesky(_spd("float64"), upper=True)),
    "trace": (lambda t: t.trace(offset=1), lambda t: linalg.trace(t, offset=1)),
}


def test_every_records_method_has_a_call():
    assert set(METHOD_CALLS) == {name for _, name, _ in _listed()}


@pytest.mark.parametrize("name", sorted(METHOD_CALLS))
def test_a_records_method_gives_what_its_function_gives(name):
    by_method, by_function = METHOD_CALLS[name]
    t = _t(X, "float64")
    got, want = _tensors(by_method(t)), _tensors(by_function(t))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_method_refuses_what_its_line_does_not_take():
    t = _t(X, "float64")
    with pytest.raises(TypeError, match=r"roll\(\) takes 2 positional arguments \(shift, axis\) but 3 were given"):
        t.roll(1, 0, 2)
    with pytest.raises(TypeError, match=r"flip\(\) got an unexpected keyword argument 'dims'"):
        t.flip(dims=1)
    with pytest.raises(TypeError, match=r"roll\(\) got multiple values for argument 'shift'"):
        t.roll(1, shift=2)
    with pytest.raises(TypeError, match=r"unsqueeze\(\) missing required argument 'axis'"):
        t.unsqueeze()
    with pytest.raises(TypeError, match="give axis or dim"):
        t.flip(0, dim=1)
    with pytest.raises(TypeError, match=r"nonzero\(\) takes no arguments \(1 given\)"):
        t.nonzero(0)


def test_a_methods_pytorch_names_and_none_for_the_default():
    """A record's method may name its parameters as PyTorch does (``t.matmul(other=)``,
    ``t.tril(diagonal=)``), and None for an axis whose function default is another
    value means that default (``t.argsort(None)``, as ``t.sort(None)``)."""
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).normal(size=(3, 3))
    t, ref = lp.asarray(a), torch.tensor(a)
    np.testing.assert_allclose(t.matmul(other=t.mT).numpy(), ref.matmul(other=ref.mT).numpy(), rtol=1e-14)
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(t.tril(diagonal=k).numpy(), ref.tril(diagonal=k).numpy())
        np.testing.assert_array_equal(t.triu(k).numpy(), ref.triu(k).numpy())
    np.testing.assert_array_equal(t.argsort(None).numpy(), t.argsort().numpy())
    np.testing.assert_array_equal(t.argsort(axis=None).numpy(), t.sort(None).indices.numpy())
    assert str(inspect.signature(lp.Tensor.matmul)) == "(self, other)"
    with pytest.raises(TypeError, match=r"det\(\) takes no arguments \(1 given\)"):
        t.det(1)
    assert lp.Tensor.det.__doc__.startswith("``leanpass.linalg.det(t, ...)``")
