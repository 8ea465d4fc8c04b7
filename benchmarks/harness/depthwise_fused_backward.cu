// The candidate kernel of benchmarks/fused_backward.py: a depthwise NHWC backward pass that
// computes the input gradient and the filter gradient in one kernel, reading dy once for both
// (a layer's two backward calls each read it otherwise). Not part of the extension: the
// benchmark builds it with nvcc and measures it against cuDNN and our separate kernels.
//
// A block stages a tile of dy, with the halo the input gradient needs, and of x, with the halo
// the filter gradient needs, in shared memory (cp.async, two buffers: the next tile's copies
// overlap this tile's arithmetic), then writes the tile's dx (each element once, no atomics) and
// adds the tile's share of dw into fp32 registers. Each block ends by writing one slice of dw
// partials; a second kernel adds the slices in a fixed order, so the result is deterministic.
// fp16/bf16 in, fp32 accumulation; 3x3 and 5x5 filters, stride 1 or 2, dilation 1, channels a
// multiple of 8, "same"-style padding (every input row and column under some output's window).
// The channels a block takes (16, 32 or 64; the last block of a pixel takes the rest) are a
// compile-time constant, so that every shared-memory load's offset is an immediate: the kernel
// is bound by its instruction issue (Nsight Compute: ALU the busiest pipe, 2.6 instructions a
// cycle an SM, 4-5 instructions issued per multiply-add on the 3x3 layers), not by memory.
#include "kernels/element_types.h"
#include "kernels/slice_sum.cuh"
#include "dense_store.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace {

using torch_cudnn_algo::kernels::from_acc;
using torch_cudnn_algo::kernels::to_acc;
using torch_cudnn_algo::kernels::launch_sum_slices;

constexpr int kSkew = 8;  // halves added to each staged row: spreads rows over banks
constexpr int kStrip = 8;

__host__ __device__ inline int floordiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// 16 bytes global -> shared without registers; zeros where !in (src-size 0).
__device__ __forceinline__ void copy16(void* dst, const void* src, bool in) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(in ? 16 : 0));
}

// Issues the copies of a rows x cols region of pixels (cv 16-byte vectors each) whose top left
// is (row0, col0) of an extent_h x extent_w image (c channels a pixel, from base) into shared
// memory at dst (row stride dst_row, pixel stride dst_pixel elements); zeros outside the image.
// The thread's (row, column, vector) advances by the block's size with carries instead of
// divisions, which cost more than the copy itself.
template <int kThreads, typename T>
__device__ __forceinline__ void copy_region(T* dst, int dst_row, int rows, int cols, int cv, int dst_pixel,
                                            const T* base, int extent_h, int extent_w, int c, int row0, int col0) {
  const int pix0 = threadIdx.x / cv;
  int k = threadIdx.x - pix0 * cv, row = pix0 / cols, col = pix0 - row * cols;
  const int step_pixels = kThreads / cv, step_k = kThreads - step_pixels * cv;
  const int step_rows = step_pixels / cols, step_cols = step_pixels - step_rows * cols;
  while (row < rows) {
    const int gh = row0 + row, gw = col0 + col;
    const bool in = gh >= 0 && gh < extent_h && gw >= 0 && gw < extent_w;
    const T* src = in ? base + (static_cast<int64_t>(gh) * extent_w + gw) * c + k * 8 : base;
    copy16(dst + static_cast<size_t>(row) * dst_row + col * dst_pixel + k * 8, src, in);
    k += step_k;
    col += step_cols;
    if (k >= cv) { k -= cv; ++col; }
    row += step_rows;
    if (col >= cols) { col -= cols; ++row; }
  }
}

// Two channels as one 32-bit value, and their conversions to and from fp32.
template <typename T> struct Pair;
template <> struct Pair<__half> {
  using type = __half2;
  static __device__ float2 f(type v) { return __half22float2(v); }
  static __device__ type t(float2 v) { return __float22half2_rn(v); }
};
template <> struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ float2 f(type v) { return __bfloat1622float2(v); }
  static __device__ type t(float2 v) { return __float22bfloat162_rn(v); }
};

