// Float64 host references for depthwise convolutions (NHWC), shared by
// the check program depthwise_check.cu and any host-side emulation of the
// kernels. Plain C++. Each reference is written the straightforward way
// (forward sum, backward data as a scatter through the forward taps, filter
// as the sum over every output pixel), independent of the kernels' formulas.
#pragma once

#include "conv_ref.h"
#include "kernels/direct_conv.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dwref {

using namespace torch_cudnn_algo::kernels;
using convref::for_each_tap;
using convref::out_extent;
using convref::parallel_for;

enum class WeightLayout { kStandard, kChannelsLast, kTapsFirst };

struct Case {
  std::string name;
  int64_t n, c, h, w, r, s, sh, sw, ph, pw, dh, dw;
  WeightLayout layout = WeightLayout::kStandard;
};

inline Case make(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t r, int64_t s,
                 int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
                 WeightLayout layout = WeightLayout::kStandard) {
  Case t;
  t.name = name;
  t.n = n; t.c = c; t.h = h; t.w = w; t.r = r; t.s = s;
  t.sh = sh; t.sw = sw; t.ph = ph; t.pw = pw; t.dh = dh; t.dw = dw;
  t.layout = layout;
  return t;
}

inline DirectConvShape shape_of(const Case& t) {
  DirectConvShape s = convref::geometry_of(t);
  s.k = t.c;
  s.groups = t.c;
  switch (t.layout) {
    case WeightLayout::kStandard:  // [c, 1, r, s] contiguous
      s.weight_strides[0] = t.r * t.s; s.weight_strides[1] = t.r * t.s; s.weight_strides[2] = t.s; s.weight_strides[3] = 1;
      break;
    case WeightLayout::kChannelsLast:  // [c, 1, r, s] channels_last: (r*s, 1, s, 1)
      s.weight_strides[0] = t.r * t.s; s.weight_strides[1] = 1; s.weight_strides[2] = t.s; s.weight_strides[3] = 1;
      break;
    case WeightLayout::kTapsFirst:  // memory [r][s][c]: a permuted view
      s.weight_strides[0] = 1; s.weight_strides[1] = 1; s.weight_strides[2] = t.s * t.c; s.weight_strides[3] = t.c;
      break;
  }
  return s;
}

inline int64_t weight_at(const DirectConvShape& s, int64_t c, int64_t r, int64_t ss) {
  return c * s.weight_strides[0] + r * s.weight_strides[2] + ss * s.weight_strides[3];
}

// out and out_abs (the sum of |products|, for the tolerance), by direction.
inline void reference(const DirectConvShape& s, DirectDirection dir, const std::vector<float>& x,
                      const std::vector<float>& dy, const std::vector<float>& wt, std::vector<double>& out,
                      std::vector<double>& out_abs) {
  const int64_t C = s.c;
  if (dir == DirectDirection::kForward) {
    out.assign(s.n * s.p * s.q * C, 0.0);
    out_abs.assign(out.size(), 0.0);
    parallel_for(s.n * s.p, [&](int64_t np) {
      const int64_t n = np / s.p, p = np % s.p;
      for (int64_t q = 0; q < s.q; ++q)
        for (int64_t c = 0; c < C; ++c) {
          double acc = 0, acc_abs = 0;
          for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
            const double prod = double(x[((n * s.h + ih) * s.w + iw) * C + c]) * double(wt[weight_at(s, c, r, ss)]);
            acc += prod;
            acc_abs += std::fabs(prod);
          });
          const int64_t at = ((n * s.p + p) * s.q + q) * C + c;
          out[at] = acc;
          out_abs[at] = acc_abs;
        }
    });
  } else if (dir == DirectDirection::kBackwardData) {
    out.assign(s.n * s.h * s.w * C, 0.0);
    out_abs.assign(out.size(), 0.0);
    parallel_for(s.n, [&](int64_t n) {
      for (int64_t p = 0; p < s.p; ++p)
        for (int64_t q = 0; q < s.q; ++q)
          for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
            for (int64_t c = 0; c < C; ++c) {
              const double prod = double(dy[((n * s.p + p) * s.q + q) * C + c]) * double(wt[weight_at(s, c, r, ss)]);
              out[((n * s.h + ih) * s.w + iw) * C + c] += prod;
              out_abs[((n * s.h + ih) * s.w + iw) * C + c] += std::fabs(prod);
            }
          });
    });
  } else {
    // Indexed like the weight buffer (its strides): element weight_at(c, r, s).
    const int64_t count = s.c * s.r * s.s;
    out.assign(count, 0.0);
    out_abs.assign(count, 0.0);
    parallel_for(s.r * s.s, [&](int64_t tap) {
      const int64_t r = tap / s.s, ss = tap % s.s;
      std::vector<double> acc(C, 0.0), acc_abs(C, 0.0);
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t p = 0; p < s.p; ++p) {
          const int64_t ih = p * s.stride_h - s.pad_h + r * s.dilation_h;
          if (ih < 0 || ih >= s.h) continue;
          for (int64_t q = 0; q < s.q; ++q) {
            const int64_t iw = q * s.stride_w - s.pad_w + ss * s.dilation_w;
            if (iw < 0 || iw >= s.w) continue;
            const float* xp = &x[((n * s.h + ih) * s.w + iw) * C];
            const float* gp = &dy[((n * s.p + p) * s.q + q) * C];
            for (int64_t c = 0; c < C; ++c) {
              const double prod = double(xp[c]) * double(gp[c]);
              acc[c] += prod;
              acc_abs[c] += std::fabs(prod);
            }
          }
        }
      for (int64_t c = 0; c < C; ++c) {
        out[weight_at(s, c, r, ss)] = acc[c];
        out_abs[weight_at(s, c, r, ss)] = acc_abs[c];
      }
    });
  }
}

