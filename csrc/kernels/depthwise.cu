// Depthwise convolution kernels, NHWC (see depthwise.h). Compiled by nvcc
// alone, like direct_conv.cu: no torch header.
//
// Forward and backward data are one gather kernel (dw_gather): a thread owns
// VEC channels (one vector) of a strip of kStrip consecutive destination
// columns of one destination row. Per filter row it loads that row's taps of
// its channels from shared memory into registers (fp32), then walks the source
// columns the strip reads once each, left to right, adding every loaded vector
// into each destination column it feeds: a source vector is loaded once per
// strip and filter row instead of once per tap. Which (column, tap) pairs meet
// at which source column is a compile-time table for the common filter widths
// (3, 5, 7; stride 1 or 2; dilation 1), so the window is unrolled into
// registers; every other shape runs the same kernel with runtime taps.
//   forward:       y[n, p, j] += x[n, p*sh-ph+r*dh, j*sw-pw+s*dw] * w[r, s]
//   backward data: dx[n, h, j] += dy[n, (h+ph-r*dh)/sh, (j+pw-s*dw)/sw] * w[r, s]
//                  over the taps whose stride divides: a gather, every dx
//                  element written exactly once, no atomics, no zero fill.
//                  Strips start where (column + pw) is a multiple of the
//                  stride, so which taps divide is known at compile time.
//
// Backward filter (dw_filter): a thread owns VEC channels and a group of
// filter rows (all taps of them) in registers, and sums x * dy over the strips
// of a contiguous slice of the (n, p, strip) items; the block adds its
// threads' sums in shared memory in a fixed order and writes one fp32 partial
// per slice; sum_slices (slice_sum.cuh) adds the slices in order
// (deterministic, no atomics).
//
// The kernels and their launch plans live in depthwise_kernels.cuh, templated
// on the choices that decide their speed (strip width, rows per thread, taps in
// registers or shared memory, tap staging, block shape, vector width, slices);
// depthwise_choices.cuh holds the configuration in use per direction and
// filter width, and this file dispatches to it. At stride 1 in fp16 and bf16
// (channels in 8s, compute capability 8.0 or newer), the large 7x7 planes in
// all three directions run on tensor cores instead, where they are faster
// (depthwise_mma.cuh, depthwise_mma_filter.cuh: each image row a product with
// a banded matrix; mma_gather_faster, mma_filter_faster); other small planes
// at stride 1 run the plane gather (depthwise_plane.cuh: the source band
// staged in shared memory), where the sweep found it faster than the strip
// gather. The check program's sweep (devtools/kernels/run sweep,
// devtools/kernels/depthwise_sweep.cuh) times the alternatives against it; the
// winners go into the choices.
//
// Index arithmetic: 32-bit within an image row (depthwise_applies refuses a
// row of 2^31 elements or more), 64-bit for the row bases, so one kernel
// serves tensors of any size.
#include "kernels/depthwise_choices.cuh"
#include "kernels/device_traits.cuh"

namespace torch_cudnn_algo::kernels {
namespace {

std::atomic<bool> g_enabled{true};
std::atomic<bool> g_mma_enabled{true};

// Backward-filter slices: from the chosen configuration (alignment aside, so
// the workspace is known before the pointers) and the blocks an SM holds of it.
template <typename T>
int64_t filter_slices(const DirectConvShape& s, int sm_count) {
#define TCA_DW_SLICES(KS, SW)                                                                          \
  return filter_slices_for<T, KS, SW, FilterChoice<KS, SW, sizeof(T)>::kTune>(s, sm_count,              \
                                                                             FilterChoice<KS, SW, sizeof(T)>::kLaunch)
  const bool sw1 = s.stride_w == 1;
  switch (window_width(s)) {
    case 3: if (sw1) TCA_DW_SLICES(3, 1); else TCA_DW_SLICES(3, 2);
    case 5: if (sw1) TCA_DW_SLICES(5, 1); else TCA_DW_SLICES(5, 2);
    case 7: if (sw1) TCA_DW_SLICES(7, 1); else TCA_DW_SLICES(7, 2);
  }
  TCA_DW_SLICES(0, 0);
#undef TCA_DW_SLICES
}

// Slices of partial sums either filter kernel may write: the workspace is sized
// before the pointers, whose alignment decides between them.
int64_t filter_slices(const DirectConvShape& s, DirectDType dtype, int sm_count) {
  if (dtype == DirectDType::kFloat) return filter_slices<float>(s, sm_count);
  MmaFilterGeom g;
  const int64_t mma = mma_filter_geom(s, sm_count, g) ? mma_filter_slices(g) : 0;
  const int64_t cuda_cores =
      dtype == DirectDType::kHalf ? filter_slices<__half>(s, sm_count) : filter_slices<__nv_bfloat16>(s, sm_count);
  return std::max(cuda_cores, mma);
}

// The tensor-core kernels run on compute capability 8.0 or newer, with 16-byte aligned operands.
bool mma_allowed(std::initializer_list<const void*> pointers) {
  if (!g_mma_enabled.load(std::memory_order_relaxed)) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  int device = 0;
  DeviceTraits traits;
  return current_device(&device, &traits) && traits.major >= 8;
}

// Runs the tensor-core filter gradient where it applies (result: its launch's
// error); false: the CUDA-core filter kernel runs.
template <typename T>
bool mma_filter_choice(const DirectConvShape& s, int sm_count, const T* x, const T* dy, T* dweight, void* workspace,
                       cudaStream_t stream, cudaError_t& result) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    MmaFilterGeom g;
    if (!mma_filter_geom(s, sm_count, g) || !mma_allowed({x, dy})) return false;
    result = launch_mma_filter<T>(s, g, x, dy, dweight, workspace, stream);
    return true;
  }
}