// One call's shapes, its launch choices and the shared-memory regions they give.
struct Geometry {
  int n, c, h, w, p, q, ph, pw;
  int tp, tq;          // dy tile rows, columns (tq a multiple of kStrip)
  int cw, chunks;      // channels a block takes (16, 32 or 64), blocks across C
  int tiles_p, tiles_q;
  int xr, xc, dr, dc;  // staged region extents
  int xrow, drow;      // staged row strides, elements
};

template <int KS, int S>
__host__ __device__ inline void regions(Geometry& g) {
  g.xr = (g.tp - 1) * S + KS;
  g.xc = (g.tq - 1) * S + KS;
  g.dr = (g.tp * S + KS - 2) / S + 3;
  g.dc = (g.tq * S + KS - 2) / S + 3;
  g.xrow = g.xc * g.cw + kSkew;
  g.drow = g.dc * g.cw + kSkew;
}

inline size_t shared_bytes(const Geometry& g, int ks, int kThreads) {
  const size_t stage = 2 * static_cast<size_t>(g.xr * g.xrow + g.dr * g.drow) * 2;
  const int pairs = g.cw / 2, groups = kThreads / pairs;
  const size_t reduce = static_cast<size_t>(groups) * ks * ks * g.cw * sizeof(float);
  const size_t weights = static_cast<size_t>(ks) * ks * g.cw * sizeof(float);
  return std::max(stage, reduce) + weights;
}

