// Depthwise NHWC kernels and their launch plans, parametrised by the choices
// that decide their speed (see depthwise.cu for what each kernel does). Included
// by depthwise.cu, which launches one chosen configuration per direction and
// filter width, and by depthwise_sweep.cuh (the check program's variant sweep
// only). Everything is in an anonymous namespace: each including file has its
// own copies, so the sweep's instantiations never reach the extension.
#pragma once

#include "kernels/depthwise.h"
#include "kernels/device_traits.cuh"
#include "kernels/element_types.h"
#include "kernels/slice_sum.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>

namespace torch_cudnn_algo::kernels {
namespace {

// Shared memory a block uses: the gather's staged fp32 taps, the filter's reduction.
constexpr size_t kSharedBudget = 48 * 1024;
// Taps a thread of the runtime-tap filter kernel accumulates.
constexpr int kGenericTaps = 9;
// Items (strips, rows, channels, taps) stay far from int's limit.
constexpr int64_t kMaxCount = int64_t{1} << 30;

// Compile-time choices of the gather (forward, backward data).
//   STRIP:       destination columns a thread owns (a multiple of every compile-time stride)
//   ROWS:        destination rows a thread owns; a source row feeding several of
//                them is loaded once (vertical reuse in registers)
//   TAPS_SHARED: taps read from shared memory at each use instead of a filter
//                row held in registers (fewer registers, more shared loads)
//   STAGE:       taps staged through a raw copy of the tile's weights read in
//                memory order (coalesced for the [c][1][r][s] layout) instead of
//                one strided read per (tap, channel)
//   THREADS, MINB: block size and __launch_bounds__' minimum blocks per SM (0: none given)
//   UNROLL_ROWS: (ROWS 1) the filter rows unrolled at compile time (needs r == KS,
//                which the launch checks), so the loads of every row can issue
//                together instead of one row's latency after another's
// ROWS, TAPS_SHARED, UNROLL_ROWS apply to the compile-time windows only (KS > 0).
// A gather configuration is one int (short kernel names): gather_tune()
// packs it, GatherTune<code> reads it; 0 is every default.
constexpr int gather_tune(int strip = 4, int rows = 1, bool taps_shared = false, bool stage = false,
                          int threads = 256, int min_blocks = 0, bool unroll_rows = false) {
  return (strip == 4 ? 0 : strip) | (rows - 1) << 4 | taps_shared << 7 | stage << 8 |
         (threads == 256 ? 0 : threads / 32) << 9 | min_blocks << 14 | unroll_rows << 17;
}
constexpr int gather_strip(int code) { return code & 15 ? code & 15 : 4; }
constexpr int gather_rows(int code) { return (code >> 4 & 7) + 1; }
constexpr bool gather_taps_shared(int code) { return code >> 7 & 1; }
constexpr bool gather_stage(int code) { return code >> 8 & 1; }
constexpr int gather_threads(int code) { return code >> 9 & 31 ? (code >> 9 & 31) * 32 : 256; }
constexpr int gather_min_blocks(int code) { return code >> 14 & 7; }
constexpr bool gather_unroll_rows(int code) { return code >> 17 & 1; }
template <int CODE>
struct GatherTune {
  static constexpr int kStrip = gather_strip(CODE), kRows = gather_rows(CODE);
  static constexpr bool kTapsShared = gather_taps_shared(CODE), kStage = gather_stage(CODE);
  static constexpr int kThreads = gather_threads(CODE), kMinBlocks = gather_min_blocks(CODE);
  static constexpr bool kUnrollRows = gather_unroll_rows(CODE);
  static_assert(kStrip % 2 == 0 && (!kUnrollRows || kRows == 1) &&
                    CODE == gather_tune(kStrip, kRows, kTapsShared, kStage, kThreads, kMinBlocks, kUnrollRows),
                "gather tune");
};
// Launch-time choices of the gather: channel vectors across a block at most,
// and blocks per SM the grid is capped at (0: no cap, one item per thread row).
struct GatherLaunch {
  int max_tx = 32;
  int blocks_per_sm = 8;
};

// Compile-time choices of the backward filter.
//   VEC:    channels a thread holds (its loads are VEC elements wide)
//   RG:     filter rows a thread holds (all taps of them; blockIdx.z picks the group)
//   STRIP:  output columns an item covers
//   DIRECT: one slice, the block writes dweight itself (no partials, no finish launch)
//   OUT_ROWS: output rows an item covers (above 1: every filter row in the
//             thread, RG == KS, and each input row is loaded once for all of
//             them instead of once per output row; stride_h == SW, dilation 1)
// Packed like the gather's: filter_tune() packs, FilterTune<code> reads.
constexpr int filter_tune(int vec, int rows, int strip = 4, int threads = 256, bool direct = false,
                          int out_rows = 1) {
  return vec | rows << 4 | (strip == 4 ? 0 : strip) << 8 | (threads == 256 ? 0 : threads / 32) << 12 | direct << 17 |
         (out_rows == 1 ? 0 : out_rows) << 18;
}
constexpr int filter_vec_of(int code) { return code & 15; }
constexpr int filter_rows_of(int code) { return code >> 4 & 15; }
constexpr int filter_strip(int code) { return code >> 8 & 15 ? code >> 8 & 15 : 4; }
constexpr int filter_threads(int code) { return code >> 12 & 31 ? (code >> 12 & 31) * 32 : 256; }
constexpr bool filter_direct(int code) { return code >> 17 & 1; }
constexpr int filter_out_rows(int code) { return code >> 18 & 7 ? code >> 18 & 7 : 1; }
template <int CODE>
struct FilterTune {
  static constexpr int kVec = filter_vec_of(CODE), kRowGroup = filter_rows_of(CODE), kStrip = filter_strip(CODE);
  static constexpr int kThreads = filter_threads(CODE);
  static constexpr bool kDirect = filter_direct(CODE);
  static constexpr int kOutRows = filter_out_rows(CODE);
  static_assert(CODE == filter_tune(kVec, kRowGroup, kStrip, kThreads, kDirect, kOutRows), "filter tune");
};
// Launch-time choices of the backward filter: channel vectors across a block at
// most; slices per SM wanted (over channel tiles and row groups).
struct FilterLaunch {
  int max_tx = 32;
  int slices_per_sm = 3;
};

// VEC channels at p as fp32, or zeros where !live (p is not read then).
template <typename T, int VEC>
__device__ __forceinline__ void load_f(const T* p, bool live, float (&f)[VEC]) {
  if (live) {
    const Vec<T, VEC> in = load_vec<T, VEC>(p);
#pragma unroll
    for (int v = 0; v < VEC; ++v) f[v] = to_acc(in.v[v]);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) f[v] = 0.f;
  }
}

// VEC fp32 from shared memory, as wide loads where VEC allows (p is VEC*4-byte aligned).
template <int VEC>
__device__ __forceinline__ void load_shared(const float* p, float (&f)[VEC]) {
  if constexpr (VEC % 4 == 0) {
#pragma unroll
    for (int v = 0; v < VEC; v += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + v);
      f[v] = q.x; f[v + 1] = q.y; f[v + 2] = q.z; f[v + 3] = q.w;
    }
  } else if constexpr (VEC == 2) {
    const float2 q = *reinterpret_cast<const float2*>(p);
    f[0] = q.x; f[1] = q.y;
  } else {
#pragma unroll
    for (int v = 0; v < VEC; ++v) f[v] = p[v];
  }
}

