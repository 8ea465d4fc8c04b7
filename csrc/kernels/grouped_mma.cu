// Tensor-core implicit GEMM for grouped convolutions (see grouped_mma.h).
// Compiled by nvcc alone, like direct_conv.cu: no torch header.
//
// Per group g, the destination is one GEMM:
//   out[pixel, d] = sum over K = (tap t = (r, s), source channel ci) of
//                   A[pixel, (t, ci)] * W[(t, ci), d]
// with A[pixel, (t, ci)] = src[source pixel of (pixel, t), g*cpg_src + ci],
// zero where that source pixel does not exist (padding, and for backward data
// the taps whose stride does not divide: source_index in direct_common.h), and
//   forward:       src = x,  W[(t, ci), d] = weight[g*cpg_dst + d, ci, r, s]
//   backward data: src = dy, W[(t, ci), d] = weight[g*cpg_src + ci, d, r, s].
// Zero-filling the missing rows is what makes one kernel serve any stride,
// padding and dilation, in both directions (transposed convolutions arrive as
// one of the two already).
//
// A block owns one group (blockIdx.y) and a contiguous range of 128-pixel
// tiles (blockIdx.x). It stages the group's whole W in shared memory once, then
// streams A through a 3-stage cp.async pipeline in K chunks of whole taps, and
// 4 warps multiply 32 pixels x all destination channels each with wmma
// (16x16x16, fp16/bf16 in, fp32 accumulate: the same contract as the gather
// kernel's fp32 sums; no TF32 is involved). No atomics, no workspace: every
// output element is summed by one warp in a fixed order (deterministic).
#include "kernels/grouped_mma.h"

#include "kernels/async_copy.cuh"
#include "kernels/device_traits.cuh"
#include "kernels/direct_common.h"

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
// Pixels (GEMM rows) a tile holds: one per thread, so a thread stages one A row
// and decodes its pixel once per tile, not once per copy.
constexpr int kTileRows = kThreads;
// Rows one warp multiplies: two 16-row fragments share each weight fragment it
// loads, halving the shared-memory reads of W per mma against one fragment.
constexpr int kWarpRows = kTileRows / kWarps;
constexpr int kWarpRowFragments = kWarpRows / 16;
// A chunks in flight: the copies of the two chunks after the one being
// multiplied overlap its mma, and one barrier a chunk suffices.
constexpr int kStages = 3;
// Elements added to every staged row. wmma loads 8 rows of 16 bytes at a time;
// rows a multiple of 64 bytes apart fall on the same banks, 16 more bytes apart
// (an odd number of 16-byte units, as any width multiple of 16 elements plus 8
// gives) spread them over all banks. 8 elements also keep wmma's required
// ldm multiple of 8 and 32-byte aligned fragments.
constexpr int kSkew = 8;
// Row stride (floats) of a warp's 16x16 accumulator scratch: a multiple of 4
// (wmma's rule for float) that is not a multiple of 32 banks.
constexpr int kScratchLd = 16 + 4;
constexpr int kMaxChannelsPerGroup = 64;
// A chunk narrower than this does little mma per barrier: chunks take several
// taps then (8 or 16 channels a group).
constexpr int kMinChunkWidth = 32;
// fp16/bf16 elements in 16 bytes: the copy and store unit.
constexpr int kVector = 8;
constexpr int kMaxBlocksPerSm = 4;
// 16-byte weight loads one thread has in flight while staging W.
constexpr int kWeightBatch = 8;
constexpr size_t kDefaultSharedLimit = 48 * 1024;
// Keeps the per-tap index arithmetic in int; the weights would exceed shared memory long before.
constexpr int64_t kMaxTaps = 4096;

// How a convolution maps onto the kernel; fits is false when it does not.
struct MmaPlan {
  bool fits = false;
  int cpg_src = 0, cpg_dst = 0;
  int taps = 0;             // r * s
  int taps_per_chunk = 0;   // taps one K chunk holds
  int chunk_width = 0;      // K columns of a chunk: taps_per_chunk * cpg_src, a multiple of 16
  int chunks = 0;           // ceil(taps / taps_per_chunk); the last chunk's missing taps are zero
  int column_fragments = 0; // 16-column fragments covering cpg_dst
  int weight_ld = 0;        // staged W row stride: column_fragments * 16 + kSkew
  int a_ld = 0;             // staged A row stride: chunk_width + kSkew
  int64_t pixels = 0;       // destination pixels, n * height * width
  int64_t tiles_per_group = 0;
  size_t shared_bytes = 0;
};

