// Tensor-core GEMM for 1x1 convolutions (see pointwise_mma.h). Compiled by
// nvcc alone, like direct_conv.cu: no torch header.
//
// A 1x1 convolution at stride 1 without padding, one group, channels_last, is
//   out[pixel, d] = sum over ci of src[pixel, ci] * W[ci, d]
// with forward:       src = x,  W[ci, d] = weight[d, ci]
//      backward data: src = dy, W[ci, d] = weight[ci, d].
// A tile of 128 pixels is one contiguous run of src and one of out. With 16 to
// 160 channels the GEMM does a few multiply-adds a byte, far below what tensor
// cores sustain, so the time is the memory time and the kernel streams:
//  - blocks as many as are resident, each taking a contiguous range of tiles,
//    so W is staged once a block and there is no second wave;
//  - src tiles copied by cp.async, whole 16-byte vectors in memory order (each
//    warp's copies one contiguous run), up to 4 tiles a block in flight;
//  - each warp multiplies 16 pixels x all destination channels with mma.sync
//    m16n8k16 (fp16/bf16 in, fp32 accumulate), rounds its sums to the element
//    type into its own staging rows, and stores them as 16-byte vectors, again
//    one contiguous run a warp.
// No atomics, no workspace: every output element is summed by one lane in a
// fixed order (deterministic).
#include "kernels/pointwise_mma.h"

#include "kernels/async_copy.cuh"
#include "kernels/device_traits.cuh"
#include "kernels/mma_sync.cuh"
#include "kernels/pointwise_shape.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Pixels (GEMM rows) a warp multiplies: one m16 fragment.
constexpr int kWarpRows = 16;
constexpr int kTileRows = kWarps * kWarpRows;
constexpr int kVector = kPointwiseVector;
constexpr int kMaxStages = 4;
constexpr int kMinStages = 2;
// Shared memory a block should stay under so that two fit an SM (228 KB on
// Hopper, 164 KB on A100 less the driver's reserve); more stages beyond it buy
// less than the second block would.
constexpr size_t kTwoBlocksShared = 80 * 1024;
constexpr int kMaxBlocksPerSm = 8;
// 16-byte weight loads one thread has in flight while staging W.
constexpr int kWeightBatch = 8;
constexpr size_t kDefaultSharedLimit = 48 * 1024;

// How a convolution maps onto the kernel; fits is false when it does not.
struct PointwisePlan {
  bool fits = false;
  bool backward = false;
  int src_c = 0, dst_c = 0;
  int k_padded = 0;   // src_c rounded up to the mma's K of 16; the columns past src_c are zero
  int fragments = 0;  // 8-column mma fragments covering dst_c
  int max_fragments = 0;  // the kernel instance: fragments rounded up to 4, 8, 12 or 20
  int a_ld = 0, w_ld = 0, out_ld = 0;
  int stages = 0;
  int64_t pixels = 0, tiles = 0;
  size_t shared_bytes = 0;
};

size_t shared_of(const PointwisePlan& p, int stages) {
  const size_t element = 2;
  return element * (static_cast<size_t>(p.dst_c) * p.w_ld + static_cast<size_t>(stages) * kTileRows * p.a_ld +
                    static_cast<size_t>(kWarps) * kWarpRows * p.out_ld);
}

PointwisePlan plan_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  PointwisePlan plan;
  if (direction == DirectDirection::kBackwardFilter || !is_pointwise(s, dtype)) return plan;
  plan.backward = direction == DirectDirection::kBackwardData;
  const int64_t src_c = plan.backward ? s.k : s.c, dst_c = plan.backward ? s.c : s.k;
  plan.src_c = static_cast<int>(src_c);
  plan.dst_c = static_cast<int>(dst_c);
  plan.k_padded = (plan.src_c + 15) / 16 * 16;
  plan.fragments = plan.dst_c / 8;
  plan.max_fragments = plan.fragments <= 4 ? 4 : plan.fragments <= 8 ? 8 : plan.fragments <= 12 ? 12 : 20;
  plan.a_ld = plan.w_ld = pointwise_row_stride(plan.k_padded);
  plan.out_ld = pointwise_row_stride(plan.dst_c);
  plan.pixels = s.n * s.h * s.w;
  plan.tiles = (plan.pixels + kTileRows - 1) / kTileRows;
  plan.stages = kMinStages;
  for (int stages = kMaxStages; stages > kMinStages; --stages)
    if (shared_of(plan, stages) <= kTwoBlocksShared) {
      plan.stages = stages;
      break;
    }
  plan.shared_bytes = shared_of(plan, plan.stages);
  plan.fits = true;
  return plan;
}