struct DwGeom {
  int n, c, h, w, p, q, r, s, sh, sw, ph, pw, dh, dw;
  long long ws0, ws2, ws3;  // weight strides of channel, filter row, filter column
};

// Which destination column j of a strip tap s feeds from which source column,
// relative to the strip's base source column (compile-time: KS taps, stride SW,
// dilation 1, STRIP columns). Forward: base + j*SW + s. Backward data, the
// strip aligned so that (first column + pw) = base*SW: tap s reaches column j
// iff SW divides j - s, from base + (j - s)/SW.
template <bool Backward, int KS, int SW, int STRIP>
struct Window {
  static constexpr bool valid(int j, int s) { return !Backward || (j - s) % SW == 0; }
  static constexpr int offset(int j, int s) { return Backward ? (j - s) / SW : j * SW + s; }
  static constexpr int lo() {
    int m = 1 << 20;
    for (int j = 0; j < STRIP; ++j)
      for (int s = 0; s < KS; ++s)
        if (valid(j, s) && offset(j, s) < m) m = offset(j, s);
    return m;
  }
  static constexpr int hi() {
    int m = -(1 << 20);
    for (int j = 0; j < STRIP; ++j)
      for (int s = 0; s < KS; ++s)
        if (valid(j, s) && offset(j, s) > m) m = offset(j, s);
    return m;
  }
};

// Calls body(r, sy) for every filter row r and the source row sy it reads for
// destination row y.
template <bool Backward, typename Body>
__device__ __forceinline__ void for_each_row(const DwGeom& g, int y, int src_h, Body&& body) {
  if (Backward) {
    const int t = y + g.ph;  // sy*sh + r*dh == t
    if (g.dh == 1) {
      const int r0 = t % g.sh;
      for (int r = r0, sy = (t - r0) / g.sh; r < g.r && sy >= 0; r += g.sh, --sy)
        if (sy < src_h) body(r, sy);
    } else {
      for (int r = 0; r < g.r; ++r) {
        const int num = t - r * g.dh;
        if (num < 0) break;
        const int sy = num / g.sh;
        if (sy * g.sh == num && sy < src_h) body(r, sy);
      }
    }
  } else {
    for (int r = 0, sy = y * g.sh - g.ph; r < g.r; ++r, sy += g.dh)
      if (sy >= 0 && sy < src_h) body(r, sy);
  }
}

// Calls body(sy, rk) for every source row sy that feeds at least one of the
// destination rows y0 .. y0 + ROWS - 1 (those < dst_h), in ascending order;
// rk[k] is the filter row through which sy feeds row y0 + k, or -1.
template <bool Backward, int ROWS, typename Body>
__device__ __forceinline__ void for_each_source_row(const DwGeom& g, int y0, int dst_h, int src_h, Body&& body) {
  int lo, hi;
  if (Backward) {  // sy*sh + r*dh == y + ph
    const int first = y0 + g.ph - (g.r - 1) * g.dh;
    lo = first <= 0 ? 0 : (first + g.sh - 1) / g.sh;
    hi = (y0 + ROWS - 1 + g.ph) / g.sh;
  } else {  // sy == y*sh - ph + r*dh
    lo = y0 * g.sh - g.ph;
    hi = (y0 + ROWS - 1) * g.sh - g.ph + (g.r - 1) * g.dh;
  }
  lo = std::max(lo, 0);
  hi = std::min(hi, src_h - 1);
  for (int sy = lo; sy <= hi; ++sy) {
    int rk[ROWS];
    bool any = false;
#pragma unroll
    for (int k = 0; k < ROWS; ++k) {
      const int d = Backward ? y0 + k + g.ph - sy * g.sh : sy - ((y0 + k) * g.sh - g.ph);
      const int r = d / g.dh;
      rk[k] = y0 + k < dst_h && d >= 0 && r * g.dh == d && r < g.r ? r : -1;
      any = any || rk[k] >= 0;
    }
    if (any) body(sy, rk);
  }
}

