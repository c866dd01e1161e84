"""Tensor methods are attached one way (issue 27, item 4): every public method of Tensor
that comes from the namespace layer is an entry of ``leanpass._namespace.methods.REGISTRY``
(the element-wise op table's method names, each module's ``METHODS``, and methods.py's own),
and the registry is what Tensor carries."""

from __future__ import annotations

import inspect

from leanpass import Tensor
from leanpass._namespace import methods
from leanpass.ops import elementwise as table


def _from_namespace(value) -> bool:
    function = inspect.unwrap(value) if callable(value) else None
    return function is not None and getattr(function, "__module__", "").startswith("leanpass._namespace")


def test_every_namespace_method_of_tensor_comes_from_the_registry():
    loose = sorted(name for name, value in vars(Tensor).items()
                   if not name.startswith("_") and _from_namespace(value) and methods.REGISTRY.get(name) is not value)
    assert not loose, f"Tensor methods attached outside methods.REGISTRY: {loose}"


def test_the_registry_is_what_tensor_carries():
    assert {name: getattr(Tensor, name) for name in methods.REGISTRY} == methods.REGISTRY


def test_the_element_wise_methods_come_from_the_op_records():
    """Each element-wise table entry's ``method`` names are methods of Tensor that apply
    the entry's function (unless methods.py gives a familiar signature instead)."""
    for entry in (*table.UNARY.values(), *table.BINARY.values()):
        for name in entry.method:
            assert name in methods.REGISTRY, (entry.name, name)
            if name not in methods.METHODS:
                assert methods.REGISTRY[name] is methods.ELEMENTWISE[name]


def test_the_reductions_and_their_methods_come_from_the_op_records():
    """Each Reduction record (sum, var, cumulative_sum, argmax, all...) makes its
    namespace function, with the standard's signature, and its Tensor methods."""
    import inspect

    import leanpass as lp
    from leanpass._namespace import statistical
    from leanpass.ops.statistical import REDUCTIONS

    standard = {  # the array API standard's signatures (2024.12)
        "sum": "(x, /, *, axis=None, dtype=None, keepdims=False)",
        "prod": "(x, /, *, axis=None, dtype=None, keepdims=False)",
        "mean": "(x, /, *, axis=None, keepdims=False)",
        "max": "(x, /, *, axis=None, keepdims=False)",
        "min": "(x, /, *, axis=None, keepdims=False)",
        "var": "(x, /, *, axis=None, correction=0.0, keepdims=False)",
        "std": "(x, /, *, axis=None, correction=0.0, keepdims=False)",
        "cumulative_sum": "(x, /, *, axis=None, dtype=None, include_initial=False)",
        "cumulative_prod": "(x, /, *, axis=None, dtype=None, include_initial=False)",
        "argmax": "(x, /, *, axis=None, keepdims=False)",
        "argmin": "(x, /, *, axis=None, keepdims=False)",
        "count_nonzero": "(x, /, *, axis=None, keepdims=False)",
        "all": "(x, /, *, axis=None, keepdims=False)",
        "any": "(x, /, *, axis=None, keepdims=False)",
    }
    assert set(REDUCTIONS) == set(standard)
    for name, record in REDUCTIONS.items():
        function = getattr(lp, name)
        assert function is statistical.FUNCTIONS[name]
        assert str(inspect.signature(function)) == standard[name], name
        for method in record.method:
            assert methods.REGISTRY[method] is statistical.METHODS[method], (name, method)


def test_a_reduction_refuses_what_its_signature_does_not_take():
    import numpy as np
    import pytest

    import leanpass as lp

    x = lp.asarray(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match="sum\\(\\) got an unexpected keyword argument 'correction'"):
        lp.sum(x, correction=1)
    with pytest.raises(TypeError, match="cumulative_sum\\(\\) got an unexpected keyword argument 'keepdims'"):
        lp.cumulative_sum(x, axis=0, keepdims=True)
    with pytest.raises(TypeError):
        lp.sum(x, 0)  # the standard's axis is keyword-only
    with pytest.raises(TypeError, match="var\\(\\) takes 1 positional argument \\(axis\\) but 2 were given"):
        x.var(0, True)  # PyTorch's unbiased=True: refused, not read as keepdims
    with pytest.raises(TypeError, match="cumsum\\(\\) got an unexpected keyword argument 'keepdim'"):
        x.cumsum(dim=0, keepdim=True)
    with pytest.raises(TypeError, match="got multiple values for argument 'axis'"):
        x.sum(0, axis=1)
    assert x.sum(1, True).shape == (2, 1) and x.sum(dim=0, keepdim=True).shape == (1, 3)
    import inspect  # what help() and an editor show

    assert str(inspect.signature(lp.Tensor.sum)) == (
        "(self, axis=None, keepdims=False, *, dtype=None, dim=None, keepdim=None)")
    assert str(inspect.signature(lp.Tensor.var)) == (
        "(self, axis=None, *, correction=0.0, keepdims=False, dim=None, keepdim=None)")
    assert str(inspect.signature(lp.Tensor.cumsum)) == (
        "(self, axis=None, *, dtype=None, include_initial=False, dim=None)")
    assert str(inspect.signature(lp.Tensor.max)) == "(self, *, axis=None, keepdims=False, dim=None, keepdim=None)"
    assert x.cumsum(dim=1).shape == (2, 3) and x.argmax(1).shape == (2,)
