"""scripts/gpu_check.sh and scripts/fetch_gpu_wheels.sh, without a GPU and without network.

The GPU check's table, its time-limited steps (pytest stopped by SIGINT still writes its
JUnit report) and the wheel download's arguments are checked here, so that the check
passes on first contact with the short-lived GPU machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
ENV = {**os.environ, "GPU_CHECK_PYTHON": sys.executable}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and GNU timeout")


def junit(cases: list[tuple[str, str, str]]) -> str:
    """A pytest-style JUnit report of (classname, name, outcome) with outcome passed/failure/error/skipped."""
    body = "".join(
        f'<testcase classname="{c}" name="{n}" time="0.5">' + ("" if o == "passed" else f'<{o} message="x"/>')
        + "</testcase>" for c, n, o in cases)
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'


def summary(results: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), "--summary-only", str(results)],
                          capture_output=True, text=True, env=ENV, timeout=30)


@pytest.mark.parametrize("script", ["gpu_check.sh", "fetch_gpu_wheels.sh"])
def test_script_syntax(script):
    subprocess.run(["bash", "-n", str(SCRIPTS / script)], check=True, timeout=30)


def test_summary_table_lists_steps_and_first_failing_ids(tmp_path):
    rows = [("install", "PASS", "1.0"), ("smoke", "PASS", "4.2"), ("tests", "FAIL", "250.3"),
            ("train_mlp", "PASS", "9.9"), ("train_transformer", "PASS", "35.0"), ("throughput_cnn", "TIMEOUT", "40.0")]
    (tmp_path / "steps.tsv").write_text("".join(f"{n}\t{s}\t{t}\texit 0, limit 60 s\n" for n, s, t in rows))
    cases = [("tests.test_nn", "test_ok[cuda]", "passed"), ("tests.test_nn", "test_skip[cuda]", "skipped")]
    cases += [("tests.test_nn.TestLinear", f"test_f{i}[cuda]", "failure") for i in range(11)]
    cases += [("tests.test_optim", "test_e[cuda]", "error")]
    (tmp_path / "junit-cuda.xml").write_text(junit(cases))
    (tmp_path / "junit-warm.xml").write_text(junit(cases[:1]))
    (tmp_path / "kernels.txt").write_text("812 kernels compiled (CUPY_NVRTC_USE_PCH=1)\n")
    (tmp_path / "train_mlp.log").write_text("epoch 5 ...\nfinal held-out accuracy 0.9611\n")
    (tmp_path / "train_transformer.log").write_text("step 300 ...\nheld-out bits/char: 2.41\n")
    (tmp_path / "throughput_cnn.log").write_text(
        "MLP ...\n"
        "| contestant | samples/s | ms/step | TFLOP/s | vs leanpass | first loss |\n"
        "|---|---|---|---|---|---|\n"
        "| leanpass | 300,000 | 3.41 | 60.1 | 1.00 | 2.3 |\n| torch | 310,000 | 3.30 | 62.0 | 1.03 | 2.3 |\n")
    out = summary(tmp_path)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert "| step | status | seconds | detail |" in lines
    assert [line.split(" | ")[:2] for line in lines if line.startswith("| ") and "---" not in line][1:] == [
        ["| " + n, s] for n, s, _ in rows]
    tests_row = next(line for line in lines if line.startswith("| tests |"))
    assert "1 passed, 12 failed, 1 skipped; 812 kernels compiled (CUPY_NVRTC_USE_PCH=1)" in tests_row
    assert "1 of them warm 0.5 s, cold 0.5 s" in tests_row
    assert "final held-out accuracy 0.9611" in next(line for line in lines if line.startswith("| train_mlp |"))
    assert "held-out bits/char: 2.41" in next(line for line in lines if line.startswith("| train_transformer |"))
    assert "leanpass 3.41, torch 3.30" in next(line for line in lines if line.startswith("| throughput_cnn |"))
    assert "first failing tests (10 of 12):" in lines
    ids = [line.strip() for line in lines if line.startswith("  ")]
    assert ids == [f"tests/test_nn.py::TestLinear::test_f{i}[cuda]" for i in range(10)]
    assert lines[-1] == "GPU CHECK FAILED"


def test_summary_passes_only_when_every_step_passes(tmp_path):
    (tmp_path / "steps.tsv").write_text("".join(f"{n}\tPASS\t1.0\texit 0\n" for n in ("install", "smoke", "tests")))
    out = summary(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| tests | PASS | 1.0 | no JUnit report; exit 0 |" in out.stdout
    assert out.stdout.splitlines()[-1] == "GPU CHECK PASSED"
    (tmp_path / "steps.tsv").unlink()
    assert summary(tmp_path).returncode == 1  # no steps at all is no pass


def test_timed_out_pytest_step_still_reports(tmp_path):
    """A step past its limit gets SIGINT: TIMEOUT in the table, and pytest's JUnit report is there."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "pytest.ini").write_text("[pytest]\n")
    (work / "test_slow.py").write_text(
        "import time\n\ndef test_quick():\n    pass\n\ndef test_wrong():\n    assert False\n\n"
        "def test_slow():\n    time.sleep(60)\n")
    results = tmp_path / "results"
    results.mkdir()
    script = (
        f'source "{SCRIPTS / "gpu_check.sh"}"; results="{results}"; cd "{work}"\n'
        f'run_step tests 2 "{sys.executable}" -m pytest -q -p no:cacheprovider --junitxml "$results/junit-cuda.xml" .\n'
        'echo "rc=$?"; cd "' + str(ROOT) + '"; summary "$results"')
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=ENV, timeout=60)
    assert "rc=124" in out.stdout, out.stdout + out.stderr
    assert (results / "tests.log").read_text().count("KeyboardInterrupt") >= 1
    tests_row = next(line for line in out.stdout.splitlines() if line.startswith("| tests |"))
    assert tests_row.startswith("| tests | TIMEOUT |")
    assert "1 passed, 1 failed" in tests_row and "exit 124, limit 2 s" in tests_row
    assert "test_slow::test_wrong" in out.stdout
    assert out.returncode == 1


def test_fetch_gpu_wheels_empties_whl_and_targets_the_gpu_python(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "fetch_gpu_wheels.sh", repo / "scripts")
    (repo / ".whl").mkdir()
    (repo / ".whl" / "array_api_compat-1.11.0-py3-none-any.whl").write_text("stale")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_FILE"\n'
        'while [ $# -gt 0 ]; do [ "$1" = -d ] && touch "$2/array_api_compat-1.16.0-py3-none-any.whl"; shift; done\n')
    (fake / "python3").chmod(0o755)
    for version, expected in ((None, "3.12"), ("3.13", "3.13")):
        env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "ARGS_FILE": str(tmp_path / "args")}
        env.pop("GPU_PYTHON_VERSION", None)
        if version:
            env["GPU_PYTHON_VERSION"] = version
        out = subprocess.run(["bash", str(repo / "scripts" / "fetch_gpu_wheels.sh")],
                             capture_output=True, text=True, env=env, timeout=30)
        assert out.returncode == 0, out.stderr
        assert sorted(p.name for p in (repo / ".whl").iterdir()) == ["array_api_compat-1.16.0-py3-none-any.whl"]
        args = (tmp_path / "args").read_text().splitlines()
        assert args[:3] == ["-m", "pip", "download"]
        assert args[args.index("--python-version") + 1] == expected
        assert {"--no-deps", "--only-binary=:all:"} <= set(args)
        assert {a.split(">")[0] for a in args} >= {"array-api-compat", "array-api-strict"}
