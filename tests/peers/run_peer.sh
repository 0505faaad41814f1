#!/usr/bin/env bash
# Runs one `peers` test (tests/peers/*.py) with the peers' Python (.venv-peers/, made by
# scripts/setup-peers.sh). Without that environment the test FAILS with the command to run: a
# peers test never skips.
#   run_peer.sh SCRIPT.py [TEST...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${WEFT_PEERS_VENV:-$ROOT/.venv-peers}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ] || ! "$PY" -c 'import torch, transformers, safetensors, torch_geometric, lm_eval, accelerate, peft, ase' 2>/dev/null; then
  echo "peers environment missing or incomplete at $VENV: run scripts/setup-peers.sh (then ctest --test-dir build -L peers)" >&2
  exit 1
fi
export WEFT_SOURCE_DIR="$ROOT"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" "$ROOT/tests/peers/$1" "${@:2}"
