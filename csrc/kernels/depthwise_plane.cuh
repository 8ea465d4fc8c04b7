// The depthwise gather for small planes (dw_plane): forward at stride 1 or 2
// and backward data at stride 1, square compile-time windows (3, 5, 7),
// dilation 1. Included by depthwise_choices.cuh (and so by depthwise.cu and the
// check program's sweep); anonymous namespace, like depthwise_kernels.cuh.
//
// Why a second gather: on small planes the strip gather (dw_gather) is bound by
// instruction issue and latency, not memory. ncu on the H200 (64x960x7x7, 5x5)
// found it issuing about three integer-address, bound-check and fp16-to-fp32
// instructions per FMA, at 128 registers a thread (25% occupancy). Here a block
// stages, once and as fp32, the zero-padded source rows that a band of
// destination rows reads, for a tile of kPlaneTile channels, and the tile's
// taps (flipped for the backward data); each thread then sums one vector of 4
// channels over a strip of STRIP destination columns of one row from shared
// memory, with compile-time offsets, no bound checks and no conversions. On
// the zoo's 14x14 layers that is 1.09-1.40x the strip gather (H200); at 7x7
// both stay near 0.020 ms, the staging's instructions taking what the sums
// save; from 28x28 on the strip gather, which finds its re-reads in L1, wins
// (benchmarks/results/kernels-h200-2026-12-02-depthwise-plane-sweep.md).
//
// Both directions are one correlation over the staged source:
//   dst[y][x] += src[y*SW - pad_h + r][x*SW - pad_w + s] * taps[r][s]
//   forward:       src x, dst y, taps w, pads (ph, pw)
//   backward data: src dy, dst dx, taps w flipped, pads (KS-1-ph, KS-1-pw), SW 1
#pragma once

#include "kernels/depthwise_kernels.cuh"

