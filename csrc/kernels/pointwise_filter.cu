// Tensor-core filter gradient for 1x1 convolutions (see pointwise_filter.h).
// Compiled by nvcc alone, like direct_conv.cu: no torch header.
//
// dweight[k, c] = sum over pixels m of dy[m, k] * x[m, c]: a GEMM with rows k
// (the weight's output channels, padded to 16), columns c and the pixels as
// its reduction. A tile of 128 pixels is one contiguous run of x and one of
// dy. The kernel streams them:
//  - one wave of resident blocks, each summing a contiguous range of tiles
//    into one slice of fp32 partials; sum_slices (slice_sum.cuh) adds the
//    slices of each weight element in a fixed order;
//  - x and dy tiles copied by cp.async, whole 16-byte vectors in memory
//    order, up to 4 tiles a block in flight;
//  - the result's 16x8 tiles (fragments of mma.sync m16n8k16, fp16/bf16 in,
//    fp32 accumulate) are split over the warps when they are many, and the
//    tile's eight 16-pixel steps over the warps that share fragments; those
//    warps add their sums in shared memory in warp order at the end.
// A fragment's operands pair two pixels in each 32-bit register, and the
// pixels are the staged rows: each register is two 16-bit shared loads (at
// 4 mod 8 banks a row, conflict-free; pointwise_shape.h).
// No atomics: deterministic.
#include "kernels/pointwise_filter.h"

#include "kernels/async_copy.cuh"
#include "kernels/device_traits.cuh"
#include "kernels/mma_sync.cuh"
#include "kernels/pointwise_shape.h"
#include "kernels/slice_sum.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTilePixels = 128;
constexpr int kSteps = kTilePixels / 16;  // the mma's K of 16 pixels
constexpr int kVector = kPointwiseVector;
// Result fragments (16 rows x 8 columns) one warp holds: 64 registers.
constexpr int kMaxFragmentsPerWarp = 16;
constexpr int kMaxFragments = kWarps * kMaxFragmentsPerWarp;
constexpr int kMaxStages = 4;
constexpr int kMinStages = 2;
// Two blocks an SM (__launch_bounds__ holds the registers to it; the plan
// keeps shared memory under the budget where it can): 16 warps to hide the
// copies' latency, and the grid one wave of them.
constexpr int kResidentBlocks = 2;
constexpr size_t kTwoBlocksShared = 113 * 1024;
constexpr size_t kDefaultSharedLimit = 48 * 1024;
// The partial sums stay below 4 MB: the finish reads them all once.
constexpr int64_t kMaxPartialFloats = int64_t{1} << 20;

struct FilterPlan {
  bool fits = false;
  int c = 0, k = 0;            // x's and dy's channels
  int row_fragments = 0;       // 16-row fragments covering k
  int column_fragments = 0;    // 8-column fragments covering c
  int fragment_groups = 0;     // warps splitting the fragments: 1, 2, 4 or 8
  int per_warp = 0;            // fragments a warp holds, at most kMaxFragmentsPerWarp
  int kernel_fragments = 0;    // the kernel instance: per_warp rounded up to 2, 4, 8 or 16
  int x_ld = 0, dy_ld = 0;     // staged row strides, elements
  int stages = 0;
  int64_t pixels = 0, tiles = 0;
  size_t shared_bytes = 0;
};

size_t pipeline_bytes(const FilterPlan& p, int stages) {
  return size_t{2} * stages * kTilePixels * (p.x_ld + p.dy_ld);
}

FilterPlan plan_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  FilterPlan plan;
  if (direction != DirectDirection::kBackwardFilter || !is_pointwise(s, dtype)) return plan;
  plan.c = static_cast<int>(s.c);
  plan.k = static_cast<int>(s.k);
  plan.row_fragments = (plan.k + 15) / 16;
  plan.column_fragments = plan.c / 8;
  const int fragments = plan.row_fragments * plan.column_fragments;
  if (fragments > kMaxFragments) return plan;
  plan.fragment_groups = 1;
  while ((fragments + plan.fragment_groups - 1) / plan.fragment_groups > kMaxFragmentsPerWarp)
    plan.fragment_groups *= 2;
  plan.per_warp = (fragments + plan.fragment_groups - 1) / plan.fragment_groups;
  plan.kernel_fragments = plan.per_warp <= 2 ? 2 : plan.per_warp <= 4 ? 4 : plan.per_warp <= 8 ? 8 : 16;
  plan.x_ld = pointwise_row_stride(plan.c);
  plan.dy_ld = pointwise_row_stride(plan.row_fragments * 16);
  plan.pixels = s.n * s.h * s.w;
  plan.tiles = (plan.pixels + kTilePixels - 1) / kTilePixels;
  plan.stages = kMinStages;
  for (int stages = kMaxStages; stages > kMinStages; --stages)
    if (pipeline_bytes(plan, stages) <= kTwoBlocksShared) {
      plan.stages = stages;
      break;
    }
  // The warps' sums meet in shared memory once the pipeline is done with it.
  const size_t sums_bytes = sizeof(float) * plan.k * plan.c;
  plan.shared_bytes = std::max(pipeline_bytes(plan, plan.stages), sums_bytes);
  plan.fits = true;
  return plan;
}

