// The depthwise kernels' configuration in use: one per direction,
// compile-time filter width (KS 3, 5, 7; 0: runtime taps) and stride (SW 1 or
// 2), and for the backward filter the element bytes.
// depthwise.cu dispatches to these; the check program's sweep
// (depthwise_sweep.cuh, devtools/kernels/run sweep) times every variant
// against them.
#pragma once

#include "kernels/depthwise_kernels.cuh"
#include "kernels/depthwise_mma.cuh"
#include "kernels/depthwise_mma_filter.cuh"
#include "kernels/depthwise_plane.cuh"

namespace torch_cudnn_algo::kernels {
namespace {  // internal linkage, as the kernels': each including translation unit has its own copy

// To adopt a sweep winner, copy its line of depthwise_sweep.cuh
// (add_gather_variants / add_filter_variants: the tune and the launch options)
// into the specialisation of its direction, width and stride, then run the check program in full
// (devtools/kernels/run depthwise: fp32 takes the choice too). A winner
// is adopted only where it beat the configuration in use on every swept layer
// of its specialisation, in fp16 and bf16.
template <bool Backward, int KS, int SW>
struct GatherChoice {
  static constexpr int kTune = gather_tune();
  static constexpr GatherLaunch kLaunch{};
};
// The H100 sweeps' winners (the zoo's layers; 3x3 keeps the default, which no
// variant beat by more than the timing noise). "stage": the taps staged
// coalesced; "txN": N channel vectors across a block; "SN": strips of N
// output columns. Gains are over the configuration each replaced.
// Forward 5x5: "stage S2 tx8" 1.17-1.18x at stride 2 (EfficientNet), "stage
// tx4" 1.07x at stride 1 (MobileNetV3).
template <>
struct GatherChoice<false, 5, 1> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{4, 8};
};
template <>
struct GatherChoice<false, 5, 2> {
  static constexpr int kTune = gather_tune(2, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
// Forward 7x7: "stage tx4", 1.07-1.09x (ConvNeXt; stride 2 keeps "stage tx8").
template <>
struct GatherChoice<false, 7, 1> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{4, 8};
};
template <>
struct GatherChoice<false, 7, 2> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
// Backward data 5x5: "stage tx4" 1.10x at stride 1, "default tx8" 1.02-1.05x at stride 2.
template <>
struct GatherChoice<true, 5, 1> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{4, 8};
};
template <>
struct GatherChoice<true, 5, 2> {
  static constexpr int kTune = gather_tune();
  static constexpr GatherLaunch kLaunch{8, 8};
};
// Backward data 7x7: "stage S8 tx8", 1.16-1.17x at stride 1 (stride 2 keeps "stage S8").
template <>
struct GatherChoice<true, 7, 1> {
  static constexpr int kTune = gather_tune(8, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
template <>
struct GatherChoice<true, 7, 2> {
  static constexpr int kTune = gather_tune(8, 1, false, true);
  static constexpr GatherLaunch kLaunch{32, 8};
};

// Where the plane gather (depthwise_plane.cuh) runs instead of the strip
// gather: 2-byte types at stride 1, destination planes up to 14x14; the strip
// it takes, 0 for the strip gather. The H200 sweep (the zoo's layers, fp16),
// against the strip gather's configuration in use:
//   14x14 (3x3, 5x5, 7x7): "plane S7 B7 I2" 1.09-1.40x, forward and backward data;
//   7x7 (5x5): "plane S4 B7 I2" 1.03-1.10x backward data, but 0.99-1.06x forward;
//   28x28 (5x5): 0.61-0.74x, the staging then costs more than the gather it saves.
inline int plane_strip_for(const DirectConvShape& s, bool backward, int bytes) {
  if (bytes != 2 || s.stride_h != 1 || s.stride_w != 1) return 0;
  const int64_t h = backward ? s.h : s.p, w = backward ? s.w : s.q;
  if (h > 14 || w > 14) return 0;
  if (w > 7) return 7;
  return backward ? 4 : 0;
}
// Bands of up to 7 rows, two images a block.
constexpr PlaneLaunch kPlaneLaunch{7, 2};

// The backward filter, by width, stride and element bytes: the channels (vec)
// and filter rows a thread holds (its accumulators are rows * width * vec).
// The default: 4 channels with one row for 3x3 ("rows1"), 3 rows for 5x5, 2
// for 7x7 ("wide").
constexpr int filter_rows(int ks) { return ks == 3 ? 1 : ks == 5 ? 3 : 2; }
constexpr int kGenericFilterVec = 2;

template <int KS, int SW, int Bytes>
struct FilterChoice {
  static constexpr int kTune = filter_tune(4, filter_rows(KS));
  static constexpr FilterLaunch kLaunch{};
};
template <int SW, int Bytes>
struct FilterChoice<0, SW, Bytes> {
  static constexpr int kTune = filter_tune(kGenericFilterVec, 0);
  static constexpr FilterLaunch kLaunch{};
};
// 3x3 in 2-byte types: "wide T128 tx16" (16-byte loads of 8 channels, 3 rows,
// 128-thread blocks of 16 channel vectors), 1.18x at stride 1, 1.07x at
// stride 2. fp32 keeps 16-byte loads of 4 channels.
template <int SW>
struct FilterChoice<3, SW, 2> {
  static constexpr int kTune = filter_tune(8, 3, 4, 128);
  static constexpr FilterLaunch kLaunch{16, 3};
};
// 5x5: 16 channel vectors per block ("tx16") 1.16x at stride 1; 2 slices per
// SM ("slices/SM 2") 1.14-1.43x at stride 2.
template <int Bytes>
struct FilterChoice<5, 1, Bytes> {
  static constexpr int kTune = filter_tune(4, 3);
  static constexpr FilterLaunch kLaunch{16, 3};
};
template <int Bytes>
struct FilterChoice<5, 2, Bytes> {
  static constexpr int kTune = filter_tune(4, 3);
  static constexpr FilterLaunch kLaunch{32, 2};
};
// 7x7 at stride 1: 2 slices per SM, 1.04-1.06x.
template <int Bytes>
struct FilterChoice<7, 1, Bytes> {
  static constexpr int kTune = filter_tune(4, 2);
  static constexpr FilterLaunch kLaunch{32, 2};
};

}  // namespace
}  // namespace torch_cudnn_algo::kernels
