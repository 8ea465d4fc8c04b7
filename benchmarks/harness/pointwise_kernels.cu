// The candidate kernels of benchmarks/pointwise_backward.py, not part of the extension: a 1x1
// convolution's (stride 1, one group, channels_last) backward pass with both gradients from one
// read of dy, and its forward pass, on tensor cores. As matrices over the M = N*H*W pixels:
// x [M][C], dy [M][K], weight [K][C];
//   y  = x . weight^T       [M][K]   (forward)
//   dx = dy . weight        [M][C]   (written once, tile by tile)
//   dw = dy^T . x           [K][C]   (a small result over a reduction of M)
// A block takes tiles of 64 or 128 pixels (kTileM) in turn (grid-stride), copies the tile's rows
// into shared memory (cp.async, two buffers: the next tile's copies in flight behind this tile's
// products) and multiplies them by the weight (staged once). The backward kernel also adds
// dy^T x into fp32 accumulators that stay in registers across all its tiles; each block then
// writes one slice of dw partials, and a second kernel adds the slices in a fixed order
// (deterministic, no atomics). fp16/bf16 in, fp32 accumulation (wmma 16x16x16); K and C
// multiples of 8.
#include "kernels/element_types.h"
#include "kernels/slice_sum.cuh"
#include "dense_store.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

namespace {

using torch_cudnn_algo::kernels::from_acc;
using torch_cudnn_algo::kernels::to_acc;
using torch_cudnn_algo::kernels::launch_sum_slices;

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kSkew = 8;                // elements added to each staged row (banks; wmma's ldm rule)
constexpr int kMaxDwFragments = 6;      // dw's 16x16 result tiles a warp holds
constexpr int kScratchLd = 16 + 4;      // floats, a warp's accumulator scratch row

struct Geometry {
  int64_t m;       // pixels
  int k, c;        // dy's and x's channels
  int kp, cp;      // padded to 16
  int dy_ld, x_ld, w_ld;  // staged row strides, elements
  int tile_m;      // pixels a tile (64 or 128)
};

__device__ __forceinline__ void copy16(void* dst, const void* src, bool in) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(in ? 16 : 0));
}

inline size_t shared_bytes(const Geometry& g) {
  const size_t stage = static_cast<size_t>(g.tile_m) * (g.dy_ld + g.x_ld) * 2;
  const size_t weight = static_cast<size_t>(g.kp) * g.w_ld * 2;
  const size_t scratch = static_cast<size_t>(kWarps) * 16 * kScratchLd * sizeof(float);
  return 2 * stage + weight + scratch;
}