// ---------------------------------------------------------------- gather
// Stages the block's taps as fp32, [tap][tile channel], zeros past C.
template <typename T, bool STAGE>
__device__ __forceinline__ void stage_taps(const DwGeom& g, const T* __restrict__ weight, float* staged, int tile,
                                           int tile0) {
  const int C = g.c;
  const int taps = g.r * g.s;
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  if constexpr (STAGE) {
    // Raw weights behind the staged taps, [tile channel][tap]: read in the
    // weight's memory order (the standard layout's channels are contiguous).
    T* raw = reinterpret_cast<T*>(staged + taps * tile);
    const int live = std::min(tile, C - tile0) * taps;
#pragma unroll 4
    for (int i = tid; i < live; i += threads) {
      const int local = i / taps, tap = i - local * taps, ch = tile0 + local;
      raw[i] = weight[ch * g.ws0 + (tap / g.s) * g.ws2 + (tap % g.s) * g.ws3];
    }
    __syncthreads();
#pragma unroll 4
    for (int i = tid; i < taps * tile; i += threads) {
      const int local = i % tile, tap = i / tile;
      staged[i] = local * taps < live ? to_acc(raw[local * taps + tap]) : 0.f;
    }
  } else {
    for (int i = tid; i < taps * tile; i += threads) {
      const int local = i % tile, tap = i / tile, ch = tile0 + local;
      staged[i] = ch < C ? to_acc(weight[ch * g.ws0 + (tap / g.s) * g.ws2 + (tap % g.s) * g.ws3]) : 0.f;
    }
  }
  __syncthreads();
}

