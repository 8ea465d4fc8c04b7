// Runs csrc/kernels/pointwise_filter.cu's own source (host-side logic, the
// kernel body and the finish, rewritten by transform_pointwise_filter.py) on
// the CPU: the filter gradient of 1x1 convolutions against a float64
// reference, the weight written at its strides (contiguous and transposed in
// memory), every element written (a NaN prefill of the output and the
// workspace shows one that is not, or a partial never summed), guard regions
// around the output untouched, copies landing early and late, one slice and
// many (both finishes), and the shapes it must refuse.
// Build and run: tests/emulation/run pointwise-filter [asan]; tests/test_kernel_emulation.py runs it.
#include POINTWISE_FILTER_EMU_INC

#include "check_common.h"

#include "conv_ref.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace torch_cudnn_algo::kernels;

struct Case {
  std::string name;
  int64_t n, c, h, w, k;
  int64_t r = 1, s = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  bool expect = true;
};

int failures = 0, runs = 0;

template <typename T>
void run(const Case& t, int sm_count, bool transposed, bool early) {
  DirectConvShape s = convref::geometry_of(t);
  s.k = t.k;
  s.groups = t.groups;
  convref::set_weight_strides(s, false);
  // Transposed: the weight [k, c] lies in memory as [c, k].
  if (transposed) {
    s.weight_strides[0] = 1;
    s.weight_strides[1] = s.k;
  }
  const DirectDirection dir = DirectDirection::kBackwardFilter;
  const bool applies = pointwise_filter_applies(s, dtype_of<T>(), dir, true);
  const bool fits = pointwise_filter_fits(s, dtype_of<T>(), dir);
  const size_t workspace_bytes = pointwise_filter_workspace_bytes(s, dtype_of<T>(), sm_count);
  if (applies != t.expect || fits != t.expect || (workspace_bytes > 0) != t.expect) {
    std::printf("FAIL %s: applies=%d fits=%d workspace %zu, expected %d\n", t.name.c_str(), applies, fits,
                workspace_bytes, t.expect);
    ++failures;
  }
  if (!applies) {
    if (!t.expect) std::printf("ok   refused %s\n", t.name.c_str());
    return;
  }
  if (pointwise_filter_applies(s, dtype_of<T>(), dir, false)) {
    std::printf("FAIL %s: applies to misaligned operands\n", t.name.c_str());
    ++failures;
  }
  std::mt19937 rng(5 + t.c * 7 + t.h * 3 + t.k);
  auto make = [&](int64_t count, std::vector<float>& f) { return rounded_random<T>(count, rng, f); };
  std::vector<float> xf, dyf;
  const std::vector<T> x = make(s.n * s.h * s.w * s.c, xf);
  const std::vector<T> dy = make(s.n * s.p * s.q * s.k, dyf);
  // dweight[k, c] = sum over pixels m of dy[m, k] * x[m, c]
  const int64_t pixels = s.n * s.h * s.w;
  std::vector<double> ref(s.k * s.c, 0.0), ref_abs(s.k * s.c, 0.0);
  for (int64_t m = 0; m < pixels; ++m)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t c = 0; c < s.c; ++c) {
        const double v = double(dyf[m * s.k + k]) * xf[m * s.c + c];
        ref[k * s.c + c] += v;
        ref_abs[k * s.c + c] += std::fabs(v);
      }
  std::vector<float> workspace(workspace_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  const int64_t slices = static_cast<int64_t>(workspace.size()) / (s.k * s.c);
  const int64_t guard = 64;
  std::vector<T> out(s.k * s.c + 2 * guard);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  emu_readable = {{reinterpret_cast<const unsigned char*>(x.data()), reinterpret_cast<const unsigned char*>(x.data() + x.size())},
                  {reinterpret_cast<const unsigned char*>(dy.data()), reinterpret_cast<const unsigned char*>(dy.data() + dy.size())}};
  emu_land_early = early;
  const int code = launch_pointwise_filter(s, dtype_of<T>(), sm_count, x.data(), dy.data(), out.data() + guard,
                                           workspace.data(), nullptr);
  ++runs;
  // One rounding to the output type on top of fp32 sums.
  const double eps = dtype_of<T>() == DirectDType::kHalf ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  int64_t bad = 0;
  double worst = 0;
  for (int64_t k = 0; k < s.k; ++k)
    for (int64_t c = 0; c < s.c; ++c) {
      const double o = to_float(out[guard + k * s.weight_strides[0] + c * s.weight_strides[1]]);
      const double want = ref[k * s.c + c];
      const double tol = eps * std::fabs(want) + 1e-5 * ref_abs[k * s.c + c] + 1e-6;
      const double err = std::fabs(o - want);
      if (!(err <= tol)) {
        if (bad < 3) std::printf("   k %lld c %lld got %g want %g\n", static_cast<long long>(k),
                                 static_cast<long long>(c), o, want);
        ++bad;
      } else {
        worst = std::max(worst, err / tol);
      }
    }
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
  for (int64_t i = 0; i < guard; ++i)
    if (bits[i] != 0xFFFF || bits[guard + s.k * s.c + i] != 0xFFFF) { ++bad; std::printf("   guard written\n"); break; }
  const bool ok = code == 0 && bad == 0;
  std::printf("%s %-36s %s %-5s sm%-3d %s %4lld slices  err/tol %.3f\n", ok ? "ok  " : "FAIL", t.name.c_str(),
              dtype_of<T>() == DirectDType::kHalf ? "fp16" : "bf16", transposed ? "wT" : "w", sm_count,
              early ? "early" : "late ", static_cast<long long>(slices), worst);
  if (!ok) ++failures;
}

