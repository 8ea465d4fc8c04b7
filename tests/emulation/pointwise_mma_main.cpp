// Runs csrc/kernels/pointwise_mma.cu's own source (host-side logic and the
// kernel body, rewritten by transform_pointwise_mma.py) on the CPU against the
// float64 references of tests/references/grouped_ref.h: every output element,
// guard regions around the output untouched, an output prefilled with NaN (an
// element never written fails), the weight in three layouts (contiguous,
// transposed in memory, misaligned: the last two staged element by element),
// copies landing early and late, one tile a block and many, and the shapes
// the kernel must refuse.
// Build and run: tests/emulation/run pointwise [thorough] [asan]; tests/test_kernel_emulation.py runs it.
#include POINTWISE_MMA_EMU_INC

#include "check_common.h"

#include "grouped_ref.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace torch_cudnn_algo::kernels;

struct Case {
  std::string name;
  int64_t n, c, h, w, k;
  int64_t r = 1, s = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  bool expect = true;
  bool weight_channels_last = false;  // for groupedref::shape_of; a 1x1 weight's strides are the same either way
};

enum class WeightLayout { kContiguous, kTransposed, kMisaligned };

int failures = 0, runs = 0;

template <typename T>
void run(const Case& t, bool backward, WeightLayout layout, int sm_count, bool early) {
  DirectConvShape s = groupedref::shape_of(t);
  // Transposed: the weight [k, c] lies in memory as [c, k] (weight.t() of a
  // contiguous [c, k]): dim 1 is not contiguous, so it stages element by element.
  if (layout == WeightLayout::kTransposed) {
    s.weight_strides[0] = 1;
    s.weight_strides[1] = s.k;
  }
  const DirectDirection dir = backward ? DirectDirection::kBackwardData : DirectDirection::kForward;
  const bool applies = pointwise_mma_applies(s, dtype_of<T>(), dir, true);
  if (applies != t.expect) {
    std::printf("FAIL %s %s: applies=%d expected %d\n", t.name.c_str(), backward ? "bwd" : "fwd", applies, t.expect);
    ++failures;
  }
  if (!applies) {
    if (!t.expect) std::printf("ok   refused %-40s %s\n", t.name.c_str(), backward ? "bwd" : "fwd");
    return;
  }
  std::mt19937 rng(7 + t.c * 3 + t.h * 5 + t.k * 11);
  auto make = [&](int64_t count, std::vector<float>& f) { return rounded_random<T>(count, rng, f); };
  std::vector<float> xf, dyf, wf;
  const std::vector<T> x = make(s.n * s.h * s.w * s.c, xf);
  const std::vector<T> dy = make(s.n * s.p * s.q * s.k, dyf);
  const std::vector<T> wt = make(s.k * s.c, wf);
  std::vector<double> ref, ref_abs;
  if (backward)
    groupedref::reference_backward_data(s, dyf, wf, ref, ref_abs);
  else
    groupedref::reference_forward(s, xf, wf, ref, ref_abs);
  // Misaligned: the weight starts 2 bytes past a 16-byte boundary.
  std::vector<T> shifted(wt.size() + 1);
  std::memcpy(shifted.data() + 1, wt.data(), wt.size() * sizeof(T));
  const T* weight = layout == WeightLayout::kMisaligned ? shifted.data() + 1 : wt.data();
  const int64_t guard = 64;
  std::vector<T> out(ref.size() + 2 * guard);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  const std::vector<T>& src = backward ? dy : x;
  emu_readable = {{reinterpret_cast<const unsigned char*>(src.data()),
                   reinterpret_cast<const unsigned char*>(src.data() + src.size())}};
  emu_land_early = early;
  const int code = launch_pointwise_mma(s, dtype_of<T>(), dir, sm_count, src.data(), weight, out.data() + guard,
                                        nullptr);
  ++runs;
  const double eps = dtype_of<T>() == DirectDType::kHalf ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  auto [bad, worst] = convref::compare_with_reference(
      ref, [&](size_t i) { return static_cast<double>(to_float(out[guard + i])); },
      [&](size_t i) { return eps * std::fabs(ref[i]) + 1e-5 * ref_abs[i] + 1e-6; });
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
  for (int64_t i = 0; i < guard; ++i)
    if (bits[i] != 0xFFFF || bits[guard + ref.size() + i] != 0xFFFF) { ++bad; std::printf("   guard written\n"); break; }
  const bool ok = code == 0 && bad == 0;
  const char* layouts[] = {"wContig", "wT", "wMisaligned"};
  std::printf("%s %-40s %s %s %-11s sm%-3d %s  err/tol %.3f\n", ok ? "ok  " : "FAIL", t.name.c_str(),
              dtype_of<T>() == DirectDType::kHalf ? "fp16" : "bf16", backward ? "bwd" : "fwd",
              layouts[static_cast<int>(layout)], sm_count, early ? "early" : "late ", worst);
  if (!ok) ++failures;
}