template <typename T, int KS, int S, int kThreads, int CW>
__global__ void __launch_bounds__(kThreads, 512 / kThreads)
    dw_backward_fused(Geometry g, const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ wt,
                      T* __restrict__ dx, float* __restrict__ partial) {
  using P2 = Pair<T>;
  using H2 = typename P2::type;
  extern __shared__ __align__(16) unsigned char smem[];
  const int chunk = blockIdx.y;
  const int c0 = chunk * CW, cw = min(CW, g.c - c0);
  constexpr int pairs = CW / 2, groups = kThreads / pairs;
  const int j = threadIdx.x % pairs, grp = threadIdx.x / pairs;
  const bool live = grp < groups && 2 * j < cw;
  T* const xs = reinterpret_cast<T*>(smem);
  const size_t stage = 2 * static_cast<size_t>(g.xr * g.xrow + g.dr * g.drow) * 2;
  const size_t reduce = static_cast<size_t>(groups) * KS * KS * CW * sizeof(float);
  float* const taps = reinterpret_cast<float*>(smem + (stage > reduce ? stage : reduce));
  for (int e = threadIdx.x; e < KS * KS * cw; e += kThreads) {
    const int cl = e / (KS * KS), tap = e % (KS * KS);
    taps[tap * CW + cl] = to_acc(wt[static_cast<int64_t>(c0 + cl) * KS * KS + tap]);
  }
  float2 acc[KS][KS];
#pragma unroll
  for (int r = 0; r < KS; ++r)
#pragma unroll
    for (int s = 0; s < KS; ++s) acc[r][s] = make_float2(0.f, 0.f);

  const int cv = cw / 8;  // 16-byte vectors per staged pixel
  const int64_t tiles = static_cast<int64_t>(g.n) * g.tiles_p * g.tiles_q;
  const size_t buffer = static_cast<size_t>(g.xr) * g.xrow + static_cast<size_t>(g.dr) * g.drow;  // elements
  // Issues the copies of tile t into buffer b (cp.async, zero-filled outside the tensors).
  auto stage_tile = [&](int64_t t, int b) {
    const int tq = static_cast<int>(t % g.tiles_q);
    const int tp = static_cast<int>((t / g.tiles_q) % g.tiles_p);
    const int n = static_cast<int>(t / (static_cast<int64_t>(g.tiles_q) * g.tiles_p));
    const int p0 = tp * g.tp, q0 = tq * g.tq;
    const int h0 = p0 * S, w0 = q0 * S;
    const int xr0 = p0 * S - g.ph, xc0 = q0 * S - g.pw;
    const int dr0 = floordiv(h0 + g.ph - (KS - 1), S), dc0 = floordiv(w0 + g.pw - (KS - 1), S);
    const T* const xn = x + static_cast<int64_t>(n) * g.h * g.w * g.c + c0;
    const T* const dyn = dy + static_cast<int64_t>(n) * g.p * g.q * g.c + c0;
    T* const xb = xs + b * buffer;
    T* const db = xb + static_cast<size_t>(g.xr) * g.xrow;
    copy_region<kThreads>(xb, g.xrow, g.xr, g.xc, cv, CW, xn, g.h, g.w, g.c, xr0, xc0);
    copy_region<kThreads>(db, g.drow, g.dr, g.dc, cv, CW, dyn, g.p, g.q, g.c, dr0, dc0);
    asm volatile("cp.async.commit_group;\n" ::);
  };
  int b = 0;
  if (blockIdx.x < tiles) stage_tile(blockIdx.x, 0);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x, b ^= 1) {
    if (t + gridDim.x < tiles) {
      stage_tile(t + gridDim.x, b ^ 1);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();  // tile t is in buffer b for every thread
    const int tq = static_cast<int>(t % g.tiles_q);
    const int tp = static_cast<int>((t / g.tiles_q) % g.tiles_p);
    const int n = static_cast<int>(t / (static_cast<int64_t>(g.tiles_q) * g.tiles_p));
    const int p0 = tp * g.tp, p1 = min(p0 + g.tp, g.p), q0 = tq * g.tq, q1 = min(q0 + g.tq, g.q);
    const int h0 = p0 * S, h1 = min(g.h, (p0 + g.tp) * S), w0 = q0 * S, w1 = min(g.w, (q0 + g.tq) * S);
    const int dr0 = floordiv(h0 + g.ph - (KS - 1), S), dc0 = floordiv(w0 + g.pw - (KS - 1), S);
    T* const xsb = xs + b * buffer;
    T* const dysb = xsb + static_cast<size_t>(g.xr) * g.xrow;
    if (live) {
    const H2* const xs2 = reinterpret_cast<const H2*>(xsb) + j;
    const H2* const dys2 = reinterpret_cast<const H2*>(dysb) + j;
    constexpr int ld = CW / 2;  // in pairs
    const int xrow2 = g.xrow / 2, drow2 = g.drow / 2;

    // The filter gradient: every dy pixel of [p0, p1) x [q0, q1) with its x window.
    const int strips_q = (q1 - q0 + kStrip - 1) / kStrip;
    for (int item = grp; item < (p1 - p0) * strips_q; item += groups) {
      const int pr = item % (p1 - p0), sq = item / (p1 - p0);
      const int p = p0 + pr, qs = q0 + sq * kStrip;
      // dy's strip; columns past the tile's end (staged halo, another tile's) count as zero.
      const H2* const dy_row = dys2 + (p - dr0) * drow2 + (qs - dc0) * ld;
      float2 d[kStrip];
#pragma unroll
      for (int jj = 0; jj < kStrip; ++jj) {
        const float2 v = P2::f(dy_row[jj * ld]);
        const bool inside = qs + jj < q1;
        d[jj] = make_float2(inside ? v.x : 0.f, inside ? v.y : 0.f);
      }
#pragma unroll
      for (int r = 0; r < KS; ++r) {
        constexpr int kWin = (kStrip - 1) * S + KS;
        const H2* const row = xs2 + (pr * S + r) * xrow2 + sq * kStrip * S * ld;
        float2 win[kWin];
#pragma unroll
        for (int u = 0; u < kWin; ++u) win[u] = P2::f(row[u * ld]);
#pragma unroll
        for (int jj = 0; jj < kStrip; ++jj)
#pragma unroll
          for (int s = 0; s < KS; ++s) {
            acc[r][s].x = fmaf(d[jj].x, win[jj * S + s].x, acc[r][s].x);
            acc[r][s].y = fmaf(d[jj].y, win[jj * S + s].y, acc[r][s].y);
          }
      }
    }

    // The input gradient of [h0, h1) x [w0, w1): every tap whose stride divides.
    const int strips_w = (w1 - w0 + kStrip - 1) / kStrip;
    for (int item = grp; item < (h1 - h0) * strips_w; item += groups) {
      const int hr = item % (h1 - h0), sw = item / (h1 - h0);
      const int h = h0 + hr, ws0 = w0 + sw * kStrip;
      float2 out[kStrip];
#pragma unroll
      for (int jj = 0; jj < kStrip; ++jj) out[jj] = make_float2(0.f, 0.f);
      const int t0 = ws0 + g.pw;
      const int phase = t0 % S;
      const int base = floordiv(t0 - (KS - 1), S);
      for (int r = (h + g.ph) % S; r < KS; r += S) {
        const int pr = (h + g.ph - r) / S;
        constexpr int kWin = (kStrip + KS - 2) / S + 2;
        const H2* const row = dys2 + (pr - dr0) * drow2 + (base - dc0) * ld;
        float2 win[kWin];
#pragma unroll
        for (int u = 0; u < kWin; ++u) win[u] = P2::f(row[u * ld]);
        float2 wr[KS];
#pragma unroll
        for (int s = 0; s < KS; ++s) wr[s] = *reinterpret_cast<const float2*>(taps + (r * KS + s) * CW + 2 * j);
        auto add = [&](auto phase_c) {
          constexpr int ph0 = decltype(phase_c)::value;
          constexpr int lead = -((ph0 - KS + 1) >= 0 ? (ph0 - KS + 1) / S : -((-(ph0 - KS + 1) + S - 1) / S));
#pragma unroll
          for (int jj = 0; jj < kStrip; ++jj)
#pragma unroll
            for (int s = 0; s < KS; ++s) {
              if ((ph0 + jj - s) % S != 0) continue;
              const int u = (ph0 + jj - s) / S + lead;
              out[jj].x = fmaf(win[u].x, wr[s].x, out[jj].x);
              out[jj].y = fmaf(win[u].y, wr[s].y, out[jj].y);
            }
        };
        if constexpr (S == 1) {
          add(std::integral_constant<int, 0>{});
        } else {
          if (phase == 0) add(std::integral_constant<int, 0>{});
          else add(std::integral_constant<int, 1>{});
        }
      }
      T* const dst = dx + ((static_cast<int64_t>(n) * g.h + h) * g.w + ws0) * g.c + c0 + 2 * j;
#pragma unroll
      for (int jj = 0; jj < kStrip; ++jj)
        if (ws0 + jj < w1) *reinterpret_cast<H2*>(dst + static_cast<int64_t>(jj) * g.c) = P2::t(out[jj]);
    }
    }  // live
    __syncthreads();  // buffer b is free for the tile after next
  }
  // One slice of partials: the groups' sums added in a fixed order.
  __syncthreads();
  float* const red = reinterpret_cast<float*>(smem);  // [group][tap][channel]
  if (live) {
#pragma unroll
    for (int r = 0; r < KS; ++r)
#pragma unroll
      for (int s = 0; s < KS; ++s)
        *reinterpret_cast<float2*>(red + (static_cast<size_t>(grp) * KS * KS + r * KS + s) * CW + 2 * j) = acc[r][s];
  }
  __syncthreads();
  float* const slice = partial + static_cast<int64_t>(blockIdx.x) * g.c * KS * KS;
  for (int e = threadIdx.x; e < cw * KS * KS; e += kThreads) {
    const int cl = e / (KS * KS), tap = e % (KS * KS);
    float sum = 0.f;
    for (int k = 0; k < groups; ++k) sum += red[(static_cast<size_t>(k) * KS * KS + tap) * CW + cl];
    slice[(c0 + cl) * KS * KS + tap] = sum;
  }
}

