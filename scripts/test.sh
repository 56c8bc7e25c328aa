#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite (C++ with ctest, the
# attention viewer in chromium among them; the Python module with pytest), then a short libFuzzer
# run of every fuzz target (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser  # chromium for the attention viewer's browser test
bash scripts/build.sh
# CTranslate2 from PyPI for `qkv export --to ctranslate2`'s test (it skips, saying so, without them)
python3 -m pip install -q --disable-pip-version-check ctranslate2 sentencepiece ||
  echo "test: could not pip install ctranslate2 sentencepiece; the export test will skip" >&2
# Two tests at once on 1 OpenMP thread each (tests/CMakeLists.txt's QKV_TEST_THREADS): jobs × threads
# ≤ cores, so no test's threads wait for a core another test holds.
jobs=$(( $(nproc) < 2 ? 1 : 2 ))
export OMP_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600
# The CUDA backend (docs/CUDA.md): built with nvcc so that it cannot rot — no GPU needed — and its
# device tests run there (they skip, saying so, without a GPU). Without a CUDA toolkit this says so.
bash scripts/build_cuda.sh
if [ -x build-cuda/tests/qkv_tests ]; then
  build-cuda/tests/qkv_tests --gtest_filter='Device.*:Cuda.*' --gtest_brief=1
fi
# the Python module: pip install into build/venv, then pytest (scripts/test_python.sh)
bash scripts/test_python.sh
# the hostile suite's Python cases (issue 43): they need the module that test_python.sh just put in
# build/venv, which ctest ran before (there they skip, saying so)
OMP_NUM_THREADS=1 /usr/bin/python3 tests/hostile/hostile_test.py --qkv build/qkv --only python/
# libFuzzer smoke run: each fuzz target for QKV_FUZZ_SECONDS (default 60; 0 skips), docs/FUZZING.md
if [ "${QKV_FUZZ_SECONDS:-60}" != "0" ]; then
  bash scripts/fuzz.sh "${QKV_FUZZ_SECONDS:-60}"
fi
