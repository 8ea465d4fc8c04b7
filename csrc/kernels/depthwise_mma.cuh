// The depthwise tensor-core gather (dw_mma): forward and backward data at
// stride 1 and dilation 1, square windows (3, 5, 7; the dispatch runs it on
// 7x7 only, where it is faster: mma_gather_faster), fp16 and bf16, channels
// in whole 8-channel vectors. Included by depthwise_choices.cuh
// (and so by depthwise.cu and the check program); anonymous namespace, like
// depthwise_kernels.cuh.
//
// Why tensor cores for a depthwise convolution: the CUDA-core gathers are bound
// by instruction issue (about three address, bound-check and conversion
// instructions per FMA, benchmarks/results/kernels-h200-2026-12-02-depthwise-
// plane-sweep.md), at 6-10% of the memory bound on ConvNeXt's 7x7 layers. One
// row of one channel is a product with a banded (Toeplitz) matrix:
//   dst[y][x0 + q] = sum over r of  sum over k < 16 of  S[y + r][x0 + k] * T_r[k][q],
//   T_r[k][q] = taps[r][k - q] where 0 <= k - q < KS, else 0,
// with S the source zero-padded by (pad_h, pad_w). For one channel, 16
// destination rows (of one or two images) and 8 destination columns, that is
// KS mma.sync m16n8k16: A = 16 staged source rows of 16 columns, B = T_r, which
// depends on the channel and filter row only and so stays in registers. 7 of a
// column's 16 products are taps at 7x7 (3 at 3x3); the tensor cores have that
// to spare, and an mma replaces 896 FMAs at 7x7.
//
// A block stages, for 8 channels (one 16-byte vector a pixel), the zero-padded
// source rows of a band of destination rows (of `images` images) and of a
// chunk of at most kMmaMaxColTiles column tiles, transposed to [channel][row]
// [column] so that a lane's A elements (two neighbouring columns) are one
// 32-bit shared load. Each warp multiplies two channels; their results meet in
// shared memory as [row][column][channel] and leave as 16-byte stores.
//
// Sums: fp32 in the tensor cores, each destination element by one lane in a
// fixed order (deterministic). As cuDNN's FFT and Winograd algorithms do, a
// NaN or infinity in the source reaches the destination columns within 15 of
// it in its row and channel (through the zero entries of T), not only those
// whose window holds it.
//
//   forward:       src x, dst y, taps w, pads (ph, pw)
//   backward data: src dy, dst dx, taps w flipped, pads (KS-1-ph, KS-1-pw)
#pragma once

#include "kernels/depthwise_kernels.cuh"
#include "kernels/mma_sync.cuh"

#include <cstring>

namespace torch_cudnn_algo::kernels {
namespace {

// Channels a block stages: one 16-byte vector a pixel; a warp multiplies two.
constexpr int kMmaChannels = 8;
constexpr int kMmaWarps = kMmaChannels / 2;
constexpr int kMmaThreads = 32 * kMmaWarps;
// Destination rows (A rows) and columns (B columns) of one mma.
constexpr int kMmaRows = 16;
constexpr int kMmaColTile = 8;
// A tile's source columns: its 8 destination columns and 8 more (KS - 1 <= 8).
constexpr int kMmaSpan = 16;
// Column tiles a block covers at most: a warp keeps no per-tile state, this
// only bounds the staged band.
constexpr int kMmaMaxColTiles = 8;
// The widest window the kernels take: a tile's 16 source columns hold its 8
// destination columns' windows.
constexpr int kMmaMaxWindow = 7;
// Below the 48 KiB a launch gets without opting in.
constexpr size_t kMmaShared = 46 * 1024;

struct MmaGeom {
  int n, c, src_h, src_w, dst_h, dst_w;
  int pad_h, pad_w;         // of the correlation
  int band, bands, images;  // destination rows of an image a block covers, bands per image, images a block
  int col_tiles, chunks;    // column tiles a block covers, column chunks per row
  int rows_s;               // staged source rows per image: band + KS - 1
  int row_words;            // a staged row's stride in 32-bit words (two columns each)
  int out_pixels;           // staged destination pixels a row (col_tiles * 8 + 1)
  int ks;                   // the window's width and height (3, 5 or 7)
  long long ws0, ws2, ws3;  // weight strides of channel, filter row, filter column
  bool flip;
};

// 16-bit elements as their bits: the staging and the fragments move bits only.
template <typename T>
__device__ __forceinline__ uint32_t bits_of(T v) {
  static_assert(sizeof(T) == 2, "bits_of: 16-bit types");
  uint16_t u;
  memcpy(&u, &v, 2);
  return u;
}

// B = T_r for channel ch: this lane's two registers (see mma_sync.cuh).
__device__ __forceinline__ void toeplitz_fragment(const MmaGeom& g, const uint16_t* __restrict__ weight, int ch, int r,
                                                  int lane, uint32_t (&b)[2]) {
  const int col = lane / 4, k0 = 2 * (lane % 4);
  const int fr = g.flip ? g.ks - 1 - r : r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t pair = 0;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int s = k0 + 8 * h + e - col;
      if (s >= 0 && s < g.ks) {
        const int fs = g.flip ? g.ks - 1 - s : s;
        pair |= static_cast<uint32_t>(weight[ch * g.ws0 + fr * g.ws2 + fs * g.ws3]) << (16 * e);
      }
    }
    b[h] = pair;
  }
}

