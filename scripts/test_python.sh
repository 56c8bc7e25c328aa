#!/usr/bin/env bash
# The Python module's tests (python/tests, pytest), part of the README's test command: installs
# qkv with pip (scikit-build-core builds the C++ library and the nanobind module with CMake) into
# a virtual environment (build/venv) that also sees Debian's NumPy, pytest and PyTorch 1.13, then
# runs pytest; PyTorch is required (QKV_REQUIRE_TORCH), so the comparisons with it cannot be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python
[ -x build/venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/python -m pip install -q --disable-pip-version-check .
cd build  # not the repository root: `import qkv` must find the installed package, not python/qkv's sources
QKV_REQUIRE_TORCH=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" venv/bin/python -m pytest -q -p no:cacheprovider ../python/tests
