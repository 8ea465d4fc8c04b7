// Tensor-core filter gradient for stems and small groups (see gemm_filter.h).
// Compiled by nvcc alone, like direct_conv.cu: no torch header.
//
// The GEMM, per group: dweight^T[j, k] = sum over output pixels m of
// A[j, m] * B[m, k], with A[j, m] = x[pixel m's input at tap (r, s), the
// group's channel ci] for row j of (ci, r, s) (zero outside the image) and
// B[m, k] = dy[m, the group's channel k]. A block (blockIdx.y: its group)
// takes tiles of kTilePixels consecutive pixels in turn (grid-stride, so the
// order is fixed by the grid alone), stages the tile's A (the im2col) and B
// (16-byte vectors of dy's channels) in shared memory, and its 4 warps
// multiply them with wmma (16x16x16, fp16/bf16 in, fp32 accumulate: the
// generic kernels' fp32-sum contract; no TF32). Each warp owns some of the
// 16x16 tiles of the result and keeps them in registers across all the
// block's pixel tiles; at the end every block writes its sums as one slice of
// fp32 partials, and sum_slices (slice_sum.cuh) adds the slices of each weight
// element in a fixed order. No atomics: deterministic.
//
// A is staged one of two ways, each by a kernel of its own:
// - by element (a group's channels make no vector, as a stem's 3):
//   transposed, a row per j = ci * taps + tap and a column per pixel, each
//   element gathered alone (gemm_filter_by_element);
// - by vector (a group's channels whole 16-byte vectors, x aligned): a row per
//   pixel, j = tap * cpg_in + ci, 8 channels a copy, read by wmma as a
//   column-major A (gemm_filter_by_vector). Gathered element by element,
//   RegNetY's 24-channel groups would read each 32-byte sector of x for 2 of
//   its bytes. Its tiles stream through a cp.async pipeline of 2 to 4 stages:
//   staged one at a time through registers, a tile took about 17 us on an
//   H100 for RegNetY's 24-channel groups (0.64-1.22x cuDNN's best; pipelined
//   1.27-2.13x).
#include "kernels/gemm_filter.h"

#include "kernels/async_copy.cuh"
#include "kernels/device_traits.cuh"
#include "kernels/slice_sum.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <type_traits>

namespace torch_cudnn_algo::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Output pixels a tile sums: the GEMM's K, four mma steps.
constexpr int kTilePixels = 64;
// Elements added to every staged row: rows a multiple of 64 bytes apart fall on
// the same banks, an odd number of 16-byte units more spreads them; 8 elements
// keep wmma's ldm rule (a multiple of 8) and 32-byte aligned fragments.
constexpr int kSkew = 8;
// Row stride (floats) of a warp's accumulator scratch: a multiple of 4 (wmma's
// rule for float) that is not a multiple of 32 banks.
constexpr int kScratchLd = 16 + 4;
constexpr int kMaxRows = 288;     // (ci, r, s) rows a group: 3x3 x 32 channels
constexpr int kMaxColumns = 64;   // output channels a group
constexpr int kMaxFragmentsPerWarp = 10;  // result tiles a warp holds in registers
// Image extents, filter reaches and the "no pixel" marker stay below 2^29, so
// sums of two of them never overflow an int.
constexpr int kFar = 1 << 29;
constexpr int64_t kMaxExtent = int64_t{1} << 28;
constexpr int kVector = 8;        // fp16/bf16 elements in 16 bytes
// By element, a thread stages one pixel's part of A: rows half, half + 2, ...
// (half: which of the two threads of that pixel), loading a batch of them
// before storing any, so that many loads are in flight (one at a time,
// staging is latency bound).
constexpr int kBatch = 16;
static_assert(kThreads == 2 * kTilePixels, "two threads stage each pixel's column");
// dy's 16-byte vectors a thread stages per tile, at most.
constexpr int kDyVectorsPerThread = kTilePixels * kMaxColumns / kVector / kThreads;
constexpr size_t kSharedLimit = 48 * 1024;  // no opt-in needed
// The accumulator counts a warp's kernel is instantiated for, and the blocks
// of each that an SM holds at once by element (its registers, bounded to fit
// them, on sm_90: 71, 91-92, 157-168, 156-160, 158-159 and 182-184 a thread
// in fp16-bf16): the grid is one wave of them, since
// more slices would only cost partials and fewer would leave loads without
// warps to hide them. 8: RegNetY's 24-channel groups (7 tiles a warp), which
// stage by vector (kVectorResidentBlocks).
constexpr int kFragmentChoices[] = {1, 2, 4, 6, 8, kMaxFragmentsPerWarp};
constexpr int kResidentBlocks[] = {6, 4, 3, 3, 3, 2};
// The by-element kernel's __launch_bounds__ asks for those blocks, so that its
// registers leave room for them: a grid of 6 blocks an SM of a kernel that fits
// only 5 would run a second, sixth-full wave.
constexpr int by_element_resident_blocks(int fragments_per_warp) {
  for (size_t i = 0; i < sizeof(kFragmentChoices) / sizeof(kFragmentChoices[0]); ++i)
    if (kFragmentChoices[i] == fragments_per_warp) return kResidentBlocks[i];
  return 1;
}
// The partial sums stay below 16 MB: the finish (sum_slices) reads them all once.
constexpr int64_t kMaxPartialFloats = int64_t{4} << 20;
// By vector: tiles in flight, the most that fit kVectorSharedBudget, at least
// 2. The budget lets two blocks share an SM of 228 KB (Hopper); the GPU's own
// opt-in limit bounds it further (99 KB on sm_86/89/120, 163 KB on sm_80).
constexpr int kMinVectorStages = 2, kMaxVectorStages = 4;
constexpr size_t kVectorSharedBudget = 113 * 1024;
// The smallest opt-in limit among the GPUs the kernel runs on (compute
// capability 8.6): what gemm_filter_fits assumes, whatever the GPU.
constexpr size_t kSmallestSharedOptin = 99 * 1024;
constexpr int kVectorResidentBlocks = 2;

