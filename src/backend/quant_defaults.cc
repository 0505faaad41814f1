// The defaults of Backend's optional wire-format ops (backend.h): block quantization (the host
// reference of core/block_quant.h) and the 16-bit casts (core/precision.h), on staged copies, through the device contract's copies only, so that
// they are correct on any backend (cpu-guarded checks every copy against its fences).
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/precision.h"

namespace weft {

void Backend::quantize_blocks(void* wire, const float* x, int64_t n, const QuantSpec& q, float* residual) {
  check_quant_spec(q, name() + ": quantize_blocks");
  WEFT_CHECK(n >= 0, "{}: quantize_blocks of {} elements", name(), n);
  if (n == 0) return;
  const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> hx(static_cast<size_t>(n)), hr;
  std::vector<uint8_t> hw(static_cast<size_t>(quant_wire_bytes(n, q)));
  copy_to_host(hx.data(), x, 0, fbytes);
  if (residual) {
    hr.resize(static_cast<size_t>(n));
    copy_to_host(hr.data(), residual, 0, fbytes);
  }
  quantize_blocks_ref(hw.data(), hx.data(), n, q, residual ? hr.data() : nullptr);
  copy_to_device(wire, 0, hw.data(), hw.size());
  if (residual) copy_to_device(residual, 0, hr.data(), fbytes);
}

void Backend::dequantize_blocks(float* out, const void* wire, int64_t n, const QuantSpec& q, bool accumulate) {
  check_quant_spec(q, name() + ": dequantize_blocks");
  WEFT_CHECK(n >= 0, "{}: dequantize_blocks of {} elements", name(), n);
  if (n == 0) return;
  const size_t fbytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<uint8_t> hw(static_cast<size_t>(quant_wire_bytes(n, q)));
  std::vector<float> ho(static_cast<size_t>(n));
  copy_to_host(hw.data(), wire, 0, hw.size());
  if (accumulate) copy_to_host(ho.data(), out, 0, fbytes);
  dequantize_blocks_ref(ho.data(), hw.data(), n, q, accumulate);
  copy_to_device(out, 0, ho.data(), fbytes);
}

void Backend::encode_16(void* wire, const float* x, int64_t n, DType dt) {
  WEFT_CHECK(n >= 0, "{}: encode_16 of {} elements", name(), n);
  if (n == 0) return;
  std::vector<float> hx(static_cast<size_t>(n));
  std::vector<uint16_t> hw(static_cast<size_t>(n));
  copy_to_host(hx.data(), x, 0, hx.size() * sizeof(float));
  cast_to_16_ref(hw.data(), hx.data(), n, dt);
  copy_to_device(wire, 0, hw.data(), hw.size() * sizeof(uint16_t));
}

void Backend::decode_16(float* out, const void* wire, int64_t n, DType dt, bool accumulate) {
  WEFT_CHECK(n >= 0, "{}: decode_16 of {} elements", name(), n);
  if (n == 0) return;
  std::vector<uint16_t> hw(static_cast<size_t>(n));
  std::vector<float> ho(static_cast<size_t>(n));
  copy_to_host(hw.data(), wire, 0, hw.size() * sizeof(uint16_t));
  if (accumulate) copy_to_host(ho.data(), out, 0, ho.size() * sizeof(float));
  cast_from_16_ref(ho.data(), hw.data(), n, dt, accumulate);
  copy_to_device(out, 0, ho.data(), ho.size() * sizeof(float));
}

}  // namespace weft
