#!/usr/bin/env bash
# Runs the GPU checklist (bench/cuda_bench.sh) on a borrowed GPU machine from the bundle that
# bench/cuda_bundle.sh made on the build machine (docs/cuda.md, "Running the checklist on a
# borrowed GPU machine"): unpacks it at / (once per machine), links the image's CUDA libraries
# into /opt/weft-libs, then runs the stages in order, each under its own time cap and all under
# one deadline, so that a slow or hung stage costs its cap and no more; last it packs every log
# into RESULT_DIR/../checklist.tgz and copies the table beside it (for the device tool's $OUT).
#
#   bench/cuda_device.sh                        environment: BUDGET_S (480: the deadline, s),
#   STAGES="ops:90 model:60 ..." bench/...      BUNDLE (.cuda-bundle), RESULT_DIR, DEST ($OUT)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET_S:-480}))
BUNDLE=${BUNDLE:-.cuda-bundle}
RESULT=${RESULT_DIR:-/tmp/cuda-checklist}
DEST=${DEST:-${OUT:-/tmp/cuda-out}}
STAGES=${STAGES:-"ops:90 model:60 parity:150 climax:90 bf16:120 nccl:60 bench:150 torch:120 gemm-sweep:90 sanitizer:150"}
mkdir -p "$RESULT" "$DEST"
ENVLOG="$RESULT/machine.log"

# Unpacked again whenever the bundle differs from the one a warm machine already holds.
SUM=$(cksum < "$BUNDLE/root.tar.zst")
if [ ! -x /opt/weft-bin/weft ] || [ "$(cat /opt/weft-bin/.bundle-sum 2>/dev/null)" != "$SUM" ]; then
  ZSTD=zstd; command -v zstd >/dev/null || ZSTD="env LD_LIBRARY_PATH=$BUNDLE/zstd $BUNDLE/zstd/zstd"
  $ZSTD -dc "$BUNDLE/root.tar.zst" | tar -C / -xf - || { echo "cannot unpack $BUNDLE/root.tar.zst" >&2; exit 2; }
  echo "$SUM" > /opt/weft-bin/.bundle-sum
fi
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  [ -e "/opt/weft-libs/$lib" ] && continue
  p=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [ -n "$p" ] || p=$(find /usr/local/cuda*/ /usr/lib /opt -name "$lib" 2>/dev/null | head -1)
  [ -n "$p" ] && ln -sf "$p" "/opt/weft-libs/$lib"
done
mkdir -p /opt/weft-bin/mpi
ln -sf /usr/bin/orterun /opt/weft-bin/mpi/mpirun
export PATH=/opt/weft-bin/mpi:$PATH
# Shared memory between the ranks of one machine; no UCX/OFI (none of their hardware here).
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^ofi OMPI_MCA_osc=^ucx \
  OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
{
  date -u; nvidia-smi; nvidia-smi -q | grep -E 'Product Name|Driver Version|CUDA Version|Max Clocks' -A0
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200
  ls -la /opt/weft-libs | grep -E 'cuda|cublas|nccl'
  echo "missing libraries:"; ldd /opt/weft-bin/weft /opt/weft-bin/tests/* | grep 'not found'
  mpirun --version; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())'
  /opt/weft-bin/weft --version
} > "$ENVLOG" 2>&1
cat "$ENVLOG"

export BUILD=/opt/weft-bin WEFT=/opt/weft-bin/weft
: > "$RESULT/all.tsv"
for spec in $STAGES; do
  s=${spec%%:*} cap=${spec##*:}
  left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt 20 ]; then printf '%s\tSKIP\tno time left before the deadline\n' "$s" >> "$RESULT/all.tsv"; continue; fi
  t=$((cap < left ? cap : left))
  s0=$(date +%s)
  timeout -k 5 "$t" bash bench/cuda_bench.sh --out "$RESULT" "$s"
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    printf '%s\tFAIL\ttimed out after %ss\n' "$s" "$t" >> "$RESULT/all.tsv"
  else
    cat "$RESULT/summary.tsv" >> "$RESULT/all.tsv"
  fi
  echo "[$s] $(($(date +%s) - s0)) s" >> "$RESULT/stage-times.log"
done
cp "$RESULT/all.tsv" "$DEST/summary.tsv"
cp "$ENVLOG" "$DEST/"
tar -C "$RESULT" --exclude='*.safetensors' --exclude='./data' -czf "$DEST/checklist.tgz" . 2>/dev/null
awk -F'\t' '{ printf "%-10s %-5s %s\n", $1, $2, $3 }' "$RESULT/all.tsv"
echo "total $(($(date +%s) - T0)) s"
