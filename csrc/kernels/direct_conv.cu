// Direct convolution kernels (see direct_conv.h). Compiled by nvcc alone,
// with only the toolkit's headers: no torch header, so the build stays fast
// and no CUDA release mixes with another.
//
// Three kernels, each for NHWC (channels vectorised, 16-byte loads) and NCHW
// (width across threads):
// - gather: every output element of the forward or the backward-data
//   convolution sums its receptive field; the backward-data one gathers from
//   dy the taps whose stride divides (no atomics, no zero fill);
// - filter: every block sums a slice of the n*p*q reduction for a tile of
//   weight elements into a per-slice partial;
// - finish (slice_sum.cuh): adds the partials of each weight element in slice
//   order, so the result is the same on every run (deterministic).
// Grouped convolutions of 8 to 64 channels a group (fp16/bf16, NHWC) run
// instead as tensor-core GEMMs where they can: grouped_mma.cu, and 1x1
// convolutions of 8 to 160 channels (one group) pointwise_mma.cu and
// pointwise_filter.cu; depthwise
// convolutions in NHWC (fp16, bf16, fp32) run depthwise.cu's kernels; the
// filter gradient of stems (few input channels) and of groups of 8 to 32
// channels (fp16/bf16, NHWC) is a tensor-core GEMM too: gemm_filter.cu.
#include "kernels/direct_conv.h"

#include "kernels/depthwise.h"
#include "kernels/direct_common.h"
#include "kernels/element_types.h"
#include "kernels/gemm_filter.h"
#include "kernels/grouped_mma.h"
#include "kernels/pointwise_filter.h"
#include "kernels/pointwise_mma.h"
#include "kernels/slice_sum.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {

constexpr int kThreads = 256;
// Weight elements (ci, r, s) one filter thread accumulates: a 3x3 tap set.
constexpr int kFilterTaps = 9;
// Weight bytes one gather block may stage in shared memory.
constexpr size_t kMaxStagedWeightBytes = 48 * 1024;

// Everything a kernel needs, by value.
// Index: int when every tensor has fewer than 2^31 elements (32-bit
// index arithmetic is several times cheaper on the GPU), else Index.
template <typename Index>
struct Geometry {
  Index n, c, h, w, k, p, q, r, s;
  Index sh, sw, ph, pw, dh, dw;
  Index groups;
  Index ws0, ws1, ws2, ws3;  // weight strides
};

template <typename Index>
Geometry<Index> geometry_of(const DirectConvShape& s) {
  const int64_t values[] = {s.n, s.c, s.h, s.w, s.k, s.p, s.q, s.r, s.s,
                            s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dilation_h, s.dilation_w, s.groups,
                            s.weight_strides[0], s.weight_strides[1], s.weight_strides[2], s.weight_strides[3]};
  Geometry<Index> g;
  Index* fields[] = {&g.n, &g.c, &g.h, &g.w, &g.k, &g.p, &g.q, &g.r, &g.s, &g.sh, &g.sw, &g.ph, &g.pw,
                     &g.dh, &g.dw, &g.groups, &g.ws0, &g.ws1, &g.ws2, &g.ws3};
  for (int i = 0; i < 20; ++i) *fields[i] = static_cast<Index>(values[i]);
  return g;
}

// Where destination channel d's weights start, and the step between the
// source channels ci of its group: w[d, ci] forward, w[src ci, d] backward data.
template <bool Backward, typename Index>
__device__ __forceinline__ Index weight_base(const Geometry<Index>& g, Index d) {
  if (Backward) {
    const Index cpg_dst = g.c / g.groups, cpg_src = g.k / g.groups;
    const Index group = d / cpg_dst;
    return group * cpg_src * g.ws0 + (d - group * cpg_dst) * g.ws1;
  }
  return d * g.ws0;
}

template <bool Backward, typename Index>
__device__ __forceinline__ Index weight_ci_step(const Geometry<Index>& g) {
  return Backward ? g.ws0 : g.ws1;
}