// Stages `words` words of each of `rows` rows as column pairs of 8 channels:
// word wd of row rr holds source columns col0 + 2 wd and col0 + 2 wd + 1 of
// source row row0 + rr (zeros outside the image), each channel in its plane
// (plane stride `plane`, row stride `row_words`).
template <typename T>
__device__ __forceinline__ void stage_pairs(uint32_t* to, int rows, int words, int row_words, int plane,
                                            const T* image, int height, int width, int c, int row0, int col0) {
#pragma unroll 4
  for (int i = threadIdx.x; i < rows * words; i += kMmaThreads) {
    const int rr = i / words, wd = i - rr * words;
    const int sy = row0 + rr, sx = col0 + 2 * wd;
    const bool row_live = sy >= 0 && sy < height;
    const T* base = image + (row_live ? static_cast<long long>(sy) * width * c : 0);
    Vec<uint32_t, 4> lo{}, hi{};
    if (row_live && sx >= 0 && sx < width)
      lo = load_vec<uint32_t, 4>(reinterpret_cast<const uint32_t*>(base + static_cast<long long>(sx) * c));
    if (row_live && sx + 1 >= 0 && sx + 1 < width)
      hi = load_vec<uint32_t, 4>(reinterpret_cast<const uint32_t*>(base + static_cast<long long>(sx + 1) * c));
    uint32_t* at = to + rr * row_words + wd;
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      at[(2 * v) * plane] = (lo.v[v] & 0xFFFFu) | (hi.v[v] << 16);
      at[(2 * v + 1) * plane] = (lo.v[v] >> 16) | (hi.v[v] & 0xFFFF0000u);
    }
  }
}

