#!/usr/bin/env bash
# The GPU session's checklist for the CUDA backend (docs/cuda.md), one command each:
#
#   bench/cuda_bench.sh build    # configure + build weft and weft_cuda_tests with -DWEFT_CUDA=ON (sm 90)
#   bench/cuda_bench.sh test     # the GPU tests: the one GPT on cuda vs cpu first (GptDevice*), then every op
#   bench/cuda_bench.sh gemm     # the card's cuBLASLt bf16 GEMM rate at 8192^3 (the MFU denominator)
#   bench/cuda_bench.sh bench    # gpt2-124m, seq 1024, --precision bf16, batch 4 8 16 32: tokens/s, ms/step, MFU
#   bench/cuda_bench.sh fp32     # the same at fp32, batch 4
#   bench/cuda_bench.sh nsys     # profile 5 steps at batch 16 (needs nsys), top kernels
#   bench/cuda_bench.sh all      # build test gemm bench (default)
#
# `weft bench --backend cuda` times the engine's step (the one GPT, AdamW, clipping) on the
# cuda backend. Until buffers carry dtypes (issue 13) --precision bf16 is emulated there as on
# the CPU (fp32 buffers rounded to bf16 values, strict-fp32 products), and the fused ops are
# not wired into the GPT yet: these numbers are the engine path's baseline, not the llm.c-class
# path the removed GptCuda was (real bf16, CUDA graphs). Nothing here has run on a GPU yet.
#
# Environment: BUILD (build-cuda), ARCH (90: H100/H200; 80 for A100), JOBS (nproc), BATCHES
# ("4 8 16 32": fp32 activations and the (B,NH,T,T) probabilities take about 1.1 GiB per
# sequence), STEPS (20), PEAK (989: H100 SXM bf16 dense TFLOP/s; H200 is the same chip rate).
# One JSON line per case on stdout (bench/README.md), a summary table on stderr.
# Reference: llm.c's train_gpt2.cu, gpt2-124m at T = 1024: about 145K tokens/s on one H100.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
ARCH=${ARCH:-90}
JOBS=${JOBS:-$(nproc)}
BATCHES=${BATCHES:-"4 8 16 32"}
STEPS=${STEPS:-20}
PEAK=${PEAK:-989}
LLMC=145000

field() { echo "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2 | tr -d '"'; }

do_build() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L || true
  cmake -S . -B "$BUILD" -G Ninja -DWEFT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >&2
  cmake --build "$BUILD" -j"$JOBS" --target weft_cli weft_cuda_tests >&2
}

do_test() {
  # The whole model first (what the later numbers rest on), then every op; both print their
  # measured errors. A failure stops the script after both ran.
  local rc=0
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-$JOBS} "$BUILD"/tests/weft_cuda_tests --gtest_filter='GptDevice*' || rc=1
  "$BUILD"/tests/weft_cuda_tests --gtest_filter='-GptDevice*' || rc=1
  return $rc
}

GEMM_RATE=""
do_gemm() {
  local j
  j=$("$BUILD"/weft bench --matmul-only --gemm-n 8192 --peak-tflops "$PEAK" --format json)
  echo "$j"
  GEMM_RATE=$(field "$j" gemm_flops_per_s)
  awk -v r="$GEMM_RATE" -v p="$PEAK" 'BEGIN { printf "bf16 GEMM 8192^3: %.1f TFLOP/s (%.0f%% of %d)\n", r / 1e12, 100 * r / (p * 1e12), p }' >&2
}

do_bench() {
  local prec=${1:-bf16} batches=${2:-$BATCHES}
  [ -n "$GEMM_RATE" ] || do_gemm >/dev/null
  printf '%-6s %-6s %10s %12s %9s %9s %10s\n' precision batch ms/step tokens/s MFU-peak MFU-gemm vs-llm.c >&2
  for B in $batches; do
    local j
    if ! j=$("$BUILD"/weft bench --backend cuda --precision "$prec" --model gpt2-124m --seq 1024 --batch "$B" \
               --steps "$STEPS" --warmup 3 --no-peak --peak-tflops "$PEAK" --format json 2>/tmp/weft_cuda_bench.err); then
      echo "{\"model\": \"gpt2-124m\", \"batch\": $B, \"precision\": \"$prec\", \"error\": \"$(tail -1 /tmp/weft_cuda_bench.err | tr -d '"')\"}"
      printf '%-6s %-6s  failed: %s\n' "$prec" "$B" "$(tail -1 /tmp/weft_cuda_bench.err)" >&2
      continue
    fi
    local tps mflops
    tps=$(field "$j" tokens_per_s)
    mflops=$(field "$j" model_flops_per_s)
    echo "${j%\}}, \"gemm_flops_per_s\": $GEMM_RATE, \"mfu_gemm\": $(awk -v a="$mflops" -v g="$GEMM_RATE" 'BEGIN { print a / g }'), \"llmc_tokens_per_s\": $LLMC}"
    awk -v p="$prec" -v b="$B" -v ms="$(field "$j" ms_per_step)" -v t="$tps" -v f="$mflops" -v g="$GEMM_RATE" \
        -v pk="$PEAK" -v l="$LLMC" \
        'BEGIN { printf "%-6s %-6s %10.2f %12.0f %8.1f%% %8.1f%% %9.2fx\n", p, b, ms, t, 100 * f / (pk * 1e12), 100 * f / g, t / l }' >&2
  done
}

do_nsys() {
  command -v nsys >/dev/null || { echo "nsys not installed" >&2; return 1; }
  nsys profile -o /tmp/weft_gpt2 --force-overwrite true -t cuda,cublas \
    "$BUILD"/weft bench --backend cuda --precision bf16 --model gpt2-124m --seq 1024 --batch 16 --steps 5 --warmup 2 --no-peak >&2
  nsys stats --report cuda_gpu_kern_sum --format csv /tmp/weft_gpt2.nsys-rep | head -25
}

stage=${1:-all}
case "$stage" in
  build) do_build ;;
  test) do_test ;;
  gemm) do_gemm ;;
  bench) do_bench bf16 ;;
  fp32) do_bench fp32 4 ;;
  nsys) do_nsys ;;
  all)
    do_build
    test_rc=0
    do_test || test_rc=1
    do_gemm
    do_bench bf16
    [ $test_rc -eq 0 ] || { echo "weft_cuda_tests failed: the figures above are not verified" >&2; exit 1; }
    ;;
  *) echo "usage: $0 [build|test|gemm|bench|fp32|nsys|all]" >&2; exit 2 ;;
esac
