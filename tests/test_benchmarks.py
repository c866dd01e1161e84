"""The benchmarks measure what they claim: the contestants compute the same step,
and the scripts run (on tiny sizes here; the figures come from benchmarks/run.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from steps import HandStep, LeanPassStep, TorchStep, available_contestants  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_contestants_compute_the_same_step(dtype):
    classes = [LeanPassStep, HandStep]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        classes.append(TorchStep)
    steps = [cls([20, 16, 8, 5], 12, dtype=dtype) for cls in classes]
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    for _ in range(4):
        losses = [s.loss_value(s()) for s in steps]
        assert max(losses) - min(losses) <= tolerance * abs(losses[0]), losses


def test_throughput_script_runs(capsys):
    import throughput

    medians = throughput.main(["--width", "16", "--depth", "2", "--features", "8", "--batch-size", "32",
                               "--steps", "2", "--rounds", "2", "--warmup", "1"])
    assert "leanpass" in medians and "by hand" in medians
    assert "samples/s" in capsys.readouterr().out
    assert [c.name for c in available_contestants("strict")] == ["leanpass"]
    assert list(throughput.main(["--device", "strict", "--width", "8", "--depth", "1", "--features", "4",
                                 "--batch-size", "8", "--steps", "1", "--rounds", "1"])) == ["leanpass"]


def test_benchmark_runner_runs_and_reports_its_fields(tmp_path, capsys):
    """The runner runs and reports what it measured; how fast or how big is for
    benchmarks/run.py to say, never for a test."""
    pytest.importorskip("threadpoolctl", reason="benchmarks/run.py needs threadpoolctl (the bench extra)")
    import run

    path = tmp_path / "r.json"
    results = run.main(["--only", "W4", "--rounds", "1", "--threads", "1", "--json", str(path)])
    assert set(results) == {"machine", "W4"}
    assert {"date", "cpu", "cores", "python", "numpy", "leanpass"} <= set(results["machine"])
    assert set(results["W4"]) == {"float32", "float64"}
    for figures in results["W4"].values():
        assert set(figures) == {"by hand", "leanpass"}
        assert all(isinstance(v, int) and v > 0 for v in figures.values()), figures
    assert json.loads(path.read_text()) == results
    out = capsys.readouterr().out
    assert "## W4: peak memory of one W1 step" in out and "## W1" not in out
