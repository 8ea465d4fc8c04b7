// The depthwise kernels' variant sweep: alternative configurations of
// depthwise_kernels.cuh for the zoo's layers, which the check program
// (devtools/kernels/run sweep) verifies and times so that the
// winners go into depthwise.cu's Choice tables. Never part of the extension:
// compiled only with TORCH_CUDNN_ALGO_DW_SWEEP defined, once per part
// (DW_SWEEP_PART = 0 .. kSweepParts - 1, one per dtype, direction and
// compile-time window, so the parts compile in parallel; -1: every part, for
// the host emulation), e.g.
//   nvcc -x cu -DTORCH_CUDNN_ALGO_DW_SWEEP -DDW_SWEEP_PART=3 -c devtools/kernels/depthwise_sweep.cuh ...
// The check program itself includes it with DW_SWEEP_DECLARATIONS_ONLY (the
// registry, no variants).
#pragma once

#ifndef TORCH_CUDNN_ALGO_DW_SWEEP
#error "depthwise_sweep.cuh is the check program's variant sweep only (define TORCH_CUDNN_ALGO_DW_SWEEP)"
#endif
#ifndef DW_SWEEP_PART
#define DW_SWEEP_PART -1
#endif

#include "kernels/depthwise_choices.cuh"
#include "kernels/depthwise_plane.cuh"

#include <utility>
#include <vector>