template <typename T, int kDwPerWarp, int kTileM>
__global__ void __launch_bounds__(kThreads)
    pointwise_backward(Geometry g, const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ wt,
                       T* __restrict__ dx, float* __restrict__ partial) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stage_elements = static_cast<size_t>(kTileM) * (g.dy_ld + g.x_ld);
  T* const stages = reinterpret_cast<T*>(smem);                      // [2][dy tile, x tile]
  T* const ws = stages + 2 * stage_elements;                          // [kp][w_ld]
  float* const scratch = reinterpret_cast<float*>(ws + static_cast<size_t>(g.kp) * g.w_ld) +
                         warp * 16 * kScratchLd;

  // Zero everything once: the padding rows and columns stay zero, the copies never touch them.
  for (size_t e = threadIdx.x; e < (2 * stage_elements + static_cast<size_t>(g.kp) * g.w_ld) / 8; e += kThreads)
    reinterpret_cast<uint4*>(smem)[e] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  // The weight, [k][c], once.
  const int w_vectors = g.c / 8;
  for (int v = threadIdx.x; v < g.k * w_vectors; v += kThreads) {
    const int row = v / w_vectors, col = (v - row * w_vectors) * 8;
    copy16(ws + static_cast<size_t>(row) * g.w_ld + col, wt + static_cast<int64_t>(row) * g.c + col, true);
  }
  asm volatile("cp.async.commit_group;\n" ::);

  const int64_t tiles = (g.m + kTileM - 1) / kTileM;
  const int dy_vectors = g.k / 8, x_vectors = g.c / 8;
  auto stage_tile = [&](int64_t t, int b) {
    T* const dys = stages + b * stage_elements;
    T* const xs = dys + static_cast<size_t>(kTileM) * g.dy_ld;
    const int64_t m0 = t * kTileM;
    for (int v = threadIdx.x; v < kTileM * dy_vectors; v += kThreads) {
      const int row = v / dy_vectors, col = (v - row * dy_vectors) * 8;
      const bool in = m0 + row < g.m;
      copy16(dys + row * g.dy_ld + col, in ? dy + (m0 + row) * g.k + col : dy, in);
    }
    for (int v = threadIdx.x; v < kTileM * x_vectors; v += kThreads) {
      const int row = v / x_vectors, col = (v - row * x_vectors) * 8;
      const bool in = m0 + row < g.m;
      copy16(xs + row * g.x_ld + col, in ? x + (m0 + row) * g.c + col : x, in);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  // dw's result tiles this warp owns: fragment warp + kWarps * f.
  const int kf = g.kp / 16, cf = g.cp / 16;
  const int dw_fragments = kf * cf;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kDwPerWarp];
#pragma unroll
  for (int f = 0; f < kDwPerWarp; ++f) wmma::fill_fragment(acc[f], 0.0f);

  int b = 0;
  if (blockIdx.x < tiles) stage_tile(blockIdx.x, 0);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x, b ^= 1) {
    if (t + gridDim.x < tiles) {
      stage_tile(t + gridDim.x, b ^ 1);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const T* const dys = stages + b * stage_elements;
    const T* const xs = dys + static_cast<size_t>(kTileM) * g.dy_ld;
    const int64_t m0 = t * kTileM;

    // dw += dy^T x: A = dy^T (dy's rows read column-major), B = x.
#pragma unroll
    for (int f = 0; f < kDwPerWarp; ++f) {
      const int fragment = warp + f * kWarps;
      if (fragment >= dw_fragments) break;
      const int kt = fragment / cf, ct = fragment - kt * cf;
#pragma unroll
      for (int pb = 0; pb < kTileM / 16; ++pb) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bm;
        wmma::load_matrix_sync(a, dys + pb * 16 * g.dy_ld + kt * 16, g.dy_ld);
        wmma::load_matrix_sync(bm, xs + pb * 16 * g.x_ld + ct * 16, g.x_ld);
        wmma::mma_sync(acc[f], a, bm, acc[f]);
      }
    }

    // dx = dy . weight for the tile: (kTileM / 16) x cf result tiles over the warps.
    for (int tile = warp; tile < (kTileM / 16) * cf; tile += kWarps) {
      const int pt = tile / cf, ct = tile - pt * cf;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> out;
      wmma::fill_fragment(out, 0.0f);
      for (int kt = 0; kt < kf; ++kt) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bm;
        wmma::load_matrix_sync(a, dys + pt * 16 * g.dy_ld + kt * 16, g.dy_ld);
        wmma::load_matrix_sync(bm, ws + kt * 16 * g.w_ld + ct * 16, g.w_ld);
        wmma::mma_sync(out, a, bm, out);
      }
      wmma::store_matrix_sync(scratch, out, kScratchLd, wmma::mem_row_major);
      __syncwarp();
      // Lane l writes row l / 2, channels (l % 2) * 8 .. + 8: one 16-byte store.
      const int row = lane / 2, col = ct * 16 + (lane % 2) * 8;
      const int64_t pixel = m0 + pt * 16 + row;
      if (pixel < g.m && col < g.c) {
        alignas(16) T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = from_acc<T>(scratch[row * kScratchLd + (lane % 2) * 8 + e]);
        *reinterpret_cast<uint4*>(dx + pixel * g.c + col) = *reinterpret_cast<const uint4*>(v);
      }
      __syncwarp();
    }
    __syncthreads();  // buffer b is free for the tile after next
  }

  // One slice of dw partials, [k][c] fp32, rows past k and columns past c left out.
  float* const slice = partial + static_cast<int64_t>(blockIdx.x) * g.k * g.c;
#pragma unroll
  for (int f = 0; f < kDwPerWarp; ++f) {
    const int fragment = warp + f * kWarps;
    if (fragment >= dw_fragments) break;
    const int kt = fragment / cf, ct = fragment - kt * cf;
    wmma::store_matrix_sync(scratch, acc[f], kScratchLd, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = e / 16, col = e % 16;
      const int kk = kt * 16 + r, cc = ct * 16 + col;
      if (kk < g.k && cc < g.c) slice[kk * g.c + cc] = scratch[r * kScratchLd + col];
    }
    __syncwarp();
  }
}