// Block: blockDim.x channel vectors (a tile of blockIdx.y) x blockDim.y
// strips; the grid strides over the (n, row group, strip) items. KS > 0: the
// compile-time window (KS == g.s, SW == g.sw, g.dw == 1); KS == 0: runtime taps.
template <typename T, int VEC, bool Backward, int KS, int SW, int TUNE>
__global__ void __launch_bounds__(GatherTune<TUNE>::kThreads, GatherTune<TUNE>::kMinBlocks)
    dw_gather(DwGeom g, int strips_per_row, int items, const T* __restrict__ src, const T* __restrict__ weight,
              T* __restrict__ dst) {
  using Tune = GatherTune<TUNE>;
  constexpr int kStrip = Tune::kStrip, kRows = KS > 0 ? Tune::kRows : 1;
  extern __shared__ __align__(16) float staged[];  // [r][s][tile channel]
  const int C = g.c;
  const int dst_h = Backward ? g.h : g.p, dst_w = Backward ? g.w : g.q;
  const int src_h = Backward ? g.p : g.h, src_w = Backward ? g.q : g.w;
  const int tile = blockDim.x * VEC;
  const int tile0 = blockIdx.y * tile;
  stage_taps<T, Tune::kStage>(g, weight, staged, tile, tile0);
  const int c0 = tile0 + threadIdx.x * VEC;
  if (c0 >= C) return;
  const float* mine = staged + threadIdx.x * VEC;
  const long long src_row = static_cast<long long>(src_w) * C, dst_row = static_cast<long long>(dst_w) * C;
  const int groups = (dst_h + kRows - 1) / kRows;

  for (int item = blockIdx.x * blockDim.y + threadIdx.y; item < items; item += gridDim.x * blockDim.y) {
    const int strip = item % strips_per_row, row = item / strips_per_row;
    const int y0 = (row % groups) * kRows, n = row / groups;
    float acc[kRows][kStrip][VEC];
#pragma unroll
    for (int k = 0; k < kRows; ++k)
#pragma unroll
      for (int j = 0; j < kStrip; ++j)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[k][j][v] = 0.f;
    int x0 = strip * kStrip;  // destination column of j = 0
    if constexpr (KS > 0) {
      using W = Window<Backward, KS, SW, kStrip>;
      if (Backward) x0 -= g.pw % SW;
      const int base = Backward ? (x0 + g.pw) / SW : x0 * SW - g.pw;
      if constexpr (Tune::kUnrollRows) {
#pragma unroll
        for (int r = 0; r < KS; ++r) {  // g.r == KS
          int sy;
          bool row_live;
          if (Backward) {
            const int num = y0 + g.ph - r * g.dh;
            sy = num / g.sh;
            row_live = num >= 0 && sy * g.sh == num && sy < src_h;
          } else {
            sy = y0 * g.sh - g.ph + r * g.dh;
            row_live = sy >= 0 && sy < src_h;
          }
          float wr[Tune::kTapsShared ? 1 : KS][VEC];
          if constexpr (!Tune::kTapsShared) {
#pragma unroll
            for (int s = 0; s < KS; ++s) load_shared<VEC>(mine + (r * KS + s) * tile, wr[s]);
          }
          const T* at = src + (static_cast<long long>(n) * src_h + sy) * src_row + c0;
#pragma unroll
          for (int o = W::lo(); o <= W::hi(); ++o) {
            const int col = base + o;
            float f[VEC];
            load_f<T, VEC>(at + col * C, row_live && col >= 0 && col < src_w, f);
#pragma unroll
            for (int j = 0; j < kStrip; ++j)
#pragma unroll
              for (int s = 0; s < KS; ++s)
                if (W::valid(j, s) && W::offset(j, s) == o) {
                  if constexpr (Tune::kTapsShared) {
                    float wv[VEC];
                    load_shared<VEC>(mine + (r * KS + s) * tile, wv);
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[0][j][v] += f[v] * wv[v];
                  } else {
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[0][j][v] += f[v] * wr[s][v];
                  }
                }
          }
        }
      } else if constexpr (kRows == 1 && !Tune::kTapsShared) {
        for_each_row<Backward>(g, y0, src_h, [&](int r, int sy) {
          float wr[KS][VEC];
#pragma unroll
          for (int s = 0; s < KS; ++s) load_shared<VEC>(mine + (r * KS + s) * tile, wr[s]);
          const T* at = src + (static_cast<long long>(n) * src_h + sy) * src_row + c0;
#pragma unroll
          for (int o = W::lo(); o <= W::hi(); ++o) {
            const int col = base + o;
            float f[VEC];
            load_f<T, VEC>(at + col * C, col >= 0 && col < src_w, f);
#pragma unroll
            for (int j = 0; j < kStrip; ++j)
#pragma unroll
              for (int s = 0; s < KS; ++s)
                if (W::valid(j, s) && W::offset(j, s) == o)
#pragma unroll
                  for (int v = 0; v < VEC; ++v) acc[0][j][v] += f[v] * wr[s][v];
          }
        });
      } else {
        for_each_source_row<Backward, kRows>(g, y0, dst_h, src_h, [&](int sy, const int (&rk)[kRows]) {
          // Taps in registers: each destination row's filter row, loaded once per source row.
          float wr[Tune::kTapsShared ? 1 : kRows][Tune::kTapsShared ? 1 : KS][VEC];
          if constexpr (!Tune::kTapsShared) {
#pragma unroll
            for (int k = 0; k < kRows; ++k)
#pragma unroll
              for (int s = 0; s < KS; ++s) load_shared<VEC>(mine + (std::max(rk[k], 0) * KS + s) * tile, wr[k][s]);
          }
          const T* at = src + (static_cast<long long>(n) * src_h + sy) * src_row + c0;
#pragma unroll
          for (int o = W::lo(); o <= W::hi(); ++o) {
            const int col = base + o;
            float f[VEC];
            load_f<T, VEC>(at + col * C, col >= 0 && col < src_w, f);
#pragma unroll
            for (int k = 0; k < kRows; ++k) {
              if (rk[k] < 0) continue;
#pragma unroll
              for (int j = 0; j < kStrip; ++j)
#pragma unroll
                for (int s = 0; s < KS; ++s)
                  if (W::valid(j, s) && W::offset(j, s) == o) {
                    if constexpr (Tune::kTapsShared) {
                      float wv[VEC];
                      load_shared<VEC>(mine + (rk[k] * KS + s) * tile, wv);
#pragma unroll
                      for (int v = 0; v < VEC; ++v) acc[k][j][v] += f[v] * wv[v];
                    } else {
#pragma unroll
                      for (int v = 0; v < VEC; ++v) acc[k][j][v] += f[v] * wr[k][s][v];
                    }
                  }
            }
          }
        });
      }
    } else {
      for_each_row<Backward>(g, y0, src_h, [&](int r, int sy) {
        const T* at = src + (static_cast<long long>(n) * src_h + sy) * src_row + c0;
        for (int s = 0; s < g.s; ++s) {
          float wv[VEC];
          load_shared<VEC>(mine + (r * g.s + s) * tile, wv);
#pragma unroll
          for (int j = 0; j < kStrip; ++j) {
            int col;
            bool live;
            if (Backward) {
              const int t = x0 + j + g.pw - s * g.dw;
              col = t / g.sw;
              live = t >= 0 && col * g.sw == t && col < src_w;
            } else {
              col = (x0 + j) * g.sw - g.pw + s * g.dw;
              live = col >= 0 && col < src_w;
            }
            float f[VEC];
            load_f<T, VEC>(at + col * C, live, f);
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[0][j][v] += f[v] * wv[v];
          }
        }
      });
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      if (kRows > 1 && y0 + k >= dst_h) break;
      T* out = dst + (static_cast<long long>(n) * dst_h + y0 + k) * dst_row + c0;
#pragma unroll
      for (int j = 0; j < kStrip; ++j) {
        const int x = x0 + j;
        if (x < 0 || x >= dst_w) continue;
        Vec<T, VEC> o;
#pragma unroll
        for (int v = 0; v < VEC; ++v) o.v[v] = from_acc<T>(acc[k][j][v]);
        *reinterpret_cast<Vec<T, VEC>*>(out + x * C) = o;
      }
    }
  }
}

// ---------------------------------------------------------------- filter
// Taps of the filter reduction a round of the block reduction stages: the
// round's scratch is blockDim.y * kRound * tile floats, at most kSharedBudget.
template <int TAPS, int VEC, int THREADS>
constexpr int reduction_round() {
  return std::min(TAPS, static_cast<int>(kSharedBudget / (THREADS * VEC * sizeof(float))));
}

