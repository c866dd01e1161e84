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