MmaPlan plan_of(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  MmaPlan plan;
  if (dtype != DirectDType::kHalf && dtype != DirectDType::kBFloat16) return plan;
  if (direction == DirectDirection::kBackwardFilter || !s.channels_last) return plan;
  // gridDim.y holds the group.
  if (s.groups < 1 || s.groups > 65535 || s.c % s.groups != 0 || s.k % s.groups != 0) return plan;
  if (s.n < 1 || s.h < 1 || s.w < 1 || s.p < 1 || s.q < 1 || s.r < 1 || s.s < 1) return plan;
  if (s.stride_h < 1 || s.stride_w < 1 || s.dilation_h < 1 || s.dilation_w < 1 || s.pad_h < 0 || s.pad_w < 0)
    return plan;
  const bool backward = direction == DirectDirection::kBackwardData;
  const int64_t cpg_src = (backward ? s.k : s.c) / s.groups, cpg_dst = (backward ? s.c : s.k) / s.groups;
  // Multiples of 8: a group's channels are whole 16-byte vectors, so every copy
  // and store is one aligned vector and stays inside its group. Not depthwise:
  // one channel a group is no GEMM (the gather kernel serves it).
  if (cpg_src % kVector != 0 || cpg_dst % kVector != 0) return plan;
  if (cpg_src > kMaxChannelsPerGroup || cpg_dst > kMaxChannelsPerGroup) return plan;
  const int64_t taps = s.r * s.s;
  if (taps > kMaxTaps) return plan;

  plan.cpg_src = static_cast<int>(cpg_src);
  plan.cpg_dst = static_cast<int>(cpg_dst);
  plan.taps = static_cast<int>(taps);
  // K is taps x channels flattened, chunked by whole taps: 24 channels a group
  // take 2 taps a chunk (48 columns, 3 mma steps) instead of padding every tap
  // to 32 columns, which would multiply a third more zeros. A tap count whose
  // channels make a multiple of 16 columns: 1 tap for multiples of 16, else 2.
  plan.taps_per_chunk = cpg_src % 16 == 0 ? 1 : 2;
  while (plan.taps_per_chunk * cpg_src < kMinChunkWidth && plan.taps_per_chunk < taps) plan.taps_per_chunk *= 2;
  plan.chunk_width = plan.taps_per_chunk * plan.cpg_src;
  plan.chunks = static_cast<int>((taps + plan.taps_per_chunk - 1) / plan.taps_per_chunk);
  plan.column_fragments = static_cast<int>((cpg_dst + 15) / 16);
  plan.weight_ld = plan.column_fragments * 16 + kSkew;
  plan.a_ld = plan.chunk_width + kSkew;
  plan.pixels = backward ? s.n * s.h * s.w : s.n * s.p * s.q;
  plan.tiles_per_group = (plan.pixels + kTileRows - 1) / kTileRows;
  const size_t element = 2;
  const size_t weight_bytes = static_cast<size_t>(plan.chunks) * plan.chunk_width * plan.weight_ld * element;
  const size_t a_bytes = static_cast<size_t>(kStages) * kTileRows * plan.a_ld * element;
  const size_t scratch_bytes = static_cast<size_t>(kWarps) * 16 * kScratchLd * sizeof(float);
  plan.shared_bytes = weight_bytes + a_bytes + scratch_bytes;
  plan.fits = true;
  return plan;
}

// ---------------------------------------------------------------- device side

