// The depthwise filter gradient for small planes, staged like the plane gather
// (depthwise_plane.cuh). Swept on the H200 against the strip filter kernel and
// not adopted (docs/design.md, "What we measured and did not keep").
#pragma once

#include "kernels/depthwise_plane.cuh"

namespace torch_cudnn_algo::kernels {
namespace {

// ---------------------------------------------------------------- plane filter
// The backward filter for small planes (dw_plane_filter), stride SW in both
// dimensions, the same staging: work units are (n, band of output rows); a
// block takes a slice of them for a tile of kPlaneTile channels and, unit by
// unit, stages the x rows the band reads (zero-padded) and the band's dy
// (zeros past q), both fp32. A thread holds a vector of 4 channels of one
// filter row's KS taps and sums x * dy over the rows part, part + parts, ...
// of each band; the block adds the parts in a fixed order and writes one fp32
// partial per slice, which sum_slices adds in order (deterministic, as dw_filter).
struct PlaneFilterGeom {
  PlaneGeom plane;  // src: x, dst: dy's extent (dst_h, dst_w = p, q)
  int units, chunk;  // (n, band) units; units per slice
};

template <typename T, int KS, int SW, int STRIP>
__global__ void __launch_bounds__(256) dw_plane_filter(PlaneFilterGeom fg, const T* __restrict__ x,
                                                       const T* __restrict__ dy, float* __restrict__ partials) {
  constexpr int kTaps = KS * KS;
  constexpr int kSpan = (STRIP - 1) * SW + KS;
  extern __shared__ __align__(16) float smem[];
  const PlaneGeom& g = fg.plane;
  const int dy_cols = g.strips * STRIP;
  float* xs = smem;                                        // [row][column][tile channel]
  float* ds = smem + g.rows_s * g.cols_s * kPlaneTile;     // [band row][column][tile channel]
  const int tile0 = blockIdx.y * kPlaneTile;
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int parts = blockDim.y / KS;
  const int r = threadIdx.y % KS, part = threadIdx.y / KS;
  const int c0 = tile0 + threadIdx.x * kPlaneVec;
  float acc[KS][kPlaneVec];
#pragma unroll
  for (int s = 0; s < KS; ++s)
#pragma unroll
    for (int v = 0; v < kPlaneVec; ++v) acc[s][v] = 0.f;
  const long long x_row = static_cast<long long>(g.src_w) * g.c, dy_row = static_cast<long long>(g.dst_w) * g.c;
  const int start = blockIdx.x * fg.chunk, end = std::min(fg.units, start + fg.chunk);
  for (int unit = start; unit < end; ++unit) {
    const int n = unit / g.bands, y0 = (unit % g.bands) * g.band;
    const T* image = x + static_cast<long long>(n) * g.src_h * x_row;
    const T* grad = dy + static_cast<long long>(n) * g.dst_h * dy_row;
    const int sy0 = y0 * SW - g.pad_h;
    __syncthreads();  // the previous unit's reads are done
    stage_rows<T>(xs, g.rows_s, g.cols_s, -g.pad_w, g.src_w, g.c, tile0, [&](int rr, const T*& base, bool& live) {
      const int sy = sy0 + rr;
      live = sy >= 0 && sy < g.src_h;
      base = image + (live ? sy * x_row + tile0 : 0);
    });
    stage_rows<T>(ds, g.band, dy_cols, 0, g.dst_w, g.c, tile0, [&](int rr, const T*& base, bool& live) {
      live = y0 + rr < g.dst_h;
      base = grad + (live ? (y0 + rr) * dy_row + tile0 : 0);
    });
    __syncthreads();
    if (c0 >= g.c) continue;
    for (int k = part; k < g.band; k += parts) {
      const float* xrow = xs + ((k * SW + r) * g.cols_s) * kPlaneTile + threadIdx.x * kPlaneVec;
      const float* drow = ds + (k * dy_cols) * kPlaneTile + threadIdx.x * kPlaneVec;
      for (int strip = 0; strip < g.strips; ++strip) {
        float gd[STRIP][kPlaneVec];
#pragma unroll
        for (int j = 0; j < STRIP; ++j) load_shared<kPlaneVec>(drow + (strip * STRIP + j) * kPlaneTile, gd[j]);
        const float* at = xrow + strip * STRIP * SW * kPlaneTile;
#pragma unroll
        for (int o = 0; o < kSpan; ++o) {
          float f[kPlaneVec];
          load_shared<kPlaneVec>(at + o * kPlaneTile, f);
#pragma unroll
          for (int j = 0; j < STRIP; ++j) {
            const int s = o - j * SW;
            if (s >= 0 && s < KS)
#pragma unroll
              for (int v = 0; v < kPlaneVec; ++v) acc[s][v] += f[v] * gd[j][v];
          }
        }
      }
    }
  }
  // The parts' sums, added in part order: scratch [part][r][s][tile channel].
  __syncthreads();
#pragma unroll
  for (int s = 0; s < KS; ++s)
#pragma unroll
    for (int v = 0; v < kPlaneVec; ++v)
      smem[((part * KS + r) * KS + s) * kPlaneTile + threadIdx.x * kPlaneVec + v] = acc[s][v];
  __syncthreads();
  for (int i = tid; i < kTaps * kPlaneTile; i += threads) {
    const int local = i % kPlaneTile, tap = i / kPlaneTile, c = tile0 + local;
    if (c >= g.c) continue;
    float sum = 0.f;
    for (int q = 0; q < parts; ++q) sum += smem[(q * kTaps + tap) * kPlaneTile + local];
    partials[(static_cast<long long>(blockIdx.x) * kTaps + tap) * g.c + c] = sum;
  }
}

// The plane filter's geometry and slices, or false where it does not apply
// (as plane_geom for the forward, the staging of x and dy within kPlaneShared).
template <typename T, int KS, int SW, int STRIP>
bool plane_filter_geom(const DirectConvShape& s, int sm_count, PlaneLaunch opt, int slices_per_sm, PlaneFilterGeom& fg,
                       int& parts, int64_t& slices) {
  PlaneGeom& g = fg.plane;
  opt.max_images = 1;
  if (!plane_geom<T, KS, SW, STRIP>(s, false, opt, g)) return false;
  parts = 256 / (kPlaneTile / kPlaneVec * KS);
  const size_t row_bytes = static_cast<size_t>(g.cols_s) * kPlaneTile * sizeof(float);
  const size_t dy_row_bytes = static_cast<size_t>(g.strips) * STRIP * kPlaneTile * sizeof(float);
  int band = g.band;
  while (band > 0 && static_cast<size_t>((band - 1) * SW + KS) * row_bytes + band * dy_row_bytes > kPlaneShared) --band;
  if (band == 0) return false;
  g.bands = static_cast<int>(ceil_div(g.dst_h, band));
  g.band = static_cast<int>(ceil_div(g.dst_h, g.bands));
  g.rows_s = (g.band - 1) * SW + KS;
  if (static_cast<int64_t>(s.n) * g.bands >= (int64_t{1} << 30)) return false;
  fg.units = static_cast<int>(s.n * g.bands);
  const int64_t tiles = ceil_div(s.c, kPlaneTile);
  slices = std::max<int64_t>(1, std::min<int64_t>({ceil_div(int64_t{slices_per_sm} * std::max(1, sm_count), tiles),
                                                   fg.units, 65535}));
  fg.chunk = static_cast<int>(ceil_div(fg.units, slices));
  slices = ceil_div(fg.units, fg.chunk);
  return true;
}

inline size_t plane_filter_shared_bytes(const PlaneFilterGeom& fg, int ks, int strip, int parts) {
  const PlaneGeom& g = fg.plane;
  const size_t staged = static_cast<size_t>(g.rows_s) * g.cols_s + static_cast<size_t>(g.band) * g.strips * strip;
  const size_t reduction = static_cast<size_t>(parts) * ks * ks;
  return std::max(staged, reduction) * kPlaneTile * sizeof(float);
}

template <typename T, int KS, int SW, int STRIP>
size_t plane_filter_workspace(const DirectConvShape& s, int sm_count, PlaneLaunch opt, int slices_per_sm) {
  PlaneFilterGeom fg;
  int parts;
  int64_t slices;
  if (!plane_filter_geom<T, KS, SW, STRIP>(s, sm_count, opt, slices_per_sm, fg, parts, slices)) return 0;
  return static_cast<size_t>(slices * KS * KS * s.c) * sizeof(float);
}

// Runs the plane filter kernel, then sum_slices into dweight; the workspace
// holds plane_filter_workspace bytes.
template <typename T, int KS, int SW, int STRIP>
cudaError_t launch_plane_filter(const DirectConvShape& s, int sm_count, PlaneLaunch opt, int slices_per_sm, const T* x,
                                const T* dy, T* dweight, void* workspace, cudaStream_t stream) {
  PlaneFilterGeom fg;
  int parts;
  int64_t slices;
  if (!plane_filter_geom<T, KS, SW, STRIP>(s, sm_count, opt, slices_per_sm, fg, parts, slices))
    return cudaErrorInvalidValue;
  const uintptr_t bits = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(dy);
  if (bits % 16 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(ceil_div(s.c, kPlaneTile)));
  const dim3 block(kPlaneTile / kPlaneVec, static_cast<unsigned>(KS * parts));
  const cudaError_t launched =
      launch_kernel(dw_plane_filter<T, KS, SW, STRIP>, grid, block, plane_filter_shared_bytes(fg, KS, STRIP, parts),
                    stream, fg, x, dy, static_cast<float*>(workspace));
  if (launched != cudaSuccess) return launched;
  const PlaneGeom& g = fg.plane;
  return launch_sum_slices(static_cast<const float*>(workspace), slices, s.r * s.s * s.c,
                           DwWeightStore<T>{dweight, g.c, KS, g.ws0, g.ws2, g.ws3}, stream);
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
