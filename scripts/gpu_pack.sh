#!/usr/bin/env bash
# Prepares a lent GPU machine's run (docs/CUDA.md): builds the CUDA build here (scripts/build_cuda.sh)
# and packs its test binaries and the qkv command, with the shared libraries they need that such a
# machine lacks (oneDNN, SentencePiece, librsvg, Open MPI, …; it has none of Debian's), into
# ./.gpu/qkv-cuda.tar.xz — a folder git ignores, for the device tool to carry. There:
#
#   bash .gpu/run.sh tests                 (carry: [".gpu"]) every CUDA test; the log to $OUT
#   bash .gpu/run.sh qkv train configs/shakespeare-char.json --device cuda
#
# QKV_GPU_BUILD=build packs an existing -DQKV_CUDA=ON build tree instead (scripts/build.sh's ./build, where
# the toolkit is found), saving build-cuda's first build (~20 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
tree=${QKV_GPU_BUILD:-build-cuda}
if [ "$tree" = build-cuda ]; then
  bash scripts/build_cuda.sh "$@"
elif ! grep -q '^QKV_CUDA:BOOL=ON' "$tree/CMakeCache.txt" 2>/dev/null; then
  echo "gpu_pack: $tree is not a -DQKV_CUDA=ON build tree" >&2
  exit 2
fi
ninja -C "$tree" qkv_cuda_tests qkv_tests qkv_cli >/dev/null
rm -rf .gpu
mkdir -p .gpu/stage/lib
cp "$tree/tests/qkv_cuda_tests" "$tree/tests/qkv_tests" "$tree/qkv" .gpu/stage/
# The libraries a CUDA image does not have: everything but glibc's, the C++ runtime and CUDA's own
# (its libstdc++ is at least as new as Debian 12's). Those qkv opens only when needed (core/shared_library.h)
# stay behind: cuBLAS is there; librsvg and cairo (PNG pictures, ~50 libraries) are not, so training
# there writes loss.svg without loss.png (train/metrics.cpp), as on any machine without them.
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
#   bash .gpu/run.sh tests      the wgmma operand probe, every CUDA test (qkv_cuda_tests), then the GPU training
#                               tests (GPT, Transformer), a process each, at most QKV_TEST_LIMIT (90) seconds each (a
#                               crash gets cuda-gdb's backtrace); a line per test, the log to $OUT
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
  tests)  # each test in a process of its own, so that one that crashes stops only itself (and gets a backtrace)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    : >"$out/cuda_tests.log"
    failed=0
    # the wgmma operand probe first (WgmmaProbeOnAGpu: every descriptor form the kernels use, read back on
    # the GPU), then the rest; each test at most QKV_TEST_LIMIT seconds (90), so that a hang costs one
    # test's share of the call, not the call (exit 124: timed out)
    for spec in "qkv_tests WgmmaProbeOnAGpu.*" "qkv_cuda_tests *" \
                "qkv_tests Device.*:*OnAGpu*:LoadOntoADevice.*:-WgmmaProbeOnAGpu.*"; do
      bin=${spec%% *} filter=${spec#* }
      for t in $("$dir/$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
        timeout -k 5 "${QKV_TEST_LIMIT:-90}" "$dir/$bin" --gtest_color=no --gtest_brief=1 --gtest_filter="$t" \
          >>"$out/cuda_tests.log" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then echo "ok      $t"
        elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "FAILED  $t (timed out after ${QKV_TEST_LIMIT:-90}s)"; failed=1
        else echo "FAILED  $t (exit $rc)"; failed=1; fi
        if [ $rc -ge 128 ] && command -v cuda-gdb >/dev/null; then  # killed by a signal: where
          cuda-gdb -batch -ex run -ex bt --args "$dir/$bin" --gtest_filter="$t" 2>&1 | tail -n 25 | tee -a "$out/cuda_tests.log"
        fi
      done
    done
    exit $failed ;;
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
