"""The example scripts run (the README's main job among them); they and the
throughput benchmark refuse bad arguments with a usage error."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_fits_the_line(device, capsys):
    quickstart = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    quickstart["main"](["--device", device])
    out = capsys.readouterr().out
    assert f"A tour of LeanPass on {device}" in out
    assert "learned w = 1.99" in out or "learned w = 2.00" in out


@pytest.mark.parametrize("argv, message", [
    (["--device", "bogus"], "unknown device 'bogus'"),
    (["--device", "strict:99"], "does not exist"),
    (["--steps", "-5"], "--steps: must be an integer >= 1, got -5"),
    (["--steps", "0"], "--steps: must be an integer >= 1, got 0"),
])
def test_quickstart_bad_arguments_are_usage_errors(argv, message, capsys):
    """A device that cannot be used or a step count < 1: one line and exit status 2, before any output."""
    quickstart = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    with pytest.raises(SystemExit) as exc:
        quickstart["main"](argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and "Traceback" not in err
    assert err.endswith("\n") and err.splitlines()[-1].startswith(f"{Path(sys.argv[0]).name}: error: ")


THROUGHPUT = EXAMPLES.parent / "benchmarks" / "throughput.py"
TINY_THROUGHPUT = ["--features", "8", "--width", "16", "--batch-size", "4", "--steps", "1", "--rounds", "1",
                   "--warmup", "0", "--only", "leanpass"]


@pytest.mark.parametrize("argv, message", [
    (["--depth", "0", "--width", "16", "--batch-size", "0"], "--batch-size: must be an integer >= 1, got 0"),
    (["--batch-size", "-1"], "--batch-size: must be an integer >= 1, got -1"),
    (["--width", "0"], "--width: must be an integer >= 1, got 0"),
    (["--depth", "-1"], "--depth: must be an integer >= 0, got -1"),
    (["--steps", "0"], "--steps: must be an integer >= 1, got 0"),
    (["--rounds", "0"], "--rounds: must be an integer >= 1, got 0"),
    (["--warmup", "-1"], "--warmup: must be an integer >= 0, got -1"),
    (["--features", "0"], "--features: must be an integer >= 1, got 0"),
    (["--classes", "0"], "--classes: must be an integer >= 1, got 0"),
    (["--model", "transformer", "--depth", "0"], "a transformer needs at least one block"),
])
def test_throughput_bad_sizes_are_usage_errors(argv, message, capsys):
    """Not silently replaced by the defaults (0 was), nor a traceback midway."""
    throughput = runpy.run_path(str(THROUGHPUT))
    with pytest.raises(SystemExit) as exc:
        throughput["main"]([*TINY_THROUGHPUT, *argv])  # a later option wins
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err and "Traceback" not in err


def test_throughput_depth_0_is_one_linear_layer(capsys):
    throughput = runpy.run_path(str(THROUGHPUT))
    assert list(throughput["main"]([*TINY_THROUGHPUT, "--depth", "0"])) == ["leanpass"]
    assert "MLP [8, 10], batch 4," in capsys.readouterr().out
