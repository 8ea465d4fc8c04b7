// Runs csrc/kernels/direct_conv.cu's own source (launch plans and the general
// gather and filter kernels with their finish, rewritten by
// transform_direct_conv.py) on the CPU against the float64 references of
// tests/references/direct_ref.h: NCHW and NHWC, every direction and
// element type, groups, strides, padding, dilation, 1-d, odd sizes, both
// weight layouts, misaligned operands (the one-element paths) and 64-bit
// indexing. The specialised kernels (depthwise.cu, grouped_mma.cu,
// pointwise_mma.cu, pointwise_filter.cu, gemm_filter.cu, each emulated on
// its own) are stubbed out here as not
// applying, so every case runs the general kernels, which serve every shape
// those do not take; check_filter_choice alone lets the two tensor-core filter
// kernels claim 1x1 shapes, to check which of them the dispatch runs.
// Build and run: tests/emulation/run direct [thorough] [asan]; tests/test_kernel_emulation.py runs it.
#include DIRECT_CONV_EMU_INC

#include "check_common.h"

#include "direct_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace torch_cudnn_algo::kernels {
// Never applying: the general kernels run everything.
bool depthwise_applies(const DirectConvShape&, DirectDType, DirectDirection) { return false; }
size_t depthwise_workspace_bytes(const DirectConvShape&, DirectDType, DirectDirection, int) { return 0; }
int launch_depthwise(const DirectConvShape&, DirectDType, DirectDirection, int, const void*, const void*, void*,
                     void*, CUstream_st*) {
  emu_fail("launch_depthwise called although depthwise_applies refused");
}
bool grouped_mma_applies(const DirectConvShape&, DirectDType, DirectDirection, bool) { return false; }
int launch_grouped_mma(const DirectConvShape&, DirectDType, DirectDirection, bool, int, const void*, const void*,
                       void*, CUstream_st*) {
  emu_fail("launch_grouped_mma called although grouped_mma_applies refused");
}
bool pointwise_mma_applies(const DirectConvShape&, DirectDType, DirectDirection, bool) { return false; }
int launch_pointwise_mma(const DirectConvShape&, DirectDType, DirectDirection, int, const void*, const void*, void*,
                         CUstream_st*) {
  emu_fail("launch_pointwise_mma called although pointwise_mma_applies refused");
}
// While set (check_filter_choice), both tensor-core filter kernels claim every
// 1x1 shape, and their launches record which ran instead of computing.
bool filter_kernels_claim_1x1 = false;
const char* filter_kernel_ran = nullptr;
bool claimed(const DirectConvShape& s) { return filter_kernels_claim_1x1 && s.r == 1 && s.s == 1; }
int record_filter_kernel(const DirectConvShape& s, const char* kernel, const char* unclaimed) {
  if (!claimed(s)) emu_fail(unclaimed);
  filter_kernel_ran = kernel;
  return 0;
}
bool pointwise_filter_fits(const DirectConvShape& s, DirectDType, DirectDirection) { return claimed(s); }
bool pointwise_filter_applies(const DirectConvShape& s, DirectDType, DirectDirection, bool) { return claimed(s); }
size_t pointwise_filter_workspace_bytes(const DirectConvShape&, DirectDType, int) { return 0; }
int launch_pointwise_filter(const DirectConvShape& s, DirectDType, int, const void*, const void*, void*, void*,
                            CUstream_st*) {
  return record_filter_kernel(s, "launch_pointwise_filter",
                              "launch_pointwise_filter called although pointwise_filter_applies refused");
}
bool gemm_filter_fits(const DirectConvShape& s, DirectDType, DirectDirection) { return claimed(s); }
bool gemm_filter_applies(const DirectConvShape& s, DirectDType, DirectDirection, bool, bool) { return claimed(s); }
size_t gemm_filter_workspace_bytes(const DirectConvShape&, DirectDType, int) { return 0; }
int launch_gemm_filter(const DirectConvShape& s, DirectDType, int, const void*, const void*, void*, void*,
                       CUstream_st*) {
  return record_filter_kernel(s, "launch_gemm_filter",
                              "launch_gemm_filter called although gemm_filter_applies refused");
}
}  // namespace torch_cudnn_algo::kernels

namespace tk = torch_cudnn_algo::kernels;
using tk::DirectConvShape;
using tk::DirectDirection;