namespace torch_cudnn_algo::kernels {

// One configuration of one kernel for one dtype, direction and window.
struct DwVariant {
  const char* name;
  DirectDType dtype;
  DirectDirection direction;
  int ks, sw;
  int instantiation;  // distinct kernel instantiations are numbered per part; runtime-only variants share one
  // Workspace bytes (the filter's partials), and the launch: -1 where the shape
  // or its pointers do not fit the variant, else the CUDA error code.
  size_t (*workspace)(const DirectConvShape& s, int sm_count);
  int (*launch)(const DirectConvShape& s, int sm_count, const void* a, const void* b, void* out, void* ws,
                cudaStream_t stream);
};

// Every part's variants, registered at static initialisation.
inline std::vector<DwVariant>& dw_sweep_variants() {
  static std::vector<DwVariant> variants;
  return variants;
}

// The sweep's parts: dtype, direction, window.
struct DwSweepPart {
  DirectDType dtype;
  DirectDirection direction;
  int ks, sw;
};
constexpr DwSweepPart kSweepParts[] = {
    {DirectDType::kHalf, DirectDirection::kForward, 5, 2},        {DirectDType::kHalf, DirectDirection::kForward, 3, 2},
    {DirectDType::kHalf, DirectDirection::kForward, 3, 1},        {DirectDType::kHalf, DirectDirection::kForward, 5, 1},
    {DirectDType::kHalf, DirectDirection::kForward, 7, 1},        {DirectDType::kHalf, DirectDirection::kBackwardData, 5, 2},
    {DirectDType::kHalf, DirectDirection::kBackwardData, 3, 2},   {DirectDType::kHalf, DirectDirection::kBackwardData, 3, 1},
    {DirectDType::kHalf, DirectDirection::kBackwardData, 5, 1},   {DirectDType::kHalf, DirectDirection::kBackwardData, 7, 1},
    {DirectDType::kHalf, DirectDirection::kBackwardFilter, 5, 2}, {DirectDType::kHalf, DirectDirection::kBackwardFilter, 3, 2},
    {DirectDType::kHalf, DirectDirection::kBackwardFilter, 3, 1}, {DirectDType::kHalf, DirectDirection::kBackwardFilter, 5, 1},
    {DirectDType::kHalf, DirectDirection::kBackwardFilter, 7, 1}, {DirectDType::kBFloat16, DirectDirection::kForward, 7, 1},
    {DirectDType::kBFloat16, DirectDirection::kBackwardData, 7, 1},
    {DirectDType::kBFloat16, DirectDirection::kBackwardFilter, 7, 1},
};
constexpr int kSweepPartCount = sizeof(kSweepParts) / sizeof(kSweepParts[0]);

#ifndef DW_SWEEP_DECLARATIONS_ONLY

namespace {

template <typename T> constexpr DirectDType sweep_dtype();
template <> constexpr DirectDType sweep_dtype<__half>() { return DirectDType::kHalf; }
template <> constexpr DirectDType sweep_dtype<__nv_bfloat16>() { return DirectDType::kBFloat16; }

// VEC: channels a thread holds.
template <typename T, bool Backward, int KS, int SW, int TUNE, int MAX_TX, int BLOCKS_PER_SM, int VEC>
int sweep_gather(const DirectConvShape& s, int sm_count, const void* a, const void* b, void* out, void*,
                 cudaStream_t stream) {
  const T* src = static_cast<const T*>(a);
  T* dst = static_cast<T*>(out);
  if (window_width(s) != KS || s.stride_w != SW || vector_for(s.c, VEC, sizeof(T), {src, dst}) != VEC) return -1;
  if (gather_unroll_rows(TUNE) && s.r != KS) return -1;
  const GatherPick<T> pick = gather_pick<T, VEC, Backward, KS, SW, TUNE>(GatherLaunch{MAX_TX, BLOCKS_PER_SM});
  return static_cast<int>(launch_gather_pick<T>(s, Backward, sm_count, pick, src, static_cast<const T*>(b), dst, stream));
}
inline size_t sweep_no_workspace(const DirectConvShape&, int) { return 0; }

// The extension's dispatch (depthwise.cu): the configuration in use, whichever kernel it picks.
template <typename T, bool Backward>
int sweep_dispatch(const DirectConvShape& s, int sm_count, const void* a, const void* b, void* out, void* ws,
                   cudaStream_t stream) {
  const DirectDirection dir = Backward ? DirectDirection::kBackwardData : DirectDirection::kForward;
  if (!depthwise_applies(s, sweep_dtype<T>(), dir)) return -1;
  return launch_depthwise(s, sweep_dtype<T>(), dir, sm_count, a, b, out, ws, stream);
}

// The plane gather (depthwise_plane.cuh): STRIP destination columns a thread,
// bands of at most MAX_BAND destination rows a block.
template <typename T, bool Backward, int KS, int SW, int STRIP, int MAX_BAND, int MAX_IMAGES>
int sweep_plane(const DirectConvShape& s, int, const void* a, const void* b, void* out, void*, cudaStream_t stream) {
  if constexpr (Backward && SW != 1) {
    return -1;
  } else {
    PlaneGeom g;
    const PlaneLaunch opt{MAX_BAND, MAX_IMAGES};
    if (!plane_geom<T, KS, SW, STRIP>(s, Backward, opt, g)) return -1;
    if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(out)) % 16 != 0) return -1;
    return static_cast<int>(launch_plane<T, KS, SW, STRIP>(g, static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(out), stream));
  }
}
template <typename T, int KS, int SW, int TUNE, int MAX_TX, int SLICES_PER_SM>
size_t sweep_filter_workspace(const DirectConvShape& s, int sm_count) {
  if (filter_direct(TUNE)) return 0;
  const int64_t slices = filter_slices_for<T, KS, SW, TUNE>(s, sm_count, FilterLaunch{MAX_TX, SLICES_PER_SM});
  return static_cast<size_t>(slices * s.r * s.s * s.c) * sizeof(float);
}
template <typename T, int KS, int SW, int TUNE, int MAX_TX, int SLICES_PER_SM>
int sweep_filter(const DirectConvShape& s, int sm_count, const void* a, const void* b, void* out, void* ws,
                 cudaStream_t stream) {
  const T* x = static_cast<const T*>(a);
  const T* dy = static_cast<const T*>(b);
  constexpr int kVec = filter_vec_of(TUNE);
  if (window_width(s) != KS || s.stride_w != SW || vector_for(s.c, kVec, sizeof(T), {x, dy}) != kVec) return -1;
  if (filter_out_rows(TUNE) > 1 && (s.stride_h != SW || s.dilation_h != 1 || s.r != KS)) return -1;
  const FilterLaunch opt{MAX_TX, SLICES_PER_SM};
  const int64_t slices = filter_slices_for<T, KS, SW, TUNE>(s, sm_count, opt);
  return static_cast<int>(launch_filter_pick<T>(s, slices, filter_pick<T, KS, SW, TUNE>(opt), x, dy,
                                                static_cast<T*>(out), ws, stream));
}

