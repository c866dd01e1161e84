"""scripts/gpu_check.sh on the CPU: what can be checked before the scarce GPU minutes.

Its syntax; that it stops in its first seconds, with one line, when the wheels it needs
are not all in the wheel folder; that it selects only the tests that need a GPU; that
its time limits fit its deadline; and that the estimates table of docs/devices.md lists
every step the script runs, with the script's numbers. (tests/test_scripts.py checks
its result table and time-limited steps.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
FETCH = ROOT / "scripts" / "fetch_gpu_wheels.sh"
DOC = ROOT / "docs" / "devices.md"
ENV = {**os.environ, "GPU_CHECK_PYTHON": sys.executable}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and GNU timeout")


def bash(script: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**ENV, **env}, timeout=60)


def script_steps() -> list[dict]:
    """The STEPS table of gpu_check.sh, from `gpu_check.sh --steps`."""
    out = subprocess.run(["bash", str(SCRIPT), "--steps"], capture_output=True, text=True, env=ENV, timeout=30)
    assert out.returncode == 0, out.stderr
    header, *rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert header == ["step", "limit_s", "est_s", "est_warm_s", "est_kernels"]
    return [dict(zip(header, row)) for row in rows]


def doc_steps() -> list[dict]:
    """The estimates table of docs/devices.md's "The GPU check" section."""
    text = DOC.read_text()
    section = text[text.index("## The GPU check"):]
    section = section[:section.index("\n## ", 1)]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| step |"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    lines = [line for line in lines[first:end] if not line.startswith("|---")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header[:5] == ["step", "limit (s)", "est. s, first run", "est. s, cache brought", "est. new kernel files"]
    rows = []
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append({"step": cells[0].strip("`"), "limit_s": cells[1], "est_s": cells[2], "est_warm_s": cells[3],
                     "est_kernels": cells[4]})
    return rows


