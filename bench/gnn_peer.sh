#!/usr/bin/env bash
# weft's graph-network training step beside the same model in eager PyTorch (bench/gnn_peer.py),
# on the same prepared LJ dataset, in the same run (this machine is shared: compare the ratio).
#
#   bench/gnn_peer.sh [LAYER] [STEPS] [THREADS] [BATCH]     e.g. bench/gnn_peer.sh egnn 60 2 16
#
# The same shapes on both sides: weft runs each step's BATCH structures as one micro-batch (not
# configs/gnn-lj.toml's micro-batches of 4), as the peer runs its batch.
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
BATCH="${4:-16}"
DATA="${WEFT_GNN_DATA:-/tmp/weft-gnn-peer-lj}"
[ -f "$DATA/manifest.json" ] || build/weft prepare --synthetic-lj "$DATA" --structures 2000 >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "OpenBLAS kernels: ${OPENBLAS_CORETYPE:-default}; $(lscpu | sed -n 's/^Model name: *//p')"
build/weft train configs/gnn-lj.toml --data "$DATA" --out "$OUT/run" --model.layer "$LAYER" --steps "$STEPS" \
  --global-batch "$BATCH" --micro-batch "$BATCH" \
  --val-every 0 --ckpt-every 0 --log-every "$STEPS" --threads "$THREADS" --warmup-steps 0 \
  ${WEFT_FP32_KERNEL:+--fp32-kernel "$WEFT_FP32_KERNEL"} > "$OUT/weft.log" 2>&1
W=$(sed -n 's/^done: .* steps, \([0-9.]*\) tokens\/s.*/\1/p' "$OUT/weft.log")
P=$(/usr/bin/python3 bench/gnn_peer.py "$DATA" --layer "$LAYER" --steps "$STEPS" --threads "$THREADS" --batch "$BATCH")
echo "weft:  $W atoms/s ($LAYER, gnn-lj, batch $BATCH, $THREADS threads; $(grep -o 'products: [^(]*' "$OUT/weft.log" || echo 'products: openblas'))"
echo "peer:  $P"
# weft's graphs/s and edges/s at the peer's atoms per graph and edges per atom (the same data;
# weft's batches follow its shuffled order, the peer's are consecutive structures).
python3 -c "import json,sys; w=float(sys.argv[1]); p=json.loads(sys.argv[2]); print('weft:  %.0f graphs/s, %.0f edges/s; weft / peer: %.2fx' % (w * p['graphs_per_s'] / p['atoms_per_s'], w * p['edges_per_s'] / p['atoms_per_s'], w / p['atoms_per_s']))" "$W" "$P"
# PyTorch Geometric (the peers environment, when there is one): SchNet's CFConv (HydraGNN's SchNet
# layer), EGNN written on its MessagePassing (HydraGNN's E_GCL).
if [ -x .venv-peers/bin/python ]; then
  Q=$(.venv-peers/bin/python bench/gnn_peer.py "$DATA" --layer "$LAYER" --pyg --steps "$STEPS" --threads "$THREADS" \
    --batch "$BATCH")
  echo "peer:  $Q"
  python3 -c "import json,sys; p=json.loads(sys.argv[2]); print('weft / PyG peer: %.2fx' % (float(sys.argv[1]) / p['atoms_per_s']))" "$W" "$Q"
fi

