"""The benchmarks measure what they claim: the contestants compute the same step,
and the scripts run (on tiny sizes here; the figures come from benchmarks/run.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from steps import HandStep, LeanPassStep, TorchStep, available_contestants, model_steps  # noqa: E402


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


def test_throughput_script_times_a_compiled_step_of_given_sizes(capsys):
    """--sizes gives the MLP's layers, --compile adds LeanPass's step through
    lp.compile beside the eager one; the two start from the same weights and data."""
    import throughput

    medians = throughput.main(["--sizes", "8", "12", "6", "3", "--batch-size", "16", "--compile", "--steps", "2",
                               "--rounds", "1", "--warmup", "1", "--only", "leanpass", "hand"])
    assert list(medians) == ["leanpass", "leanpass compiled", "by hand"]
    out = capsys.readouterr().out
    assert "MLP [8, 12, 6, 3], batch 16" in out
    rows = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in out.splitlines()
            if line.startswith("| leanpass")}
    assert rows["leanpass"] == rows["leanpass compiled"]  # the first loss: the same step
    for bad in (["--sizes", "8"], ["--model", "cnn", "--sizes", "8", "3"]):
        with pytest.raises(SystemExit):
            throughput.main(bad)


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_model_steps_compute_the_same_step(kind):
    """The CNN and the transformer the benchmarks time: LeanPass, loaded with
    PyTorch's initial weights, gives PyTorch's losses step after step."""
    pytest.importorskip("torch", reason="the comparison needs PyTorch")
    steps = model_steps(kind, 4, dtype="float64", width=8, depth=1)
    assert list(steps) == ["pytorch", "leanpass"]
    for _ in range(3):
        losses = [s.loss_value(s()) for s in steps.values()]
        assert abs(losses[0] - losses[1]) <= 1e-10 * abs(losses[0]), losses
    assert list(model_steps(kind, 2, device="strict", width=4, depth=1)) == ["leanpass"]


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_throughput_script_runs_the_cnn_and_the_transformer(model, capsys):
    import throughput

    medians = throughput.main(["--model", model, "--width", "8", "--depth", "1", "--batch-size", "2", "--steps", "1",
                               "--rounds", "1", "--warmup", "0", "--only", "leanpass", "--compile"])
    assert list(medians) == ["leanpass", "leanpass compiled"]
    assert "samples/s" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        throughput.main(["--model", model, "--only", "hand"])


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



# torch.func's jvp, on first use: a DeprecationWarning in PyTorch 2.13, a FutureWarning in 2.14
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:FutureWarning")
def test_hvp_benchmark_runs_checks_and_reports_its_fields(tmp_path, capsys):
    """W7 runs (its contestants' HVPs agree, or it raises) and reports HVP and plain
    gradient times per contestant; PyTorch's columns only where PyTorch is installed."""
    pytest.importorskip("threadpoolctl", reason="benchmarks/run.py needs threadpoolctl (the bench extra)")
    import run

    results = run.main(["--only", "W7", "--rounds", "1", "--threads", "1", "--json", str(tmp_path / "r.json")])
    hvp_names, grad_names = ["leanpass"], ["leanpass"]
    if run.torch is not None:
        hvp_names, grad_names = ["pytorch", "pytorch double backward", "leanpass"], ["pytorch", "leanpass"]
    assert list(results["W7"]) == ["float32/1", "float64/1"]
    for figures in results["W7"].values():
        assert list(figures["hvp_ms"]) == hvp_names and list(figures["grad_ms"]) == grad_names
        assert all(v > 0 for v in [*figures["hvp_ms"].values(), *figures["grad_ms"].values()]), figures
    out = capsys.readouterr().out
    assert "## W7: Hessian-vector product" in out and "## W1" not in out
    assert "leanpass HVP ms (ratio to " in out


def test_hvp_benchmark_check_rejects_a_wrong_hvp():
    """The agreement check raises on an HVP off by more than its tolerance, on a
    missing one, and passes one off by less (relative to the tensor's largest entry)."""
    pytest.importorskip("threadpoolctl", reason="benchmarks/run.py needs threadpoolctl (the bench extra)")
    import run

    _, _, params, tangents = run.hvp_problem("float64")
    hvp, _ = run.hvp_leanpass(*run.hvp_problem("float64"))
    reference = [np.asarray(h) for h in hvp()]
    assert [r.shape for r in reference] == [p.shape for p in params]
    assert all(np.abs(r).max() > 0 for r in reference)  # tanh: every layer has curvature
    run.check_hvps("leanpass", reference, reference, 1e-6)
    close = [r + 1e-8 * np.abs(r).max() for r in reference]
    run.check_hvps("close", close, reference, 1e-6)
    wrong = [r.copy() for r in reference]
    wrong[2].flat[0] += 1e-4 * np.abs(wrong[2]).max()
    with pytest.raises(RuntimeError, match="wrong disagrees with the reference on HVP 2"):
        run.check_hvps("wrong", wrong, reference, 1e-6)
    with pytest.raises(RuntimeError, match="gave 5 HVPs"):
        run.check_hvps("short", reference[:5], reference, 1e-6)


# ---- benchmarks/ddp.py: data-parallel scaling under mpiexec ------------------------------------


def test_ddp_report_computes_ratios_samples_and_speedups():
    """The table's arithmetic, from made-up figures (no MPI needed)."""
    import ddp

    assert ddp.parameter_count([784, 256, 128, 10]) == 235_146
    common = {"dtype": "float32", "rounds": 2, "repeat": 2, "mpi": "MPICH Version: 5", "mpi4py": "4",
              "torch": None, "leanpass": "0"}
    runs = {1: dict(common, processes=1, step_ms={ddp.HAND: 1.0, ddp.LEANPASS: 2.0}, allreduce_ms=0.01,
                     compute_ms=0.9),
            2: dict(common, processes=2, step_ms={ddp.HAND: 1.25, ddp.LEANPASS: 4.0}, allreduce_ms=0.5,
                     compute_ms=1.1)}
    text = ddp.report(runs, {"date": "d", "cpu": "c", "cores": 2, "python": "3", "numpy": "2"})
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and "contestant" not in line]
    assert rows == [
        ["1", ddp.HAND, "1.000", "1.00x", "128,000", "1.00x"],
        ["1", ddp.LEANPASS, "2.000", "2.00x", "64,000", "1.00x"],
        ["2", ddp.HAND, "1.250", "1.00x", "204,800", "1.60x"],
        ["2", ddp.LEANPASS, "4.000", "3.20x", "64,000", "1.00x"],
    ]
    assert ("2 processes: bare Allreduce of 235,146 float32 (0.94 MB): 0.500 ms per call; "
            "the by-hand step without it (compute alone): 1.100 ms") in text
    assert f"{ddp.TORCH}: left out, PyTorch is not installed" in text


