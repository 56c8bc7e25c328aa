#!/usr/bin/env bash
# Builds qkv with its CUDA backend (-DQKV_CUDA=ON, kernels for sm_90) into ./build-cuda: the library,
# the CLI and the tests. It needs the CUDA toolkit (nvcc, cuBLAS; /usr/local/cuda or nvcc on PATH),
# not a GPU: on a machine without one the build still runs every CPU test, and the CUDA tests skip
# (docs/CUDA.md). With no toolkit at all it says so and exits 0, so CI machines without it pass.
# Extra arguments go to cmake (e.g. -DCMAKE_CUDA_ARCHITECTURES=90a).
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  echo "build_cuda: no CUDA toolkit (nvcc) on this machine; the CUDA backend is not built" >&2
  exit 0
fi
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DQKV_BUILD_BENCH=OFF -DQKV_MPI=ON "$@" >/dev/null
ninja -C build-cuda -j"$(nproc)" qkv_cli qkv_tests
