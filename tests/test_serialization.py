"""leanpass.save / leanpass.load: .npz without pickle, across devices, and clear
errors that leave the model and the file untouched."""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest
from helpers import host

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
    assert meta["format"] == "leanpass" and meta["version"] == 2
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


# ---- save refuses what load cannot read; complex round-trips -------------------------------------

def listing(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("bad", [
    np.array([{"a": 1}], dtype=object),
    np.array(["text"]),
    np.array([b"bytes"]),
    np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
    np.array(["2024-01-01"], dtype="datetime64[D]"),
], ids=["object", "str", "bytes", "structured", "datetime"])
def test_save_refuses_arrays_load_cannot_read(bad, tmp_path):
    path = tmp_path / "m.npz"
    with pytest.raises(TypeError, match=r"\['state'\]\[0\]\['w'\].*" + re.escape(str(bad.dtype))):
        leanpass.save({"state": [{"w": bad}]}, path)
    assert listing(tmp_path) == []  # nothing written
    leanpass.save({"w": np.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="dtype"):
        leanpass.save({"w": bad}, path)
    assert path.read_bytes() == before and listing(tmp_path) == ["m.npz"]


def test_numpy_strings_are_saved_as_strings(tmp_path):
    leanpass.save({"name": np.str_("adam")}, tmp_path / "m.npz")
    assert leanpass.load(tmp_path / "m.npz") == {"name": "adam"}


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_round_trip(device, dtype, tmp_path):
    t = leanpass.asarray(np.array([1 + 2j, -3.5j], dtype=dtype), device=device)
    leanpass.save({"z": t, "raw": t.data}, tmp_path / "z.npz")
    state = leanpass.load(tmp_path / "z.npz", device=device)
    for value in state.values():
        assert type(value) is get_backend(device).array_type
        host = get_backend(device).to_host(value)
        assert host.dtype == dtype
        np.testing.assert_array_equal(host, t.numpy())


# ---- load caps the decompressed size and never allocates what a header claims beyond it ----------

def npy_bytes(array=None, header=None, tail=b""):
    import io

    buf = io.BytesIO()
    if header is None:
        np.lib.format.write_array(buf, array, allow_pickle=False)
    else:
        np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + tail


def write_leanpass_zip(path, tree, entries, compression=zipfile.ZIP_STORED, version=1):
    meta = json.dumps({"format": "leanpass", "version": version, "tree": tree}).encode()
    with zipfile.ZipFile(path, "w", compression) as z:
        z.writestr("__leanpass__.npy", npy_bytes(np.frombuffer(meta, np.uint8)))
        for name, data in entries.items():
            z.writestr(name + ".npy", data)


def test_load_caps_the_total_size(tmp_path):
    path = tmp_path / "two.npz"
    leanpass.save({"a": np.zeros(375), "b": np.zeros(375)}, path)  # 3000 bytes each
    assert leanpass.load(path, max_bytes=7000)["b"].shape == (375,)
    with pytest.raises(ValueError, match=r"two\.npz.*'a1'.*\['b'\].*3000 bytes.*max_bytes=5000"):
        leanpass.load(path, max_bytes=5000)  # each fits, the two together do not
    with pytest.raises(ValueError, match="__leanpass__"):
        leanpass.load(path, max_bytes=10)  # the description counts too
    with pytest.raises(TypeError, match="max_bytes"):
        leanpass.load(path, max_bytes="1GB")
    with pytest.raises(ValueError, match="max_bytes"):
        leanpass.load(path, max_bytes=-1)
    assert leanpass.load(path, max_bytes=None)["a"].shape == (375,)


def test_load_refuses_a_compressed_bomb(tmp_path):
    path = tmp_path / "bomb.npz"
    zeros = npy_bytes(np.zeros(2**21))  # 16 MiB that deflate to ~16 KiB
    write_leanpass_zip(path, {"dict": [["w", {"array": "a0"}]]}, {"a0": zeros}, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 2**16
    with pytest.raises(ValueError, match=r"bomb\.npz.*'a0'.*16777216 bytes.*max_bytes=1048576"):
        leanpass.load(path, max_bytes=2**20)
    assert leanpass.load(path)["w"].shape == (2**21,)  # within the default cap


@pytest.mark.parametrize("max_bytes", [2**32, None])
def test_a_header_claiming_a_huge_array_is_refused_before_allocating(tmp_path, max_bytes):
    path = tmp_path / "huge.npz"
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    write_leanpass_zip(path, {"array": "a0"}, {"a0": npy_bytes(header=header, tail=bytes(64))})
    with pytest.raises(ValueError, match=r"huge\.npz.*'a0'.*8000000000000 bytes"):
        leanpass.load(path, max_bytes=max_bytes)


def test_a_header_claiming_more_than_its_entry_holds(tmp_path):
    path = tmp_path / "short.npz"
    header = {"descr": "<f8", "fortran_order": False, "shape": (1000,)}
    write_leanpass_zip(path, {"array": "a0"}, {"a0": npy_bytes(header=header, tail=bytes(80))})
    with pytest.raises(ValueError, match=r"short\.npz.*'a0'.*8000 bytes"):
        leanpass.load(path)


def test_fortran_order_and_byte_order_entries_load(tmp_path):
    path = tmp_path / "f.npz"
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    b = np.arange(4, dtype=">i4")
    write_leanpass_zip(path, {"list": [{"array": "a0"}, {"array": "a1"}]}, {"a0": npy_bytes(a), "a1": npy_bytes(b)})
    x, y = leanpass.load(path)
    np.testing.assert_array_equal(x, a)
    np.testing.assert_array_equal(y, b)
    x[0, 0] = 5.0  # loaded arrays are writable
    y[0] = 1


# ---- odd exceptions become ValueError / TypeError with a message ----------------------------------

@pytest.mark.parametrize("field, value, why", [(10, 99, "method 99"), (8, 1, "encrypted")],
                         ids=["unknown-compression", "encrypted"])
def test_unsupported_zip_entries_are_value_errors(tmp_path, field, value, why):
    path = tmp_path / "m.npz"
    leanpass.save({"w": np.ones(2)}, path)
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")  # each central directory entry: flags at offset 8, method at 10
    while at != -1:
        data[at + field:at + field + 2] = value.to_bytes(2, "little")
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"not a readable.*{why}"):
        leanpass.load(path)


def test_deeply_nested_description_is_a_value_error(tmp_path):
    path = tmp_path / "deep.npz"
    for tree in ("[" * 100_000 + "]" * 100_000, '{"list": [' * 5000 + "]}" * 5000):
        meta = '{"format": "leanpass", "version": 1, "tree": ' + tree + "}"
        np.savez(path, __leanpass__=np.frombuffer(meta.encode(), np.uint8))
        with pytest.raises(ValueError, match="deep.npz"):
            leanpass.load(path)


def test_save_detects_a_container_that_holds_itself(tmp_path):
    state = {"a": {"b": [1]}}
    state["a"]["b"].append(state["a"])
    with pytest.raises(ValueError, match=r"save: .*\['a'\]\['b'\]\[1\] refers to itself"):
        leanpass.save(state, tmp_path / "m.npz")
    nested = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(ValueError, match="save: .*nested too deeply"):
        leanpass.save(nested, tmp_path / "m.npz")
    assert listing(tmp_path) == []
    shared = {"x": 1}
    leanpass.save({"a": shared, "b": [shared, shared]}, tmp_path / "m.npz")  # shared, not a cycle
    assert leanpass.load(tmp_path / "m.npz") == {"a": {"x": 1}, "b": [{"x": 1}, {"x": 1}]}


# ---- the write is atomic, through symlinks, never over read-only files ----------------------------

def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "m.npz"
    leanpass.save({"w": np.ones(3), "v": np.full(2, 7.0)}, path)
    real = np.lib.format.write_array
    calls = []

    def write_some_then_fail(fp, array, *args, **kwargs):
        calls.append(array.shape)
        if len(calls) < 3:
            return real(fp, array, *args, **kwargs)
        fp.write(b"\x93NUMPY partial")
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", write_some_then_fail)
    with pytest.raises(OSError, match="disk full"):
        leanpass.save({"w": np.zeros(3), "v": np.zeros(2)}, path)
    assert len(calls) == 3  # the failure came after the file was opened and two entries were written
    monkeypatch.undo()
    state = leanpass.load(path)
    assert state["w"].tolist() == [1.0] * 3 and state["v"].tolist() == [7.0, 7.0]
    assert listing(tmp_path) == ["m.npz"]


def test_save_writes_through_a_symlink(tmp_path):
    import os

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.npz"
    leanpass.save({"w": np.ones(2)}, target)
    os.symlink(target, tmp_path / "link.npz")
    os.symlink("link.npz", tmp_path / "link2.npz")  # a chain, relative
    leanpass.save({"w": np.zeros(2)}, tmp_path / "link2.npz")
    assert os.path.islink(tmp_path / "link.npz") and os.path.islink(tmp_path / "link2.npz")
    assert leanpass.load(target)["w"].tolist() == [0.0, 0.0]
    assert listing(tmp_path) == ["link.npz", "link2.npz", "real"] and listing(tmp_path / "real") == ["m.npz"]


def test_save_refuses_a_read_only_file(tmp_path):
    import os

    path = tmp_path / "m.npz"
    leanpass.save({"w": np.ones(2)}, path)
    os.chmod(path, 0o444)
    os.symlink(path, tmp_path / "link.npz")
    before = path.read_bytes()
    for where in (path, tmp_path / "link.npz"):
        with pytest.raises(PermissionError, match="m.npz"):
            leanpass.save({"w": np.zeros(2)}, where)
    assert path.read_bytes() == before and listing(tmp_path) == ["link.npz", "m.npz"]
    assert not os.path.islink(path)


# ---- a killed save's temporary file is removed by the next save to that folder -------------------

SAVE_IN_CHILD = """
import os, sys
import numpy as np
import leanpass
def replace(src, dst):
    print("written", flush=True)
    if sys.argv[2] == "die":
        os._exit(1)  # killed between writing the temporary and moving it into place
    sys.stdin.readline()  # a save still in progress: wait for the parent
    return real(src, dst)
real, os.replace = os.replace, replace
leanpass.save({"w": np.ones(1000)}, sys.argv[1])
"""


def test_stale_temporaries_of_dead_savers_are_removed(tmp_path):
    import subprocess
    import sys

    def child(mode, name):
        return subprocess.Popen([sys.executable, "-c", SAVE_IN_CHILD, str(tmp_path / name), mode],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    (tmp_path / ".leanpass-notes.npz").write_text("not ours")
    for _ in range(3):  # each killed save removes the one before: they never pile up
        dead = child("die", "m.npz")
        assert dead.stdout.readline() == "written\n" and dead.wait() == 1
        dead.stdout.close()
        dead.stdin.close()
        stale = [n for n in listing(tmp_path) if n.startswith(".leanpass-") and n != ".leanpass-notes.npz"]
        assert len(stale) == 1
    live = child("wait", "other.npz")
    try:
        assert live.stdout.readline() == "written\n"
        in_progress = set(listing(tmp_path)) - set(stale) - {".leanpass-notes.npz"}
        assert len(in_progress) == 1
        leanpass.save({"w": np.zeros(2)}, tmp_path / "m.npz")
        assert set(listing(tmp_path)) == {"m.npz", ".leanpass-notes.npz"} | in_progress
        live.stdin.write("go\n")
        live.stdin.close()
        assert live.wait() == 0  # the concurrent save was left alone and finished
    finally:
        live.kill()
        live.wait()
        live.stdout.close()
    assert listing(tmp_path) == [".leanpass-notes.npz", "m.npz", "other.npz"]
    assert leanpass.load(tmp_path / "other.npz")["w"].shape == (1000,)


def test_copies_and_pickles_stay_on_the_same_device(device):
    """copy.deepcopy and pickle give tensors and models on the very device of the
    original, so they meet the original's tensors (before, each copy made a second
    backend object: "operands are on different devices, cpu and cpu")."""
    import copy
    import pickle

    t = leanpass.Tensor([1.0, 2.0, 3.0], device=device)
    for other in (copy.copy(t), copy.deepcopy(t), pickle.loads(pickle.dumps(t))):
        assert other.device == t.device
        np.testing.assert_array_equal((t + other).numpy(), [2.0, 4.0, 6.0])
    leanpass.manual_seed(0)
    model = nn.MLP([3, 4, 2], device=device, dtype="float64")
    x = leanpass.Tensor(np.random.default_rng(0).normal(size=(5, 3)), device=device, dtype="float64")
    want = model(x).numpy()
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        out = other(x)
        np.testing.assert_array_equal(out.numpy(), want)
        out.sum().backward()
        opt = optim.SGD(other.parameters(), lr=0.1)
        opt.step()  # the copy trains; the original does not move
        assert not np.array_equal(other(x).numpy(), want)
        np.testing.assert_array_equal(model(x).numpy(), want)
    assert pickle.loads(pickle.dumps(get_backend(device))) is get_backend(device)


def test_copies_are_leaves_with_their_own_version_counter(device):
    """A deep copy or pickle is a new leaf of the same class: copied data and .grad,
    the same requires_grad and name, and a version counter of its own (a counter's
    clock does not travel: a model pickled after training used to refuse backward
    in the new process, and a tensor that had views could not be pickled)."""
    import copy
    import pickle

    w = nn.Parameter(np.arange(6.0).reshape(2, 3), device=device, name="w")
    x = leanpass.Tensor(np.ones((4, 2)), device=device)
    for _ in range(3):  # versions move on
        (x @ w).sum().backward()
        with leanpass.no_grad():
            w -= 0.1 * w.grad
    view = w[0:1]  # a view: its weak reference must not reach the pickle
    assert w._version == 3
    for other in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert type(other) is nn.Parameter and other.requires_grad and other.is_leaf and other.name == "w"
        assert other._version == 0
        np.testing.assert_array_equal(other.numpy(), w.numpy())
        np.testing.assert_array_equal(host(other.grad), host(w.grad))
        other.grad = None
        (x @ other).sum().backward()  # the copy trains
        np.testing.assert_array_equal(host(other.grad), np.full((2, 3), 4.0))
        with leanpass.no_grad():
            other -= 1.0
        assert not np.array_equal(other.numpy(), w.numpy())  # its own memory
    del view
    shallow = copy.copy(w)  # shares the memory, and so the version counter
    with leanpass.no_grad():
        shallow += 1.0
    assert w._version == shallow._version == 4
    np.testing.assert_array_equal(shallow.numpy(), w.numpy())


def test_tensors_inside_a_graph_refuse_copies(device):
    """As in PyTorch, only leaves copy and pickle; the error says to detach."""
    import copy
    import pickle

    x = leanpass.Tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x * 3.0
    for make_copy in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(RuntimeError, match=r"output of '\*' in a graph.*detach\(\)"):
            make_copy(y)
    np.testing.assert_array_equal(copy.deepcopy(y.detach()).numpy(), [3.0, 6.0])
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [3.0, 3.0])


PICKLE_IN_CHILD = """
import pickle, sys
import numpy as np
import leanpass
from leanpass import nn, optim
model, opt = pickle.loads(sys.stdin.buffer.read())
x = leanpass.Tensor(np.ones((5, 3)))
opt.zero_grad()
nn.mse_loss(model(x), np.zeros((5, 2))).backward()
opt.step()
sys.stdout.write(repr(model(x).numpy().round(12).tolist()))
"""


def test_a_model_and_optimizer_pickled_after_training_train_on_in_a_new_process():
    import pickle
    import subprocess
    import sys

    leanpass.manual_seed(0)
    model = nn.MLP([3, 4, 2], dtype="float64")
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = leanpass.Tensor(np.ones((5, 3)))
    for _ in range(3):
        opt.zero_grad()
        nn.mse_loss(model(x), np.zeros((5, 2))).backward()
        opt.step()
    blob = pickle.dumps((model, opt))
    opt.zero_grad()
    nn.mse_loss(model(x), np.zeros((5, 2))).backward()
    opt.step()
    here = model(x).numpy().round(12).tolist()
    child = subprocess.run([sys.executable, "-c", PICKLE_IN_CHILD], input=blob, capture_output=True, timeout=120)
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout.decode() == repr(here)


def test_a_copy_keeps_a_gradient_written_into_read_zeros(device):
    import copy

    w = leanpass.Tensor([1.0, 2.0], requires_grad=True, device=device)
    np.testing.assert_array_equal(host(w.grad), [0.0, 0.0])
    assert not copy.deepcopy(w).has_grad  # zeros read, nothing written: none in the copy
    w.grad[0] = 5.0
    other = copy.deepcopy(w)
    assert other.has_grad
    np.testing.assert_array_equal(host(other.grad), [5.0, 0.0])



def test_dtypes_outside_the_standard_are_refused_by_save(tmp_path):
    """float16 and longdouble load on no device but cpu: save refuses them, naming the key."""
    for dtype in (np.float16, np.longdouble):
        if np.dtype(dtype).name in ("float64",):  # longdouble is float64 on some platforms
            continue
        with pytest.raises(TypeError, match=r"\['w'\] has dtype"):
            leanpass.save({"w": np.ones(2, dtype=dtype)}, tmp_path / "h.npz")
    assert not (tmp_path / "h.npz").exists()


def test_a_multistep_schedule_with_numpy_milestones_saves(tmp_path):
    sched = optim.lr_scheduler.MultiStepLR(optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1),
                                           milestones=np.array([30, 60, 30]))
    state = sched.state_dict()
    assert all(type(k) is int for k in state["milestones"])
    leanpass.save(state, tmp_path / "s.npz")
    assert dict(leanpass.load(tmp_path / "s.npz")["milestones"]) == {30: 2, 60: 1}


def test_numpy_integer_keys_bytes_paths_and_folders(tmp_path):
    """NumPy integer dict keys are saved as ints (torch.save takes them); a bytes path
    works; a folder given to load is IsADirectoryError, not 'no such file'."""
    path = tmp_path / "k.npz"
    leanpass.save({np.int64(3): np.ones(2), 4: {np.uint8(1): "x"}}, path)
    back = leanpass.load(path, device="cpu")
    assert list(back) == [3, 4] and type(list(back)[0]) is int and back[4] == {1: "x"}
    with pytest.raises(TypeError, match="keys must be strings or integers, got bool"):
        leanpass.save({np.bool_(True): 1}, tmp_path / "b.npz")
    leanpass.save({"w": np.arange(3.0)}, str(tmp_path / "bytes.npz").encode())
    np.testing.assert_array_equal(leanpass.load(str(tmp_path / "bytes.npz").encode(), device="cpu")["w"],
                                  np.arange(3.0))
    with pytest.raises(IsADirectoryError, match="is a folder"):
        leanpass.load(tmp_path)


# ---- format version 2: bare Tensors, PyTorch's layouts; files of LeanPass 0.3 load converted -------


def test_a_tensor_saved_alone_loads_as_a_tensor(device, tmp_path):
    """``lp.save(t)`` / ``lp.load``: a Tensor comes back as a Tensor on the device asked
    for, with its dtype, requires_grad and name (torch.load's round trip); a Tensor
    inside a container is still its array, as state dicts hold them."""
    from helpers import other_device

    path = tmp_path / "t.npz"
    w = nn.Parameter(np.arange(6.0).reshape(2, 3), name="w", device=device, dtype="float32")
    leanpass.save(w, path)
    back = leanpass.load(path, device=device)
    assert type(back) is leanpass.Tensor and back.device == w.device and back.dtype == "float32"
    assert back.requires_grad and back.is_leaf and back.name == "w" and back.shape == (2, 3)
    np.testing.assert_array_equal(back.numpy(), w.numpy())
    back.sum().backward()  # a leaf that trains
    np.testing.assert_array_equal(host(back.grad), np.ones((2, 3)))
    elsewhere = leanpass.load(path, device=other_device(device))
    assert elsewhere.device == get_backend(other_device(device)).device and elsewhere.requires_grad
    np.testing.assert_array_equal(elsewhere.numpy(), w.numpy())
    labels = leanpass.asarray(np.array([3, 1, 2], dtype=np.int64), device=device)  # int64, no gradient
    leanpass.save(labels, path)
    back = leanpass.load(path, device=device)
    assert type(back) is leanpass.Tensor and back.dtype == "int64" and not back.requires_grad and back.name is None
    np.testing.assert_array_equal(back.numpy(), [3, 1, 2])
    leanpass.save({"w": w}, path)  # inside a dict: the array
    assert type(leanpass.load(path, device=device)["w"]) is get_backend(device).array_type


def test_a_malformed_tensor_entry_is_a_value_error(tmp_path):
    array = {"a0": npy_bytes(np.ones(2))}
    bad = [{"data": {"array": "a0"}, "requires_grad": "yes", "name": None},
           {"data": {"array": "a0"}, "requires_grad": False},
           {"data": {"value": 3}, "requires_grad": False, "name": None}]
    for i, entry in enumerate(bad):
        path = tmp_path / f"bad{i}.npz"
        write_leanpass_zip(path, {"tensor": entry}, array, version=2)
        with pytest.raises(ValueError, match="malformed tensor entry|tensor entry without an array"):
            leanpass.load(path)
    write_leanpass_zip(tmp_path / "v1.npz", {"tensor": {"data": {"array": "a0"}, "requires_grad": False,
                                                        "name": None}}, array)  # version 1 had no tensors
    with pytest.raises(ValueError, match="malformed tensor entry"):
        leanpass.load(tmp_path / "v1.npz")
    write_leanpass_zip(tmp_path / "v3.npz", {"value": 1}, {}, version=3)
    with pytest.raises(ValueError, match="has format version 3; this LeanPass reads 1 to 2"):
        leanpass.load(tmp_path / "v3.npz")


def save_as_0_3(obj, path):
    """``obj`` written exactly as LeanPass 0.3's ``save`` wrote it: format version 1, every
    array (a Tensor's too, also alone) an ``a<i>.npy`` entry after ``__leanpass__.npy``
    in a stored zip, the description a JSON tree of dict/list/tuple/value/array nodes."""
    arrays = {}

    def encode(value):
        if isinstance(value, leanpass.Tensor):
            value = value.numpy()
        if isinstance(value, np.ndarray):
            key = f"a{len(arrays)}"
            arrays[key] = npy_bytes(np.asarray(value))
            return {"array": key}
        if isinstance(value, dict):
            return {"dict": [[k, encode(v)] for k, v in value.items()]}
        if isinstance(value, (list, tuple)):
            return {type(value).__name__: [encode(v) for v in value]}
        return {"value": value}

    write_leanpass_zip(path, encode(obj), arrays)


def state_of_0_3(model):
    """``model``'s state dict as LeanPass 0.3 held it: Linear weights (in, out),
    in_proj_weight (E, 3E) -- the transposes -- as host arrays."""
    return {k: (v.numpy().T.copy() if k.endswith(("weight", "in_proj_weight")) and v.ndim == 2
                and not k.endswith("norm.weight") else v.numpy()) for k, v in model.named_parameters()}


def test_a_0_3_file_loads_into_linear_mlp_and_attention_as_the_same_function(device, tmp_path):
    """A file of format version 1 (LeanPass 0.3: Linear weights (in, out)) loads with
    those weights transposed: the new model computes what the saved one computed,
    square layers included (a transposed square weight would load without error)."""
    leanpass.manual_seed(0)
    models = {"linear": nn.Linear(4, 4, dtype="float64"), "mlp": nn.MLP([3, 3, 5, 2], dtype="float64"),
              "attention": nn.MultiheadAttention(4, 2, batch_first=True, dtype="float64")}
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    for name, saved in models.items():
        path = tmp_path / f"{name}.npz"
        save_as_0_3(state_of_0_3(saved), path)
        with np.load(path, allow_pickle=False) as archive:
            assert json.loads(archive["__leanpass__"].tobytes())["version"] == 1
        state = leanpass.load(path, device=device)
        assert isinstance(state, leanpass.serialization.OldFormatDict) and state.format_version == 1
        leanpass.manual_seed(1)
        fresh = type(saved)(*((4, 4) if name == "linear" else ([3, 3, 5, 2],) if name == "mlp" else (4, 2)),
                            **({"batch_first": True} if name == "attention" else {}), device=device, dtype="float64")
        assert fresh.load_state_dict(state) == ([], [])
        for (key, want), got in zip(saved.named_parameters(), fresh.parameters()):
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=key)
            if device == "cpu":
                assert got.data.flags.c_contiguous, key
        here = leanpass.Tensor(x[..., :3] if name == "mlp" else x)
        there = here.to(device)
        if name == "attention":
            want, got = saved(here, here, here)[0], fresh(there, there, there)[0]
        else:
            want, got = saved(here), fresh(there)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


