// Depthwise convolution kernels, NHWC (see depthwise.h). Compiled by nvcc
// alone, like direct_conv.cu: no torch header.
//
// Forward and backward data are one gather kernel (dw_gather): a thread owns
// VEC channels (one vector) of a strip of kStrip consecutive destination
// columns of one destination row. Per filter row it loads that row's taps of
// its channels from shared memory into registers (fp32), then walks the source
// columns the strip reads once each, left to right, adding every loaded vector
// into each destination column it feeds: a source vector is loaded once per
// strip and filter row instead of once per tap. Which (column, tap) pairs meet
// at which source column is a compile-time table for the common filter widths
// (3, 5, 7; stride 1 or 2; dilation 1), so the window is unrolled into
// registers; every other shape runs the same kernel with runtime taps.
//   forward:       y[n, p, j] += x[n, p*sh-ph+r*dh, j*sw-pw+s*dw] * w[r, s]
//   backward data: dx[n, h, j] += dy[n, (h+ph-r*dh)/sh, (j+pw-s*dw)/sw] * w[r, s]
//                  over the taps whose stride divides: a gather, every dx
//                  element written exactly once, no atomics, no zero fill.
//                  Strips start where (column + pw) is a multiple of the
//                  stride, so which taps divide is known at compile time.
//
// Backward filter (dw_filter): a thread owns VEC channels and a group of
// filter rows (all taps of them) in registers, and sums x * dy over the strips
// of a contiguous slice of the (n, p, strip) items; the block adds its
// threads' sums in shared memory in a fixed order and writes one fp32 partial
// per slice; dw_finish adds the slices in order (deterministic, no atomics).
//
// Index arithmetic: 32-bit within an image row (depthwise_applies refuses a
// row of 2^31 elements or more), 64-bit for the row bases, so one kernel
// serves tensors of any size.
#include "kernels/depthwise.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {

constexpr int kThreads = 256;
// Destination columns a gather thread owns (a multiple of every compile-time stride).
constexpr int kStrip = 4;
// Shared memory a block uses: the gather's staged fp32 taps, the filter's reduction.
constexpr size_t kSharedBudget = 48 * 1024;
// Taps a thread of the runtime-tap filter kernel accumulates.
constexpr int kGenericTaps = 9;
// Channel vectors across a block at most.
constexpr int kMaxTileVectors = 32;
// Items (strips, rows, channels, taps) stay far from int's limit.
constexpr int64_t kMaxCount = int64_t{1} << 30;

std::atomic<bool> g_enabled{true};

