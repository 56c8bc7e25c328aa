#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite (C++ with ctest, the
# attention viewer in chromium among them; the Python module with pytest), then a short libFuzzer
# run of every fuzz target (scripts/fuzz.sh).
#
# Every source is compiled once, in ./build: with the CUDA backend where the toolkit is (only the .cu
# kernels are extra; its device tests skip without a GPU) and with the Python module, which pip then
# packs without compiling again (scripts/test_python.sh). The fuzz targets alone are built apart, as
# libFuzzer needs clang. Each step prints its name and the time so far.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
step() { printf '\n== test: %s (%d:%02d so far)\n' "$1" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); }

step "setup: Debian packages, the Python environment (build/venv)"
bash scripts/setup.sh --browser --python --fuzz  # chromium for the viewer's browser test; clang for fuzzing
bash scripts/python_env.sh
# CTranslate2 from PyPI for `qkv export --to ctranslate2`'s test (it skips, saying so, without them)
python3 -m pip install -q --disable-pip-version-check ctranslate2 sentencepiece ||
  echo "test: could not pip install ctranslate2 sentencepiece; the export test will skip" >&2

step "build (./build: library, CLI, tests, benchmarks, Python module; CUDA where nvcc is)"
# A first build (CI's clean clone) compiles each floor above the kernels as one unit (QKV_UNITY_BUILD:
# nlohmann-json's and the standard library's templates instantiated once a floor, not once a file):
# 145 CPU-s for those floors instead of 360, about 100 s less on 2 cores (docs/BENCHMARKS.md); and the
# test files eight of a folder a unit (tests/CMakeLists.txt): ~170 CPU-s instead of ~330. A build
# directory that exists keeps its setting, as the file-by-file build recompiles one edited file in
# seconds where the unity build recompiles its floor (20–30 s).
unity=()
[ -f build/CMakeCache.txt ] || unity=(-DQKV_UNITY_BUILD=ON)
bash scripts/build.sh -DQKV_PYTHON=ON -DPython_EXECUTABLE="$PWD/build/venv/bin/python" "${unity[@]}"

step "ctest"
# Two tests at once on 1 OpenMP thread each (tests/CMakeLists.txt's QKV_TEST_THREADS): jobs × threads
# ≤ cores, so no test's threads wait for a core another test holds.
jobs=$(( $(env -u OMP_NUM_THREADS nproc) < 2 ? 1 : 2 ))
OMP_NUM_THREADS=1 ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

step "the Python module: pip install into build/venv, pytest"
OMP_NUM_THREADS=1 bash scripts/test_python.sh
# the hostile suite's Python cases (issue 43): they need the module that test_python.sh just put in
# build/venv, which ctest ran before (there they skip, saying so)
OMP_NUM_THREADS=1 /usr/bin/python3 tests/hostile/hostile_test.py --qkv build/qkv --only python/

# libFuzzer smoke run: each fuzz target for QKV_FUZZ_SECONDS (default 30; 0 skips), docs/FUZZING.md.
# 30 s replays every seed and runs ~20k–1M mutated inputs a target; longer runs are fuzz.sh's own.
fuzz_seconds=${QKV_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" != "0" ]; then
  step "fuzz: build the targets (clang, ASan + UBSan), run each $fuzz_seconds s"
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
step "done"
