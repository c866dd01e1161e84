#!/usr/bin/env bash
# The GPU check, within one deadline (GPU_CHECK_DEADLINE seconds, default 540): install the
# wheels of .whl/, a smoke test, the whole test suite on `cuda`, the three training scripts
# (MLP and CNN a few epochs on digits, the transformer 300 steps), and the throughput of
# LeanPass-cuda against PyTorch-cuda (and CuPy by hand for the MLP) for the wide MLP, the CNN
# and the transformer. It always ends with a table `| step | PASS/FAIL/TIMEOUT/SKIP | seconds | detail |`
# and the first failing test ids, and exits nonzero unless every step passed.
#
# Each step gets its share of the time left when it starts: training and throughput a fixed
# small share, the tests the rest. A step that runs out of time gets SIGINT (pytest then still
# writes its JUnit report and summary), and SIGKILL 20 s later.
#
# Runs offline on a CUDA machine that has CuPy, NumPy, pytest and hypothesis installed.
# array-api-compat and array-api-strict come along as wheels in .whl/ (make them with
# scripts/fetch_gpu_wheels.sh on a machine with network); where they are already installed,
# .whl/ may be absent. CuPy compiles its kernels with precompiled headers
# (CUPY_NVRTC_USE_PCH=1) into an empty kernel cache, and the tests' detail says how many
# kernels were compiled and, when time allows, how long one test file takes again warm.
#
#   bash scripts/gpu_check.sh                     # results also under $OUT (or /tmp/leanpass-gpu-check)
#   bash scripts/gpu_check.sh --summary-only DIR  # the table again, from the results in DIR
#
# GPU_CHECK_DEVICE (default cuda) and GPU_CHECK_PYTHON (default python3) allow a dry run
# elsewhere, e.g. GPU_CHECK_DEVICE=cpu GPU_CHECK_PYTHON=.venv/bin/python.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

deadline=${GPU_CHECK_DEADLINE:-540}
python=${GPU_CHECK_PYTHON:-python3}
device=${GPU_CHECK_DEVICE:-cuda}
TRAIN_S=40 THROUGHPUT_S=40 GRACE_S=20 SUMMARY_S=10  # each of 3 trainings, each of 3 throughputs
LATER_S=$(( 3 * TRAIN_S + 3 * THROUGHPUT_S ))
WARM_FILE=tests/test_elementwise.py  # run again with a warm kernel cache: run time without compiling

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
left() { echo $(( deadline - ($(now_ms) - start_ms) / 1000 )); }
min() { echo $(( $1 < $2 ? $1 : $2 )); }

# record NAME STATUS MILLISECONDS NOTE: one row of the table, in $results/steps.tsv
record() {
    printf '%s\t%s\t%d.%d\t%s\n' "$1" "$2" $(( $3 / 1000 )) $(( $3 % 1000 / 100 )) "$4" >>"$results/steps.tsv"
}

# run_step NAME LIMIT CMD...: CMD under a time limit of LIMIT seconds, its output on the screen and
# in $results/NAME.log; PASS on exit 0, TIMEOUT when the limit struck, FAIL otherwise.
run_step() {
    local name=$1 limit=$2 t0 rc ms status
    shift 2
    if (( limit < 1 )); then
        record "$name" TIMEOUT 0 "not started: the deadline (${deadline} s) is spent"
        return 124
    fi
    echo "== $name (at most $limit s)"
    t0=$(now_ms)
    timeout -s INT -k "$GRACE_S" "$limit" "$@" 2>&1 | tee "$results/$name.log"
    rc=${PIPESTATUS[0]}
    ms=$(( $(now_ms) - t0 ))
    if (( rc == 0 )); then status=PASS
    elif (( rc == 124 || (rc == 137 && ms >= limit * 1000) )); then status=TIMEOUT
    else status=FAIL
    fi
    record "$name" "$status" "$ms" "exit $rc, limit $limit s"
    return "$rc"
}

