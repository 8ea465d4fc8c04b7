#include "ops/conv_argument.h"

#include "base/legacy_algorithms.h"
#include "decide/choice.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

#include <initializer_list>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

const std::unordered_map<std::string, at::ScalarType>& dtypes() {
  static const auto* map = new std::unordered_map<std::string, at::ScalarType>{
      {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat}, {"float64", at::kDouble}};
  return *map;
}

const std::unordered_map<std::string, at::MemoryFormat>& memory_formats() {
  static const auto* map = new std::unordered_map<std::string, at::MemoryFormat>{
      {"contiguous", at::MemoryFormat::Contiguous},
      {"channels_last", at::MemoryFormat::ChannelsLast},
      {"channels_last_3d", at::MemoryFormat::ChannelsLast3d}};
  return *map;
}

template <typename T>
T field(const nlohmann::json& object, const char* name) {
  try {
    return object.at(name).get<T>();
  } catch (const nlohmann::json::exception& error) {
    TORCH_CHECK_VALUE(false, "torch_cudnn_algo: the convolution's \"", name, "\" is missing or malformed (",
                      error.what(), ")");
  }
  return T{};
}

template <typename Map>
auto lookup(const Map& map, const std::string& value, const char* name) {
  const auto it = map.find(value);
  TORCH_CHECK_VALUE(it != map.end(), "torch_cudnn_algo: the convolution's ", name, " '", value,
                    "' is none of those cuDNN convolves");
  return it->second;
}

}  // namespace

ConvArgument parse_conv_argument(const std::string& json) {
  const auto object = nlohmann::json::parse(json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK_VALUE(object.is_object(), "torch_cudnn_algo: a convolution is a JSON object, got ", json);
  ConvArgument conv;
  conv.direction = field<std::string>(object, "direction");
  const auto options = at::TensorOptions()
                           .dtype(lookup(dtypes(), field<std::string>(object, "dtype"), "dtype"))
                           .device(at::kMeta);
  const auto format = lookup(memory_formats(), field<std::string>(object, "memory_format"), "memory format");
  conv.input = at::empty(field<std::vector<int64_t>>(object, "input"), options, format);
  conv.weight = at::empty(field<std::vector<int64_t>>(object, "weight"), options, format);
  conv.padding = field<std::vector<int64_t>>(object, "padding");
  conv.stride = field<std::vector<int64_t>>(object, "stride");
  conv.dilation = field<std::vector<int64_t>>(object, "dilation");
  conv.groups = field<int64_t>(object, "groups");
  conv.transposed = field<bool>(object, "transposed");
  conv.output_padding = field<std::vector<int64_t>>(object, "output_padding");
  return conv;
}

ConvKey user_conv_key(const ConvArgument& conv, int64_t algo, bool deterministic, bool allow_tf32,
                      std::optional<at::Device> device) {
  const std::string& direction = conv.direction;
  const at::Tensor& input = conv.input;
  const at::Tensor& weight = conv.weight;
  const at::IntArrayRef padding = conv.padding, stride = conv.stride, dilation = conv.dilation,
                        output_padding = conv.output_padding;
  const int64_t groups = conv.groups;
  const bool transposed = conv.transposed;
  const Direction dir = parse_direction(direction);
  TORCH_CHECK_VALUE(algo >= 0 && algo < legacy_algo_count(dir), "torch_cudnn_algo: ", direction,
                    " legacy algorithm must be in [0, ", legacy_algo_count(dir), "), got ", algo);
  TORCH_CHECK_VALUE(input.dim() != 3,
                    "torch_cudnn_algo: describe a 1-d convolution as 2-d [N, C, 1, L]");
  const auto format = stock_conv_memory_format(input, weight);
  if (!transposed) {
    check_conv_arguments(input, weight, padding, stride, dilation, groups);
    const ConvProblem problem{input.sizes(), weight.sizes(), padding, stride, dilation, groups};
    return make_conv_key(dir, static_cast<int>(algo), problem, input.scalar_type(),
                         device.value_or(input.device()), deterministic, allow_tf32, format);
  }
  check_transposed_arguments(input, weight, padding, output_padding, stride, dilation, groups);
  const auto x_sizes = conv_transpose_output_sizes(input.sizes(), weight.sizes(), padding,
                                                   output_padding, stride, dilation, groups);
  const ConvProblem problem{at::IntArrayRef(x_sizes.data(), input.dim()), weight.sizes(), padding,
                            stride, dilation, groups, /*transposed=*/true, output_padding};
  return make_conv_key(dir, static_cast<int>(algo), problem, input.scalar_type(),
                       device.value_or(input.device()), deterministic, allow_tf32, format);
}

at::Device query_device(const at::Tensor& input, const char* op) {
  TORCH_CHECK(input.is_cuda() || input.is_meta(), "torch_cudnn_algo: ", op,
              " needs CUDA or meta tensors, got ", input.device());
  return input.is_meta() ? at::Device(at::kCUDA, c10::cuda::current_device()) : input.device();
}

ConvKey candidate_key(Direction dir, const at::Tensor& a, const at::Tensor& b,
                      const at::Tensor& out, at::IntArrayRef padding, at::IntArrayRef stride,
                      at::IntArrayRef dilation, int64_t groups, bool deterministic,
                      bool allow_tf32) {
  const at::Tensor& x = dir == Direction::kBackwardData ? out : a;
  const at::Tensor& w = dir == Direction::kBackwardFilter ? out : b;
  const at::Tensor& y = dir == Direction::kForward ? out : dir == Direction::kBackwardData ? a : b;
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && y.is_cuda(),
              "torch_cudnn_algo: run_candidate needs CUDA tensors");
  TORCH_CHECK(x.dim() == 4 || x.dim() == 5,
              "torch_cudnn_algo: run_candidate takes the 4-d or 5-d cuDNN problem, got x of shape ",
              x.sizes());
  TORCH_CHECK(is_cudnn_float_type(x.scalar_type()), "torch_cudnn_algo: run_candidate: cuDNN "
              "does not convolve ", x.scalar_type());
  check_conv_arguments(x, w, padding, stride, dilation, groups);
  const auto y_sizes = conv_output_sizes(x.sizes(), w.sizes(), padding, stride, dilation);
  TORCH_CHECK(y.sizes() == at::IntArrayRef(y_sizes.data(), x.dim()) &&
                  y.scalar_type() == x.scalar_type() && y.device() == x.device(),
              "torch_cudnn_algo: run_candidate: y must be ", x.scalar_type(), " of shape ",
              at::IntArrayRef(y_sizes.data(), x.dim()), " on ", x.device(), ", got ",
              y.scalar_type(), " ", y.sizes(), " on ", y.device());
  const at::MemoryFormat format = stock_conv_memory_format(x, w);
  for (const at::Tensor* t : {&a, &b, &out}) {
    TORCH_CHECK(t->is_contiguous(format), "torch_cudnn_algo: run_candidate: operands must be "
                "contiguous in ", format, " (the layout of x and w)");
  }
  const ConvProblem problem{x.sizes(), w.sizes(), padding, stride, dilation, groups};
  return make_conv_key(dir, kNoChoice, problem, x.scalar_type(), x.device(), deterministic,
                       allow_tf32, format);
}

}  // namespace torch_cudnn_algo
