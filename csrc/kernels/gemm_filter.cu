// Tensor-core filter gradient for stems (see gemm_filter.h). Compiled by nvcc
// alone, like direct_conv.cu: no torch header.
//
// The GEMM: dweight^T[j, k] = sum over output pixels m of A[j, m] * B[m, k],
// with A[j, m] = x[pixel m's input at tap (r, s), channel ci] for row
// j = (ci, r, s) (zero outside the image) and B[m, k] = dy[m, k]. A block takes
// tiles of kTilePixels consecutive pixels in turn (grid-stride, so the order is
// fixed by the grid alone), stages A transposed (rows j, a column per pixel:
// the im2col, gathered from x element by element, since 3 channels make no
// vector) and B (16-byte vectors of dy's channels) in shared memory, and its 4
// warps multiply them with wmma (16x16x16, fp16/bf16 in, fp32 accumulate: the
// generic kernels' fp32-sum contract; no TF32). Each warp owns some of the
// 16x16 tiles of the result and keeps them in registers across all the
// block's pixel tiles; at the end every block writes its sums as one slice of
// fp32 partials, and sum_slices (slice_sum.cuh) adds the slices of each weight
// element in a fixed order. No atomics: deterministic.
#include "kernels/gemm_filter.h"

#include "kernels/device_traits.cuh"
#include "kernels/slice_sum.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>

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
constexpr int kMaxRows = 160;     // (ci, r, s) rows, padded to 16: 7x7 x 3 channels
constexpr int kMaxColumns = 64;   // output channels
constexpr int kMaxFragmentsPerWarp = (kMaxRows / 16) * (kMaxColumns / 16) / kWarps;
// Image extents, filter reaches and the "no pixel" marker stay below 2^29, so
// sums of two of them never overflow an int.
constexpr int kFar = 1 << 29;
constexpr int64_t kMaxExtent = int64_t{1} << 28;
constexpr int kVector = 8;        // fp16/bf16 elements in 16 bytes
// A thread stages one pixel's column of A: rows half, half + 2, ... (half: which
// of the two threads of that pixel), loading kBatch of them before storing any,
// so that many loads are in flight (one at a time, staging is latency bound).
constexpr int kBatch = 16;
static_assert(kThreads == 2 * kTilePixels, "two threads stage each pixel's column");
// dy's 16-byte vectors a thread stages per tile, at most.
constexpr int kDyVectorsPerThread = kTilePixels * kMaxColumns / kVector / kThreads;
constexpr size_t kSharedLimit = 48 * 1024;  // no opt-in needed
// The accumulator counts a warp's kernel is instantiated for, and the blocks
// of each that an SM holds at once (by its registers: 71, 91, 136, 146 and 168
// a thread on sm_90): the grid is one wave of them, since more slices would
// only cost partials and fewer would leave loads without warps to hide them.
constexpr int kFragmentChoices[] = {1, 2, 4, 6, kMaxFragmentsPerWarp};
constexpr int kResidentBlocks[] = {6, 4, 3, 3, 3};
// The partial sums stay below 16 MB: the finish (sum_slices) reads them all once.
constexpr int64_t kMaxPartialFloats = int64_t{4} << 20;

struct GemmFilterPlan {
  bool fits = false;
  int rows = 0;              // c * r * s
  int row_fragments = 0;     // ceil(rows / 16)
  int column_fragments = 0;  // k / 16, rounded up
  int choice = 0;            // index into kFragmentChoices: the kernel that runs it
  int at_ld = 0, dy_ld = 0;  // staged row strides, elements
  int64_t pixels = 0, tiles = 0;
  size_t shared_bytes = 0;
};

