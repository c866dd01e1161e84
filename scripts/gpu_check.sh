#!/usr/bin/env bash
# The GPU check: only what needs a GPU, within one deadline (GPU_CHECK_DEADLINE seconds,
# default 345, so that the whole run, table included, fits in 6 minutes on a fresh machine).
#
#  1. preflight          .whl/ holds one wheel of each requirement of scripts/fetch_gpu_wheels.sh
#                        (else one line saying what is missing and how to fetch it, exit 2)
#  2. cache_restore      CuPy's kernel cache from GPU_CHECK_KERNEL_CACHE, where one was brought
#  3. install            the wheels, into /tmp/leanpass-site
#  4. smoke              versions, and one backward pass on the GPU
#  5. tests              the tests that need a GPU, with LEANPASS_TEST_DEVICES=cuda, on 8 pytest-xdist
#                        workers (GPU_CHECK_WORKERS; one process, with a notice, without xdist):
#                        those parametrised with the cuda device (the `device` fixture) or a cuda id,
#                        those whose name says cuda, nccl or gpu (the NCCL tests), and the GPU-only
#                        files (GPU_CHECK_FILES, default tests/test_cuda.py)
#  6. tests_warm         only where a kernel cache was brought: one test file again, which must
#                        compile nothing new
#  7. train_mlp, train_cnn, train_transformer    at the same time, once the tests passed
#  8. throughput_mlp_small, throughput_mlp, throughput_cnn, throughput_transformer    one after the other, once
#                        the tests passed, each with LeanPass's step through lp.compile beside the eager one
#  9. cache_save         CuPy's kernel cache as ONE archive, $OUT/cupy-kernels.tar.gz
#
# Each step has a time limit (STEPS below: its own, and never more than the deadline leaves
# after the limits of the steps still to come); past it the step gets SIGINT (pytest then
# still writes its JUnit report and summary) and SIGKILL 10 s later. The run ends with two
# tables: `| step | status | seconds | detail |` with the first failing test ids, then each
# step's estimates beside what was measured (wall seconds, kernel cache files before and
# after). docs/devices.md ("The GPU check") says how each estimate was made. The exit status
# is nonzero unless every step passed (N/A: a step that does not apply to this run).
#
# $OUT (where the device tool collects files; /tmp/leanpass-gpu-check without it) receives
# three files: summary.txt (the tables), cupy-kernels.tar.gz (the kernel cache) and
# gpu-check-results.tar.gz (every log and JUnit report, from GPU_CHECK_RESULTS).
#
#   bash scripts/gpu_check.sh                     # the check
#   bash scripts/gpu_check.sh --summary-only DIR  # the tables again, from the results in DIR
#   bash scripts/gpu_check.sh --steps             # the steps, their limits and estimates
#
# Environment: GPU_CHECK_WHEEL_DIR (default .whl; `none`: use the installed packages),
# GPU_CHECK_KERNEL_CACHE (default .gpu-cache/cupy-kernels.tar.gz: a cache archive a
# previous run wrote to $OUT, brought along), GPU_CHECK_DEVICE (default cuda) and
# GPU_CHECK_PYTHON (default python3) allow a dry run elsewhere, e.g.
# GPU_CHECK_DEVICE=cpu GPU_CHECK_PYTHON=.venv/bin/python GPU_CHECK_WHEEL_DIR=none.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

# The steps in order. limit_s: the step's time limit ("rest": what the deadline leaves after
# the later steps' limits; the three train_* run at the same time and reserve one limit);
# est_s: estimated wall seconds on a fresh machine without a kernel cache; est_warm_s: with
# one brought ("-": the step does not run); est_kernels: estimated new files in CuPy's kernel
# cache on a first run. docs/devices.md holds the same table (tests/test_gpu_check_script.py
# compares the two).
STEPS="\
step                    limit_s  est_s  est_warm_s  est_kernels
preflight                     5      1           1            0
cache_restore                20      0           2            0
install                      30      6           6            0
smoke                        45     10           5            5
tests                      rest     82          36         1200
tests_warm                   30      -          10            0
train_mlp                    45      8           8            5
train_cnn                    45     10          10            5
train_transformer            45     12          12            5
throughput_mlp_small         20     12          12           10
throughput_mlp               25     16          16            5
throughput_cnn               25     16          16           10
throughput_transformer       29     20          20           15
cache_save                   15      3           3            0
"

