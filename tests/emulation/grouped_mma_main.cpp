// Runs csrc/kernels/grouped_mma.cu's own source (host-side logic and the kernel
// body, rewritten by transform_grouped_mma.py) on the CPU against the float64
// references of tests/references/grouped_ref.h.
// Build and run: tests/emulation/run grouped [thorough] [asan]; tests/test_kernel_emulation.py runs it.
#include GROUPED_MMA_EMU_INC

#include "check_common.h"

#include "grouped_ref.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace torch_cudnn_algo::kernels;
using groupedref::shape_of;

struct Case {
  std::string name;
  int64_t n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups;
  bool weight_channels_last = false;
  bool expect = true;
};

int failures = 0, runs = 0;

template <typename T>
void run(const Case& t, bool backward, bool wide, int sm_count, bool early) {
  const DirectConvShape s = shape_of(t);
  const DirectDirection dir = backward ? DirectDirection::kBackwardData : DirectDirection::kForward;
  const bool applies = grouped_mma_applies(s, dtype_of<T>(), dir, true);
  if (applies != t.expect) {
    std::printf("FAIL %s: applies=%d expected %d\n", t.name.c_str(), applies, t.expect);
    ++failures;
  }
  if (!applies) return;
  std::mt19937 rng(99 + t.c + t.h * 3 + t.k * 5 + t.r);
  auto make = [&](int64_t count, std::vector<float>& f) { return rounded_random<T>(count, rng, f); };
  std::vector<float> xf, dyf, wf;
  const std::vector<T> x = make(s.n * s.h * s.w * s.c, xf);
  const std::vector<T> dy = make(s.n * s.p * s.q * s.k, dyf);
  const std::vector<T> wt = make(s.k * (s.c / s.groups) * s.r * s.s, wf);
  std::vector<double> ref, ref_abs;
  if (backward)
    groupedref::reference_backward_data(s, dyf, wf, ref, ref_abs);
  else
    groupedref::reference_forward(s, xf, wf, ref, ref_abs);
  const int64_t guard = 64;
  std::vector<T> out(ref.size() + 2 * guard);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  const std::vector<T>& src = backward ? dy : x;
  emu_readable = {{reinterpret_cast<const unsigned char*>(src.data()),
                   reinterpret_cast<const unsigned char*>(src.data() + src.size())}};
  emu_land_early = early;
  const int code = launch_grouped_mma(s, dtype_of<T>(), dir, wide, sm_count, src.data(), wt.data(),
                                      out.data() + guard, nullptr);
  ++runs;
  const double eps = dtype_of<T>() == DirectDType::kHalf ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  auto [bad, worst] = convref::compare_with_reference(
      ref, [&](size_t i) { return static_cast<double>(to_float(out[guard + i])); },
      [&](size_t i) { return eps * std::fabs(ref[i]) + 1e-5 * ref_abs[i] + 1e-6; });
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
  for (int64_t i = 0; i < guard; ++i)
    if (bits[i] != 0xFFFF || bits[guard + ref.size() + i] != 0xFFFF) { ++bad; std::printf("   guard written\n"); break; }
  const bool ok = code == 0 && bad == 0;
  std::printf("%s %-46s %s %s idx%d sm%-3d %s  err/tol %.3f\n", ok ? "ok  " : "FAIL", t.name.c_str(),
              sizeof(T) == 2 && dtype_of<T>() == DirectDType::kHalf ? "fp16" : "bf16", backward ? "bwd" : "fwd",
              wide ? 64 : 32, sm_count, early ? "early" : "late ", worst);
  if (!ok) ++failures;
}

Case mk(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
        int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, bool expect = true) {
  Case t{name, n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups};
  t.expect = expect;
  return t;
}

