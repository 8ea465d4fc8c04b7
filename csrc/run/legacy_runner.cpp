#include "run/legacy_runner.h"

#include "base/cudnn_handle.h"
#include "base/legacy_algorithms.h"
#include "run/runner_cache.h"

#include <ATen/cudnn/Descriptors.h>
#include <ATen/cudnn/Types.h>

#include <limits>

namespace torch_cudnn_algo {
namespace {

struct LegacyRunner final : Runner {
  at::native::TensorDescriptor x_desc;  // cuDNN forward input  (dx for bwd-data)
  at::native::FilterDescriptor w_desc;  // filter               (dw for bwd-filter)
  at::native::TensorDescriptor y_desc;  // cuDNN forward output (dy for backward)
  at::native::ConvolutionDescriptor conv_desc;

  void run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
           void* workspace) const override;
};

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

std::array<int, kMaxDims> to_int(at::IntArrayRef values) {
  std::array<int, kMaxDims> out{};
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = static_cast<int>(values[i]);
  }
  return out;
}

// The legacy API describes tensors with 32-bit sizes and strides.
bool fits_int32(const ConvKey& key) {
  for (const auto sizes : {key.input(), key.weight(), key.output()}) {
    if (c10::multiply_integers(sizes) > kInt32Max) return false;
  }
  return true;
}

void set_tensor_desc(at::native::TensorDescriptor& desc, cudnnDataType_t dtype,
                     at::IntArrayRef sizes, at::MemoryFormat format) {
  const auto sizes32 = to_int(sizes);
  const auto strides32 = to_int(canonical_strides(sizes, format));
  TORCH_CUDNN_ALGO_CHECK(cudnnSetTensorNdDescriptor(desc.mut_desc(), dtype,
                                                    static_cast<int>(sizes.size()),
                                                    sizes32.data(), strides32.data()));
}

void set_filter_desc(at::native::FilterDescriptor& desc, cudnnDataType_t dtype,
                     at::IntArrayRef sizes, at::MemoryFormat format) {
  // For filters, cuDNN's NHWC also means NDHWC for 5-d.
  const cudnnTensorFormat_t filter_format =
      format == at::MemoryFormat::Contiguous ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  const auto sizes32 = to_int(sizes);
  TORCH_CUDNN_ALGO_CHECK(cudnnSetFilterNdDescriptor(desc.mut_desc(), dtype, filter_format,
                                                    static_cast<int>(sizes.size()),
                                                    sizes32.data()));
}

// Math type set on the descriptor, so the pinned algorithm computes what the user
// allowed: fp32 uses TF32 tensor cores only when allow_tf32 is on (FMA otherwise);
// fp16/bf16 may use tensor cores but never down-convert.
cudnnMathType_t math_type(const ConvKey& key) {
  switch (key.scalar_type()) {
    case at::kHalf:
    case at::kBFloat16:
      return CUDNN_TENSOR_OP_MATH;
    case at::kFloat:
      return key.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    default:
      return CUDNN_DEFAULT_MATH;
  }
}

void set_conv_desc(at::native::ConvolutionDescriptor& desc, const ConvKey& key) {
  const int spatial = key.dim - 2;
  std::array<int, kMaxSpatialDims> padding{}, stride{}, dilation{};
  for (int i = 0; i < spatial; ++i) {
    padding[i] = static_cast<int>(key.padding[i]);
    stride[i] = static_cast<int>(key.stride[i]);
    dilation[i] = static_cast<int>(key.dilation[i]);
  }
  // Half and bfloat16 accumulate in float (cuDNN's PSEUDO_HALF/PSEUDO_BFLOAT16 configs).
  const cudnnDataType_t compute =
      key.scalar_type() == at::kDouble ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  TORCH_CUDNN_ALGO_CHECK(cudnnSetConvolutionNdDescriptor(desc.mut_desc(), spatial, padding.data(),
                                                         stride.data(), dilation.data(),
                                                         CUDNN_CROSS_CORRELATION, compute));
  TORCH_CUDNN_ALGO_CHECK(
      cudnnSetConvolutionGroupCount(desc.mut_desc(), static_cast<int>(key.groups)));
  TORCH_CUDNN_ALGO_CHECK(cudnnSetConvolutionMathType(desc.mut_desc(), math_type(key)));
}

