// The tuner's operands and accuracy check: random operands of the cuDNN
// problem in the key's layout, stock PyTorch's float64 result on them, and
// the relative error a pick is held to.
#include "decide/tuner/fastest_tuner.h"
#include "decide/tuner/tuner.h"

#include "base/cudnn_handle.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>

#include <cmath>

namespace torch_cudnn_algo {
namespace tuner {
namespace {

std::vector<int64_t> spatial(const std::array<int64_t, kMaxSpatialDims>& values, const ConvKey& key) {
  return {values.begin(), values.begin() + (key.dim - 2)};
}

}  // namespace

Operands make_operands(const ConvKey& key) {
  const auto options = at::TensorOptions()
                           .dtype(key.scalar_type())
                           .device(at::kCUDA, static_cast<c10::DeviceIndex>(key.device))
                           .memory_format(key.format());
  Operands o;
  o.x = at::empty(key.input(), options).normal_();
  o.w = at::empty(key.weight(), options).normal_();
  o.y = at::empty(key.output(), options).normal_();
  switch (key.dir()) {
    case Direction::kForward:
      o.a = o.x, o.b = o.w, o.out = allocate_output(key.output(), options);
      break;
    case Direction::kBackwardData:
      o.a = o.y, o.b = o.w, o.out = allocate_output(key.input(), options);
      break;
    case Direction::kBackwardFilter:
      o.a = o.x, o.b = o.y, o.out = allocate_output(key.weight(), options);
      break;
  }
  return o;
}

at::Tensor float64_reference(const ConvKey& key, const Operands& o) {
  const auto x = o.x.to(at::kDouble), w = o.w.to(at::kDouble), y = o.y.to(at::kDouble);
  const auto stride = spatial(key.stride, key), padding = spatial(key.padding, key),
             dilation = spatial(key.dilation, key);
  const std::vector<int64_t> zeros(key.dim - 2, 0);
  if (key.dir() == Direction::kForward) {
    return at::convolution(x, w, std::nullopt, stride, padding, dilation, false, zeros, key.groups);
  }
  const bool data = key.dir() == Direction::kBackwardData;
  auto grads = at::convolution_backward(y, x, w, std::nullopt, stride, padding, dilation, false,
                                        zeros, key.groups, {data, !data, false});
  return data ? std::get<0>(grads) : std::get<1>(grads);
}

double max_relative_error(const at::Tensor& out, const at::Tensor& reference) {
  const double scale = reference.abs().max().item().toDouble();
  const double error = out.to(at::kDouble).sub(reference).abs().max().item().toDouble();
  if (std::isnan(error)) return std::numeric_limits<double>::infinity();
  return scale > 0 ? error / scale : error;
}

}  // namespace tuner


double tuner_tolerance(at::ScalarType dtype, bool allow_tf32) {
  switch (dtype) {
    case at::kHalf: return 1e-2;
    case at::kBFloat16: return 5e-2;
    case at::kDouble: return 1e-10;
    default: return allow_tf32 ? 1e-2 : 1e-4;
  }
}

}  // namespace torch_cudnn_algo
