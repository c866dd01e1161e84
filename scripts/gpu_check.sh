#!/usr/bin/env bash
# The GPU check (at most 8 minutes): the whole test suite on `cuda`, the training
# script for a few epochs on digits, and the wide-MLP throughput of LeanPass-cuda
# against PyTorch-cuda and CuPy by hand; then a short summary.
#
# Runs offline on a CUDA machine that has CuPy, NumPy, pytest and hypothesis
# installed. array-api-compat and array-api-strict come along as wheels in
# .whl/ (make them with scripts/fetch_gpu_wheels.sh on a machine with network);
# where they are already installed, .whl/ may be absent.
#
#   bash scripts/gpu_check.sh            # results also under $OUT (or /tmp/leanpass-gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
results=${OUT:-/tmp/leanpass-gpu-check}
mkdir -p "$results"
start=$(date +%s)

if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/leanpass-site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/leanpass-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
python3 - <<'PY' || { echo "GPU CHECK FAILED: leanpass cannot use cuda here"; exit 1; }
import sys, numpy, cupy, array_api_compat, array_api_strict, leanpass
print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| cupy", cupy.__version__,
      "| array-api-compat", array_api_compat.__version__, "| array-api-strict", array_api_strict.__version__)
print("leanpass", leanpass.__version__, "| devices:", leanpass.available_devices())
backend = leanpass.backends.get_backend("cuda")
t = leanpass.Tensor([1.0, 2.0, 3.0], requires_grad=True, device="cuda")
(t * t).sum().backward()
assert backend.to_host(t.grad).tolist() == [2.0, 4.0, 6.0], t.grad
print("smoke test on", t.device, "ok")
PY

echo "== test suite on cuda"
LEANPASS_TEST_DEVICES=cuda timeout 330 python3 -m pytest -q -p no:cacheprovider \
    --junitxml "$results/junit-cuda.xml" tests 2>&1 | tee "$results/pytest-cuda.log"
status=${PIPESTATUS[0]}

echo "== training script on cuda (digits, a few epochs)"
timeout 90 python3 examples/train_mlp.py --device cuda --epochs 5 --quiet 2>&1 | tee "$results/train-cuda.log"
train_status=${PIPESTATUS[0]}

echo "== throughput: wide MLP, LeanPass-cuda against PyTorch-cuda and CuPy by hand"
timeout 150 python3 benchmarks/throughput.py --device cuda --dtype float32 --width 4096 --depth 4 \
    --batch-size 1024 --steps 20 --rounds 5 2>&1 | tee "$results/throughput-cuda.md"
throughput_status=${PIPESTATUS[0]}

echo "== summary"
python3 - "$results" "$status" "$train_status" "$throughput_status" "$start" <<'PY'
import os, sys, time, xml.etree.ElementTree as ET
results, status, train, throughput, start = sys.argv[1], *map(int, sys.argv[2:])
try:
    suite = ET.parse(os.path.join(results, "junit-cuda.xml")).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    print(f"tests on cuda: {passed} passed, {n['failures'] + n['errors']} failed, {n['skipped']} skipped (exit {status})")
except (OSError, ET.ParseError) as exc:
    print(f"tests on cuda: no report ({exc}); exit {status}")
for name, path in (("training", "train-cuda.log"), ("throughput", "throughput-cuda.md")):
    try:
        lines = open(os.path.join(results, path)).read().splitlines()
    except OSError:
        lines = []
    if name == "training":
        print("training:", next((l for l in reversed(lines) if "accuracy" in l), "no result"), f"(exit {train})")
    else:
        print("\n".join(l for l in lines if l.startswith(("|", "MLP"))) or "throughput: no result", f"\n(exit {throughput})")
print(f"wall time {time.time() - start:.0f} s")
ok = status == 0 and train == 0 and throughput == 0
print("GPU CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
