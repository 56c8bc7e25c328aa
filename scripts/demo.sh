#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/qkv demo