Case mk(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k) {
  return Case{name, n, c, h, w, k};
}

Case refused(Case t) {
  t.expect = false;
  return t;
}

int main() {
  // Two blocks an SM, as the kernel's launch bounds hold.
  emu_resident_blocks = 2;
  const std::vector<Case> cases = {
      // MBConv's 1x1 layers, fewer pixels; a partial last tile of 128 pixels.
      mk("16->16 n2 11x12 (2 fragments)", 2, 16, 11, 12, 16),
      mk("16->64 n1 17x19 (8 fragments)", 1, 16, 17, 19, 64),
      mk("64->24 n2 9x9 (16, k padded to 32)", 2, 64, 9, 9, 24),
      mk("24->72 n1 15x14 (15)", 1, 24, 15, 14, 72),
      mk("72->24 n1 13x13 (18: 2 groups)", 1, 72, 13, 13, 24),
      mk("144->24 n1 9x9 (36: 4 groups)", 1, 144, 9, 9, 24),
      mk("24->144 n1 9x10 (27: 2 groups)", 1, 24, 9, 10, 144),
      mk("128->128 n1 6x6 (128: 8 groups)", 1, 128, 6, 6, 128),
      mk("8->8 n3 5x7 (one fragment)", 3, 8, 5, 7, 8),
      mk("32->40 n1 1x1 (one pixel)", 1, 32, 1, 1, 40),
      mk("16->24 n4 32x36 (36 tiles)", 4, 16, 32, 36, 24),
      // What the kernel leaves to the others.
      refused(mk("160->160 (200 fragments)", 1, 160, 4, 4, 160)),
      refused(mk("12->16 (not a multiple of 8)", 1, 12, 4, 4, 16)),
      refused(mk("168->16 (more than 160 channels)", 1, 168, 4, 4, 16)),
      refused([] { Case t = mk("16->16 stride 2", 1, 16, 8, 8, 16); t.sh = t.sw = 2; return t; }()),
      refused([] { Case t = mk("16->16 3x3", 1, 16, 8, 8, 16); t.r = t.s = 3; t.ph = t.pw = 1; return t; }()),
      refused([] { Case t = mk("32->32 2 groups", 1, 32, 8, 8, 32); t.groups = 2; return t; }()),
  };
  for (const auto& t : cases) {
    run<__half>(t, 132, false, false);
    if (!t.expect) continue;
    run<__half>(t, 1, true, true);
    run<__nv_bfloat16>(t, 3, false, false);
  }
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
