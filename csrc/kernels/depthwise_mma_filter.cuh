// The depthwise tensor-core filter gradient (dw_mma_filter): stride 1,
// dilation 1, square windows (3, 5, 7; the dispatch runs it on 7x7 only,
// where it is faster: mma_filter_faster), fp16 and bf16, channels in
// whole 8-channel vectors. Included by depthwise_choices.cuh after the
// gather it shares its staging conventions with (depthwise_mma.cuh).
//
// For one channel, with S the source x zero-padded by (pad_h, pad_w),
//   dw[r][s] = sum over (y, q) of dy[y][q] * S[y + r][q + s]
// is one product per dy row y and 16 source columns j of S:
//   D[s][r] += sum over k < 16 of  dy[y][j0 + k - s] * S[y + r][j0 + k]
// A = 16 rows (s = 0..7 of dy row y, then s = 0..7 of dy row y + 1), each a
// copy of the dy row shifted by s columns; B = 8 rows r of S, 16 columns each.
// The lower half of D then holds dw[r][s] of row y, the upper half dw[r - 1][s]
// of row y + 1 (the same S rows, one row nearer), so one mma.sync m16n8k16 adds
// two dy rows' 16 columns to every tap of a window up to 7x7 (8x8 products, 49
// of them taps). Source columns are taken by 16 in turn, so every (dy column,
// tap) pair is added once.
//
// A lane's A elements are two neighbouring dy columns starting at
// j0 + 2t - s + 8 (staged with an 8-column lead), odd where s is: dy is staged
// twice, the second copy one column later, so that each lane reads 32-bit
// aligned pairs from one of them.
//
// A block covers 8 channels (a warp two) and a contiguous slice of the (image,
// band of dy rows, column chunk) items, keeping its sums in the tensor cores'
// fp32 accumulators across them; it writes them as one slice of partials, and
// sum_slices (slice_sum.cuh) adds the slices in a fixed order (deterministic,
// no atomics).
#pragma once

#include "kernels/depthwise_mma.cuh"
#include "kernels/device_traits.cuh"

namespace torch_cudnn_algo::kernels {
namespace {

// Source columns an mma takes, and column tiles an item covers at most.
constexpr int kMmaFilterCols = 16;
constexpr int kMmaFilterMaxTiles = 4;
// dy rows a band holds at most (even: an mma takes two).
constexpr int kMmaFilterMaxBand = 16;
// S rows an mma's B reads beyond its first dy row: r = 0..7.
constexpr int kMmaFilterTapRows = 8;
// Blocks per SM the slices aim at (over the channel groups), where that many
// blocks' staging fits an SM's shared memory.
constexpr int kMmaFilterBlocksPerSm = 6;

struct MmaFilterGeom {
  int n, c, h, w, p, q;  // x [n][h][w][c], dy [n][p][q][c]
  int pad_h, pad_w;
  int band, bands;        // dy rows an item covers (even), bands per image
  int tiles, chunks;      // 16-column tiles an item covers, column chunks per row
  int rows_x;             // staged x rows: band + 6
  int x_words, dy_words;  // staged row strides, in 32-bit words
  int items, per_slice;   // (image, band, chunk) items, items a slice takes
  int ks;                 // the window's width and height (3, 5 or 7)
};

// Grid: (slices, channel groups of 8); kMmaThreads threads. partial[slice]
// [tap * c + channel], fp32. The window's size matters only to the final
// write: one kernel serves every window.
template <typename T>
__global__ void __launch_bounds__(kMmaThreads) dw_mma_filter(MmaFilterGeom g, const T* __restrict__ x,
                                                             const T* __restrict__ dy, float* __restrict__ partial) {
  extern __shared__ __align__(16) uint32_t mma_filter_shared[];
  const int x_plane = g.rows_x * g.x_words, dy_plane = g.band * g.dy_words;
  uint32_t* xs = mma_filter_shared;                           // [channel][x row][column pair]
  uint32_t* dys = mma_filter_shared + kMmaChannels * x_plane;  // [channel][copy][dy row][column pair]
  const int c0 = blockIdx.y * kMmaChannels;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gl = lane / 4, tl = lane % 4;
  const long long x_image = static_cast<long long>(g.h) * g.w * g.c, dy_image = static_cast<long long>(g.p) * g.q * g.c;
  // This lane's A pairs: dy copy (gl odd: the later one) and word offset.
  const int dy_copy = gl & 1, a_word = (2 * tl - gl + 8 + dy_copy) / 2;

  float acc[2][4] = {};
  const int first = blockIdx.x * g.per_slice, last = g.items - first < g.per_slice ? g.items : first + g.per_slice;
#pragma unroll 1
  for (int item = first; item < last; ++item) {
    const int chunk = item % g.chunks, band = item / g.chunks % g.bands, n = item / (g.chunks * g.bands);
    const int y0 = band * g.band, x0 = chunk * g.tiles * kMmaFilterCols;
    __syncthreads();  // the previous item's reads are done
    stage_pairs<T>(xs, g.rows_x, g.tiles * kMmaFilterCols / 2, g.x_words, x_plane, x + n * x_image + c0, g.h, g.w,
                   g.c, y0 - g.pad_h, x0 - g.pad_w);
    // Copy k's word wd: dy columns x0 - 8 - k + 2 wd and the next.
    for (int k = 0; k < 2; ++k)
      stage_pairs<T>(dys + k * dy_plane, g.band, g.dy_words, g.dy_words, 2 * dy_plane, dy + n * dy_image + c0, g.p,
                     g.q, g.c, y0, x0 - 8 - k);
    __syncthreads();
#pragma unroll 1
    for (int m = 0; m < g.band; m += 2) {
#pragma unroll
      for (int kt = 0; kt < kMmaFilterMaxTiles; ++kt) {
        if (kt >= g.tiles) break;
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const int ch = 2 * warp + cc;
          const uint32_t* arow = dys + (2 * ch + dy_copy) * dy_plane + m * g.dy_words + kt * (kMmaFilterCols / 2) + a_word;
          const uint32_t a[4] = {arow[0], arow[g.dy_words], arow[4], arow[g.dy_words + 4]};
          const uint32_t* brow = xs + ch * x_plane + (m + gl) * g.x_words + kt * (kMmaFilterCols / 2) + tl;
          const uint32_t b[2] = {brow[0], brow[4]};
          mma_16816<T>(acc[cc], a, b);
        }
      }
    }
  }