int main(int argc, char** argv) {
  const bool thorough = argc > 1 && std::string(argv[1]) == "thorough";
  std::vector<Case> cases = {
      mk("regnety-ish n2 120x28x28 g5 s1", 2, 120, 28, 28, 120, 3, 3, 1, 1, 1, 1, 1, 1, 5),
      mk("regnety-ish n2 888x14x14 g37 s2", 2, 888, 14, 14, 888, 3, 3, 2, 2, 1, 1, 1, 1, 37),
      mk("regnety-ish n1 48x56x56 g2 s2", 1, 48, 56, 56, 48, 3, 3, 2, 2, 1, 1, 1, 1, 2),
      mk("regnety-ish n2 336x14x14 g14 s1", 2, 336, 14, 14, 336, 3, 3, 1, 1, 1, 1, 1, 1, 14),
      mk("n1 8x7x7 k8 3x3 p1 g1", 1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1),
      mk("n2 64x9x11 k64 3x3 s2 p1 g4", 2, 64, 9, 11, 64, 3, 3, 2, 2, 1, 1, 1, 1, 4),
      mk("n3 96x13x10 k64 3x3 p2 d2 g2", 3, 96, 13, 10, 64, 3, 3, 1, 1, 2, 2, 2, 2, 2),
      mk("n1 128x7x7 k128 1x1 g2", 1, 128, 7, 7, 128, 1, 1, 1, 1, 0, 0, 1, 1, 2),
      mk("n2 40x15x15 k80 5x5 s2 p0 g5", 2, 40, 15, 15, 80, 5, 5, 2, 2, 0, 0, 1, 1, 5),
      mk("n4 56x1x50 k56 1x3 s1x2 p0x1 g1", 4, 56, 1, 50, 56, 1, 3, 1, 2, 0, 1, 1, 1, 1),
      mk("n1 24x1x1 k24 1x1 g3", 1, 24, 1, 1, 24, 1, 1, 1, 1, 0, 0, 1, 1, 3),
      mk("n2 32x17x19 k64 3x3 s2 p0 d2 g2", 2, 32, 17, 19, 64, 3, 3, 2, 2, 0, 0, 2, 2, 2),
      mk("n2 64x10x12 k32 3x1 s1x2 p1x0 g4", 2, 64, 10, 12, 32, 3, 1, 1, 2, 1, 0, 1, 1, 4),
      mk("n2 80x9x9 k80 3x3 p1 g2", 2, 80, 9, 9, 80, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("n3 48x33x35 k48 3x3 p1 g2", 3, 48, 33, 35, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("n2 32x20x20 k32 3x3 s3 p1 g2", 2, 32, 20, 20, 32, 3, 3, 3, 3, 1, 1, 1, 1, 2),
      mk("n1 64x7x7 k64 3x3 s2 p0 g1", 1, 64, 7, 7, 64, 3, 3, 2, 2, 0, 0, 1, 1, 1),
      mk("n2 24x7x7 k48 3x3 s2 p1 g1", 2, 24, 7, 7, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1),
      mk("n2 48x9x9 k48 7x7 p3 g2", 2, 48, 9, 9, 48, 7, 7, 1, 1, 3, 3, 1, 1, 2),
      mk("n1 16x5x5 k16 3x3 p3 d3 g1", 1, 16, 5, 5, 16, 3, 3, 1, 1, 3, 3, 3, 3, 1),
      mk("n2 32x8x9 k32 3x3 s2 p0 g2", 2, 32, 8, 9, 32, 3, 3, 2, 2, 0, 0, 1, 1, 2),
      mk("n5 112x6x5 k48 3x3 p1 g2", 5, 112, 6, 5, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("n2 32x11x13 k64 3x2 s2x3 p1x2 d2x1 g4 (8->16)", 2, 32, 11, 13, 64, 3, 2, 2, 3, 1, 2, 2, 1, 4),
      mk("n2 16x8x8 k16 3x3 p1 g4 (cpg 4)", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 4, false),
      mk("n2 144x6x6 k144 3x3 p1 g2 (cpg 72)", 2, 144, 6, 6, 144, 3, 3, 1, 1, 1, 1, 1, 1, 2, false),
  };
  // Every case with both weight layouts: channels_last (the runner's; staged by
  // vectors) and contiguous (staged element by element).
  const size_t plain = cases.size();
  for (size_t i = 0; i < plain; ++i) {
    Case t = cases[i];
    t.weight_channels_last = true;
    t.name += " wNHWC";
    cases.push_back(t);
  }
  for (const auto& t : cases)
    for (bool backward : {false, true}) {
      run<__half>(t, backward, false, 132, false);
      run<__half>(t, backward, false, 3, true);
      if (thorough) {
        run<__half>(t, backward, true, 3, false);
        run<__nv_bfloat16>(t, backward, false, 7, false);
      }
    }
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