// The gather's variants (forward and backward data). The configuration in use
// first (the extension's dispatch: the baseline every variant is timed
// against), then the strip gather's configuration in use (depthwise_choices.cuh);
// "stage" reads the taps coalesced, which every later one keeps; "txN": N
// channel vectors across a block; "vec/2", "vec/4": a thread holds 8 or 4
// bytes of channels instead of 16 (fewer registers a thread, so more warps an
// SM: ncu found the 3x3 forward latency-bound at 25% occupancy, limited by its
// 95 registers, on the H100); "minbN": registers capped so that N blocks fit an SM.
template <typename T, bool Backward, int KS, int SW>
void add_gather_variants(std::vector<DwVariant>& v) {
  const DirectDirection dir = Backward ? DirectDirection::kBackwardData : DirectDirection::kForward;
  int inst = 0;
#define TCA_DW_GV(NAME, VEC, TUNE, MAX_TX, BPS, NEW)                                                  \
  v.push_back({NAME, sweep_dtype<T>(), dir, KS, SW, (inst += NEW), sweep_no_workspace,                \
               sweep_gather<T, Backward, KS, SW, TUNE, MAX_TX, BPS, VEC>})
#define TCA_DW_G(NAME, TUNE, MAX_TX, BPS, NEW) TCA_DW_GV(NAME, kFullVec, TUNE, MAX_TX, BPS, NEW)
  constexpr int kFullVec = 16 / static_cast<int>(sizeof(T));
  constexpr int kStage = gather_tune(4, 1, false, true);
  using InUse = GatherChoice<Backward, KS, SW>;
  constexpr int kInUse = InUse::kTune, kInUseTx = InUse::kLaunch.max_tx, kInUseBps = InUse::kLaunch.blocks_per_sm;
  v.push_back({"in use", sweep_dtype<T>(), dir, KS, SW, ++inst, sweep_no_workspace, sweep_dispatch<T, Backward>});
  TCA_DW_G("strip in use", kInUse, kInUseTx, kInUseBps, 1);
#define TCA_DW_PLANE(NAME, STRIP, BAND, IMAGES) \
  v.push_back({NAME, sweep_dtype<T>(), dir, KS, SW, ++inst, sweep_no_workspace, sweep_plane<T, Backward, KS, SW, STRIP, BAND, IMAGES>})
  TCA_DW_PLANE("plane S7 B7", 7, 7, 1);
  TCA_DW_PLANE("plane S7 B7 I2", 7, 7, 2);
  TCA_DW_PLANE("plane S7 B7 I4", 7, 7, 4);
  TCA_DW_PLANE("plane S7 B14", 7, 14, 1);
  TCA_DW_PLANE("plane S7 B14 I2", 7, 14, 2);
  TCA_DW_PLANE("plane S4 B7", 4, 7, 1);
  TCA_DW_PLANE("plane S4 B7 I2", 4, 7, 2);
  TCA_DW_PLANE("plane S4 B4 I4", 4, 4, 4);
#undef TCA_DW_PLANE
#ifndef DW_SWEEP_NEW_ONLY
  TCA_DW_G("default", gather_tune(), 32, 8, 1);
  TCA_DW_G("default tx8", gather_tune(), 8, 8, 0);
  TCA_DW_G("stage", kStage, 32, 8, 1);
  TCA_DW_G("stage S2", gather_tune(2, 1, false, true), 32, 8, 1);
  TCA_DW_G("stage S8", gather_tune(8, 1, false, true), 32, 8, 1);
  TCA_DW_G("stage R2", gather_tune(4, 2, false, true), 32, 8, 1);
  TCA_DW_G("stage tapsmem", gather_tune(4, 1, true, true), 32, 8, 1);
  TCA_DW_G("stage tapsmem R2", gather_tune(4, 2, true, true), 32, 8, 1);
  TCA_DW_G("stage nocap (minb1)", gather_tune(4, 1, false, true, 256, 1), 32, 8, 1);
  TCA_DW_G("stage tapsmem minb3", gather_tune(4, 1, true, true, 256, 3), 32, 8, 1);
  TCA_DW_G("stage T128 tx16", gather_tune(4, 1, false, true, 128), 16, 8, 1);
  TCA_DW_G("stage unroll", gather_tune(4, 1, false, true, 256, 0, true), 32, 8, 1);
  TCA_DW_G("stage unroll tapsmem", gather_tune(4, 1, true, true, 256, 0, true), 32, 8, 1);
  TCA_DW_G("stage unroll nocap", gather_tune(4, 1, false, true, 256, 1, true), 32, 8, 1);
  TCA_DW_G("stage tx8", kStage, 8, 8, 0);
  TCA_DW_G("stage bps16", kStage, 32, 16, 0);
  TCA_DW_G("stage grid=all", kStage, 32, 0, 0);
  TCA_DW_G("stage tx4", kStage, 4, 8, 0);
  TCA_DW_G("stage tx16", kStage, 16, 8, 0);
  TCA_DW_G("stage tx8 bps16", kStage, 8, 16, 0);
  TCA_DW_G("stage S2 tx8", gather_tune(2, 1, false, true), 8, 8, 0);
  TCA_DW_G("stage S8 tx8", gather_tune(8, 1, false, true), 8, 8, 0);
  TCA_DW_G("stage R2 tx8", gather_tune(4, 2, false, true), 8, 8, 0);
  TCA_DW_G("stage unroll tx8", gather_tune(4, 1, false, true, 256, 0, true), 8, 8, 0);
  TCA_DW_G("stage minb3", gather_tune(4, 1, false, true, 256, 3), 32, 8, 1);
  TCA_DW_G("stage minb4", gather_tune(4, 1, false, true, 256, 4), 32, 8, 1);
  constexpr int kHalfVec = 8 / static_cast<int>(sizeof(T)), kQuarterVec = 4 / static_cast<int>(sizeof(T));
  TCA_DW_GV("stage vec/2", kHalfVec, kStage, 32, 8, 1);
  TCA_DW_GV("stage vec/2 tx16", kHalfVec, kStage, 16, 8, 0);
  TCA_DW_GV("stage vec/2 bps16", kHalfVec, kStage, 32, 16, 0);
  TCA_DW_GV("stage vec/2 minb4", kHalfVec, gather_tune(4, 1, false, true, 256, 4), 32, 8, 1);
  TCA_DW_GV("stage vec/2 S8", kHalfVec, gather_tune(8, 1, false, true), 32, 8, 1);
  TCA_DW_GV("stage vec/2 unroll", kHalfVec, gather_tune(4, 1, false, true, 256, 0, true), 32, 8, 1);
  TCA_DW_GV("stage vec/4", kQuarterVec, kStage, 32, 8, 1);
#endif
#undef TCA_DW_G
#undef TCA_DW_GV
}