int64_t slices_of(const FilterPlan& plan, int sm_count) {
  const int64_t wave = int64_t{std::max(1, sm_count)} * kResidentBlocks;
  const int64_t most = std::max<int64_t>(1, kMaxPartialFloats / (int64_t{plan.k} * plan.c));
  const int64_t slices = std::max<int64_t>(1, std::min({plan.tiles, wave, most}));
  // Equal contiguous ranges of tiles; no slice left empty.
  const int64_t tiles_per_slice = (plan.tiles + slices - 1) / slices;
  return (plan.tiles + tiles_per_slice - 1) / tiles_per_slice;
}

// ---------------------------------------------------------------- device side

struct FilterGeometry {
  int64_t pixels, tiles, tiles_per_block;
  int c, k, row_fragments, column_fragments, fragment_groups, per_warp, x_ld, dy_ld, stages;
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

// Two 16-bit elements `rows` apart as one register, the first in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pair_at(const T* p, int rows_apart) {
  const uint16_t* const bits = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(bits[0]) | static_cast<uint32_t>(bits[rows_apart]) << 16;
}

// Shared memory: [stages] x (x tile [kTilePixels][x_ld], dy tile
// [kTilePixels][dy_ld]); after the last tile, the block's sums [k][c] floats.
// Block b sums tiles [b * tiles_per_block, ...) into partial[b][k * c].
template <typename T, int kFragments>
__global__ void __launch_bounds__(kThreads, kResidentBlocks)
    pointwise_filter_nhwc(FilterGeometry g, const T* __restrict__ x, const T* __restrict__ dy,
                          float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  T* const staged = reinterpret_cast<T*>(shared_bytes);
  const int stage_elements = kTilePixels * (g.x_ld + g.dy_ld);
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;

  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * g.tiles_per_block;
  const int64_t end_tile = g.tiles - first_tile < g.tiles_per_block ? g.tiles : first_tile + g.tiles_per_block;
  const int steps = end_tile > first_tile ? static_cast<int>(end_tile - first_tile) : 0;

  // Copies tile `step` of this block (a contiguous run of x and one of dy)
  // into buffer `buffer`, a pixel a row; pixels past the last are zero (x and
  // dy both: their product adds nothing).
  auto load_tile = [&](int step, int buffer) {
    T* const to_x = staged + buffer * stage_elements;
    T* const to_dy = to_x + kTilePixels * g.x_ld;
    const int64_t pixel0 = (first_tile + step) * kTilePixels;
    const int64_t pixels_left = g.pixels - pixel0;
    copy_rows_or_zero(to_x, g.x_ld, x + pixel0 * g.c, pixels_left, kTilePixels, g.c / kVector, x, thread, kThreads);
    copy_rows_or_zero(to_dy, g.dy_ld, dy + pixel0 * g.k, pixels_left, kTilePixels, g.k / kVector, dy, thread,
                      kThreads);
  };

  for (int stage = 0; stage < g.stages - 1; ++stage) {
    if (stage < steps) load_tile(stage, stage);
    commit_copies();
  }
  // dy's columns past k up to the row fragments' 16 (one vector a pixel at
  // most) are never copied: zero them once in every buffer.
  if (g.row_fragments * 16 != g.k)
    for (int row = thread; row < g.stages * kTilePixels; row += kThreads)
      *reinterpret_cast<Packed<T, kVector>*>(staged + (row / kTilePixels) * stage_elements +
                                             kTilePixels * g.x_ld + (row % kTilePixels) * g.dy_ld + g.k) =
          Packed<T, kVector>{};

  // This warp's fragments: [first, first + per_warp) of the result's, row
  // fragment-major; the tile's 16-pixel steps it takes: step_group, +
  // step_groups, ...
  const int fragment_group = warp % g.fragment_groups, step_group = warp / g.fragment_groups;
  const int step_groups = kWarps / g.fragment_groups;
  const int first = fragment_group * g.per_warp;
  const int fragments = g.row_fragments * g.column_fragments;
  const int mine = fragments - first < g.per_warp ? fragments - first : g.per_warp;
  const int group_row = lane / 4, pair = 2 * (lane % 4);

  float acc[kFragments][4];
#pragma unroll
  for (int i = 0; i < kFragments; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  int buffer = 0;
  for (int step = 0; step < steps; ++step) {
    // This step's copies (this thread's) are done; the barrier makes everyone's
    // visible, and tells that every warp finished the previous step, whose
    // buffer the next copy reuses.
    wait_oldest_tile(g.stages);
    __syncthreads();
    const int ahead = step + g.stages - 1;
    if (ahead < steps) load_tile(ahead, ahead % g.stages);
    commit_copies();

    const T* const tile_x = staged + buffer * stage_elements;
    const T* const tile_dy = tile_x + kTilePixels * g.x_ld;
    for (int s = step_group; s < kSteps; s += step_groups) {
      // Lane (g, t) holds pixels 2t, 2t+1 (a[0], b[0]) and 2t+8, 2t+9 (a[2], b[1]) of the step.
      const T* const x_rows = tile_x + (s * 16 + pair) * g.x_ld + group_row;
      const T* const dy_rows = tile_dy + (s * 16 + pair) * g.dy_ld + group_row;
      int loaded_row = -1;
      uint32_t a[4] = {0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < kFragments; ++i) {
        if (i < mine) {
          const int f = first + i;
          const int row = f / g.column_fragments, column = f - row * g.column_fragments;
          if (row != loaded_row) {
            // A[k][pixel] = dy[pixel][k]: rows 16 row + g and + 8, pixels 2t.. and 2t+8..
            const T* const at = dy_rows + row * 16;
            a[0] = pair_at(at, g.dy_ld);
            a[1] = pair_at(at + 8, g.dy_ld);
            a[2] = pair_at(at + 8 * g.dy_ld, g.dy_ld);
            a[3] = pair_at(at + 8 * g.dy_ld + 8, g.dy_ld);
            loaded_row = row;
          }
          // B[pixel][c] = x[pixel][c]: column 8 column + g, pixels 2t.. and 2t+8..
          const T* const bt = x_rows + column * 8;
          const uint32_t b[2] = {pair_at(bt, g.x_ld), pair_at(bt + 8 * g.x_ld, g.x_ld)};
          mma_16816<T>(acc[i], a, b);
        }
      }
    }
    buffer = buffer + 1 == g.stages ? 0 : buffer + 1;
  }
  wait_copies<0>();
  __syncthreads();

  // The warps of one fragment group add their sums in step-group order into
  // sums[k][c] (rows past k are padding, dropped), then the block writes them
  // as its slice.
  float* const sums = reinterpret_cast<float*>(shared_bytes);
  for (int turn = 0; turn < step_groups; ++turn) {
    if (turn == step_group) {
#pragma unroll
      for (int i = 0; i < kFragments; ++i) {
        if (i < mine) {
          const int f = first + i;
          const int row = f / g.column_fragments, column = f - row * g.column_fragments;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kk = row * 16 + group_row + (e >= 2 ? 8 : 0), cc = column * 8 + pair + (e & 1);
            if (kk < g.k) {
              float* const at = sums + kk * g.c + cc;
              *at = turn == 0 ? acc[i][e] : *at + acc[i][e];
            }
          }
        }
      }
    }
    __syncthreads();
  }
  float* const slice = partial + static_cast<int64_t>(blockIdx.x) * g.k * g.c;
  for (int e = thread; e < g.k * g.c; e += kThreads) slice[e] = sums[e];
#endif
}

