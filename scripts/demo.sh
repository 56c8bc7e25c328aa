#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default: the
# shipped English→French Transformer translates the notes' sentences and draws what it attends to,
# the Shakespeare GPT writes, and the shipped captioner describes a scene, word by word.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/qkv demo
echo
echo "== English → French with the shipped Transformer (models/en-fr.safetensors, trained on Tatoeba), beam 4:"
printf '%s\n' \
  "The cat didn't cross the street because it was too tired." \
  "The trophy didn't fit in the suitcase because it was too big." \
  "The quick brown fox jumps over the lazy dog." \
  "I would like a cup of coffee, please." | ./build/qkv translate --stats
echo
echo "== what it attends to (heat maps per layer and head in attention/*.svg and *.png):"
./build/qkv attend "The cat didn't cross the street because it was too tired." --out attention
echo
echo "== the shipped character-level GPT (models/shakespeare-char.safetensors) continues a prompt:"
./build/qkv generate --prompt "ROMEO:" --max-new-tokens 300 --seed 1337 --stats
echo
echo "== image captioning with attention (models/captioner.safetensors, Show, Attend and Tell on generated scenes):"
echo "   a test scene joins two kinds of item that never met in training; the caption, and per word the share"
echo "   of the attention inside the named item's box (attention/caption-test-*.png: the picture once per word):"
./build/qkv attend -m models/captioner.safetensors --scenes 8 --split test --out attention
./build/qkv caption --scenes 12,14,33 --split test