deadline=${GPU_CHECK_DEADLINE:-345}
python=${GPU_CHECK_PYTHON:-python3}
device=${GPU_CHECK_DEVICE:-cuda}
workers=${GPU_CHECK_WORKERS:-8}
wheel_dir=${GPU_CHECK_WHEEL_DIR:-.whl}
cache_in=${GPU_CHECK_KERNEL_CACHE:-.gpu-cache/cupy-kernels.tar.gz}
GRACE_S=10 SUMMARY_S=5
WARM_FILE=tests/test_elementwise.py  # run again on a brought kernel cache: it must compile nothing

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
left() { echo $(( deadline - ($(now_ms) - start_ms) / 1000 )); }
min() { echo $(( $1 < $2 ? $1 : $2 )); }

# est COLUMN STEP: a value of the STEPS table
est() {
    awk -v col="$1" -v step="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
                                  $1 == step { print $c }' <<<"$STEPS"
}

# limit_for STEP: its time limit now: its own, at most what the deadline leaves after the
# limits of the steps after it in $plan (the train_* steps run at the same time: one limit)
limit_for() {
    local step=$1 cap s later=0 after=0 train=0
    for s in $plan; do
        if (( after )); then
            if [[ $s == train_* ]]; then
                (( train )) && continue
                train=1
            fi
            cap=$(est limit_s "$s")
            [[ $cap == rest ]] || later=$(( later + cap ))
        fi
        [[ $s == "$step" ]] && after=1
        [[ $s == train_* && $step == train_* ]] && train=1
    done
    cap=$(est limit_s "$step")
    local avail=$(( $(left) - later - SUMMARY_S ))
    if [[ $cap == rest ]]; then echo "$avail"; else min "$cap" "$avail"; fi
}

# the number of files in CuPy's kernel cache
kernels() { find "$CUPY_CACHE_DIR" -type f 2>/dev/null | wc -l; }