// Grid: (channel groups of 8, bands * chunks, image groups); kMmaThreads threads.
// One kernel for every window up to kMmaMaxWindow: the taps' registers and
// loops are unrolled for the largest and skip the rows past g.ks (uniform
// branches), which keeps the wheel one kernel smaller per window.
template <typename T>
__global__ void __launch_bounds__(kMmaThreads) dw_mma(MmaGeom g, const T* __restrict__ src,
                                                      const T* __restrict__ weight, T* __restrict__ dst) {
  extern __shared__ __align__(16) uint32_t mma_shared[];
  const int rows_staged = g.images * g.rows_s, plane_words = rows_staged * g.row_words;
  uint32_t* planes = mma_shared;                                // [channel][staged row][column pair]
  uint32_t* staged = mma_shared + kMmaChannels * plane_words;   // [row][pixel][channel pair]
  const int c0 = blockIdx.x * kMmaChannels;
  const int band = blockIdx.y % g.bands, chunk = blockIdx.y / g.bands;
  const int y0 = band * g.band, x0 = chunk * g.col_tiles * kMmaColTile;
  const int n0 = blockIdx.z * g.images;
  const long long src_image = static_cast<long long>(g.src_h) * g.src_w * g.c;

  // Stage column pairs, image by image (zeros for images past the batch).
  for (int img = 0; img < g.images; ++img) {
    const bool live = n0 + img < g.n;
    stage_pairs<T>(planes + img * g.rows_s * g.row_words, g.rows_s, (g.col_tiles * kMmaColTile + kMmaSpan - kMmaColTile) / 2,
                   g.row_words, plane_words, live ? src + (n0 + img) * src_image + c0 : src, live ? g.src_h : 0,
                   g.src_w, g.c, y0 - g.pad_h, x0 - g.pad_w);
  }

  // This lane's taps: the warp's two channels, every filter row.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint16_t* taps = reinterpret_cast<const uint16_t*>(weight);
  uint32_t b[2][kMmaMaxWindow][2];
#pragma unroll
  for (int cc = 0; cc < 2; ++cc)
#pragma unroll
    for (int r = 0; r < kMmaMaxWindow; ++r)
      if (r < g.ks) toeplitz_fragment(g, taps, c0 + 2 * warp + cc, r, lane, b[cc][r]);
  // The staged rows of this lane's A rows (lane / 4 and lane / 4 + 8): image
  // and band row; rows past the band's images read row 0 (never stored).
  int row_at[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = lane / 4 + 8 * h, img = m / g.band;
    row_at[h] = img < g.images ? (img * g.rows_s + m - img * g.band) * g.row_words : 0;
  }
  __syncthreads();

#pragma unroll 1
  for (int ct = 0; ct < g.col_tiles; ++ct) {
    float acc[2][4] = {};
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {
      const uint32_t* plane = planes + (2 * warp + cc) * plane_words + ct * (kMmaColTile / 2) + lane % 4;
#pragma unroll
      for (int r = 0; r < kMmaMaxWindow; ++r) {
        if (r >= g.ks) break;
        const uint32_t* p0 = plane + row_at[0] + r * g.row_words;
        const uint32_t* p1 = plane + row_at[1] + r * g.row_words;
        const uint32_t a[4] = {p0[0], p1[0], p0[4], p1[4]};
        mma_16816<T>(acc[cc], a, b[cc][r]);
      }
    }
    // D[m][2t + e] of both channels: one word (channel pair) a pixel.
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = lane / 4 + 8 * h, col = ct * kMmaColTile + 2 * (lane % 4) + e;
        staged[(m * g.out_pixels + col) * (kMmaChannels / 2) + warp] =
            bits_of(from_acc<T>(acc[0][2 * h + e])) | bits_of(from_acc<T>(acc[1][2 * h + e])) << 16;
      }
  }
  __syncthreads();

  const int out_cols = g.col_tiles * kMmaColTile;
  for (int i = threadIdx.x; i < g.images * g.band * out_cols; i += kMmaThreads) {
    const int m = i / out_cols, col = i - m * out_cols;
    const int img = m / g.band, y = y0 + m - img * g.band, x = x0 + col, n = n0 + img;
    if (n >= g.n || y >= g.dst_h || x >= g.dst_w) continue;
    T* out = dst + ((static_cast<long long>(n) * g.dst_h + y) * g.dst_w + x) * g.c + c0;
    *reinterpret_cast<Vec<uint32_t, 4>*>(out) =
        *reinterpret_cast<const Vec<uint32_t, 4>*>(staged + (m * g.out_pixels + col) * (kMmaChannels / 2));
  }
}

// Shared memory of a block: the staged source planes, then the staged destination.
inline size_t mma_shared_bytes(const MmaGeom& g) {
  return (static_cast<size_t>(kMmaChannels) * g.images * g.rows_s * g.row_words +
          static_cast<size_t>(kMmaRows) * g.out_pixels * (kMmaChannels / 2)) * sizeof(uint32_t);
}

// The windows both tensor-core kernels can run: square, 3, 5 or 7 taps wide.
inline bool mma_window(const DirectConvShape& s) {
  static_assert(kMmaMaxWindow - 1 <= kMmaSpan - kMmaColTile, "a tile's source columns hold its window");
  return s.r == s.s && (s.s == 3 || s.s == 5 || s.s == 7) && s.dilation_h == 1 && s.dilation_w == 1;
}