// Everything the kernel needs, by value. Index: int when every tensor has fewer
// than 2^31 elements (DirectLaunch::wide_index), else int64_t.
template <typename Index>
struct MmaGeometry {
  Index pixels;                  // destination pixels
  Index dst_h, dst_w, src_h, src_w;
  Index src_c, dst_c;            // channels of a source / destination pixel, all groups
  Index filter_w;                // s: taps t = r * filter_w + s
  Index sh, sw, ph, pw, dh, dw;
  Index ws0, ws1, ws2, ws3;      // weight strides, [k, c/groups, r, s]
  Index tiles_per_group, tiles_per_block;
  int cpg_src, cpg_dst, taps, taps_per_chunk, chunk_width, chunks, weight_ld, a_ld;
  bool weight_vectors;           // the weight's dim 1 is contiguous and 16-byte aligned: stage it by vectors
};

template <typename T, int N>
struct alignas(sizeof(T) * N) Packed {
  T v[N];
};

// Fragment loads from shared memory. nvcc narrows wmma's fp16 loads to the
// shared state space itself, but not its bf16 ones, which stay generic loads;
// for bf16 this is the same PTX instruction with .shared, writing the
// fragment's four registers in the order wmma's own load does.
template <typename Use>
__device__ __forceinline__ void load_fragment(nvcuda::wmma::fragment<Use, 16, 16, 16, __half, nvcuda::wmma::row_major>& f,
                                              const __half* p, unsigned ldm) {
  nvcuda::wmma::load_matrix_sync(f, p, ldm);
}

__device__ __forceinline__ void load_fragment(
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>& f,
    const __nv_bfloat16* p, unsigned ldm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned* const r = reinterpret_cast<unsigned*>(&f);
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at), "r"(ldm)
               : "memory");
#endif
}

__device__ __forceinline__ void load_fragment(
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major>& f,
    const __nv_bfloat16* p, unsigned ldm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned* const r = reinterpret_cast<unsigned*>(&f);
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at), "r"(ldm)
               : "memory");
#endif
}

__device__ __forceinline__ void convert(float v, __half& out) { out = __float2half_rn(v); }
__device__ __forceinline__ void convert(float v, __nv_bfloat16& out) { out = __float2bfloat16_rn(v); }

// Stages the group's W in shared memory: row tap * cpg_src + ci, column d.
// That is A's K order: chunk c's columns are taps c * taps_per_chunk.., each
// cpg_src wide. Rows past the last tap (the last chunk's missing taps) and
// columns past cpg_dst are zero: A is zero there, but 0 times stale shared
// memory could be NaN. Staging is latency bound (the weights come from L2), so
// each thread keeps kWeightBatch loads in flight.
template <typename T, typename Index, bool Backward, int kColumnFragments>
__device__ __forceinline__ void stage_weights(const MmaGeometry<Index>& g, const T* __restrict__ weight, Index group,
                                              T* __restrict__ staged, int thread) {
  constexpr int kColumns = kColumnFragments * 16;
  const int real_rows = g.taps * g.cpg_src;
  if (g.weight_vectors) {
    // A weight's dim 1 is contiguous (channels_last weights, the runner's):
    // 8 of its channels are one 16-byte load. Forward, dim 1 is ci: a vector
    // is 8 rows of column d. Backward, dim 1 is d: a vector is 8 columns of a
    // row. "outer", the weight's dim 0 within the group, is d forward and ci
    // backward; lines (outer, tap) follow the weight's memory order.
    const int per_line = (Backward ? g.cpg_dst : g.cpg_src) / kVector;
    const int total = (Backward ? g.cpg_src : g.cpg_dst) * g.taps * per_line;
    for (int base = thread; base < total; base += kThreads * kWeightBatch) {
      Packed<T, kVector> loaded[kWeightBatch];
#pragma unroll
      for (int u = 0; u < kWeightBatch; ++u) {
        const int i = base + u * kThreads;
        if (i < total) {
          const int v = i % per_line, line = i / per_line;
          const int tap = line % g.taps, outer = line / g.taps;
          const Index r = tap / g.filter_w, s = tap - r * g.filter_w;
          const Index channel = group * (Backward ? g.cpg_src : g.cpg_dst) + outer;
          loaded[u] = *reinterpret_cast<const Packed<T, kVector>*>(weight + channel * g.ws0 + v * kVector +
                                                                     r * g.ws2 + s * g.ws3);
        }
      }
#pragma unroll
      for (int u = 0; u < kWeightBatch; ++u) {
        const int i = base + u * kThreads;
        if (i < total) {
          const int v = i % per_line, line = i / per_line;
          const int tap = line % g.taps, outer = line / g.taps;
          if (Backward) {
            *reinterpret_cast<Packed<T, kVector>*>(staged + (tap * g.cpg_src + outer) * g.weight_ld + v * kVector) =
                loaded[u];
          } else {
#pragma unroll
            for (int e = 0; e < kVector; ++e)
              staged[(tap * g.cpg_src + v * kVector + e) * g.weight_ld + outer] = loaded[u].v[e];
          }
        }
      }
    }
  } else {
    // Any other strides: element by element.
    for (int i = thread; i < real_rows * g.cpg_dst; i += kThreads) {
      const int row = i / g.cpg_dst, d = i - row * g.cpg_dst;
      const int tap = row / g.cpg_src, ci = row - tap * g.cpg_src;
      const Index r = tap / g.filter_w, s = tap - r * g.filter_w;
      const Index channels = Backward ? (group * g.cpg_src + ci) * g.ws0 + d * g.ws1
                                      : (group * g.cpg_dst + d) * g.ws0 + ci * g.ws1;
      staged[row * g.weight_ld + d] = weight[channels + r * g.ws2 + s * g.ws3];
    }
  }
  const int pad_columns = kColumns - g.cpg_dst;
  for (int i = thread; i < real_rows * pad_columns; i += kThreads) {
    const int row = i / pad_columns;
    staged[row * g.weight_ld + g.cpg_dst + (i - row * pad_columns)] = T(0);
  }
  const int pad_rows = g.chunks * g.chunk_width - real_rows;
  for (int i = thread; i < pad_rows * kColumns; i += kThreads)
    staged[(real_rows + i / kColumns) * g.weight_ld + i % kColumns] = T(0);
}