struct GemmFilterPlan {
  bool fits = false;
  int cpg_in = 0, cpg_out = 0;  // channels a group: x's, dy's
  int rows = 0;              // cpg_in * r * s
  int row_fragments = 0;     // ceil(rows / 16)
  int column_fragments = 0;  // cpg_out / 16, rounded up
  int choice = 0;            // index into kFragmentChoices: the kernel that runs it
  bool by_vector = false;    // A staged by vector: a group's input channels are whole vectors
  int at_ld = 0, dy_ld = 0;  // staged row strides, elements
  int table_entries = 0;     // of each tap table: a row or vector each, a multiple of 8 (32 bytes)
  int stages = 1;            // tiles in flight: 1 by element, 2 to 4 by vector
  int64_t pixels = 0, tiles = 0;
  size_t shared_bytes = 0;
};

// `shared_optin`: the most shared memory a block may have on the GPU that runs
// it (by vector, which opts in beyond 48 KB).
GemmFilterPlan plan_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction,
                       size_t shared_optin = kSmallestSharedOptin) {
  GemmFilterPlan plan;
  if (dtype != DirectDType::kHalf && dtype != DirectDType::kBFloat16) return plan;
  if (direction != DirectDirection::kBackwardFilter || !s.channels_last) return plan;
  // gridDim.y holds the group.
  if (s.groups < 1 || s.groups > 65535 || s.c % s.groups != 0 || s.k % s.groups != 0) return plan;
  if (s.n < 1 || s.c < 1 || s.h < 1 || s.w < 1 || s.k < 1 || s.p < 1 || s.q < 1 || s.r < 1 || s.s < 1) return plan;
  if (s.stride_h < 1 || s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.pad_h < 0 || s.pad_w < 0)
    return plan;
  // Image extents and offsets inside one image stay in int (the image's base is 64-bit).
  if (s.h >= kMaxExtent || s.w >= kMaxExtent || (s.r - 1) * s.dilation_h >= kMaxExtent ||
      (s.s - 1) * s.dilation_w >= kMaxExtent || s.pad_h >= kMaxExtent || s.pad_w >= kMaxExtent ||
      s.h * s.w >= (int64_t{1} << 31) / s.c)
    return plan;
  const int64_t cpg_in = s.c / s.groups, cpg_out = s.k / s.groups;
  if (cpg_in * s.r * s.s > kMaxRows || cpg_out % kVector != 0 || cpg_out > kMaxColumns) return plan;
  plan.cpg_in = static_cast<int>(cpg_in);
  plan.cpg_out = static_cast<int>(cpg_out);
  plan.rows = static_cast<int>(cpg_in * s.r * s.s);
  plan.row_fragments = (plan.rows + 15) / 16;
  plan.column_fragments = static_cast<int>((cpg_out + 15) / 16);
  const int share = (plan.row_fragments * plan.column_fragments + kWarps - 1) / kWarps;
  if (share > kMaxFragmentsPerWarp) return plan;
  while (kFragmentChoices[plan.choice] < share) ++plan.choice;
  plan.by_vector = cpg_in % kVector == 0;
  const int padded_rows = plan.row_fragments * 16;
  // By element a row per j, by vector a row per pixel.
  plan.at_ld = (plan.by_vector ? padded_rows : kTilePixels) + kSkew;
  plan.dy_ld = plan.column_fragments * 16 + kSkew;
  plan.table_entries = plan.by_vector ? (padded_rows / kVector + 7) / 8 * 8 : padded_rows;
  plan.pixels = s.n * s.p * s.q;
  plan.tiles = (plan.pixels + kTilePixels - 1) / kTilePixels;
  const size_t at_bytes = static_cast<size_t>(plan.by_vector ? kTilePixels : padded_rows) * plan.at_ld * 2;
  const size_t dy_bytes = static_cast<size_t>(kTilePixels) * plan.dy_ld * 2;
  const size_t tap_bytes = static_cast<size_t>(plan.table_entries) * 3 * sizeof(int);
  const size_t scratch_bytes = static_cast<size_t>(kWarps) * 16 * kScratchLd * sizeof(float);
  const auto bytes_of = [&](int stages) { return stages * (at_bytes + dy_bytes) + tap_bytes + scratch_bytes; };
  if (!plan.by_vector) {
    plan.shared_bytes = bytes_of(1);
    plan.fits = plan.shared_bytes <= kSharedLimit;
    return plan;
  }
  const size_t budget = std::min(shared_optin, kVectorSharedBudget);
  plan.stages = kMaxVectorStages;
  while (plan.stages > kMinVectorStages && bytes_of(plan.stages) > budget) --plan.stages;
  plan.shared_bytes = bytes_of(plan.stages);
  plan.fits = plan.shared_bytes <= budget;
  return plan;
}