def test_a_0_3_checkpoint_resumes_model_and_optimizer(tmp_path):
    """A 0.3 checkpoint {"model", "optimizer", "epoch"}: the model's Linear weights and
    then the optimizer's state for them load transposed (nested dicts keep the mark);
    a plain copy of the dict loses it, and layout="leanpass-0.3" reads it; a 0.3 file
    of a bare array needs no conversion."""
    leanpass.manual_seed(0)
    model = nn.MLP([3, 3, 2], dtype="float64")
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = leanpass.Tensor(np.random.default_rng(1).normal(size=(5, 3)))
    (model(x) ** 2).sum().backward()
    opt.step()
    old_opt = opt.state_dict()
    names = [n for n, _ in model.named_parameters()]
    old_opt["state"] = {i: {k: (v.T.copy() if k != "step" and names[i].endswith("weight") else v)
                            for k, v in entries.items()} for i, entries in old_opt["state"].items()}
    save_as_0_3({"model": state_of_0_3(model), "optimizer": old_opt, "epoch": 3}, tmp_path / "c.npz")
    at_save = snapshot(model)
    saved = leanpass.load(tmp_path / "c.npz")
    assert saved["epoch"] == 3 and saved["model"].format_version == 1 and saved["optimizer"].format_version == 1
    leanpass.manual_seed(5)
    fresh = nn.MLP([3, 3, 2], dtype="float64")
    fresh_opt = optim.Adam(fresh.parameters(), lr=0.01)
    fresh.load_state_dict(saved["model"])
    fresh_opt.load_state_dict(saved["optimizer"])
    for (i, want), (j, got) in zip(opt.state_dict()["state"].items(), fresh_opt.state_dict()["state"].items()):
        assert i == j and want["step"] == got["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{names[i]} {key}")
    for o in (opt, fresh_opt):  # the same next step
        o.zero_grad()
    (model(x) ** 2).sum().backward()
    (fresh(x) ** 2).sum().backward()
    opt.step()
    fresh_opt.step()
    assert_same(snapshot(fresh), snapshot(model))
    # a plain copy is a plain dict: read in today's layout, a non-square weight is refused ...
    plain = dict(saved["model"])
    other = nn.MLP([3, 3, 2], dtype="float64")
    before = snapshot(other)
    with pytest.raises(ValueError, match=r"'layers.1.weight' has shape \(3, 2\) in the state but \(2, 3\) in the "):
        other.load_state_dict(plain)
    assert_same(snapshot(other), before)
    other.load_state_dict(plain, layout="leanpass-0.3")  # ... and layout="leanpass-0.3" reads it
    assert_same(snapshot(other), at_save)
    save_as_0_3(np.arange(6.0).reshape(2, 3), tmp_path / "a.npz")  # a bare array: as it was
    np.testing.assert_array_equal(leanpass.load(tmp_path / "a.npz", device="cpu"), np.arange(6.0).reshape(2, 3))