struct Case {
  std::string name;
  int64_t n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups;
};

// How one case runs: layout, weight layout, operands off the 16-byte boundary,
// 64-bit index arithmetic forced, the SM count the plans size the grid by.
struct Variant {
  bool channels_last, weight_channels_last, misaligned, wide;
  int sm_count;
};

int failures = 0, runs = 0;

template <typename T> double as_double(T v) { return to_float(v); }
template <> double as_double<double>(double v) { return v; }

DirectConvShape shape_of(const Case& t, const Variant& v) {
  DirectConvShape s = convref::geometry_of(t);
  s.k = t.k;
  s.groups = t.groups;
  s.channels_last = v.channels_last;
  convref::set_weight_strides(s, v.weight_channels_last);
  return s;
}

// An operand in a buffer of its exact size (so that AddressSanitizer, in the
// asan build, sees any read past its end), one element in when misaligned.
template <typename T>
struct Operand {
  std::vector<T> storage;
  T* data;
};

template <typename T>
Operand<T> placed(const std::vector<T>& values, bool misaligned) {
  Operand<T> o;
  o.storage.assign(values.size() + (misaligned ? 1 : 0), T{});
  // vector storage is 16-byte aligned on this host (new's alignment); one element in is not.
  o.data = o.storage.data() + (misaligned ? 1 : 0);
  std::copy(values.begin(), values.end(), o.data);
  return o;
}

template <typename T>
void run(const Case& t, int direction, const Variant& v) {
  const DirectConvShape s = shape_of(t, v);
  const tk::DirectDirection dir = static_cast<tk::DirectDirection>(direction);
  tk::DirectLaunch l = tk::prepare_direct_conv(s, ::dtype_of<T>(), dir, v.sm_count);
  if (!l.refusal.empty()) {
    std::printf("FAIL %s: refused: %s\n", t.name.c_str(), l.refusal.c_str());
    ++failures;
    return;
  }
  l.wide_index = l.wide_index || v.wide;
  std::mt19937 rng(7 + t.c * 3 + t.h * 5 + t.k * 7 + t.r * 11 + direction);
  std::vector<float> xf, wf, dyf;
  const std::vector<T> x = rounded_random<T>(s.n * s.c * s.h * s.w, rng, xf);
  const std::vector<T> wt = rounded_random<T>(s.k * (s.c / s.groups) * s.r * s.s, rng, wf);
  const std::vector<T> dy = rounded_random<T>(s.n * s.k * s.p * s.q, rng, dyf);
  std::vector<double> ref, ref_abs;
  directref::reference(s, direction, xf, wf, dyf, ref, ref_abs);

  const Operand<T> a = placed(direction == 1 ? dy : x, v.misaligned);
  const Operand<T> b = placed(direction == 2 ? dy : wt, v.misaligned);
  // The output between guard regions, everything prefilled with 0xFF (NaN):
  // an element never written, or one written outside the output, shows.
  const int64_t guard = 64;
  std::vector<T> out(ref.size() + 2 * guard + 1);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  T* const first = out.data() + guard + (v.misaligned ? 1 : 0);
  std::vector<unsigned char> workspace(l.workspace_bytes);
  std::fill(workspace.begin(), workspace.end(), 0xFF);
  const int code = tk::launch_direct_conv(l, a.data, b.data, first, workspace.empty() ? nullptr : workspace.data(),
                                          nullptr);
  ++runs;

  double eps = 1e-12, spread = 1e-12, floor = 1e-14;
  if (std::is_same_v<T, __half>) eps = std::ldexp(1.0, -10), spread = 1e-5, floor = 1e-6;
  if (std::is_same_v<T, __nv_bfloat16>) eps = std::ldexp(1.0, -7), spread = 1e-5, floor = 1e-6;
  if (std::is_same_v<T, float>) eps = std::ldexp(1.0, -22), spread = 1e-5, floor = 1e-6;
  auto [bad, worst] = convref::compare_with_reference(
      ref, [&](size_t i) { return as_double(first[i]); },
      [&](size_t i) { return eps * std::fabs(ref[i]) + spread * ref_abs[i] + floor; });
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(out.data());
  const size_t before = (first - out.data()) * sizeof(T), after = (first - out.data() + ref.size()) * sizeof(T);
  for (size_t i = 0; i < out.size() * sizeof(T); ++i)
    if ((i < before || i >= after) && bytes[i] != 0xFF) {
      ++bad;
      std::printf("   written outside the output (byte %zu)\n", i);
      break;
    }
  const bool ok = code == 0 && bad == 0;
  static const char* const kDirections[] = {"fwd", "bwd_data", "bwd_filter"};
  std::printf("%s %-42s %s %-10s %s w%s %s idx%d sm%-2d err/tol %.3f\n", ok ? "ok  " : "FAIL", t.name.c_str(),
              dtype_name<T>(), kDirections[direction], v.channels_last ? "NHWC" : "NCHW",
              v.weight_channels_last ? "NHWC" : "NCHW", v.misaligned ? "misaligned" : "aligned   ",
              l.wide_index ? 64 : 32, v.sm_count, worst);
  if (!ok) ++failures;
}