__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(float v) { return v; }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// VEC channels at p as fp32, or zeros where !live (p is not read then).
template <typename T, int VEC>
__device__ __forceinline__ void load_f(const T* p, bool live, float (&f)[VEC]) {
  if (live) {
    const Vec<T, VEC> in = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
    for (int v = 0; v < VEC; ++v) f[v] = to_f(in.v[v]);
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
// dilation 1). Forward: base + j*SW + s. Backward data, the strip aligned so
// that (first column + pw) = base*SW: tap s reaches column j iff SW divides
// j - s, from base + (j - s)/SW.
template <bool Backward, int KS, int SW>
struct Window {
  static constexpr bool valid(int j, int s) { return !Backward || (j - s) % SW == 0; }
  static constexpr int offset(int j, int s) { return Backward ? (j - s) / SW : j * SW + s; }
  static constexpr int lo() {
    int m = 1 << 20;
    for (int j = 0; j < kStrip; ++j)
      for (int s = 0; s < KS; ++s)
        if (valid(j, s) && offset(j, s) < m) m = offset(j, s);
    return m;
  }
  static constexpr int hi() {
    int m = -(1 << 20);
    for (int j = 0; j < kStrip; ++j)
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

// ---------------------------------------------------------------- gather
// Block: blockDim.x channel vectors (a tile of blockIdx.y) x blockDim.y
// strips; the grid strides over the (n, row, strip) items. KS > 0: the
// compile-time window (KS == g.s, SW == g.sw, g.dw == 1); KS == 0: runtime taps.
template <typename T, int VEC, bool Backward, int KS, int SW>
__global__ void __launch_bounds__(kThreads) dw_gather(DwGeom g, int strips_per_row, int items, const T* __restrict__ src,
                                                      const T* __restrict__ weight, T* __restrict__ dst) {
  extern __shared__ __align__(16) float staged[];  // [r][s][tile channel]
  const int C = g.c;
  const int dst_h = Backward ? g.h : g.p, dst_w = Backward ? g.w : g.q;
  const int src_h = Backward ? g.p : g.h, src_w = Backward ? g.q : g.w;
  const int tile = blockDim.x * VEC;
  const int tile0 = blockIdx.y * tile;
  const int taps = g.r * g.s;
  const int threads = blockDim.x * blockDim.y;
  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < taps * tile; i += threads) {
    const int local = i % tile, tap = i / tile, ch = tile0 + local;
    staged[i] = ch < C ? to_f(weight[ch * g.ws0 + (tap / g.s) * g.ws2 + (tap % g.s) * g.ws3]) : 0.f;
  }
  __syncthreads();
  const int c0 = tile0 + threadIdx.x * VEC;
  if (c0 >= C) return;
  const float* mine = staged + threadIdx.x * VEC;
  const long long src_row = static_cast<long long>(src_w) * C, dst_row = static_cast<long long>(dst_w) * C;

  for (int item = blockIdx.x * blockDim.y + threadIdx.y; item < items; item += gridDim.x * blockDim.y) {
    const int strip = item % strips_per_row, row = item / strips_per_row;
    const int y = row % dst_h, n = row / dst_h;
    float acc[kStrip][VEC];
#pragma unroll
    for (int j = 0; j < kStrip; ++j)
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[j][v] = 0.f;
    int x0 = strip * kStrip;  // destination column of j = 0
    if constexpr (KS > 0) {
      using W = Window<Backward, KS, SW>;
      if (Backward) x0 -= g.pw % SW;
      const int base = Backward ? (x0 + g.pw) / SW : x0 * SW - g.pw;
      for_each_row<Backward>(g, y, src_h, [&](int r, int sy) {
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
                for (int v = 0; v < VEC; ++v) acc[j][v] += f[v] * wr[s][v];
        }
      });
    } else {
      for_each_row<Backward>(g, y, src_h, [&](int r, int sy) {
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
            for (int v = 0; v < VEC; ++v) acc[j][v] += f[v] * wv[v];
          }
        }
      });
    }
    T* out = dst + (static_cast<long long>(n) * dst_h + y) * dst_row + c0;
#pragma unroll
    for (int j = 0; j < kStrip; ++j) {
      const int x = x0 + j;
      if (x < 0 || x >= dst_w) continue;
      Vec<T, VEC> o;
#pragma unroll
      for (int v = 0; v < VEC; ++v) o.v[v] = from_f<T>(acc[j][v]);
      *reinterpret_cast<Vec<T, VEC>*>(out + x * C) = o;
    }
  }
}

// ---------------------------------------------------------------- filter
// Taps of the filter reduction a round of the block reduction stages: the
// round's scratch is blockDim.y * kRound * tile floats, at most kSharedBudget.
template <int TAPS, int VEC>
constexpr int reduction_round() {
  return std::min(TAPS, static_cast<int>(kSharedBudget / (kThreads * VEC * sizeof(float))));
}

// Adds acc over threadIdx.y, each sum in the order of threadIdx.y, and writes
// the block's partial [blockIdx.x][tap][channel] of taps tap0.. (those < taps).
template <int TAPS, int VEC>
__device__ __forceinline__ void write_partial(const float (&acc)[TAPS][VEC], float* scratch, float* partial, int C,
                                              int taps, int tap0, int tile0) {
  constexpr int kRound = reduction_round<TAPS, VEC>();
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
      if (tap < taps && c < C) partial[(static_cast<long long>(blockIdx.x) * taps + tap) * C + c] = sum;
    }
    __syncthreads();
  }
}