// The forward pass, y [m][k] = x [m][c] . weight^T, for the benchmark's forward table: a block
// takes tiles of kTileM pixels in turn (x through the same two-buffer copies), the weight staged
// once and read as weight^T by column-major fragments.
template <typename T, int kTileM>
__global__ void __launch_bounds__(kThreads)
    pointwise_forward(Geometry g, const T* __restrict__ x, const T* __restrict__ wt, T* __restrict__ y) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t stage_elements = static_cast<size_t>(kTileM) * g.x_ld;
  T* const stages = reinterpret_cast<T*>(smem);  // [2][x tile]
  T* const ws = stages + 2 * stage_elements;      // [kp][w_ld]
  float* const scratch = reinterpret_cast<float*>(ws + static_cast<size_t>(g.kp) * g.w_ld) +
                         warp * 16 * kScratchLd;
  for (size_t e = threadIdx.x; e < (2 * stage_elements + static_cast<size_t>(g.kp) * g.w_ld) / 8; e += kThreads)
    reinterpret_cast<uint4*>(smem)[e] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  const int c_vectors = g.c / 8;
  for (int v = threadIdx.x; v < g.k * c_vectors; v += kThreads) {
    const int row = v / c_vectors, col = (v - row * c_vectors) * 8;
    copy16(ws + static_cast<size_t>(row) * g.w_ld + col, wt + static_cast<int64_t>(row) * g.c + col, true);
  }
  asm volatile("cp.async.commit_group;\n" ::);

  const int64_t tiles = (g.m + kTileM - 1) / kTileM;
  auto stage_tile = [&](int64_t t, int b) {
    T* const xs = stages + b * stage_elements;
    const int64_t m0 = t * kTileM;
    for (int v = threadIdx.x; v < kTileM * c_vectors; v += kThreads) {
      const int row = v / c_vectors, col = (v - row * c_vectors) * 8;
      const bool in = m0 + row < g.m;
      copy16(xs + row * g.x_ld + col, in ? x + (m0 + row) * g.c + col : x, in);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  const int kf = g.kp / 16, cf = g.cp / 16;
  int b = 0;
  if (blockIdx.x < tiles) stage_tile(blockIdx.x, 0);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x, b ^= 1) {
    if (t + gridDim.x < tiles) {
      stage_tile(t + gridDim.x, b ^ 1);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const T* const xs = stages + b * stage_elements;
    const int64_t m0 = t * kTileM;
    for (int tile = warp; tile < (kTileM / 16) * kf; tile += kWarps) {
      const int pt = tile / kf, kt = tile - pt * kf;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> out;
      wmma::fill_fragment(out, 0.0f);
      for (int ct = 0; ct < cf; ++ct) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bm;  // weight^T
        wmma::load_matrix_sync(a, xs + pt * 16 * g.x_ld + ct * 16, g.x_ld);
        wmma::load_matrix_sync(bm, ws + kt * 16 * g.w_ld + ct * 16, g.w_ld);
        wmma::mma_sync(out, a, bm, out);
      }
      wmma::store_matrix_sync(scratch, out, kScratchLd, wmma::mem_row_major);
      __syncwarp();
      const int row = lane / 2, col = kt * 16 + (lane % 2) * 8;
      const int64_t pixel = m0 + pt * 16 + row;
      if (pixel < g.m && col < g.k) {
        alignas(16) T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = from_acc<T>(scratch[row * kScratchLd + (lane % 2) * 8 + e]);
        *reinterpret_cast<uint4*>(y + pixel * g.k + col) = *reinterpret_cast<const uint4*>(v);
      }
      __syncwarp();
    }
    __syncthreads();
  }
}

struct Launch {
  Geometry g;
  int slices, per_warp;
  size_t smem;
};

bool plan(int64_t m, int k, int c, int sms, int blocks_per_sm, int tile_m, Launch& out) {
  if ((tile_m != 64 && tile_m != 128) || m < 1 || k < 8 || c < 8 || k % 8 || c % 8) return false;
  Geometry g{};
  g.m = m; g.k = k; g.c = c; g.tile_m = tile_m;
  g.kp = (k + 15) / 16 * 16;
  g.cp = (c + 15) / 16 * 16;
  g.dy_ld = g.kp + kSkew;
  g.x_ld = g.cp + kSkew;
  g.w_ld = g.cp + kSkew;
  const int fragments = (g.kp / 16) * (g.cp / 16);
  out.per_warp = (fragments + kWarps - 1) / kWarps;
  if (out.per_warp > kMaxDwFragments) return false;
  out.per_warp = out.per_warp <= 2 ? 2 : out.per_warp <= 4 ? 4 : 6;
  out.g = g;
  out.smem = shared_bytes(g);
  if (out.smem > 200 * 1024) return false;
  const int64_t tiles = (m + tile_m - 1) / tile_m;
  out.slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{sms} * blocks_per_sm)));
  return true;
}

template <typename T, int kDwPerWarp, int kTileM>
int run(const Launch& l, const void* x, const void* dy, const void* wt, void* dx, void* dw, float* workspace,
        cudaStream_t stream) {
  auto kernel = pointwise_backward<T, kDwPerWarp, kTileM>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
  kernel<<<l.slices, kThreads, l.smem, stream>>>(l.g, static_cast<const T*>(x), static_cast<const T*>(dy),
                                                 static_cast<const T*>(wt), static_cast<T*>(dx), workspace);
  const int elements = l.g.k * l.g.c;
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) return static_cast<int>(error);
  return static_cast<int>(launch_sum_slices(static_cast<const float*>(workspace), l.slices, elements,
                                            DenseStore<T>{static_cast<T*>(dw)}, stream));
}

