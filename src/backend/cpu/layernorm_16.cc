#include "backend/cpu/layernorm_16.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_math.h"

namespace weft::cpu {

void LayerNorm16::backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                           int64_t N, int64_t C) {
  const char* op = "layernorm_backward";
  check_float_dtype(dinp.dtype, op, "dinp");
  check_float_dtype(dw.dtype, op, "dw");
  check_float_dtype(db.dtype, op, "db");
  check_float_dtype(dout.dtype, op, "dout");
  check_float_dtype(inp.dtype, op, "the input");
  check_float_dtype(w.dtype, op, "the weight");
  check_float_dtype(mean.dtype, op, "the mean");
  check_float_dtype(rstd.dtype, op, "rstd");
  const int nt = omp_get_max_threads();
  // Per thread: its dw and db partial sums (2C) and one row each of x, dout and dinp (3C); after
  // the threads', the weight, dw and db widened (3C).
  int64_t stride = 0;
  float* base = scratch_.get(5 * C, &stride);
  std::vector<float> wf(static_cast<size_t>(3 * C));
  float *w32 = wf.data(), *dw32 = w32 + C, *db32 = dw32 + C;
  widen(w32, w.data, w.dtype, 0, C);
  for (int t = 0; t < nt; ++t) std::fill(base + t * stride, base + t * stride + 2 * C, 0.0f);
#pragma omp parallel
  {
    float* pdw = base + static_cast<int64_t>(omp_get_thread_num()) * stride;
    float *pdb = pdw + C, *x = pdb + C, *g = x + C, *dx = g + C;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      widen(x, inp.data, inp.dtype, i * C, C);
      widen(g, dout.data, dout.dtype, i * C, C);
      widen(dx, dinp.data, dinp.dtype, i * C, C);
      layernorm_backward_row(dx, pdw, pdb, x, g, w32, element(mean, i), element(rstd, i), C);
      narrow(dinp.data, dinp.dtype, i * C, dx, C);
    }
  }
  widen(dw32, dw.data, dw.dtype, 0, C);
  widen(db32, db.data, db.dtype, 0, C);
  for (int t = 0; t < nt; ++t) {
    const float* pdw = base + t * stride;
    for (int64_t c = 0; c < C; ++c) {
      dw32[c] += pdw[c];
      db32[c] += pdw[C + c];
    }
  }
  narrow(dw.data, dw.dtype, 0, dw32, C);
  narrow(db.data, db.dtype, 0, db32, C);
}

}  // namespace weft::cpu