// The gather kernel of the chosen configuration for the shape and its pointers.
template <typename T>
GatherPick<T> gather_choice(const DirectConvShape& s, bool backward, const T* src, const T* dst) {
  constexpr int kFull = 16 / static_cast<int>(sizeof(T));
  const int vec = vector_for(s.c, kFull, sizeof(T), {src, dst});
  const int ks = vec == kFull ? window_width(s) : 0;
  const int sw = static_cast<int>(s.stride_w);
#define TCA_DW_GATHER(VEC, BACKWARD, KS, SW) \
  return gather_pick<T, VEC, BACKWARD, KS, SW, GatherChoice<BACKWARD, KS, SW>::kTune>(GatherChoice<BACKWARD, KS, SW>::kLaunch)
#define TCA_DW_GATHER_WIDTHS(BACKWARD, SW)              \
  switch (ks) {                                         \
    case 3: TCA_DW_GATHER(kFull, BACKWARD, 3, SW);      \
    case 5: TCA_DW_GATHER(kFull, BACKWARD, 5, SW);      \
    case 7: TCA_DW_GATHER(kFull, BACKWARD, 7, SW);      \
  }
  if (ks) {
    if (backward) {
      if (sw == 1) TCA_DW_GATHER_WIDTHS(true, 1) else TCA_DW_GATHER_WIDTHS(true, 2)
    } else {
      if (sw == 1) TCA_DW_GATHER_WIDTHS(false, 1) else TCA_DW_GATHER_WIDTHS(false, 2)
    }
  }
  if (backward) {
    if (vec == kFull) TCA_DW_GATHER(kFull, true, 0, 0);
    if (vec == 2) TCA_DW_GATHER(2, true, 0, 0);
    TCA_DW_GATHER(1, true, 0, 0);
  }
  if (vec == kFull) TCA_DW_GATHER(kFull, false, 0, 0);
  if (vec == 2) TCA_DW_GATHER(2, false, 0, 0);
  TCA_DW_GATHER(1, false, 0, 0);
#undef TCA_DW_GATHER_WIDTHS
#undef TCA_DW_GATHER
}

// Runs the tensor-core gather where it applies to the shape, the pointers and
// the GPU (result: its launch's error); false: the other gathers run.
template <typename T>
bool mma_choice(const DirectConvShape& s, bool backward, const T* src, const T* weight, T* dst, cudaStream_t stream,
                cudaError_t& result) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    MmaGeom g;
    if (!mma_geom(s, backward, g) || !mma_allowed({src, dst})) return false;
    result = launch_mma<T>(g, src, weight, dst, stream);
    return true;
  }
}

// Runs the plane gather where it is the choice for the shape and applies to its
// window and pointers (result: its launch's error); false: the strip gather runs.
template <typename T>
bool plane_choice(const DirectConvShape& s, bool backward, const T* src, const T* weight, T* dst, cudaStream_t stream,
                  cudaError_t& result) {
  const int strip = plane_strip_for(s, backward, sizeof(T));
  if (strip == 0 || (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) % 16 != 0) return false;
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
#define TCA_DW_PLANE(KS, STRIP)                                                                        \
  {                                                                                                   \
    PlaneGeom g;                                                                                      \
    if (!plane_geom<T, KS, 1, STRIP>(s, backward, kPlaneLaunch, g)) return false;                     \
    result = launch_plane<T, KS, 1, STRIP>(g, src, weight, dst, stream);                               \
    return true;                                                                                      \
  }
#define TCA_DW_PLANE_STRIPS(KS) \
  if (strip == 7) TCA_DW_PLANE(KS, 7) else TCA_DW_PLANE(KS, 4)
    switch (s.s) {
      case 3: TCA_DW_PLANE_STRIPS(3)
      case 5: TCA_DW_PLANE_STRIPS(5)
      case 7: TCA_DW_PLANE_STRIPS(7)
    }
#undef TCA_DW_PLANE_STRIPS
#undef TCA_DW_PLANE
    return false;
  }
}

// The filter kernel of the chosen configuration for the shape and its pointers.
template <typename T>
FilterPick<T> filter_choice(const DirectConvShape& s, const T* x, const T* dy) {
  constexpr int kBytes = sizeof(T);
  const int width = window_width(s);
  const bool sw1 = s.stride_w == 1;
#define TCA_DW_VEC(KS) (sw1 ? filter_vec_of(FilterChoice<KS, 1, kBytes>::kTune) \
                            : filter_vec_of(FilterChoice<KS, 2, kBytes>::kTune))
  const int preferred = width == 3 ? TCA_DW_VEC(3) : width == 5 ? TCA_DW_VEC(5) : width == 7 ? TCA_DW_VEC(7)
                                                                                   : kGenericFilterVec;
