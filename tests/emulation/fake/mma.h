// Emulation stand-in (host only) for nvcuda::wmma m16n16k16: every lane holds
// the whole tile; lane 0 alone loads, multiplies and stores (the others' copies
// are never stored). Asserts wmma's rules: 256-bit aligned pointers, ldm a
// multiple of 16 bytes, the tile inside the block's shared memory.
#pragma once
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float x[256];
};
inline float emu_value(__half v) { return __half2float(v); }
inline float emu_value(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class Use, class T>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, row_major>& f, const T* p, unsigned ldm) {
  emu_check_shared_tile(p, ldm, sizeof(T), "load_matrix_sync");
  if (threadIdx.x % 32 != 0) return;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.x[i * 16 + j] = emu_value(p[i * ldm + j]);
}
// Column major: element (i, j) at p[j * ldm + i]; the fragment holds it at [i][j] as a row-major one does.
template <class Use, class T>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, col_major>& f, const T* p, unsigned ldm) {
  emu_check_shared_tile(p, ldm, sizeof(T), "load_matrix_sync");
  if (threadIdx.x % 32 != 0) return;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) f.x[i * 16 + j] = emu_value(p[j * ldm + i]);
}
template <class T, class ALayout>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, ALayout>& a,
              const fragment<matrix_b, 16, 16, 16, T, row_major>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  if (threadIdx.x % 32 != 0) return;
  float out[256];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float s = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) s += a.x[i * 16 + k] * b.x[k * 16 + j];
      out[i * 16 + j] = s;
    }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
  emu_check_shared_tile(p, ldm, sizeof(float), "store_matrix_sync");
  if (layout != mem_row_major) emu_fail("store_matrix_sync: not row major");
  if (threadIdx.x % 32 != 0) return;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) p[i * ldm + j] = f.x[i * 16 + j];
}
template <class F>
void fill_fragment(F& f, float v) {
  for (float& e : f.x) e = v;
}
}  // namespace nvcuda::wmma
