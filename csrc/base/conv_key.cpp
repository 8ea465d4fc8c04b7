#include "base/conv_key.h"

#include "base/legacy_algorithms.h"

#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>
#include <cudnn_frontend/thirdparty/nlohmann/json.hpp>

#include <cstring>
#include <sstream>

namespace torch_cudnn_algo {

ConvKey::ConvKey() {
  // Zero everything, padding bytes included: hashing and equality are bytewise.
  std::memset(static_cast<void*>(this), 0, sizeof(*this));
}

bool ConvKey::operator==(const ConvKey& other) const {
  return std::memcmp(this, &other, sizeof(ConvKey)) == 0;
}

size_t hash_key_words(const void* key, size_t bytes) {
  // Word-wise multiply-xorshift over the (zero-padded) key: on every call, so
  // 8 bytes per step rather than FNV's one.
  TORCH_INTERNAL_ASSERT(bytes % sizeof(uint64_t) == 0, "keys are hashed in 8-byte words");
  const auto* data = static_cast<const unsigned char*>(key);
  uint64_t hash = 0x9E3779B97F4A7C15ull;
  for (size_t offset = 0; offset < bytes; offset += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, data + offset, sizeof(word));
    hash = (hash ^ word) * 0xBF58476D1CE4E5B9ull;
    hash ^= hash >> 31;
  }
  return static_cast<size_t>(hash);
}

static_assert(sizeof(ConvKey) % sizeof(uint64_t) == 0, "ConvKey is hashed in 8-byte words");

namespace {

bool all_at_least(at::IntArrayRef values, int64_t minimum) {
  for (const auto v : values) {
    if (v < minimum) return false;
  }
  return true;
}

const char* torch_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    default:
      return c10::toString(dtype);
  }
}

std::string python_tuple(at::IntArrayRef values) {
  // (1, 2) for several values, (1,) for one: valid Python either way.
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i > 0 ? ", " : "") << values[i];
  }
  out << (values.size() == 1 ? ",)" : ")");
  return out.str();
}

// Checks every convolution op shares: ranks, devices, dtypes and groups.
// Returns the number of spatial dimensions.
size_t check_operands(const char* op, const at::Tensor& input, const at::Tensor& weight,
                      int64_t groups) {
  const int64_t dim = input.dim();
  TORCH_CHECK(dim >= 3 && dim <= 5, "torch_cudnn_algo: ", op, " expects a 3-d, 4-d or 5-d "
              "input (N, C, *spatial), got ", dim, "-d input of shape ", input.sizes());
  TORCH_CHECK(weight.dim() == dim, "torch_cudnn_algo: weight must have the input's ", dim,
              " dimensions, got weight of shape ", weight.sizes());
  TORCH_CHECK(groups >= 1, "torch_cudnn_algo: groups must be >= 1, got ", groups);
  TORCH_CHECK(input.device() == weight.device(), "torch_cudnn_algo: input is on ",
              input.device(), " but weight is on ", weight.device());
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "torch_cudnn_algo: input is ",
              input.scalar_type(), " but weight is ", weight.scalar_type());
  return static_cast<size_t>(dim - 2);
}

}  // namespace

void check_conv_arguments(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef padding, at::IntArrayRef stride,
                          at::IntArrayRef dilation, int64_t groups) {
  const size_t spatial = check_operands("cudnn_convolution", input, weight, groups);
  const int64_t dim = input.dim();
  TORCH_CHECK(padding.size() == spatial && stride.size() == spatial && dilation.size() == spatial,
              "torch_cudnn_algo: padding, stride and dilation must each have ", spatial,
              " values for a ", dim, "-d input; got padding ", padding, ", stride ", stride,
              ", dilation ", dilation);
  TORCH_CHECK(all_at_least(stride, 1) && all_at_least(dilation, 1) && all_at_least(padding, 0),
              "torch_cudnn_algo: stride and dilation must be >= 1 and padding >= 0; got stride ",
              stride, ", dilation ", dilation, ", padding ", padding);
  TORCH_CHECK(input.size(1) == weight.size(1) * groups,
              "torch_cudnn_algo: input has ", input.size(1), " channels but weight of shape ",
              weight.sizes(), " with groups=", groups, " expects ", weight.size(1) * groups);
  TORCH_CHECK(weight.size(0) % groups == 0, "torch_cudnn_algo: weight's ", weight.size(0),
              " output channels are not divisible by groups=", groups);
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t padded = input.size(i + 2) + 2 * padding[i];
    const int64_t extent = dilation[i] * (weight.size(i + 2) - 1) + 1;
    TORCH_CHECK(padded >= extent, "torch_cudnn_algo: kernel extent ", extent,
                " (with dilation) exceeds the padded input size ", padded, " in spatial dim ", i);
  }
}

