#!/usr/bin/env bash
# A lent GPU's device minutes (15 a session: .library/device/README.md), planned as two calls, after
# `bash scripts/gpu_pack.sh` here (docs/CUDA.md, "On a lent GPU"):
#
#   run(command="bash scripts/gpu_session.sh 1", carry=[".gpu"], timeout_s=380)
#       every CUDA test, then the attention grid (bf16: qkv's mma and WMMA pairs, PyTorch's SDPA backends)
#   run(command="bash scripts/gpu_session.sh 2", carry=[".gpu"], timeout_s=290)
#       GPT training tokens/s against PyTorch eager and compiled, then translation throughput GPU vs CPU
#   run(command="bash scripts/gpu_session.sh sanitize 'Cuda.Bf16*'", carry=[".gpu"])   a failing kernel
#   (tests, attention, training: one step alone)
#
# Each step has its own time limit, so a hang costs only its share of the call; every log and the JSON
# figures go to $OUT (what comes back), the last lines of each step to the call's reply.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export PYTHONUNBUFFERED=1
[ -f .gpu/run.sh ] || { echo "gpu_session: no .gpu/run.sh (bash scripts/gpu_pack.sh here, then carry .gpu)" >&2; exit 2; }
step() {  # step NAME LIMIT_S COMMAND…: the command's output to $OUT/NAME.log, its last lines here
  local name=$1 limit=$2
  shift 2
  echo "== $name: $* (at most ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0))s"
}
tests() {
  step tests 150 bash .gpu/run.sh tests
  grep -A3 -E "Failure|FAILED" "$out/cuda_tests.log" | grep -v "^\[" | head -n 40
}
attention() {
  step attention 200 python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" \
    --lens 1024 4096 16384 --dims 64 128 --reps 5 --json-out "$out/attention.json"
}
training() {
  step gpt 190 python3 bench/gpt_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" --iters 100
  step translate 80 python3 bench/translate_cuda_vs_cpu.py --qkv "bash .gpu/run.sh qkv" --sentences 500
}
case "${1:-}" in
  1) tests; attention ;;
  2) training ;;
  tests | attention | training) "$1" ;;
  sanitize) step sanitize 400 bash .gpu/run.sh sanitize "${2:-Cuda.Bf16*}" ;;
  *)
    echo "usage: bash scripts/gpu_session.sh 1 | 2 | tests | attention | training | sanitize [GTEST_FILTER]" >&2
    exit 2 ;;
esac
