#!/usr/bin/env bash
# Prepares a lent GPU machine's run (docs/CUDA.md): builds the CUDA tests and benchmark here
# (scripts/build_cuda.sh) and packs them, with the shared libraries they need that such a machine
# lacks (oneDNN, OpenMP's runtime, GoogleTest's), into ./.gpu — a folder git ignores, for the device
# tool to carry. There, one call runs them:
#
#   bash .gpu/run.sh            (carry: [".gpu"])
#
# which prints the GPU, runs every CUDA test, and writes its log to $OUT when that is set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build_cuda.sh "$@"
ninja -C build-cuda qkv_cuda_tests >/dev/null
rm -rf .gpu
mkdir -p .gpu/lib
cp build-cuda/tests/qkv_cuda_tests .gpu/
# The libraries a CUDA image does not have: everything but glibc's, the C++ runtime and CUDA's own.
ldd .gpu/qkv_cuda_tests | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libcublas*|libcudart*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# On the lent GPU machine: the CUDA tests of qkv (packed by scripts/gpu_pack.sh).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cublas=$(dirname "$(find / -name 'libcublas.so.13*' -print -quit 2>/dev/null)")
export LD_LIBRARY_PATH="$here/lib:$cublas:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
log=${OUT:-/tmp}/cuda_tests.log
"$here/qkv_cuda_tests" --gtest_color=no 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
RUN
chmod +x .gpu/run.sh
du -sh .gpu
ls .gpu/lib