struct Launch {
  Geometry g;
  int ks, s, slices, threads;
  size_t smem;
};

bool plan(int n, int c, int h, int w, int p, int q, int ks, int s, int ph, int pw, int tp, int tq, int cw_max,
          int sms, int blocks_per_sm, int threads, Launch& out) {
  if (c % 8 || (ks != 3 && ks != 5) || (s != 1 && s != 2) || h > p * s || w > q * s || tq % kStrip) return false;
  Geometry g{};
  if (threads != 128 && threads != 256) return false;
  g.n = n; g.c = c; g.h = h; g.w = w; g.p = p; g.q = q; g.ph = ph; g.pw = pw; g.tp = tp; g.tq = tq;
  if (cw_max != 16 && cw_max != 32 && cw_max != 64) return false;
  g.cw = cw_max;
  g.chunks = (c + cw_max - 1) / cw_max;
  g.tiles_p = (p + tp - 1) / tp;
  g.tiles_q = (q + tq - 1) / tq;
  if (ks == 3 && s == 1) regions<3, 1>(g);
  if (ks == 3 && s == 2) regions<3, 2>(g);
  if (ks == 5 && s == 1) regions<5, 1>(g);
  if (ks == 5 && s == 2) regions<5, 2>(g);
  out.g = g; out.ks = ks; out.s = s;
  const int64_t tiles = static_cast<int64_t>(n) * g.tiles_p * g.tiles_q;
  out.slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(tiles, (int64_t)sms * blocks_per_sm / g.chunks)));
  out.threads = threads;
  out.smem = shared_bytes(g, ks, threads);
  return out.smem <= 200 * 1024;
}

