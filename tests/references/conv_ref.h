// What the float64 host references of our kernels share (depthwise_ref.h,
// grouped_ref.h): output extents, a convolution shape's geometry from a test
// case, the forward taps of one output pixel, and work spread over all cores.
// Plain C++, used by the GPU check programs and the host emulation alike.
#pragma once

#include "kernels/direct_conv.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

namespace convref {

using torch_cudnn_algo::kernels::DirectConvShape;

inline int64_t out_extent(int64_t in, int64_t pad, int64_t dil, int64_t ker, int64_t stride) {
  return (in + 2 * pad - dil * (ker - 1) - 1) / stride + 1;
}

// A channels_last shape's sizes, strides, padding and dilation from a test case
// (fields n, c, h, w, r, s, sh, sw, ph, pw, dh, dw); the caller sets k, groups
// and the weight's strides.
template <typename Case>
DirectConvShape geometry_of(const Case& t) {
  DirectConvShape s;
  s.n = t.n; s.c = t.c; s.h = t.h; s.w = t.w;
  s.r = t.r; s.s = t.s;
  s.p = out_extent(t.h, t.ph, t.dh, t.r, t.sh);
  s.q = out_extent(t.w, t.pw, t.dw, t.s, t.sw);
  s.stride_h = t.sh; s.stride_w = t.sw; s.pad_h = t.ph; s.pad_w = t.pw;
  s.dilation_h = t.dh; s.dilation_w = t.dw;
  s.channels_last = true;
  return s;
}

// The strides of a dense weight [k, c / groups, r, s] (shape's k, c, groups, r,
// s set): in that order, or channels_last ([k, r, s, c / groups] in memory).
inline void set_weight_strides(DirectConvShape& shape, bool channels_last) {
  const int64_t cpg = shape.c / shape.groups;
  int64_t* ws = shape.weight_strides;
  if (channels_last) {
    ws[0] = shape.r * shape.s * cpg; ws[1] = 1; ws[2] = shape.s * cpg; ws[3] = cpg;
  } else {
    ws[0] = cpg * shape.r * shape.s; ws[1] = shape.r * shape.s; ws[2] = shape.s; ws[3] = 1;
  }
}

// How an output compares with its float64 reference: the elements off by more
// than their tolerance (NaN among them: an element never written keeps its NaN
// prefill), and the largest error / tolerance among the rest.
struct Comparison {
  int64_t bad = 0;
  double worst = 0;
};

// got(i) is element i of the output as double, tolerance(i) the error it may
// have; the first three misses are printed.
template <typename Got, typename Tolerance>
Comparison compare_with_reference(const std::vector<double>& ref, Got&& got, Tolerance&& tolerance) {
  Comparison c;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double value = got(i), tol = tolerance(i), err = std::fabs(value - ref[i]);
    if (!(err <= tol)) {
      if (c.bad < 3) std::printf("   at %zu got %g want %g\n", i, value, ref[i]);
      ++c.bad;
    } else {
      c.worst = std::max(c.worst, err / tol);
    }
  }
  return c;
}

// Calls body(r, ss, ih, iw) for every filter tap of output pixel (p, q) whose
// input pixel (ih, iw) lies inside the image (the forward's taps; the backward
// references scatter through the same ones).
template <typename Body>
void for_each_tap(const DirectConvShape& s, int64_t p, int64_t q, Body&& body) {
  for (int64_t r = 0; r < s.r; ++r) {
    const int64_t ih = p * s.stride_h - s.pad_h + r * s.dilation_h;
    if (ih < 0 || ih >= s.h) continue;
    for (int64_t ss = 0; ss < s.s; ++ss) {
      const int64_t iw = q * s.stride_w - s.pad_w + ss * s.dilation_w;
      if (iw >= 0 && iw < s.w) body(r, ss, ih, iw);
    }
  }
}

// Runs body(i) for i in [0, count) on all cores.
template <typename Body>
void parallel_for(int64_t count, Body body) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(count, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < workers; ++t)
    pool.emplace_back([=] {
      for (int64_t i = t; i < count; i += workers) body(i);
    });
  for (auto& th : pool) th.join();
}

}  // namespace convref