// Where the tensor-core kernels run: only where they beat the CUDA-core ones,
// timed on an H200 on the zoo's depthwise layers, fp16 and bf16 alike
// (benchmarks/results/kernels-h200-2026-12-07-depthwise-mma.md). The gather
// on 7x7 windows with 28 or more output columns (1.09-1.38x at 56 and 28;
// 0.94-1.00x at 14, 0.77x at 7; 3x3 and 5x5 0.49-1.05x, where staging the
// source costs more than the few taps save); the filter gradient on 7x7 from
// 14 columns (0.97-1.32x; 0.29-0.99x below and on 3x3). On 5x5 windows the
// CUDA-core filter gradient, its grid in whole waves, is level or faster even
// at 28 columns (H100: 0.0761 against 0.0822 ms on EfficientNet's 240x28x28,
// 0.0421 against 0.0416 on MobileNetV3's 120x28x28).
inline bool mma_gather_faster(int ks, int64_t cols) { return ks == 7 && cols >= 28; }
inline bool mma_filter_faster(int ks, int64_t cols) { return ks == 7 && cols >= 14; }

// The tensor-core gather's geometry for a shape, or false where it does not
// apply or is not faster: a window mma_window takes where mma_gather_faster
// says so, stride 1 (the backward data with pads below the window), channels
// in whole 8-channel vectors. Bands are
// balanced: the fewest of at most 16 rows, then as many images as fill 16 A
// rows; column chunks likewise, of at most kMmaMaxColTiles tiles.
inline bool mma_geom(const DirectConvShape& s, bool backward, MmaGeom& g) {
  if (!mma_window(s)) return false;
  const int ks = static_cast<int>(s.s);
  if (s.stride_h != 1 || s.stride_w != 1) return false;
  if (backward && (s.pad_h > ks - 1 || s.pad_w > ks - 1)) return false;
  if (s.c % kMmaChannels != 0) return false;
  g.n = static_cast<int>(s.n);
  set_correlation(g, s, backward, ks);
  if (!mma_gather_faster(ks, g.dst_w)) return false;
  const int tiles = static_cast<int>(ceil_div(g.dst_w, kMmaColTile));
  g.chunks = static_cast<int>(ceil_div(tiles, kMmaMaxColTiles));
  g.col_tiles = static_cast<int>(ceil_div(tiles, g.chunks));
  g.bands = static_cast<int>(ceil_div(g.dst_h, kMmaRows));
  g.band = static_cast<int>(ceil_div(g.dst_h, g.bands));
  g.images = std::max(1, std::min(kMmaRows / g.band, g.n));
  g.rows_s = g.band + ks - 1;
  // A lane group's 8 A rows land on distinct banks when a row is 4 * odd words.
  int words = (g.col_tiles * kMmaColTile + kMmaSpan - kMmaColTile) / 2;
  if (words % 8 == 0) words += 4;
  g.row_words = words;
  g.out_pixels = g.col_tiles * kMmaColTile + 1;
  g.ks = ks;
  g.ws0 = s.weight_strides[0]; g.ws2 = s.weight_strides[2]; g.ws3 = s.weight_strides[3];
  if (int64_t{g.bands} * g.chunks > 65535 || ceil_div(g.n, g.images) > 65535) return false;
  return mma_shared_bytes(g) <= kMmaShared;
}

// Launches the tensor-core gather with the geometry mma_geom made (src: x
// forward, dy backward; src and dst 16-byte aligned, the GPU of compute
// capability 8.0 or newer, the shared memory within kMmaShared: the caller
// checks, the dispatch falls back to the other gathers where not).
template <typename T>
cudaError_t launch_mma(const MmaGeom& g, const T* src, const T* weight, T* dst, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(g.c / kMmaChannels), static_cast<unsigned>(g.bands * g.chunks),
                  static_cast<unsigned>(ceil_div(g.n, g.images)));
  return launch_kernel(dw_mma<T>, grid, dim3(kMmaThreads), mma_shared_bytes(g), stream, g, src, weight, dst);
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
