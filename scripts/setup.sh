#!/usr/bin/env bash
# Installs the Debian packages qkv needs (idempotent: already-installed packages are skipped).
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev                      # GEMM (oneDNN)
  nlohmann-json3-dev libcli11-dev  # configs, command line
  libgtest-dev libgmock-dev libbenchmark-dev  # tests, benchmarks
  zlib1g-dev
  librsvg2-dev                     # PNG pictures (viz/png: SVG rasterized by librsvg + cairo)
  libsentencepiece-dev             # subword tokenizer (text/sentencepiece), 0.1.97 on Debian 12
  libpcre2-dev libutf8proc-dev     # Hugging Face tokenizers (text/hf_tokenizer: regexes, Unicode)
  libcsv-dev                       # CSV data files (io/csv: fine-tuning's .csv, as run_glue.py reads them)
  libgdk-pixbuf-2.0-dev            # reading PNG and JPEG pictures (vision/image; headers checked first)
  dataset-fashion-mnist            # Fashion-MNIST (MIT), IDX files under /usr/share/datasets/fashion-mnist
  openmpi-bin libopenmpi-dev       # data-parallel training (mpirun -np N qkv train; -DQKV_MPI=ON)
  libboost-dev                     # qkv serve (HTTP: Boost.Beast + Asio, header-only)
  libboost-context-dev             # the tests' CUDA emulation: a block's threads as fibers
  libcpp-httplib-dev               # the HTTP client of tests/cli/serve_test
)
for flag in "$@"; do
case "$flag" in
--with-torch)
  # PyTorch 1.13, the peer for golden files and benchmarks; without OpenBLAS it runs on the netlib
  # reference BLAS (about 5 GF/s on 2 cores here, over 30x slower), so benchmarks would flatter qkv.
  pkgs+=(python3 python3-torch python3-numpy python3-tqdm libopenblas0-pthread) ;;  # tqdm: the bench scripts' bar
--python)
  # the Python module (scripts/test_python.sh): headers, venv, NumPy, pytest (and pytest-xdist: its
  # tests on every core), matplotlib (the example), PyTorch 1.13 for the bridge
  pkgs+=(python3 python3-dev python3-venv python3-numpy python3-pytest python3-pytest-xdist python3-matplotlib
        python3-torch libopenblas0-pthread) ;;
--fuzz)
  pkgs+=(clang libomp-14-dev) ;;  # libFuzzer and OpenMP for clang (scripts/fuzz.sh)
--browser)
  # qkv serve's viewer under test in a real browser (tests/browser/viewer_test.py)
  pkgs+=(python3 chromium chromium-driver python3-selenium) ;;
*) echo "setup: unknown option $flag (--with-torch, --python, --fuzz, --browser)" >&2; exit 2 ;;
esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
