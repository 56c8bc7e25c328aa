#!/bin/bash
# A refactor's "must stay true" (issue 45): short training runs of the GPT, the Transformer, the
# GRU with attention and the captioner on 1 thread, and 500 translations, by two qkv binaries; prints
# an md5 of each run's per-step figures (loss, val loss, grad norm, val BLEU) and of the
# translations, side by side. Then the speed of both, alternating: attention f32/bf16 and the GPT's
# training step, 3 passes, medians.
#
#   cp build/qkv /tmp/qkv-before   # (before the change)
#   bash bench/same_numbers.sh /tmp/qkv-before build/qkv [OUT=/tmp/same-numbers]
set -euo pipefail
A=$(realpath "$1"); B=$(realpath "$2"); OUT=${3:-/tmp/same-numbers}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
zcat ../shared/data/tatoeba-en-fr/fra.txt.gz | awk -F'\t' 'NR % 300 == 0 && n++ < 500 { print $1 }' > "$OUT/src.txt"
figures() {  # BINARY DIR: the runs, then one line per run
  local bin=$1 d=$2
  mkdir -p "$d"
  "$bin" train configs/shakespeare-char.json -o "$d/gpt" --set train.max_iters=20 --set train.log_interval=1 --threads 1 -q > "$d/gpt.log" 2>&1
  "$bin" train configs/tatoeba-en-fr.json -o "$d/tf" --set train.max_iters=10 --set train.log_interval=1 --threads 1 -q > "$d/tf.log" 2>&1
  "$bin" train configs/tatoeba-en-fr-gru.json -o "$d/gru" --set train.max_iters=10 --set train.log_interval=1 --threads 1 -q > "$d/gru.log" 2>&1
  "$bin" train configs/captions.json -o "$d/cap" --set train.max_iters=10 --set train.log_interval=1 --threads 1 -q > "$d/cap.log" 2>&1
  "$bin" translate -m models/en-fr.safetensors --threads 1 < "$OUT/src.txt" > "$d/translations.txt" 2> "$d/translate.log"
  for r in gpt tf gru cap; do
    grep -o '"\(train_\|val_\)\?loss":[^,}]*\|"grad_norm":[^,}]*\|"val_bleu":[^,}]*' "$d/$r/metrics.jsonl" > "$d/$r.figures"
    printf "%-12s %3s values  md5 %s\n" "$r" "$(wc -l < "$d/$r.figures")" "$(md5sum < "$d/$r.figures" | cut -c1-12)"
  done
  printf "%-12s %3s lines   md5 %s\n" translations "$(wc -l < "$d/translations.txt")" "$(md5sum < "$d/translations.txt" | cut -c1-12)"
}
echo "== $A"; figures "$A" "$OUT/a"
echo "== $B"; figures "$B" "$OUT/b"
echo "== speed, 2 threads, alternating (3 passes; medians)"
export OMP_NUM_THREADS=2
for pass in 1 2 3; do
  for tag in a b; do
    bin=$A; [ $tag = b ] && bin=$B
    echo "$tag attn_f32 $("$bin" bench attention -B 4 -L 512 --causal --threads 2 --json 2>/dev/null)"
    echo "$tag attn_bf16 $("$bin" bench attention -B 4 -L 512 --causal --dtype bf16 --threads 2 --json 2>/dev/null)"
    echo "$tag gpt $("$bin" bench gpt train --iters 20 --warmup 3 --threads 2 --json 2>/dev/null)"
  done
done > "$OUT/speed.txt"
python3 - "$OUT/speed.txt" <<'PY'
import collections, json, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tag, kind, js = line.split(" ", 2)
    j = json.loads(js)
    if kind == "gpt":
        d[(kind, "tokens/s")].append((tag, j["tokens_per_s_median"]))
    else:
        d[(kind, "forward ms")].append((tag, j["forward_ms"]))
        d[(kind, "forward+backward ms")].append((tag, j["forward_backward_ms"]))
for (kind, what), v in sorted(d.items()):
    a = statistics.median(x for t, x in v if t == "a"); b = statistics.median(x for t, x in v if t == "b")
    print(f"{kind:10} {what:20} a {a:10.2f}  b {b:10.2f}  b/a {b / a:.3f}")
PY
