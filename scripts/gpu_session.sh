#!/usr/bin/env bash
# A lent GPU's device minutes (15 a session: .library/device/README.md), planned as two calls, after
# `bash scripts/gpu_pack.sh` here (docs/CUDA.md, "On a lent GPU"):
#
#   run(command="bash scripts/gpu_session.sh 1", carry=[".gpu"], timeout_s=420)
#       every CUDA test, then the attention grid (bf16: qkv's mma and WMMA pairs, PyTorch's SDPA backends)
#   run(command="bash scripts/gpu_session.sh 2", carry=[".gpu"], timeout_s=420)
#       GPT training tokens/s against PyTorch eager and compiled, then translation throughput GPU vs CPU
#   run(command="bash scripts/gpu_session.sh sanitize 'Cuda.Bf16*'", carry=[".gpu"])   a failing kernel
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
case "${1:-}" in
  1)
    step tests 170 bash .gpu/run.sh tests
    grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran" "$out/tests.log" | tail -n 30
    step attention 220 python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" \
      --lens 1024 4096 16384 --dims 64 128 --reps 5 --json-out "$out/attention.json" ;;
  2)
    step gpt 260 python3 bench/gpt_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" --iters 150
    step translate 120 python3 bench/translate_cuda_vs_cpu.py --qkv "bash .gpu/run.sh qkv" --sentences 1000 ;;
  sanitize)
    step sanitize 400 bash .gpu/run.sh sanitize "${2:-Cuda.Bf16*}" ;;
  *)
    echo "usage: bash scripts/gpu_session.sh 1 | 2 | sanitize [GTEST_FILTER]" >&2
    exit 2 ;;
esac