Case mk(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k) {
  return Case{name, n, c, h, w, k};
}

Case refused(Case t) {
  t.expect = false;
  return t;
}

int main(int argc, char** argv) {
  const bool thorough = argc > 1 && std::string(argv[1]) == "thorough";
  // Two blocks an SM: with sm 1, a block takes many tiles (more than its stages).
  emu_resident_blocks = 2;
  std::vector<Case> cases = {
      // MBConv's 1x1 layers, fewer pixels; the pixel counts leave a partial last tile.
      mk("16->16 n2 11x12", 2, 16, 11, 12, 16),
      mk("16->64 n1 17x19", 1, 16, 17, 19, 64),
      mk("64->24 n2 9x9", 2, 64, 9, 9, 24),
      mk("24->72 n1 15x14 (K padded to 32)", 1, 24, 15, 14, 72),
      mk("72->24 n1 13x13", 1, 72, 13, 13, 24),
      mk("16->96 n1 12x12", 1, 16, 12, 12, 96),
      mk("96->24 n1 10x11", 1, 96, 10, 11, 24),
      mk("24->144 n1 9x10", 1, 24, 9, 10, 144),
      mk("144->24 n1 9x9", 1, 144, 9, 9, 24),
      mk("48->120 n1 8x9", 1, 48, 8, 9, 120),
      mk("160->160 n1 7x7 (largest)", 1, 160, 7, 7, 160),
      mk("8->8 n3 5x7 (smallest)", 3, 8, 5, 7, 8),
      mk("40->8 n1 6x6", 1, 40, 6, 6, 8),
      mk("8->152 n1 6x5", 1, 8, 6, 5, 152),
      mk("32->40 n1 1x1 (one pixel)", 1, 32, 1, 1, 40),
      mk("32->16 n1 16x16 (whole tiles)", 1, 32, 16, 16, 16),
      mk("16->24 n4 32x36 (36 tiles)", 4, 16, 32, 36, 24),
      // What the kernel leaves to the others.
      refused(mk("168->16 (more than 160 channels)", 1, 168, 4, 4, 16)),
      refused(mk("16->168 (more than 160 channels)", 1, 16, 4, 4, 168)),
      refused(mk("12->16 (not a multiple of 8)", 1, 12, 4, 4, 16)),
      refused([] { Case t = mk("16->16 stride 2", 1, 16, 8, 8, 16); t.sh = t.sw = 2; return t; }()),
      refused([] { Case t = mk("16->16 padding 1", 1, 16, 8, 8, 16); t.ph = t.pw = 1; return t; }()),
      refused([] { Case t = mk("16->16 3x3", 1, 16, 8, 8, 16); t.r = t.s = 3; t.ph = t.pw = 1; return t; }()),
      refused([] { Case t = mk("32->32 2 groups", 1, 32, 8, 8, 32); t.groups = 2; return t; }()),
  };
  for (const auto& t : cases)
    for (bool backward : {false, true}) {
      run<__half>(t, backward, WeightLayout::kContiguous, 132, false);
      if (!t.expect) continue;
      run<__half>(t, backward, WeightLayout::kTransposed, 1, true);
      run<__nv_bfloat16>(t, backward, WeightLayout::kMisaligned, 3, false);
      if (thorough) {
        run<__nv_bfloat16>(t, backward, WeightLayout::kContiguous, 1, true);
        run<__half>(t, backward, WeightLayout::kMisaligned, 132, true);
      }
    }
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
