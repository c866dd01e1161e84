#!/usr/bin/env bash
# Download, on a machine with network, the pure-Python wheels the GPU check needs
# on an offline GPU machine that already has CuPy, NumPy, pytest and hypothesis.
# They land in .whl/ (git-ignored); carry that folder along with the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: -d .whl \
    "array-api-compat>=1.11" "array-api-strict>=2.3"
ls -1 .whl