def test_a_0_3_state_saved_in_torch_layout_loads_as_it_is(tmp_path):
    """0.3's state_dict(layout="torch") was PyTorch's names and layouts already: its
    file loads with layout="torch" and nothing is transposed."""
    leanpass.manual_seed(0)
    model = nn.MLP([3, 3, 2], dtype="float64")
    save_as_0_3({k: np.asarray(v) for k, v in model.state_dict(layout="torch").items()}, tmp_path / "t.npz")
    other = nn.MLP([3, 3, 2], dtype="float64")
    other.load_state_dict(leanpass.load(tmp_path / "t.npz"), layout="torch")
    assert_same(snapshot(other), snapshot(model))


def _blank(cls):
    return cls.__new__(cls)


class Pickled03:
    """Pickles as LeanPass 0.3 pickled a module of class ``cls``: no ``__getstate__``,
    so the state is the instance ``__dict__`` (here without the layout mark)."""

    def __init__(self, cls, state):
        self.cls, self.state = cls, state

    def __reduce_ex__(self, protocol):  # 0.3's pickle: a new object, then its __dict__ as the state
        return _blank, (self.cls,), self.state


def test_a_module_pickled_by_0_3_unpickles_in_pytorchs_layout():
    import pickle

    leanpass.manual_seed(0)
    a, b = nn.Linear(3, 3, dtype="float64"), nn.Linear(4, 2, dtype="float64")
    x = leanpass.Tensor(np.random.default_rng(0).normal(size=(5, 3)))
    want_a = a(x).numpy()
    want_b = b(leanpass.Tensor(np.ones((1, 4)))).numpy()
    a(x).sum().backward()
    grad = a.weight.grad.copy()

    def as_0_3(layer):
        state = {k: v for k, v in layer.__dict__.items()}
        old = nn.Parameter(layer.weight.numpy().T.copy(), name="weight")
        old.grad = None if not layer.weight.has_grad else host(layer.weight.grad).T.copy()
        state["weight"] = old
        return Pickled03(type(layer), state)

    back_a = pickle.loads(pickle.dumps(as_0_3(a)))
    back_b = pickle.loads(pickle.dumps(as_0_3(b)))
    assert type(back_a) is nn.Linear and back_a.weight.shape == (3, 3) and back_b.weight.shape == (2, 4)
    np.testing.assert_allclose(back_a(x).numpy(), want_a, rtol=1e-12)
    np.testing.assert_allclose(back_b(leanpass.Tensor(np.ones((1, 4)))).numpy(), want_b, rtol=1e-12)
    np.testing.assert_array_equal(host(back_a.weight.grad), grad)
    assert back_a.weight.data.flags.c_contiguous
    # a weight two 0.3 layers share is turned once; a pickle of today's layer is not turned
    shared = as_0_3(a)
    twin = Pickled03(nn.Linear, {**shared.state})
    first, second = pickle.loads(pickle.dumps([shared, twin]))
    assert first.weight is second.weight
    np.testing.assert_allclose(first(x).numpy(), want_a, rtol=1e-12)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)).weight.numpy(), a.weight.numpy())
