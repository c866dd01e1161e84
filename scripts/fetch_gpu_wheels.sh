#!/usr/bin/env bash
# Download, on a machine with network, the wheels the GPU check needs on an offline GPU
# machine whose image has CuPy, NumPy, PyTorch, pytest, pytest-xdist and hypothesis but not
# array-api-compat (LeanPass needs it) nor array-api-strict (the tests need it), nor MPICH
# (mpiexec, for the distributed tests: NCCL on the GPU) with the mpi4py that goes with it.
# nox is not needed: scripts/gpu_check.sh runs pytest itself.
#
# They land in .whl/ (git-ignored), emptied first: two versions of one package there make
# the install on the GPU machine fail (ResolutionImpossible). They are chosen for the GPU
# machine (GPU_PYTHON_VERSION, default 3.12; Linux x86-64), not this one. Carry .whl/ along
# with the checkout.
#
#   bash scripts/fetch_gpu_wheels.sh          # fill .whl/
#   bash scripts/fetch_gpu_wheels.sh --list   # the requirements, one a line (gpu_check.sh checks .whl/ against them)
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=("array-api-compat>=1.11" "array-api-strict>=2.3" "mpi4py>=4.0" "mpich>=4.1")
if [[ ${1:-} == --list ]]; then
    printf '%s\n' "${WHEELS[@]}"
    exit 0
fi

rm -rf .whl
mkdir .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "${GPU_PYTHON_VERSION:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    -d .whl "${WHEELS[@]}"
ls -1 .whl
