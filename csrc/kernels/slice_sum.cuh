// The finish of our filter-gradient kernels: their blocks each write the sums
// of their share of the pixels as one slice of partials
// (partial[slice * elements + e]), and sum_slices adds every weight element's
// slices in a fixed order (deterministic, no atomics) and hands the total to
// the caller's store, which converts it and writes it at the weight's strides.
//
// A block takes kSliceSumElements consecutive elements (each lane's read is a
// 32-byte sector) with kSliceSumLanes threads each: lane l adds slices l,
// l + lanes, ... in order, then lane 0 adds the lane sums in order. A filter
// gradient has hundreds to a few thousand elements but hundreds of slices;
// one thread an element left this sum latency-bound (24 us on an H200 for
// EfficientNet's depthwise 3x3 filter, a quarter of the whole gradient). With
// few slices, one thread an element is what fits (sum_few_slices).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace torch_cudnn_algo::kernels {
namespace {  // internal linkage: each including translation unit has its own copy

constexpr int kSliceSumElements = 8;
constexpr int kSliceSumLanes = 32;
constexpr int kSliceSumThreads = kSliceSumElements * kSliceSumLanes;

template <typename Acc, typename Store>
__global__ void __launch_bounds__(kSliceSumThreads)
    sum_slices(const Acc* __restrict__ partial, int64_t slices, int64_t elements, Store store) {
  extern __shared__ __align__(16) unsigned char slice_sum_shared[];
  Acc* const lane_sums = reinterpret_cast<Acc*>(slice_sum_shared);  // [lane][element of the block]
  const int element = threadIdx.x % kSliceSumElements, lane = threadIdx.x / kSliceSumElements;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kSliceSumElements + element;
  Acc sum = 0;
  if (e < elements)
    for (int64_t slice = lane; slice < slices; slice += kSliceSumLanes) sum += partial[slice * elements + e];
  lane_sums[lane * kSliceSumElements + element] = sum;
  __syncthreads();
  if (lane == 0 && e < elements) {
    Acc total = 0;
    for (int l = 0; l < kSliceSumLanes; ++l) total += lane_sums[l * kSliceSumElements + element];
    store(e, total);
  }
}

// Few slices (a filter gradient whose grid spreads over its channels rather
// than its pixels, as the depthwise ones on 7x7 and 14x14 planes): one thread
// an element adds them in order. The lanes of sum_slices would idle there, and
// its 3,600 blocks for EfficientNet's 1152-channel 5x5 layer took 6-7 us of
// the gradient's 28-31 us (H100).
constexpr int64_t kFewSlices = 4;
constexpr int kFewSlicesThreads = 256;

template <typename Acc, typename Store>
__global__ void __launch_bounds__(kFewSlicesThreads)
    sum_few_slices(const Acc* __restrict__ partial, int64_t slices, int64_t elements, Store store) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kFewSlicesThreads + threadIdx.x;
  if (e >= elements) return;
  Acc total = partial[e];
  for (int64_t slice = 1; slice < slices; ++slice) total += partial[slice * elements + e];
  store(e, total);
}

// Adds `slices` slices of `elements` partials each; store(e, total) writes element e.
template <typename Acc, typename Store>
cudaError_t launch_sum_slices(const Acc* partial, int64_t slices, int64_t elements, Store store, cudaStream_t stream) {
  if (slices < 1) return cudaErrorInvalidValue;
  if (slices <= kFewSlices) {
    const int64_t blocks = (elements + kFewSlicesThreads - 1) / kFewSlicesThreads;
    if (blocks < 1 || blocks > INT32_MAX) return cudaErrorInvalidValue;
    sum_few_slices<Acc, Store><<<dim3(static_cast<unsigned>(blocks)), dim3(kFewSlicesThreads), 0, stream>>>(
        partial, slices, elements, store);
    return cudaGetLastError();
  }
  const int64_t blocks = (elements + kSliceSumElements - 1) / kSliceSumElements;
  if (blocks < 1 || blocks > INT32_MAX) return cudaErrorInvalidValue;
  sum_slices<Acc, Store><<<dim3(static_cast<unsigned>(blocks)), dim3(kSliceSumThreads),
                           kSliceSumThreads * sizeof(Acc), stream>>>(partial, slices, elements, store);
  return cudaGetLastError();
}

}  // namespace
}  // namespace torch_cudnn_algo::kernels