// Calls body(r, s, sy, sx) for every tap (r, s) of destination pixel (y, x)
// whose source pixel (sy, sx) exists.
template <bool Backward, typename Index, typename Body>
__device__ __forceinline__ void for_each_tap(const Geometry<Index>& g, Index y, Index x, Index src_h, Index src_w,
                                             Body&& body) {
  for (Index r = 0; r < g.r; ++r) {
    const Index sy = source_index<Backward>(y, r, g.sh, g.ph, g.dh, src_h);
    if (sy < 0) continue;
    for (Index s = 0; s < g.s; ++s) {
      const Index sx = source_index<Backward>(x, s, g.sw, g.pw, g.dw, src_w);
      if (sx >= 0) body(r, s, sy, sx);
    }
  }
}

// ---------------------------------------------------------------- gather, NHWC
// Block: blockDim.x threads along channels (VEC channels each), blockDim.y
// along pixels. The block's channel tile of weights is staged in shared memory
// as [ci][r][s][tile channel], so VEC destination channels read one vector.
template <typename T, typename Index, int VEC, bool Backward, bool Depthwise>
__global__ void __launch_bounds__(kThreads) gather_nhwc(Geometry<Index> g, const T* __restrict__ src,
                                                        const T* __restrict__ weight, T* __restrict__ dst) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  T* staged = reinterpret_cast<T*>(staged_bytes);

  const Index dst_c = Backward ? g.c : g.k, src_c = Backward ? g.k : g.c;
  const Index dst_h = Backward ? g.h : g.p, dst_w = Backward ? g.w : g.q;
  const Index src_h = Backward ? g.p : g.h, src_w = Backward ? g.q : g.w;
  const Index cpg_dst = dst_c / g.groups, cpg_src = src_c / g.groups;
  const int tile = blockDim.x * VEC;
  const Index tile0 = static_cast<Index>(blockIdx.y) * tile;
  const Index taps = cpg_src * g.r * g.s;

  for (Index i = threadIdx.y * blockDim.x + threadIdx.x; i < taps * tile; i += blockDim.x * blockDim.y) {
    const Index local = i % tile, j = i / tile;
    const Index d = tile0 + local;
    const Index ci = j / (g.r * g.s), rs = j % (g.r * g.s);
    staged[i] = d < dst_c ? weight[weight_base<Backward>(g, d) + ci * weight_ci_step<Backward>(g) +
                                   (rs / g.s) * g.ws2 + (rs % g.s) * g.ws3]
                          : T(0);
  }
  __syncthreads();

  const int local0 = threadIdx.x * VEC;
  const Index d0 = tile0 + local0;
  if (d0 >= dst_c) return;
  const Index group = d0 / cpg_dst;
  const Index pixels = g.n * dst_h * dst_w;
  for (Index pix = static_cast<Index>(blockIdx.x) * blockDim.y + threadIdx.y; pix < pixels;
       pix += static_cast<Index>(gridDim.x) * blockDim.y) {
    const Index x = pix % dst_w, y = (pix / dst_w) % dst_h, n = pix / (dst_w * dst_h);
    Acc acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[v] = Acc(0);
    for_each_tap<Backward>(g, y, x, src_h, src_w, [&](Index r, Index s, Index sy, Index sx) {
      const T* pixel = src + ((n * src_h + sy) * src_w + sx) * src_c;
      if (Depthwise) {
        const Vec<T, VEC> in = load_vec<T, VEC>(pixel + d0);
        const Vec<T, VEC> wv = load_vec<T, VEC>(staged + (r * g.s + s) * tile + local0);
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[v] += to_acc(in.v[v]) * to_acc(wv.v[v]);
      } else {
        const T* channels = pixel + group * cpg_src;
        for (Index ci = 0; ci < cpg_src; ++ci) {
          const Acc in = to_acc(channels[ci]);
          const Vec<T, VEC> wv = load_vec<T, VEC>(staged + ((ci * g.r + r) * g.s + s) * tile + local0);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[v] += in * to_acc(wv.v[v]);
        }
      }
    });
    Vec<T, VEC> out;
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[v] = from_acc<T>(acc[v]);
    *reinterpret_cast<Vec<T, VEC>*>(dst + ((n * dst_h + y) * dst_w + x) * dst_c + d0) = out;
  }
}

