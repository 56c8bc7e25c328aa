#!/usr/bin/env bash
# Builds qkv with its CUDA backend (-DQKV_CUDA=ON, kernels for sm_90) into a tree of its own,
# ./build-cuda: the library, the CLI and the tests, without the benchmarks — the tree that
# scripts/gpu_pack.sh carries to a lent GPU machine (docs/CUDA.md). scripts/build.sh already builds the
# backend into ./build wherever the toolkit is, and the test command uses that tree; this one is for
# other architectures or flags (e.g. -DCMAKE_CUDA_ARCHITECTURES=90a; extra arguments go to cmake).
# It needs the CUDA toolkit (nvcc, cuBLAS; /usr/local/cuda or nvcc on PATH), not a GPU. With no
# toolkit at all it says so and exits 0.
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
ninja -C build-cuda -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" qkv_cli qkv_tests
