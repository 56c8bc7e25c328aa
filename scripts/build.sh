#!/usr/bin/env bash
# Configures and builds qkv (Release) into ./build. Extra arguments go to cmake (they win over the
# defaults here: -DQKV_CUDA=OFF builds without the CUDA backend on a machine that has a toolkit).
#
# The CUDA backend (docs/CUDA.md) is built where the CUDA toolkit is (nvcc on PATH or in
# /usr/local/cuda; no GPU needed): the .cu kernels are the only extra compiles, as every other
# source is compiled once for both. Without a toolkit, a CPU-only build.
set -euo pipefail
cd "$(dirname "$0")/.."
# the cores, not OMP_NUM_THREADS (which GNU nproc honours: under the tests' OMP_NUM_THREADS=1 a
# build ran on one core)
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
cuda=(-DQKV_CUDA=OFF)
[ -n "$nvcc" ] && cuda=(-DQKV_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
# MPI (data-parallel training) is on: scripts/setup.sh installs Open MPI. -DQKV_MPI=OFF builds without.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_MPI=ON "${cuda[@]}" "$@" >/dev/null
echo "build: $(grep -q 'QKV_CUDA:BOOL=ON' build/CMakeCache.txt && echo "with the CUDA backend ($nvcc)" || echo "CPU only"), $jobs jobs"
ninja -C build -j"$jobs"