GemmFilterPlan plan_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  GemmFilterPlan plan;
  if (dtype != DirectDType::kHalf && dtype != DirectDType::kBFloat16) return plan;
  if (direction != DirectDirection::kBackwardFilter || !s.channels_last || s.groups != 1) return plan;
  if (s.n < 1 || s.c < 1 || s.h < 1 || s.w < 1 || s.k < 1 || s.p < 1 || s.q < 1 || s.r < 1 || s.s < 1) return plan;
  if (s.stride_h < 1 || s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.pad_h < 0 || s.pad_w < 0)
    return plan;
  // Image extents and offsets inside one image stay in int (the image's base is 64-bit).
  if (s.h >= kMaxExtent || s.w >= kMaxExtent || (s.r - 1) * s.dilation_h >= kMaxExtent ||
      (s.s - 1) * s.dilation_w >= kMaxExtent || s.pad_h >= kMaxExtent || s.pad_w >= kMaxExtent ||
      s.h * s.w >= (int64_t{1} << 31) / s.c)
    return plan;
  if (s.c * s.r * s.s > kMaxRows || s.k % kVector != 0 || s.k > kMaxColumns) return plan;
  plan.rows = static_cast<int>(s.c * s.r * s.s);
  plan.row_fragments = (plan.rows + 15) / 16;
  plan.column_fragments = static_cast<int>((s.k + 15) / 16);
  const int share = (plan.row_fragments * plan.column_fragments + kWarps - 1) / kWarps;
  while (kFragmentChoices[plan.choice] < share) ++plan.choice;
  plan.at_ld = kTilePixels + kSkew;
  plan.dy_ld = plan.column_fragments * 16 + kSkew;
  plan.pixels = s.n * s.p * s.q;
  plan.tiles = (plan.pixels + kTilePixels - 1) / kTilePixels;
  const size_t at_bytes = static_cast<size_t>(plan.row_fragments) * 16 * plan.at_ld * 2;
  const size_t dy_bytes = static_cast<size_t>(kTilePixels) * plan.dy_ld * 2;
  const size_t tap_bytes = static_cast<size_t>(plan.row_fragments) * 16 * 3 * sizeof(int);
  const size_t scratch_bytes = static_cast<size_t>(kWarps) * 16 * kScratchLd * sizeof(float);
  plan.shared_bytes = at_bytes + dy_bytes + tap_bytes + scratch_bytes;
  plan.fits = plan.shared_bytes <= kSharedLimit;
  return plan;
}

int64_t slices_of(const GemmFilterPlan& plan, int64_t k, int sm_count) {
  const int64_t sms = std::max(1, sm_count);
  const int64_t per_slice = static_cast<int64_t>(plan.rows) * k;
  const int64_t most = std::max<int64_t>(sms, kMaxPartialFloats / per_slice);
  return std::max<int64_t>(1, std::min({plan.tiles, sms * kResidentBlocks[plan.choice], most}));
}

// ---------------------------------------------------------------- device side