// ---------------------------------------------------------------- gather, NCHW
// Block: threads along the destination plane; blockIdx.y is the destination
// channel, so every thread of a block reads the same weights (broadcast).
template <typename T, typename Index, bool Backward>
__global__ void __launch_bounds__(kThreads) gather_nchw(Geometry<Index> g, const T* __restrict__ src,
                                                        const T* __restrict__ weight, T* __restrict__ dst) {
  using Acc = typename AccOf<T>::type;
  const Index dst_c = Backward ? g.c : g.k, src_c = Backward ? g.k : g.c;
  const Index dst_h = Backward ? g.h : g.p, dst_w = Backward ? g.w : g.q;
  const Index src_h = Backward ? g.p : g.h, src_w = Backward ? g.q : g.w;
  const Index cpg_dst = dst_c / g.groups, cpg_src = src_c / g.groups;
  const Index d = blockIdx.y, group = d / cpg_dst;
  const Index plane = dst_h * dst_w, src_plane = src_h * src_w;
  for (Index n = blockIdx.z; n < g.n; n += gridDim.z) {
    for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < plane;
         i += static_cast<Index>(gridDim.x) * blockDim.x) {
      const Index x = i % dst_w, y = i / dst_w;
      const T* channels = src + (n * src_c + group * cpg_src) * src_plane;
      const T* weights = weight + weight_base<Backward>(g, d);
      const Index ci_step = weight_ci_step<Backward>(g);
      Acc acc = Acc(0);
      for_each_tap<Backward>(g, y, x, src_h, src_w, [&](Index r, Index s, Index sy, Index sx) {
        const T* at = channels + sy * src_w + sx;
        const T* tap = weights + r * g.ws2 + s * g.ws3;
        for (Index ci = 0; ci < cpg_src; ++ci) acc += to_acc(at[ci * src_plane]) * to_acc(tap[ci * ci_step]);
      });
      dst[(n * dst_c + d) * plane + i] = from_acc<T>(acc);
    }
  }
}

// ---------------------------------------------------------------- filter
// The weight element j = (ci, r, s) of output channel k sums, over every
// output pixel m = (n, p, q), x[n, ci of k's group, tap(p, r), tap(q, s)] *
// dy[n, k, p, q]. A thread holds kFilterTaps consecutive j (blockIdx.z picks
// which) for VEC channels; blocks along x split the pixels into slices.
template <typename Index>
struct Taps {
  Index ci[kFilterTaps], r[kFilterTaps], s[kFilterTaps];
  bool live[kFilterTaps];
};

template <typename Index>
__device__ __forceinline__ Taps<Index> taps_of(const Geometry<Index>& g, Index j0) {
  Taps<Index> t;
  const Index total = (g.c / g.groups) * g.r * g.s;
#pragma unroll
  for (int jj = 0; jj < kFilterTaps; ++jj) {
    const Index j = j0 + jj;
    t.live[jj] = j < total;
    t.ci[jj] = j / (g.r * g.s);
    t.r[jj] = (j % (g.r * g.s)) / g.s;
    t.s[jj] = j % g.s;
  }
  return t;
}

// Adds acc over threadIdx.y by a fixed tree (deterministic) and writes this
// block's partial sums [slice][j][k]: thread (x, 0) writes its VEC channels.
template <typename Acc, int VEC, typename Index>
__device__ __forceinline__ void write_partials(Acc (&acc)[kFilterTaps][VEC], Acc* scratch, Acc* partial,
                                               const Geometry<Index>& g, Index j0, Index k0, bool active) {
  const Index total = (g.c / g.groups) * g.r * g.s;
  const int width = blockDim.x * VEC;
  const int rows = blockDim.y;
  int top = 1;
  while (top < rows) top *= 2;
  Acc* mine = scratch + threadIdx.y * width + threadIdx.x * VEC;
  for (int jj = 0; jj < kFilterTaps; ++jj) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) mine[v] = acc[jj][v];
    __syncthreads();
    for (int half = top / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.y) < half && static_cast<int>(threadIdx.y) + half < rows) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) mine[v] += mine[half * width + v];
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && active && j0 + jj < total) {
#pragma unroll
      for (int v = 0; v < VEC; ++v) partial[(static_cast<Index>(blockIdx.x) * total + j0 + jj) * g.k + k0 + v] = mine[v];
    }
    __syncthreads();
  }
}

