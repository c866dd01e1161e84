"""einops' main API on Tensors (leanpass/_einops.py): ``einops.rearrange``, ``reduce``,
``repeat``, ``pack``/``unpack``, ``einsum``, with values and gradients compared to
einops on PyTorch tensors (float64), on every device; and the hook that defines the
backend once einops is imported, whichever of einops and leanpass comes first
(leanpass/_after_import.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from helpers import close

import leanpass as lp
from leanpass import Tensor
from leanpass._after_import import after_import

einops = pytest.importorskip("einops", reason="einops is not installed (pip install einops)")

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="the comparison with PyTorch needs torch")

SHAPE = (2, 3, 4, 6)

# name: f(einops, x) for an x of SHAPE; run on a Tensor and on a torch tensor.
CASES = {
    "rearrange permute": lambda e, x: e.rearrange(x, "b c h w -> b h w c"),
    "rearrange merge": lambda e, x: e.rearrange(x, "b c h w -> (b c) (h w)"),
    "rearrange split": lambda e, x: e.rearrange(x, "b c (h h2) w -> b (c h2) h w", h2=2),
    "rearrange ellipsis": lambda e, x: e.rearrange(x, "b ... w -> w ... b"),
    "rearrange new axis": lambda e, x: e.rearrange(x, "b c h w -> b 1 c h w 1"),
    "reduce sum": lambda e, x: e.reduce(x, "b c h w -> b w", "sum"),
    "reduce mean": lambda e, x: e.reduce(x, "b c h w -> c", "mean"),
    "reduce max pool": lambda e, x: e.reduce(x, "b c (h 2) (w 2) -> b c h w", "max"),
    "reduce min": lambda e, x: e.reduce(x, "b c h w -> b h", "min"),
    "reduce prod": lambda e, x: e.reduce(x, "b c h w -> b c w", "prod"),
    "reduce keep axis": lambda e, x: e.reduce(x, "b c h w -> b c () ()", "mean"),
    "repeat new axis": lambda e, x: e.repeat(x, "b c h w -> b c h w r", r=3),
    "repeat into axis": lambda e, x: e.repeat(x, "b c h w -> b (r c) h w", r=2),
    "repeat two axes": lambda e, x: e.repeat(x, "b c h w -> r b c s h w", r=2, s=3),
    "list of tensors": lambda e, x: e.rearrange([x[0], x[1] * 2.0], "n c h w -> c (n h) w"),
    "einsum": lambda e, x: e.einsum(x, x[0], "b c h w, c h v -> b w v"),
}


def run_both(case, device, seed=0):
    """The case on a Tensor and on a torch tensor of the same values: (out, x) for each."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.5, 1.5, SHAPE) * rng.choice([-1.0, 1.0], SHAPE)  # no ties, no zeros
    x = Tensor(values, requires_grad=True, device=device)
    xt = torch.tensor(values, requires_grad=True)
    out, out_t = CASES[case](einops, x), CASES[case](einops, xt)
    return (out, x), (out_t, xt)


@needs_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_values_and_gradients_match_einops_on_torch(case, device):
    (out, x), (out_t, xt) = run_both(case, device)
    assert isinstance(out, Tensor) and out.device == x.device and out.dtype == lp.float64
    assert tuple(out.shape) == tuple(out_t.shape)
    close(out, out_t)
    weights = np.random.default_rng(1).standard_normal(tuple(out_t.shape))
    (out * Tensor(weights, device=device)).sum().backward()
    (out_t * torch.tensor(weights)).sum().backward()
    close(x.grad, xt.grad)


@needs_torch
def test_pack_and_unpack(device):
    rng = np.random.default_rng(2)
    shapes = [(2, 5), (2, 3, 5), (2, 5)]
    values = [rng.standard_normal(s) for s in shapes]
    xs = [Tensor(v, requires_grad=True, device=device) for v in values]
    xts = [torch.tensor(v, requires_grad=True) for v in values]
    packed, ps = einops.pack(xs, "b * e")
    packed_t, ps_t = einops.pack(xts, "b * e")
    assert ps == ps_t == [(), (3,), ()]
    close(packed, packed_t)
    parts = einops.unpack(packed * 3.0, ps, "b * e")
    parts_t = einops.unpack(packed_t * 3.0, ps_t, "b * e")
    assert [tuple(p.shape) for p in parts] == shapes
    loss = sum(((p * p).sum() * (i + 1) for i, p in enumerate(parts)), start=lp.asarray(0.0, device=device))
    loss_t = sum((p * p).sum() * (i + 1) for i, p in enumerate(parts_t))
    loss.backward()
    loss_t.backward()
    for x, xt in zip(xs, xts):
        close(x.grad, xt.grad)