// Slices (block columns of the grid) a group's pixels are split into: with
// the groups, one wave of resident blocks.
int64_t slices_of(const GemmFilterPlan& plan, int64_t groups, int sm_count) {
  const int64_t sms = std::max(1, sm_count);
  const int64_t per_slice = static_cast<int64_t>(plan.rows) * plan.cpg_out * groups;
  const int64_t most = std::max<int64_t>(1, kMaxPartialFloats / per_slice);
  const int resident = plan.by_vector ? kVectorResidentBlocks : kResidentBlocks[plan.choice];
  const int64_t wave = std::max<int64_t>(1, sms * resident / groups);
  return std::max<int64_t>(1, std::min({plan.tiles, wave, most, int64_t{INT32_MAX}}));
}

// ---------------------------------------------------------------- device side

struct GemmFilterGeometry {
  int64_t pixels, tiles, blocks;  // blocks: the grid's columns, the stride of a block's tiles
  int h, w, c, p, q, k, r, s;     // c, k: all groups' channels (x's and dy's pixel strides)
  int sh, sw, ph, pw, dh, dw;
  int groups, cpg_in, cpg_out;
  int rows, row_fragments, column_fragments, at_ld, dy_ld, table_entries, stages;
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

// The corner of output pixel m's window in x: its row and column (may lie
// before the image's start) and its element offset from the image batch's
// start; corner_y is kFar when m is past the last pixel.
struct WindowCorner {
  int y = kFar, x = 0;
  int64_t offset = 0;
};

__device__ __forceinline__ WindowCorner corner_of(const GemmFilterGeometry& g, int64_t m) {
  WindowCorner corner;
  if (m >= g.pixels) return corner;
  int64_t image;
  int y, xx;
  if (g.pixels <= INT32_MAX) {  // 32-bit division: several times cheaper
    const unsigned mm = static_cast<unsigned>(m), rest = mm / static_cast<unsigned>(g.q);
    xx = static_cast<int>(mm - rest * static_cast<unsigned>(g.q));
    y = static_cast<int>(rest % static_cast<unsigned>(g.p));
    image = rest / static_cast<unsigned>(g.p);
  } else {
    const int64_t rest = m / g.q;
    xx = static_cast<int>(m - rest * g.q);
    y = static_cast<int>(rest % g.p);
    image = rest / g.p;
  }
  corner.y = y * g.sh - g.ph;
  corner.x = xx * g.sw - g.pw;
  corner.offset = (image * g.h * g.w + static_cast<int64_t>(corner.y) * g.w + corner.x) * g.c;
  return corner;
}

// The tap tables: per staged unit u (a row j by element, 8 rows by vector)
// its r * dh and s * dw (kFar for the padding rows past the last) and its
// element offset from the window's corner. Written by the whole block; the
// caller's next barrier publishes them.
template <bool kByVector>
__device__ __forceinline__ void write_tap_tables(const GemmFilterGeometry& g, int units, int* tap_y, int* tap_x,
                                                 int* tap_offset) {
  for (int u = threadIdx.x; u < units; u += kThreads) {
    const int taps = g.r * g.s;
    const int j = kByVector ? u * kVector : u;
    const int ci = kByVector ? j % g.cpg_in : j / taps, tap = kByVector ? j / g.cpg_in : j - ci * taps;
    const int dy_ = (tap / g.s) * g.dh, dx_ = (tap % g.s) * g.dw;
    tap_y[u] = j < g.rows ? dy_ : kFar;
    tap_x[u] = dx_;
    tap_offset[u] = j < g.rows ? (dy_ * g.w + dx_) * g.c + ci : 0;
  }
}

// The result tiles a warp owns (fragment warp + 4 f) and where their A and B
// start in a staged tile; the accumulators zeroed.
template <int kFragmentsPerWarp, bool kByVector, typename Acc>
__device__ __forceinline__ void start_fragments(const GemmFilterGeometry& g, int warp, Acc* acc, int* a_start,
                                                int* b_start) {
#pragma unroll
  for (int f = 0; f < kFragmentsPerWarp; ++f) {
    nvcuda::wmma::fill_fragment(acc[f], 0.0f);
    const int fragment = warp + f * kWarps;
    const int mt = fragment / g.column_fragments, nt = fragment - mt * g.column_fragments;
    a_start[f] = kByVector ? mt * 16 : mt * 16 * g.at_ld;
    b_start[f] = nt * 16;
  }
}

// One staged tile's products added to the warp's accumulators: A (the
// im2col) by its staging's layout, B = dy's rows.
template <typename T, int kFragmentsPerWarp, bool kByVector, typename Acc>
__device__ __forceinline__ void multiply_tile(const GemmFilterGeometry& g, int warp, const T* at, const T* dyt,
                                              const int* a_start, const int* b_start, Acc* acc) {
  namespace wmma = nvcuda::wmma;
  using ALayout = std::conditional_t<kByVector, wmma::col_major, wmma::row_major>;
  const int fragments = g.row_fragments * g.column_fragments;
#pragma unroll
  for (int kk = 0; kk < kTilePixels; kk += 16) {
#pragma unroll
    for (int f = 0; f < kFragmentsPerWarp; ++f) {
      if (warp + f * kWarps < fragments) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, ALayout> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, at + a_start[f] + (kByVector ? kk * g.at_ld : kk), g.at_ld);
        wmma::load_matrix_sync(b, dyt + kk * g.dy_ld + b_start[f], g.dy_ld);
        wmma::mma_sync(acc[f], a, b, acc[f]);
      }
    }
  }
}