struct GemmFilterGeometry {
  int64_t pixels, tiles, blocks;  // blocks: the grid's, the stride of a block's tiles
  int h, w, c, p, q, k, r, s;
  int sh, sw, ph, pw, dh, dw;
  int rows, row_fragments, column_fragments, at_ld, dy_ld;
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

// Shared memory, in this order (each part a multiple of 32 bytes long, as
// wmma's fragment pointers need 32-byte alignment):
//   at         [row_fragments * 16][at_ld]        A transposed: row j, column pixel
//   dyt        [kTilePixels][dy_ld]               B: row pixel, column k
//   tap_y/x    [row_fragments * 16] int each      row j's r*dh and s*dw (kFar for padding rows)
//   tap_offset [row_fragments * 16] int           row j's element offset from the window's corner
//   scratch    [kWarps][16][kScratchLd] float     a warp's accumulator on its way out
template <typename T, int kFragmentsPerWarp>
__global__ void __launch_bounds__(kThreads) gemm_filter_nhwc(GemmFilterGeometry g, const T* __restrict__ x,
                                                             const T* __restrict__ dy, float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const int padded_rows = g.row_fragments * 16;
  T* const at = reinterpret_cast<T*>(shared_bytes);
  T* const dyt = at + padded_rows * g.at_ld;
  int* const tap_y = reinterpret_cast<int*>(dyt + kTilePixels * g.dy_ld);
  int* const tap_x = tap_y + padded_rows;
  int* const tap_offset = tap_x + padded_rows;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  float* const scratch = reinterpret_cast<float*>(tap_offset + padded_rows) + warp * 16 * kScratchLd;

  for (int j = thread; j < padded_rows; j += kThreads) {
    const int taps = g.r * g.s;
    const int ci = j / taps, tap = j - ci * taps;
    const int dy_ = (tap / g.s) * g.dh, dx_ = (tap % g.s) * g.dw;
    tap_y[j] = j < g.rows ? dy_ : kFar;
    tap_x[j] = dx_;
    tap_offset[j] = j < g.rows ? (dy_ * g.w + dx_) * g.c + ci : 0;
  }

  // The result tiles this warp owns: fragment warp + 4 f, and where its A and B start.
  const int fragments = g.row_fragments * g.column_fragments;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragmentsPerWarp];
  int a_start[kFragmentsPerWarp], b_start[kFragmentsPerWarp];
#pragma unroll
  for (int f = 0; f < kFragmentsPerWarp; ++f) {
    wmma::fill_fragment(acc[f], 0.0f);
    const int fragment = warp + f * kWarps;
    const int mt = fragment / g.column_fragments, nt = fragment - mt * g.column_fragments;
    a_start[f] = mt * 16 * g.at_ld;
    b_start[f] = nt * 16;
  }
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
    // This thread's pixel: the offset of its window's corner (may lie before
    // the image's start) and the corner itself; kFar when past the last pixel.
    const int64_t m = first + pixel;
    int corner_y = kFar, corner_x = 0;
    int64_t corner = 0;
    if (m < g.pixels) {
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
      corner_y = y * g.sh - g.ph;
      corner_x = xx * g.sw - g.pw;
      corner = (image * g.h * g.w + static_cast<int64_t>(corner_y) * g.w + corner_x) * g.c;
    }
    // Every warp is done with the previous tile's at and dyt (and the tap
    // table is written, the first time).
    __syncthreads();
    // dy's rows of the tile are one contiguous run: 16-byte vectors, zeros
    // past the last pixel and the last channel (0 times stale shared memory
    // could be NaN). All loads first, then all stores.
    {
      Packed<T, kVector> value[kDyVectorsPerThread];
#pragma unroll
      for (int u = 0; u < kDyVectorsPerThread; ++u) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) value[u].v[e] = T(0.0f);
        if (dy_row[u] < kTilePixels && first + dy_row[u] < g.pixels && dy_channel[u] < g.k)
          value[u] = *reinterpret_cast<const Packed<T, kVector>*>(dy + (first + dy_row[u]) * g.k + dy_channel[u]);
      }
#pragma unroll
      for (int u = 0; u < kDyVectorsPerThread; ++u) {
        if (dy_row[u] < kTilePixels)
          *reinterpret_cast<Packed<T, kVector>*>(dyt + dy_row[u] * g.dy_ld + dy_channel[u]) = value[u];
      }
    }
    // The im2col, transposed: a warp's threads take consecutive pixels of one
    // row j, so the shared stores are contiguous and the loads of x a stride apart.
    for (int j0 = half; j0 < padded_rows; j0 += 2 * kBatch) {
      T value[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + 2 * b;
        value[b] = T(0.0f);
        if (j < padded_rows) {
          const int iy = corner_y + tap_y[j], ix = corner_x + tap_x[j];
          if (static_cast<unsigned>(iy) < static_cast<unsigned>(g.h) &&
              static_cast<unsigned>(ix) < static_cast<unsigned>(g.w))
            value[b] = x[corner + tap_offset[j]];
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + 2 * b;
        if (j < padded_rows) at[j * g.at_ld + pixel] = value[b];
      }
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTilePixels; kk += 16) {
#pragma unroll
      for (int f = 0; f < kFragmentsPerWarp; ++f) {
        if (warp + f * kWarps < fragments) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
          wmma::load_matrix_sync(a, at + a_start[f] + kk, g.at_ld);
          wmma::load_matrix_sync(b, dyt + kk * g.dy_ld + b_start[f], g.dy_ld);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
    }
  }

  // This block's slice: each 16x16 result tile through the warp's scratch
  // (wmma's register layout is opaque), rows past c*r*s and columns past k left out.
  float* const slice = partial + static_cast<int64_t>(blockIdx.x) * g.rows * g.k;
#pragma unroll
  for (int f = 0; f < kFragmentsPerWarp; ++f) {
    const int fragment = warp + f * kWarps;
    if (fragment < fragments) {
      const int mt = fragment / g.column_fragments, nt = fragment - mt * g.column_fragments;
      wmma::store_matrix_sync(scratch, acc[f], kScratchLd, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int row = e / 16, column = e % 16;
        const int j = mt * 16 + row, k = nt * 16 + column;
        if (j < g.rows && k < g.k) slice[static_cast<int64_t>(j) * g.k + k] = scratch[row * kScratchLd + column];
      }
      __syncwarp();
    }
  }
#endif
}