def test_any_all_and_the_other_helpers(device):
    x = lp.asarray([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]], device=device)
    assert einops.reduce(x > 0, "a b -> a", "all").tolist() == [False, True]
    assert einops.reduce(x > 4, "a b -> b", "any").tolist() == [False, False, True]
    assert einops.parse_shape(x, "a b") == {"a": 2, "b": 3}
    host = einops.asnumpy(Tensor([1.0, 2.0], requires_grad=True, device=device))
    assert type(host) is np.ndarray and host.tolist() == [1.0, 2.0]
    with pytest.raises(NotImplementedError, match="non-floating"):  # einops' own rule
        einops.reduce(lp.asarray([[1, 2]], device=device), "a b -> a", "mean")
    backend = einops._backends.get_backend(x)
    assert backend.framework_name == "leanpass"
    assert backend.arange(0, 3).tolist() == [0, 1, 2]
    assert isinstance(backend.from_numpy(np.ones(2)), Tensor)


def test_einsum_without_leanpass_einsum_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "leanpass._namespace.einsum", None)  # the import fails
    x = lp.ones((2, 2))
    with pytest.raises(NotImplementedError, match="leanpass.einsum"):
        einops.einsum(x, x, "a b, b c -> a c")


# ---- the hook: the backend exists once both are imported, in either order ----------------------

IMPORT_ORDER = {
    "einops first": "import einops\nimport leanpass as lp\n",
    "leanpass first": "import leanpass as lp\nassert 'einops' not in sys.modules\nimport einops\n",
    "leanpass, then einops.array_api": "import leanpass as lp\nimport einops.array_api\nimport einops\n",
}


@pytest.mark.parametrize("order", sorted(IMPORT_ORDER))
def test_either_import_order(order):
    code = "import sys\n" + IMPORT_ORDER[order] + textwrap.dedent("""
        x = lp.Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        y = einops.rearrange(x, "a b -> b a")
        einops.reduce(y, "b a -> a", "max").sum().backward()
        assert y.shape == (3, 2) and x.grad.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]], x.grad
        # the hook is gone and einops' module is as its own loader left it
        assert not [f for f in sys.meta_path if type(f).__module__ == "leanpass._after_import"], sys.meta_path
        assert type(einops.__loader__).__module__ != "leanpass._after_import"
        assert einops.__spec__.loader is einops.__loader__
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_import_leanpass_does_not_import_einops():
    code = "import sys, leanpass\nassert 'einops' not in sys.modules and 'leanpass._einops' not in sys.modules\n"
    result = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """A folder on sys.path for modules made up by a test; they leave sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("leanpass_made_up"):
            del sys.modules[name]


def test_after_import_runs_the_callback_once_the_module_is_imported(module_dir):
    (module_dir / "leanpass_made_up_a.py").write_text("VALUE = 1\n")
    calls = []
    after_import("leanpass_made_up_a", lambda: calls.append(sys.modules["leanpass_made_up_a"].VALUE))
    assert calls == []
    import leanpass_made_up_a

    assert calls == [1]
    assert type(leanpass_made_up_a.__loader__).__name__ == "SourceFileLoader"
    assert not [f for f in sys.meta_path if type(f).__module__ == "leanpass._after_import"]
    after_import("leanpass_made_up_a", lambda: calls.append("now"))  # already imported: at once
    assert calls == [1, "now"]


def test_after_import_a_failing_callback_warns_and_the_import_goes_on(module_dir):
    (module_dir / "leanpass_made_up_b.py").write_text("VALUE = 2\n")

    def fails():
        raise ImportError("too old")

    after_import("leanpass_made_up_b", fails)
    with pytest.warns(RuntimeWarning, match=r"could not hook into leanpass_made_up_b \(ImportError: too old\)"):
        import leanpass_made_up_b
    assert leanpass_made_up_b.VALUE == 2


def test_after_import_of_a_module_that_is_not_installed(module_dir):
    after_import("leanpass_made_up_missing", lambda: pytest.fail("called"))
    try:
        with pytest.raises(ModuleNotFoundError), warnings.catch_warnings():
            warnings.simplefilter("error")
            import leanpass_made_up_missing  # noqa: F401
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "name", None) != "leanpass_made_up_missing"]