// This block's slice of its group: each 16x16 result tile through the warp's
// scratch (wmma's register layout is opaque), rows past the group's (ci, r, s)
// and columns past its channels left out.
template <int kFragmentsPerWarp, typename Acc>
__device__ __forceinline__ void write_slice(const GemmFilterGeometry& g, int warp, int lane, float* scratch,
                                            Acc* acc, float* partial) {
  float* const slice =
      partial + (static_cast<int64_t>(blockIdx.x) * g.groups + blockIdx.y) * g.rows * g.cpg_out;
  const int fragments = g.row_fragments * g.column_fragments;
#pragma unroll
  for (int f = 0; f < kFragmentsPerWarp; ++f) {
    const int fragment = warp + f * kWarps;
    if (fragment < fragments) {
      const int mt = fragment / g.column_fragments, nt = fragment - mt * g.column_fragments;
      nvcuda::wmma::store_matrix_sync(scratch, acc[f], kScratchLd, nvcuda::wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int row = e / 16, column = e % 16;
        const int j = mt * 16 + row, k = nt * 16 + column;
        if (j < g.rows && k < g.cpg_out)
          slice[static_cast<int64_t>(j) * g.cpg_out + k] = scratch[row * kScratchLd + column];
      }
      __syncwarp();
    }
  }
}

