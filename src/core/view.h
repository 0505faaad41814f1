// Typed views of device memory: {pointer, dtype}. What the backend's ops take for every tensor
// operand (backend/backend.h): the op reads the dtype of each operand and computes in fp32
// (a 16-bit operand widens exactly on read and rounds to nearest even on write). The shape is
// the op's other arguments (its letters: N, C, ...), as in llm.c.
//
//   View out{ptr, DType::kBF16};     // a bf16 tensor
//   be.add(out, a, b, n);            // a, b: float* convert to f32 views implicitly
//   View row = out.at(i * C);        // an interior view, i * C elements further
//
// A float* converts implicitly to an f32 view (and nullptr to a null view), so code written
// for fp32 tensors calls the typed ops unchanged. Views do not own memory (backend/device_buffer.h
// does) and are not dereferenced above the backend: data is a DEVICE pointer.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace weft {

// Bytes of i elements of dt (whole bytes: not for int4).
inline size_t view_offset(DType dt, int64_t i) {
  return static_cast<size_t>(i) * static_cast<size_t>(dtype_bits(dt) / 8);
}

// A mutable view.
struct View {
  void* data = nullptr;
  DType dtype = DType::kF32;

  constexpr View() = default;
  constexpr View(std::nullptr_t) {}
  constexpr View(float* p) : data(p) {}
  constexpr View(void* p, DType t) : data(p), dtype(t) {}

  explicit operator bool() const { return data != nullptr; }
  bool f32() const { return dtype == DType::kF32; }
  // The view i elements further (i * element bytes; whole bytes only, so not for int4).
  View at(int64_t i) const { return {static_cast<char*>(data) + view_offset(dtype, i), dtype}; }
  // The fp32 pointer; InputError unless the view is f32 (or null).
  float* as_f32(const char* what = "tensor") const {
    if (data && dtype != DType::kF32) throw_input("{} is {}, where only f32 is supported", what, dtype_name(dtype));
    return static_cast<float*>(data);
  }
};

// A read-only view (a View converts to it).
struct CView {
  const void* data = nullptr;
  DType dtype = DType::kF32;

  constexpr CView() = default;
  constexpr CView(std::nullptr_t) {}
  constexpr CView(const float* p) : data(p) {}
  constexpr CView(const void* p, DType t) : data(p), dtype(t) {}
  constexpr CView(const View& v) : data(v.data), dtype(v.dtype) {}

  explicit operator bool() const { return data != nullptr; }
  bool f32() const { return dtype == DType::kF32; }
  CView at(int64_t i) const { return {static_cast<const char*>(data) + view_offset(dtype, i), dtype}; }
  const float* as_f32(const char* what = "tensor") const {
    if (data && dtype != DType::kF32) throw_input("{} is {}, where only f32 is supported", what, dtype_name(dtype));
    return static_cast<const float*>(data);
  }
};

// A view of n elements of storage precision p at data (f32, bf16 or f16).
inline View view_of(void* data, Precision p) { return {data, dtype_of(p)}; }

}  // namespace weft
