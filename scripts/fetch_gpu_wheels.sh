#!/usr/bin/env bash
# Download, on a machine with network, the pure-Python wheels the GPU check needs on an
# offline GPU machine whose image has CuPy, NumPy, PyTorch, pytest and hypothesis but not
# array-api-compat (LeanPass needs it) nor array-api-strict (the tests need it), nor mpi4py
# and MPICH (the distributed tests, NCCL on the GPU). nox is not needed:
# scripts/gpu_check.sh runs pytest itself.
#
# They land in .whl/ (git-ignored), emptied first: two versions of one package there make
# the install on the GPU machine fail (ResolutionImpossible). They are chosen for the GPU
# machine's Python (GPU_PYTHON_VERSION, default 3.12), not this one's. Carry .whl/ along
# with the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
mkdir .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "${GPU_PYTHON_VERSION:-3.12}" \
    -d .whl "array-api-compat>=1.11" "array-api-strict>=2.3" "mpi4py>=4.0" "mpich>=4.1"
ls -1 .whl
