#!/usr/bin/env bash
# Prepares a lent GPU machine's run (docs/CUDA.md): builds the CUDA build here (scripts/build_cuda.sh)
# and packs its test binaries and the qkv command, with the shared libraries they need that such a
# machine lacks (oneDNN, SentencePiece, librsvg, Open MPI, …; it has none of Debian's), into
# ./.gpu/qkv-cuda.tar.xz — a folder git ignores, for the device tool to carry. There:
#
#   bash .gpu/run.sh tests                 (carry: [".gpu"]) every CUDA test; the log to $OUT
#   bash .gpu/run.sh qkv train configs/shakespeare-char.json --device cuda
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build_cuda.sh "$@"
ninja -C build-cuda qkv_cuda_tests qkv_tests qkv_cli >/dev/null
rm -rf .gpu
mkdir -p .gpu/stage/lib
cp build-cuda/tests/qkv_cuda_tests build-cuda/tests/qkv_tests build-cuda/qkv .gpu/stage/
# The libraries a CUDA image does not have: everything but glibc's, the C++ runtime and CUDA's own
# (its libstdc++ is at least as new as Debian 12's).
for bin in .gpu/stage/qkv_cuda_tests .gpu/stage/qkv_tests .gpu/stage/qkv; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libcublas*|libcudart*) ;;
    *) cp -L "$lib" .gpu/stage/lib/ ;;
  esac
done
tar -C .gpu/stage -cJf .gpu/qkv-cuda.tar.xz .
rm -rf .gpu/stage
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# On the lent GPU machine (packed by scripts/gpu_pack.sh): unpack, then
#   bash .gpu/run.sh tests      every CUDA test (qkv_cuda_tests), then the GPU training tests (GPT, Transformer)
#   bash .gpu/run.sh qkv ARGS   the qkv command, e.g. qkv train configs/shakespeare-char.json --device cuda
#   bash .gpu/run.sh sanitize [FILTER]   compute-sanitizer memcheck + racecheck on the CUDA tests FILTER names
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=/tmp/qkv-cuda
if [ ! -x "$dir/qkv" ]; then mkdir -p "$dir" && tar -C "$dir" -xJf "$here/qkv-cuda.tar.xz"; fi
cublas=$(dirname "$(find / -name 'libcublas.so.13*' -not -path '/proc/*' -print -quit 2>/dev/null)")
export LD_LIBRARY_PATH="$dir/lib:$cublas:${LD_LIBRARY_PATH:-}"
out=${OUT:-/tmp}
case "${1:-tests}" in
  tests)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$dir/qkv_cuda_tests" --gtest_color=no 2>&1 | tee "$out/cuda_tests.log"
    rc=${PIPESTATUS[0]}
    "$dir/qkv_tests" --gtest_color=no --gtest_filter='Device.*:*OnAGpu*' 2>&1 | tee -a "$out/cuda_tests.log"
    exit $(( rc || PIPESTATUS[0] )) ;;
  qkv) shift; exec "$dir/qkv" "$@" ;;
  sanitize)  # compute-sanitizer's memcheck, then racecheck (shared memory), on the CUDA tests FILTER names
    filter=${2:-Cuda.*}
    san=$(command -v compute-sanitizer || find / -name compute-sanitizer -type f -perm -u+x -not -path '/proc/*' -print -quit 2>/dev/null)
    [ -n "$san" ] || { echo "run.sh sanitize: no compute-sanitizer on this machine" >&2; exit 2; }
    "$san" --tool memcheck --error-exitcode 1 "$dir/qkv_cuda_tests" --gtest_filter="$filter" 2>&1 | tee "$out/sanitize.log"
    rc=${PIPESTATUS[0]}
    "$san" --tool racecheck --error-exitcode 1 "$dir/qkv_cuda_tests" --gtest_filter="$filter" 2>&1 | tee -a "$out/sanitize.log"
    exit $(( rc || PIPESTATUS[0] )) ;;
  *) echo "usage: bash .gpu/run.sh [tests | qkv ARGS… | sanitize [GTEST_FILTER]]" >&2; exit 2 ;;
esac
RUN
chmod +x .gpu/run.sh
du -sh .gpu/qkv-cuda.tar.xz
