// Runs csrc/kernels/gemm_filter.cu's own source (host-side logic and the kernel
// body, rewritten by transform_gemm_filter.py) on the CPU: the filter gradient
// of stem-like convolutions (few input channels) and of grouped ones (8 to 32
// channels a group, x staged by vectors) against a float64 reference, in both
// weight layouts, every weight element written (a NaN prefill of the
// output and the workspace shows one that is not, or a partial never summed),
// guard regions around the output untouched, and the shapes it must refuse.
// Build and run: tests/emulation/run gemm-filter [asan]; tests/test_kernel_emulation.py runs it.
#include GEMM_FILTER_EMU_INC

#include "check_common.h"

#include "conv_ref.h"

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace torch_cudnn_algo::kernels;

struct Case {
  std::string name;
  int64_t n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw;
  int64_t groups = 1;
  bool expect = true;
};

int failures = 0, runs = 0;

template <typename T>
void run(const Case& t, int sm_count, bool weight_channels_last, bool early) {
  DirectConvShape s = convref::geometry_of(t);
  s.k = t.k;
  s.groups = t.groups;
  // The weight [k, c / groups, r, s], channels_last (the runner's) or contiguous.
  const int64_t cpg_in = t.c / t.groups, cpg_out = t.k / t.groups;
  const int64_t w_strides[2][4] = {{cpg_in * t.r * t.s, t.r * t.s, t.s, 1}, {cpg_in * t.r * t.s, 1, t.s * cpg_in, cpg_in}};
  for (int d = 0; d < 4; ++d) s.weight_strides[d] = w_strides[weight_channels_last][d];
  const DirectDirection dir = DirectDirection::kBackwardFilter;
  const bool applies = gemm_filter_applies(s, dtype_of<T>(), dir, true, true);
  if (applies != t.expect || gemm_filter_fits(s, dtype_of<T>(), dir) != t.expect ||
      (gemm_filter_workspace_bytes(s, dtype_of<T>(), sm_count) > 0) != t.expect) {
    std::printf("FAIL %s: applies=%d expected %d\n", t.name.c_str(), applies, t.expect);
    ++failures;
  }
  if (!applies) {
    if (gemm_filter_applies(s, dtype_of<T>(), dir, true, true)) ++failures;
    return;
  }
  if (gemm_filter_applies(s, dtype_of<T>(), dir, true, false)) {
    std::printf("FAIL %s: applies to a misaligned dy\n", t.name.c_str());
    ++failures;
  }
  // x is read by vectors where a group's channels are whole vectors: an x off
  // 16 bytes goes to the generic kernel then, and is no matter otherwise.
  if (gemm_filter_applies(s, dtype_of<T>(), dir, false, true) != (cpg_in % 8 != 0)) {
    std::printf("FAIL %s: applies to a misaligned x: %d\n", t.name.c_str(), !(cpg_in % 8 != 0));
    ++failures;
  }
  std::mt19937 rng(7 + t.c + t.h * 3 + t.k * 5 + t.r);
  auto make = [&](int64_t count, std::vector<float>& f) { return rounded_random<T>(count, rng, f); };
  std::vector<float> xf, dyf;
  const std::vector<T> x = make(s.n * s.h * s.w * s.c, xf);
  const std::vector<T> dy = make(s.n * s.p * s.q * s.k, dyf);
  // dweight[k, ci, r, s] = sum over (n, p, q) of x[n, tap(p, r), tap(q, s), k's group's ci] * dy[n, p, q, k]
  const int64_t rows = cpg_in * s.r * s.s;
  std::vector<double> ref(rows * s.k, 0.0), ref_abs(rows * s.k, 0.0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t p = 0; p < s.p; ++p)
      for (int64_t q = 0; q < s.q; ++q)
        convref::for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
          for (int64_t ci = 0; ci < cpg_in; ++ci)
            for (int64_t k = 0; k < s.k; ++k) {
              const int64_t x_channel = k / cpg_out * cpg_in + ci;
              const double v = double(xf[((n * s.h + ih) * s.w + iw) * s.c + x_channel]) *
                               dyf[((n * s.p + p) * s.q + q) * s.k + k];
              const int64_t j = (ci * s.r + r) * s.s + ss;
              ref[j * s.k + k] += v;
              ref_abs[j * s.k + k] += std::fabs(v);
            }
        });
  const size_t workspace_bytes = gemm_filter_workspace_bytes(s, dtype_of<T>(), sm_count);
  std::vector<float> workspace(workspace_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  const int64_t guard = 64;
  std::vector<T> out(rows * s.k + 2 * guard);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  // The by-vector kernel copies x and dy with cp.async: only from these, and
  // landing at once (early) or only when waited for.
  emu_readable = {{reinterpret_cast<const unsigned char*>(x.data()), reinterpret_cast<const unsigned char*>(x.data() + x.size())},
                  {reinterpret_cast<const unsigned char*>(dy.data()), reinterpret_cast<const unsigned char*>(dy.data() + dy.size())}};
  emu_land_early = early;
  const int code = launch_gemm_filter(s, dtype_of<T>(), sm_count, x.data(), dy.data(), out.data() + guard,
                                      workspace.data(), nullptr);
  ++runs;
  // One rounding to the output type on top of fp32 sums.
  const double eps = dtype_of<T>() == DirectDType::kHalf ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  int64_t bad = 0;
  double worst = 0;
  for (int64_t k = 0; k < s.k; ++k)
    for (int64_t ci = 0; ci < cpg_in; ++ci)
      for (int64_t r = 0; r < s.r; ++r)
        for (int64_t ss = 0; ss < s.s; ++ss) {
          const int64_t j = (ci * s.r + r) * s.s + ss;
          const int64_t at = k * s.weight_strides[0] + ci * s.weight_strides[1] + r * s.weight_strides[2] +
                             ss * s.weight_strides[3];
          const double o = to_float(out[guard + at]), want = ref[j * s.k + k];
          const double tol = eps * std::fabs(want) + 1e-5 * ref_abs[j * s.k + k] + 1e-6;
          const double err = std::fabs(o - want);
          if (!(err <= tol)) {
            if (bad < 3) std::printf("   k %lld j %lld got %g want %g\n", static_cast<long long>(k),
                                     static_cast<long long>(j), o, want);
            ++bad;
          } else {
            worst = std::max(worst, err / tol);
          }
        }
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
  for (int64_t i = 0; i < guard; ++i)
    if (bits[i] != 0xFFFF || bits[guard + rows * s.k + i] != 0xFFFF) { ++bad; std::printf("   guard written\n"); break; }
  const bool ok = code == 0 && bad == 0;
  std::printf("%s %-48s %s w%s sm%-3d %s workspace %-7zu err/tol %.3f\n", ok ? "ok  " : "FAIL", t.name.c_str(),
              dtype_of<T>() == DirectDType::kHalf ? "fp16" : "bf16", weight_channels_last ? "NHWC" : "NCHW", sm_count,
              early ? "early" : "late ", workspace_bytes, worst);
  if (!ok) ++failures;
}

