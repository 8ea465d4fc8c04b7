// The whole backward pass of a 1x1 convolution on one pixel an image (a squeeze-and-excitation
// layer: a linear layer in convolution's clothes) in one kernel launch: the input gradient
// dx = dy . W, the weight gradient dW = dy^T . x and the bias gradient db = column sums of dy,
// where stock's call launches three kernels (cuDNN's two and ATen's reduction). Built by
// benchmarks/single_pixel_backward.py with nvcc; not part of the extension.
//
// Matrices, row-major: x [m][c], dy [m][k], W [k][c] (m: images, c: input channels, k: output
// channels); dx [m][c], dW [k][c], db [k]. fp16 or bf16 in, fp32 accumulation, outputs in the
// input's type. The launch's blocks take one of two roles: tiles of dx (64 x 32, the reduction
// over k split `split_k` ways) and tiles of dW with their share of db (64 x 32, the reduction
// over m split `split_m` ways). A split tile's slices go to an fp32 workspace, and the slice
// that arrives last (an atomic counter per tile) adds them in slice order and writes the tile:
// the result does not depend on which block finishes last, and the counter is reset for the next
// launch.
#include "kernels/element_types.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace {

using torch_cudnn_algo::kernels::from_acc;
using torch_cudnn_algo::kernels::to_acc;

constexpr int kThreads = 256;
constexpr int kRowsPerThread = 8;  // 256 threads as 8 warps of 32 columns: 8 x 8 = 64 rows
constexpr int kTileRows = 64;      // dx rows (images) or dW rows (output channels) per tile
constexpr int kTileCols = 32;      // input channels per tile
constexpr int kChunk = 32;         // reduction elements staged per step
constexpr int kPad = 1;            // shared-memory row padding against bank conflicts

struct Problem {
  long long m;
  int k, c;
  int split_k, split_m;
  long long k_slice, m_slice;  // reduction elements per slice (the last may hold fewer)
  int dx_tiles_m, tiles_c, dw_tiles_k;
  long long dx_blocks;  // blocks of the dx role; the rest take the dW role
  bool bias;
};

