#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
ctest --test-dir build --output-on-failure -j2 --timeout 600
