#!/usr/bin/env bash
# The Python module's tests (python/tests, pytest), part of the README's test command: installs
# qkv with pip into a virtual environment (build/venv, scripts/python_env.sh) that also sees Debian's
# NumPy, pytest and PyTorch 1.13, then runs pytest; PyTorch is required (QKV_REQUIRE_TORCH), so the
# comparisons with it cannot be skipped.
#
# Where ./build was configured with -DQKV_PYTHON=ON for this environment's Python (scripts/test.sh
# does so), its module is brought up to date and pip packs it (QKV_PYTHON_PREBUILT, CMakeLists.txt):
# seconds, not a second compile of the library. Otherwise `pip install .` builds everything itself
# (scikit-build-core, about 15 minutes on 2 cores the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/python_env.sh
pip=(build/venv/bin/python -m pip install -q --disable-pip-version-check)
suffix=$(build/venv/bin/python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
# (the target list read whole first: `ninja … | grep -q` fails under pipefail when grep stops early)
targets=$(grep -q '^QKV_PYTHON:BOOL=ON' build/CMakeCache.txt 2>/dev/null && ninja -C build -t targets all 2>/dev/null || true)
if grep -q "^_qkv${suffix}: " <<<"$targets"; then
  echo "test_python: packing the module of ./build (_qkv${suffix})"
  ninja -C build _qkv_stub >/dev/null
  "${pip[@]}" --no-build-isolation --config-settings=build-dir=build/python-prebuilt \
    --config-settings=cmake.define.QKV_PYTHON_PREBUILT="$PWD/build" .
else
  echo "test_python: pip install . (compiles the library for the module; ./build has no module for this Python)"
  "${pip[@]}" .
fi
cd build  # not the repository root: `import qkv` must find the installed package, not python/qkv's sources
# pytest-xdist (Debian's python3-pytest-xdist, scripts/setup.sh --python): as many pytest workers as
# the cores hold tests of OMP_NUM_THREADS threads each (2 cores, 1 thread: 2 workers, 21 s instead
# of 30); one process where it is missing or only one fits.
threads=${OMP_NUM_THREADS:-2}
workers=$(( $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) / threads ))
parallel=()
if [ "$workers" -ge 2 ] && venv/bin/python -c 'import xdist' 2>/dev/null; then parallel=(-n "$workers"); fi
QKV_REQUIRE_TORCH=1 OMP_NUM_THREADS="$threads" venv/bin/python -m pytest -q -p no:cacheprovider "${parallel[@]}" \
  ../python/tests
