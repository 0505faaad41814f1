#!/usr/bin/env bash
# Runs every libFuzzer target of fuzz/ (docs/fuzzing.md) for SECONDS_PER_TARGET seconds each
# (default 60), one after the other, on a copy of its seed corpus fuzz/corpus/<target>/ (the
# repository's corpus is never written). Builds build-fuzz first (clang++, ASan + UBSan).
#
#   bench/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]      e.g. bench/fuzz.sh 600 safetensors shard
#
# stdout: one JSON line per target: seconds it ran (less than asked after a finding), executions, executions/s, edges covered ("cov" of libFuzzer),
# features, corpus size, peak RSS, and the finding (crash/leak/timeout/oom file) or null.
# stderr: libFuzzer's last lines per target and a summary. Exit status: 0 without a finding,
# 1 with one (its input stays in build-fuzz/fuzz-work/<target>/findings/ and is printed),
# 2 for a usage or build problem. Environment: WEFT_FUZZ_BUILD (build folder, build-fuzz),
# WEFT_FUZZ_NICE (nice level, 10: the fuzzers yield to other work), WEFT_FUZZ_FLAGS (more
# libFuzzer flags).
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-60}"
[ $# -gt 0 ] && shift
if ! [[ "$SECONDS_PER_TARGET" =~ ^[1-9][0-9]*$ ]]; then
  echo "bench/fuzz.sh: SECONDS_PER_TARGET must be a positive integer, got '$SECONDS_PER_TARGET'" >&2
  exit 2
fi
BUILD="${WEFT_FUZZ_BUILD:-build-fuzz}"
NICE="${WEFT_FUZZ_NICE:-10}"

# The build: its own folder, clang, only the fuzz targets and the parser library they link.
if [ ! -f "$BUILD/build.ninja" ]; then
  # (ccache, when installed, through CMakeLists.txt's WEFT_CCACHE)
  cmake -S . -B "$BUILD" -G Ninja -DWEFT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_BUILD_TESTS=OFF -DWEFT_WITH_MPI=OFF -DWEFT_NATIVE=OFF \
    >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log" >&2; echo "bench/fuzz.sh: configure failed" >&2; exit 2; }
fi
cmake --build "$BUILD" -j"$(nproc)" --target weft_fuzz >&2 || { echo "bench/fuzz.sh: build failed" >&2; exit 2; }

if [ $# -gt 0 ]; then
  TARGETS=("$@")
else
  TARGETS=()
  for f in fuzz/*_fuzz.cc; do n="$(basename "$f" _fuzz.cc)"; TARGETS+=("$n"); done
fi

# The number after `key` in libFuzzer's log (its final stats and status lines), or "null".
stat() { local v; v="$(grep -oE "(^| )$1: +[0-9]+" "$2" | tail -1 | grep -oE '[0-9]+$')"; echo "${v:-null}"; }

findings=0
summary=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  if [ ! -x "$bin" ] || [ ! -d "fuzz/corpus/$t" ]; then
    echo "bench/fuzz.sh: no target '$t' (expected $bin and fuzz/corpus/$t/)" >&2
    exit 2
  fi
  work="$BUILD/fuzz-work/$t"
  rm -rf "$work" && mkdir -p "$work/findings"
  cp -r "fuzz/corpus/$t" "$work/corpus"
  seeds="$(ls "$work/corpus" | wc -l)"
  # -timeout: an input slower than 25 s is a finding (a hang); -rss_limit_mb/-malloc_limit_mb:
  # so is a run or a single allocation above 2 GiB (a size taken from a header unchecked).
  start=$SECONDS
  # shellcheck disable=SC2086
  nice -n "$NICE" "$bin" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -timeout=25 \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$work/findings/" ${WEFT_FUZZ_FLAGS:-} \
    "$work/corpus" >"$work/log" 2>&1
  rc=$?
  elapsed=$((SECONDS - start))
  finding="$(ls "$work/findings" | head -1)"
  if [ "$rc" != 0 ] && [ -z "$finding" ]; then finding="(exit $rc without an artifact: see $work/log)"; fi
  execs="$(stat stat::number_of_executed_units "$work/log")"
  rate="$(stat stat::average_exec_per_sec "$work/log")"
  cov="$(stat 'cov' "$work/log")"
  ft="$(stat 'ft' "$work/log")"
  corp="$(ls "$work/corpus" | wc -l)"
  rss="$(stat stat::peak_rss_mb "$work/log")"
  json_finding=null
  if [ -n "$finding" ]; then
    findings=$((findings + 1))
    json_finding="\"$work/findings/$finding\""
    echo "== fuzz_$t: FINDING $work/findings/$finding (rc $rc); reproduce: $bin $work/findings/$finding" >&2
    grep -m1 -B2 -A25 -E "ERROR: |weft fuzz finding|runtime error|deadly signal" "$work/log" >&2
  else
    tail -n 3 "$work/log" | sed "s/^/fuzz_$t: /" >&2
  fi
  echo "{\"target\": \"$t\", \"seconds\": $elapsed, \"executions\": $execs, \"exec_per_s\": $rate," \
    "\"coverage\": $cov, \"features\": $ft, \"seeds\": $seeds, \"corpus\": $corp, \"peak_rss_mb\": $rss," \
    "\"finding\": $json_finding}"
  summary+=("$(printf '%-16s %4ss %10s execs %7s/s cov %5s ft %6s corpus %4s  %s' "$t" "$elapsed" \
    "$execs" "$rate" "$cov" "$ft" "$corp" "${finding:-no finding}")")
done
printf '%s\n' "${summary[@]}" >&2
if [ "$findings" -gt 0 ]; then
  echo "bench/fuzz.sh: $findings target(s) with a finding" >&2
  exit 1
fi
echo "bench/fuzz.sh: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET} s each, no finding" >&2
