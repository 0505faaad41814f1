#!/usr/bin/env bash
# Pins the golden curves (tests/golden/golden_curves_test.cc) for this machine from the weft of
# a base commit, so that a change is checked bit for bit against code it did not touch.
#
#   bench/golden_pin.sh [BASE]        (BASE: a commit, default HEAD; BUILD: build, JOBS: nproc)
#
# Builds BASE's weft_cli in a git worktree (/tmp/weft-golden-<commit>, kept for reuse) with this
# build's compiler, build type and WEFT_NATIVE, then runs this build's golden test in write mode
# with WEFT_GOLDEN_WEFT pointing at that weft: the pins land in this tree's
# tests/golden/<blas core>-<fingerprint hash>/ (a new folder on a new machine), one file a layout.
# Commit them before the change under test, or keep them out of the change's commit.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$(git rev-parse --verify "${1:-HEAD}^{commit}")
BUILD=${BUILD:-build}
JOBS=${JOBS:-$(nproc)}
[ -f "$BUILD/CMakeCache.txt" ] || { echo "golden_pin.sh: no configured build in $BUILD (scripts/setup.sh makes one)" >&2; exit 2; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
WT=/tmp/weft-golden-${BASE:0:12}
if [ ! -d "$WT" ]; then git worktree add --detach "$WT" "$BASE" >&2; fi
cmake -S "$WT" -B "$WT/build" -G Ninja -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)" \
  -DCMAKE_CXX_COMPILER="$(cache CMAKE_CXX_COMPILER)" -DWEFT_NATIVE="$(cache WEFT_NATIVE)" \
  -DWEFT_BUILD_TESTS=OFF > "$WT/configure.log" 2>&1 || { cat "$WT/configure.log" >&2; exit 1; }
cmake --build "$WT/build" -j"$JOBS" --target weft_cli >&2
cmake --build "$BUILD" -j"$JOBS" --target weft_tests >&2
WEFT_GOLDEN_WRITE=1 WEFT_GOLDEN_WEFT="$WT/build/weft" "$BUILD/tests/weft_tests" \
  --gtest_filter='Pinned/GoldenCurves.*' 2>&1 | grep -E 'REWROTE|FAILED|Failure' || true
echo "pinned from $BASE ($WT/build/weft); git status tests/golden:" >&2
git status --short tests/golden >&2
