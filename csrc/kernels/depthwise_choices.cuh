// The depthwise kernels' configuration in use: one per direction and
// compile-time filter width (KS 3, 5, 7; 0: runtime taps), for every dtype and
// stride. depthwise.cu dispatches to these; the check program's sweep
// (depthwise_sweep.cuh, scripts/kernel-checks/run sweep) times every variant
// against them.
#pragma once

#include "kernels/depthwise_kernels.cuh"

namespace torch_cudnn_algo::kernels {
namespace {  // internal linkage, as the kernels': each including translation unit has its own copy

// To adopt a sweep winner, copy its line of depthwise_sweep.cuh
// (add_gather_variants / add_filter_variants: the tune and the launch options)
// into the specialisation of its direction and width (GatherChoice<false, 7>
// below is "stage tx8"), then run the check program in full
// (scripts/kernel-checks/run depthwise: fp32 takes the choice too).
template <bool Backward, int KS>
struct GatherChoice {
  static constexpr int kTune = gather_tune();
  static constexpr GatherLaunch kLaunch{};
};
// The sweep's winners on the H100 (fp16 and bf16, the zoo's layers; 3x3 keeps
// the default, which no variant beat). Each is faster than the default on
// every swept layer of its width: "stage tx8" (coalesced tap staging, 8
// channel vectors across a block) 1.26x / 1.96x the default's total time for
// the 5x5 / 7x7 forward, 1.32x for the 5x5 backward data; "stage S8" (strips of
// 8 columns) 2.10x for the 7x7 backward data.
template <>
struct GatherChoice<false, 5> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
template <>
struct GatherChoice<false, 7> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
template <>
struct GatherChoice<true, 5> {
  static constexpr int kTune = gather_tune(4, 1, false, true);
  static constexpr GatherLaunch kLaunch{8, 8};
};
template <>
struct GatherChoice<true, 7> {
  static constexpr int kTune = gather_tune(8, 1, false, true);
  static constexpr GatherLaunch kLaunch{32, 8};
};

// Filter rows and channels a backward-filter thread holds, by compile-time width
// (its accumulators are rows * width * vec). The sweep's winners on the H100: one
// row per thread for 3x3 ("rows1": more blocks, 1.21x the previous 3 rows), 4
// channels with 3 / 2 rows for 5x5 / 7x7 ("wide": 8-byte fp16 loads, 1.42x /
// 1.29x the previous 2 channels with 5 / 4 rows); each faster than what it
// replaced on every swept layer.
constexpr int filter_rows(int ks) { return ks == 3 ? 1 : ks == 5 ? 3 : 2; }
constexpr int filter_vec(int /*ks*/) { return 4; }
constexpr int kGenericFilterVec = 2;

template <int KS>
struct FilterChoice {
  static constexpr int kTune = filter_tune(filter_vec(KS), filter_rows(KS));
  static constexpr FilterLaunch kLaunch{};
};
template <>
struct FilterChoice<0> {
  static constexpr int kTune = filter_tune(kGenericFilterVec, 0);
  static constexpr FilterLaunch kLaunch{};
};

}  // namespace
}  // namespace torch_cudnn_algo::kernels