// A shape the plans must refuse, with the reason they give.
void expect_refusal(const std::string& name, const DirectConvShape& s, DirectDirection dir, const std::string& why) {
  const tk::DirectLaunch l = tk::prepare_direct_conv(s, tk::DirectDType::kHalf, dir, 4);
  const bool ok = l.refusal.find(why) != std::string::npos;
  std::printf("%s refusal: %s: \"%s\"\n", ok ? "ok  " : "FAIL", name.c_str(), l.refusal.c_str());
  ++runs;
  if (!ok) ++failures;
}

Case mk(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
        int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  return Case{name, n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups};
}

// Where both tensor-core filter kernels take a 1x1 filter gradient, the
// dispatch runs the GEMM one when dy has 24 to 64 channels (it was faster
// there on an H100), the streaming one otherwise.
void check_filter_choice() {
  tk::filter_kernels_claim_1x1 = true;
  for (const int64_t k : {8, 16, 24, 64, 72, 144}) {
    const DirectConvShape s = shape_of(mk("", 2, 16, 8, 8, k, 1, 1, 1, 1, 0, 0, 1, 1, 1),
                                       Variant{true, true, false, false, 4});
    const tk::DirectLaunch l = tk::prepare_direct_conv(s, tk::DirectDType::kHalf, DirectDirection::kBackwardFilter, 4);
    std::vector<__half> x(s.n * s.c * s.h * s.w), dy(s.n * s.k * s.p * s.q), dw(s.k * s.c);
    tk::filter_kernel_ran = nullptr;
    const int code = l.refusal.empty() ? tk::launch_direct_conv(l, x.data(), dy.data(), dw.data(), nullptr, nullptr)
                                       : -1;
    const char* const expected = k > 16 && k <= 64 ? "launch_gemm_filter" : "launch_pointwise_filter";
    const bool ok = code == 0 && tk::filter_kernel_ran != nullptr && std::strcmp(tk::filter_kernel_ran, expected) == 0;
    std::printf("%s filter choice: 1x1 16->%ld: %s\n", ok ? "ok  " : "FAIL", static_cast<long>(k),
                tk::filter_kernel_ran ? tk::filter_kernel_ran : "neither");
    ++runs;
    if (!ok) ++failures;
  }
  tk::filter_kernels_claim_1x1 = false;
}

template <typename T>
void run_all_directions(const Case& t, const Variant& v) {
  for (int direction = 0; direction < 3; ++direction) run<T>(t, direction, v);
}