template <typename T, int KS, int S>
int run(const Launch& l, const void* x, const void* dy, const void* wt, void* dx, void* dw, float* ws,
        cudaStream_t stream) {
  using Kernel = void (*)(Geometry, const T*, const T*, const T*, T*, float*);
  const Kernel kernels[2][3] = {{dw_backward_fused<T, KS, S, 128, 16>, dw_backward_fused<T, KS, S, 128, 32>,
                                 dw_backward_fused<T, KS, S, 128, 64>},
                                {dw_backward_fused<T, KS, S, 256, 16>, dw_backward_fused<T, KS, S, 256, 32>,
                                 dw_backward_fused<T, KS, S, 256, 64>}};
  const Kernel kernel = kernels[l.threads == 256][l.g.cw == 16 ? 0 : l.g.cw == 32 ? 1 : 2];
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(l.smem));
  kernel<<<dim3(l.slices, l.g.chunks), l.threads, l.smem, stream>>>(
      l.g, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(wt), static_cast<T*>(dx), ws);
  const int elements = l.g.c * KS * KS;
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) return static_cast<int>(error);
  return static_cast<int>(launch_sum_slices(static_cast<const float*>(ws), l.slices, elements,
                                            DenseStore<T>{static_cast<T*>(dw)}, stream));
}

template <typename T>
int run_t(const Launch& l, const void* x, const void* dy, const void* wt, void* dx, void* dw, float* ws,
          cudaStream_t st) {
  if (l.ks == 3 && l.s == 1) return run<T, 3, 1>(l, x, dy, wt, dx, dw, ws, st);
  if (l.ks == 3 && l.s == 2) return run<T, 3, 2>(l, x, dy, wt, dx, dw, ws, st);
  if (l.ks == 5 && l.s == 1) return run<T, 5, 1>(l, x, dy, wt, dx, dw, ws, st);
  return run<T, 5, 2>(l, x, dy, wt, dx, dw, ws, st);
}

}  // namespace

extern "C" {

// Workspace bytes the call needs (-1: not applicable).
long long dw_fused_workspace(int n, int c, int h, int w, int p, int q, int ks, int s, int ph, int pw, int tp, int tq,
                             int cw_max, int sms, int blocks_per_sm, int threads) {
  Launch l;
  if (!plan(n, c, h, w, p, q, ks, s, ph, pw, tp, tq, cw_max, sms, blocks_per_sm, threads, l)) return -1;
  return static_cast<long long>(l.slices) * c * ks * ks * sizeof(float);
}

// dtype 0: fp16, 1: bf16. Returns a CUDA error code, or -1 when not applicable.
int dw_fused_backward(int dtype, int n, int c, int h, int w, int p, int q, int ks, int s, int ph, int pw, int tp,
                      int tq, int cw_max, int sms, int blocks_per_sm, int threads, const void* x, const void* dy,
                      const void* wt, void* dx, void* dw, void* workspace, void* stream) {
  Launch l;
  if (!plan(n, c, h, w, p, q, ks, s, ph, pw, tp, tq, cw_max, sms, blocks_per_sm, threads, l)) return -1;
  auto st = static_cast<cudaStream_t>(stream);
  auto ws = static_cast<float*>(workspace);
  return dtype == 0 ? run_t<__half>(l, x, dy, wt, dx, dw, ws, st) : run_t<__nv_bfloat16>(l, x, dy, wt, dx, dw, ws, st);
}

}  // extern "C"