// Name of the workspace query of a direction, for error messages.
const char* workspace_query_name(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return "cudnnGetConvolutionForwardWorkspaceSize";
    case Direction::kBackwardData:
      return "cudnnGetConvolutionBackwardDataWorkspaceSize";
    case Direction::kBackwardFilter:
      return "cudnnGetConvolutionBackwardFilterWorkspaceSize";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

cudnnStatus_t query_workspace(cudnnHandle_t handle, const LegacyRunner& runner, int algo,
                              size_t* bytes) {
  switch (runner.key.dir()) {
    case Direction::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(
          handle, runner.x_desc.desc(), runner.w_desc.desc(), runner.conv_desc.desc(),
          runner.y_desc.desc(), static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Direction::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, runner.w_desc.desc(), runner.y_desc.desc(), runner.conv_desc.desc(),
          runner.x_desc.desc(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Direction::kBackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, runner.x_desc.desc(), runner.y_desc.desc(), runner.conv_desc.desc(),
          runner.w_desc.desc(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

// Asks cuDNN whether `algo` supports the runner's problem: NOT_SUPPORTED means
// "cannot run"; any other failure is a bug worth surfacing.
std::optional<size_t> supported_workspace(cudnnHandle_t handle, const LegacyRunner& runner,
                                          int algo) {
  size_t bytes = 0;
  const cudnnStatus_t status = query_workspace(handle, runner, algo, &bytes);
  if (status == CUDNN_STATUS_SUCCESS) return bytes;
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return std::nullopt;
  TORCH_CHECK(false, "torch_cudnn_algo: ", workspace_query_name(runner.key.dir()),
              "(algo=", algo, ") returned ", cudnnGetErrorString(status), " for ",
              describe_conv(runner.key));
}

std::shared_ptr<LegacyRunner> build_runner(const ConvKey& key) {
  auto runner = std::make_shared<LegacyRunner>();
  runner->key = key;
  const Direction direction = key.dir();
  runner->choice = describe_legacy_algo(direction, key.algo);
  TORCH_INTERNAL_ASSERT(legacy_algo_is_implemented(direction, key.algo));
  if (!fits_int32(key)) {
    runner->refusal =
        "a tensor has more than 2^31-1 elements, beyond cuDNN's 32-bit legacy descriptors";
    return runner;
  }
  const cudnnDataType_t dtype = at::native::getCudnnDataTypeFromScalarType(key.scalar_type());
  set_tensor_desc(runner->x_desc, dtype, key.input(), key.format());
  set_filter_desc(runner->w_desc, dtype, key.weight(), key.format());
  set_tensor_desc(runner->y_desc, dtype, key.output(), key.format());
  set_conv_desc(runner->conv_desc, key);

  const cudnnHandle_t handle = current_cudnn_handle();
  if (key.deterministic && !legacy_algo_is_deterministic(direction, key.algo)) {
    runner->refused_by_rule = true;
    runner->refusal =
        "it is non-deterministic and deterministic algorithms are required "
        "(torch.backends.cudnn.deterministic or torch.use_deterministic_algorithms)";
  } else if (const auto bytes = supported_workspace(handle, *runner, key.algo)) {
    runner->workspace_bytes = *bytes;
    return runner;
  } else {
    runner->refusal = std::string("cuDNN does not support it for this convolution (") +
                    workspace_query_name(direction) + " returned CUDNN_STATUS_NOT_SUPPORTED)";
  }
  for (int algo = 0; algo < legacy_algo_count(direction); ++algo) {
    if (legacy_algo_is_implemented(direction, algo) &&
        (!key.deterministic || legacy_algo_is_deterministic(direction, algo)) &&
        supported_workspace(handle, *runner, algo)) {
      runner->alternatives.push_back(describe_legacy_algo(direction, algo));
    }
  }
  return runner;
}

RunnerCache<ConvKey, ConvKeyHash>& legacy_cache() {
  static auto* cache = new RunnerCache<ConvKey, ConvKeyHash>();  // leaked: see RunnerCache
  return *cache;
}

// cuDNN's scaling factors are host values of the compute type.
struct Scaling {
  explicit Scaling(at::ScalarType dtype) : is_double(dtype == at::kDouble) {}
  const void* one() const { return is_double ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return is_double ? static_cast<const void*>(&zero_d) : &zero_f; }
  bool is_double;
  float one_f = 1.f, zero_f = 0.f;
  double one_d = 1.0, zero_d = 0.0;
};

}  // namespace

void LegacyRunner::run(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                     void* workspace) const {
  TORCH_INTERNAL_ASSERT(refusal.empty(), "running a refused runner: ", refusal);
  TORCH_INTERNAL_ASSERT(workspace != nullptr || workspace_bytes == 0);
  const cudnnHandle_t handle = current_cudnn_handle();
  const Scaling scaling(key.scalar_type());
  switch (key.dir()) {
    case Direction::kForward:  // a = x, b = w, out = y
      TORCH_CUDNN_ALGO_CHECK(cudnnConvolutionForward(
          handle, scaling.one(), x_desc.desc(), a.const_data_ptr(), w_desc.desc(),
          b.const_data_ptr(), conv_desc.desc(), static_cast<cudnnConvolutionFwdAlgo_t>(key.algo),
          workspace, workspace_bytes, scaling.zero(), y_desc.desc(), out.data_ptr()));
      return;
    case Direction::kBackwardData:  // a = dy, b = w, out = dx
      TORCH_CUDNN_ALGO_CHECK(cudnnConvolutionBackwardData(
          handle, scaling.one(), w_desc.desc(), b.const_data_ptr(), y_desc.desc(),
          a.const_data_ptr(), conv_desc.desc(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(key.algo), workspace, workspace_bytes,
          scaling.zero(), x_desc.desc(), out.data_ptr()));
      return;
    case Direction::kBackwardFilter:  // a = x, b = dy, out = dw
      TORCH_CUDNN_ALGO_CHECK(cudnnConvolutionBackwardFilter(
          handle, scaling.one(), x_desc.desc(), a.const_data_ptr(), y_desc.desc(),
          b.const_data_ptr(), conv_desc.desc(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(key.algo), workspace, workspace_bytes,
          scaling.zero(), w_desc.desc(), out.data_ptr()));
      return;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown direction");
}

std::shared_ptr<const Runner> get_legacy_runner(const ConvKey& key, bool* created) {
  return legacy_cache().get(key, created, [&] { return build_runner(key); });
}

void clear_legacy_runners() {
  legacy_cache().clear();
}

size_t legacy_runner_count() {
  return legacy_cache().size();
}

std::optional<size_t> legacy_workspace_size(const ConvKey& key) {
  auto runner = build_runner(key);
  if (!runner->refusal.empty()) return std::nullopt;
  return runner->workspace_bytes;
}

}  // namespace torch_cudnn_algo