using Accumulator = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// A staged by element. Shared memory, in this order (each part a multiple of
// 32 bytes long, as wmma's fragment pointers need 32-byte alignment):
//   at         [row_fragments * 16][at_ld]        A: row j, column pixel
//   dyt        [kTilePixels][dy_ld]               B: row pixel, column k
//   tap_y/x    [table_entries] int each           row j's r*dh and s*dw (kFar for padding)
//   tap_offset [table_entries] int                its element offset from the window's corner
//   scratch    [kWarps][16][kScratchLd] float     a warp's accumulator on its way out
template <typename T, int kFragmentsPerWarp>
__global__ void __launch_bounds__(kThreads, by_element_resident_blocks(kFragmentsPerWarp))
    gemm_filter_by_element(GemmFilterGeometry g, const T* __restrict__ x, const T* __restrict__ dy,
                           float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const int padded_rows = g.row_fragments * 16;
  T* const at = reinterpret_cast<T*>(shared_bytes);
  T* const dyt = at + padded_rows * g.at_ld;
  int* const tap_y = reinterpret_cast<int*>(dyt + kTilePixels * g.dy_ld);
  int* const tap_x = tap_y + g.table_entries;
  int* const tap_offset = tap_x + g.table_entries;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  float* const scratch = reinterpret_cast<float*>(tap_offset + g.table_entries) + warp * 16 * kScratchLd;
  const int group = blockIdx.y;
  x += static_cast<int64_t>(group) * g.cpg_in;
  dy += static_cast<int64_t>(group) * g.cpg_out;

  write_tap_tables<false>(g, padded_rows, tap_y, tap_x, tap_offset);

  // The result tiles this warp owns: fragment warp + 4 f, and where its A and B start.
  Accumulator acc[kFragmentsPerWarp];
  int a_start[kFragmentsPerWarp], b_start[kFragmentsPerWarp];
  start_fragments<kFragmentsPerWarp, false>(g, warp, acc, a_start, b_start);
  // dy vectors this thread stages: row (pixel) and channel offset of each, the same every tile.
  const int vectors_per_row = g.column_fragments * 16 / kVector;
  int dy_row[kDyVectorsPerThread], dy_channel[kDyVectorsPerThread];
#pragma unroll
  for (int u = 0; u < kDyVectorsPerThread; ++u) {
    const int i = thread + u * kThreads;
    dy_row[u] = i / vectors_per_row;
    dy_channel[u] = (i - dy_row[u] * vectors_per_row) * kVector;
  }

  const int pixel = thread % kTilePixels, half = thread / kTilePixels;
  for (int64_t tile = blockIdx.x; tile < g.tiles; tile += g.blocks) {
    const int64_t first = tile * kTilePixels;
    const WindowCorner corner = corner_of(g, first + pixel);
    // Every warp is done with the previous tile's at and dyt (and the tap
    // table is written, the first time).
    __syncthreads();
    // dy's rows of the tile: 16-byte vectors of the group's channels, zeros
    // past the last pixel and the last channel (0 times stale shared memory
    // could be NaN). All loads first, then all stores.
    {
      Packed<T, kVector> value[kDyVectorsPerThread];
#pragma unroll
      for (int u = 0; u < kDyVectorsPerThread; ++u) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) value[u].v[e] = T(0.0f);
        if (dy_row[u] < kTilePixels && first + dy_row[u] < g.pixels && dy_channel[u] < g.cpg_out)
          value[u] = *reinterpret_cast<const Packed<T, kVector>*>(dy + (first + dy_row[u]) * g.k + dy_channel[u]);
      }
#pragma unroll
      for (int u = 0; u < kDyVectorsPerThread; ++u) {
        if (dy_row[u] < kTilePixels)
          *reinterpret_cast<Packed<T, kVector>*>(dyt + dy_row[u] * g.dy_ld + dy_channel[u]) = value[u];
      }
    }
    // The im2col, transposed: a warp's threads take consecutive pixels of one
    // row j, so the shared stores are contiguous and the loads of x a stride
    // apart.
    for (int j0 = half; j0 < padded_rows; j0 += 2 * kBatch) {
      T value[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + 2 * b;
        value[b] = T(0.0f);
        if (j < padded_rows) {
          const int iy = corner.y + tap_y[j], ix = corner.x + tap_x[j];
          if (static_cast<unsigned>(iy) < static_cast<unsigned>(g.h) &&
              static_cast<unsigned>(ix) < static_cast<unsigned>(g.w))
            value[b] = x[corner.offset + tap_offset[j]];
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + 2 * b;
        if (j < padded_rows) at[j * g.at_ld + pixel] = value[b];
      }
    }
    __syncthreads();
    multiply_tile<T, kFragmentsPerWarp, false>(g, warp, at, dyt, a_start, b_start, acc);
  }
  write_slice<kFragmentsPerWarp>(g, warp, lane, scratch, acc, partial);