// Adds acc over threadIdx.y, each sum in the order of threadIdx.y, and writes
// the block's partial [blockIdx.x][tap][channel] of taps tap0.. (those < taps),
// or with DIRECT (one slice) the weight gradient itself, as T at the weight's strides.
template <typename T, int TAPS, int VEC, int THREADS, bool DIRECT>
__device__ __forceinline__ void write_partial(const DwGeom& g, const float (&acc)[TAPS][VEC], float* scratch, void* out,
                                              int C, int taps, int tap0, int tile0) {
  constexpr int kRound = reduction_round<TAPS, VEC, THREADS>();
  const int tile = blockDim.x * VEC, rows = blockDim.y;
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int t0 = 0; t0 < TAPS; t0 += kRound) {
#pragma unroll
    for (int t = t0; t < t0 + kRound && t < TAPS; ++t)
#pragma unroll
      for (int v = 0; v < VEC; ++v) scratch[(threadIdx.y * kRound + (t - t0)) * tile + threadIdx.x * VEC + v] = acc[t][v];
    __syncthreads();
    const int count = std::min(kRound, TAPS - t0) * tile;
    for (int i = tid; i < count; i += threads) {
      const int tt = i / tile, cc = i - tt * tile;
      float sum = 0.f;
      for (int y = 0; y < rows; ++y) sum += scratch[(y * kRound + tt) * tile + cc];
      const int tap = tap0 + t0 + tt, c = tile0 + cc;
      if (tap < taps && c < C) {
        if constexpr (DIRECT)
          static_cast<T*>(out)[c * g.ws0 + (tap / g.s) * g.ws2 + (tap % g.s) * g.ws3] = from_acc<T>(sum);
        else
          static_cast<float*>(out)[(static_cast<long long>(blockIdx.x) * taps + tap) * C + c] = sum;
      }
    }
    __syncthreads();
  }
}

// The strip's dy: STRIP columns from q0 of one output row (zeros past q or where !live).
template <typename T, int VEC, int STRIP>
__device__ __forceinline__ void load_dy_strip(const T* grad, int q0, int q, int C, bool live, float (&gd)[STRIP][VEC]) {
#pragma unroll
  for (int j = 0; j < STRIP; ++j) load_f<T, VEC>(grad + (q0 + j) * C, live && q0 + j < q, gd[j]);
}

// Adds input column o of the strip's forward window (f: its channels) into
// filter row r's taps: acc[r * KS + s] += f * gd[j] wherever column j reads
// it through tap s. o and r are compile-time once the callers' loops unroll.
template <int KS, int SW, int STRIP, int VEC, int TAPS>
__device__ __forceinline__ void add_window_column(const float (&f)[VEC], int o, const float (&gd)[STRIP][VEC], int r,
                                                  float (&acc)[TAPS][VEC]) {
  using W = Window<false, KS, SW, STRIP>;
#pragma unroll
  for (int j = 0; j < STRIP; ++j)
#pragma unroll
    for (int s = 0; s < KS; ++s)
      if (W::offset(j, s) == o)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[r * KS + s][v] += f[v] * gd[j][v];
}