def test_ddp_benchmark_without_mpiexec_says_why_and_exits_2(monkeypatch, capsys):
    import ddp

    monkeypatch.setattr(ddp, "find_mpiexec", lambda: None)
    with pytest.raises(SystemExit) as exc:
        ddp.main(["--processes", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and ("mpiexec" in err or "mpi4py" in err), err


@pytest.mark.slow
@pytest.mark.mpi
def test_ddp_benchmark_runs_on_one_and_two_processes(tmp_path):
    """The driver starts mpiexec for 1 and 2 processes and reports every contestant;
    the workers check that the contestants' losses agree and that LeanPass's
    parameters are equal on every rank (a failed check is a non-zero exit)."""
    import ddp

    why = ddp.why_not_runnable()
    if why:
        pytest.skip(f"benchmarks/ddp.py: {why}")
    try:
        import torch  # noqa: F401
    except ImportError:
        names = [ddp.HAND, ddp.LEANPASS]
    else:
        names = [ddp.HAND, ddp.LEANPASS, ddp.TORCH]
    path = tmp_path / "ddp.json"
    done = subprocess.run([sys.executable, ddp.__file__, "--processes", "1", "2", "--rounds", "2", "--repeat", "2",
                           "--json", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("| ") and "contestant" not in line]
    assert [row[:2] for row in rows] == [[str(p), name] for p in (1, 2) for name in names], done.stdout
    for p in (1, 2):
        assert f"{p} process{'es' if p > 1 else ''}: bare Allreduce of 235,146 float32" in done.stdout
    runs = json.loads(path.read_text())["runs"]
    assert set(runs) == {"1", "2"}
    for p, run in runs.items():
        assert run["processes"] == int(p) and list(run["step_ms"]) == names
        assert all(ms > 0 for ms in run["step_ms"].values()) and run["allreduce_ms"] > 0 and run["compute_ms"] > 0


def test_alone_benchmark_runs_a_contestant_in_a_process_of_its_own():
    """benchmarks/alone.py's child reports a step's time, page faults and kernel time
    (how many is for the benchmark to say, never for a test)."""
    pytest.importorskip("threadpoolctl", reason="benchmarks/alone.py needs threadpoolctl (the bench extra)")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "alone.py"
    done = subprocess.run([sys.executable, str(script), "--child", "W5c", "float32", "leanpass", "1"],
                          capture_output=True, text=True, timeout=300, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(figures) == {"ms", "faults", "sys_ms"}
    assert figures["ms"] > 0 and figures["faults"] >= 0 and figures["sys_ms"] >= 0


def test_floor_products_are_the_steps_in_either_layout(capsys):
    """benchmarks/floor.py times a W1 step's products in two weight layouts: the same
    values either way; and the script runs."""
    pytest.importorskip("threadpoolctl", reason="benchmarks/floor.py needs threadpoolctl (the bench extra)")
    import floor

    for a, b in zip(floor.mlp_products("float64", "(in, out)")(), floor.mlp_products("float64", "(out, in)")()):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert len(floor.mlp_products("float32", "(in, out)")()) == 8
    floor.main(["--rounds", "1"])
    out = capsys.readouterr().out
    assert "its 8 products, weights (out, in)" in out and "A target of 0.95x" in out