void check_transposed_arguments(const at::Tensor& input, const at::Tensor& weight,
                                at::IntArrayRef padding, at::IntArrayRef output_padding,
                                at::IntArrayRef stride, at::IntArrayRef dilation, int64_t groups) {
  const size_t spatial = check_operands("cudnn_convolution_transpose", input, weight, groups);
  const int64_t dim = input.dim();
  TORCH_CHECK(padding.size() == spatial && output_padding.size() == spatial &&
                  stride.size() == spatial && dilation.size() == spatial,
              "torch_cudnn_algo: padding, output_padding, stride and dilation must each have ",
              spatial, " values for a ", dim, "-d input; got padding ", padding,
              ", output_padding ", output_padding, ", stride ", stride, ", dilation ", dilation);
  TORCH_CHECK(all_at_least(stride, 1) && all_at_least(dilation, 1) && all_at_least(padding, 0) &&
                  all_at_least(output_padding, 0),
              "torch_cudnn_algo: stride and dilation must be >= 1, padding and output_padding "
              ">= 0; got stride ", stride, ", dilation ", dilation, ", padding ", padding,
              ", output_padding ", output_padding);
  for (size_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(output_padding[i] < std::max(stride[i], dilation[i]),
                "torch_cudnn_algo: output_padding must be smaller than stride or dilation, got "
                "output_padding ", output_padding, ", stride ", stride, ", dilation ", dilation);
  }
  TORCH_CHECK(input.size(1) == weight.size(0), "torch_cudnn_algo: input has ", input.size(1),
              " channels but the transposed weight of shape ", weight.sizes(), " expects ",
              weight.size(0));
  TORCH_CHECK(weight.size(0) % groups == 0, "torch_cudnn_algo: weight's ", weight.size(0),
              " input channels are not divisible by groups=", groups);
  const auto out = conv_transpose_output_sizes(input.sizes(), weight.sizes(), padding,
                                               output_padding, stride, dilation, groups);
  for (size_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(out[i + 2] >= 1, "torch_cudnn_algo: transposed convolution output size ",
                out[i + 2], " in spatial dim ", i, " is too small");
  }
}

std::array<int64_t, kMaxDims> conv_transpose_output_sizes(
    at::IntArrayRef input, at::IntArrayRef weight, at::IntArrayRef padding,
    at::IntArrayRef output_padding, at::IntArrayRef stride, at::IntArrayRef dilation,
    int64_t groups) {
  std::array<int64_t, kMaxDims> out{};
  out[0] = input[0];
  out[1] = weight[1] * groups;
  for (size_t i = 0; i + 2 < input.size(); ++i) {
    out[i + 2] = (input[i + 2] - 1) * stride[i] - 2 * padding[i] +
                 dilation[i] * (weight[i + 2] - 1) + output_padding[i] + 1;
  }
  return out;
}

std::array<int64_t, kMaxDims> conv_output_sizes(at::IntArrayRef input, at::IntArrayRef weight,
                                                at::IntArrayRef padding, at::IntArrayRef stride,
                                                at::IntArrayRef dilation) {
  std::array<int64_t, kMaxDims> out{};
  out[0] = input[0];
  out[1] = weight[0];
  for (size_t i = 0; i + 2 < input.size(); ++i) {
    const int64_t extent = dilation[i] * (weight[i + 2] - 1) + 1;
    out[i + 2] = (input[i + 2] + 2 * padding[i] - extent) / stride[i] + 1;
  }
  return out;
}