// Block: blockDim.x channel vectors (tile blockIdx.y) x blockDim.y lanes over
// the items [blockIdx.x * chunk, +chunk); blockIdx.z picks the taps: filter
// rows [z*RG, z*RG + RG) (KS > 0: items are (n, p, strip), the compile-time
// forward window) or taps [z*9, z*9 + 9) (KS == 0: items are (n, p, q)).
// out: the fp32 partials, or with Tune::kDirect the weight gradient (T).
template <typename T, int KS, int SW, int TUNE>
__global__ void __launch_bounds__(FilterTune<TUNE>::kThreads) dw_filter(DwGeom g, int strips_per_row, int items,
                                                                        int chunk, const T* __restrict__ x,
                                                                        const T* __restrict__ dy, void* __restrict__ out) {
  using Tune = FilterTune<TUNE>;
  constexpr int VEC = Tune::kVec, RG = Tune::kRowGroup, kStrip = Tune::kStrip, OR = Tune::kOutRows;
  static_assert(OR == 1 || (KS > 0 && RG == KS), "several output rows an item need every filter row");
  extern __shared__ __align__(16) float scratch[];
  constexpr int kTaps = KS > 0 ? RG * KS : kGenericTaps;
  const int C = g.c, taps = g.r * g.s;
  const int tile = blockDim.x * VEC, tile0 = blockIdx.y * tile;
  const int c0 = tile0 + threadIdx.x * VEC;
  const int tap0 = blockIdx.z * kTaps;
  float acc[kTaps][VEC];
#pragma unroll
  for (int t = 0; t < kTaps; ++t)
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[t][v] = 0.f;
  const long long x_row = static_cast<long long>(g.w) * C, dy_row = static_cast<long long>(g.q) * C;
  const int start = blockIdx.x * chunk, end = std::min(items, start + chunk);
  if (c0 < C) {
    if constexpr (OR > 1) {
      // Items are (n, group of OR output rows, strip); input row sy0 + i feeds
      // output row p0 + k through filter row i - k * SW (stride_h == SW,
      // dilation 1: the launch checks), known once the loops are unrolled.
      using W = Window<false, KS, SW, kStrip>;
      const int groups_p = (g.p + OR - 1) / OR;
      for (int item = start + threadIdx.y; item < end; item += blockDim.y) {
        const int strip = item % strips_per_row, row = item / strips_per_row;
        const int p0 = (row % groups_p) * OR, n = row / groups_p;
        const int q0 = strip * kStrip;
        float gd[OR][kStrip][VEC];
#pragma unroll
        for (int k = 0; k < OR; ++k) {
          const bool live = p0 + k < g.p;
          load_dy_strip<T, VEC>(dy + (static_cast<long long>(n) * g.p + (live ? p0 + k : 0)) * dy_row + c0, q0, g.q, C,
                                live, gd[k]);
        }
        const int base = q0 * SW - g.pw;
        const int sy0 = p0 * SW - g.ph;
        const T* image = x + static_cast<long long>(n) * g.h * x_row + c0;
#pragma unroll
        for (int i = 0; i < (OR - 1) * SW + KS; ++i) {
          const int sy = sy0 + i;
          if (sy < 0 || sy >= g.h) continue;
          const T* at = image + sy * x_row;
#pragma unroll
          for (int o = W::lo(); o <= W::hi(); ++o) {
            const int col = base + o;
            float f[VEC];
            load_f<T, VEC>(at + col * C, col >= 0 && col < g.w, f);
#pragma unroll
            for (int k = 0; k < OR; ++k)
              if (i - k * SW >= 0 && i - k * SW < KS) add_window_column<KS, SW>(f, o, gd[k], i - k * SW, acc);
          }
        }
      }
    } else if constexpr (KS > 0) {
      using W = Window<false, KS, SW, kStrip>;
      const int r0 = blockIdx.z * RG;
      for (int item = start + threadIdx.y; item < end; item += blockDim.y) {
        const int strip = item % strips_per_row, row = item / strips_per_row;
        const int p = row % g.p, n = row / g.p;
        const int q0 = strip * kStrip;
        float gd[kStrip][VEC];
        load_dy_strip<T, VEC>(dy + (static_cast<long long>(n) * g.p + p) * dy_row + c0, q0, g.q, C, true, gd);
        const int base = q0 * SW - g.pw;
        const int sy0 = p * g.sh - g.ph + r0 * g.dh;
        const T* image = x + static_cast<long long>(n) * g.h * x_row + c0;
#pragma unroll
        for (int i = 0; i < RG; ++i) {
          const int sy = sy0 + i * g.dh;
          if (r0 + i >= g.r || sy < 0 || sy >= g.h) continue;
          const T* at = image + sy * x_row;
#pragma unroll
          for (int o = W::lo(); o <= W::hi(); ++o) {
            const int col = base + o;
            float f[VEC];
            load_f<T, VEC>(at + col * C, col >= 0 && col < g.w, f);
            add_window_column<KS, SW>(f, o, gd, i, acc);
          }
        }
      }
    } else {
      int tr[kTaps], ts[kTaps];
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        tr[t] = (tap0 + t) / g.s;  // tr >= g.r past the last tap
        ts[t] = (tap0 + t) % g.s;
      }
      for (int item = start + threadIdx.y; item < end; item += blockDim.y) {
        const int q = item % g.q, row = item / g.q;
        const int p = row % g.p, n = row / g.p;
        float gd[VEC];
        load_f<T, VEC>(dy + (static_cast<long long>(n) * g.p + p) * dy_row + q * C + c0, true, gd);
        const int ybase = p * g.sh - g.ph, xbase = q * g.sw - g.pw;
        const T* image = x + static_cast<long long>(n) * g.h * x_row + c0;
#pragma unroll
        for (int t = 0; t < kTaps; ++t) {
          const int sy = ybase + tr[t] * g.dh, sx = xbase + ts[t] * g.dw;
          if (tr[t] >= g.r || sy < 0 || sy >= g.h || sx < 0 || sx >= g.w) continue;
          float f[VEC];
          load_f<T, VEC>(image + sy * x_row + sx * C, true, f);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[t][v] += f[v] * gd[v];
        }
      }
    }
  }
  write_partial<T, kTaps, VEC, Tune::kThreads, Tune::kDirect>(g, acc, scratch, out, C, taps, tap0, tile0);
}

// Writes a filter gradient's total of element e = tap * C + c (the partials'
// layout) as T at the weight's strides: sum_slices' store.
template <typename T>
struct DwWeightStore {
  T* dweight;
  int c, s;
  long long ws0, ws2, ws3;
  __device__ __forceinline__ void operator()(int64_t e, float total) const {
    const int ch = static_cast<int>(e % c), tap = static_cast<int>(e / c);
    dweight[ch * ws0 + (tap / s) * ws2 + (tap % s) * ws3] = from_acc<T>(total);
  }
};