// Block: blockDim.x channel vectors (tile blockIdx.y) x blockDim.y lanes over
// the items [blockIdx.x * chunk, +chunk); blockIdx.z picks the taps: filter
// rows [z*RG, z*RG + RG) (KS > 0: items are (n, p, strip), the compile-time
// forward window) or taps [z*9, z*9 + 9) (KS == 0: items are (n, p, q)).
template <typename T, int VEC, int KS, int SW, int RG>
__global__ void __launch_bounds__(kThreads) dw_filter(DwGeom g, int strips_per_row, int items, int chunk,
                                                      const T* __restrict__ x, const T* __restrict__ dy,
                                                      float* __restrict__ partial) {
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
    if constexpr (KS > 0) {
      using W = Window<false, KS, SW>;
      const int r0 = blockIdx.z * RG;
      for (int item = start + threadIdx.y; item < end; item += blockDim.y) {
        const int strip = item % strips_per_row, row = item / strips_per_row;
        const int p = row % g.p, n = row / g.p;
        const int q0 = strip * kStrip;
        const T* grad = dy + (static_cast<long long>(n) * g.p + p) * dy_row + c0;
        float gd[kStrip][VEC];
#pragma unroll
        for (int j = 0; j < kStrip; ++j) load_f<T, VEC>(grad + (q0 + j) * C, q0 + j < g.q, gd[j]);
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
#pragma unroll
            for (int j = 0; j < kStrip; ++j)
#pragma unroll
              for (int s = 0; s < KS; ++s)
                if (W::offset(j, s) == o)
#pragma unroll
                  for (int v = 0; v < VEC; ++v) acc[i * KS + s][v] += f[v] * gd[j][v];
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
  write_partial<kTaps, VEC>(acc, scratch, partial, C, taps, tap0, tile0);
}

// dweight[c, 0, r, s] = the sum of the slices' partials, in slice order.
template <typename T>
__global__ void __launch_bounds__(kThreads) dw_finish(DwGeom g, const float* __restrict__ partial, int slices,
                                                      T* __restrict__ dweight) {
  const int total = g.r * g.s * g.c;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int c = e % g.c, tap = e / g.c;
    float sum = 0.f;
    for (int slice = 0; slice < slices; ++slice) sum += partial[static_cast<long long>(slice) * total + e];
    dweight[c * g.ws0 + (tap / g.s) * g.ws2 + (tap % g.s) * g.ws3] = from_f<T>(sum);
  }
}

// ---------------------------------------------------------------- launch plans
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                          Args... args) {
  kernel<<<grid, block, shared, stream>>>(args...);
  return cudaGetLastError();
}


int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