#endif
}


// A staged by vector, g.stages tiles in flight through cp.async. Shared
// memory, in this order (each part a multiple of 32 bytes long):
//   at         [stages][kTilePixels][at_ld]       A: row pixel, column j
//   dyt        [stages][kTilePixels][dy_ld]       B: row pixel, column k
//   tap_y/x    [table_entries] int each           vector u's r*dh and s*dw (kFar for padding)
//   tap_offset [table_entries] int                its element offset from the window's corner
//   scratch    [kWarps][16][kScratchLd] float     a warp's accumulator on its way out
template <typename T, int kFragmentsPerWarp>
__global__ void __launch_bounds__(kThreads) gemm_filter_by_vector(GemmFilterGeometry g, const T* __restrict__ x,
                                                                  const T* __restrict__ dy,
                                                                  float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const int units = g.row_fragments * 16 / kVector;  // vectors of a pixel's A row
  const int a_stage = kTilePixels * g.at_ld, dy_stage = kTilePixels * g.dy_ld;
  T* const at = reinterpret_cast<T*>(shared_bytes);
  T* const dyt = at + g.stages * a_stage;
  int* const tap_y = reinterpret_cast<int*>(dyt + g.stages * dy_stage);
  int* const tap_x = tap_y + g.table_entries;
  int* const tap_offset = tap_x + g.table_entries;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  float* const scratch = reinterpret_cast<float*>(tap_offset + g.table_entries) + warp * 16 * kScratchLd;
  const T* const group_x = x + static_cast<int64_t>(blockIdx.y) * g.cpg_in;
  const T* const group_dy = dy + static_cast<int64_t>(blockIdx.y) * g.cpg_out;
  write_tap_tables<true>(g, units, tap_y, tap_x, tap_offset);
  __syncthreads();  // the tables, before the first copies read them

  Accumulator acc[kFragmentsPerWarp];
  int a_start[kFragmentsPerWarp], b_start[kFragmentsPerWarp];
  start_fragments<kFragmentsPerWarp, true>(g, warp, acc, a_start, b_start);

  // This block's tiles: blockIdx.x, + blocks, ... (the grid fixes the order).
  const int64_t steps = blockIdx.x < g.tiles ? (g.tiles - 1 - blockIdx.x) / g.blocks + 1 : 0;
  const int pixel = thread % kTilePixels, half = thread / kTilePixels;
  const int vectors_per_row = g.column_fragments * 16 / kVector;
  // Copies tile number `step` of this block into `stage`: this thread's
  // pixel's A row (every other vector), and dy's rows by 16-byte vectors;
  // zeros for padding, past the last pixel and past the group's channels
  // (0 times stale shared memory could be NaN).
  const auto load_tile = [&](int64_t step, int stage) {
    const int64_t first = (blockIdx.x + step * g.blocks) * kTilePixels;
    const WindowCorner corner = corner_of(g, first + pixel);
    T* const a_row = at + stage * a_stage + pixel * g.at_ld;
    for (int u = half; u < units; u += 2) {
      const int iy = corner.y + tap_y[u], ix = corner.x + tap_x[u];
      const bool live = static_cast<unsigned>(iy) < static_cast<unsigned>(g.h) &&
                        static_cast<unsigned>(ix) < static_cast<unsigned>(g.w);
      copy_16_or_zero(a_row + u * kVector, live ? group_x + corner.offset + tap_offset[u] : group_x, live);
    }
    T* const dy_rows = dyt + stage * dy_stage;
    for (int i = thread; i < kTilePixels * vectors_per_row; i += kThreads) {
      const int row = i / vectors_per_row, channel = (i - row * vectors_per_row) * kVector;
      const bool live = first + row < g.pixels && channel < g.cpg_out;
      copy_16_or_zero(dy_rows + row * g.dy_ld + channel, live ? group_dy + (first + row) * g.k + channel : group_dy,
                      live);
    }
  };
  // Every stage commits a group, empty or not, so that "the group of step i"
  // is always the i-th committed one and the wait counts right.
  for (int stage = 0; stage < g.stages - 1; ++stage) {
    if (stage < steps) load_tile(stage, stage);
    commit_copies();
  }
  int buffer = 0, load_buffer = g.stages - 1;
  for (int64_t step = 0; step < steps; ++step) {
    // This step's copies (this thread's) are done; the barrier makes
    // everyone's visible and tells that every warp finished the previous
    // step, whose buffer the next copies reuse.
    wait_oldest_tile(g.stages);
    __syncthreads();
    if (step + g.stages - 1 < steps) load_tile(step + g.stages - 1, load_buffer);
    commit_copies();
    load_buffer = load_buffer + 1 == g.stages ? 0 : load_buffer + 1;
    multiply_tile<T, kFragmentsPerWarp, true>(g, warp, at + buffer * a_stage, dyt + buffer * dy_stage, a_start,
                                              b_start, acc);
    buffer = buffer + 1 == g.stages ? 0 : buffer + 1;
  }
  wait_copies<0>();  // the trailing groups are empty: nothing is left in flight at exit
  write_slice<kFragmentsPerWarp>(g, warp, lane, scratch, acc, partial);
#endif
}