summary() {
    "$python" - "$1" <<'PY'
import os, sys, xml.etree.ElementTree as ET

results = sys.argv[1]


def read(name):
    try:
        with open(os.path.join(results, name)) as f:
            return f.read().splitlines()
    except OSError:
        return []


def cases(name):
    """The testcase elements of a JUnit file, or None where there is none."""
    try:
        return list(ET.parse(os.path.join(results, name)).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return None


def outcome(case):
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def node_id(case):
    """tests/test_x.py::TestY::test_z[cuda] from classname tests.test_x.TestY and name test_z[cuda]."""
    parts, name = case.get("classname", "").split("."), case.get("name", "?")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if os.path.isfile(path):
            return "::".join([path, *parts[i:], name])
    return "::".join(p for p in (case.get("classname"), name) if p)


def tests_detail(cold):
    if cold is None:
        return "no JUnit report"
    n = {k: 0 for k in ("passed", "failure", "error", "skipped")}
    for case in cold:
        if case.get("name"):  # pytest writes an empty testcase for the test it was interrupted in
            n[outcome(case)] += 1
    text = f"{n['passed']} passed, {n['failure'] + n['error']} failed, {n['skipped']} skipped"
    text += "".join(f"; {line}" for line in read("kernels.txt")[:1])
    warm = cases("junit-warm.xml")
    if warm:
        names = {(c.get("classname"), c.get("name")) for c in warm}
        cold_s = sum(float(c.get("time", 0)) for c in cold if (c.get("classname"), c.get("name")) in names)
        warm_s = sum(float(c.get("time", 0)) for c in warm)
        text += f"; {len(warm)} of them warm {warm_s:.1f} s, cold {cold_s:.1f} s"
    return text


def training_detail(name):
    return next((line for line in reversed(read(f"{name}.log")) if "accuracy" in line or "bits/char" in line), "")


def throughput_detail(name):
    rows = [line.split("|") for line in read(f"{name}.log") if line.startswith("| ") and "contestant" not in line]
    rows = [r for r in rows if len(r) > 3]
    return ("ms/step: " + ", ".join(f"{r[1].strip()} {r[3].strip()}" for r in rows)) if rows else ""


cold = cases("junit-cuda.xml")
extra = {"tests": tests_detail(cold)}
for model in ("mlp", "cnn", "transformer"):
    extra[f"train_{model}"] = training_detail(f"train_{model}")
    extra[f"throughput_{model}"] = throughput_detail(f"throughput_{model}")
steps = [line.split("\t") for line in read("steps.tsv") if line.count("\t") == 3]
print("| step | status | seconds | detail |")
print("|---|---|---|---|")
for name, status, seconds, note in steps:
    detail = "; ".join(d for d in (extra.get(name, "") if status != "SKIP" else "", note) if d).replace("|", "/")
    print(f"| {name} | {status} | {seconds} | {detail} |")
failed = [node_id(c) for c in cold or () if outcome(c) in ("failure", "error")]
if failed:
    print(f"\nfirst failing tests ({min(len(failed), 10)} of {len(failed)}):")
    print("\n".join(f"  {f}" for f in failed[:10]))
ok = bool(steps) and all(status == "PASS" for _, status, _, _ in steps)
print("\nGPU CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then
    return 0  # sourced (tests/test_scripts.py): the functions only
elif [[ ${1:-} == --summary-only ]]; then
    results=${2:?usage: gpu_check.sh --summary-only DIR}
    summary "$results"
    exit
fi

start_ms=$(now_ms)
results=${OUT:-/tmp/leanpass-gpu-check}
mkdir -p "$results"
rm -f "$results"/steps.tsv "$results"/kernels.txt "$results"/junit-*.xml "$results"/*.log
export PYTHONUNBUFFERED=1 CUPY_NVRTC_USE_PCH=${CUPY_NVRTC_USE_PCH:-1}
CUPY_CACHE_DIR=$(mktemp -d /tmp/leanpass-cupy-cache.XXXXXX)
export CUPY_CACHE_DIR
trap 'rm -rf "$CUPY_CACHE_DIR"' EXIT
kernels() { find "$CUPY_CACHE_DIR" -type f | wc -l; }

if compgen -G ".whl/*.whl" >/dev/null; then
    rm -rf /tmp/leanpass-site
    run_step install "$(min 60 "$(left)")" "$python" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --target /tmp/leanpass-site .whl/*.whl
    export PYTHONPATH="/tmp/leanpass-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # pip --target leaves out a wheel's data files: MPICH's libraries, which mpi4py loads
    mpich=$(compgen -G ".whl/mpich-*.whl" | head -1 || true)
    if [ -n "$mpich" ] && "$python" -m zipfile -e "$mpich" /tmp/leanpass-site/mpich-wheel >/dev/null 2>&1; then
        lib=$(compgen -G "/tmp/leanpass-site/mpich-wheel/mpich-*.data/data/lib" | head -1 || true)
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="/tmp/leanpass-site/bin:$PATH"
        chmod +x /tmp/leanpass-site/bin/* 2>/dev/null || true
    fi
else
    record install PASS 0 "no .whl/: the packages installed here"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
if run_step smoke "$(min 90 "$(left)")" "$python" - "$device" <<'PY'
import sys, numpy, array_api_compat, array_api_strict, leanpass
device = sys.argv[1]
versions = {"python": sys.version.split()[0], "numpy": numpy.__version__, "array-api-compat": array_api_compat.__version__,
            "array-api-strict": array_api_strict.__version__, "leanpass": leanpass.__version__}
if device.startswith("cuda"):
    import cupy
    versions["cupy"] = cupy.__version__
print(" | ".join(f"{k} {v}" for k, v in versions.items()), "| devices:", leanpass.available_devices())
backend = leanpass.backends.get_backend(device)
t = leanpass.Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
(t * t).sum().backward()
assert backend.to_host(t.grad).tolist() == [2.0, 4.0, 6.0], t.grad
print("smoke test on", t.device, "ok")
PY
then
    before=$(kernels)
    LEANPASS_TEST_DEVICES=$device run_step tests $(( $(left) - LATER_S - GRACE_S - SUMMARY_S )) \
        "$python" -m pytest -q -p no:cacheprovider --junitxml "$results/junit-cuda.xml" tests
    echo "$(( $(kernels) - before )) kernels compiled (CUPY_NVRTC_USE_PCH=$CUPY_NVRTC_USE_PCH)" >"$results/kernels.txt"
    # with time to spare, one test file again on the warm kernel cache: its run time without compiling
    spare=$(( $(left) - LATER_S - SUMMARY_S ))
    if (( spare >= 20 )) && [[ -f $WARM_FILE ]]; then
        LEANPASS_TEST_DEVICES=$device timeout -s INT -k 5 "$(min 40 $(( spare - 5 )))" "$python" -m pytest -q \
            -p no:cacheprovider --junitxml "$results/junit-warm.xml" "$WARM_FILE" >"$results/warm.log" 2>&1
    fi

    # each later step: its share, or what is left after the shares of the steps after it
    share() { min "$1" $(( $(left) - $2 - SUMMARY_S )); }
    run_step train_mlp "$(share "$TRAIN_S" $(( LATER_S - TRAIN_S )))" \
        "$python" examples/train_mlp.py --device "$device" --epochs 5 --quiet
    run_step train_cnn "$(share "$TRAIN_S" $(( LATER_S - 2 * TRAIN_S )))" \
        "$python" examples/train_cnn.py --device "$device" --epochs 10 --quiet
    run_step train_transformer "$(share "$TRAIN_S" $(( 3 * THROUGHPUT_S )))" \
        "$python" examples/train_transformer.py --device "$device" --steps 300 --quiet --sample 200
    run_step throughput_mlp "$(share "$THROUGHPUT_S" $(( 2 * THROUGHPUT_S )))" \
        "$python" benchmarks/throughput.py --device "$device" --dtype float32 --width 4096 --depth 4 \
        --batch-size 1024 --steps 20 --rounds 5
    run_step throughput_cnn "$(share "$THROUGHPUT_S" "$THROUGHPUT_S")" \
        "$python" benchmarks/throughput.py --device "$device" --model cnn --batch-size 256 --steps 10 --rounds 5
    run_step throughput_transformer "$(share "$THROUGHPUT_S" 0)" \
        "$python" benchmarks/throughput.py --device "$device" --model transformer --batch-size 32 --steps 10 \
        --rounds 5
else
    for step in tests train_mlp train_cnn train_transformer throughput_mlp throughput_cnn throughput_transformer; do
        record "$step" SKIP 0 "the smoke test failed"
    done
fi

echo "== summary (wall time $(( ($(now_ms) - start_ms) / 1000 )) s of $deadline s)"
summary "$results"