// Writes the total of element e = k * c + ci as T at the weight's strides: sum_slices' store.
template <typename T>
struct PointwiseWeightStore {
  T* dweight;
  int c;
  int64_t ws0, ws1;
  __device__ __forceinline__ void operator()(int64_t e, float total) const {
    const int64_t kk = e / c, ci = e - kk * c;
    dweight[kk * ws0 + ci * ws1] = T(total);
  }
};

template <typename T, int kFragments>
cudaError_t launch_kernel(const DirectConvShape& shape, const FilterPlan& plan, int device,
                          const DeviceTraits& traits, int sm_count, const T* x, const T* dy, T* dweight,
                          float* partial, cudaStream_t stream) {
  constexpr auto kernel = pointwise_filter_nhwc<T, kFragments>;
  if (plan.shared_bytes > kDefaultSharedLimit) {
    const cudaError_t allowed = allow_all_shared<kernel>(device, traits);
    if (allowed != cudaSuccess) return allowed;
  }
  const int64_t slices = slices_of(plan, sm_count);
  FilterGeometry g{};
  g.pixels = plan.pixels;
  g.tiles = plan.tiles;
  g.tiles_per_block = (plan.tiles + slices - 1) / slices;
  g.c = plan.c;
  g.k = plan.k;
  g.row_fragments = plan.row_fragments;
  g.column_fragments = plan.column_fragments;
  g.fragment_groups = plan.fragment_groups;
  g.per_warp = plan.per_warp;
  g.x_ld = plan.x_ld;
  g.dy_ld = plan.dy_ld;
  g.stages = plan.stages;
  kernel<<<dim3(static_cast<unsigned>(slices)), kThreads, plan.shared_bytes, stream>>>(g, x, dy, partial);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  const PointwiseWeightStore<T> store{dweight, plan.c, shape.weight_strides[0], shape.weight_strides[1]};
  return launch_sum_slices(static_cast<const float*>(partial), slices, int64_t{plan.k} * plan.c, store, stream);
}

