// Emulation stand-in (host only) for mma.sync m16n8k16 (csrc/kernels/mma_sync.cuh):
// every lane posts its fragments, the warp meets, each lane computes its own
// four D elements from all lanes' fragments (the PTX ISA's layout, written out
// below independently of the kernel's), and the warp meets again before any
// lane posts the next. Blocks run one at a time, so one board per warp index
// serves every block.
#pragma once
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <cstdint>
#include <cstring>
#include <type_traits>

inline uint32_t emu_mma_a[32][32][4], emu_mma_b[32][32][2];

template <class T>
float emu_mma_value(uint32_t word, int half) {
  const uint16_t bits = static_cast<uint16_t>(word >> (16 * half));
  if constexpr (std::is_same_v<T, __half>) {
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
  } else {
    __nv_bfloat16 h;
    std::memcpy(&h, &bits, 2);
    return __bfloat162float(h);
  }
}

template <class T>
void emu_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::memcpy(emu_mma_a[warp][lane], a, sizeof a);
  std::memcpy(emu_mma_b[warp][lane], b, sizeof b);
  __syncwarp();
  // A[row][col]: lane (row % 8) * 4 + (col % 8) / 2, register (row >= 8) + 2 (col >= 8), half col % 2.
  auto A = [&](int row, int col) {
    return emu_mma_value<T>(emu_mma_a[warp][(row % 8) * 4 + (col % 8) / 2][(row >= 8) + 2 * (col >= 8)], col % 2);
  };
  // B[k][n]: lane n * 4 + (k % 8) / 2, register k >= 8, half k % 2.
  auto B = [&](int k, int n) { return emu_mma_value<T>(emu_mma_b[warp][n * 4 + (k % 8) / 2][k >= 8], k % 2); };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
    float s = d[i];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    out[i] = s;
  }
  __syncwarp();
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}
