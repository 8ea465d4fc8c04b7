#include "run/direct_runner.h"

#include "base/conv_key.h"
#include "kernels/direct_conv.h"
#include "run/runner_cache.h"

#include <ATen/cuda/CUDAContext.h>

#include <string>

namespace torch_cudnn_algo {
namespace {

// Products one output element sums beyond which a convolution is dense enough
// that cuDNN's tensor-core kernels serve it better than a direct sum: the
// kernels are for depthwise, few-channel groups and one-channel sides.
constexpr int64_t kMaxProductsPerElement = 4096;

struct DirectRunner final : Runner {
  kernels::DirectLaunch launch;

  void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, void* workspace) const override {
#ifndef TORCH_CUDNN_ALGO_OWN_KERNELS
    TORCH_INTERNAL_ASSERT(false, "a build without its own kernels made a runnable ", kDirectKernelName, " runner");
#else
    const int code = kernels::launch_direct_conv(launch, a.const_data_ptr(), b.const_data_ptr(), out.data_ptr(),
                                                 workspace, at::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(code == 0, "torch_cudnn_algo: the ", kDirectKernelName, " kernel failed to launch: ",
                kernels::direct_conv_error_string(code), " (", describe_conv(key), ")");
#endif
  }
};

kernels::DirectDType direct_dtype(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return kernels::DirectDType::kHalf;
    case at::kBFloat16: return kernels::DirectDType::kBFloat16;
    case at::kDouble: return kernels::DirectDType::kDouble;
    default: return kernels::DirectDType::kFloat;
  }
}

kernels::DirectDirection direct_direction(Direction direction) {
  switch (direction) {
    case Direction::kForward: return kernels::DirectDirection::kForward;
    case Direction::kBackwardData: return kernels::DirectDirection::kBackwardData;
    case Direction::kBackwardFilter: return kernels::DirectDirection::kBackwardFilter;
  }
  return kernels::DirectDirection::kForward;
}

kernels::DirectConvShape direct_shape(const ConvKey& key) {
  kernels::DirectConvShape s;
  const auto x = key.input(), w = key.weight(), y = key.output();
  s.n = x[0]; s.c = x[1]; s.h = x[2]; s.w = x[3];
  s.k = y[1]; s.p = y[2]; s.q = y[3];
  s.r = w[2]; s.s = w[3];
  s.stride_h = key.stride[0]; s.stride_w = key.stride[1];
  s.pad_h = key.padding[0]; s.pad_w = key.padding[1];
  s.dilation_h = key.dilation[0]; s.dilation_w = key.dilation[1];
  s.groups = key.groups;
  s.channels_last = key.format() == at::MemoryFormat::ChannelsLast;
  const auto strides = canonical_strides(w, key.format());
  for (int i = 0; i < 4; ++i) s.weight_strides[i] = strides[i];
  return s;
}

// Products summed per output element of the direction that runs (per weight
// element's pixel, for the filter gradient).
int64_t products_per_element(const kernels::DirectConvShape& s, Direction direction) {
  if (direction == Direction::kBackwardData) {
    const int64_t taps_h = (s.r + s.stride_h - 1) / s.stride_h, taps_w = (s.s + s.stride_w - 1) / s.stride_w;
    return (s.k / s.groups) * taps_h * taps_w;
  }
  return (s.c / s.groups) * s.r * s.s;
}

// Why our kernels do not take `key`, before asking them: "" when they might.
std::string refusal_of(const ConvKey& key, const kernels::DirectConvShape& shape) {
  if (!own_kernels_built())
    return "this build leaves our kernels out (it was built with TORCH_CUDNN_ALGO_OWN_KERNELS=0; "
           "build without that setting to have them)";
  if (key.dim != 4) return "it runs 1-d and 2-d convolutions only (4-d tensors), not 3-d";
  const auto format = key.format();
  if (format != at::MemoryFormat::Contiguous && format != at::MemoryFormat::ChannelsLast)
    return "it runs NCHW and NHWC (channels_last) tensors only";
  const int64_t products = products_per_element(shape, key.dir());
  if (products > kMaxProductsPerElement)
    return "each output sums over " + std::to_string(products) +
           " products (more than " + std::to_string(kMaxProductsPerElement) +
           "): a dense convolution, which cuDNN's kernels serve better";
  return "";
}

#ifdef TORCH_CUDNN_ALGO_OWN_KERNELS
// Why the kernels cannot run on `device` at all ("" when they can): a wheel
// built without machine code for its architecture and without PTX it can
// compile. Such a GPU has no "tca.direct" candidate; nothing launches there.
std::string image_refusal(int device) {
  const std::string problem = kernels::direct_conv_image_problem();
  if (problem.empty()) return "";
  const auto* properties = at::cuda::getDeviceProperties(device);
  const std::string capability = std::to_string(properties->major) + "." + std::to_string(properties->minor);
  return "this build's kernels have no code this GPU (compute capability " + capability + ") can run (" +
         problem + "); they were compiled for " + kernels::direct_conv_architectures() +
         ": build the package on this machine, or with TORCH_CUDA_ARCH_LIST=" + capability;
}
#endif

std::shared_ptr<const Runner> build_runner(const ConvKey& key) {
  auto runner = std::make_shared<DirectRunner>();
  runner->key = key;
  runner->choice = kDirectKernelName;
  const kernels::DirectConvShape shape = direct_shape(key);
  runner->refusal = refusal_of(key, shape);
#ifdef TORCH_CUDNN_ALGO_OWN_KERNELS
  if (runner->refusal.empty()) runner->refusal = image_refusal(key.device);
  if (runner->refusal.empty()) {
    runner->launch = kernels::prepare_direct_conv(shape, direct_dtype(key.scalar_type()), direct_direction(key.dir()),
                                                  at::cuda::getDeviceProperties(key.device)->multiProcessorCount);
    runner->refusal = runner->launch.refusal;
    runner->workspace_bytes = runner->launch.workspace_bytes;
  }
#endif
  return runner;
}

RunnerCache<ConvKey, ConvKeyHash>& direct_cache() {
  static auto* cache = new RunnerCache<ConvKey, ConvKeyHash>();
  return *cache;
}

}  // namespace

bool own_kernels_built() {
#ifdef TORCH_CUDNN_ALGO_OWN_KERNELS
  return true;
#else
  return false;
#endif
}

std::shared_ptr<const Runner> get_direct_runner(const ConvKey& key, bool* created) {
  return direct_cache().get(key, created, [&] { return build_runner(key); });
}

void clear_direct_runners() {
  direct_cache().clear();
}

size_t direct_runner_count() {
  return direct_cache().size();
}

}  // namespace torch_cudnn_algo
