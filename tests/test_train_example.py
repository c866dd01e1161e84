"""examples/train_mlp.py and its data loaders (MNIST IDX/npz files written here)."""

from __future__ import annotations

import gzip
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from leanpass import load as leanpass_load
from leanpass import save as leanpass_save

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
datasets = pytest.importorskip("example_data", reason="examples/example_data.py")
train = runpy.run_path(str(EXAMPLES / "train_mlp.py"))


def write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    codes = {np.dtype("uint8"): 0x08, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}
    array = np.asarray(array)
    if array.dtype == np.int32:
        array = array.astype(">i4")
    if array.dtype == np.float32:
        array = array.astype(">f4")
    header = bytes([0, 0, codes[array.dtype], array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    raw = header + array.tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def fake_mnist(folder: Path, gz: bool, n_train=60, n_test=20, seed=0):
    """Tiny MNIST-shaped files: 28x28 uint8 images whose label is the brightest quadrant."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 4, size=n).astype(np.uint8)
        images = rng.integers(0, 60, size=(n, 28, 28)).astype(np.uint8)
        for i, label in enumerate(labels):
            r, c = divmod(int(label), 2)
            images[i, r * 14:(r + 1) * 14, c * 14:(c + 1) * 14] += 180
        write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images, gz)
        write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels, gz)
    return folder


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx(tmp_path, gz):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "x", images, gz)
    np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / "x")), images)
    floats = np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)
    write_idx(tmp_path / "f", floats, gz)
    np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / "f")), floats)
    ints = np.array([-5, 7, 1 << 20], dtype=np.int32)
    write_idx(tmp_path / "i", ints, gz)
    np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / "i")), ints)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x02ab")
    with pytest.raises(ValueError, match="not an IDX file"):
        datasets.read_idx(str(tmp_path / "bad"))
    write_idx(tmp_path / "ok", np.zeros((4, 4), np.uint8), gz=False)
    (tmp_path / "short").write_bytes((tmp_path / "ok").read_bytes()[:-3])
    with pytest.raises(ValueError, match="bytes follow"):
        datasets.read_idx(str(tmp_path / "short"))


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_folder_and_npz(tmp_path, gz):
    folder = fake_mnist(tmp_path / "mnist", gz)
    data = datasets.load_mnist(str(folder))
    assert data.x_train.shape == (60, 784) and data.x_test.shape == (20, 784)
    assert data.x_train.max() <= 1.0 and data.classes == 4
    npz = tmp_path / "mnist.npz"
    np.savez(npz, x_train=data.x_train.reshape(-1, 28, 28) * 255, y_train=data.y_train,
             x_test=data.x_test.reshape(-1, 28, 28) * 255, y_test=data.y_test)
    again = datasets.load_mnist(str(npz))
    np.testing.assert_allclose(again.x_train, data.x_train * 255)  # float files are taken as they are
    np.testing.assert_array_equal(again.y_test, data.y_test)
    with pytest.raises(FileNotFoundError):
        datasets.load_mnist(str(tmp_path / "nothing"))
    np.savez(tmp_path / "other.npz", x=np.ones(2))
    with pytest.raises(ValueError, match="x_train"):
        datasets.load_mnist(str(tmp_path / "other.npz"))


def run(*argv):
    return train["main"](["--quiet", *argv])


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_trains_on_digits(device, capsys):
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    history = run("--device", device, "--epochs", "4")
    assert history["test_accuracy"][-1] >= 0.9
    assert len(history["train_loss"]) == 4 and history["train_loss"][-1] < history["train_loss"][0]
    assert "samples/s" in capsys.readouterr().out


def test_same_seed_same_numbers_and_resume(tmp_path):
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    straight = run("--epochs", "4", "--dtype", "float64")
    again = run("--epochs", "4", "--dtype", "float64")
    assert straight["train_loss"] == again["train_loss"]
    checkpoint = str(tmp_path / "run.npz")
    run("--epochs", "2", "--dtype", "float64", "--checkpoint", checkpoint)
    resumed = run("--epochs", "4", "--dtype", "float64", "--checkpoint", checkpoint, "--resume")
    assert resumed["train_loss"] == straight["train_loss"]
    assert resumed["test_accuracy"] == straight["test_accuracy"]


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_compile_trains_the_same_numbers(device):
    """--compile: the training step traced once and replayed gives eager's numbers."""
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    eager = run("--device", device, "--epochs", "2", "--dtype", "float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # it compiles: no fallback warning
        compiled = run("--device", device, "--epochs", "2", "--dtype", "float64", "--compile")
    assert compiled["train_loss"] == eager["train_loss"] and compiled["test_accuracy"] == eager["test_accuracy"]


def test_mnist_files_and_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    folder = fake_mnist(tmp_path / "mnist", gz=True)
    png = tmp_path / "curves.png"
    history = run("--data", str(folder), "--epochs", "3", "--hidden", "32", "--lr", "0.01", "--plot", str(png))
    assert history["test_accuracy"][-1] >= 0.9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv", [["--hidden", "abc"], ["--resume"], ["--batch-size", "0"], ["--batch-size", "-5"],
                                  ["--epochs", "0"], ["--lr", "-1"], ["--lr", "inf"], ["--seed", "-1"],
                                  ["--seed", "99999999999999999999999"], ["--seed", str(2**64)],
                                  ["--data", "no/such/mnist"], ["--plot", "no/such/folder/c.png"],
                                  ["--checkpoint", "no/such/folder/x.npz"], ["--checkpoint", "."]])
def test_bad_arguments(argv, capsys):
    """Usage errors (argparse's exit status 2 and one line), not a traceback midway
    (nor after training, for an output path whose folder does not exist)."""
    with pytest.raises(SystemExit) as exc:
        run(*argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert "error:" in err and "Traceback" not in err and "epoch" not in out


def test_the_largest_seed_is_taken():
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    history = run("--epochs", "1", "--seed", str(2**64 - 1), "--hidden", "8")
    assert len(history["train_loss"]) == 1


def test_data_that_is_not_mnist_is_a_usage_error(tmp_path, capsys):
    """A missing path, a file that is not an .npz (NumPy would speak of pickles), a folder
    without the IDX files, an .npz without the keys: one line naming the path, exit status 2."""
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "empty").mkdir()
    np.savez(tmp_path / "other.npz", x=np.ones(2))
    cases = [(tmp_path / "nothing", "is not a file or folder"), (tmp_path / "passwd", "not MNIST data"),
             (tmp_path / "empty", "not found in"), (tmp_path / "other.npz", "needs the keys")]
    for path, message in cases:
        with pytest.raises(SystemExit) as exc:
            run("--data", str(path))
        assert exc.value.code == 2
        out, err = capsys.readouterr()
        line = err.splitlines()[-1]
        assert "error: --data" in line and message in line and str(path) in line
        assert "Traceback" not in err and out == ""


def test_resume_with_other_settings_is_a_usage_error(tmp_path, capsys):
    """The checkpoint keeps the seed (it splits the digits: another one would train on held-out
    samples), the dtype, the data and the model; a resume that differs is refused by name."""
    pytest.importorskip("sklearn", reason="the default data set needs scikit-learn")
    checkpoint = str(tmp_path / "part.npz")
    run("--epochs", "1", "--checkpoint", checkpoint)
    assert leanpass_load(checkpoint)["settings"]["seed"] == 0
    capsys.readouterr()
    for argv, message in [(["--hidden", "64"], "the checkpoint holds a model of MLP [64, 128, 10], not MLP [64, 64"),
                          (["--dtype", "float64"], "made with --dtype float32, not --dtype float64"),
                          (["--seed", "3"], "made with --seed 0, not --seed 3")]:
        with pytest.raises(SystemExit) as exc:
            run("--epochs", "2", "--checkpoint", checkpoint, "--resume", *argv)
        assert exc.value.code == 2
        out, err = capsys.readouterr()
        assert message in err and "Traceback" not in err and "epoch" not in out, argv
    resumed = run("--epochs", "2", "--checkpoint", checkpoint, "--resume")  # the same settings still resume
    assert len(resumed["train_loss"]) == 2
    leanpass_save({"x": 1}, checkpoint)
    with pytest.raises(SystemExit) as exc:
        run("--epochs", "2", "--checkpoint", checkpoint, "--resume")
    assert exc.value.code == 2 and "was not written by this script" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["examples/train_mlp.py", "examples/train_cnn.py", "examples/train_transformer.py",
                                    "examples/quickstart.py", "benchmarks/throughput.py"])
def test_unusable_device_is_a_one_line_error(script):
    """`--device cuda` where CUDA cannot be used: LeanPass's reason on one line of
    stderr and exit status 2 (a bad argument), no traceback, nothing trained."""
    from leanpass.backends import get_backend

    try:
        get_backend("cuda")
    except RuntimeError as exc:
        reason = str(exc)
    else:
        pytest.skip("CUDA can be used here: the script would run")
    root = EXAMPLES.parent
    done = subprocess.run([sys.executable, str(root / script), "--device", "cuda"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == f"{Path(script).name}: error: {reason}\n"
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert "device 'cuda:0' cannot be used" in reason and "\n" not in reason