// Adds this block's slice to the tile's (or, unsplit, is the tile): returns true in the block
// that must write the tile, after every slice is visible to it.
__device__ bool last_slice(int* counter, int slices) {
  __shared__ bool last;
  if (slices == 1) return true;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == slices - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

template <typename T>
__device__ void dx_tile(const Problem& p, long long block, const T* __restrict__ dy, const T* __restrict__ w,
                        T* __restrict__ dx, float* __restrict__ partial, int* counters, float* a, float* b) {
  const int slice = static_cast<int>(block % p.split_k);
  block /= p.split_k;
  const int col_tile = static_cast<int>(block % p.tiles_c);
  const long long row_tile = block / p.tiles_c;
  const long long m0 = row_tile * kTileRows;
  const int c0 = col_tile * kTileCols;
  const long long k_begin = slice * p.k_slice;
  const long long k_end = k_begin + p.k_slice < p.k ? k_begin + p.k_slice : p.k;
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  float acc[kRowsPerThread] = {};
  for (long long kb = k_begin; kb < k_end; kb += kChunk) {
    for (int i = threadIdx.x; i < kTileRows * kChunk; i += kThreads) {  // dy [64 rows][32 k]
      const int r = i / kChunk, q = i % kChunk;
      const long long m = m0 + r, kk = kb + q;
      a[r * (kChunk + kPad) + q] = m < p.m && kk < k_end ? to_acc(dy[m * p.k + kk]) : 0.f;
    }
    for (int i = threadIdx.x; i < kChunk * kTileCols; i += kThreads) {  // W [32 k][32 c]
      const int r = i / kTileCols, q = i % kTileCols;
      const long long kk = kb + r;
      const int cc = c0 + q;
      b[r * (kTileCols + kPad) + q] = kk < k_end && cc < p.c ? to_acc(w[kk * p.c + cc]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int q = 0; q < kChunk; ++q) {
      const float wv = b[q * (kTileCols + kPad) + tx];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) acc[r] += a[(ty + 8 * r) * (kChunk + kPad) + q] * wv;
    }
    __syncthreads();
  }
  const int c = c0 + tx;
  const long long slice_elems = p.m * p.c;
  if (p.split_k > 1) {
    for (int r = 0; r < kRowsPerThread; ++r) {
      const long long m = m0 + ty + 8 * r;
      if (m < p.m && c < p.c) partial[slice * slice_elems + m * p.c + c] = acc[r];
    }
  }
  int* counter = counters + row_tile * p.tiles_c + col_tile;
  if (!last_slice(counter, p.split_k)) return;
  for (int r = 0; r < kRowsPerThread; ++r) {
    const long long m = m0 + ty + 8 * r;
    if (m >= p.m || c >= p.c) continue;
    float sum = acc[r];
    if (p.split_k > 1) {
      sum = 0.f;
#pragma unroll 4
      for (int s = 0; s < p.split_k; ++s) sum += __ldcg(partial + s * slice_elems + m * p.c + c);
    }
    dx[m * p.c + c] = from_acc<T>(sum);
  }
  if (p.split_k > 1 && threadIdx.x == 0) *counter = 0;
}

template <typename T>
__device__ void dw_tile(const Problem& p, long long block, const T* __restrict__ x, const T* __restrict__ dy,
                        T* __restrict__ dw, T* __restrict__ db, float* __restrict__ partial,
                        float* __restrict__ bias_partial, int* counters, float* a, float* b) {
  const int slice = static_cast<int>(block % p.split_m);
  block /= p.split_m;
  const int col_tile = static_cast<int>(block % p.tiles_c);
  const int row_tile = static_cast<int>(block / p.tiles_c);
  const int k0 = row_tile * kTileRows;
  const int c0 = col_tile * kTileCols;
  const long long m_begin = slice * p.m_slice;
  const long long m_end = m_begin + p.m_slice < p.m ? m_begin + p.m_slice : p.m;
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  const bool bias_here = p.bias && col_tile == 0;  // the first column tile also sums db's rows
  float acc[kRowsPerThread] = {};
  float bias_acc = 0.f;
  for (long long mb = m_begin; mb < m_end; mb += kChunk) {
    for (int i = threadIdx.x; i < kChunk * kTileRows; i += kThreads) {  // dy [32 m][64 k]
      const int q = i / kTileRows, r = i % kTileRows;
      const long long m = mb + q;
      const int kk = k0 + r;
      a[q * (kTileRows + kPad) + r] = m < m_end && kk < p.k ? to_acc(dy[m * p.k + kk]) : 0.f;
    }
    for (int i = threadIdx.x; i < kChunk * kTileCols; i += kThreads) {  // x [32 m][32 c]
      const int q = i / kTileCols, t = i % kTileCols;
      const long long m = mb + q;
      const int cc = c0 + t;
      b[q * (kTileCols + kPad) + t] = m < m_end && cc < p.c ? to_acc(x[m * p.c + cc]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int q = 0; q < kChunk; ++q) {
      const float xv = b[q * (kTileCols + kPad) + tx];
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) acc[r] += a[q * (kTileRows + kPad) + ty + 8 * r] * xv;
    }
    if (bias_here && threadIdx.x < kTileRows) {
      for (int q = 0; q < kChunk; ++q) bias_acc += a[q * (kTileRows + kPad) + threadIdx.x];
    }
    __syncthreads();
  }
  const int c = c0 + tx;
  const long long slice_elems = static_cast<long long>(p.k) * p.c;
  if (p.split_m > 1) {
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int k = k0 + ty + 8 * r;
      if (k < p.k && c < p.c) partial[slice * slice_elems + static_cast<long long>(k) * p.c + c] = acc[r];
    }
    if (bias_here && threadIdx.x < kTileRows && k0 + threadIdx.x < p.k) {
      bias_partial[static_cast<long long>(slice) * p.k + k0 + threadIdx.x] = bias_acc;
    }
  }
  int* counter = counters + static_cast<long long>(p.dx_tiles_m) * p.tiles_c + row_tile * p.tiles_c + col_tile;
  if (!last_slice(counter, p.split_m)) return;
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int k = k0 + ty + 8 * r;
    if (k >= p.k || c >= p.c) continue;
    float sum = acc[r];
    if (p.split_m > 1) {
      sum = 0.f;
#pragma unroll 4
      for (int s = 0; s < p.split_m; ++s) sum += __ldcg(partial + s * slice_elems + static_cast<long long>(k) * p.c + c);
    }
    dw[static_cast<long long>(k) * p.c + c] = from_acc<T>(sum);
  }
  if (bias_here && threadIdx.x < kTileRows && k0 + threadIdx.x < p.k) {
    float sum = bias_acc;
    if (p.split_m > 1) {
      sum = 0.f;
#pragma unroll 4
      for (int s = 0; s < p.split_m; ++s) sum += __ldcg(bias_partial + static_cast<long long>(s) * p.k + k0 + threadIdx.x);
    }
    db[k0 + threadIdx.x] = from_acc<T>(sum);
  }
  if (p.split_m > 1 && threadIdx.x == 0) *counter = 0;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    single_pixel_backward(Problem p, const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ w,
                          T* __restrict__ dx, T* __restrict__ dw, T* __restrict__ db, float* dx_partial,
                          float* dw_partial, float* bias_partial, int* counters) {
  __shared__ float a[kTileRows * (kChunk + kPad) > kChunk * (kTileRows + kPad) ? kTileRows * (kChunk + kPad)
                                                                                : kChunk * (kTileRows + kPad)];
  __shared__ float b[kChunk * (kTileCols + kPad)];
  const long long block = blockIdx.x;
  if (block < p.dx_blocks) {
    dx_tile(p, block, dy, w, dx, dx_partial, counters, a, b);
  } else {
    dw_tile(p, block - p.dx_blocks, x, dy, dw, db, dw_partial, bias_partial, counters, a, b);
  }
}

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// The launch's shape, or false where the splits do not fit the problem.
bool plan(long long m, int k, int c, int split_k, int split_m, bool bias, Problem& p) {
  if (m < 1 || k < 1 || c < 1 || split_k < 1 || split_m < 1) return false;
  p.m = m, p.k = k, p.c = c, p.split_k = split_k, p.split_m = split_m, p.bias = bias;
  p.k_slice = ceil_div(k, split_k);
  p.m_slice = ceil_div(m, split_m);
  // Every slice must hold some of the reduction, or its tile would wait on a slice never written.
  if ((split_k - 1) * p.k_slice >= k || (split_m - 1) * p.m_slice >= m) return false;
  p.dx_tiles_m = static_cast<int>(ceil_div(m, kTileRows));
  p.tiles_c = static_cast<int>(ceil_div(c, kTileCols));
  p.dw_tiles_k = static_cast<int>(ceil_div(k, kTileRows));
  p.dx_blocks = static_cast<long long>(p.dx_tiles_m) * p.tiles_c * split_k;
  return true;
}