// Shared memory, in this order (every part a multiple of 32 bytes, as wmma's
// fragment pointers need):
//   W      [chunks * chunk_width][weight_ld]   the group's weights, rows (t, ci)
//   A      [kStages][kTileRows][a_ld]          chunk (t, ci) columns of each pixel
//   scratch[kWarps][16][kScratchLd] floats     a warp's accumulator on its way out
template <typename T, typename Index, bool Backward, int kColumnFragments>
__global__ void __launch_bounds__(kThreads) grouped_mma_nhwc(MmaGeometry<Index> g, const T* __restrict__ source,
                                                             const T* __restrict__ weight,
                                                             T* __restrict__ destination) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const int weight_rows = g.chunks * g.chunk_width;
  T* const staged_weight = reinterpret_cast<T*>(shared_bytes);
  T* const staged_a = staged_weight + weight_rows * g.weight_ld;
  const int thread = threadIdx.x, warp = thread / 32, lane = thread % 32;
  float* const scratch = reinterpret_cast<float*>(staged_a + kStages * kTileRows * g.a_ld) + warp * 16 * kScratchLd;

  const Index group = blockIdx.y;
  const Index first_tile = static_cast<Index>(blockIdx.x) * g.tiles_per_block;
  const Index end_tile =
      g.tiles_per_group - first_tile < g.tiles_per_block ? g.tiles_per_group : first_tile + g.tiles_per_block;
  // (tile, chunk) steps of this block, tile-major: the pipeline runs across tile
  // boundaries, loading the next tile's first chunks while finishing this one.
  const Index steps = end_tile > first_tile ? (end_tile - first_tile) * g.chunks : Index(0);
  const T* const group_source = source + group * g.cpg_src;
  T* const group_destination = destination + group * g.cpg_dst;

  // The copy cursor: the next step to load, and this thread's pixel (A row) in its tile.
  Index load_tile = first_tile;
  int load_chunk = 0;
  bool row_live = false;
  Index row_y = 0, row_x = 0, row_image = 0;  // row_image: the pixel's image times src_h
  auto locate_row = [&](Index tile) {
    const Index m = tile * kTileRows + thread;
    row_live = m < g.pixels;
    if (row_live) {
      row_x = m % g.dst_w;
      const Index rest = m / g.dst_w;
      row_y = rest % g.dst_h;
      row_image = (rest / g.dst_h) * g.src_h;
    }
  };
  // Copies this thread's row of the next step's chunk into A buffer `buffer`,
  // and advances the cursor.
  auto load_step = [&](int buffer) {
    T* const row = staged_a + (buffer * kTileRows + thread) * g.a_ld;
    for (int t = 0; t < g.taps_per_chunk; ++t) {
      const int tap = load_chunk * g.taps_per_chunk + t;
      const T* from = source;
      bool live = row_live && tap < g.taps;
      if (live) {
        const Index r = tap / g.filter_w, s = tap - r * g.filter_w;
        const Index sy = source_index<Backward, Index>(row_y, r, g.sh, g.ph, g.dh, g.src_h);
        const Index sx = source_index<Backward, Index>(row_x, s, g.sw, g.pw, g.dw, g.src_w);
        live = sy >= 0 && sx >= 0;
        if (live) from = group_source + ((row_image + sy) * g.src_w + sx) * g.src_c;
      }
      T* const to = row + t * g.cpg_src;
      for (int c = 0; c < g.cpg_src; c += kVector) copy_16_or_zero(to + c, live ? from + c : source, live);
    }
    if (++load_chunk == g.chunks) {
      load_chunk = 0;
      ++load_tile;
      locate_row(load_tile);
    }
  };

  locate_row(first_tile);
  // Every stage commits a group, empty or not, so that "the group of step i"
  // is always the i-th committed one and wait_copies counts right.
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < steps) load_step(stage);
    commit_copies();
  }

  // W stages while the first chunks copy.
  stage_weights<T, Index, Backward, kColumnFragments>(g, weight, group, staged_weight, thread);

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kWarpRowFragments][kColumnFragments];
#pragma unroll
  for (int i = 0; i < kWarpRowFragments; ++i)
