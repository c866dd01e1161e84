"""examples/train_transformer.py: a character-level transformer, on tiny text files written here."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import leanpass

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "train_transformer.py"
script = runpy.run_path(str(SCRIPT))
TINY = ["--quiet", "--layers", "1", "--width", "16", "--heads", "2", "--context", "16", "--batch-size", "8",
        "--lr", "0.01", "--warmup", "2", "--eval-windows", "16"]
TEXT = "the quick brown fox jumps over the lazy dog.\n" * 60


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def run(*argv):
    return script["main"]([*TINY, *argv])


def test_learns_on_every_device(device, text_file, capsys):
    history = run("--data", text_file, "--device", device, "--steps", "30", "--eval-every", "10")
    out = capsys.readouterr().out
    assert history["step"] == [10, 20, 30]
    bits = history["held_out_bits"]
    assert bits[-1] < bits[0] - 0.5 and bits[-1] < 2.0  # the alphabet alone is log2(28) = 4.8 bits
    assert history["train_bits"][-1] < history["train_bits"][0]
    assert out.splitlines()[-1] == f"held-out bits/char: {bits[-1]:.2f}"
    assert f"on {device}" in out and "chars/s" in out


def test_resume_continues_identically(text_file, tmp_path, capsys):
    args = ["--data", text_file, "--dtype", "float64", "--steps", "12", "--eval-every", "4"]
    straight = run(*args)
    checkpoint = str(tmp_path / "run.npz")
    stopped = run(*args, "--checkpoint", checkpoint, "--stop-after", "8")
    assert stopped["step"] == [4, 8]
    resumed = run(*args, "--checkpoint", checkpoint, "--resume")
    assert "resumed from" in capsys.readouterr().out
    for key in ("step", "train_bits", "held_out_bits"):
        assert resumed[key] == straight[key], key
    assert leanpass.load(checkpoint)["vocab"] == "".join(sorted(set(TEXT)))


def test_stop_between_evaluations_then_resume_prints_the_straight_numbers(text_file, tmp_path, capsys):
    """--stop-after at a step that is no evaluation step adds no evaluation (the straight
    run has none there) and keeps the running training loss in the checkpoint: the
    resumed run's figures and history are the uninterrupted run's, to the bit."""
    args = ["--data", text_file, "--steps", "12", "--eval-every", "4"]
    straight = run(*args)
    checkpoint = str(tmp_path / "run.npz")
    stopped = run(*args, "--checkpoint", checkpoint, "--stop-after", "6")
    assert stopped["step"] == [4]
    assert "stopped after step 6 of 12" in capsys.readouterr().out
    assert leanpass.load(checkpoint)["step"] == 6
    resumed = run(*args, "--checkpoint", checkpoint, "--resume")
    for key in ("step", "train_bits", "held_out_bits"):
        assert resumed[key] == straight[key], key


def test_resume_with_another_dtype_is_a_usage_error(text_file, tmp_path, capsys):
    checkpoint = str(tmp_path / "run.npz")
    run("--data", text_file, "--steps", "4", "--eval-every", "2", "--checkpoint", checkpoint, "--stop-after", "2")
    capsys.readouterr()
    for argv, message in [(["--dtype", "float64"], "made with --dtype float32, not --dtype float64"),
                          (["--width", "8"], "the checkpoint holds a model of")]:
        with pytest.raises(SystemExit) as exit_info:
            run("--data", text_file, "--steps", "4", "--eval-every", "2", "--checkpoint", checkpoint, "--resume", *argv)
        assert exit_info.value.code == 2
        out, err = capsys.readouterr()
        assert message in err and "Traceback" not in err and out == "", argv


def test_sample_and_plot(text_file, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    png = tmp_path / "curves.png"
    history = run("--data", text_file, "--steps", "20", "--eval-every", "10", "--sample", "50",
                  "--prompt", "the ", "--plot", str(png))
    sample = history["sample"]
    assert len(sample) == 50 and set(sample) <= set(TEXT)
    assert "the " + sample in capsys.readouterr().out
    again = run("--data", text_file, "--steps", "20", "--eval-every", "10", "--sample", "50", "--prompt", "the ")
    assert again["sample"] == sample  # seeded
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_model_is_causal():
    """Changing a character changes no logits before it, and some after it."""
    leanpass.manual_seed(0)
    model = script["CharTransformer"](10, context=8, width=16, layers=2, heads=4, dtype="float64")
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8]])
    changed = ids.copy()
    changed[0, 5] = 0
    a = model(leanpass.Tensor(ids, dtype="int64")).numpy()
    b = model(leanpass.Tensor(changed, dtype="int64")).numpy()
    assert a.shape == (1, 8, 10)
    np.testing.assert_array_equal(a[:, :5], b[:, :5])
    assert not np.allclose(a[:, 5:], b[:, 5:])
    last = model(leanpass.Tensor(ids, dtype="int64"), last_only=True).numpy()
    np.testing.assert_allclose(last, a[:, -1:], rtol=1e-12, atol=1e-12)


def test_default_corpus_is_the_standard_library():
    name, text = script["read_text"](None, 0.05)
    assert os.path.dirname(os.__file__) in name
    assert 50_000 <= len(text) <= 60_000 and "def " in text and "import " in text
    assert script["read_text"](None, 0.05) == (name, text)


@pytest.mark.parametrize("argv, message", [
    (["--width", "10", "--heads", "4"], "not a multiple of --heads"),
    (["--resume"], "--resume needs --checkpoint"),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--steps", "0"], "--steps: must be an integer >= 1, got 0"),
    (["--lr", "-0.1"], "--lr: must be a number > 0, got -0.1"),
    (["--data", "no/such/file.txt"], "is not a file"),
    (["--sample", "5", "--prompt", "XYZ"], "--prompt must be"),
    (["--context", "500"], "too few"),
    (["--weight-decay", "-1"], "--weight-decay: must be a finite number >= 0, got -1"),
    (["--weight-decay", "nan"], "--weight-decay: must be a finite number >= 0, got nan"),
    (["--seed", "99999999999999999999999"], "--seed: must be an integer in [0, 2**64)"),
    (["--corpus-mb", "inf"], "--corpus-mb must be finite numbers > 0"),
    (["--plot", "no/such/folder/c.png"], "--plot 'no/such/folder/c.png': there is no folder"),
    (["--checkpoint", "no/such/folder/x.npz"], "--checkpoint 'no/such/folder/x.npz': there is no folder"),
])
def test_bad_arguments_are_one_line_errors(argv, message, text_file, capsys):
    data = [] if "--data" in argv else ["--data", text_file]
    with pytest.raises(SystemExit) as exit_info:
        run(*data, "--steps", "2", *argv)  # a later --steps wins
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.endswith("\n") and "Traceback" not in err



def _mpiexec() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


@pytest.mark.mpi
def test_distributed_on_two_processes_then_resumed_on_one(text_file, tmp_path):
    """Rank 0 alone prints and checkpoints; the processes draw different windows (so
    the run differs from one process with the same batch); the checkpoint resumes on one."""
    pytest.importorskip("mpi4py", reason='MPI tests: pip install "leanpass[mpi]"')
    if _mpiexec() is None:
        pytest.skip("MPI tests: no mpiexec found next to this Python or on PATH")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    checkpoint = str(tmp_path / "run.npz")
    args = [*TINY, "--data", text_file, "--steps", "12", "--eval-every", "6", "--checkpoint", checkpoint]
    done = subprocess.run([_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(SCRIPT), "--distributed",
                           *args, "--stop-after", "6"], capture_output=True, text=True, timeout=180, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 processes x batch 8" in done.stdout and done.stdout.count("step     6 ") == 1
    alone = run("--data", text_file, "--steps", "12", "--eval-every", "6", "--stop-after", "6")
    saved = leanpass.load(checkpoint)
    assert saved["step"] == 6 and saved["history"]["train_bits"] != alone["train_bits"]
    resumed = run("--data", text_file, "--steps", "12", "--eval-every", "6", "--checkpoint", checkpoint, "--resume")
    assert resumed["step"] == [6, 12] and resumed["held_out_bits"][1] < resumed["held_out_bits"][0]
