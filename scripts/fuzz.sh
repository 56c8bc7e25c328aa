#!/usr/bin/env bash
# Builds qkv's libFuzzer targets with clang (ASan + UBSan, build-fuzz/) and runs each on its seed
# corpus for SECONDS (default 60), with the JSON dictionary. New inputs go to build-fuzz/corpus/
# (the committed seeds in fuzz/corpus/ stay as they are); a crash leaves its input in build-fuzz/
# and fails the script. Usage: bash scripts/fuzz.sh [SECONDS] [TARGET…]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors model_file config train_config text idx image tokenizer sentencepiece http chat_template)
bash scripts/setup.sh --fuzz
# OSS-Fuzz's optimization for fuzzing builds, -O1 with line tables only (a crash's stack still names
# file and line): the library compiles ~20% faster than at -O2 -g, which CI pays for every run
# (clang does not vectorize at -O1, so the kernels' `omp simd` loops would each warn that it did not).
# The floors that compute rather than parse are at -O0 there (CMakeLists.txt, QKV_FUZZ; docs/FUZZING.md).
# QKV_UNITY_BUILD: each floor above the kernels one translation unit, which instantiates nlohmann-json
# and the standard library once, not once a file: 247 CPU-s instead of 474 (Zen 5, docs/FUZZING.md).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG -Wno-pass-failed" \
  -DQKV_FUZZ=ON -DQKV_UNITY_BUILD=ON -DQKV_BUILD_TESTS=OFF -DQKV_BUILD_BENCH=OFF >/dev/null
ninja -C build-fuzz $(printf '%s_fuzz ' "${targets[@]}")
# LeakSanitizer: leaks in libraries qkv does not own (fontconfig, glib) are not findings.
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export OMP_NUM_THREADS=1
# The targets hand each input to the readers as a file: keep those files in memory (/dev/shm) where
# there is one; on a disk the writes made the safetensors target 7× slower.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  TMPDIR=$(mktemp -d /dev/shm/qkv-fuzz.XXXXXX)
  export TMPDIR
  trap 'rm -rf "$TMPDIR"' EXIT
fi
# One target a core at a time (each runs on one thread): 8 targets × 60 s take 4 minutes on 2 cores,
# not 8, each target's time and effort the same.
jobs=$(( $(env -u OMP_NUM_THREADS nproc) < 2 ? 1 : 2 ))  # (nproc answers OMP_NUM_THREADS, set above)
run_target() {  # its exit status into build-fuzz/<target>.status
  local t=$1 rc=0
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  local dict=fuzz/json.dict  # (a target with a dictionary of its own: fuzz/<target>.dict)
  [ -f "fuzz/$t.dict" ] && dict="fuzz/$t.dict"
  "build-fuzz/fuzz/${t}_fuzz" "build-fuzz/corpus/$t" "fuzz/corpus/$t" -dict="$dict" \
    -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=1048576 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$t/" 2>"build-fuzz/$t.log" || rc=$?
  echo "$rc" >"build-fuzz/$t.status"
}
for t in "${targets[@]}"; do
  rm -f "build-fuzz/$t.status"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "== $t: ${seconds}s"
  run_target "$t" &
done
wait
status=0
for t in "${targets[@]}"; do  # each target's end, in order
  if [ "$(cat "build-fuzz/$t.status" 2>/dev/null || echo missing)" != 0 ]; then
    echo "!! $t found a crash: build-fuzz/crashes/$t/ (log: build-fuzz/$t.log)"; status=1
  fi
  echo "   $t:"
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/$t.log" | sed "s/^/   /"
done
exit $status
