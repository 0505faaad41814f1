#!/usr/bin/env bash
# Makes .venv-peers/: a Python virtual environment with the tools weft is checked against
# (PyPI's torch 2.x, Hugging Face transformers and safetensors, PyTorch Geometric,
# lm-evaluation-harness), pinned in scripts/peers-requirements.txt and
# scripts/peers-constraints.txt, installed from PyPI only. Idempotent: a second run checks the
# pins and installs nothing new. Not part of README's two commands (they are Debian-only);
# docs/peers.md says what it is for. After it: ctest --test-dir build -L peers
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${WEFT_PEERS_VENV:-$ROOT/.venv-peers}"
REQ="$ROOT/scripts/peers-requirements.txt"
CON="$ROOT/scripts/peers-constraints.txt"
STAMP="$VENV/.weft-peers-stamp"
want="$(cat "$REQ" $( [ -f "$CON" ] && echo "$CON" ) | sha256sum | cut -d' ' -f1)"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c \
    'import torch, transformers, safetensors, torch_geometric, lm_eval, accelerate, peft, ase' 2>/dev/null; then
  echo "setup-peers: $VENV is up to date"
  exit 0
fi

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  # Debian's python3 keeps venv/ensurepip in a package of its own.
  SUDO=""; [ "$(id -u)" != "0" ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"

start=$(date +%s)
# PyPI only: no --extra-index-url, no find-links from the machine's pip configuration.
export PIP_FIND_LINKS="" PIP_DISABLE_PIP_VERSION_CHECK=1
cargs=(); [ -f "$CON" ] && cargs=(-c "$CON")
"$VENV/bin/python" -m pip install --quiet --no-input --index-url https://pypi.org/simple \
  -r "$REQ" "${cargs[@]}"
"$VENV/bin/python" - <<'PY'
import torch, transformers, safetensors, torch_geometric, lm_eval, accelerate, peft, ase
print("setup-peers: torch", torch.__version__, "| transformers", transformers.__version__,
      "| safetensors", safetensors.__version__, "| torch_geometric", torch_geometric.__version__,
      "| lm_eval", getattr(lm_eval, "__version__", "?"), "| ase", ase.__version__)
PY
echo "$want" > "$STAMP"
echo "setup-peers: done in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1) in $VENV"