at::MemoryFormat stock_conv_memory_format(at::ScalarType dtype, int64_t dim, at::MemoryFormat a,
                                          at::MemoryFormat b) {
  if (dtype == at::kDouble || (dim != 4 && dim != 5)) {
    return at::MemoryFormat::Contiguous;
  }
  const auto channels_last =
      dim == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  return a == channels_last || b == channels_last ? channels_last : at::MemoryFormat::Contiguous;
}

at::MemoryFormat stock_conv_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  return stock_conv_memory_format(input.scalar_type(), weight.dim(), input.suggest_memory_format(),
                                  weight.suggest_memory_format());
}

c10::DimVector canonical_strides(at::IntArrayRef sizes, at::MemoryFormat format) {
  switch (format) {
    case at::MemoryFormat::ChannelsLast: {
      const auto strides = c10::get_channels_last_strides_2d(sizes);
      return c10::DimVector(strides.begin(), strides.end());
    }
    case at::MemoryFormat::ChannelsLast3d: {
      const auto strides = c10::get_channels_last_strides_3d(sizes);
      return c10::DimVector(strides.begin(), strides.end());
    }
    default:
      return c10::contiguous_strides(sizes);
  }
}

at::Tensor as_canonical(const at::Tensor& t, at::MemoryFormat format) {
  at::Tensor packed = t.contiguous(format);
  if (reinterpret_cast<uintptr_t>(packed.const_data_ptr()) % kOperandAlignment != 0) {
    packed = packed.clone(format);  // a fresh allocation: aligned
  }
  const auto strides = canonical_strides(packed.sizes(), format);
  if (packed.strides() == at::IntArrayRef(strides)) {
    return packed;
  }
  // Same elements at the same addresses: only size-1 dimensions differ in stride.
  return packed.as_strided(packed.sizes(), strides);
}

ConvKey make_conv_key(Direction direction, int algo, const ConvProblem& problem,
                      at::ScalarType dtype, const at::Device& device, bool deterministic,
                      bool allow_tf32, at::MemoryFormat format) {
  const auto dim = problem.x_sizes.size();
  TORCH_INTERNAL_ASSERT(dim == 4 || dim == 5);
  TORCH_INTERNAL_ASSERT(problem.w_sizes.size() == dim && problem.padding.size() == dim - 2);
  ConvKey key;
  key.direction = static_cast<int8_t>(direction);
  key.dtype = static_cast<int8_t>(dtype);
  key.memory_format = static_cast<int8_t>(format);
  key.dim = static_cast<int8_t>(dim);
  key.device = static_cast<int8_t>(std::max<int>(0, device.index()));
  key.allow_tf32 = allow_tf32 && dtype == at::kFloat;
  key.deterministic = deterministic;
  key.transposed = problem.transposed;
  key.algo = algo;
  key.groups = problem.groups;
  std::copy(problem.x_sizes.begin(), problem.x_sizes.end(), key.input_sizes.begin());
  std::copy(problem.w_sizes.begin(), problem.w_sizes.end(), key.weight_sizes.begin());
  std::copy(problem.padding.begin(), problem.padding.end(), key.padding.begin());
  std::copy(problem.stride.begin(), problem.stride.end(), key.stride.begin());
  std::copy(problem.dilation.begin(), problem.dilation.end(), key.dilation.begin());
  std::copy(problem.output_padding.begin(), problem.output_padding.end(),
            key.output_padding.begin());
  key.output_sizes = conv_output_sizes(problem.x_sizes, problem.w_sizes, problem.padding,
                                       problem.stride, problem.dilation);
  return key;
}

namespace {

at::IntArrayRef spatial(const std::array<int64_t, kMaxSpatialDims>& values, const ConvKey& key) {
  return {values.data(), static_cast<size_t>(key.dim - 2)};
}

const char* format_name(at::MemoryFormat format) {
  switch (format) {
    case at::MemoryFormat::ChannelsLast:
      return "channels_last";
    case at::MemoryFormat::ChannelsLast3d:
      return "channels_last_3d";
    default:
      return "contiguous";
  }
}

}  // namespace

