"""The code's layers (docs/contributing.md): the import graph of ``leanpass/``, read from
the source with ``ast`` -- function-local imports included -- has no circle, and every
module imports only from its own layer or the layers below it.

Nothing is imported here but the files' text, so a circle that Python would resolve
at run time (a late import, an import inside a function) still counts."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import leanpass

ROOT = Path(leanpass.__file__).parent

# Bottom to top; a module matches the first pattern that names it.
LAYERS = [
    ("dtypes and checks", ["leanpass._dtypes", "leanpass._checks"]),
    ("backends", ["leanpass.backends", "leanpass.backends.*"]),
    ("op records", ["leanpass.ops", "leanpass.ops.*"]),
    ("graph core", ["leanpass._graph", "leanpass._graph.*"]),
    ("tensor", ["leanpass._node", "leanpass._indexing", "leanpass.tensor"]),
    ("namespace", ["leanpass._namespace", "leanpass._namespace.*", "leanpass.linalg", "leanpass.fft",
                   "leanpass.special", "leanpass.serialization", "leanpass.distributed"]),
    ("autograd", ["leanpass.autograd"]),
    ("library", ["leanpass.nn", "leanpass.nn.*", "leanpass.optim", "leanpass.optim.*", "leanpass.data",
                 "leanpass.func", "leanpass.gradcheck", "leanpass._einops", "leanpass._after_import",
                 "leanpass._compile", "leanpass._compile.*", "leanpass._fusion"]),
    ("face", ["leanpass"]),
]


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_of(p): p for p in sorted(ROOT.rglob("*.py"))}


def package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def imported(module: str) -> set[str]:
    """The modules of ``leanpass`` that ``module`` imports anywhere in its text."""
    tree = ast.parse(MODULES[module].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(module)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # ``from pkg import name``: the submodule ``pkg.name`` where there is one, else pkg itself
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


GRAPH = {module: imported(module) for module in MODULES}


def layer_of(module: str) -> int:
    for number, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return number
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/contributing.md's picture)")


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_from_its_layer_or_below(module):
    mine = layer_of(module)
    upward = sorted(f"{other} ({LAYERS[layer_of(other)][0]})" for other in GRAPH[module] if layer_of(other) > mine)
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports from a layer above it: {upward}"


def test_the_import_graph_has_no_circle():
    """Depth-first search, colouring each module; a grey module met again closes a circle."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(GRAPH, white)
    circles = []

    def visit(start):
        stack = [(start, iter(sorted(GRAPH[start])))]
        path = [start]
        colour[start] = grey
        while stack:
            module, children = stack[-1]
            for child in children:
                if colour[child] == grey:
                    circles.append(path[path.index(child):] + [child])
                elif colour[child] == white:
                    colour[child] = grey
                    path.append(child)
                    stack.append((child, iter(sorted(GRAPH[child]))))
                    break
            else:
                colour[module] = black
                path.pop()
                stack.pop()

    for module in sorted(GRAPH):
        if colour[module] == white:
            visit(module)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_reader_sees_function_local_and_relative_imports():
    """The graph above is only as good as its reader: it must see an import inside a
    function (autograd's create_graph rules are handed to the engine, not imported by it)."""
    assert "leanpass._graph.engine" in GRAPH["leanpass.tensor"]
    assert "leanpass.optim.optimizers" in GRAPH["leanpass.optim.lr_scheduler"]
    source = "def f():\n    from .tensor import Tensor\n"
    tree = ast.parse(source)
    inner = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert inner and inner[0].level == 1 and inner[0].module == "tensor"
