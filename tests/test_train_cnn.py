"""examples/train_cnn.py: a small CNN trained by train_mlp.py's loop."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
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


def test_compile_trains_the_same_numbers():
    """--compile: the step (convolutions, batch norm and its running statistics, Adam)
    traced once and replayed gives eager's numbers, without falling back."""
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    eager = run("--epochs", "1", "--dtype", "float64", "--channels", "4,8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = run("--epochs", "1", "--dtype", "float64", "--channels", "4,8", "--compile")
    assert compiled["train_loss"] == eager["train_loss"] and compiled["test_accuracy"] == eager["test_accuracy"]


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
                                  ["--lr", "nan"], ["--seed", "-1"], ["--seed", "99999999999999999999999"],
                                  ["--data", "no/such/mnist"], ["--plot", "no/such/folder/c.png"],
                                  ["--checkpoint", "no/such/folder/x.npz"]])
def test_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cnn.main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_data_that_is_not_square_mnist_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "wide.npz", x_train=rng.integers(0, 255, (8, 5, 6), dtype=np.uint8), y_train=np.arange(8) % 2,
             x_test=rng.integers(0, 255, (4, 5, 6), dtype=np.uint8), y_test=np.arange(4) % 2)
    for path, message in [(tmp_path / "passwd", "not MNIST data"), (tmp_path / "wide.npz", "not a square image")]:
        with pytest.raises(SystemExit) as exc:
            run("--data", str(path))
        assert exc.value.code == 2
        out, err = capsys.readouterr()
        assert message in err and "Traceback" not in err and "epoch" not in out


def test_resume_with_another_model_is_a_usage_error(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    checkpoint = str(tmp_path / "cnn.npz")
    cnn.main(["--quiet", "--channels", "4", "--epochs", "1", "--checkpoint", checkpoint])
    capsys.readouterr()
    for argv, message in [(["--channels", "4,4"], "the checkpoint holds a model of CNN 8x8 -> channels [4] -> 10"),
                          (["--channels", "4", "--dtype", "float64"], "made with --dtype float32, not --dtype float64"),
                          (["--channels", "4", "--seed", "1"], "made with --seed 0, not --seed 1")]:
        with pytest.raises(SystemExit) as exc:
            cnn.main(["--quiet", "--epochs", "2", "--checkpoint", checkpoint, "--resume", *argv])
        assert exc.value.code == 2
        out, err = capsys.readouterr()
        assert message in err and "Traceback" not in err and "epoch" not in out, argv