template <typename T>
cudaError_t launch_typed(const DirectConvShape& shape, const FilterPlan& plan, int device, const DeviceTraits& traits,
                         int sm_count, const void* x, const void* dy, void* dweight, void* workspace,
                         cudaStream_t stream) {
  const T* const tx = static_cast<const T*>(x);
  const T* const tdy = static_cast<const T*>(dy);
  T* const tdw = static_cast<T*>(dweight);
  float* const partial = static_cast<float*>(workspace);
  switch (plan.kernel_fragments) {
    case 2: return launch_kernel<T, 2>(shape, plan, device, traits, sm_count, tx, tdy, tdw, partial, stream);
    case 4: return launch_kernel<T, 4>(shape, plan, device, traits, sm_count, tx, tdy, tdw, partial, stream);
    case 8: return launch_kernel<T, 8>(shape, plan, device, traits, sm_count, tx, tdy, tdw, partial, stream);
    case 16: return launch_kernel<T, 16>(shape, plan, device, traits, sm_count, tx, tdy, tdw, partial, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool pointwise_filter_fits(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction) {
  return plan_of(shape, dtype, direction).fits;
}

bool pointwise_filter_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction,
                              bool aligned) {
  if (!aligned) return false;
  const FilterPlan plan = plan_of(shape, dtype, direction);
  int device = 0;
  DeviceTraits traits;
  // bf16 mma.sync and cp.async need compute capability 8.0.
  return plan.fits && current_device(&device, &traits) && traits.major >= 8 &&
         plan.shared_bytes <= static_cast<size_t>(traits.shared_optin);
}

size_t pointwise_filter_workspace_bytes(const DirectConvShape& shape, DirectDType dtype, int sm_count) {
  const FilterPlan plan = plan_of(shape, dtype, DirectDirection::kBackwardFilter);
  if (!plan.fits) return 0;
  return static_cast<size_t>(slices_of(plan, sm_count) * plan.k * plan.c) * sizeof(float);
}

int launch_pointwise_filter(const DirectConvShape& shape, DirectDType dtype, int sm_count, const void* x,
                            const void* dy, void* dweight, void* workspace, CUstream_st* stream) {
  const FilterPlan plan = plan_of(shape, dtype, DirectDirection::kBackwardFilter);
  int device = 0;
  DeviceTraits traits;
  if (!plan.fits || !current_device(&device, &traits) || traits.major < 8 ||
      plan.shared_bytes > static_cast<size_t>(traits.shared_optin))
    return static_cast<int>(cudaErrorInvalidValue);
  if (dtype == DirectDType::kHalf)
    return static_cast<int>(
        launch_typed<__half>(shape, plan, device, traits, sm_count, x, dy, dweight, workspace, stream));
  return static_cast<int>(
      launch_typed<__nv_bfloat16>(shape, plan, device, traits, sm_count, x, dy, dweight, workspace, stream));
}

}  // namespace torch_cudnn_algo::kernels
