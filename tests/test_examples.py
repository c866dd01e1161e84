"""The example scripts run (the README's main job among them)."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_fits_the_line(device, capsys):
    quickstart = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    quickstart["main"](["--device", device])
    out = capsys.readouterr().out
    assert f"A tour of LeanPass on {device}" in out
    assert "learned w = 1.99" in out or "learned w = 2.00" in out
