#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/qkv demo
echo
echo "== the shipped character-level GPT (models/shakespeare-char.safetensors) continues a prompt:"
./build/qkv generate --prompt "ROMEO:" --max-new-tokens 300 --seed 1337 --stats