std::string describe_conv(const ConvKey& key) {
  // A transposed convolution's input is the cuDNN problem's y, its output x.
  const at::IntArrayRef user_input = key.transposed ? key.output() : key.input();
  const at::IntArrayRef user_output = key.transposed ? key.input() : key.output();
  std::ostringstream out;
  out << (key.transposed ? "conv_transpose" : "conv") << (key.dim - 2) << "d: input "
      << user_input << " " << torch_dtype_name(key.scalar_type()) << " "
      << format_name(key.format()) << ", weight " << key.weight() << ", output " << user_output
      << ", stride " << spatial(key.stride, key) << ", padding " << spatial(key.padding, key);
  if (key.transposed) {
    out << ", output_padding " << spatial(key.output_padding, key);
  }
  out << ", dilation " << spatial(key.dilation, key) << ", groups " << key.groups
      << ", allow_tf32=" << (key.allow_tf32 ? "True" : "False")
      << ", deterministic=" << (key.deterministic ? "True" : "False") << ", device cuda:"
      << static_cast<int>(key.device);
  return out.str();
}

std::string python_repro(const ConvKey& key, const std::string& choice_literal, bool strict) {
  const int spatial_dims = key.dim - 2;
  const char* dtype = torch_dtype_name(key.scalar_type());
  // Which pass issues the pinned call: a transposed convolution's forward is the
  // backward-data call, its input gradient the forward call.
  const Direction forward_pass = key.transposed ? Direction::kBackwardData : Direction::kForward;
  const bool backward = key.dir() != forward_pass;
  const char* grad = backward ? ".requires_grad_()" : "";
  std::ostringstream out;
  out << "import torch\n"
      << "torch.backends.cudnn.allow_tf32 = " << (key.allow_tf32 ? "True" : "False") << "\n"
      << "torch.backends.cudnn.deterministic = " << (key.deterministic ? "True" : "False") << "\n"
      << "torch.backends.cudnn." << direction_flag_name(key.dir()) << " = " << choice_literal
      << "\n"
      << "torch.backends.cudnn.conv_algo_strict = " << (strict ? "True" : "False") << "\n"
      << "x = torch.randn(" << python_tuple(key.transposed ? key.output() : key.input())
      << ", dtype=" << dtype << ", device='cuda:" << static_cast<int>(key.device) << "')";
  if (key.format() != at::MemoryFormat::Contiguous) {
    out << ".to(memory_format=torch." << format_name(key.format()) << ")";
  }
  out << grad << "\n"
      << "w = torch.randn(" << python_tuple(key.weight()) << ", dtype=" << dtype
      << ", device=x.device)" << grad << "\n"
      << "y = torch.nn.functional.conv" << (key.transposed ? "_transpose" : "") << spatial_dims
      << "d(x, w, stride=" << python_tuple(spatial(key.stride, key))
      << ", padding=" << python_tuple(spatial(key.padding, key));
  if (key.transposed) {
    out << ", output_padding=" << python_tuple(spatial(key.output_padding, key));
  }
  out << ", dilation=" << python_tuple(spatial(key.dilation, key)) << ", groups=" << key.groups
      << ")\n";
  if (backward) {
    out << "y.backward(torch.randn_like(y))\n";
  }
  return out.str();
}

std::string json_request(const ConvKey& key) {
  const auto sizes = [](at::IntArrayRef values) { return std::vector<int64_t>(values.begin(), values.end()); };
  nlohmann::ordered_json request;
  request["direction"] = direction_name(key.dir());
  request["input"] = sizes(key.input());
  request["weight"] = sizes(key.weight());
  request["output"] = sizes(key.output());
  request["padding"] = sizes(spatial(key.padding, key));
  request["stride"] = sizes(spatial(key.stride, key));
  request["dilation"] = sizes(spatial(key.dilation, key));
  request["groups"] = key.groups;
  request["dtype"] = torch_dtype_name(key.scalar_type()) + 6;  // without "torch."
  request["channels_last"] = key.format() != at::MemoryFormat::Contiguous;
  request["device"] = static_cast<int>(key.device);
  request["deterministic"] = key.deterministic;
  request["allow_tf32"] = key.allow_tf32;
  request["transposed"] = key.transposed;
  return request.dump();
}

}  // namespace torch_cudnn_algo