  // dw[r][s] = D[s][r] of the lower half plus D[s + 8][r + 1] of the upper,
  // added in that order in shared memory ([warp][channel][r][s], 8x8 each).
  __syncthreads();
  float* taps = reinterpret_cast<float*>(mma_filter_shared) + warp * 2 * 64;
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    taps[cc * 64 + (2 * tl) * 8 + gl] = acc[cc][0];
    taps[cc * 64 + (2 * tl + 1) * 8 + gl] = acc[cc][1];
  }
  __syncwarp();
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    if (tl > 0) taps[cc * 64 + (2 * tl - 1) * 8 + gl] += acc[cc][2];
    taps[cc * 64 + (2 * tl) * 8 + gl] += acc[cc][3];
  }
  __syncwarp();
  const int taps_n = g.ks * g.ks;
  float* out = partial + static_cast<long long>(blockIdx.x) * taps_n * g.c + c0 + 2 * warp;
  for (int i = lane; i < 2 * taps_n; i += 32) {
    const int cc = i / taps_n, tap = i - cc * taps_n, r = tap / g.ks, s = tap - r * g.ks;
    out[static_cast<long long>(tap) * g.c + cc] = taps[cc * 64 + r * 8 + s];
  }
}

inline size_t mma_filter_shared_bytes(const MmaFilterGeom& g) {
  return (static_cast<size_t>(g.rows_x) * g.x_words + size_t{2} * g.band * g.dy_words) * kMmaChannels *
         sizeof(uint32_t);
}

// Blocks of `shared_bytes` staging an SM of the current device holds at once,
// at most kMmaFilterBlocksPerSm (a Hopper SM holds 5 of ConvNeXt's 42-44 KB
// blocks, not 6).
inline int mma_filter_resident(size_t shared_bytes) {
  int device = 0;
  DeviceTraits traits;
  if (!current_device(&device, &traits)) return kMmaFilterBlocksPerSm;
  return blocks_fitting_shared(traits, shared_bytes, kMmaFilterBlocksPerSm);
}

// x rows a band of dy rows stages: B's 8 rows from its last pair's first row.
inline int mma_filter_rows_x(int band) { return band - 2 + kMmaFilterTapRows; }