# record NAME STATUS MILLISECONDS NOTE [FILES_BEFORE FILES_AFTER]: one row of the table, in
# $steps_file (default $results/steps.tsv)
record() {
    local row
    row=$(printf '%s\t%s\t%d.%d\t%s' "$1" "$2" $(( $3 / 1000 )) $(( $3 % 1000 / 100 )) "$4")
    if (( $# >= 6 )); then row+=$(printf '\t%s\t%s' "$5" "$6"); fi
    printf '%s\n' "$row" >>"${steps_file:-$results/steps.tsv}"
}

# run_step NAME LIMIT CMD...: CMD under a time limit of LIMIT seconds, its output on the screen and
# in $results/NAME.log; PASS on exit 0, TIMEOUT when the limit struck, FAIL otherwise. With a
# kernel cache (CUPY_CACHE_DIR), the row also holds its file count before and after.
run_step() {
    local name=$1 limit=$2 t0 rc ms status counts=()
    shift 2
    [[ -n ${CUPY_CACHE_DIR:-} ]] && counts=("$(kernels)")
    if (( limit < 1 )); then
        record "$name" TIMEOUT 0 "not started: the deadline (${deadline} s) is spent" "${counts[@]}" "${counts[@]}"
        return 124
    fi
    echo "== $name (at most $limit s)"
    t0=$(now_ms)
    timeout -s INT -k "$GRACE_S" "$limit" "$@" 2>&1 | tee "$results/$name.log"
    rc=${PIPESTATUS[0]}
    ms=$(( $(now_ms) - t0 ))
    [[ -n ${CUPY_CACHE_DIR:-} ]] && counts+=("$(kernels)")
    if (( rc == 0 )); then status=PASS
    elif (( rc == 124 || (rc == 137 && ms >= limit * 1000) )); then status=TIMEOUT
    else status=FAIL
    fi
    record "$name" "$status" "$ms" "exit $rc, limit $limit s" "${counts[@]}"
    return "$rc"
}

# check_wheels DIR: nothing where DIR holds one wheel of each requirement of
# fetch_gpu_wheels.sh; else one line saying what is missing and the command that fetches it
check_wheels() {
    local dir=$1 spec name norm missing=() doubled=() files wanted
    wanted=$(timeout 5 bash scripts/fetch_gpu_wheels.sh --list) || {
        echo "gpu_check: cannot read the wheel list (bash scripts/fetch_gpu_wheels.sh --list failed)"
        return 1
    }
    shopt -s nullglob nocaseglob
    for spec in $wanted; do
        name=${spec%%[<>=!~;\[]*}
        norm=$(tr -s '._-' '_' <<<"${name,,}")  # a wheel's file name spells the project so
        files=("$dir/$norm"-*.whl)
        if (( ${#files[@]} == 0 )); then missing+=("$name")
        elif (( ${#files[@]} > 1 )); then doubled+=("$name")
        fi
    done
    shopt -u nullglob nocaseglob
    (( ${#missing[@]} + ${#doubled[@]} == 0 )) && return 0
    local what="" IFS=,
    if [[ ! -d $dir ]]; then what="$dir/ is missing (it must hold ${missing[*]})"
    else
        (( ${#missing[@]} )) && what="$dir/ lacks ${missing[*]}"
        (( ${#doubled[@]} )) && what+="${what:+; }$dir/ holds more than one version of ${doubled[*]}"
    fi
    what=${what//,/, }
    echo "gpu_check: stopped: $what; fetch them with 'bash scripts/fetch_gpu_wheels.sh' on a machine with network, then carry .whl (or set GPU_CHECK_WHEEL_DIR=none to use installed packages)"
    return 1
}

# write_select_plugin DIR: DIR/leanpass_gpu_select.py, the pytest plugin (-p leanpass_gpu_select)
# that keeps only the tests that need a GPU, so that the rule holds for tests added later
write_select_plugin() {
    cat >"$1/leanpass_gpu_select.py" <<'PY'
"""Keep the tests that need a GPU (scripts/gpu_check.sh); CI has run the others on the CPU.

Kept: a test parametrised with the device under check (LEANPASS_TEST_DEVICES, cuda on a
GPU: the `device` fixture of tests/conftest.py, whose only device it then is, and the
`backend` fixture built on it), one whose parametrisation id names it, one whose own name
says cuda, nccl or gpu (the NCCL tests of tests/test_distributed.py), and every test of a
GPU-only file (GPU_CHECK_FILES, default tests/test_cuda.py). A test that parametrises its
own `device` over CPU devices (the CUDA stand-in's) is not kept."""
import os

FILES = set(os.path.basename(f) for f in os.environ.get("GPU_CHECK_FILES", "tests/test_cuda.py").split())
DEVICES = {d.strip() for d in os.environ.get("LEANPASS_TEST_DEVICES", "cuda").split(",") if d.strip()}
TYPES = {d.split(":")[0] for d in DEVICES}
WORDS = ("cuda", "nccl", "gpu")


def on_device(value):
    return isinstance(value, str) and (value in DEVICES or value.split(":")[0] in TYPES)


def needs_gpu(item):
    if item.path.name in FILES:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        if any(on_device(value) for value in callspec.params.values()):
            return True
        if any(part in DEVICES or part in TYPES for part in callspec.id.split("-")):
            return True
    name = getattr(item, "originalname", None) or item.name
    return any(word in name.lower() for word in WORDS)


def pytest_collection_modifyitems(config, items):
    keep = [item for item in items if needs_gpu(item)]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not needs_gpu(item)])
        items[:] = keep
PY
}

summary() {
    GPU_CHECK_STEPS_TABLE="$STEPS" "$python" - "$1" <<'PY'
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
extra["throughput_mlp_small"] = throughput_detail("throughput_mlp_small")
steps = [line.split("\t") for line in read("steps.tsv") if line.count("\t") in (3, 5)]
print("| step | status | seconds | detail |")
print("|---|---|---|---|")
for name, status, seconds, note, *_ in steps:
    detail = "; ".join(d for d in (extra.get(name, "") if status != "SKIP" else "", note) if d).replace("|", "/")
    print(f"| {name} | {status} | {seconds} | {detail} |")

# the estimates (the STEPS table of gpu_check.sh) beside what was measured
table = [line.split() for line in os.environ.get("GPU_CHECK_STEPS_TABLE", "").strip().splitlines()]
estimates = {row[0]: dict(zip(table[0][1:], row[1:])) for row in table[1:]} if table else {}
measured = [s for s in steps if len(s) == 6]
if measured:
    warm = any(s[0] == "cache_restore" and s[1] == "PASS" for s in steps)
    print(f"\nestimates beside measurements ({'a kernel cache was brought' if warm else 'a first run: no kernel cache brought'}):")
    print("| step | status | limit s | est. s | measured s | est. new kernel files | kernel files before | after | new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, status, seconds, note, before, after in measured:
        e = estimates.get(name, {})
        est_s = e.get("est_warm_s" if warm else "est_s", "?")
        est_k = e.get("est_kernels", "?")
        if warm:  # a brought cache holds every kernel: the steps should compile none
            est_k = str(sum(int(v["est_kernels"]) for v in estimates.values())) if name == "cache_restore" else "0"
        limit = note.rsplit("limit ", 1)[-1].split()[0] if "limit " in note else e.get("limit_s", "?")
        new = int(after) - int(before)
        print(f"| {name} | {status} | {limit} | {est_s} | {seconds} | {est_k} | {before} | {after} | {new} |")

failed = [node_id(c) for c in cold or () if outcome(c) in ("failure", "error")]
if failed:
    print(f"\nfirst failing tests ({min(len(failed), 10)} of {len(failed)}):")
    print("\n".join(f"  {f}" for f in failed[:10]))
ok = bool(steps) and all(status in ("PASS", "N/A") for _, status, *_ in steps)
print("\nGPU CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then
    return 0  # sourced (tests/test_scripts.py, tests/test_gpu_check_script.py): the functions only
elif [[ ${1:-} == --summary-only ]]; then
    results=${2:?usage: gpu_check.sh --summary-only DIR}
    summary "$results"
    exit
elif [[ ${1:-} == --steps ]]; then
    printf '%s' "$STEPS"
    exit 0
fi

# ---- 1. preflight: in the first seconds, before anything is installed or compiled ----------------
start_ms=$(now_ms)
results=${GPU_CHECK_RESULTS:-/tmp/leanpass-gpu-check}
out=${OUT:-$results}
if [[ $wheel_dir != none ]]; then
    check_wheels "$wheel_dir" || exit 2
fi
mkdir -p "$results" "$out"
rm -f "$results"/steps*.tsv "$results"/kernels.txt "$results"/junit-*.xml "$results"/*.log
record preflight PASS $(( $(now_ms) - start_ms )) "wheels: ${wheel_dir}" 0 0

export PYTHONUNBUFFERED=1 CUPY_NVRTC_USE_PCH=${CUPY_NVRTC_USE_PCH:-1}
work=$(mktemp -d /tmp/leanpass-gpu-check-work.XXXXXX)
CUPY_CACHE_DIR=$work/kernel-cache
mkdir -p "$CUPY_CACHE_DIR"
export CUPY_CACHE_DIR
trap 'rm -rf "$work"' EXIT

# ---- 2. cache_restore -------------------------------------------------------------------------
restored=0
if [[ -f $cache_in ]]; then
    plan="cache_restore install smoke tests tests_warm train_mlp train_cnn train_transformer
          throughput_mlp_small throughput_mlp throughput_cnn throughput_transformer cache_save"
    run_step cache_restore "$(limit_for cache_restore)" tar -xzf "$cache_in" -C "$CUPY_CACHE_DIR" && restored=1
    echo "$(kernels) kernel cache files restored from $cache_in"
else
    plan="install smoke tests train_mlp train_cnn train_transformer throughput_mlp_small throughput_mlp
          throughput_cnn throughput_transformer cache_save"
    record cache_restore N/A 0 "no kernel cache brought ($cache_in): a first run" 0 0
fi

# ---- 3. install ---------------------------------------------------------------------------------
if [[ $wheel_dir != none ]]; then
    rm -rf /tmp/leanpass-site
    run_step install "$(limit_for install)" "$python" -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --target /tmp/leanpass-site "$wheel_dir"/*.whl
    export PYTHONPATH="/tmp/leanpass-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # pip --target leaves out a wheel's data files: MPICH's libraries, which mpi4py loads
    mpich=$(compgen -G "$wheel_dir/mpich-*.whl" | head -1 || true)
    if [ -n "$mpich" ] && "$python" -m zipfile -e "$mpich" /tmp/leanpass-site/mpich-wheel >/dev/null 2>&1; then
        lib=$(compgen -G "/tmp/leanpass-site/mpich-wheel/mpich-*.data/data/lib" | head -1 || true)
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="/tmp/leanpass-site/bin:$PATH"
        chmod +x /tmp/leanpass-site/bin/* 2>/dev/null || true
    fi
else
    record install N/A 0 "GPU_CHECK_WHEEL_DIR=none: the packages installed here" "$(kernels)" "$(kernels)"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

# ---- 4. smoke -----------------------------------------------------------------------------------
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo "nvidia-smi: not found"
run_step smoke "$(limit_for smoke)" "$python" - "$device" <<'PY'
import sys, numpy, array_api_compat, array_api_strict, leanpass
device = sys.argv[1]
versions = {"python": sys.version.split()[0], "numpy": numpy.__version__, "array-api-compat": array_api_compat.__version__,
            "array-api-strict": array_api_strict.__version__, "leanpass": leanpass.__version__}
if device.startswith("cuda"):
    import cupy
    versions["cupy"] = cupy.__version__
try:
    import xdist
    versions["pytest-xdist"] = xdist.__version__
except ImportError:
    pass
print(" | ".join(f"{k} {v}" for k, v in versions.items()), "| devices:", leanpass.available_devices())
backend = leanpass.backends.get_backend(device)
t = leanpass.Tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
(t * t).sum().backward()
assert backend.to_host(t.grad).tolist() == [2.0, 4.0, 6.0], t.grad
print("smoke test on", t.device, "ok")
PY
smoke_rc=$?

# ---- 5. tests, 6. tests_warm ---------------------------------------------------------------------
later="train_mlp train_cnn train_transformer throughput_mlp_small throughput_mlp throughput_cnn throughput_transformer"
if (( smoke_rc == 0 )); then
    write_select_plugin "$work"
    export PYTHONPATH="$work:$PYTHONPATH"
    parallel=()
    if "$python" -c "import xdist" 2>/dev/null; then
        parallel=(-n "$workers")
    else
        echo "gpu_check: pytest-xdist is not installed: the tests run in one process (slower than planned)"
    fi
    before=$(kernels)
    LEANPASS_TEST_DEVICES=$device run_step tests "$(limit_for tests)" "$python" -m pytest -q -p no:cacheprovider \
        -p leanpass_gpu_select "${parallel[@]}" --junitxml "$results/junit-cuda.xml" tests
    tests_rc=$?
    echo "$(( $(kernels) - before )) kernels compiled (CUPY_NVRTC_USE_PCH=$CUPY_NVRTC_USE_PCH)" >"$results/kernels.txt"
    if (( restored == 0 )); then
        record tests_warm N/A 0 "no kernel cache brought: a first run" "$(kernels)" "$(kernels)"
    elif (( tests_rc != 0 )); then
        record tests_warm SKIP 0 "the tests did not pass" "$(kernels)" "$(kernels)"
    else
        LEANPASS_TEST_DEVICES=$device run_step tests_warm "$(limit_for tests_warm)" "$python" -m pytest -q \
            -p no:cacheprovider -p leanpass_gpu_select "${parallel[@]}" --junitxml "$results/junit-warm.xml" \
            "$WARM_FILE"
    fi
else
    tests_rc=1
    for step in tests tests_warm; do record "$step" SKIP 0 "the smoke test failed" "$(kernels)" "$(kernels)"; done
fi

# ---- 7. training (at the same time), 8. throughput (one after the other) ---------------------------
if (( tests_rc == 0 )); then
    limit=$(limit_for train_mlp)
    train() {  # train NAME CMD...: a run_step of its own in the background, its output in its log alone
        local name=$1
        shift
        echo "== $name (at most $limit s, at the same time as the other trainings)"
        (steps_file="$results/steps.$name.tsv" run_step "$name" "$limit" "$@" </dev/null >/dev/null) &
    }
    rm -f "$results"/steps.train_*.tsv
    train train_mlp "$python" examples/train_mlp.py --device "$device" --epochs 5 --quiet
    train train_cnn "$python" examples/train_cnn.py --device "$device" --epochs 10 --quiet
    train train_transformer "$python" examples/train_transformer.py --device "$device" --steps 300 --quiet --sample 200
    wait
    for step in train_mlp train_cnn train_transformer; do
        cat "$results/steps.$step.tsv" >>"$results/steps.tsv" 2>/dev/null \
            || record "$step" FAIL 0 "no result (the step did not record one)" "$(kernels)" "$(kernels)"
        tail -n 3 "$results/$step.log" 2>/dev/null | sed "s/^/  $step: /"
    done
    # the issue's GPU targets: a small-batch MLP step (W1's layers, batch 64), compiled, against PyTorch eager
    run_step throughput_mlp_small "$(limit_for throughput_mlp_small)" "$python" benchmarks/throughput.py \
        --device "$device" --dtype float32 --sizes 784 256 128 10 --batch-size 64 --steps 50 --rounds 5 --compile
    run_step throughput_mlp "$(limit_for throughput_mlp)" "$python" benchmarks/throughput.py --device "$device" \
        --dtype float32 --width 4096 --depth 4 --batch-size 1024 --steps 20 --rounds 5 --compile
    run_step throughput_cnn "$(limit_for throughput_cnn)" "$python" benchmarks/throughput.py --device "$device" \
        --model cnn --batch-size 256 --steps 10 --rounds 5 --compile
    run_step throughput_transformer "$(limit_for throughput_transformer)" "$python" benchmarks/throughput.py \
        --device "$device" --model transformer --batch-size 32 --steps 10 --rounds 5 --compile
else
    for step in $later; do record "$step" SKIP 0 "the tests did not pass" "$(kernels)" "$(kernels)"; done
fi

# ---- 9. cache_save: the kernel cache as one archive -------------------------------------------------
archive="$out/cupy-kernels.tar.gz"
if (( $(kernels) == 0 )); then
    record cache_save N/A 0 "no kernels in the cache" 0 0
elif run_step cache_save "$(limit_for cache_save)" tar -czf "$archive.tmp" -C "$CUPY_CACHE_DIR" . \
        && mv "$archive.tmp" "$archive"; then
    size=$(( $(stat -c %s "$archive") / 1024 ))
    echo "kernel cache: $(kernels) files in $archive ($(( size / 1024 )).$(( size % 1024 * 10 / 1024 )) MiB);" \
        "bring it back as $cache_in"
    (( size > 16 * 1024 )) && echo "gpu_check: $archive is over 16 MiB, more than the device tool returns a file"
fi

echo "== summary (wall time $(( ($(now_ms) - start_ms) / 1000 )) s of $deadline s)"
summary "$results" | tee "$out/summary.txt"
rc=${PIPESTATUS[0]}
if [[ $out != "$results" ]]; then
    tar -czf "$out/gpu-check-results.tar.gz" -C "$results" . 2>/dev/null
fi
exit "$rc"
