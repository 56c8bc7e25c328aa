#!/usr/bin/env bash
# The host emulation's launchers are file-local (kernels/cuda/namespace.h: under QKV_CUDA_EMULATION
# QKV_CUDA_LAUNCHERS_BEGIN opens an unnamed namespace): a test that compiles a kernels/cuda/*.cu file
# must not define any symbol of qkv::kernels::cuda that libqkv_kernels.a defines too. Where it did, the
# linker would take whichever came first — the host emulation's body standing in for the library's
# GPU launcher in every test, or the reverse — and say nothing.
#
# usage: emulation_symbols.sh LIBRARY OBJECTS   (OBJECTS: the test binary's objects, ';'-separated;
#        those of tests/kernels/*_emulation_test.cpp are checked)
set -euo pipefail
library=$1
IFS=';' read -r -a objects <<< "$2"

defined() { nm --defined-only --extern-only --format=posix "$@" 2>/dev/null | awk 'NF >= 2 && $1 !~ /:$/ { print $1 }' | sort -u; }

lib_symbols=$(mktemp)
trap 'rm -f "$lib_symbols"' EXIT
defined "$library" > "$lib_symbols"
[ -s "$lib_symbols" ] || { echo "no symbols read from $library"; exit 1; }

checked=0 clashes=0
for o in "${objects[@]}"; do
  case "$o" in *_emulation_test.cpp.o) ;; *) continue ;; esac
  checked=$((checked + 1))
  # symbols of both, in qkv::kernels::cuda (the library's and std's shared templates are the linker's to merge)
  both=$(defined "$o" | comm -12 - "$lib_symbols" | c++filt | grep -F 'qkv::kernels::cuda::' || true)
  if [ -n "$both" ]; then
    echo "$(basename "$o"): defines what libqkv_kernels.a defines:"
    echo "$both" | sed 's/^/  /'
    clashes=$((clashes + 1))
  fi
done
[ "$checked" -gt 0 ] || { echo "no *_emulation_test.cpp.o among the objects given"; exit 1; }
echo "$checked emulation test objects, $clashes defining a symbol of libqkv_kernels.a in qkv::kernels::cuda"
[ "$clashes" -eq 0 ]
