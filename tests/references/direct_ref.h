// Float64 host references for any convolution our general kernels run
// (csrc/kernels/direct_conv.cu): x and y in NCHW or NHWC, any groups, a weight
// at any strides, all three directions. Plain C++, written the straightforward
// way (the forward sum; backward data as a scatter of every dy element through
// the forward taps; the filter gradient as the sum over every output pixel),
// independent of the kernels' formulas. Used by the host emulation of
// direct_conv.cu (tests/emulation).
#pragma once

#include "conv_ref.h"
#include "kernels/direct_conv.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace directref {

using torch_cudnn_algo::kernels::DirectConvShape;
using convref::for_each_tap;

// Offset of element (n, c, y, x) of a [n, channels, height, width] tensor in
// the shape's layout.
inline int64_t at(const DirectConvShape& s, int64_t channels, int64_t height, int64_t width, int64_t n, int64_t c,
                  int64_t y, int64_t x) {
  return s.channels_last ? ((n * height + y) * width + x) * channels + c : ((n * channels + c) * height + y) * width + x;
}

inline int64_t weight_at(const DirectConvShape& s, int64_t k, int64_t ci, int64_t r, int64_t ss) {
  const int64_t* ws = s.weight_strides;
  return k * ws[0] + ci * ws[1] + r * ws[2] + ss * ws[3];
}

// Calls body(n, k, p, q, ci, r, ss, ih, iw) for every product of the forward
// sum: output (n, k, p, q) through tap (ci of k's group, r, ss) from input
// pixel (ih, iw) of channel group(k) * cpg_in + ci. Runs images in parallel.
template <typename Body>
void for_each_product(const DirectConvShape& s, Body&& body) {
  const int64_t cpg_in = s.c / s.groups, cpg_out = s.k / s.groups;
  convref::parallel_for(s.n, [&](int64_t n) {
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t p = 0; p < s.p; ++p)
        for (int64_t q = 0; q < s.q; ++q)
          for_each_tap(s, p, q, [&](int64_t r, int64_t ss, int64_t ih, int64_t iw) {
            for (int64_t ci = 0; ci < cpg_in; ++ci) body(n, k, p, q, (k / cpg_out) * cpg_in + ci, ci, r, ss, ih, iw);
          });
  });
}

// The output of `direction` (0 forward -> y, 1 backward data -> dx, 2 backward
// filter -> dweight at the weight's strides, over its span) and the sums of
// absolute products per element (the scale of its rounding error). x, w, dy as
// floats in the shape's layouts.
inline void reference(const DirectConvShape& s, int direction, const std::vector<float>& x,
                      const std::vector<float>& w, const std::vector<float>& dy, std::vector<double>& out,
                      std::vector<double>& out_abs) {
  if (direction != 2) {
    // Forward: y[n, k, p, q] += x * w. Backward data, the scatter: dx[n, c, ih, iw] += dy * w.
    // Either way images in parallel write disjoint parts of the output.
    const bool forward = direction == 0;
    out.assign(forward ? s.n * s.k * s.p * s.q : s.n * s.c * s.h * s.w, 0.0);
    out_abs.assign(out.size(), 0.0);
    for_each_product(s, [&](int64_t n, int64_t k, int64_t p, int64_t q, int64_t c, int64_t ci, int64_t r,
                            int64_t ss, int64_t ih, int64_t iw) {
      const int64_t xo = at(s, s.c, s.h, s.w, n, c, ih, iw), yo = at(s, s.k, s.p, s.q, n, k, p, q);
      const double prod = double(forward ? x[xo] : dy[yo]) * double(w[weight_at(s, k, ci, r, ss)]);
      const int64_t o = forward ? yo : xo;
      out[o] += prod;
      out_abs[o] += std::fabs(prod);
    });
  } else {
    // Images write the same weight elements: one sum per image, added after.
    const int64_t span = weight_at(s, s.k - 1, s.c / s.groups - 1, s.r - 1, s.s - 1) + 1;
    std::vector<std::vector<double>> per_image(s.n, std::vector<double>(span, 0.0)), per_image_abs = per_image;
    for_each_product(s, [&](int64_t n, int64_t k, int64_t p, int64_t q, int64_t c, int64_t ci, int64_t r,
                            int64_t ss, int64_t ih, int64_t iw) {
      const double prod = double(x[at(s, s.c, s.h, s.w, n, c, ih, iw)]) * double(dy[at(s, s.k, s.p, s.q, n, k, p, q)]);
      per_image[n][weight_at(s, k, ci, r, ss)] += prod;
      per_image_abs[n][weight_at(s, k, ci, r, ss)] += std::fabs(prod);
    });
    out.assign(span, 0.0);
    out_abs.assign(span, 0.0);
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t e = 0; e < span; ++e) {
        out[e] += per_image[n][e];
        out_abs[e] += per_image_abs[n][e];
      }
  }
}

}  // namespace directref