template <typename T, typename Index, int VEC, bool Depthwise>
__global__ void __launch_bounds__(kThreads) filter_nhwc(Geometry<Index> g, const T* __restrict__ x,
                                                        const T* __restrict__ dy,
                                                        typename AccOf<T>::type* __restrict__ partial) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char scratch_bytes[];
  const Index cpg_in = g.c / g.groups, cpg_out = g.k / g.groups;
  const Index k0 = (static_cast<Index>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  const bool active = k0 < g.k;
  const Index j0 = static_cast<Index>(blockIdx.z) * kFilterTaps;
  const Taps<Index> t = taps_of(g, j0);
  const Index channel0 = Depthwise ? k0 : (k0 / cpg_out) * cpg_in;

  Acc acc[kFilterTaps][VEC];
#pragma unroll
  for (int jj = 0; jj < kFilterTaps; ++jj)
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[jj][v] = Acc(0);

  const Index pixels = g.n * g.p * g.q;
  if (active) {
    for (Index m = static_cast<Index>(blockIdx.x) * blockDim.y + threadIdx.y; m < pixels;
         m += static_cast<Index>(gridDim.x) * blockDim.y) {
      const Index q = m % g.q, p = (m / g.q) % g.p, n = m / (g.q * g.p);
      const Vec<T, VEC> grad = load_vec<T, VEC>(dy + m * g.k + k0);
      Acc gv[VEC];
#pragma unroll
      for (int v = 0; v < VEC; ++v) gv[v] = to_acc(grad.v[v]);
      const T* image = x + n * g.h * g.w * g.c + channel0;
#pragma unroll
      for (int jj = 0; jj < kFilterTaps; ++jj) {
        const Index ih = p * g.sh - g.ph + t.r[jj] * g.dh, iw = q * g.sw - g.pw + t.s[jj] * g.dw;
        if (!t.live[jj] || ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
        const T* at = image + (ih * g.w + iw) * g.c;
        if (Depthwise) {
          const Vec<T, VEC> in = load_vec<T, VEC>(at);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[jj][v] += to_acc(in.v[v]) * gv[v];
        } else {
          const Acc in = to_acc(at[t.ci[jj]]);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc[jj][v] += in * gv[v];
        }
      }
    }
  }
  write_partials<Acc, VEC>(acc, reinterpret_cast<Acc*>(scratch_bytes), partial, g, j0, k0, active);
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kThreads) filter_nchw(Geometry<Index> g, const T* __restrict__ x,
                                                        const T* __restrict__ dy,
                                                        typename AccOf<T>::type* __restrict__ partial) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char scratch_bytes[];
  const Index cpg_in = g.c / g.groups, cpg_out = g.k / g.groups;
  const Index k = blockIdx.y;
  const Index j0 = static_cast<Index>(blockIdx.z) * kFilterTaps;
  const Taps<Index> t = taps_of(g, j0);
  const Index channel0 = (k / cpg_out) * cpg_in;

  Acc acc[kFilterTaps][1];
#pragma unroll
  for (int jj = 0; jj < kFilterTaps; ++jj) acc[jj][0] = Acc(0);
  const Index pixels = g.n * g.p * g.q;
  for (Index m = static_cast<Index>(blockIdx.x) * blockDim.y + threadIdx.y; m < pixels;
       m += static_cast<Index>(gridDim.x) * blockDim.y) {
    const Index q = m % g.q, p = (m / g.q) % g.p, n = m / (g.q * g.p);
    const Acc gv = to_acc(dy[((n * g.k + k) * g.p + p) * g.q + q]);
    const T* image = x + (n * g.c + channel0) * g.h * g.w;
#pragma unroll
    for (int jj = 0; jj < kFilterTaps; ++jj) {
      const Index ih = p * g.sh - g.ph + t.r[jj] * g.dh, iw = q * g.sw - g.pw + t.s[jj] * g.dw;
      if (!t.live[jj] || ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
      acc[jj][0] += to_acc(image[(t.ci[jj] * g.h + ih) * g.w + iw]) * gv;
    }
  }
  write_partials<Acc, 1>(acc, reinterpret_cast<Acc*>(scratch_bytes), partial, g, j0, k, true);
}

// Writes the total of weight element e = j * k + kk (the partials' layout,
// j = (ci * r + r_i) * s + s_i) as T at the weight's strides: sum_slices' store.
template <typename T, typename Index>
struct DirectWeightStore {
  Geometry<Index> g;
  T* dweight;
  __device__ __forceinline__ void operator()(int64_t e, typename AccOf<T>::type total) const {
    const Index k = static_cast<Index>(e % g.k), j = static_cast<Index>(e / g.k);
    const Index ci = j / (g.r * g.s), r = (j % (g.r * g.s)) / g.s, s = j % g.s;
    dweight[k * g.ws0 + ci * g.ws1 + r * g.ws2 + s * g.ws3] = from_acc<T>(total);
  }
};

// ---------------------------------------------------------------- launch plans
template <typename T> constexpr int vector_width() { return 16 / static_cast<int>(sizeof(T)); }

template <typename T> constexpr DirectDType dtype_of();
template <> constexpr DirectDType dtype_of<__half>() { return DirectDType::kHalf; }
template <> constexpr DirectDType dtype_of<__nv_bfloat16>() { return DirectDType::kBFloat16; }
template <> constexpr DirectDType dtype_of<float>() { return DirectDType::kFloat; }
template <> constexpr DirectDType dtype_of<double>() { return DirectDType::kDouble; }

int element_bytes(DirectDType dtype) {
  switch (dtype) {
    case DirectDType::kHalf:
    case DirectDType::kBFloat16: return 2;
    case DirectDType::kFloat: return 4;
    case DirectDType::kDouble: return 8;
  }
  return 0;
}

bool is_depthwise(const DirectConvShape& s) { return s.groups == s.c && s.groups == s.k; }

// The channel vector width the NHWC kernels use: 16 bytes when every vector
// stays inside one group's channels, else 1.
int nhwc_vector(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  const int vec = 16 / element_bytes(dtype);
  const int64_t dst_c = direction == DirectDirection::kBackwardData ? s.c : s.k;
  const int64_t cpg_dst = dst_c / s.groups;
  if (dst_c % vec != 0) return 1;
  if (is_depthwise(s)) return vec;
  return cpg_dst % vec == 0 ? vec : 1;
}

struct GatherLaunch {
  dim3 grid, block;
  size_t shared_bytes;
};

GatherLaunch gather_launch(const DirectConvShape& s, DirectDType dtype, DirectDirection direction, int vec,
                           int sm_count) {
  const bool backward = direction == DirectDirection::kBackwardData;
  const int64_t dst_c = backward ? s.c : s.k, src_c = backward ? s.k : s.c;
  const int64_t plane = backward ? s.h * s.w : s.p * s.q;
  GatherLaunch l{};
  if (!s.channels_last) {
    const unsigned threads = static_cast<unsigned>(std::min<int64_t>(kThreads, (plane + 31) / 32 * 32));
    const int64_t per_channel = (plane + threads - 1) / threads;
    l.block = dim3(threads);
    l.grid = dim3(static_cast<unsigned>(std::min<int64_t>(per_channel, 65535)), static_cast<unsigned>(dst_c),
                  static_cast<unsigned>(std::min<int64_t>(s.n, 65535)));
    l.shared_bytes = 0;
    return l;
  }
  const int64_t vectors = (dst_c + vec - 1) / vec;
  const int64_t taps = (src_c / s.groups) * s.r * s.s;
  int64_t tx = std::min<int64_t>(32, vectors);
  while (tx > 1 && static_cast<size_t>(taps * tx * vec * element_bytes(dtype)) > kMaxStagedWeightBytes) tx /= 2;
  const int64_t ty = kThreads / tx;
  const int64_t tiles = (vectors + tx - 1) / tx;
  const int64_t pixel_blocks = (s.n * plane + ty - 1) / ty;
  // Enough blocks to fill the GPU a few times over, each staging its weights
  // once for several pixel rounds.
  const int64_t wanted = std::max<int64_t>(1, (int64_t(sm_count) * 16 + tiles - 1) / tiles);
  l.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  l.grid = dim3(static_cast<unsigned>(std::min<int64_t>(pixel_blocks, wanted)), static_cast<unsigned>(tiles));
  l.shared_bytes = static_cast<size_t>(taps * tx * vec * element_bytes(dtype));
  return l;
}

struct FilterLaunch {
  dim3 grid, block;
  size_t shared_bytes;
  int64_t slices;
};

FilterLaunch filter_launch(const DirectConvShape& s, DirectDType dtype, int vec, int sm_count) {
  const int acc_bytes = dtype == DirectDType::kDouble ? 8 : 4;
  const int64_t taps = (s.c / s.groups) * s.r * s.s;
  const int64_t chunks = (taps + kFilterTaps - 1) / kFilterTaps;
  const int64_t pixels = s.n * s.p * s.q;
  FilterLaunch l{};
  int64_t tx = 1, ty = kThreads, tiles = s.k;
  if (!s.channels_last) vec = 1;
  if (s.channels_last) {
    const int64_t vectors = (s.k + vec - 1) / vec;
    tx = std::min<int64_t>(32, vectors);
    ty = kThreads / tx;
    tiles = (vectors + tx - 1) / tx;
  }
  const int64_t wanted = std::max<int64_t>(1, int64_t(sm_count) * 8 / std::max<int64_t>(1, tiles * chunks));
  // Each slice should still give every thread a few pixels.
  const int64_t most = std::max<int64_t>(1, pixels / (ty * 4));
  l.slices = std::min<int64_t>({wanted, most, 65535});
  l.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty));
  l.grid = dim3(static_cast<unsigned>(l.slices), static_cast<unsigned>(tiles), static_cast<unsigned>(chunks));
  l.shared_bytes = static_cast<size_t>(kThreads * vec * acc_bytes);
  return l;
}

