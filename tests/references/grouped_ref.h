// Float64 host references for grouped convolutions (NHWC, a weight in its
// standard or channels_last layout), shared by the check program
// grouped_mma_check.cu (GPU) and the host emulation of grouped_mma.cu
// (tests/emulation). Plain C++, written the straightforward way: the forward
// sum, and backward data as a scatter of every dy element through the forward
// taps, independent of the kernel's gather formula.
#pragma once

#include "conv_ref.h"
#include "kernels/direct_conv.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace groupedref {

using torch_cudnn_algo::kernels::DirectConvShape;
using convref::for_each_tap;
using convref::out_extent;

template <typename Case>
DirectConvShape shape_of(const Case& t) {
  DirectConvShape s = convref::geometry_of(t);
  s.k = t.k;
  s.groups = t.groups;
  convref::set_weight_strides(s, t.weight_channels_last);
  return s;
}

// y[n, p, q, k] = sum x[n, p*sh-ph+r*dh, q*sw-pw+s*dw, g*cpg_in+ci] * w[k, ci, r, s]
inline void reference_forward(const DirectConvShape& s, const std::vector<float>& x, const std::vector<float>& wt,
                       std::vector<double>& y, std::vector<double>& y_abs) {
  const int64_t cpg_in = s.c / s.groups, cpg_out = s.k / s.groups;
  const int64_t* ws = s.weight_strides;
  y.assign(s.n * s.p * s.q * s.k, 0.0);
  y_abs.assign(y.size(), 0.0);
  convref::parallel_for(s.n, [&](int64_t n) {
    for (int64_t p = 0; p < s.p; ++p)
      for (int64_t q = 0; q < s.q; ++q)
        for (int64_t k = 0; k < s.k; ++k) {
          const int64_t g = k / cpg_out;
          double acc = 0, acc_abs = 0;
          for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
            const float* xp = &x[((n * s.h + ih) * s.w + iw) * s.c + g * cpg_in];
            for (int64_t ci = 0; ci < cpg_in; ++ci) {
              const double prod = double(xp[ci]) * double(wt[k * ws[0] + ci * ws[1] + r * ws[2] + ss * ws[3]]);
              acc += prod;
              acc_abs += std::fabs(prod);
            }
          });
          const int64_t at = ((n * s.p + p) * s.q + q) * s.k + k;
          y[at] = acc;
          y_abs[at] = acc_abs;
        }
  });
}

// dx by scattering every dy element through the forward taps (independent of
// the kernel's gather formula): dx[n, p*sh-ph+r*dh, q*sw-pw+s*dw, g*cpg_in+ci] += dy[n, p, q, k] * w[k, ci, r, s]
inline void reference_backward_data(const DirectConvShape& s, const std::vector<float>& dy, const std::vector<float>& wt,
                             std::vector<double>& dx, std::vector<double>& dx_abs) {
  const int64_t cpg_in = s.c / s.groups, cpg_out = s.k / s.groups;
  const int64_t* ws = s.weight_strides;
  dx.assign(s.n * s.h * s.w * s.c, 0.0);
  dx_abs.assign(dx.size(), 0.0);
  convref::parallel_for(s.n, [&](int64_t n) {
    for (int64_t p = 0; p < s.p; ++p)
      for (int64_t q = 0; q < s.q; ++q)
        for (int64_t k = 0; k < s.k; ++k) {
          const int64_t g = k / cpg_out;
          const double grad = dy[((n * s.p + p) * s.q + q) * s.k + k];
          for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
            const int64_t base = ((n * s.h + ih) * s.w + iw) * s.c + g * cpg_in;
            for (int64_t ci = 0; ci < cpg_in; ++ci) {
              const double prod = grad * double(wt[k * ws[0] + ci * ws[1] + r * ws[2] + ss * ws[3]]);
              dx[base + ci] += prod;
              dx_abs[base + ci] += std::fabs(prod);
            }
          });
        }
  });
}

}  // namespace groupedref
