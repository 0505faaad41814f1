#!/usr/bin/env bash
# The hostile-input catalogue of issue 34 (tests/hostile/cases.json: the cases as data) against
# build/weft: every case run, a Markdown table of the results and the passes per class.
# The same runner is CTest's `hostile` label (one test per class). Add a case: an entry in
# cases.json (tests/hostile/run_hostile.py's docstring lists the keys).
#   bash bench/hostile_catalogue.sh [--class N ...] > /tmp/hostile.md
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 tests/hostile/run_hostile.py --weft build/weft --src . --table "$@"