// Writes the total of element e = (group * rows + j) * cpg_out + kk (the
// partials' layout; j = ci * taps + tap by element, tap * cpg_in + ci by
// vector) as T at the weight's strides: sum_slices' store.
template <typename T>
struct GemmFilterWeightStore {
  T* dweight;
  int cpg_in, cpg_out, rows, taps, filter_w;
  bool tap_major;  // by vector
  int64_t ws0, ws1, ws2, ws3;
  __device__ __forceinline__ void operator()(int64_t e, float total) const {
    const int64_t group = e / (static_cast<int64_t>(rows) * cpg_out);
    const int rest = static_cast<int>(e - group * rows * cpg_out);
    const int j = rest / cpg_out, kk = rest % cpg_out;
    const int ci = tap_major ? j % cpg_in : j / taps, tap = tap_major ? j / cpg_in : j % taps;
    dweight[(group * cpg_out + kk) * ws0 + ci * ws1 + (tap / filter_w) * ws2 + (tap % filter_w) * ws3] = T(total);
  }
};

GemmFilterGeometry geometry_of(const DirectConvShape& s, const GemmFilterPlan& plan, int64_t blocks) {
  GemmFilterGeometry g;
  g.pixels = plan.pixels;
  g.tiles = plan.tiles;
  g.blocks = blocks;
  g.h = static_cast<int>(s.h);
  g.w = static_cast<int>(s.w);
  g.c = static_cast<int>(s.c);
  g.p = static_cast<int>(s.p);
  g.q = static_cast<int>(s.q);
  g.k = static_cast<int>(s.k);
  g.r = static_cast<int>(s.r);
  g.s = static_cast<int>(s.s);
  g.sh = static_cast<int>(s.stride_h);
  g.sw = static_cast<int>(s.stride_w);
  g.ph = static_cast<int>(s.pad_h);
  g.pw = static_cast<int>(s.pad_w);
  g.dh = static_cast<int>(s.dilation_h);
  g.dw = static_cast<int>(s.dilation_w);
  g.groups = static_cast<int>(s.groups);
  g.cpg_in = plan.cpg_in;
  g.cpg_out = plan.cpg_out;
  g.rows = plan.rows;
  g.row_fragments = plan.row_fragments;
  g.column_fragments = plan.column_fragments;
  g.at_ld = plan.at_ld;
  g.dy_ld = plan.dy_ld;
  g.table_entries = plan.table_entries;
  g.stages = plan.stages;
  return g;
}

template <typename T>
using GemmFilterKernel = void (*)(GemmFilterGeometry, const T*, const T*, float*);

// The kernel staging A `by_vector` (or by element) holding `choice`'s
// accumulators a warp: the fewest instantiated that cover its share, so that
// small results keep registers (and resident blocks) free.
template <typename T>
GemmFilterKernel<T> kernel_of(bool by_vector, int choice) {
  constexpr GemmFilterKernel<T> kByElement[] = {
      gemm_filter_by_element<T, kFragmentChoices[0]>, gemm_filter_by_element<T, kFragmentChoices[1]>,
      gemm_filter_by_element<T, kFragmentChoices[2]>, gemm_filter_by_element<T, kFragmentChoices[3]>,
      gemm_filter_by_element<T, kFragmentChoices[4]>, gemm_filter_by_element<T, kFragmentChoices[5]>};
  constexpr GemmFilterKernel<T> kByVector[] = {
      gemm_filter_by_vector<T, kFragmentChoices[0]>, gemm_filter_by_vector<T, kFragmentChoices[1]>,
      gemm_filter_by_vector<T, kFragmentChoices[2]>, gemm_filter_by_vector<T, kFragmentChoices[3]>,
      gemm_filter_by_vector<T, kFragmentChoices[4]>, gemm_filter_by_vector<T, kFragmentChoices[5]>};
  static_assert(sizeof(kByElement) / sizeof(kByElement[0]) == sizeof(kFragmentChoices) / sizeof(kFragmentChoices[0]));
  return by_vector ? kByVector[choice] : kByElement[choice];
}