Case mk(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
        int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups = 1, bool expect = true) {
  return Case{name, n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups, expect};
}

int main() {
  const std::vector<Case> cases = {
      mk("mobilenet-like n2 3x17x19 k16 3x3 s2 p1", 2, 3, 17, 19, 16, 3, 3, 2, 2, 1, 1, 1, 1),
      mk("efficientnet-like n1 3x24x20 k32 3x3 s2 p1", 1, 3, 24, 20, 32, 3, 3, 2, 2, 1, 1, 1, 1),
      mk("resnext-like n1 3x13x15 k64 7x7 s2 p3", 1, 3, 13, 15, 64, 7, 7, 2, 2, 3, 3, 1, 1),
      mk("n2 4x8x8 k8 3x3 p2 d2", 2, 4, 8, 8, 8, 3, 3, 1, 1, 2, 2, 2, 2),
      mk("n3 1x10x7 k24 5x5 s3 p0", 3, 1, 10, 7, 24, 5, 5, 3, 3, 0, 0, 1, 1),
      mk("n1 3x1x50 k16 1x7 s1x2 p0x3 (1-d)", 1, 3, 1, 50, 16, 1, 7, 1, 2, 0, 3, 1, 1),
      mk("n5 2x9x11 k40 3x2 s2x1 p1x0 d1x2", 5, 2, 9, 11, 40, 3, 2, 2, 1, 1, 0, 1, 2),
      mk("n1 16x6x6 k64 3x3 p1 (144 rows)", 1, 16, 6, 6, 64, 3, 3, 1, 1, 1, 1, 1, 1),
      mk("n2 3x40x40 k16 3x3 p1 (50 tiles: several a block)", 2, 3, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1),
      mk("n1 1x1x1 k8 1x1 (one pixel)", 1, 1, 1, 1, 8, 1, 1, 1, 1, 0, 0, 1, 1),
      mk("refused: k12 not a multiple of 8", 1, 3, 8, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),
      mk("refused: k72 over 64", 1, 3, 8, 8, 72, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),
      mk("n1 4x8x8 k16 7x7 p3 (196 rows)", 1, 4, 8, 8, 16, 7, 7, 1, 1, 3, 3, 1, 1),
      // Groups: by element where a group's channels make no vector, by vector otherwise.
      mk("n1 8x6x6 k16 3x3 p1 g2 (4 in, 8 out a group)", 1, 8, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("regnety-like n2 48x7x7 k48 3x3 p1 g2 (24 a group)", 2, 48, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("regnety-like n1 48x9x9 k48 3x3 s2 p1 g2", 1, 48, 9, 9, 48, 3, 3, 2, 2, 1, 1, 1, 1, 2),
      mk("resnext-like n2 32x6x6 k32 3x3 p1 g4 (8 a group)", 2, 32, 6, 6, 32, 3, 3, 1, 1, 1, 1, 1, 1, 4),
      mk("n1 64x5x5 k64 3x3 p1 g4 (16 a group)", 1, 64, 5, 5, 64, 3, 3, 1, 1, 1, 1, 1, 1, 4),
      mk("n1 64x5x6 k64 3x3 p1 d2 g2 (32 a group, 288 rows)", 1, 64, 5, 6, 64, 3, 3, 1, 1, 2, 2, 2, 2, 2),
      mk("n1 16x7x7 k32 3x3 p1 g2 (8 in, 16 out)", 1, 16, 7, 7, 32, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("n2 240x3x5 k240 1x1 g30 (30 groups)", 2, 240, 3, 5, 240, 1, 1, 1, 1, 0, 0, 1, 1, 30),
      mk("n1 48x10x10 k48 3x3 p1 g2 (2 tiles, several slices)", 1, 48, 10, 10, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      // By vector, more tiles a block than stages in flight: the pipeline's buffers wrap around.
      mk("n2 48x16x16 k48 3x3 p1 g2 (8 tiles, 3 stages)", 2, 48, 16, 16, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      mk("n3 32x12x12 k32 3x3 s1 p1 g4 (7 tiles, 4 stages)", 3, 32, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 4),
      mk("refused: 3x11x11 = 363 rows", 1, 3, 12, 12, 16, 11, 11, 1, 1, 5, 5, 1, 1, 1, false),
      mk("refused: 4 out a group", 1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 4, false),
      mk("refused: 64 a group, 576 rows", 1, 128, 6, 6, 128, 3, 3, 1, 1, 1, 1, 1, 1, 2, false),
      mk("refused: 32 a group 5x5, 800 rows", 1, 64, 6, 6, 64, 5, 5, 1, 1, 2, 2, 1, 1, 2, false),
  };
  for (const auto& t : cases) {
    run<__half>(t, 132, true, false);
    run<__half>(t, 1, false, true);
    run<__nv_bfloat16>(t, 3, true, false);
  }
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