#undef TCA_DW_VEC
  const int vec = vector_for(s.c, preferred, sizeof(T), {x, dy});
  const int ks = vec == preferred ? width : 0;
#define TCA_DW_FILTER(KS, SW, TUNE) return filter_pick<T, KS, SW, TUNE>(FilterChoice<KS, SW, kBytes>::kLaunch)
#define TCA_DW_FILTER_CHOSEN(KS, SW) TCA_DW_FILTER(KS, SW, (FilterChoice<KS, SW, kBytes>::kTune))
  if (ks == 3) {
    if (sw1) TCA_DW_FILTER_CHOSEN(3, 1); else TCA_DW_FILTER_CHOSEN(3, 2);
  } else if (ks == 5) {
    if (sw1) TCA_DW_FILTER_CHOSEN(5, 1); else TCA_DW_FILTER_CHOSEN(5, 2);
  } else if (ks == 7) {
    if (sw1) TCA_DW_FILTER_CHOSEN(7, 1); else TCA_DW_FILTER_CHOSEN(7, 2);
  } else if (std::min(vec, kGenericFilterVec) == 2) {
    TCA_DW_FILTER_CHOSEN(0, 0);
  }
  TCA_DW_FILTER(0, 0, filter_tune(1, 0));
#undef TCA_DW_FILTER_CHOSEN
#undef TCA_DW_FILTER
}

template <typename T>
cudaError_t launch_typed(const DirectConvShape& s, DirectDirection direction, int sm_count, const void* a,
                         const void* b, void* out, void* workspace, cudaStream_t stream) {
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  T* to = static_cast<T*>(out);
  cudaError_t chosen;
  if (direction == DirectDirection::kBackwardFilter) {
    if (mma_filter_choice<T>(s, sm_count, ta, tb, to, workspace, stream, chosen)) return chosen;
    return launch_filter_pick<T>(s, filter_slices<T>(s, sm_count), filter_choice<T>(s, ta, tb), ta, tb, to, workspace,
                                 stream);
  }
  const bool backward = direction == DirectDirection::kBackwardData;
  if (mma_choice<T>(s, backward, ta, tb, to, stream, chosen)) return chosen;
  if (plane_choice<T>(s, backward, ta, tb, to, stream, chosen)) return chosen;
  return launch_gather_pick<T>(s, backward, sm_count, gather_choice<T>(s, backward, ta, to), ta, tb, to, stream);
}

}  // namespace

bool depthwise_applies(const DirectConvShape& s, DirectDType dtype, DirectDirection direction) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  if (dtype == DirectDType::kDouble || !s.channels_last) return false;
  if (s.groups != s.c || s.k != s.c) return false;
  for (const int64_t extent : {s.n, s.c, s.h, s.w, s.p, s.q, s.r, s.s, s.stride_h, s.stride_w, s.dilation_h,
                               s.dilation_w})
    if (extent < 1 || extent >= kMaxCount) return false;
  if (s.pad_h < 0 || s.pad_w < 0 || s.pad_h >= kMaxCount || s.pad_w >= kMaxCount) return false;
  // Grid limits: channel tiles along y, tap groups along z.
  if (s.c > 65535) return false;
  // 32-bit arithmetic within a row, over the items and over the weight.
  if (s.w * s.c >= kMaxCount || s.q * s.c >= kMaxCount) return false;
  if (s.n * s.h * s.w >= kMaxCount || s.n * s.p * s.q >= kMaxCount) return false;
  if (s.r * s.s * s.c >= kMaxCount) return false;
  // The gather stages its tile's taps in shared memory (fp32): one channel's at least.
  if (static_cast<size_t>(s.r * s.s) * sizeof(float) > kSharedBudget) return false;
  (void)direction;
  return true;
}

size_t depthwise_workspace_bytes(const DirectConvShape& s, DirectDType dtype, DirectDirection direction,
                                 int sm_count) {
  if (direction != DirectDirection::kBackwardFilter) return 0;
  return static_cast<size_t>(filter_slices(s, dtype, sm_count) * s.r * s.s * s.c) * sizeof(float);
}

int launch_depthwise(const DirectConvShape& s, DirectDType dtype, DirectDirection direction, int sm_count,
                     const void* a, const void* b, void* out, void* workspace, CUstream_st* stream) {
  switch (dtype) {
    case DirectDType::kHalf: return launch_typed<__half>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kBFloat16:
      return launch_typed<__nv_bfloat16>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kFloat: return launch_typed<float>(s, direction, sm_count, a, b, out, workspace, stream);
    case DirectDType::kDouble: break;
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

void set_depthwise_enabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

void set_depthwise_mma_enabled(bool enabled) { g_mma_enabled.store(enabled, std::memory_order_relaxed); }

}  // namespace torch_cudnn_algo::kernels
