"""leanpass.save / leanpass.load: .npz without pickle, across devices, and clear
errors that leave the model and the file untouched."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import leanpass
from leanpass import nn, optim
from leanpass.backends import get_backend


def snapshot(model):
    return [p.numpy() for p in model.parameters()]


def assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_round_trip_on_every_device(device, tmp_path):
    leanpass.manual_seed(0)
    model = nn.MLP([3, 5, 2], device=device)
    path = tmp_path / "model.npz"
    leanpass.save(model.state_dict(), path)
    state = leanpass.load(path, device=device)
    assert list(state) == [n for n, _ in model.named_parameters()]
    assert all(type(v) is get_backend(device).array_type for v in state.values())
    leanpass.manual_seed(1)
    other = nn.MLP([3, 5, 2], device=device)
    other.load_state_dict(state)
    assert_same(snapshot(other), snapshot(model))


def test_saved_on_strict1_loads_on_cpu(tmp_path):
    leanpass.manual_seed(0)
    model = nn.MLP([2, 4, 1], device="strict:1")
    leanpass.save(model.state_dict(), tmp_path / "m.npz")
    state = leanpass.load(tmp_path / "m.npz", device="cpu")
    assert all(isinstance(v, np.ndarray) for v in state.values())
    cpu_model = nn.MLP([2, 4, 1])
    cpu_model.load_state_dict(state)
    assert_same(snapshot(cpu_model), snapshot(model))
    assert cpu_model.parameters()[0].device == "cpu"
    # and loading without device= goes to the default device
    assert isinstance(leanpass.load(tmp_path / "m.npz")["layers.0.weight"], np.ndarray)


def test_file_format_has_marker_version_and_no_pickle(tmp_path):
    model = nn.Linear(2, 2)
    opt = optim.Adam(model.parameters())
    model.weight.grad = np.ones((2, 2))
    opt.step()
    leanpass.save(opt.state_dict(), tmp_path / "o.npz")
    with np.load(tmp_path / "o.npz", allow_pickle=False) as archive:
        meta = json.loads(archive["__leanpass__"].tobytes())
    assert meta["format"] == "leanpass" and meta["version"] == 1
    loaded = leanpass.load(tmp_path / "o.npz")
    assert loaded["state"][0]["step"] == 1 and loaded["param_groups"][0]["betas"] == (0.9, 0.999)
    np.testing.assert_array_equal(loaded["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_save_exact_path_and_atomic_replace(tmp_path):
    path = tmp_path / "weights.bin"  # no .npz appended
    leanpass.save({"w": np.ones(2)}, path)
    assert path.exists() and not (tmp_path / "weights.bin.npz").exists()
    with pytest.raises(TypeError, match="cannot store"):
        leanpass.save({"w": object()}, path)
    assert leanpass.load(path)["w"].tolist() == [1.0, 1.0]  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]  # no temporary left


@pytest.fixture
def model_and_file(tmp_path):
    leanpass.manual_seed(0)
    model = nn.MLP([2, 3, 1])
    good = tmp_path / "good.npz"
    leanpass.save(model.state_dict(), good)
    return model, good


def test_missing_file(model_and_file, tmp_path):
    model, _ = model_and_file
    before = snapshot(model)
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        model.load_state_dict(leanpass.load(tmp_path / "nope.npz"))
    assert_same(snapshot(model), before)


def test_truncated_file(model_and_file, tmp_path):
    model, good = model_and_file
    data = good.read_bytes()
    for cut in (len(data) // 2, 10, 0):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        before = snapshot(model)
        with pytest.raises(ValueError, match="not a readable LeanPass file"):
            model.load_state_dict(leanpass.load(bad))
        assert_same(snapshot(model), before)
        assert bad.read_bytes() == data[:cut]


def test_foreign_files(model_and_file, tmp_path):
    model, _ = model_and_file
    before = snapshot(model)
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.ones(3))
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    wrong_marker = tmp_path / "marker.npz"
    np.savez(wrong_marker, __leanpass__=np.frombuffer(b'{"format": "other", "version": 1}', dtype=np.uint8))
    future = tmp_path / "future.npz"
    np.savez(future, __leanpass__=np.frombuffer(b'{"format": "leanpass", "version": 99, "tree": {}}', np.uint8))
    for path, pattern in [(plain, "not a LeanPass file"), (text, "not a readable"), (pickled, "not a readable"),
                          (wrong_marker, "format marker"), (future, "version 99")]:
        contents = path.read_bytes()
        with pytest.raises(ValueError, match=pattern):
            leanpass.load(path)
        assert path.read_bytes() == contents
    assert_same(snapshot(model), before)


def test_a_zip_that_is_not_npz(tmp_path):
    path = tmp_path / "z.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__leanpass__.npy", b"garbage")
    with pytest.raises(ValueError, match="not a readable"):
        leanpass.load(path)


def test_saved_file_gets_normal_permissions(tmp_path):
    import os
    import stat

    path = tmp_path / "m.npz"
    leanpass.save({"w": np.ones(2)}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    os.chmod(path, 0o640)
    leanpass.save({"w": np.zeros(2)}, path)  # replacing keeps the file's mode
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_malformed_description_is_a_value_error(tmp_path):
    path = tmp_path / "bad.npz"
    meta = b'{"format": "leanpass", "version": 1, "tree": {"dict": 5}}'
    np.savez(path, __leanpass__=np.frombuffer(meta, dtype=np.uint8))
    with pytest.raises(ValueError, match="malformed"):
        leanpass.load(path)