// ---------------------------------------------------------------- launch plans
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                          Args... args) {
  kernel<<<grid, block, shared, stream>>>(args...);
  return cudaGetLastError();
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The correlation a gather computes over its staged source, for the gathers
// that stage it (depthwise_plane.cuh, depthwise_mma.cuh): forward from x to y
// with the pads, backward data (stride 1) from dy to dx with the window
// flipped and pads KS - 1 - pad.
template <typename Geom>
void set_correlation(Geom& g, const DirectConvShape& s, bool backward, int ks) {
  g.c = static_cast<int>(s.c);
  g.src_h = static_cast<int>(backward ? s.p : s.h);
  g.src_w = static_cast<int>(backward ? s.q : s.w);
  g.dst_h = static_cast<int>(backward ? s.h : s.p);
  g.dst_w = static_cast<int>(backward ? s.w : s.q);
  g.pad_h = static_cast<int>(backward ? ks - 1 - s.pad_h : s.pad_h);
  g.pad_w = static_cast<int>(backward ? ks - 1 - s.pad_w : s.pad_w);
  g.flip = backward;
}

inline DwGeom geom_of(const DirectConvShape& s) {
  DwGeom g;
  g.n = static_cast<int>(s.n); g.c = static_cast<int>(s.c); g.h = static_cast<int>(s.h); g.w = static_cast<int>(s.w);
  g.p = static_cast<int>(s.p); g.q = static_cast<int>(s.q); g.r = static_cast<int>(s.r); g.s = static_cast<int>(s.s);
  g.sh = static_cast<int>(s.stride_h); g.sw = static_cast<int>(s.stride_w);
  g.ph = static_cast<int>(s.pad_h); g.pw = static_cast<int>(s.pad_w);
  g.dh = static_cast<int>(s.dilation_h); g.dw = static_cast<int>(s.dilation_w);
  g.ws0 = s.weight_strides[0]; g.ws2 = s.weight_strides[2]; g.ws3 = s.weight_strides[3];
  return g;
}

// A block's channel tiling: tx vectors of vec channels across (at most
// max_tx), balanced over the tiles so few lanes idle; ty rows of threads.
struct ChannelBlock {
  int tx, ty, tiles;
};
inline ChannelBlock channel_block(int64_t c, int vec, int64_t max_tx, int threads) {
  const int64_t vectors = ceil_div(c, vec);
  const int64_t tiles = ceil_div(vectors, std::max<int64_t>(1, std::min<int64_t>(max_tx, threads)));
  const int64_t tx = ceil_div(vectors, tiles);
  return {static_cast<int>(tx), static_cast<int>(threads / tx), static_cast<int>(tiles)};
}

// The compile-time filter width of a shape, or 0 for runtime taps.
inline int window_width(const DirectConvShape& s) {
  const bool width = s.s == 3 || s.s == 5 || s.s == 7;
  return width && s.dilation_w == 1 && (s.stride_w == 1 || s.stride_w == 2) ? static_cast<int>(s.s) : 0;
}

// The largest vector of channels (full, 2, 1) that divides c and whose bytes
// every pointer is aligned to.
inline int vector_for(int64_t c, int full, int bytes, std::initializer_list<const void*> pointers) {
  uintptr_t bits = 0;
  for (const void* p : pointers) bits |= reinterpret_cast<uintptr_t>(p);
  for (int vec : {full, 2, 1})
    if (vec <= full && c % vec == 0 && bits % (static_cast<uintptr_t>(vec) * bytes) == 0) return vec;
  return 1;
}

template <typename T>
using GatherKernel = void (*)(DwGeom, int, int, const T*, const T*, T*);
template <typename T>
using FilterKernel = void (*)(DwGeom, int, int, int, const T*, const T*, void*);

// A gather kernel and what its launch needs to know of it: the channels a
// thread holds, its compile-time window (ks 0: runtime taps; sw its stride) and
// its packed configuration.
template <typename T>
struct GatherPick {
  GatherKernel<T> kernel;
  int vec, ks, sw, tune;
  GatherLaunch launch;
};
template <typename T, int VEC, bool Backward, int KS, int SW, int TUNE>
GatherPick<T> gather_pick(GatherLaunch launch) {
  return {dw_gather<T, VEC, Backward, KS, SW, TUNE>, VEC, KS, SW, TUNE, launch};
}

// Launches a gather kernel over the shape (the caller picked it for the shape and its pointers).
template <typename T>
cudaError_t launch_gather_pick(const DirectConvShape& s, bool backward, int sm_count, const GatherPick<T>& k,
                               const T* src, const T* weight, T* dst, cudaStream_t stream) {
  const int rows = k.ks ? gather_rows(k.tune) : 1, strip = gather_strip(k.tune);
  if (k.ks && gather_unroll_rows(k.tune) && s.r != k.ks) return cudaErrorInvalidValue;
  const DwGeom g = geom_of(s);
  const int64_t taps = s.r * s.s;
  const size_t per_channel = static_cast<size_t>(taps) * (sizeof(float) + (gather_stage(k.tune) ? sizeof(T) : 0));
  const int64_t fit = static_cast<int64_t>(kSharedBudget / (per_channel * k.vec));
  const ChannelBlock b = channel_block(s.c, k.vec, std::min<int64_t>(k.launch.max_tx, fit), gather_threads(k.tune));
  const int64_t dst_h = backward ? s.h : s.p, dst_w = backward ? s.w : s.q;
  // Backward strips start where (column + pw) is a multiple of the stride.
  const int64_t lead = k.ks && backward ? s.pad_w % k.sw : 0;
  const int64_t strips = ceil_div(dst_w + lead, strip);
  const int64_t items = s.n * ceil_div(dst_h, rows) * strips;
  // Enough blocks to fill the GPU several times over, each staging its taps once
  // for a few rounds of items.
  const int64_t needed = ceil_div(items, b.ty);
  const int64_t wanted = k.launch.blocks_per_sm > 0
                             ? std::max<int64_t>(1, ceil_div(int64_t{k.launch.blocks_per_sm} * std::max(1, sm_count), b.tiles))
                             : needed;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>({needed, wanted, int64_t{1} << 30})),
                  static_cast<unsigned>(b.tiles));
  const dim3 block(static_cast<unsigned>(b.tx), static_cast<unsigned>(b.ty));
  const size_t shared = per_channel * b.tx * k.vec;
  return launch_kernel(k.kernel, grid, block, shared, stream, g, static_cast<int>(strips), static_cast<int>(items),
                       src, weight, dst);
}