// ---------------------------------------------------------------- device side

// Everything the kernel needs, by value.
struct PointwiseGeometry {
  int64_t pixels, tiles, tiles_per_block;
  int64_t ws0, ws1;  // weight strides of dims 0 and 1
  int src_c, dst_c, k_padded, fragments, a_ld, w_ld, out_ld, stages;
  bool backward;
  bool weight_vectors;  // the weight's dim 1 is contiguous and 16-byte aligned: stage it by vectors
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

__device__ __forceinline__ void convert(float v, __half& out) { out = __float2half_rn(v); }
__device__ __forceinline__ void convert(float v, __nv_bfloat16& out) { out = __float2bfloat16_rn(v); }

template <typename T>
__device__ __forceinline__ uint32_t word_at(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Stages W transposed, row d holding W[ci, d] for ci < k_padded (zero past
// src_c: A is zero there, but 0 times stale shared memory could be NaN), so
// that a B fragment's two elements of one lane are one 32-bit word. Staging is
// latency bound (the weights come from L2): each thread keeps kWeightBatch
// loads in flight.
template <typename T>
__device__ __forceinline__ void stage_weights(const PointwiseGeometry& g, const T* __restrict__ weight,
                                              T* __restrict__ staged, int thread) {
  if (g.weight_vectors) {
    // Dim 1 is contiguous: 8 of it are one 16-byte load. Forward, dim 1 is ci,
    // so a vector is 16 bytes of one staged row; backward, dim 1 is d, so a
    // vector spreads over 8 rows. A line is one index of dim 0.
    const int per_line = (g.backward ? g.dst_c : g.src_c) / kVector;
    const int total = (g.backward ? g.src_c : g.dst_c) * per_line;
    for (int base = thread; base < total; base += kThreads * kWeightBatch) {
      Packed<T, kVector> loaded[kWeightBatch];
#pragma unroll
      for (int u = 0; u < kWeightBatch; ++u) {
        const int i = base + u * kThreads;
        if (i < total) {
          const int line = i / per_line, v = i - line * per_line;
          loaded[u] = *reinterpret_cast<const Packed<T, kVector>*>(weight + line * g.ws0 + v * kVector);
        }
      }
#pragma unroll
      for (int u = 0; u < kWeightBatch; ++u) {
        const int i = base + u * kThreads;
        if (i < total) {
          const int line = i / per_line, v = i - line * per_line;
          if (g.backward) {
#pragma unroll
            for (int e = 0; e < kVector; ++e) staged[(v * kVector + e) * g.w_ld + line] = loaded[u].v[e];
          } else {
            *reinterpret_cast<Packed<T, kVector>*>(staged + line * g.w_ld + v * kVector) = loaded[u];
          }
        }
      }
    }
  } else {
    // Any other strides: element by element.
    for (int i = thread; i < g.dst_c * g.src_c; i += kThreads) {
      const int d = i / g.src_c, ci = i - d * g.src_c;
      staged[d * g.w_ld + ci] = weight[g.backward ? ci * g.ws0 + d * g.ws1 : d * g.ws0 + ci * g.ws1];
    }
  }
  const int pad = g.k_padded - g.src_c;
  for (int i = thread; i < g.dst_c * pad; i += kThreads) staged[(i / pad) * g.w_ld + g.src_c + i % pad] = T(0);
}

// Shared memory, in this order (every part a multiple of 16 bytes):
//   W   [dst_c][w_ld]                     the weights, transposed (row d)
//   A   [stages][kTileRows][a_ld]         src tiles, a row a pixel
//   out [kWarps][kWarpRows][out_ld]       a warp's rounded sums on their way out
template <typename T, int kMaxFragments>
__global__ void __launch_bounds__(kThreads) pointwise_mma_nhwc(PointwiseGeometry g, const T* __restrict__ source,
                                                               const T* __restrict__ weight,
                                                               T* __restrict__ destination) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  T* const staged_weight = reinterpret_cast<T*>(shared_bytes);
  T* const staged_a = staged_weight + g.dst_c * g.w_ld;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  T* const staged_out = staged_a + g.stages * kTileRows * g.a_ld + warp * kWarpRows * g.out_ld;

  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * g.tiles_per_block;
  const int64_t end_tile = g.tiles - first_tile < g.tiles_per_block ? g.tiles : first_tile + g.tiles_per_block;
  const int steps = end_tile > first_tile ? static_cast<int>(end_tile - first_tile) : 0;

  // Copies tile `step` of this block (a contiguous run of src) into A buffer
  // `buffer`, a pixel a row; rows past the last pixel are zero.
  auto load_tile = [&](int step, int buffer) {
    T* const to = staged_a + buffer * kTileRows * g.a_ld;
    const int64_t row0 = (first_tile + step) * kTileRows;
    const int64_t rows_left = g.pixels - row0;
    copy_rows_or_zero(to, g.a_ld, source + row0 * g.src_c, rows_left, kTileRows, g.src_c / kVector, source, thread,
                      kThreads);
  };

  // Every stage commits a group, empty or not, so that "the group of step i"
  // is always the i-th committed one and wait_oldest_tile counts right.
  for (int stage = 0; stage < g.stages - 1; ++stage) {
    if (stage < steps) load_tile(stage, stage);
    commit_copies();
  }
  // The A columns past src_c (at most one vector a row) are never copied: zero
  // them once in every buffer. W stages meanwhile too.
  if (g.k_padded != g.src_c)
    for (int row = thread; row < g.stages * kTileRows; row += kThreads)
      *reinterpret_cast<Packed<T, kVector>*>(staged_a + row * g.a_ld + g.src_c) = Packed<T, kVector>{};
  stage_weights<T>(g, weight, staged_weight, thread);

  const int group_row = lane / 4, pair = 2 * (lane % 4);
  const int out_row_vectors = g.dst_c / kVector;
  int buffer = 0;
  for (int step = 0; step < steps; ++step) {
    // This step's copies (this thread's) are done; the barrier makes everyone's
    // visible (and W, the first time), and tells that every warp finished the
    // previous step, whose buffer the next copy reuses.
    wait_oldest_tile(g.stages);
    __syncthreads();
    const int ahead = step + g.stages - 1;
    if (ahead < steps) load_tile(ahead, ahead % g.stages);
    commit_copies();

    float acc[kMaxFragments][4];
#pragma unroll
    for (int j = 0; j < kMaxFragments; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const T* const a_rows = staged_a + (buffer * kTileRows + warp * kWarpRows) * g.a_ld;
    for (int k = 0; k < g.k_padded; k += 16) {
      const T* const a_top = a_rows + group_row * g.a_ld + k + pair;
      const T* const a_bottom = a_top + 8 * g.a_ld;
      const uint32_t a[4] = {word_at(a_top), word_at(a_bottom), word_at(a_top + 8), word_at(a_bottom + 8)};
#pragma unroll
      for (int j = 0; j < kMaxFragments; ++j) {
        if (j < g.fragments) {
          const T* const b_column = staged_weight + (j * 8 + group_row) * g.w_ld + k + pair;
          const uint32_t b[2] = {word_at(b_column), word_at(b_column + 8)};
          mma_16816<T>(acc[j], a, b);
        }
      }
    }

    // Lane (g, t) holds D[g][2t, 2t+1] and D[g+8][2t, 2t+1] of each fragment:
    // rounded to T, through the warp's staging rows, out as 16-byte vectors.
#pragma unroll
    for (int j = 0; j < kMaxFragments; ++j) {
      if (j < g.fragments) {
        Packed<T, 2> top, bottom;
        convert(acc[j][0], top.v[0]);
        convert(acc[j][1], top.v[1]);
        convert(acc[j][2], bottom.v[0]);
        convert(acc[j][3], bottom.v[1]);
        *reinterpret_cast<Packed<T, 2>*>(staged_out + group_row * g.out_ld + j * 8 + pair) = top;
        *reinterpret_cast<Packed<T, 2>*>(staged_out + (group_row + 8) * g.out_ld + j * 8 + pair) = bottom;
      }
    }
    __syncwarp();
    const int64_t warp_row0 = (first_tile + step) * kTileRows + warp * kWarpRows;
    const int64_t rows_left = g.pixels - warp_row0;
    T* const to = destination + warp_row0 * g.dst_c;
    for (int v = lane; v < kWarpRows * out_row_vectors; v += 32) {
      const int row = v / out_row_vectors, column = (v - row * out_row_vectors) * kVector;
      if (row < rows_left)
        *reinterpret_cast<Packed<T, kVector>*>(to + static_cast<int64_t>(v) * kVector) =
            *reinterpret_cast<const Packed<T, kVector>*>(staged_out + row * g.out_ld + column);
    }
    __syncwarp();
    buffer = buffer + 1 == g.stages ? 0 : buffer + 1;
  }
  wait_copies<0>();
#endif
}

// ---------------------------------------------------------------- host side

struct LaunchContext {
  const DirectConvShape* shape;
  const PointwisePlan* plan;
  int sm_count;
  int device;
  DeviceTraits traits;
  const void* source;
  const void* weight;
  void* destination;
  cudaStream_t stream;
};

template <typename T, int kMaxFragments>
cudaError_t launch_kernel(const LaunchContext& c) {
  constexpr auto kernel = pointwise_mma_nhwc<T, kMaxFragments>;
  const PointwisePlan& plan = *c.plan;
  if (plan.shared_bytes > kDefaultSharedLimit) {
    const cudaError_t allowed = allow_all_shared<kernel>(c.device, c.traits);
    if (allowed != cudaSuccess) return allowed;
  }
  // As many blocks as are resident at once and no more (no partial second
  // wave), each taking a contiguous range of tiles.
  int resident = resident_blocks(kernel, kThreads, plan.shared_bytes);
  if (resident < 1) resident = blocks_fitting_shared(c.traits, plan.shared_bytes, kMaxBlocksPerSm);
  resident = std::min(resident, kMaxBlocksPerSm);
  const int64_t wanted = int64_t{std::max(1, c.sm_count)} * resident;
  int64_t blocks = std::clamp<int64_t>(wanted, 1, plan.tiles);
  const int64_t tiles_per_block = (plan.tiles + blocks - 1) / blocks;
  blocks = (plan.tiles + tiles_per_block - 1) / tiles_per_block;
  PointwiseGeometry g{};
  g.pixels = plan.pixels;
  g.tiles = plan.tiles;
  g.tiles_per_block = tiles_per_block;
  g.ws0 = c.shape->weight_strides[0];
  g.ws1 = c.shape->weight_strides[1];
  g.src_c = plan.src_c;
  g.dst_c = plan.dst_c;
  g.k_padded = plan.k_padded;
  g.fragments = plan.fragments;
  g.a_ld = plan.a_ld;
  g.w_ld = plan.w_ld;
  g.out_ld = plan.out_ld;
  g.stages = plan.stages;
  g.backward = plan.backward;
  g.weight_vectors = g.ws1 == 1 && g.ws0 % kVector == 0 && reinterpret_cast<uintptr_t>(c.weight) % 16 == 0;
  kernel<<<dim3(static_cast<unsigned>(blocks)), kThreads, plan.shared_bytes, c.stream>>>(
      g, static_cast<const T*>(c.source), static_cast<const T*>(c.weight), static_cast<T*>(c.destination));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_fragments(const LaunchContext& c) {
  switch (c.plan->max_fragments) {
    case 4: return launch_kernel<T, 4>(c);
    case 8: return launch_kernel<T, 8>(c);
    case 12: return launch_kernel<T, 12>(c);
    case 20: return launch_kernel<T, 20>(c);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool pointwise_mma_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool aligned) {
  if (!aligned) return false;
  const PointwisePlan plan = plan_of(shape, dtype, direction);
  if (!plan.fits) return false;
  int device = 0;
  DeviceTraits traits;
  if (!current_device(&device, &traits)) return false;
  // bf16 mma.sync and cp.async need compute capability 8.0.
  return traits.major >= 8 && plan.shared_bytes <= static_cast<size_t>(traits.shared_optin);
}

int launch_pointwise_mma(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, int sm_count,
                         const void* source, const void* weight, void* destination, CUstream_st* stream) {
  const PointwisePlan plan = plan_of(shape, dtype, direction);
  LaunchContext c{};
  if (!plan.fits || !current_device(&c.device, &c.traits) || c.traits.major < 8 ||
      plan.shared_bytes > static_cast<size_t>(c.traits.shared_optin))
    return static_cast<int>(cudaErrorInvalidValue);
  c.shape = &shape;
  c.plan = &plan;
  c.sm_count = sm_count;
  c.source = source;
  c.weight = weight;
  c.destination = destination;
  c.stream = stream;
  if (dtype == DirectDType::kHalf) return static_cast<int>(launch_fragments<__half>(c));
  return static_cast<int>(launch_fragments<__nv_bfloat16>(c));
}

}  // namespace torch_cudnn_algo::kernels