// The tensor-core filter gradient's geometry, or false where it does not
// apply or is not faster: a window mma_window takes where mma_filter_faster
// says so, stride 1, channels in whole 8-channel vectors. The band is the
// tallest even one of at most kMmaFilterMaxBand rows within kMmaShared; slices
// aim at the blocks an SM holds at once.
inline bool mma_filter_geom(const DirectConvShape& s, int sm_count, MmaFilterGeom& g) {
  static_assert(kMmaMaxWindow <= kMmaFilterTapRows, "an mma holds the window's rows");
  if (!mma_window(s) || !mma_filter_faster(static_cast<int>(s.s), s.q)) return false;
  const int ks = static_cast<int>(s.s);
  if (s.stride_h != 1 || s.stride_w != 1 || s.c % kMmaChannels != 0 || s.c / kMmaChannels > 65535) return false;
  g.n = static_cast<int>(s.n); g.c = static_cast<int>(s.c);
  g.h = static_cast<int>(s.h); g.w = static_cast<int>(s.w);
  g.p = static_cast<int>(s.p); g.q = static_cast<int>(s.q);
  g.pad_h = static_cast<int>(s.pad_h); g.pad_w = static_cast<int>(s.pad_w);
  const int total = static_cast<int>(ceil_div(g.q + ks - 1, kMmaFilterCols));
  g.chunks = static_cast<int>(ceil_div(total, kMmaFilterMaxTiles));
  g.tiles = static_cast<int>(ceil_div(total, g.chunks));
  // x rows: 16 columns a tile, 4 * odd words a row (a lane group's 8 B rows on distinct banks).
  g.x_words = g.tiles * kMmaFilterCols / 2 + 4;
  g.dy_words = g.tiles * kMmaFilterCols / 2 + 5;
  const int even_p = static_cast<int>(ceil_div(g.p, 2)) * 2;
  for (g.band = std::min(kMmaFilterMaxBand, even_p); g.band > 2; g.band -= 2) {
    g.rows_x = mma_filter_rows_x(g.band);
    if (mma_filter_shared_bytes(g) <= kMmaShared) break;
  }
  // Balance the bands: the fewest of at most that many rows, rounded up to even.
  g.bands = static_cast<int>(ceil_div(g.p, g.band));
  g.band = static_cast<int>(ceil_div(ceil_div(g.p, g.bands), 2) * 2);
  g.rows_x = mma_filter_rows_x(g.band);
  if (mma_filter_shared_bytes(g) > kMmaShared) return false;
  const int64_t items = s.n * g.bands * g.chunks;
  if (items >= (int64_t{1} << 31)) return false;
  g.items = static_cast<int>(items);
  const int64_t wanted = std::max<int64_t>(
      1, ceil_div(int64_t{std::max(sm_count, 1)} * mma_filter_resident(mma_filter_shared_bytes(g)), s.c / kMmaChannels));
  g.per_slice = static_cast<int>(ceil_div(items, std::min(items, wanted)));
  g.ks = ks;
  return true;
}

inline int64_t mma_filter_slices(const MmaFilterGeom& g) { return ceil_div(g.items, g.per_slice); }

// Launches the tensor-core filter gradient and its finish (x, dy 16-byte
// aligned and a GPU of compute capability 8.0 or newer: the caller checks);
// `workspace` holds mma_filter_slices(g) * ks * ks * c floats.
template <typename T>
cudaError_t launch_mma_filter(const DirectConvShape& s, const MmaFilterGeom& g, const T* x, const T* dy, T* dweight,
                              void* workspace, cudaStream_t stream) {
  const int64_t slices = mma_filter_slices(g);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(g.c / kMmaChannels));
  float* partial = static_cast<float*>(workspace);
  const cudaError_t launched = launch_kernel(dw_mma_filter<T>, grid, dim3(kMmaThreads), mma_filter_shared_bytes(g),
                                             stream, g, x, dy, partial);
  if (launched != cudaSuccess) return launched;
  return launch_sum_slices(static_cast<const float*>(partial), slices, int64_t{g.ks} * g.ks * g.c,
                           DwWeightStore<T>{dweight, g.c, g.ks, s.weight_strides[0], s.weight_strides[2],
                                            s.weight_strides[3]},
                           stream);
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
