#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UBSan (build-asan/, -O1), with LeakSanitizer's
# suppressions for the libraries qkv does not own (scripts/lsan.supp). Too slow for every CI run
# (a full second build, tests 3–5× slower); run it before a release and record the result in
# docs/FUZZING.md. Usage: bash scripts/sanitize.sh [CTEST ARGS…]   (e.g. -R Safetensors)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-asan -G Ninja -DQKV_SANITIZE=ON -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" >/dev/null
ninja -C build-asan
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
# halt_on_error: the first report fails its test; UBSan's reports are errors too.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
ctest --test-dir build-asan --output-on-failure -j2 --timeout 1800 "$@"
