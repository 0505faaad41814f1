#include "model/block_memory.h"

namespace weft {

double block_stash_bytes(const BlockShape& k, double e, bool keep_scores, bool dropout) {
  // Korthikanti et al. 2022 sec. 4.1, in elements of e bytes (their 2-byte activations) and
  // 1-byte dropout masks. sbh = s b h.
  const double t = k.t;
  const double sb = k.s * k.b;
  const double sbh = sb * k.h, sbf = sb * k.f;
  const double as2b = k.a * k.s * sb;
  const double rep = k.sequence_parallel ? t : 1.0;  // replicated terms: / t only with sp
  // Replicated over tp (unless sp): the two LayerNorm inputs (2 sbh), the QKV product input
  // and the first MLP product input (the LayerNorm outputs, 2 sbh): Korthikanti's 10 sbh
  // minus the two dropout masks.
  double bytes = 4 * sbh * e / rep;
  // Split over tp: Q and K (2 sbh), V (sbh), the attention-projection input (sbh), the GeLU
  // input and output (2 sbf; Korthikanti's 16 sbh at f = 4h): their 24 sbh bytes. Grouped-query
  // attention keeps K and V at the kv width; SwiGLU keeps gate, up and their product (3 sbf).
  const double kv = k.kv < 0 ? k.h : k.kv;
  bytes += (2 * sbh + 2 * sb * kv + (k.gated ? 3 : 2) * sbf) * e / t;
  if (dropout) {
    // Dropout masks (1 byte): after the attention projection and after the MLP (replicated
    // unless sp), on the attention probabilities (split).
    bytes += 2 * sbh / rep;
  }
  if (keep_scores) {
    bytes += as2b * e / t;                     // softmax output (2 a s^2 b bytes)
    if (dropout) bytes += as2b * (1 + e) / t;  // its dropout mask + dropout output
  }
  return bytes;
}

double block_checkpoint_bytes(const BlockShape& k, double e) {
  return k.s * k.b * k.h * e / (k.sequence_parallel ? k.t : 1.0);
}

}  // namespace weft
