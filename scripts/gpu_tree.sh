#!/usr/bin/env bash
# The device tool sends the working tree (tracked files, and .gpu when carried) to a lent GPU machine,
# at most 64 MiB in all; the repository's model files and golden data (~35 MB) with .gpu's pack
# (~35 MB) exceed it. Around the device calls (docs/CUDA.md, "On a lent GPU"):
#   bash scripts/gpu_tree.sh slim      leave out what no GPU call reads (untracked in the index for now,
#                                      and excluded: the files stay where they are); `slim all`: the
#                                      GPU encoder test's goldens too
#   bash scripts/gpu_tree.sh restore   track them again (before any commit)
# The GPU calls read models/en-fr.safetensors (the shipped translator) and data/; not these.
set -euo pipefail
cd "$(dirname "$0")/.."
# tests/golden but the encoder cases HfEncodersOnAGpu reads (tests/models/hf_encoders_test.cpp, 3.1 MB;
# `slim all`: those too, should the tree and pack pass the device tool's 64 MiB)
kept='^tests/golden/hf/(bert-seqcls|distilbert-seqcls|roberta-seqcls|mpnet-seqcls|deberta-seqcls|deberta-v2-seqcls|modernbert-seqcls|albert-seqcls)$'
if [ "${1:-}" = restore ] || [ "${2:-}" = all ]; then kept='^$'; fi  # (restore: every path)
mapfile -t golden < <(git ls-tree -r --name-only HEAD tests/golden |
  awk -F/ '{ print ($3 == "hf" && NF > 4) ? $1 "/" $2 "/" $3 "/" $4 : $1 "/" $2 "/" $3 }' | sort -u | grep -Ev "$kept")
paths=(models/en-fr-gru.safetensors models/captioner.safetensors models/fashion-mnist-nonlocal.safetensors
       models/shakespeare-char.safetensors "${golden[@]}" docs/img)
exclude=.git/info/exclude
case "${1:-}" in
  slim)
    git rm -r -q --cached "${paths[@]}"
    for p in "${paths[@]}"; do grep -qxF "/$p" "$exclude" || echo "/$p" >>"$exclude"; done
    echo "gpu_tree: $(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1) bytes tracked; restore before committing" ;;
  restore)
    git reset -q HEAD -- "${paths[@]}"
    for p in "${paths[@]}"; do sed -i "\|^/$p\$|d" "$exclude"; done
    echo "gpu_tree: restored" ;;
  *) echo "usage: bash scripts/gpu_tree.sh slim | restore" >&2; exit 2 ;;
esac