template <typename T, typename Index>
cudaError_t launch_typed(const DirectConvShape& s, DirectDirection direction, bool gemm_filter, const void* a,
                         const void* b, void* out, void* workspace, int sm_count, cudaStream_t stream) {
  constexpr int kVec = vector_width<T>();
  const Geometry<Index> g = geometry_of<Index>(s);
  // 16-byte vectors need 16-byte aligned operands; otherwise one channel at a time.
  const bool aligned = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(out)) % 16) == 0;
  const bool vectorised = s.channels_last && aligned && nhwc_vector(s, dtype_of<T>(), direction) > 1;
  const int vec = vectorised ? kVec : 1;
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  T* to = static_cast<T*>(out);
  if (direction == DirectDirection::kBackwardFilter) {
    // gemm_filter_applies plans the shape on every call: asked once at most.
    const auto gemm_applies = [&] {
      return gemm_filter && gemm_filter_applies(s, dtype_of<T>(), direction, reinterpret_cast<uintptr_t>(a) % 16 == 0,
                                                reinterpret_cast<uintptr_t>(b) % 16 == 0);
    };
    // Of the two tensor-core filter kernels, the GEMM one is faster on 1x1
    // layers whose dy has 24 to 64 channels (the streaming kernel took
    // 1.25-1.8x its time there), so it is asked first there; the streaming
    // one elsewhere (1.15-5.6x faster): H100,
    // benchmarks/results/kernels-h100-2026-12-07-ab.md.
    const bool gemm_first = s.k > 16 && s.k <= 64;
    const bool gemm_taken = gemm_first && gemm_applies();
    if (!gemm_taken && pointwise_filter_applies(s, dtype_of<T>(), direction, aligned))
      return static_cast<cudaError_t>(
          launch_pointwise_filter(s, dtype_of<T>(), sm_count, a, b, out, workspace, stream));
    if (gemm_taken || (!gemm_first && gemm_applies()))
      return static_cast<cudaError_t>(launch_gemm_filter(s, dtype_of<T>(), sm_count, a, b, out, workspace, stream));
    using Acc = typename AccOf<T>::type;
    const FilterLaunch l = filter_launch(s, dtype_of<T>(), vec, sm_count);
    Acc* partial = static_cast<Acc*>(workspace);
    if (!s.channels_last) {
      filter_nchw<T, Index><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, partial);
    } else {
      if (is_depthwise(s) && vectorised)
        filter_nhwc<T, Index, kVec, true><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, partial);
      else if (is_depthwise(s))
        filter_nhwc<T, Index, 1, true><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, partial);
      else if (vectorised)
        filter_nhwc<T, Index, kVec, false><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, partial);
      else
        filter_nhwc<T, Index, 1, false><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, partial);
    }
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) return launched;
    return launch_sum_slices<Acc>(partial, l.slices, (s.c / s.groups) * s.r * s.s * s.k,
                                  DirectWeightStore<T, Index>{g, to}, stream);
  }
  // 1x1 convolutions and groups of 8 to 64 channels are GEMMs: on tensor
  // cores (pointwise_mma.cu, grouped_mma.cu) where the GPU, dtype and
  // alignment allow, instead of summed on CUDA cores. The pointwise kernel
  // streams contiguous tiles; the grouped one indexes every tap.
  if (pointwise_mma_applies(s, dtype_of<T>(), direction, aligned))
    return static_cast<cudaError_t>(
        launch_pointwise_mma(s, dtype_of<T>(), direction, sm_count, a, b, out, stream));
  if (grouped_mma_applies(s, dtype_of<T>(), direction, aligned))
    return static_cast<cudaError_t>(launch_grouped_mma(s, dtype_of<T>(), direction, sizeof(Index) == 8, sm_count,
                                                       a, b, out, stream));
  const GatherLaunch l = gather_launch(s, dtype_of<T>(), direction, vec, sm_count);
  const bool backward = direction == DirectDirection::kBackwardData;
  if (!s.channels_last) {
    if (backward)
      gather_nchw<T, Index, true><<<l.grid, l.block, 0, stream>>>(g, ta, tb, to);
    else
      gather_nchw<T, Index, false><<<l.grid, l.block, 0, stream>>>(g, ta, tb, to);
    return cudaGetLastError();
  }
