"""The test matrix: backends x Python versions, plus lint.

    nox -s lint
    nox -s tests                                # every backend on every Python found
    nox -s "tests-3.13(backend='strict')"       # one cell
    nox -s torch                                # tests/test_optim.py against torch.optim (CPU wheel)
    nox -s gradgrad                             # every gradcheck also checks second derivatives
    nox -s gpu                                  # the CUDA tests (skips itself without a GPU)
    AAT_SUITE=~/array-api-tests nox -s conformance   # the array API conformance suite
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# pyenv keeps each interpreter in its own folder; put them all on PATH so nox
# finds python3.10 ... python3.13 without `pyenv global` listing them.
_PATH = os.environ.get("PATH", "")  # as it was: the conformance runner's python3 comes from here
_pyenv_bins = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9]*/bin")))
os.environ["PATH"] = os.pathsep.join([*_pyenv_bins, os.environ.get("PATH", "")])

PYTHONS = [v for v in ("3.10", "3.11", "3.12", "3.13") if shutil.which(f"python{v}")] or None

# backend name -> the device list handed to the tests' `device` fixture
BACKENDS = {"numpy": "cpu", "strict": "strict", "cupy": "cuda"}


def _cuda_visible() -> str | None:
    """None when a CUDA GPU is usable through CuPy here, else the reason it is not."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                return None
        except Exception as exc:  # CUDARuntimeError
            return f"CuPy sees no GPU ({exc})"
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine (no nvidia-smi)"
    return None


@nox.session(python=PYTHONS)
@nox.parametrize("backend", list(BACKENDS))
def tests(session: nox.Session, backend: str) -> None:
    """The test suite on one backend."""
    if backend == "cupy":
        reason = _cuda_visible()
        if reason:
            session.skip(f"cupy backend skipped: {reason}")
        # LEANPASS_CUDA_EXTRA=cuda13 for a CUDA 13 driver
        session.install("-e", f".[test,{os.environ.get('LEANPASS_CUDA_EXTRA', 'cuda12')}]", "scikit-learn")
    else:
        session.install("-e", ".[test]", "scikit-learn")
    session.run(
        "pytest", "-q", *session.posargs,
        env={"LEANPASS_TEST_DEVICES": BACKENDS[backend]},
        success_codes=[0],
    )


@nox.session(python="3.11")
def torch(session: nox.Session) -> None:
    """tests/test_optim.py with PyTorch installed, so the optimizers are compared with
    torch.optim step for step (those tests skip where PyTorch is missing, as in `tests`).

    PyTorch 2.13.0's CPU wheel for Python 3.11 lies on this project's machines (see `bench`)."""
    session.install("-e", ".[test]", "torch==2.13.0")
    session.run("python", "-c", "import torch; print('PyTorch', torch.__version__)")  # fail here, not skip
    session.run("pytest", "-q", "tests/test_optim.py", *session.posargs,
                env={"LEANPASS_TEST_DEVICES": "cpu,strict"})


@nox.session(python="3.11")
def gradgrad(session: nox.Session) -> None:
    """Second derivatives of every operation: the whole suite with LEANPASS_GRADGRAD=1,
    so that each gradcheck also runs gradgradcheck (backward with create_graph=True), on
    cpu and strict; with PyTorch, so the transforms are compared with torch.func. The
    sweeps of lp.compile over every operation and layer, which run no gradcheck, are
    left to the other sessions."""
    session.install("-e", ".[test]", "scikit-learn", "torch==2.13.0")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests", "--ignore=tests/test_distributed.py",
                "--ignore=tests/test_benchmarks.py", "--ignore=tests/test_scripts.py",
                "--ignore=tests/test_compile_ops.py", "--ignore=tests/test_compile_layers.py", *session.posargs,
                env={"LEANPASS_TEST_DEVICES": "cpu,strict", "LEANPASS_GRADGRAD": "1"})


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """The GPU check (scripts/gpu_check.sh): the cuda and NCCL tests, then training and throughput, on a
    GPU machine with the wheels of `.whl/` (or GPU_CHECK_WHEEL_DIR=none to use what is installed)."""
    reason = _cuda_visible()
    if reason:
        session.skip(f"GPU check skipped: {reason}")
    session.run("bash", "scripts/gpu_check.sh", external=True)


@nox.session(python="3.11")
def bench(session: nox.Session) -> None:
    """benchmarks/run.py against NumPy by hand and PyTorch (CPU build) in one process.

    PyTorch 2.13.0's CPU wheel for Python 3.11 lies on this project's machines;
    set LEANPASS_BENCH_NO_TORCH=1 to leave PyTorch out elsewhere. OpenBLAS kernel
    overrides (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) are dropped for the run so
    NumPy picks its own kernel; the report names the kernel it ran.
    """
    session.install("-e", ".[bench]")
    if not os.environ.get("LEANPASS_BENCH_NO_TORCH"):
        session.install("torch==2.13.0")
    env = {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}
    session.run("python", "benchmarks/run.py", *session.posargs, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the package, tests, scripts and examples."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session(python=False)
def conformance(session: nox.Session) -> None:
    """The official array API conformance suite (data-apis/array-api-tests) against
    leanpass on cpu and on strict, and against array_api_strict for reference.

    The suite is third-party code kept outside this repository: set AAT_SUITE to a
    copy of it (see ../shared/array-api-tests/README.md for the layout). The runner
    is ../shared/array-api-tests/run.sh (AAT_RUNNER overrides). Positional
    arguments: the hypothesis examples per test (default 20), then pytest args.
    Known failures are listed, with a reason each, in conformance/xfails.txt.
    """
    suite = os.environ.get("AAT_SUITE")
    if not suite:
        session.skip("AAT_SUITE is not set: it must point at a copy of data-apis/array-api-tests "
                     "(see ../shared/array-api-tests/README.md)")
    runner = os.environ.get("AAT_RUNNER", os.path.join("..", "shared", "array-api-tests", "run.sh"))
    if not os.path.isfile(runner):
        session.skip(f"the suite's runner {runner} is missing (set AAT_RUNNER)")
    args = list(session.posargs) or ["20"]
    xfails = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    with open("conformance/xfails.txt") as listed, xfails:
        for line in listed:  # the suite wants bare ids: drop the reasons
            entry = re.split(r"\s+#", line, maxsplit=1)[0].strip()
            if entry and not entry.startswith("#"):
                xfails.write(entry + "\n")
    for label, module, env in (
        ("array_api_strict (reference)", "array_api_strict", {}),
        ("leanpass on cpu", "leanpass", {"LEANPASS_DEVICE": "cpu"}),
        ("leanpass on strict", "leanpass", {"LEANPASS_DEVICE": "strict"}),
    ):
        session.log(f"== {label}")
        extra = {"AAT_XFAILS": xfails.name} if module == "leanpass" and os.environ.get("AAT_USE_XFAILS") else {}
        python = os.environ.get("AAT_PYTHON") or shutil.which("python3", path=_PATH) or "python3"
        session.run("bash", runner, module, *args, env={**env, **extra, "AAT_PYTHON": python},
                    external=True, success_codes=[0, 1])
