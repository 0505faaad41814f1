#!/usr/bin/env bash
# Strong scaling of the ORBIT-class ClimaX models on Frontier, as the planner prices them (no run):
# `weft plan --model orbit-113b|orbit-10b --system systems/frontier.toml --scaling strong` from 512
# to 24,576 GCDs at a fixed global batch, the best layout at each count. Prints the markdown
# tables of docs/climax.md ("The planner on ORBIT-class models"): GCDs, best layout, step time,
# MFU, efficiency (T_base N_base) / (T_N N), the largest loss beside the compute.
#   bash bench/orbit_frontier.sh [batches="3072 12288"] [models="orbit-113b orbit-10b"]
# Two settings:
#   hybrid-stop  ORBIT's method (Wang et al. SC24; docs/research comm-vit-tuner.md sec. 2.2):
#                tensor parallelism x ZeRO-3 over each rank's tp shard (FSDP), plain (no ZeRO++),
#                FSDP's prefetch and backward overlap (--overlap-dp) and bf16 gradient
#                reductions (--no-fp32-grad-accumulation); tp, micro-batch and recompute searched
#   defaults     frontier.toml's [defaults] (Megatron-DeepSpeed's stack: no dp overlap, fp32
#                gradients) and the free search (ZeRO 0-3, ZeRO++ presets)
# The seed (ORBIT, earlier arXiv abstract): 78%-96% scaling efficiency across 24,576 GCDs; its
# batch, model-size table and whether the figure is strong or weak scaling could not be read.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCHES="${1:-3072 12288}"
MODELS="${2:-orbit-113b orbit-10b}"
WEFT="${WEFT:-build/weft}"
SYSTEM="${SYSTEM:-systems/frontier.toml}"
GPUS="512,1024,2048,3072,6144,12288,24576"
# The table of one curve, from `weft plan --scaling strong --format json` on stdin.
TABLE=$(cat <<'PY'
import json, sys
model, batch, setting = sys.argv[1:4]
pts = json.load(sys.stdin)['strong']
print(f'\n{model}, global batch {batch} samples ({setting}):\n')
print('| GCDs | best layout | step s | MFU | efficiency | largest loss |')
print('| --- | --- | --- | --- | --- | --- |')
for p in pts:
    if not p['found']:
        print(f"| {p['gpus']} | (no layout fits) | | | | |")
        continue
    b = p['best']
    l, t = b['layout'], b['time_s']
    z = b['zeropp']['preset']
    desc = f"tp {l['tp']} dp {l['dp']} mb {l['micro_batch']} zero {l['zero']} {l['recompute']}" + ('' if z == 'none' else f' {z}')
    total = b['step_time_s']
    losses = {k: v for k, v in t.items() if k != 'compute'}
    k = max(losses, key=losses.get)
    name = {'tp_comm': 'tp comm', 'dp_exposed': 'dp exposed', 'pp_bubble': 'pp bubble'}.get(k, k)
    print(f"| {p['gpus']} | {desc} | {total:.4g} | {100 * b['mfu']:.1f}% | {100 * p['efficiency']:.1f}% | {name} {100 * losses[k] / total:.1f}% |")
PY
)
for model in $MODELS; do
  for batch in $BATCHES; do
    for setting in hybrid-stop defaults; do
      extra=""
      [ "$setting" = hybrid-stop ] && extra="--overlap-dp --no-fp32-grad-accumulation --zero 3 --zeropp none"
      # shellcheck disable=SC2086
      "$WEFT" plan --model "$model" --system "$SYSTEM" --gpus 24576 --global-batch "$batch" --precision bf16 \
        $extra --scaling strong --scaling-gpus "$GPUS" --format json | python3 -c "$TABLE" "$model" "$batch" "$setting"
    done
  done
done