#define TORCH_CUDNN_ALGO_GATHER(VEC, BACKWARD, DEPTHWISE) \
  gather_nhwc<T, Index, VEC, BACKWARD, DEPTHWISE><<<l.grid, l.block, l.shared_bytes, stream>>>(g, ta, tb, to)
  if (backward) {
    if (is_depthwise(s)) {
      if (vectorised) TORCH_CUDNN_ALGO_GATHER(kVec, true, true); else TORCH_CUDNN_ALGO_GATHER(1, true, true);
    } else {
      if (vectorised) TORCH_CUDNN_ALGO_GATHER(kVec, true, false); else TORCH_CUDNN_ALGO_GATHER(1, true, false);
    }
  } else {
    if (is_depthwise(s)) {
      if (vectorised) TORCH_CUDNN_ALGO_GATHER(kVec, false, true); else TORCH_CUDNN_ALGO_GATHER(1, false, true);
    } else {
      if (vectorised) TORCH_CUDNN_ALGO_GATHER(kVec, false, false); else TORCH_CUDNN_ALGO_GATHER(1, false, false);
    }
  }
#undef TORCH_CUDNN_ALGO_GATHER
  return cudaGetLastError();
}

}  // namespace

namespace {

std::string refusal_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  if (s.groups < 1 || s.c % s.groups != 0 || s.k % s.groups != 0) return "channels do not divide into the groups";
  if (s.n < 1 || s.c < 1 || s.k < 1 || s.p < 1 || s.q < 1) return "an operand is empty";
  const int64_t dst_c = direction == DirectDirection::kBackwardData ? s.c : s.k;
  if (!s.channels_last && dst_c > 65535) return "more than 65535 channels in NCHW";
  if (direction == DirectDirection::kBackwardFilter && !s.channels_last && s.k > 65535)
    return "more than 65535 output channels in NCHW";
  if (s.channels_last && direction != DirectDirection::kBackwardFilter) {
    const int vec = nhwc_vector(s, dtype, direction);
    const int64_t src_c = direction == DirectDirection::kBackwardData ? s.k : s.c;
    const int64_t taps = (src_c / s.groups) * s.r * s.s;
    if (static_cast<size_t>(taps * vec * element_bytes(dtype)) > kMaxStagedWeightBytes)
      return "a group's weights do not fit in shared memory (too many channels per group times taps)";
  }
  return "";
}