#pragma unroll
    for (int j = 0; j < kColumnFragments; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  Index compute_tile = first_tile;
  int compute_chunk = 0;
  int buffer = 0, load_buffer = kStages - 1;
  const int row_in_fragment = lane / 2, column_in_fragment = (lane % 2) * kVector;
  for (Index step = 0; step < steps; ++step) {
    // This step's copies (this thread's) are done; the barrier makes everyone's
    // visible (and W, the first time), and tells that every warp finished the
    // previous step, whose buffer the next load reuses.
    wait_copies<kStages - 2>();
    __syncthreads();
    if (step + (kStages - 1) < steps) load_step(load_buffer);
    commit_copies();
    load_buffer = load_buffer + 1 == kStages ? 0 : load_buffer + 1;

    const T* const a_rows = staged_a + (buffer * kTileRows + warp * kWarpRows) * g.a_ld;
    const T* const w_rows = staged_weight + compute_chunk * g.chunk_width * g.weight_ld;
    for (int k = 0; k < g.chunk_width; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[kWarpRowFragments];
#pragma unroll
      for (int i = 0; i < kWarpRowFragments; ++i) load_fragment(a[i], a_rows + i * 16 * g.a_ld + k, g.a_ld);
#pragma unroll
      for (int j = 0; j < kColumnFragments; ++j) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        load_fragment(b, w_rows + k * g.weight_ld + j * 16, g.weight_ld);
#pragma unroll
        for (int i = 0; i < kWarpRowFragments; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
      }
    }
    buffer = buffer + 1 == kStages ? 0 : buffer + 1;

    if (++compute_chunk == g.chunks) {
      // The tile's sums are complete: each 16x16 fragment goes through the
      // warp's scratch (wmma's register layout is opaque), and each lane
      // writes 8 channels of one pixel as one 16-byte store.
      const Index warp_row0 = compute_tile * kTileRows + warp * kWarpRows;
#pragma unroll
      for (int i = 0; i < kWarpRowFragments; ++i) {
#pragma unroll
        for (int j = 0; j < kColumnFragments; ++j) {
          wmma::store_matrix_sync(scratch, acc[i][j], kScratchLd, wmma::mem_row_major);
          __syncwarp();
          const Index m = warp_row0 + i * 16 + row_in_fragment;
          const int d = j * 16 + column_in_fragment;
          // cpg_dst is a multiple of 8: a vector is wholly in or wholly out.
          if (m < g.pixels && d < g.cpg_dst) {
            const float* const sums = scratch + row_in_fragment * kScratchLd + column_in_fragment;
            Packed<T, kVector> out;
#pragma unroll
            for (int v = 0; v < kVector; ++v) convert(sums[v], out.v[v]);
            *reinterpret_cast<Packed<T, kVector>*>(group_destination + m * g.dst_c + d) = out;
          }
          __syncwarp();
          wmma::fill_fragment(acc[i][j], 0.0f);
        }
      }
      compute_chunk = 0;
      ++compute_tile;
    }
  }
  wait_copies<0>();
#endif
}