// The backward filter's variants, the configuration in use first. "wide":
// 16-byte loads for 3x3 in fp16 (vec 8), vec 4 with fewer rows for 5x5 and
// 7x7; "rows1": a row group per filter row (more blocks, fewer registers);
// "direct": one slice, the kernel writes dweight (one launch, no partials),
// small channel tiles for blocks; "previous": the choice before the sweep;
// "slices/SM N": more slices, now that the finish (slice_sum.cuh) adds them
// with many threads an element; "outN": N output rows an item, every filter
// row in the thread, so each input row is loaded once for all N (3x3 at stride
// 1: 4 instead of 5.5 loads an output pixel for N = 2).
template <typename T, int KS, int SW>
void add_filter_variants(std::vector<DwVariant>& v) {
  const DirectDirection dir = DirectDirection::kBackwardFilter;
  int inst = 0;
#define TCA_DW_F(NAME, TUNE, MAX_TX, SPS, NEW)                                                           \
  v.push_back({NAME, sweep_dtype<T>(), dir, KS, SW, (inst += NEW), sweep_filter_workspace<T, KS, SW, TUNE, MAX_TX, SPS>, \
               sweep_filter<T, KS, SW, TUNE, MAX_TX, SPS>})
  constexpr int kVec = KS == 3 ? 4 : 2, kRows = KS == 3 ? 3 : KS == 5 ? 5 : 4;
  constexpr int kWideVec = KS == 3 ? 8 : 4, kWideRows = KS == 3 ? 3 : KS == 5 ? 3 : 2;
  constexpr int kDefault = filter_tune(kVec, kRows);
  using InUse = FilterChoice<KS, SW, sizeof(T)>;
  constexpr int kInUse = InUse::kTune, kInUseTx = InUse::kLaunch.max_tx, kInUseSps = InUse::kLaunch.slices_per_sm;
  TCA_DW_F("in use", kInUse, kInUseTx, kInUseSps, 1);
#ifndef DW_SWEEP_NEW_ONLY
  TCA_DW_F("in use tx16", kInUse, 16, kInUseSps, 0);
  TCA_DW_F("in use slices/SM 2", kInUse, kInUseTx, 2, 0);
  TCA_DW_F("in use slices/SM 6", kInUse, kInUseTx, 6, 0);
  TCA_DW_F("in use slices/SM 12", kInUse, kInUseTx, 12, 0);
  TCA_DW_F("in use slices/SM 24", kInUse, kInUseTx, 24, 0);
  TCA_DW_F("previous", kDefault, 32, 3, 1);
  TCA_DW_F("slices/SM 1", kDefault, 32, 1, 0);
  TCA_DW_F("slices/SM 6", kDefault, 32, 6, 0);
  TCA_DW_F("slices/SM 12", kDefault, 32, 12, 0);
  TCA_DW_F("wide", filter_tune(kWideVec, kWideRows), 32, 3, 1);
  TCA_DW_F("wide slices/SM 6", filter_tune(kWideVec, kWideRows), 32, 6, 0);
  TCA_DW_F("rows1", filter_tune(kVec, 1), 32, 3, 1);
  TCA_DW_F("S2", filter_tune(kVec, kRows, 2), 32, 3, 1);
  TCA_DW_F("S8", filter_tune(kVec, kRows, 8), 32, 3, 1);
  TCA_DW_F("T128 tx16", filter_tune(kVec, kRows, 4, 128), 16, 3, 1);
  TCA_DW_F("direct rows1 tx8", filter_tune(kVec, 1, 4, 256, true), 8, 0, 1);
  TCA_DW_F("direct rows1 tx4", filter_tune(kVec, 1, 4, 256, true), 4, 0, 0);
  TCA_DW_F("direct wide rows1 tx8", filter_tune(kWideVec, 1, 4, 256, true), 8, 0, 1);
  if constexpr (KS == 7) TCA_DW_F("rows7 (x read once)", filter_tune(kVec, 7), 32, 3, 1);
  TCA_DW_F("wide rows1", filter_tune(kWideVec, 1), 32, 3, 1);
  if constexpr (KS <= 5) {
    TCA_DW_F("out2", filter_tune(kVec, KS, 4, 256, false, 2), 32, 3, 1);
    TCA_DW_F("out2 slices/SM 6", filter_tune(kVec, KS, 4, 256, false, 2), 32, 6, 0);
    TCA_DW_F("out2 T128 tx16", filter_tune(kVec, KS, 4, 128, false, 2), 16, 3, 1);
    TCA_DW_F("out4", filter_tune(kVec, KS, 4, 256, false, 4), 32, 3, 1);
  }
  TCA_DW_F("wide T128 tx16", filter_tune(kWideVec, kWideRows, 4, 128), 16, 3, 1);
#endif
#undef TCA_DW_F
}