size_t workspace_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction, int sm_count) {
  if (direction != DirectDirection::kBackwardFilter) return 0;
  // The launch vectorises only aligned operands, and takes the tensor-core
  // filter kernels only for aligned operands on a GPU that has them: room for
  // every way.
  const int64_t slices = std::max(filter_launch(s, dtype, 1, sm_count).slices,
                                  filter_launch(s, dtype, nhwc_vector(s, dtype, direction), sm_count).slices);
  const int acc_bytes = dtype == DirectDType::kDouble ? 8 : 4;
  return std::max({static_cast<size_t>(slices * (s.c / s.groups) * s.r * s.s * s.k * acc_bytes),
                   gemm_filter_workspace_bytes(s, dtype, sm_count),
                   pointwise_filter_workspace_bytes(s, dtype, sm_count)});
}

template <typename T>
cudaError_t launch_indexed(const DirectLaunch& l, const void* a, const void* b, void* out, void* workspace,
                           cudaStream_t stream) {
  if (l.wide_index)
    return launch_typed<T, int64_t>(l.shape, l.direction, l.gemm_filter, a, b, out, workspace, l.sm_count, stream);
  return launch_typed<T, int>(l.shape, l.direction, l.gemm_filter, a, b, out, workspace, l.sm_count, stream);
}

}  // namespace