// Above 48 KB a kernel must opt in, per device: allowing the GPU's whole
// opt-in limit once serves every later shape (it grants, it reserves nothing).
// Only the by-vector kernels go beyond it: `choice` tells them apart.
template <typename T>
cudaError_t allow_shared(GemmFilterKernel<T> kernel, int choice, int device, const DeviceTraits& traits) {
  cudaError_t allowed = cudaSuccess;
  const auto allow = [&] {
    allowed = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, traits.shared_optin);
  };
  constexpr int kChoices = sizeof(kFragmentChoices) / sizeof(kFragmentChoices[0]);
  if (device >= 0 && device < kMaxCachedDevices) {
    static std::once_flag done[kChoices][kMaxCachedDevices];
    std::call_once(done[choice][device], allow);
  } else {
    allow();
  }
  return allowed;
}

template <typename T>
cudaError_t launch_typed(const DirectConvShape& shape, const GemmFilterPlan& plan, int device,
                         const DeviceTraits& traits, int sm_count, const void* x, const void* dy, void* dweight,
                         void* workspace, cudaStream_t stream) {
  const int64_t blocks = slices_of(plan, shape.groups, sm_count);
  const GemmFilterGeometry g = geometry_of(shape, plan, blocks);
  float* const partial = static_cast<float*>(workspace);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(shape.groups));
  const GemmFilterKernel<T> kernel = kernel_of<T>(plan.by_vector, plan.choice);
  if (plan.shared_bytes > kSharedLimit) {
    const cudaError_t allowed = allow_shared<T>(kernel, plan.choice, device, traits);
    if (allowed != cudaSuccess) return allowed;
  }
  kernel<<<grid, kThreads, plan.shared_bytes, stream>>>(g, static_cast<const T*>(x), static_cast<const T*>(dy),
                                                         partial);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const int64_t* ws = shape.weight_strides;
  const GemmFilterWeightStore<T> store{static_cast<T*>(dweight), g.cpg_in, g.cpg_out, g.rows, g.r * g.s, g.s,
                                       plan.by_vector, ws[0], ws[1], ws[2], ws[3]};
  return launch_sum_slices(static_cast<const float*>(partial), blocks,
                           static_cast<int64_t>(plan.rows) * plan.cpg_out * shape.groups, store, stream);
}

}  // namespace

bool gemm_filter_fits(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction) {
  return plan_of(shape, dtype, direction).fits;
}

bool gemm_filter_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool x_aligned,
                         bool dy_aligned) {
  int device = 0;
  DeviceTraits traits;
  // bf16 wmma and cp.async need compute capability 8.0.
  if (!current_device(&device, &traits) || traits.major < 8) return false;
  const GemmFilterPlan plan = plan_of(shape, dtype, direction, static_cast<size_t>(traits.shared_optin));
  return plan.fits && dy_aligned && (x_aligned || !plan.by_vector);
}

size_t gemm_filter_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, int sm_count) {
  const GemmFilterPlan plan = plan_of(shape, dtype, DirectDirection::kBackwardFilter);
  if (!plan.fits) return 0;
  return static_cast<size_t>(slices_of(plan, shape.groups, sm_count) * plan.rows * plan.cpg_out * shape.groups) *
         sizeof(float);
}

int launch_gemm_filter(const DirectConvShape& shape, DirectDType dtype, int sm_count, const void* x, const void* dy,
                       void* dweight, void* workspace, CUstream_st* stream) {
  int device = 0;
  DeviceTraits traits;
  if (!current_device(&device, &traits) || traits.major < 8) return static_cast<int>(cudaErrorInvalidValue);
  const GemmFilterPlan plan =
      plan_of(shape, dtype, DirectDirection::kBackwardFilter, static_cast<size_t>(traits.shared_optin));
  if (!plan.fits || (plan.by_vector && reinterpret_cast<uintptr_t>(x) % 16 != 0))
    return static_cast<int>(cudaErrorInvalidValue);
  if (dtype == DirectDType::kHalf)
    return static_cast<int>(
        launch_typed<__half>(shape, plan, device, traits, sm_count, x, dy, dweight, workspace, stream));
  return static_cast<int>(
      launch_typed<__nv_bfloat16>(shape, plan, device, traits, sm_count, x, dy, dweight, workspace, stream));
}

}  // namespace torch_cudnn_algo::kernels
