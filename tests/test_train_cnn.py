"""examples/train_cnn.py: a small CNN trained by train_mlp.py's loop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
pytest.importorskip("example_data", reason="examples/example_data.py")
cnn = pytest.importorskip("train_cnn", reason="examples/train_cnn.py")

from test_train_example import fake_mnist  # noqa: E402


def run(*argv):
    return cnn.main(["--quiet", "--channels", "16,32", *argv])


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_learns_digits(device, capsys):
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    history = run("--device", device, "--epochs", "3")
    assert history["test_accuracy"][-1] >= 0.8
    assert history["train_loss"][-1] < history["train_loss"][0]
    out = capsys.readouterr().out
    assert "CNN 8x8 -> channels [16, 32] -> 10" in out and "final held-out accuracy" in out


def test_resume_continues_the_same_run(tmp_path):
    """Batch-norm running statistics are buffers: they travel in the checkpoint, so
    the resumed run's held-out figures (eval mode uses them) are the straight run's."""
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    straight = run("--epochs", "2", "--dtype", "float64")
    checkpoint = str(tmp_path / "cnn.npz")
    run("--epochs", "1", "--dtype", "float64", "--checkpoint", checkpoint)
    resumed = run("--epochs", "2", "--dtype", "float64", "--checkpoint", checkpoint, "--resume")
    assert resumed["train_loss"] == straight["train_loss"]
    assert resumed["test_loss"] == straight["test_loss"]


def test_mnist_files_and_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    folder = fake_mnist(tmp_path / "mnist", gz=False)
    png = tmp_path / "curves.png"
    history = run("--data", str(folder), "--epochs", "3", "--lr", "0.01", "--plot", str(png))
    assert history["test_accuracy"][-1] >= 0.9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv", [["--channels", "abc"], ["--channels", ""], ["--channels", "8,0"], ["--resume"],
                                  ["--batch-size", "0"], ["--batch-size", "-5"], ["--epochs", "0"], ["--lr", "-1"],
                                  ["--lr", "nan"], ["--seed", "-1"]])
def test_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cnn.main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err
