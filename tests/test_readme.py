"""README.md: its Python examples run and print what their comments say, its two
commands stay the ones CI and a new user run, the commands after them run in the
virtual environment those two make, and the main job ends as the README says."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
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
def test_readme_example_runs_and_prints_its_comments(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that wrote a file would leave it here
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
    assert not list(tmp_path.iterdir()), "README examples must leave no files behind"


def test_readme_has_examples_for_every_device():
    assert len(BLOCKS) >= 3
    assert any('device="strict"' in b for b in BLOCKS) and any(needs_cuda(b) for b in BLOCKS)


def test_the_two_commands_come_first_and_ci_runs_the_test_command():
    main_job, test_command = (c.strip() for c in COMMANDS[:2])
    assert README.index(main_job) < README.index("LeanPass is")
    assert "examples/" in main_job and "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()
    assert (ROOT / main_job.split()[-1]).exists()


def test_later_commands_run_in_the_activated_environment():
    """Right after the two commands the README activates `.venv`; the commands
    after it then say `python` and `pip`, never a path into `.venv`."""
    assert COMMANDS[2].strip() == "source .venv/bin/activate"
    for command in COMMANDS[3:]:
        assert ".venv/" not in command, command


def test_the_main_job_ends_as_the_readme_says(capsys):
    """The README quotes the last lines the main job prints; the script prints them
    (the speed is this machine's, the figures may differ in their last digit)."""
    pytest.importorskip("sklearn", reason="the main job trains on scikit-learn's digits")
    quoted = re.search(r"```text\n(epoch .*)\n(final held-out accuracy (\d\.\d+))\n```", README)
    assert quoted, "README.md does not quote the main job's last two lines"
    main_job = COMMANDS[0].strip()
    script = runpy.run_path(str(ROOT / main_job.split()[-1]))
    script["main"](["--quiet"])
    epoch, final = capsys.readouterr().out.splitlines()[-2:]
    figures = re.compile(r"epoch +(\d+) +train loss (\S+) +held-out loss (\S+) +accuracy (\S+) +[\d,]+ samples/s")
    got, want = figures.fullmatch(epoch), figures.fullmatch(quoted.group(1))
    assert got and want, (epoch, quoted.group(1))
    assert got.group(1) == want.group(1)
    for printed, said in zip(got.groups()[1:], want.groups()[1:]):
        assert abs(float(printed) - float(said)) <= 0.02, (epoch, quoted.group(1))
    assert final.startswith("final held-out accuracy ")
    assert abs(float(final.split()[-1]) - float(quoted.group(3))) <= 0.02, (final, quoted.group(2))