DwGeom geom_of(const DirectConvShape& s) {
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
ChannelBlock channel_block(int64_t c, int vec, int64_t max_tx) {
  const int64_t vectors = ceil_div(c, vec);
  const int64_t tiles = ceil_div(vectors, std::max<int64_t>(1, max_tx));
  const int64_t tx = ceil_div(vectors, tiles);
  return {static_cast<int>(tx), static_cast<int>(kThreads / tx), static_cast<int>(tiles)};
}

// The compile-time filter width of a shape, or 0 for runtime taps.
int window_width(const DirectConvShape& s) {
  const bool width = s.s == 3 || s.s == 5 || s.s == 7;
  return width && s.dilation_w == 1 && (s.stride_w == 1 || s.stride_w == 2) ? static_cast<int>(s.s) : 0;
}

// Filter rows a backward-filter thread holds, by compile-time width.
constexpr int filter_rows(int ks) { return ks == 3 ? 3 : ks == 5 ? 5 : 4; }
// Channels a backward-filter thread holds: its accumulators are rows * width * vec.
constexpr int filter_vec(int ks) { return ks == 3 ? 4 : 2; }
constexpr int kGenericFilterVec = 2;

// The largest vector of channels (full, 2, 1) that divides c and whose bytes
// every pointer is aligned to.
int vector_for(int64_t c, int full, int bytes, std::initializer_list<const void*> pointers) {
  uintptr_t bits = 0;
  for (const void* p : pointers) bits |= reinterpret_cast<uintptr_t>(p);
  for (int vec : {full, 2, 1})
    if (vec <= full && c % vec == 0 && bits % (static_cast<uintptr_t>(vec) * bytes) == 0) return vec;
  return 1;
}

// Backward-filter slices: from the preferred configuration (alignment aside, so
// the workspace is known before the pointers), about three blocks per SM, each
// thread still summing a few items.
int64_t filter_slices(const DirectConvShape& s, int sm_count) {
  const int ks = window_width(s);
  const int vec = ks ? filter_vec(ks) : kGenericFilterVec;
  const ChannelBlock b = channel_block(s.c, vec, kMaxTileVectors);
  const int64_t groups = ks ? ceil_div(s.r, filter_rows(ks)) : ceil_div(s.r * s.s, kGenericTaps);
  const int64_t items = ks ? s.n * s.p * ceil_div(s.q, kStrip) : s.n * s.p * s.q;
  const int64_t wanted = ceil_div(int64_t{3} * std::max(1, sm_count), int64_t{b.tiles} * groups);
  const int64_t most = std::max<int64_t>(1, items / (int64_t{b.ty} * 2));
  return std::max<int64_t>(1, std::min<int64_t>({wanted, most, 65535}));
}

template <typename T>
cudaError_t launch_gather(const DirectConvShape& s, bool backward, int sm_count, const T* src, const T* weight, T* dst,
                          cudaStream_t stream) {
  constexpr int kFull = 16 / static_cast<int>(sizeof(T));
  const DwGeom g = geom_of(s);
  const int vec = vector_for(s.c, kFull, sizeof(T), {src, dst});
  const int ks = vec == kFull ? window_width(s) : 0;
  const int sw = static_cast<int>(s.stride_w);
  const int64_t taps = s.r * s.s;
  const int64_t fit = static_cast<int64_t>(kSharedBudget / (taps * vec * sizeof(float)));
  const ChannelBlock b = channel_block(s.c, vec, std::min<int64_t>(kMaxTileVectors, fit));
  const int64_t dst_h = backward ? s.h : s.p, dst_w = backward ? s.w : s.q;
  // Backward strips start where (column + pw) is a multiple of the stride.
  const int64_t lead = ks && backward ? s.pad_w % sw : 0;
  const int64_t strips = ceil_div(dst_w + lead, kStrip);
  const int64_t items = s.n * dst_h * strips;
  // Enough blocks to fill the GPU several times over, each staging its taps once
  // for a few rounds of items.
  const int64_t wanted = std::max<int64_t>(1, ceil_div(int64_t{8} * std::max(1, sm_count), b.tiles));
  const dim3 grid(static_cast<unsigned>(std::min(ceil_div(items, b.ty), wanted)), static_cast<unsigned>(b.tiles));
  const dim3 block(static_cast<unsigned>(b.tx), static_cast<unsigned>(b.ty));
  const size_t shared = static_cast<size_t>(taps) * b.tx * vec * sizeof(float);
  const int spr = static_cast<int>(strips), n_items = static_cast<int>(items);
#define TCA_DW_GATHER(VEC, BACKWARD, KS, SW)                                                                       \
  return launch_kernel(dw_gather<T, VEC, BACKWARD, KS, SW>, grid, block, shared, stream, g, spr, n_items, src, weight, \
                       dst)
#define TCA_DW_GATHER_WIDTHS(BACKWARD, SW)              \
  switch (ks) {                                         \
    case 3: TCA_DW_GATHER(kFull, BACKWARD, 3, SW);      \
    case 5: TCA_DW_GATHER(kFull, BACKWARD, 5, SW);      \
    case 7: TCA_DW_GATHER(kFull, BACKWARD, 7, SW);      \
  }
  if (ks) {
    if (backward) {
      if (sw == 1) TCA_DW_GATHER_WIDTHS(true, 1) else TCA_DW_GATHER_WIDTHS(true, 2)
    } else {
      if (sw == 1) TCA_DW_GATHER_WIDTHS(false, 1) else TCA_DW_GATHER_WIDTHS(false, 2)
    }
  }
  if (backward) {
    if (vec == kFull) TCA_DW_GATHER(kFull, true, 0, 0);
    if (vec == 2) TCA_DW_GATHER(2, true, 0, 0);
    TCA_DW_GATHER(1, true, 0, 0);
  }
  if (vec == kFull) TCA_DW_GATHER(kFull, false, 0, 0);
  if (vec == 2) TCA_DW_GATHER(2, false, 0, 0);
  TCA_DW_GATHER(1, false, 0, 0);
#undef TCA_DW_GATHER_WIDTHS
#undef TCA_DW_GATHER
}

template <typename T>
cudaError_t launch_filter(const DirectConvShape& s, int sm_count, const T* x, const T* dy, T* dweight, void* workspace,
                          cudaStream_t stream) {
  const DwGeom g = geom_of(s);
  const int width = window_width(s);
  const int preferred = width ? filter_vec(width) : kGenericFilterVec;
  int vec = vector_for(s.c, preferred, sizeof(T), {x, dy});
  const int ks = vec == preferred ? width : 0;
  if (!ks) vec = std::min(vec, kGenericFilterVec);
  const int rows = ks ? filter_rows(ks) : 0;
  const ChannelBlock b = channel_block(s.c, vec, kMaxTileVectors);
  const int64_t groups = ks ? ceil_div(s.r, rows) : ceil_div(s.r * s.s, kGenericTaps);
  const int64_t strips = ks ? ceil_div(s.q, kStrip) : s.q;
  const int64_t items = s.n * s.p * strips;
  const int64_t slices = filter_slices(s, sm_count);
  const int64_t chunk = ceil_div(items, slices);
  const int taps_per_thread = ks ? rows * ks : kGenericTaps;
  const int round = std::min<int>(taps_per_thread, static_cast<int>(kSharedBudget / (kThreads * vec * sizeof(float))));
  const size_t shared = static_cast<size_t>(b.ty) * round * b.tx * vec * sizeof(float);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(b.tiles), static_cast<unsigned>(groups));
  const dim3 block(static_cast<unsigned>(b.tx), static_cast<unsigned>(b.ty));
  float* partial = static_cast<float*>(workspace);
  const int spr = static_cast<int>(strips), n_items = static_cast<int>(items), n_chunk = static_cast<int>(chunk);
  cudaError_t launched = cudaSuccess;
#define TCA_DW_FILTER(VEC, KS, SW, RG)                                                                              \
  launched = launch_kernel(dw_filter<T, VEC, KS, SW, RG>, grid, block, shared, stream, g, spr, n_items, n_chunk, x, dy, \
                           partial)
  const int sw = static_cast<int>(s.stride_w);
  if (ks == 3) {
    if (sw == 1) TCA_DW_FILTER(filter_vec(3), 3, 1, filter_rows(3)); else TCA_DW_FILTER(filter_vec(3), 3, 2, filter_rows(3));
  } else if (ks == 5) {
    if (sw == 1) TCA_DW_FILTER(filter_vec(5), 5, 1, filter_rows(5)); else TCA_DW_FILTER(filter_vec(5), 5, 2, filter_rows(5));
  } else if (ks == 7) {
    if (sw == 1) TCA_DW_FILTER(filter_vec(7), 7, 1, filter_rows(7)); else TCA_DW_FILTER(filter_vec(7), 7, 2, filter_rows(7));
  } else if (vec == 2) {
    TCA_DW_FILTER(2, 0, 0, 0);
  } else {
    TCA_DW_FILTER(1, 0, 0, 0);
  }
#undef TCA_DW_FILTER
  if (launched != cudaSuccess) return launched;
  const int64_t total = s.r * s.s * s.c;
  const dim3 finish_grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(total, kThreads), 65535)));
  return launch_kernel(dw_finish<T>, finish_grid, dim3(kThreads), 0, stream, g, static_cast<const float*>(partial),
                       static_cast<int>(slices), dweight);
}