struct Workspace {
  long long dx_floats, dw_floats, bias_floats, counters;
  long long bytes() const { return (dx_floats + dw_floats + bias_floats) * 4 + counters * 4; }
};

Workspace workspace_of(const Problem& p) {
  Workspace w;
  w.dx_floats = p.split_k > 1 ? p.split_k * p.m * p.c : 0;
  w.dw_floats = p.split_m > 1 ? static_cast<long long>(p.split_m) * p.k * p.c : 0;
  w.bias_floats = p.split_m > 1 && p.bias ? static_cast<long long>(p.split_m) * p.k : 0;
  w.counters = static_cast<long long>(p.dx_tiles_m) * p.tiles_c + static_cast<long long>(p.dw_tiles_k) * p.tiles_c;
  return w;
}

template <typename T>
int run_t(const Problem& p, const void* x, const void* dy, const void* w, void* dx, void* dw, void* db,
          void* workspace, cudaStream_t stream) {
  const Workspace layout = workspace_of(p);
  auto* floats = static_cast<float*>(workspace);
  float* dx_partial = floats;
  float* dw_partial = dx_partial + layout.dx_floats;
  float* bias_partial = dw_partial + layout.dw_floats;
  int* counters = reinterpret_cast<int*>(bias_partial + layout.bias_floats);
  const long long blocks = p.dx_blocks + static_cast<long long>(p.dw_tiles_k) * p.tiles_c * p.split_m;
  single_pixel_backward<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      p, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx),
      static_cast<T*>(dw), static_cast<T*>(db), dx_partial, dw_partial, bias_partial, counters);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" {

// Workspace bytes the call needs (its last `counters` ints zeroed once before the first call;
// every call leaves them zero); -1 where the splits do not fit the problem.
long long spb_workspace(long long m, int k, int c, int split_k, int split_m, int bias) {
  Problem p;
  if (!plan(m, k, c, split_k, split_m, bias != 0, p)) return -1;
  return workspace_of(p).bytes();
}

// Bytes at the workspace's end that hold the tiles' counters.
long long spb_counter_bytes(long long m, int k, int c, int split_k, int split_m, int bias) {
  Problem p;
  if (!plan(m, k, c, split_k, split_m, bias != 0, p)) return -1;
  return workspace_of(p).counters * 4;
}

// dtype 0: fp16, 1: bf16. db may be null when bias is 0. Returns a CUDA error code, or -1 where
// the splits do not fit the problem.
int spb_backward(int dtype, long long m, int k, int c, int split_k, int split_m, int bias, const void* x,
                 const void* dy, const void* w, void* dx, void* dw, void* db, void* workspace, void* stream) {
  Problem p;
  if (!plan(m, k, c, split_k, split_m, bias != 0, p)) return -1;
  auto st = static_cast<cudaStream_t>(stream);
  return dtype == 0 ? run_t<__half>(p, x, dy, w, dx, dw, db, workspace, st)
                    : run_t<__nv_bfloat16>(p, x, dy, w, dx, dw, db, workspace, st);
}

}  // extern "C"