// Element tolerance: twice the output's rounding (eps: 2^-10 fp16, 2^-7 bf16,
// 2^-22 fp32) plus fp32 accumulation error relative to the sum of |products|.
inline double element_tolerance(double eps, double ref, double ref_abs) {
  return eps * std::fabs(ref) + 1e-5 * ref_abs + 1e-6;
}

// The tuner's accuracy floor on the normwise relative error (tuner_tolerance).
inline double tuner_floor(DirectDType dtype) {
  return dtype == DirectDType::kHalf ? 1e-2 : dtype == DirectDType::kBFloat16 ? 5e-2 : 1e-4;
}

inline double dtype_eps(DirectDType dtype) {
  return dtype == DirectDType::kHalf ? std::ldexp(1.0, -10)
         : dtype == DirectDType::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -22);
}

inline const char* direction_name(DirectDirection d) {
  return d == DirectDirection::kForward ? "fwd    " : d == DirectDirection::kBackwardData ? "bwd-dat" : "bwd-flt";
}

// The correctness cases, shared by the emulation and the GPU check.
inline std::vector<Case> correctness_cases() {
  using L = WeightLayout;
  return {
      make("n2 16x9x11 3x3 s1 p1", 2, 16, 9, 11, 3, 3, 1, 1, 1, 1),
      make("n2 16x9x11 3x3 s2 p1", 2, 16, 9, 11, 3, 3, 2, 2, 1, 1),
      make("n1 24x10x10 3x3 s2 p0", 1, 24, 10, 10, 3, 3, 2, 2, 0, 0),
      make("n2 32x13x12 5x5 s2 p2", 2, 32, 13, 12, 5, 5, 2, 2, 2, 2),
      make("n2 8x11x13 5x5 s1 p2", 2, 8, 11, 13, 5, 5, 1, 1, 2, 2),
      make("n1 16x14x14 7x7 s1 p3", 1, 16, 14, 14, 7, 7, 1, 1, 3, 3),
      make("n2 8x9x10 7x7 s2 p3", 2, 8, 9, 10, 7, 7, 2, 2, 3, 3),
      make("n3 72x7x7 3x3 s1 p1 (72 ch)", 3, 72, 7, 7, 3, 3, 1, 1, 1, 1),
      make("n2 100x6x7 3x3 s1 p1 (100 ch)", 2, 100, 6, 7, 3, 3, 1, 1, 1, 1),
      make("n2 13x7x9 3x3 s2 p1 (13 ch)", 2, 13, 7, 9, 3, 3, 2, 2, 1, 1),
      make("n2 3x8x8 5x5 s1 p2 (3 ch)", 2, 3, 8, 8, 5, 5, 1, 1, 2, 2),
      make("n1 24x11x11 3x3 s3 p1 (stride 3)", 1, 24, 11, 11, 3, 3, 3, 3, 1, 1),
      make("n2 16x12x12 3x3 s1 p2 d2 (dilation 2)", 2, 16, 12, 12, 3, 3, 1, 1, 2, 2, 2, 2),
      make("n2 16x13x13 3x3 s2 p2 d2", 2, 16, 13, 13, 3, 3, 2, 2, 2, 2, 2, 2),
      make("n1 16x10x10 1x1 s1 p0", 1, 16, 10, 10, 1, 1, 1, 1, 0, 0),
      make("n1 16x10x10 1x1 s2 p0", 1, 16, 10, 10, 1, 1, 2, 2, 0, 0),
      make("n2 16x9x14 1x7 s1 p0x3", 2, 16, 9, 14, 1, 7, 1, 1, 0, 3),
      make("n2 16x11x8 3x1 s1 p1x0", 2, 16, 11, 8, 3, 1, 1, 1, 1, 0),
      make("n2 16x11x8 7x1 s2x1 p3x0", 2, 16, 11, 8, 7, 1, 2, 1, 3, 0),
      make("n1 8x6x6 3x3 s1 p3 (pad 3)", 1, 8, 6, 6, 3, 3, 1, 1, 3, 3),
      make("n1 8x5x5 5x5 s1 p0 (one pixel out)", 1, 8, 5, 5, 5, 5, 1, 1, 0, 0),
      make("n2 16x8x9 3x3 s2 p0 (dx cols no tap)", 2, 16, 8, 9, 3, 3, 2, 2, 0, 0),
      make("n1 16x1x1 1x1 (one pixel)", 1, 16, 1, 1, 1, 1, 1, 1, 0, 0),
      make("n2 16x1x40 1x5 s1x2 p0x2 (1-d)", 2, 16, 1, 40, 1, 5, 1, 2, 0, 2),
      make("n1 16x9x9 3x3 s2x1 p1 (mixed stride)", 1, 16, 9, 9, 3, 3, 2, 1, 1, 1),
      make("n1 16x9x9 3x3 s1x2 p1 (mixed stride)", 1, 16, 9, 9, 3, 3, 1, 2, 1, 1),
      make("n1 16x9x9 3x3 s2 p1 d1x2", 1, 16, 9, 9, 3, 3, 2, 2, 1, 2, 1, 2),
      make("n1 16x7x17 5x5 s2 p1x0 (asym)", 1, 16, 7, 17, 5, 5, 2, 2, 1, 0),
      make("n1 16x12x12 5x5 s3 p2 (stride 3)", 1, 16, 12, 12, 5, 5, 3, 3, 2, 2),
      make("n1 16x9x9 9x9 s1 p4 (9x9)", 1, 16, 9, 9, 9, 9, 1, 1, 4, 4),
      make("n1 8x20x20 11x11 s1 p5 (generic filter, 121 taps)", 1, 8, 20, 20, 11, 11, 1, 1, 5, 5),
      make("n2 40x6x6 3x3 s1 p1 wCL", 2, 40, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, L::kChannelsLast),
      make("n2 40x7x7 5x5 s2 p2 wRSC", 2, 40, 7, 7, 5, 5, 2, 2, 2, 2, 1, 1, L::kTapsFirst),
      make("n2 12x7x9 3x3 s2 p1 wRSC (12 ch)", 2, 12, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, L::kTapsFirst),
      make("n1 520x5x5 3x3 s1 p1 (many tiles)", 1, 520, 5, 5, 3, 3, 1, 1, 1, 1),
      make("n4 64x15x15 7x7 s1 p3", 4, 64, 15, 15, 7, 7, 1, 1, 3, 3),
      make("n3 48x23x21 3x3 s2 p1", 3, 48, 23, 21, 3, 3, 2, 2, 1, 1),
      // The tensor-core kernels' geometry (7x7 from 28 output columns, and the
      // 5x5 filter gradient from 28): two images a block (the last alone),
      // several bands and column chunks, a pad below the window's half, an odd
      // row count (the filter gradient's last band half empty).
      make("n3 16x7x30 7x7 s1 p3 (images)", 3, 16, 7, 30, 7, 7, 1, 1, 3, 3),
      make("n1 8x35x70 7x7 s1 p2 (bands, chunks)", 1, 8, 35, 70, 7, 7, 1, 1, 2, 2),
      make("n2 16x21x32 5x5 s1 p1", 2, 16, 21, 32, 5, 5, 1, 1, 1, 1),
  };
}

}  // namespace dwref