template <typename T>
cudaError_t launch_typed(const DirectConvShape& s, DirectDirection direction, int sm_count, const void* a,
                         const void* b, void* out, void* workspace, cudaStream_t stream) {
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  T* to = static_cast<T*>(out);
  if (direction == DirectDirection::kBackwardFilter) return launch_filter<T>(s, sm_count, ta, tb, to, workspace, stream);
  return launch_gather<T>(s, direction == DirectDirection::kBackwardData, sm_count, ta, tb, to, stream);
}

}  // namespace

bool depthwise_applies(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  if (dtype == DirectDType::kDouble || !s.channels_last) return false;
  if (s.groups != s.c || s.k != s.c) return false;
  for (const int64_t extent : {s.n, s.c, s.h, s.w, s.p, s.q, s.r, s.s, s.stride_h, s.stride_w, s.dilation_h,
                               s.dilation_w})
    if (extent < 1 || extent >= kMaxCount) return false;
  if (s.pad_h < 0 || s.pad_w < 0 || s.pad_h >= kMaxCount || s.pad_w >= kMaxCount) return false;
  // Grid limits: channel tiles along y, tap groups along z.
  if (s.c > 65535) return false;
  // 32-bit arithmetic within a row, over the items and over the weight.
  if (s.w * s.c >= kMaxCount || s.q * s.c >= kMaxCount) return false;
  if (s.n * s.h * s.w >= kMaxCount || s.n * s.p * s.q >= kMaxCount) return false;
  if (s.r * s.s * s.c >= kMaxCount) return false;
  // The gather stages its tile's taps in shared memory (fp32): one channel's at least.
  if (static_cast<size_t>(s.r * s.s) * sizeof(float) > kSharedBudget) return false;
  (void)direction;
  return true;
}

size_t depthwise_workspace_bytes(const DirectConvShape& s, DirectDType dtype, DirectDirection direction,
                                 int sm_count) {
  (void)dtype;
  if (direction != DirectDirection::kBackwardFilter) return 0;
  return static_cast<size_t>(filter_slices(s, sm_count) * s.r * s.s * s.c) * sizeof(float);
}

int launch_depthwise(const DirectConvShape& s, DirectDType dtype, DirectDirection direction, int sm_count,
                     const void* a, const void* b, void* out, void* workspace, CUstream_st* stream) {
  switch (dtype) {
    case DirectDType::kHalf: return launch_typed<__half>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kBFloat16:
      return launch_typed<__nv_bfloat16>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kFloat: return launch_typed<float>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kDouble: break;
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

void set_depthwise_enabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

}  // namespace torch_cudnn_algo::kernels