// ---------------------------------------------------------------- host side

template <typename Index>
MmaGeometry<Index> geometry_of(const DirectConvShape& s, DirectDirection direction, const MmaPlan& plan,
                               int64_t tiles_per_block) {
  const bool backward = direction == DirectDirection::kBackwardData;
  MmaGeometry<Index> g;
  g.pixels = static_cast<Index>(plan.pixels);
  g.dst_h = static_cast<Index>(backward ? s.h : s.p);
  g.dst_w = static_cast<Index>(backward ? s.w : s.q);
  g.src_h = static_cast<Index>(backward ? s.p : s.h);
  g.src_w = static_cast<Index>(backward ? s.q : s.w);
  g.src_c = static_cast<Index>(backward ? s.k : s.c);
  g.dst_c = static_cast<Index>(backward ? s.c : s.k);
  g.filter_w = static_cast<Index>(s.s);
  g.sh = static_cast<Index>(s.stride_h);
  g.sw = static_cast<Index>(s.stride_w);
  g.ph = static_cast<Index>(s.pad_h);
  g.pw = static_cast<Index>(s.pad_w);
  g.dh = static_cast<Index>(s.dilation_h);
  g.dw = static_cast<Index>(s.dilation_w);
  g.ws0 = static_cast<Index>(s.weight_strides[0]);
  g.ws1 = static_cast<Index>(s.weight_strides[1]);
  g.ws2 = static_cast<Index>(s.weight_strides[2]);
  g.ws3 = static_cast<Index>(s.weight_strides[3]);
  g.tiles_per_group = static_cast<Index>(plan.tiles_per_group);
  g.tiles_per_block = static_cast<Index>(tiles_per_block);
  g.cpg_src = plan.cpg_src;
  g.cpg_dst = plan.cpg_dst;
  g.taps = plan.taps;
  g.taps_per_chunk = plan.taps_per_chunk;
  g.chunk_width = plan.chunk_width;
  g.chunks = plan.chunks;
  g.weight_ld = plan.weight_ld;
  g.a_ld = plan.a_ld;
  g.weight_vectors = false;
  return g;
}

struct LaunchContext {
  const DirectConvShape* shape;
  DirectDirection direction;
  const MmaPlan* plan;
  int sm_count;
  int device;
  DeviceTraits traits;
  const void* source;
  const void* weight;
  void* destination;
  cudaStream_t stream;
};