// The filter kernel's items: (n, output row, strip) with a compile-time window
// (output rows in groups of OUT_ROWS), (n, output row, column) otherwise.
inline int64_t filter_items(const DirectConvShape& s, int ks, int tune) {
  return ks ? s.n * ceil_div(s.p, filter_out_rows(tune)) * ceil_div(s.q, filter_strip(tune)) : s.n * s.p * s.q;
}

// A filter launch's block: its channel tiling, its row groups (grid z) and
// the shared memory its reduction stages.
struct FilterBlock {
  ChannelBlock b;
  int64_t groups;
  size_t shared;
};
inline FilterBlock filter_block(const DirectConvShape& s, int ks, int tune, int max_tx) {
  const int vec = filter_vec_of(tune), threads = filter_threads(tune);
  const ChannelBlock b = channel_block(s.c, vec, max_tx, threads);
  const int64_t groups = ks ? ceil_div(s.r, filter_rows_of(tune)) : ceil_div(s.r * s.s, kGenericTaps);
  const int taps_per_thread = ks ? filter_rows_of(tune) * ks : kGenericTaps;
  const int round = std::min<int>(taps_per_thread, static_cast<int>(kSharedBudget / (threads * vec * sizeof(float))));
  return {b, groups, static_cast<size_t>(b.ty) * round * b.tx * vec * sizeof(float)};
}

// Backward-filter slices of a configuration: about slices_per_sm blocks per SM
// over the channel tiles and row groups, each thread still summing a few
// items; 1 for a DIRECT one. Where an SM holds fewer blocks at once than that
// (`resident`, 0: unknown), whole waves of them instead: blocks have equal
// work, so a grid of 1.5 waves (5x5 at stride 1: 396 blocks on an H100's 264
// places) takes as long as two full ones.
inline int64_t filter_slices_of(const DirectConvShape& s, int sm_count, int ks, int tune, FilterLaunch opt,
                                int resident) {
  if (filter_direct(tune)) return 1;
  const FilterBlock fb = filter_block(s, ks, tune, opt.max_tx);
  const int64_t per_slice = int64_t{fb.b.tiles} * fb.groups, sms = std::max(1, sm_count);
  const int64_t wanted = resident > 0 && opt.slices_per_sm > resident
                             ? opt.slices_per_sm / resident * resident * sms / per_slice
                             : ceil_div(int64_t{opt.slices_per_sm} * sms, per_slice);
  const int64_t items = filter_items(s, ks, tune);
  const int64_t most = std::max<int64_t>(1, items / (int64_t{fb.b.ty} * 2));
  return std::max<int64_t>(1, std::min<int64_t>({wanted, most, 65535}));
}

template <typename T>
struct FilterPick {
  FilterKernel<T> kernel;
  int ks, sw, tune;
  FilterLaunch launch;
};
template <typename T, int KS, int SW, int TUNE>
FilterPick<T> filter_pick(FilterLaunch launch) {
  return {dw_filter<T, KS, SW, TUNE>, KS, SW, TUNE, launch};
}

// The slices of a filter configuration's launch over the shape (its workspace
// holds that many partials; the launch must be given the same number).
template <typename T, int KS, int SW, int TUNE>
int64_t filter_slices_for(const DirectConvShape& s, int sm_count, FilterLaunch opt) {
  const FilterBlock fb = filter_block(s, KS, TUNE, opt.max_tx);
  const int resident = resident_blocks(dw_filter<T, KS, SW, TUNE>, fb.b.tx * fb.b.ty, fb.shared);
  return filter_slices_of(s, sm_count, KS, TUNE, opt, resident);
}

// Runs a filter kernel over `slices` slices, then (unless direct) sum_slices;
// the workspace holds slices * r * s * c floats (none when direct).
template <typename T>
cudaError_t launch_filter_pick(const DirectConvShape& s, int64_t slices, const FilterPick<T>& k, const T* x,
                               const T* dy, T* dweight, void* workspace, cudaStream_t stream) {
  const bool direct = filter_direct(k.tune);
  const DwGeom g = geom_of(s);
  if (filter_out_rows(k.tune) > 1 && (s.stride_h != k.sw || s.dilation_h != 1 || s.r != k.ks))
    return cudaErrorInvalidValue;
  if (direct) slices = 1;
  const FilterBlock fb = filter_block(s, k.ks, k.tune, k.launch.max_tx);
  const int64_t strips = k.ks ? ceil_div(s.q, filter_strip(k.tune)) : s.q;
  const int64_t items = filter_items(s, k.ks, k.tune);
  const int64_t chunk = ceil_div(items, slices);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(fb.b.tiles), static_cast<unsigned>(fb.groups));
  const dim3 block(static_cast<unsigned>(fb.b.tx), static_cast<unsigned>(fb.b.ty));
  void* out = direct ? static_cast<void*>(dweight) : workspace;
  const cudaError_t launched = launch_kernel(k.kernel, grid, block, fb.shared, stream, g, static_cast<int>(strips),
                                             static_cast<int>(items), static_cast<int>(chunk), x, dy, out);
  if (launched != cudaSuccess || direct) return launched;
  return launch_sum_slices(static_cast<const float*>(workspace), slices, s.r * s.s * s.c,
                           DwWeightStore<T>{dweight, g.c, g.s, g.ws0, g.ws2, g.ws3}, stream);
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
