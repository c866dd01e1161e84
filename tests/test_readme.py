"""README.md: its Python examples run and print what their comments say, and
its two commands stay the ones CI and a new user run."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from leanpass.backends import get_backend

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
COMMANDS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def expected_prints(code: str) -> list[str]:
    """The comment after each `print(...)` line: what that line prints."""
    return [m.group(1).strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.*)$", code, flags=re.M)]


def needs_cuda(code: str) -> bool:
    return 'device="cuda' in code


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_and_prints_its_comments(index):
    code = BLOCKS[index]
    if needs_cuda(code):
        try:
            get_backend("cuda")
        except RuntimeError as exc:
            pytest.skip(f"README's CUDA example needs a GPU: {exc}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"README.md block {index}", "exec"), {})
    if not needs_cuda(code):  # the CUDA example's comments describe rather than quote
        assert out.getvalue().splitlines() == expected_prints(code)


def test_readme_has_examples_for_every_device():
    assert len(BLOCKS) >= 3
    assert any('device="strict"' in b for b in BLOCKS) and any(needs_cuda(b) for b in BLOCKS)


def test_the_two_commands_come_first_and_ci_runs_the_test_command():
    main_job, test_command = (c.strip() for c in COMMANDS[:2])
    assert README.index(main_job) < README.index("LeanPass is")
    assert "examples/" in main_job and "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()
    assert (ROOT / main_job.split()[-1]).exists()