template <typename T>
int run_t(const Launch& l, const void* x, const void* dy, const void* wt, void* dx, void* dw, float* workspace,
          cudaStream_t stream) {
  if (l.g.tile_m == 64) {
    if (l.per_warp == 2) return run<T, 2, 64>(l, x, dy, wt, dx, dw, workspace, stream);
    if (l.per_warp == 4) return run<T, 4, 64>(l, x, dy, wt, dx, dw, workspace, stream);
    return run<T, 6, 64>(l, x, dy, wt, dx, dw, workspace, stream);
  }
  if (l.per_warp == 2) return run<T, 2, 128>(l, x, dy, wt, dx, dw, workspace, stream);
  if (l.per_warp == 4) return run<T, 4, 128>(l, x, dy, wt, dx, dw, workspace, stream);
  return run<T, 6, 128>(l, x, dy, wt, dx, dw, workspace, stream);
}

struct ForwardLaunch {
  Geometry g;
  int blocks;
  size_t smem;
};

bool plan_forward(int64_t m, int k, int c, int sms, int blocks_per_sm, int tile_m, ForwardLaunch& out) {
  if ((tile_m != 64 && tile_m != 128) || m < 1 || k < 8 || c < 8 || k % 8 || c % 8) return false;
  Geometry g{};
  g.m = m; g.k = k; g.c = c; g.tile_m = tile_m;
  g.kp = (k + 15) / 16 * 16;
  g.cp = (c + 15) / 16 * 16;
  g.x_ld = g.cp + kSkew;
  g.w_ld = g.cp + kSkew;
  out.g = g;
  out.smem = 2 * static_cast<size_t>(tile_m) * g.x_ld * 2 + static_cast<size_t>(g.kp) * g.w_ld * 2 +
             static_cast<size_t>(kWarps) * 16 * kScratchLd * sizeof(float);
  if (out.smem > 200 * 1024) return false;
  const int64_t tiles = (m + tile_m - 1) / tile_m;
  out.blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, int64_t{sms} * blocks_per_sm)));
  return true;
}

template <typename T, int kTileM>
int run_forward(const ForwardLaunch& l, const void* x, const void* wt, void* y, cudaStream_t stream) {
  auto kernel = pointwise_forward<T, kTileM>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
  kernel<<<l.blocks, kThreads, l.smem, stream>>>(l.g, static_cast<const T*>(x), static_cast<const T*>(wt),
                                                  static_cast<T*>(y));
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int run_forward_t(const ForwardLaunch& l, const void* x, const void* wt, void* y, cudaStream_t stream) {
  return l.g.tile_m == 64 ? run_forward<T, 64>(l, x, wt, y, stream) : run_forward<T, 128>(l, x, wt, y, stream);
}

}  // namespace

extern "C" {

// Workspace bytes (the dw partials) the call needs; -1 where the kernel does not apply.
long long pw_backward_workspace(long long m, int k, int c, int sms, int blocks_per_sm, int tile_m) {
  Launch l;
  if (!plan(m, k, c, sms, blocks_per_sm, tile_m, l)) return -1;
  return static_cast<long long>(l.slices) * k * c * sizeof(float);
}

// dtype 0: fp16, 1: bf16. x [m][c], dy [m][k], weight [k][c], dx [m][c], dw [k][c], all
// 16-byte aligned. Returns a CUDA error code, or -1 where the kernel does not apply.
int pw_backward(int dtype, long long m, int k, int c, int sms, int blocks_per_sm, int tile_m, const void* x,
                const void* dy, const void* wt, void* dx, void* dw, void* workspace, void* stream) {
  Launch l;
  if (!plan(m, k, c, sms, blocks_per_sm, tile_m, l)) return -1;
  auto st = static_cast<cudaStream_t>(stream);
  auto ws = static_cast<float*>(workspace);
  return dtype == 0 ? run_t<__half>(l, x, dy, wt, dx, dw, ws, st) : run_t<__nv_bfloat16>(l, x, dy, wt, dx, dw, ws, st);
}

// The forward pass: y [m][k] = x [m][c] . weight^T ([k][c]). Returns a CUDA error code, or -1
// where the kernel does not apply.
int pw_forward(int dtype, long long m, int k, int c, int sms, int blocks_per_sm, int tile_m, const void* x,
               const void* wt, void* y, void* stream) {
  ForwardLaunch l;
  if (!plan_forward(m, k, c, sms, blocks_per_sm, tile_m, l)) return -1;
  auto st = static_cast<cudaStream_t>(stream);
  return dtype == 0 ? run_forward_t<__half>(l, x, wt, y, st) : run_forward_t<__nv_bfloat16>(l, x, wt, y, st);
}

}  // extern "C"
