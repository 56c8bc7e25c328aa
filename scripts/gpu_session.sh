#!/usr/bin/env bash
# A lent GPU's device minutes (15 a session: .library/device/README.md), planned as two calls, after
# `QKV_GPU_BUILD=build bash scripts/gpu_pack.sh; bash scripts/gpu_tree.sh slim` here (docs/CUDA.md, "On a lent GPU";
# `gpu_tree.sh restore` after). The order is what 2026-12-04's H200 left unmeasured first, each call's
# steps in the order of what they are worth (a step the call's timeout cuts keeps its log so far; the
# steps before it are in $OUT/logs.tar). On 2026-12-04 the tests took 51 s and a 5-kernel attention grid
# 183 s; the GPT benchmark's qkv runs (5, each ~15–25 s) had stopped at once on the loss plot's PNG.
#
#   run(command="bash scripts/gpu_session.sh 1", carry=[".gpu"], timeout_s=540)          (~8 minutes)
#       every CUDA test (a process each); GPT training tokens/s against PyTorch eager and torch.compile
#       (qkv with and without its step as one CUDA graph, QKV_CUDA_GRAPHS=1: never measured to the end on a
#       GPU); the attention grid (bf16, L = 2k and 16k, d = 64 and 128: qkv's default pair, the
#       two-warpgroup and warp-specialized backwards — at d = 64 in steps of 128 query rows since
#       2026-12-05, and of 64 as before (wgmma-backward-rows64) —, the warp-specialized forward persistent
#       and a block an item (wgmma-ws-blocks), PyTorch's SDPA backends); then every kernel of one attention
#       call at L = 2k and 16k and the GPT's shape (breakdown: Nsight Compute's durations, the pre-passes
#       included)
#   run(command="bash scripts/gpu_session.sh 2", carry=[".gpu"], timeout_s=300)          (what is left)
#       where a GPT step's and a beam step's time goes (steps: QKV_PROFILE=1), the paged decoding kernel tiled
#       against a key a warp, and for bf16 and e4m3 caches and the cascade against the tensor-core kernels
#       (QKV_CUDA_PAGED_KERNEL=mma) (paged_kernels, 2026-12-05), qkv serve --device cuda under
#       load, Nsight Compute's sections on each tensor-core attention kernel (profile), qkv train of the
#       translation Transformer in f32 and bf16 (and bf16 with QKV_CUDA_BIAS_EPILOGUE=0: each linear's bias
#       filled in before its GEMM, as before 2026-12-04's cuBLASLt epilogue), the output layer's loss against
#       PyTorch (loss), f32 attention (the 3xTF32 backward at d = 128 in steps of 32 query rows, and 64), the
#       overlapped forward at d = 64 (attention wgmma-overlap: no longer serialized by ptxas since V is read
#       MN-major, 2026-12-04), soft-capped attention against FlexAttention (softcap, 2026-12-07)
#   run(command="bash scripts/gpu_session.sh sanitize 'Cuda.Bf16*'", carry=[".gpu"])   a failing kernel
# One step alone: tests, gpt, translate, training (gpt and translate), breakdown, attention [KERNEL…],
# attention_f32, softcap, steps, profile, serve, transformer, paged (paged attention's step, split and cascade,
# GPT-2's continuous batching with decoding graphs and device sampling: measured 2026-12-04), loss, curve
# (the GPT's training loss over 1,000 steps, qkv's and PyTorch's overlaid, ~3–5 minutes).
#
# Each step has its own time limit, so a hang costs only its share of the call; every log and figure
# goes into $OUT/logs.tar as the step ends (the device tool brings back 8 files at most), the last lines
# of each step (GPU_SESSION_TAIL, 40) to the call's reply.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
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
  tail -n "${GPU_SESSION_TAIL:-40}" "$out/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0))s"
  keep
}
keep() {  # $OUT brings back 8 files at most: each step's logs and figures go into $OUT/logs.tar as it ends
  local f files=()
  for f in "$out"/*; do [ -f "$f" ] && [ "$f" != "$out/logs.tar" ] && files+=("$(basename "$f")"); done
  [ ${#files[@]} -eq 0 ] || { tar -C "$out" -rf "$out/logs.tar" "${files[@]}" && (cd "$out" && rm -f "${files[@]}"); }
}
ncu_path() {  # Nsight Compute's ncu: on the PATH, or wherever the image put it
  command -v ncu || find / -name ncu -type f -perm -u+x -not -path '/proc/*' -print -quit 2>/dev/null
}
tests() {
  step tests 240 bash .gpu/run.sh tests
  tar -C "$out" -xOf "$out/logs.tar" cuda_tests.log | grep -A3 -E "Failure|FAILED" | grep -v "^\[" | head -n 40
}
attention() {  # attention [KERNEL…]: qkv's kernels to time (default: wgmma, the default on Hopper);
  # ATTENTION_DIMS="256" with wgmma-ws wgmma-ws-backward times head dim 256 (the warp-specialized forward; with
  # wgmma-ws-backward its own wgmma backward, sm90a/attention_wgmma_backward256.cuh, otherwise the f32 kernels)
  local kernels=("$@")
  [ ${#kernels[@]} -gt 0 ] || kernels=(wgmma)
  step attention 300 python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" \
    --lens ${ATTENTION_LENS:-2048 16384} --dims ${ATTENTION_DIMS:-64 128} --reps 5 --kernels "${kernels[@]}" \
    --json-out "$out/attention.json"
}
attention_f32() {  # f32 attention: the CUDA-core pair, the 3xTF32 tensor-core pair (its backward at head dim 128
  # in steps of 32 query rows since 2026-12-05, and of 64 as before: tf32x3-rows64; at head dim 64 in steps of
  # 32, three blocks an SM: tf32x3-rows32), PyTorch's f32 SDPA
  step attention-f32 150 python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" \
    --lens ${ATTENTION_F32_LENS:-2048} --dims 64 128 --reps 5 --dtypes f32 \
    --f32-kernels simt tf32x3 tf32x3-rows32 tf32x3-rows64 \
    --json-out "$out/attention-f32.json"
}
softcap() {  # Gemma 2's soft-capped attention (cap 50), bf16, L = 2k, against PyTorch's FlexAttention compiled (its
  # SDPA has no cap): d = 128 (Gemma 2 27B) on the mma.sync pair since 2026-12-07 — the backward's Capped kernels —,
  # d = 256 (2B, 9B) on wgmma's warp-specialized forward and head-dim-256 backward, their Capped forms
  step attention-softcap 150 python3 bench/attention_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" \
    --lens 2048 --dims 128 256 --reps 5 --softcap 50 --json-out "$out/attention-softcap.json"
}
gpt() {
  step gpt 230 python3 bench/gpt_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" --iters 100
}
translate() {  # (the GPU with CUDA graphs too: QKV_CUDA_GRAPHS=1, static decoding's steps each one launch)
  step translate 100 python3 bench/translate_cuda_vs_cpu.py --qkv "bash .gpu/run.sh qkv" --sentences 500
}
training() { gpt; translate; }
steps() {  # QKV_PROFILE=1: each op's calls, host and GPU time, and the waits, in a GPT step (bf16, f32) and in beam search
  for dt in bf16 f32; do
    QKV_PROFILE=1 step "steps-gpt-$dt" 60 bash .gpu/run.sh qkv train configs/shakespeare-char-gpu.json --device cuda -q \
      -o "/tmp/steps-gpt-$dt" --set train.max_iters=40 --set train.eval_interval=0 --set train.checkpoint_interval=0 \
      --set "train.dtype=$dt"
  done
  # the bf16 step with the wgmma attention backwards (QKV_CUDA_ATTENTION_BACKWARD=wgmma, wgmma-ws), to compare
  # with steps-gpt-bf16 (mma.sync's at 256 keys): since 2026-12-05 in steps of 128 query rows at head dim 64 —
  # on 2026-12-04, in steps of 64, 560 and 645 µs a call against mma.sync's 542
  for bwd in wgmma wgmma-ws; do
    QKV_CUDA_ATTENTION_BACKWARD=$bwd QKV_PROFILE=1 step "steps-gpt-bf16-$bwd-backward" 60 bash .gpu/run.sh qkv train \
      configs/shakespeare-char-gpu.json --device cuda -q -o "/tmp/steps-gpt-bf16-$bwd-backward" \
      --set train.max_iters=40 --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.dtype=bf16
  done
  # the bf16 step's attention forward (head dim 64, 256 keys, dropout) on mma.sync instead of wgmma, to compare
  # with steps-gpt-bf16: at 256 keys a block's set-up may outweigh wgmma's products (the overlapped wgmma
  # forward was measured on 2026-12-04: 498 µs a call against the default's 263)
  QKV_CUDA_ATTENTION=mma1 QKV_PROFILE=1 step "steps-gpt-bf16-mma-forward" 60 bash .gpu/run.sh qkv train \
    configs/shakespeare-char-gpu.json --device cuda -q -o "/tmp/steps-gpt-bf16-mma-forward" \
    --set train.max_iters=40 --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.dtype=bf16
  # and on the persistent warp-specialized forward (2026-12-04's fifth session: a block an SM walking the
  # step's 768 items of 128 rows, the next item's copies under the last one's writes)
  QKV_CUDA_ATTENTION=wgmma-ws QKV_PROFILE=1 step "steps-gpt-bf16-ws-forward" 60 bash .gpu/run.sh qkv train \
    configs/shakespeare-char-gpu.json --device cuda -q -o "/tmp/steps-gpt-bf16-ws-forward" \
    --set train.max_iters=40 --set train.eval_interval=0 --set train.checkpoint_interval=0 --set train.dtype=bf16
  python3 -c "import gzip; s = [l.split('\t')[0] for l in gzip.open('data/tatoeba-en-fr/fra.txt.gz', 'rt') if l.strip()]; \
print('\n'.join(s[::len(s) // 500][:500]))" > /tmp/steps-src.txt
  QKV_CUDA_GRAPHS=0 QKV_PROFILE=1 step steps-translate 60 bash .gpu/run.sh qkv translate -m models/en-fr.safetensors -i /tmp/steps-src.txt \
    -o /tmp/steps-translate.out --beam 4 --batch-size 32 --device cuda --stats
  # the same with CUDA graphs, a GPU's default since 2026-12-05 (a bucket's first step profiled op by op, the
  # replays as one launch)
  QKV_PROFILE=1 step steps-translate-graphs 60 bash .gpu/run.sh qkv translate -m models/en-fr.safetensors \
    -i /tmp/steps-src.txt -o /tmp/steps-translate-graphs.out --beam 4 --batch-size 32 --device cuda --stats
}
profile() {  # Nsight Compute on the tensor-core attention kernels, one launch each (where the time goes)
  local ncu
  ncu=$(ncu_path)
  [ -n "$ncu" ] || { echo "gpu_session: no ncu on this machine"; return; }
  local sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats
                  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis)
  # bf16 (the wgmma / mma.sync pair) and f32 on the tensor cores (the 3xTF32 pair, d = 64: the GPT's)
  # and the wgmma backwards (QKV_CUDA_ATTENTION_BACKWARD=wgmma, wgmma-ws)
  local -A name=([forward]="regex:flash_(wgmma_overlap|mma_forward)" [ws-forward]="regex:flash_wgmma_ws_kernel"
                 [backward]="regex:flash_mma_backward"
                 [wgmma-backward]="regex:flash_wgmma_backward" [ws-backward]="regex:flash_wgmma_ws_backward"
                 [tf32-forward]="regex:flash_tf32_forward" [tf32-backward]="regex:flash_tf32_backward")
  local -A args=([forward]="-d 128 --dtype bf16" [ws-forward]="-d 128 --dtype bf16" [backward]="-d 128 --dtype bf16" [wgmma-backward]="-d 128 --dtype bf16"
                 [ws-backward]="-d 128 --dtype bf16" [tf32-forward]="-d 64 --dtype f32" [tf32-backward]="-d 64 --dtype f32")
  for k in forward ws-forward backward wgmma-backward ws-backward tf32-forward tf32-backward; do
    local backward=mma forward=wgmma
    [ "$k" = wgmma-backward ] && backward=wgmma
    [ "$k" = ws-backward ] && backward=wgmma-ws
    [ "$k" = ws-forward ] && forward=wgmma-ws
    # shellcheck disable=SC2086  # args: several words
    QKV_CUDA_ATTENTION=$forward QKV_CUDA_ATTENTION_BACKWARD=$backward QKV_CUDA_ATTENTION_F32=tf32x3 step "profile-$k" 60 "$ncu" --kernel-name "${name[$k]}" --launch-count 1 \
      "${sections[@]}" bash .gpu/run.sh qkv bench attention --device cuda -B 4 --heads 16 -L 4096 ${args[$k]} --repeats 1
  done
}
breakdown() {  # every kernel of one attention call (bf16, d = 128, the grid's B·L = 16k) at L = 2k and 16k, by
  # Nsight Compute's gpu__time_duration: the pre-passes, the kernels, D_i, dq's zeroing, the autograd's sums —
  # where the forward's fixed cost at L = 2k goes (2026-12-04: 0.49× flash there against 0.79× at 16k) — and
  # at the GPT recipe's shape (B 64, 6 heads, L 256, d 64, causal: 263 / 542 µs a call forward / backward
  # in its step's profile, ~12 / ~15 TFLOP/s), without and with the step's dropout (0.2)
  local ncu shape
  ncu=$(ncu_path)
  [ -n "$ncu" ] || { echo "gpu_session: no ncu on this machine"; return; }
  for shape in "2048:-B 8 --heads 16 -L 2048 -d 128" "16384:-B 1 --heads 16 -L 16384 -d 128" \
               "gpt:-B 64 --heads 6 -L 256 -d 64 --causal" "gpt-dropout:-B 64 --heads 6 -L 256 -d 64 --causal --dropout 0.2"; do
    step "breakdown-${shape%%:*}" 120 bash -c "\"$ncu\" --csv --clock-control none --metrics gpu__time_duration.sum \
      bash .gpu/run.sh qkv bench attention --device cuda ${shape#*:} --dtype bf16 --repeats 1 | python3 scripts/ncu_kernels.py"
  done
  # the GPT shape's backward on the two-warpgroup wgmma kernel (steps of 128 query rows since 2026-12-05)
  # against mma.sync's, its default at 256 keys
  QKV_CUDA_ATTENTION_BACKWARD=wgmma step "breakdown-gpt-dropout-wgmma-backward" 120 bash -c "\"$ncu\" --csv \
    --clock-control none --metrics gpu__time_duration.sum bash .gpu/run.sh qkv bench attention --device cuda -B 64 \
    --heads 6 -L 256 -d 64 --causal --dropout 0.2 --dtype bf16 --repeats 1 | python3 scripts/ncu_kernels.py"
}
serve() {  # qkv serve --device cuda under load (500 requests, 32 clients) against the CLI on the GPU and on the 16 CPU cores
  step serve-cuda 90 python3 bench/serve_load.py --qkv "bash .gpu/run.sh qkv" --device cuda --requests 500 --clients 32 \
    --repeats 1 --threads 4 --json "$out/serve-cuda.json"
  step serve-cpu 90 python3 bench/serve_load.py --qkv "bash .gpu/run.sh qkv" --device cpu --requests 500 --clients 32 \
    --repeats 1 --threads 16 --json "$out/serve-cpu.json"
}
paged() {  # one decoding step's paged attention (the split over the keys on and off) against a dense cache's, GPU and CPU
  local runs=("1 4096" "1 32768" "4 8192" "16 4096" "64 2048" "256 1024")
  for r in "${runs[@]}"; do
    read -r B L <<<"$r"
    for split in 1 0; do
      QKV_CUDA_PAGED_SPLIT=$split step "paged-$B-$L-split$split" 30 bash .gpu/run.sh qkv bench paged-attention \
        --device cuda -B "$B" -L "$L" --json
    done
  done
  # continuous batching of GPT-2 small's shape, decoding graphs off and on (decode/paged_graphs.h)
  for n in 1 8 64; do
    step "batched-gpt2-$n" 60 bash .gpu/run.sh qkv bench gpt batched --model gpt2 --device cuda --requests "$n" \
      --new-tokens 128 --repeats 2 --json
  done
  # sampled (temperature 1; then top-k 50 with top-p 0.95): each token drawn on the GPU (ops' sample_rows)
  # or every logit to the host's Samplers
  for ds in 1 0; do
    QKV_DEVICE_SAMPLING=$ds step "batched-gpt2-64-sampled-device$ds" 60 bash .gpu/run.sh qkv bench gpt batched \
      --model gpt2 --device cuda --requests 64 --new-tokens 128 --temperature 1 --repeats 2 --json
    QKV_DEVICE_SAMPLING=$ds step "batched-gpt2-64-topp-device$ds" 60 bash .gpu/run.sh qkv bench gpt batched \
      --model gpt2 --device cuda --requests 64 --new-tokens 128 --temperature 1 --top-k 50 --top-p 0.95 --repeats 2 --json
  done
  # the samples of one prompt (cascade: the shared pages read once a block of rows), on and off
  local shared=("16 4096 3584" "64 2048 1792" "8 16384 16000")
  for r in "${shared[@]}"; do
    read -r B L N <<<"$r"
    for cascade in 1 0; do
      QKV_PAGED_CASCADE=$cascade step "paged-$B-$L-shared$N-cascade$cascade" 30 bash .gpu/run.sh qkv bench paged-attention \
        --device cuda -B "$B" -L "$L" --shared-prefix "$N" --json
    done
  done
  step paged-cpu 60 bash .gpu/run.sh qkv bench paged-attention --device cpu -B 16 -L 4096 --threads 16 --json
}
paged_kernels() {  # one decoding step's paged attention: the tiled kernel (2026-12-05: tiles of 32 keys, cp.async,
  # 1–3 in flight) — and for bf16 caches the tensor-core kernel — against the key-a-warp kernel it replaced (QKV_CUDA_PAGED_KERNEL=warps: ~120–830 GB/s of the
  # H200's 4.8 TB/s on 2026-12-04), f32 caches and bf16 (32 heads over 8, d 128); the bench's dense column too
  # (an f32 step over a dense cache: the same kernel since 2026-12-05, and with warps the split-KV pair)
  local runs=("1 4096" "1 32768" "16 4096" "64 2048" "256 1024")
  for r in "${runs[@]}"; do
    read -r B L <<<"$r"
    for kernel in tiled warps; do
      QKV_CUDA_PAGED_KERNEL=$kernel step "paged-$B-$L-$kernel" 30 bash .gpu/run.sh qkv bench paged-attention \
        --device cuda -B "$B" -L "$L" --json
    done
  done
  # bf16 caches (and e4m3 at 16 × 4k): also the tensor-core kernel (QKV_CUDA_PAGED_KERNEL=mma, 2026-12-05), at 16 × 4k and one
  # sequence of 32k (split), G = 4 and (--heads 64) G = 8
  for r in "16 4096 32 bf16" "1 32768 32 bf16" "16 4096 64 bf16" "16 4096 32 fp8"; do
    read -r B L Hq dt <<<"$r"
    for kernel in tiled mma warps; do
      QKV_CUDA_PAGED_KERNEL=$kernel step "paged-$B-$L-h$Hq-$dt-$kernel" 30 bash .gpu/run.sh qkv bench \
        paged-attention --device cuda -B "$B" -L "$L" --heads "$Hq" --kv-dtype "$dt" --json
    done
  done
  # the cascade over a shared prompt (1.22× at 8 × 16k sharing 16,000 on 2026-12-04, f32): bf16, the CUDA
  # cores' kernels and the tensor cores' (paged_cascade_mma_kernel)
  for kernel in tiled mma; do
    QKV_CUDA_PAGED_KERNEL=$kernel step "paged-cascade-8-16384-bf16-$kernel" 30 bash .gpu/run.sh qkv bench \
      paged-attention --device cuda -B 8 -L 16384 --shared-prefix 16000 --kv-dtype bf16 --json
  done
}
curve() {  # the GPT's training loss over 1,000 steps, qkv's and PyTorch's overlaid (f32 and bf16 SVGs in $OUT)
  step gpt-curve 420 python3 bench/gpt_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" --iters 100 --loss-iters 1000 \
    --defaults-only --plot "$out/gpt-loss"
}
loss() {  # the output layer and its cross-entropy, forward and backward: the logits whole, linear_cross_entropy's
  # chunks (the op's choice, 2,048 and 8,192 rows), PyTorch eager and torch.compile; bf16 (GPT-2's, Llama 3's and the
  # character GPT's heads)
  step loss 150 python3 bench/linear_cross_entropy_cuda_vs_pytorch.py --qkv "bash .gpu/run.sh qkv" --dtypes bf16 \
    --json-out "$out/loss.json"
}
transformer() {  # qkv train of the translation Transformer on the GPU: tokens/s in f32 and bf16
  for dt in f32 bf16; do
    step "transformer-$dt" 75 bash .gpu/run.sh qkv train configs/tatoeba-en-fr.json --device cuda -q \
      -o "/tmp/transformer-$dt" --set train.max_iters=300 --set train.eval_interval=0 --set "train.dtype=$dt"
  done
  # bf16 with each linear's bias filled into its output before the GEMM (QKV_CUDA_BIAS_EPILOGUE=0), as before
  # 2026-12-04's cuBLASLt epilogue (the Transformer's linears have biases; the GPT benchmark's have none)
  QKV_CUDA_BIAS_EPILOGUE=0 step "transformer-bf16-bias-rows" 75 bash .gpu/run.sh qkv train configs/tatoeba-en-fr.json \
    --device cuda -q -o "/tmp/transformer-bf16-bias-rows" --set train.max_iters=300 --set train.eval_interval=0 \
    --set train.dtype=bf16
}
case "${1:-}" in
  1) tests; gpt; attention wgmma wgmma-backward wgmma-ws-backward wgmma-backward-rows64 wgmma-ws-blocks; breakdown ;;
  2) steps; paged_kernels; serve; profile; transformer; loss; attention_f32; attention wgmma-overlap; softcap ;;
  tests | gpt | translate | attention | attention_f32 | softcap | training | steps | breakdown | profile | serve | transformer | paged | paged_kernels | loss | curve) "$@" ;;
  sanitize) step sanitize 400 bash .gpu/run.sh sanitize "${2:-Cuda.Bf16*}" ;;
  *)
    echo "usage: bash scripts/gpu_session.sh 1 | 2 | tests | gpt | translate | attention [KERNEL…] | attention_f32 | softcap | training | steps | breakdown | profile | serve | transformer | paged | paged_kernels | loss | curve | sanitize [GTEST_FILTER]" >&2
    exit 2 ;;
esac