template <typename T, DirectDirection D, int KS, int SW>
void add_variants(std::vector<DwVariant>& v) {
  if constexpr (D == DirectDirection::kBackwardFilter)
    add_filter_variants<T, KS, SW>(v);
  else
    add_gather_variants<T, D == DirectDirection::kBackwardData, KS, SW>(v);
}

template <int PART>
void add_part(std::vector<DwVariant>& v) {
  constexpr DwSweepPart p = kSweepParts[PART];
  if constexpr (p.dtype == DirectDType::kHalf)
    add_variants<__half, p.direction, p.ks, p.sw>(v);
  else
    add_variants<__nv_bfloat16, p.direction, p.ks, p.sw>(v);
}

template <int... PARTS>
void add_parts(std::vector<DwVariant>& v, std::integer_sequence<int, PARTS...>) {
  (add_part<PARTS>(v), ...);
}

struct SweepRegistration {
  SweepRegistration() {
    if constexpr (DW_SWEEP_PART < 0)
      add_parts(dw_sweep_variants(), std::make_integer_sequence<int, kSweepPartCount>{});
    else
      add_part<DW_SWEEP_PART>(dw_sweep_variants());
  }
};
const SweepRegistration sweep_registration;

}  // namespace
#endif  // DW_SWEEP_DECLARATIONS_ONLY
}  // namespace torch_cudnn_algo::kernels
