#!/usr/bin/env bash
# Runs a command that must fail (an mpirun job in which one rank dies or stalls) and checks
# that it ends with a non-zero exit code within MAX_SECONDS and that its output matches
# PATTERN (an extended regular expression over the whole output; . matches newlines).
#   run_fault.sh MAX_SECONDS PATTERN command [args...]
set -u
max="$1"; pattern="$2"; shift 2
start_ms=$(( $(date +%s%N) / 1000000 ))
# A guard well above MAX_SECONDS, so that a hung job cannot outlive the test.
out=$(timeout -k 5 $((max + 30)) "$@" 2>&1)
rc=$?
elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
echo "$out"
echo "run_fault: exit code $rc after ${elapsed} s (limit ${max} s)"
fail=0
if [ "$rc" -eq 0 ]; then echo "run_fault: FAIL: the job exited with code 0"; fail=1; fi
if [ "$elapsed_ms" -gt $((max * 1000)) ]; then echo "run_fault: FAIL: took ${elapsed} s > ${max} s"; fail=1; fi
if ! grep -Ezq -- "$pattern" <<<"$out"; then echo "run_fault: FAIL: output does not match /$pattern/"; fail=1; fi
exit $fail
