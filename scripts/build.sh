#!/usr/bin/env bash
# Configures and builds qkv (Release) into ./build. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
# MPI (data-parallel training) is on: scripts/setup.sh installs Open MPI. -DQKV_MPI=OFF builds without.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_MPI=ON "$@" >/dev/null
ninja -C build -j"$(nproc)"