template <typename T, typename Index, bool Backward, int kColumnFragments>
cudaError_t launch_kernel(const LaunchContext& c) {
  constexpr auto kernel = grouped_mma_nhwc<T, Index, Backward, kColumnFragments>;
  const MmaPlan& plan = *c.plan;
  if (plan.shared_bytes > kDefaultSharedLimit) {
    const cudaError_t allowed = allow_all_shared<kernel>(c.device, c.traits);
    if (allowed != cudaSuccess) return allowed;
  }
  // Blocks: as many as fit on the GPU at once and no more, so that no partial
  // second wave doubles the time (blocks of a group have equal work), each
  // taking a contiguous range of tiles: W is staged once for all of them, and
  // a tile's upper halo rows are the previous tile's, still in L1.
  int resident = resident_blocks(kernel, kThreads, plan.shared_bytes);
  if (resident < 1) resident = blocks_fitting_shared(c.traits, plan.shared_bytes, kMaxBlocksPerSm);
  resident = std::min(resident, kMaxBlocksPerSm);
  const int64_t wanted = int64_t{std::max(1, c.sm_count)} * resident;
  const int64_t groups = c.shape->groups;
  int64_t blocks_per_group = std::clamp<int64_t>(wanted / groups, 1, plan.tiles_per_group);
  const int64_t tiles_per_block = (plan.tiles_per_group + blocks_per_group - 1) / blocks_per_group;
  blocks_per_group = (plan.tiles_per_group + tiles_per_block - 1) / tiles_per_block;
  MmaGeometry<Index> g = geometry_of<Index>(*c.shape, c.direction, plan, tiles_per_block);
  // Vectors need dim 1 contiguous, and every other step (of a dimension longer
  // than 1) and the base on 16 bytes.
  const int64_t* ws = c.shape->weight_strides;
  g.weight_vectors = ws[1] == 1 && ws[0] % kVector == 0 && (c.shape->r == 1 || ws[2] % kVector == 0) &&
                     (c.shape->s == 1 || ws[3] % kVector == 0) &&
                     reinterpret_cast<uintptr_t>(c.weight) % (kVector * 2) == 0;
  const dim3 grid(static_cast<unsigned>(blocks_per_group), static_cast<unsigned>(groups));
  kernel<<<grid, kThreads, plan.shared_bytes, c.stream>>>(g, static_cast<const T*>(c.source),
                                                          static_cast<const T*>(c.weight),
                                                          static_cast<T*>(c.destination));
  return cudaGetLastError();
}

template <typename T, typename Index, bool Backward>
cudaError_t launch_columns(const LaunchContext& c) {
  switch (c.plan->column_fragments) {
    case 1: return launch_kernel<T, Index, Backward, 1>(c);
    case 2: return launch_kernel<T, Index, Backward, 2>(c);
    case 3: return launch_kernel<T, Index, Backward, 3>(c);
    case 4: return launch_kernel<T, Index, Backward, 4>(c);
  }
  return cudaErrorInvalidValue;
}

template <typename T, typename Index>
cudaError_t launch_direction(const LaunchContext& c) {
  if (c.direction == DirectDirection::kBackwardData) return launch_columns<T, Index, true>(c);
  return launch_columns<T, Index, false>(c);
}

template <typename T>
cudaError_t launch_index(const LaunchContext& c, bool wide_index) {
  if (wide_index) return launch_direction<T, int64_t>(c);
  return launch_direction<T, int>(c);
}

}  // namespace

bool grouped_mma_applies(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool aligned) {
  if (!aligned) return false;
  const MmaPlan plan = plan_of(shape, dtype, direction);
  if (!plan.fits) return false;
  int device = 0;
  DeviceTraits traits;
  if (!current_device(&device, &traits)) return false;
  // bf16 wmma and cp.async need compute capability 8.0.
  return traits.major >= 8 && plan.shared_bytes <= static_cast<size_t>(traits.shared_optin);
}

int launch_grouped_mma(const DirectConvShape& shape, DirectDType dtype, DirectDirection direction, bool wide_index,
                       int sm_count, const void* source, const void* weight, void* destination,
                       CUstream_st* stream) {
  const MmaPlan plan = plan_of(shape, dtype, direction);
  LaunchContext c{};
  if (!plan.fits || !current_device(&c.device, &c.traits) || c.traits.major < 8 ||
      plan.shared_bytes > static_cast<size_t>(c.traits.shared_optin))
    return static_cast<int>(cudaErrorInvalidValue);
  c.shape = &shape;
  c.direction = direction;
  c.plan = &plan;
  c.sm_count = sm_count;
  c.source = source;
  c.weight = weight;
  c.destination = destination;
  c.stream = stream;
  if (dtype == DirectDType::kHalf) return static_cast<int>(launch_index<__half>(c, wide_index));
  return static_cast<int>(launch_index<__nv_bfloat16>(c, wide_index));
}

}  // namespace torch_cudnn_algo::kernels
