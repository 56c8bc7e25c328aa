#!/usr/bin/env bash
# Configures and builds qkv (Release) into ./build. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C build -j"$(nproc)"