DirectLaunch prepare_direct_conv(const DirectConvShape& s, DirectDType dtype, DirectDirection direction,
                                 int sm_count) {
  DirectLaunch l;
  l.shape = s;
  l.dtype = dtype;
  l.direction = direction;
  l.sm_count = sm_count;
  l.depthwise = depthwise_applies(s, dtype, direction);
  if (l.depthwise) {
    // Its own index widths (64-bit row bases): wide_index does not apply.
    l.workspace_bytes = depthwise_workspace_bytes(s, dtype, direction, sm_count);
    return l;
  }
  l.refusal = refusal_of(s, dtype, direction);
  if (!l.refusal.empty()) return l;
  l.workspace_bytes = workspace_of(s, dtype, direction, sm_count);
  // The shape decides here, once; the GPU (current at launch, not necessarily
  // here: runners are built on worker threads) and dy's alignment at launch.
  l.gemm_filter = gemm_filter_fits(s, dtype, direction);
  // Every element index, the partial sums' included, must fit 32 bits for int arithmetic.
  const int64_t partials = static_cast<int64_t>(l.workspace_bytes / (dtype == DirectDType::kDouble ? 8 : 4));
  const int64_t largest = std::max({s.n * s.c * s.h * s.w, s.n * s.k * s.p * s.q,
                                    s.k * (s.c / s.groups) * s.r * s.s, partials});
  l.wide_index = largest >= (int64_t{1} << 31) - 1;
  return l;
}

int launch_direct_conv(const DirectLaunch& l, const void* a, const void* b, void* out, void* workspace,
                       CUstream_st* stream) {
  if (l.depthwise)
    return launch_depthwise(l.shape, l.dtype, l.direction, l.sm_count, a, b, out, workspace, stream);
  switch (l.dtype) {
    case DirectDType::kHalf: return launch_indexed<__half>(l, a, b, out, workspace, stream);
    case DirectDType::kBFloat16: return launch_indexed<__nv_bfloat16>(l, a, b, out, workspace, stream);
    case DirectDType::kFloat: return launch_indexed<float>(l, a, b, out, workspace, stream);
    case DirectDType::kDouble: return launch_indexed<double>(l, a, b, out, workspace, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

const char* direct_conv_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

namespace {
// Asked for its attributes, the runtime loads this file's code for the current
// GPU, as a launch would: machine code of its architecture, or PTX the driver
// compiles. Every kernel file is compiled with the same architectures
// (buildtools/cuda_kernels.py), so what holds for this one holds for all.
__global__ void image_probe() {}

#define TCA_STRINGIFY(...) #__VA_ARGS__
#define TCA_EXPAND_STRINGIFY(...) TCA_STRINGIFY(__VA_ARGS__)
}  // namespace

std::string direct_conv_image_problem() {
  cudaFuncAttributes attributes;
  const cudaError_t error = cudaFuncGetAttributes(&attributes, image_probe);
  if (error == cudaSuccess) return "";
  cudaGetLastError();  // not a sticky error: leave nothing behind for the next launch's check
  return cudaGetErrorString(error);
}

std::string direct_conv_architectures() {
#ifdef TORCH_CUDNN_ALGO_KERNEL_ARCHS
  std::string names = TCA_EXPAND_STRINGIFY(TORCH_CUDNN_ALGO_KERNEL_ARCHS);  // "sm_80/sm_90/compute_90"
  std::replace(names.begin(), names.end(), '/', ' ');
  return names;
#else
  return "unknown architectures";
#endif
}

}  // namespace torch_cudnn_algo::kernels