@pytest.mark.parametrize("path", [SCRIPT, FETCH])
def test_bash_syntax(path):
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_clean():
    out = subprocess.run(["shellcheck", str(SCRIPT), str(FETCH)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout


def wanted_wheels() -> list[str]:
    out = subprocess.run(["bash", str(FETCH), "--list"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    names = [re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0] for line in out.stdout.split()]
    assert {"array-api-compat", "array-api-strict"} <= set(names)
    return names


@pytest.mark.parametrize("case", ["missing", "empty", "partial", "two versions"])
def test_stops_at_once_with_one_line_when_wheels_are_missing(case, tmp_path):
    wheels = tmp_path / "whl"
    names = wanted_wheels()
    if case != "missing":
        wheels.mkdir()
    if case in ("partial", "two versions"):
        for name in names[:2]:
            (wheels / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_text("")
    if case == "two versions":
        for name in names[2:]:
            for version in ("1.0", "2.0"):
                (wheels / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_text("")
    results, out_dir = tmp_path / "results", tmp_path / "out"
    env = {**ENV, "GPU_CHECK_WHEEL_DIR": str(wheels), "GPU_CHECK_RESULTS": str(results), "OUT": str(out_dir),
           "GPU_CHECK_DEVICE": "cuda"}
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("gpu_check: stopped: ") and "bash scripts/fetch_gpu_wheels.sh" in line
    culprits = names if case in ("missing", "empty") else names[2:]
    assert all(name in line for name in culprits), line
    if case in ("partial", "two versions"):
        assert not any(name in line for name in names[:2]), line
    assert ("more than one version" in line) == (case == "two versions")
    assert not results.exists() and not out_dir.exists()  # nothing started


def test_the_estimates_table_lists_every_step_the_script_runs():
    steps = script_steps()
    names = [s["step"] for s in steps]
    source = SCRIPT.read_text()
    # every step the code runs or records, by its literal name
    command = (r'(?:^|[;&|(]|\bthen|\belif|\bif)\s*(?:\w+=\S+\s+)*'  # a command's start, maybe VAR=... first
               r'(?:run_step|record|train|limit_for)\s+"?([a-z][a-z_]+)\b')
    run = set(re.findall(command, source, re.M))
    loops = re.findall(r'^later="([^"]+)"', source, re.M)
    run |= {word for loop in loops for word in loop.split()}
    assert run <= set(names), f"steps the script runs without an estimate: {sorted(run - set(names))}"
    assert set(names) <= run | {"preflight"}, f"estimates of steps the script never runs: {set(names) - run}"
    assert doc_steps() == steps, "docs/devices.md's estimates table must match gpu_check.sh --steps"
    for s in steps:
        assert s["limit_s"] == "rest" or int(s["limit_s"]) > 0
        assert all(s[k] == "-" or int(s[k]) >= 0 for k in ("est_s", "est_warm_s", "est_kernels"))


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("earlier", ["estimates", "limits"])
def test_the_limits_fit_the_deadline_and_leave_the_tests_room(warm, earlier):
    """The default deadline and the kill grace fit 6 minutes, and the steps' limits add up to no
    more than the deadline. The tests get twice their estimate when the steps before them take
    their estimated time, and at least their estimate when those run to their limits."""
    steps = {s["step"]: s for s in script_steps()}
    plan = ["cache_restore"] * warm + ["install", "smoke", "tests"] + ["tests_warm"] * warm + [
        "train_mlp", "train_cnn", "train_transformer", "throughput_mlp_small", "throughput_mlp", "throughput_cnn",
        "throughput_transformer", "cache_save"]
    column = "limit_s" if earlier == "limits" else ("est_warm_s" if warm else "est_s")
    before_tests = sum(int(steps[s][column]) for s in ["preflight", *plan[:plan.index("tests")]])
    out = bash(f'source "{SCRIPT}"; start_ms=$(( $(now_ms) - {before_tests} * 1000 )); plan="{" ".join(plan)}"; '
               'echo "$deadline $GRACE_S $(limit_for tests) $(limit_for train_mlp) $(limit_for cache_save)"')
    assert out.returncode == 0, out.stderr
    deadline, grace, tests, train, save = map(int, out.stdout.split())
    assert deadline + grace <= 360
    estimate = int(steps["tests"]["est_warm_s" if warm else "est_s"])
    assert tests >= (2 * estimate if earlier == "estimates" else estimate)
    assert train == int(steps["train_mlp"]["limit_s"]) and save == int(steps["cache_save"]["limit_s"])
    after_tests = max(int(steps[s]["limit_s"]) for s in plan if s.startswith("train_")) + sum(
        int(steps[s]["limit_s"]) for s in plan[plan.index("tests") + 1:] if not s.startswith("train_"))
    assert before_tests + tests + after_tests <= deadline


def collect(files: list[str], plugin_dir: Path | None) -> list[str]:
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files]
    env = {**ENV, "LEANPASS_TEST_DEVICES": "cuda"}
    env.pop("GPU_CHECK_FILES", None)
    if plugin_dir is not None:
        args[4:4] = ["-p", "leanpass_gpu_select"]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin_dir), env.get("PYTHONPATH")) if p)
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_the_selection_keeps_the_gpu_tests_and_drops_the_cpu_only_ones(tmp_path):
    out = bash(f'source "{SCRIPT}"; write_select_plugin "{tmp_path}"')
    assert out.returncode == 0, out.stderr
    files = ["tests/test_backends.py", "tests/test_cuda_standin.py", "tests/test_distributed.py",
             "tests/test_elementwise.py", "tests/test_docs.py"]
    every, kept = collect(files, None), collect(files, tmp_path)
    assert set(kept) < set(every)

    def params(test_id):
        return test_id.partition("[")[2].rstrip("]").split("-")

    on_cuda = {t for t in every if "cuda" in params(t)}  # the device fixture's cuda, in every such test
    assert len(on_cuda) > 400 and on_cuda <= set(kept)
    assert not [t for t in kept if t.startswith("tests/test_cuda_standin.py")]  # the CPU stand-in: CI runs it
    assert len([t for t in kept if "::test_nccl_on_gpus[" in t]) == 14
    assert "tests/test_docs.py::test_page_cuda_examples[devices.md]" in kept
    # nothing else: each kept test is on cuda or says cuda, nccl or gpu in its name
    others = [t for t in kept if t not in on_cuda]
    assert all(re.search("cuda|nccl|gpu", t.split("::")[-1].partition("[")[0], re.I) for t in others), others
    assert not [t for t in every if "::test_collectives_give_the_expected_values" in t and t in kept]


def test_the_summary_sets_the_measurements_beside_the_estimates(tmp_path):
    rows = [("preflight", "PASS", "0.0", "wheels: .whl", "0", "0"),
            ("cache_restore", "N/A", "0.0", "no kernel cache brought", "0", "0"),
            ("tests", "PASS", "92.3", "exit 0, limit 175 s", "5", "1203"),
            ("train_mlp", "TIMEOUT", "60.0", "exit 124, limit 60 s", "1203", "1210")]
    (tmp_path / "steps.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    out = subprocess.run(["bash", str(SCRIPT), "--summary-only", str(tmp_path)], capture_output=True, text=True,
                         env=ENV, timeout=30)
    assert out.returncode == 1, out.stderr  # the TIMEOUT
    lines = out.stdout.splitlines()
    assert "| cache_restore | N/A | 0.0 | no kernel cache brought |" in lines  # N/A: not a failure by itself
    assert "estimates beside measurements (a first run: no kernel cache brought):" in lines
    assert "| tests | PASS | 175 | 82 | 92.3 | 1200 | 5 | 1203 | 1198 |" in lines
    assert "| train_mlp | TIMEOUT | 60 | 8 | 60.0 | 5 | 1203 | 1210 | 7 |" in lines
    assert lines[-1] == "GPU CHECK FAILED"
    (tmp_path / "steps.tsv").write_text("".join("\t".join(r) + "\n" for r in rows[:3]))
    out = subprocess.run(["bash", str(SCRIPT), "--summary-only", str(tmp_path)], capture_output=True, text=True,
                         env=ENV, timeout=30)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "GPU CHECK PASSED", out.stdout