namespace torch_cudnn_algo::kernels {
namespace {

// Channels a block's tile holds, and a thread's vector of them (LDS.128 of fp32).
constexpr int kPlaneTile = 32;
constexpr int kPlaneVec = 4;
// Shared memory a block stages (taps and source band), below the 48 KiB a
// launch gets without opting in, so several blocks fit an SM.
constexpr size_t kPlaneShared = 40 * 1024;

// Launch-time choices: destination rows a block's band holds at most, images
// a block covers at most.
struct PlaneLaunch {
  int max_band = 7;
  int max_images = 1;
};

struct PlaneGeom {
  int n, c, src_h, src_w, dst_h, dst_w;
  int pad_h, pad_w;  // of the correlation
  int band, bands;   // destination rows a block covers; bands per image
  int images;        // images a block covers (side by side, each its own threads)
  int strips;        // strips per destination row
  int rows_s, cols_s;  // staged source rows and columns
  long long ws0, ws2, ws3;  // weight strides of channel, filter row, filter column
  bool flip;
};

// Stages `rows` rows of `cols` positions of a channel tile as fp32,
// [row][column][tile channel]. row_of(rr, base, live) names row rr's source:
// base at its column 0 and channel tile0, live false where the row is outside
// the image (zeros); columns col0 + col outside [0, width) are zeros too. A
// row a thread row, its 16-byte loads across threadIdx.x: no division an
// element, several loads in flight.
template <typename T, typename RowOf>
__device__ __forceinline__ void stage_rows(float* to, int rows, int cols, int col0, int width, int c, int tile0,
                                           RowOf&& row_of) {
  constexpr int kGlobalVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kLoads = kPlaneTile / kGlobalVec;  // 16-byte loads per staged position
  for (int rr = threadIdx.y; rr < rows; rr += blockDim.y) {
    const T* base;
    bool row_live;
    row_of(rr, base, row_live);
#pragma unroll 4
    for (int j = threadIdx.x; j < cols * kLoads; j += blockDim.x) {
      const int part = j % kLoads, col = j / kLoads, sx = col0 + col;
      const bool live = row_live && sx >= 0 && sx < width && tile0 + part * kGlobalVec < c;
      float f[kGlobalVec];
      load_f<T, kGlobalVec>(base + (live ? sx * c + part * kGlobalVec : 0), live, f);
      float* o = to + (rr * cols + col) * kPlaneTile + part * kGlobalVec;
#pragma unroll
      for (int v = 0; v < kGlobalVec; v += 4) *reinterpret_cast<float4*>(o + v) = make_float4(f[v], f[v + 1], f[v + 2], f[v + 3]);
    }
  }
}

// Block: kPlaneTile / kPlaneVec channel vectors (x) by images * band * strips
// threads (y: strip fastest, then band row, then image); grid: (image groups *
// bands, channel tiles). The staging loops are unrolled so that each thread
// has several loads in flight.
template <typename T, int KS, int SW, int STRIP>
__global__ void __launch_bounds__(256) dw_plane(PlaneGeom g, const T* __restrict__ src, const T* __restrict__ weight,
                                                T* __restrict__ dst) {
  constexpr int kTaps = KS * KS;
  constexpr int kSpan = (STRIP - 1) * SW + KS;  // source columns a strip reads
  extern __shared__ __align__(16) float smem[];
  float* taps = smem;                       // [tap][tile channel]
  float* band = smem + kTaps * kPlaneTile;  // [row][column][tile channel]
  const int tile0 = blockIdx.y * kPlaneTile;
  const int n0 = blockIdx.x / g.bands * g.images, y0 = (blockIdx.x % g.bands) * g.band;
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;

  // Taps read in the weight's memory order (each channel's taps are contiguous
  // in the standard layout), stored [tap][tile channel].
#pragma unroll 4
  for (int i = tid; i < kTaps * kPlaneTile; i += threads) {
    const int local = i / kTaps, tap = i - local * kTaps, ch = tile0 + local;
    const int r = tap / KS, s = tap - r * KS;
    const float w = ch < g.c ? to_acc(weight[ch * g.ws0 + r * g.ws2 + s * g.ws3]) : 0.f;
    taps[(g.flip ? kTaps - 1 - tap : tap) * kPlaneTile + local] = w;
  }
  const long long src_row = static_cast<long long>(g.src_w) * g.c, src_image = src_row * g.src_h;
  const int sy0 = y0 * SW - g.pad_h;
  const int positions = g.rows_s * g.cols_s;
  stage_rows<T>(band, g.images * g.rows_s, g.cols_s, -g.pad_w, g.src_w, g.c, tile0,
                [&](int rr, const T*& base, bool& live) {
                  const int img = rr / g.rows_s, sy = sy0 + rr - img * g.rows_s;
                  live = n0 + img < g.n && sy >= 0 && sy < g.src_h;
                  base = src + (live ? (n0 + img) * src_image + sy * src_row + tile0 : 0);
                });
  __syncthreads();

  const int c0 = tile0 + threadIdx.x * kPlaneVec;
  const int strip = threadIdx.y % g.strips, k = threadIdx.y / g.strips % g.band;
  const int img = threadIdx.y / (g.strips * g.band), n = n0 + img;
  const int y = y0 + k, x0 = strip * STRIP;
  if (c0 >= g.c || n >= g.n || y >= g.dst_h) return;
  float acc[STRIP][kPlaneVec];
#pragma unroll
  for (int j = 0; j < STRIP; ++j)
#pragma unroll
    for (int v = 0; v < kPlaneVec; ++v) acc[j][v] = 0.f;
  const float* mine = taps + threadIdx.x * kPlaneVec;
  const float* at = band + (img * positions + (k * SW) * g.cols_s + x0 * SW) * kPlaneTile + threadIdx.x * kPlaneVec;
#pragma unroll
  for (int r = 0; r < KS; ++r) {
    float wr[KS][kPlaneVec];
#pragma unroll
    for (int s = 0; s < KS; ++s) load_shared<kPlaneVec>(mine + (r * KS + s) * kPlaneTile, wr[s]);
    const float* row = at + r * g.cols_s * kPlaneTile;
#pragma unroll
    for (int o = 0; o < kSpan; ++o) {
      float f[kPlaneVec];
      load_shared<kPlaneVec>(row + o * kPlaneTile, f);
#pragma unroll
      for (int j = 0; j < STRIP; ++j) {
        const int s = o - j * SW;
        if (s >= 0 && s < KS)
#pragma unroll
          for (int v = 0; v < kPlaneVec; ++v) acc[j][v] += f[v] * wr[s][v];
      }
    }
  }
  T* out = dst + (static_cast<long long>(n) * g.dst_h + y) * g.dst_w * static_cast<long long>(g.c) + c0;
#pragma unroll
  for (int j = 0; j < STRIP; ++j) {
    if (x0 + j >= g.dst_w) break;
    Vec<T, kPlaneVec> o;
#pragma unroll
    for (int v = 0; v < kPlaneVec; ++v) o.v[v] = from_acc<T>(acc[j][v]);
    *reinterpret_cast<Vec<T, kPlaneVec>*>(out + (x0 + j) * static_cast<long long>(g.c)) = o;
  }
}

// The plane gather's geometry for a shape, or false where it does not apply:
// a square window of KS taps, dilation 1, stride SW in both dimensions (the
// backward data at stride 1 only, with pads below KS), channels in whole
// 16-byte vectors, and a band of at least one destination row within
// kPlaneShared. Bands are balanced: the fewest of at most max_band rows; then
// as many images side by side (at most max_images) as the shared memory and
// 256 threads allow.
template <typename T, int KS, int SW, int STRIP>
bool plane_geom(const DirectConvShape& s, bool backward, PlaneLaunch opt, PlaneGeom& g) {
  constexpr int kGlobalVec = 16 / static_cast<int>(sizeof(T));
  if (s.r != KS || s.s != KS || s.dilation_h != 1 || s.dilation_w != 1) return false;
  if (s.stride_h != SW || s.stride_w != SW || (backward && SW != 1)) return false;
  if (backward && (s.pad_h > KS - 1 || s.pad_w > KS - 1)) return false;
  if (s.c % kGlobalVec != 0 || ceil_div(s.c, kPlaneTile) > 65535) return false;
  set_correlation(g, s, backward, KS);
  g.strips = static_cast<int>(ceil_div(g.dst_w, STRIP));
  g.cols_s = (g.strips * STRIP - 1) * SW + KS;
  const size_t taps_bytes = size_t{KS * KS * kPlaneTile} * sizeof(float);
  const size_t row_bytes = static_cast<size_t>(g.cols_s) * kPlaneTile * sizeof(float);
  // The band: at most max_band rows, its staging within kPlaneShared, a row's
  // strips times the tile's vectors within one 256-thread block.
  int band = std::min(opt.max_band, g.dst_h);
  while (band > 0 && (taps_bytes + static_cast<size_t>((band - 1) * SW + KS) * row_bytes > kPlaneShared ||
                      band * g.strips * (kPlaneTile / kPlaneVec) > 256))
    --band;
  if (band == 0) return false;
  g.bands = static_cast<int>(ceil_div(g.dst_h, band));
  g.band = static_cast<int>(ceil_div(g.dst_h, g.bands));
  g.rows_s = (g.band - 1) * SW + KS;
  g.n = static_cast<int>(s.n);
  const size_t image_bytes = static_cast<size_t>(g.rows_s) * row_bytes;
  g.images = std::max(1, std::min(opt.max_images, g.n));
  while (g.images > 1 && (taps_bytes + g.images * image_bytes > kPlaneShared ||
                          g.images * g.band * g.strips * (kPlaneTile / kPlaneVec) > 256))
    --g.images;
  if (ceil_div(s.n, g.images) * g.bands >= (int64_t{1} << 31)) return false;
  g.ws0 = s.weight_strides[0]; g.ws2 = s.weight_strides[2]; g.ws3 = s.weight_strides[3];
  return true;
}

inline size_t plane_shared_bytes(const PlaneGeom& g, int ks) {
  return (static_cast<size_t>(ks) * ks + static_cast<size_t>(g.images) * g.rows_s * g.cols_s) * kPlaneTile *
         sizeof(float);
}

// Launches the plane gather with the geometry plane_geom made for the shape
// (src: x forward, dy backward; src and dst 16-byte aligned, which the caller
// checks: the dispatch falls back to the strip gather where they are not).
template <typename T, int KS, int SW, int STRIP>
cudaError_t launch_plane(const PlaneGeom& g, const T* src, const T* weight, T* dst, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(g.n, g.images) * g.bands), static_cast<unsigned>(ceil_div(g.c, kPlaneTile)));
  const dim3 block(kPlaneTile / kPlaneVec, static_cast<unsigned>(g.images * g.band * g.strips));
  return launch_kernel(dw_plane<T, KS, SW, STRIP>, grid, block, plane_shared_bytes(g, KS), stream, g, src, weight, dst);
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