int main(int argc, char** argv) {
  const bool thorough = argc > 1 && std::string(argv[1]) == "thorough";
  const std::vector<Case> cases = {
      mk("n2 8x9x9 k8 3x3 p1 depthwise", 2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8),
      mk("n2 16x11x10 k16 5x5 s2 p2 depthwise", 2, 16, 11, 10, 16, 5, 5, 2, 2, 2, 2, 1, 1, 16),
      mk("n1 24x7x7 k48 3x3 p1 depthwise x2", 1, 24, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 24),
      mk("n2 12x6x13 k12 3x3 p2 d2 groups of 4", 2, 12, 6, 13, 12, 3, 3, 1, 1, 2, 2, 2, 2, 3),
      mk("n3 6x7x5 k4 3x2 s2x1 p1x0 g2", 3, 6, 7, 5, 4, 3, 2, 2, 1, 1, 0, 1, 1, 2),
      mk("n2 3x10x10 k8 3x3 s2 p1 stem", 2, 3, 10, 10, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1),
      mk("n1 16x6x6 k16 1x1 dense", 1, 16, 6, 6, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1),
      mk("n2 1x1x40 k8 1x4 s1x2 p0x1 one channel 1-d", 2, 1, 1, 40, 8, 1, 4, 1, 2, 0, 1, 1, 1, 1),
      mk("n2 8x1x33 k1 1x5 p0x2 d1x3 one out channel 1-d", 2, 8, 1, 33, 1, 1, 5, 1, 1, 0, 2, 1, 3, 1),
      mk("n2 10x1x50 k10 1x3 p0x4 d1x4 depthwise 1-d", 2, 10, 1, 50, 10, 1, 3, 1, 1, 0, 4, 1, 4, 10),
      mk("n1 4x5x5 k4 4x4 s3 p0 taps past the image", 1, 4, 5, 5, 4, 4, 4, 3, 3, 0, 0, 1, 1, 2),
      mk("n3 5x4x9 k10 2x3 s1x2 p1x1 odd", 3, 5, 4, 9, 10, 2, 3, 1, 2, 1, 1, 1, 1, 5),
      mk("n1 8x3x3 k8 3x3 p3 d3 all padding", 1, 8, 3, 3, 8, 3, 3, 1, 1, 3, 3, 3, 3, 4),
      mk("n1 1x1x1 k1 1x1 single element", 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1),
      // Enough pixels a thread for more than 4 slices: the finish's lanes (sum_slices), where
      // the small cases above take the one-thread-an-element finish (sum_few_slices).
      mk("n2 2x64x64 k2 3x3 p1 many slices", 2, 2, 64, 64, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1),
  };
  // Default: every case and direction in both layouts, the element type, weight
  // layout, alignment, index width and SM count turning over from case to case
  // so that each layout meets each of them; thorough: every combination.
  for (size_t i = 0; i < cases.size(); ++i)
    for (const int layout : {0, 1}) {
      const Case& t = cases[i];
      if (thorough) {
        for (const bool weight_cl : {false, true})
          for (const bool misaligned : {false, true})
            for (const bool wide : {false, true}) {
              const Variant v{layout == 1, weight_cl, misaligned, wide, wide ? 3 : 132};
              run_all_directions<__half>(t, v);
              run_all_directions<__nv_bfloat16>(t, v);
              run_all_directions<float>(t, v);
              run_all_directions<double>(t, v);
            }
        continue;
      }
      const bool wide = i % 3 == static_cast<size_t>(layout);
      const Variant v{layout == 1, (i + layout) % 2 == 1, (i / 2 + layout) % 2 == 1, wide,
                      wide ? 3 : (i % 2 ? 5 : 132)};
      switch ((i + 3 * layout) % 4) {
        case 0: run_all_directions<__half>(t, v); break;
        case 1: run_all_directions<__nv_bfloat16>(t, v); break;
        case 2: run_all_directions<float>(t, v); break;
        default: run_all_directions<double>(t, v); break;
      }
    }

  DirectConvShape wide_group = shape_of(mk("", 1, 400, 4, 4, 400, 3, 3, 1, 1, 1, 1, 1, 1, 1),
                                        Variant{true, false, false, false, 4});
  expect_refusal("NHWC, 400 channels a group through 3x3", wide_group, DirectDirection::kForward,
                 "a group's weights do not fit in shared memory");
  DirectConvShape many = shape_of(mk("", 1, 70000, 1, 4, 70000, 1, 1, 1, 1, 0, 0, 1, 1, 70000),
                                  Variant{false, false, false, false, 4});
  expect_refusal("NCHW, 70000 channels", many, DirectDirection::kForward, "more than 65535 channels in NCHW");
  DirectConvShape uneven = shape_of(mk("", 1, 6, 4, 4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1),
                                    Variant{false, false, false, false, 4});
  uneven.groups = 4;
  expect_refusal("6 channels in 4 groups", uneven, DirectDirection::kBackwardFilter,
                 "channels do not divide into the groups");

  check_filter_choice();

  for (const auto& [name, count] : emu_notes) std::printf("ran %s x%ld\n", name.c_str(), count);
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
