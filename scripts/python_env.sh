#!/usr/bin/env bash
# The tests' Python environment, build/venv: Debian's python3 with its NumPy, pytest and PyTorch 1.13
# (system site packages, scripts/setup.sh --python), plus from PyPI what building the module needs
# (nanobind, scikit-build-core), so that scripts/build.sh -DQKV_PYTHON=ON can build the module into
# ./build and `pip install --no-build-isolation` can pack it (scripts/test_python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --python
[ -x build/venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages build/venv
build/venv/bin/python -m pip install -q --disable-pip-version-check "nanobind>=2.9" "scikit-build-core>=0.10"