// Writes the total of element e = j * k + kk (the partials' layout,
// j = (ci * r + r_i) * s + s_i) as T at the weight's strides: sum_slices' store.
template <typename T>
struct GemmFilterWeightStore {
  T* dweight;
  int k, taps, filter_w;
  int64_t ws0, ws1, ws2, ws3;
  __device__ __forceinline__ void operator()(int64_t e, float total) const {
    const int j = static_cast<int>(e / k), kk = static_cast<int>(e % k);
    const int ci = j / taps, tap = j % taps;
    dweight[kk * ws0 + ci * ws1 + (tap / filter_w) * ws2 + (tap % filter_w) * ws3] = T(total);
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
  g.rows = plan.rows;
  g.row_fragments = plan.row_fragments;
  g.column_fragments = plan.column_fragments;
  g.at_ld = plan.at_ld;
  g.dy_ld = plan.dy_ld;
  return g;
}

template <typename T>
cudaError_t launch_typed(const DirectConvShape& shape, const GemmFilterPlan& plan, int sm_count, const void* x,
                         const void* dy, void* dweight, void* workspace, cudaStream_t stream) {
  const int64_t blocks = slices_of(plan, shape.k, sm_count);
  const GemmFilterGeometry g = geometry_of(shape, plan, blocks);
  float* const partial = static_cast<float*>(workspace);
  // Accumulators a warp holds: the fewest instantiated that cover its share,
  // so that small results keep registers (and resident blocks) free.
  constexpr void (*kKernels[])(GemmFilterGeometry, const T*, const T*, float*) = {
      gemm_filter_nhwc<T, kFragmentChoices[0]>, gemm_filter_nhwc<T, kFragmentChoices[1]>,
      gemm_filter_nhwc<T, kFragmentChoices[2]>, gemm_filter_nhwc<T, kFragmentChoices[3]>,
      gemm_filter_nhwc<T, kFragmentChoices[4]>};
  const auto kernel = kKernels[plan.choice];
  kernel<<<static_cast<unsigned>(blocks), kThreads, plan.shared_bytes, stream>>>(
      g, static_cast<const T*>(x), static_cast<const T*>(dy), partial);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const int64_t* ws = shape.weight_strides;
  return launch_sum_slices(static_cast<const float*>(partial), blocks, static_cast<int64_t>(plan.rows) * shape.k,
                           GemmFilterWeightStore<T>{static_cast<T*>(dweight), g.k, g.r * g.s, g.s, ws[0], ws[1], ws[2], ws[3]},
                           stream);
}

}  // namespace

bool gemm_filter_fits(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction) {
  return plan_of(shape, dtype, direction).fits;
}

bool gemm_filter_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction,
                         bool dy_aligned) {
  if (!dy_aligned || !gemm_filter_fits(shape, dtype, direction)) return false;
  int device = 0;
  DeviceTraits traits;
  // bf16 wmma needs compute capability 8.0.
  return current_device(&device, &traits) && traits.major >= 8;
}

size_t gemm_filter_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, int sm_count) {
  const GemmFilterPlan plan = plan_of(shape, dtype, DirectDirection::kBackwardFilter);
  if (!plan.fits) return 0;
  return static_cast<size_t>(slices_of(plan, shape.k, sm_count) * plan.rows * shape.k) * sizeof(float);
}

int launch_gemm_filter(const DirectConvShape& shape, DirectDType dtype, int sm_count, const void* x, const void* dy,
                       void* dweight, void* workspace, CUstream_st* stream) {
  const GemmFilterPlan plan = plan_of(shape, dtype, DirectDirection::kBackwardFilter);
  if (!plan.fits) return static_cast<int>(cudaErrorInvalidValue);
  if (dtype == DirectDType::kHalf)
    return static_cast<int>(launch_typed<__half>(shape, plan, sm_count, x, dy, dweight, workspace, stream));
  return static_cast<int>(launch_typed<__nv_bfloat16>(shape, plan, sm_count, x, dy, dweight, workspace, stream));
}

}  // namespace torch_cudnn_algo::kernels
