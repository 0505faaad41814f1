#!/usr/bin/env bash
# weft's graph-network training step beside the same model in eager PyTorch (bench/gnn_peer.py),
# on the same prepared LJ dataset, in the same run (this machine is shared: compare the ratio).
#
#   bench/gnn_peer.sh [LAYER] [STEPS] [THREADS]     e.g. bench/gnn_peer.sh egnn 60 2
#
# WEFT_FP32_KERNEL=onednn runs weft's fp32 products on oneDNN (docs/precision.md); the default is
# the system file's choice, else OpenBLAS.
# With the peers environment (scripts/setup-peers.sh), the model also runs with PyTorch Geometric's
# layers (torch 2.11): CFConv for SchNet, EGNN on MessagePassing. Prints each side's atoms/s and ms
# per step (weft: mean over its steps after the first; the peer: over its steps after the second,
# batch assembly outside its timing) and weft / peer.
set -euo pipefail
cd "$(dirname "$0")/.."
LAYER="${1:-schnet}"
STEPS="${2:-60}"
THREADS="${3:-2}"
DATA="${WEFT_GNN_DATA:-/tmp/weft-gnn-peer-lj}"
[ -f "$DATA/manifest.json" ] || build/weft prepare --synthetic-lj "$DATA" --structures 2000 >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "OpenBLAS kernels: ${OPENBLAS_CORETYPE:-default}; $(lscpu | sed -n 's/^Model name: *//p')"
build/weft train configs/gnn-lj.toml --data "$DATA" --out "$OUT/run" --model.layer "$LAYER" --steps "$STEPS" \
  --val-every 0 --ckpt-every 0 --log-every "$STEPS" --threads "$THREADS" --warmup-steps 0 \
  ${WEFT_FP32_KERNEL:+--fp32-kernel "$WEFT_FP32_KERNEL"} > "$OUT/weft.log" 2>&1
W=$(sed -n 's/^done: .* steps, \([0-9.]*\) tokens\/s.*/\1/p' "$OUT/weft.log")
P=$(/usr/bin/python3 bench/gnn_peer.py "$DATA" --layer "$LAYER" --steps "$STEPS" --threads "$THREADS")
echo "weft:  $W atoms/s ($LAYER, gnn-lj, batch 16, $THREADS threads; $(grep -o 'products: [^(]*' "$OUT/weft.log" || echo 'products: openblas'))"
echo "peer:  $P"
python3 -c "import json,sys; p=json.loads(sys.argv[2]); print('weft / peer: %.2fx' % (float(sys.argv[1]) / p['atoms_per_s']))" "$W" "$P"
# PyTorch Geometric (the peers environment, when there is one): SchNet's CFConv (HydraGNN's SchNet
# layer), EGNN written on its MessagePassing (HydraGNN's E_GCL).
if [ -x .venv-peers/bin/python ]; then
  Q=$(.venv-peers/bin/python bench/gnn_peer.py "$DATA" --layer "$LAYER" --pyg --steps "$STEPS" --threads "$THREADS")
  echo "peer:  $Q"
  python3 -c "import json,sys; p=json.loads(sys.argv[2]); print('weft / PyG peer: %.2fx' % (float(sys.argv[1]) / p['atoms_per_s']))" "$W" "$Q"
fi

