#!/usr/bin/env bash
# Sequence-level knowledge distillation for the English→French model (Kim & Rush, 2016): three
# teacher Transformers translate every distinct English sentence of the training split as an
# ensemble (beam 4), and a student of the shipped size trains on the original pairs plus these
# translations. Usage, from the checkout, after scripts/build.sh:
#
#   scripts/distill-en-fr.sh            # teachers (≈ 4 h), teacher translations (≈ 35 min), student (≈ 70 min)
#
# Runs already in out/ are kept: a teacher or student whose model.safetensors exists is not trained
# again. The student's model is out/tatoeba-en-fr-student/model.safetensors.
set -euo pipefail
cd "$(dirname "$0")/.."
qkv=build/qkv
out=out
train_once() {  # train_once DIR ARGS…: qkv train unless DIR/model.safetensors exists
  local dir=$1; shift
  [ -f "$dir/model.safetensors" ] || "$qkv" train "$@" --out "$dir"
}
train_once $out/tatoeba-en-fr configs/tatoeba-en-fr.json
train_once $out/tatoeba-en-fr-v3 configs/tatoeba-en-fr.json \
  --set train.max_iters=16000 --set train.lr_decay_iters=16000 \
  --set train.eval_interval=2500 --set train.checkpoint_interval=2500
train_once $out/tatoeba-en-fr-4x4 configs/tatoeba-en-fr.json \
  --set model.num_encoder_layers=4 --set model.num_decoder_layers=4

# The training split's pairs: the bundled pairs whose English is in neither dev nor test.
mkdir -p $out/distill
python3 - "$out" <<'PY'
import gzip, sys
out = sys.argv[1]
held = set()
for part in ("dev", "test"):
    with open(f"{out}/tatoeba-en-fr/{part}.src", encoding="utf-8") as f:
        held.update(line.rstrip("\n") for line in f)
pairs = []
with gzip.open("data/tatoeba-en-fr/fra.txt.gz", "rt", encoding="utf-8") as f:
    for line in f:
        cols = line.rstrip("\n").split("\t")
        if cols[0] not in held:
            pairs.append((cols[0], cols[1]))
distinct = list(dict.fromkeys(s for s, _ in pairs))
with open(f"{out}/distill/train.src", "w", encoding="utf-8") as f:
    f.writelines(s + "\n" for s, _ in pairs)
with open(f"{out}/distill/train.ref", "w", encoding="utf-8") as f:
    f.writelines(t + "\n" for _, t in pairs)
with open(f"{out}/distill/distinct.src", "w", encoding="utf-8") as f:
    f.writelines(s + "\n" for s in distinct)
print(f"distill: {len(pairs)} training pairs, {len(distinct)} distinct sources")
PY

teachers=(-m $out/tatoeba-en-fr/model.safetensors -m $out/tatoeba-en-fr-4x4/model.safetensors
          -m $out/tatoeba-en-fr-v3/model.safetensors)
[ -f $out/distill/distinct.hyp ] ||
  "$qkv" translate "${teachers[@]}" -b 4 --batch-size 64 -i $out/distill/distinct.src -o $out/distill/distinct.hyp --stats
cat $out/distill/train.src $out/distill/distinct.src > $out/distill/student.src
cat $out/distill/train.ref $out/distill/distinct.hyp > $out/distill/student.tgt
train_once $out/tatoeba-en-fr-student configs/tatoeba-en-fr-student.json
"$qkv" eval -m $out/tatoeba-en-fr-student/model.safetensors -b 4 \
  --src $out/tatoeba-en-fr/test.src --ref $out/tatoeba-en-fr/test.ref
