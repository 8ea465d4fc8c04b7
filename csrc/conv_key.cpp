#include "conv_key.h"

#include "legacy_algorithms.h"

#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>

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

size_t ConvKeyHash::operator()(const ConvKey& key) const {
  // FNV-1a over the bytes of the key.
  const auto* bytes = reinterpret_cast<const uint8_t*>(&key);
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof(ConvKey); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<size_t>(hash);
}

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

}  // namespace

void check_conv_arguments(const at::Tensor& input, const at::Tensor& weight,
                          at::IntArrayRef padding, at::IntArrayRef stride,
                          at::IntArrayRef dilation, int64_t groups) {
  const int64_t dim = input.dim();
  TORCH_CHECK(dim >= 3 && dim <= 5, "torch_cudnn_algo: cudnn_convolution expects a 3-d, 4-d or 5-d "
              "input (N, C, *spatial), got ", dim, "-d input of shape ", input.sizes());
  TORCH_CHECK(weight.dim() == dim, "torch_cudnn_algo: weight must have the input's ", dim,
              " dimensions, got weight of shape ", weight.sizes());
  const auto spatial = static_cast<size_t>(dim - 2);
  TORCH_CHECK(padding.size() == spatial && stride.size() == spatial && dilation.size() == spatial,
              "torch_cudnn_algo: padding, stride and dilation must each have ", spatial,
              " values for a ", dim, "-d input; got padding ", padding, ", stride ", stride,
              ", dilation ", dilation);
  TORCH_CHECK(all_at_least(stride, 1) && all_at_least(dilation, 1) && all_at_least(padding, 0),
              "torch_cudnn_algo: stride and dilation must be >= 1 and padding >= 0; got stride ",
              stride, ", dilation ", dilation, ", padding ", padding);
  TORCH_CHECK(groups >= 1, "torch_cudnn_algo: groups must be >= 1, got ", groups);
  TORCH_CHECK(input.size(1) == weight.size(1) * groups,
              "torch_cudnn_algo: input has ", input.size(1), " channels but weight of shape ",
              weight.sizes(), " with groups=", groups, " expects ", weight.size(1) * groups);
  TORCH_CHECK(weight.size(0) % groups == 0, "torch_cudnn_algo: weight's ", weight.size(0),
              " output channels are not divisible by groups=", groups);
  TORCH_CHECK(input.device() == weight.device(), "torch_cudnn_algo: input is on ",
              input.device(), " but weight is on ", weight.device());
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "torch_cudnn_algo: input is ",
              input.scalar_type(), " but weight is ", weight.scalar_type());
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t padded = input.size(i + 2) + 2 * padding[i];
    const int64_t extent = dilation[i] * (weight.size(i + 2) - 1) + 1;
    TORCH_CHECK(padded >= extent, "torch_cudnn_algo: kernel extent ", extent,
                " (with dilation) exceeds the padded input size ", padded, " in spatial dim ", i);
  }
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

at::MemoryFormat stock_conv_memory_format(const at::Tensor& input, const at::Tensor& weight) {
  if (input.scalar_type() == at::kDouble || weight.scalar_type() == at::kDouble) {
    return at::MemoryFormat::Contiguous;
  }
  at::MemoryFormat channels_last;
  if (weight.dim() == 4) {
    channels_last = at::MemoryFormat::ChannelsLast;
  } else if (weight.dim() == 5) {
    channels_last = at::MemoryFormat::ChannelsLast3d;
  } else {
    return at::MemoryFormat::Contiguous;
  }
  if (input.suggest_memory_format() == channels_last ||
      weight.suggest_memory_format() == channels_last) {
    return channels_last;
  }
  return at::MemoryFormat::Contiguous;
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
  const auto strides = canonical_strides(packed.sizes(), format);
  if (packed.strides() == at::IntArrayRef(strides)) {
    return packed;
  }
  // Same elements at the same addresses: only size-1 dimensions differ in stride.
  return packed.as_strided(packed.sizes(), strides);
}

ConvKey make_conv_key(Direction direction, int algo, const at::Tensor& input,
                      const at::Tensor& weight, at::IntArrayRef padding, at::IntArrayRef stride,
                      at::IntArrayRef dilation, int64_t groups, bool deterministic,
                      bool allow_tf32, at::MemoryFormat format) {
  TORCH_INTERNAL_ASSERT(input.dim() == 4 || input.dim() == 5);
  ConvKey key;
  key.direction = static_cast<int8_t>(direction);
  key.dtype = static_cast<int8_t>(input.scalar_type());
  key.memory_format = static_cast<int8_t>(format);
  key.dim = static_cast<int8_t>(input.dim());
  key.device = static_cast<int8_t>(std::max<int>(0, input.device().index()));
  key.allow_tf32 = allow_tf32 && input.scalar_type() == at::kFloat;
  key.deterministic = deterministic;
  key.algo = algo;
  key.groups = groups;
  std::copy(input.sizes().begin(), input.sizes().end(), key.input_sizes.begin());
  std::copy(weight.sizes().begin(), weight.sizes().end(), key.weight_sizes.begin());
  std::copy(padding.begin(), padding.end(), key.padding.begin());
  std::copy(stride.begin(), stride.end(), key.stride.begin());
  std::copy(dilation.begin(), dilation.end(), key.dilation.begin());
  key.output_sizes = conv_output_sizes(input.sizes(), weight.sizes(), padding, stride, dilation);
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
  std::ostringstream out;
  out << "conv" << (key.dim - 2) << "d: input " << key.input() << " "
      << torch_dtype_name(key.scalar_type()) << " " << format_name(key.format()) << ", weight "
      << key.weight() << ", output " << key.output() << ", stride " << spatial(key.stride, key)
      << ", padding " << spatial(key.padding, key) << ", dilation "
      << spatial(key.dilation, key) << ", groups " << key.groups
      << ", allow_tf32=" << (key.allow_tf32 ? "True" : "False")
      << ", deterministic=" << (key.deterministic ? "True" : "False") << ", device cuda:"
      << static_cast<int>(key.device);
  return out.str();
}

std::string python_repro(const ConvKey& key, bool strict) {
  const int spatial_dims = key.dim - 2;
  const char* dtype = torch_dtype_name(key.scalar_type());
  const bool backward = key.dir() != Direction::kForward;
  std::ostringstream out;
  out << "import torch\n"
      << "torch.backends.cudnn.allow_tf32 = " << (key.allow_tf32 ? "True" : "False") << "\n"
      << "torch.backends.cudnn.deterministic = " << (key.deterministic ? "True" : "False") << "\n"
      << "torch.backends.cudnn." << direction_flag_name(key.dir()) << " = " << key.algo << "  # "
      << legacy_algo_name(key.dir(), key.algo) << "\n"
      << "torch.backends.cudnn.conv_algo_strict = " << (strict ? "True" : "False") << "\n"
      << "x = torch.randn(" << python_tuple(key.input()) << ", dtype=" << dtype
      << ", device='cuda:" << static_cast<int>(key.device) << "')";
  if (key.format() != at::MemoryFormat::Contiguous) {
    out << ".to(memory_format=torch." << format_name(key.format()) << ")";
  }
  out << (backward ? ".requires_grad_()" : "") << "\n"
      << "w = torch.randn(" << python_tuple(key.weight()) << ", dtype=" << dtype
      << ", device=x.device)" << (backward ? ".requires_grad_()" : "") << "\n"
      << "y = torch.nn.functional.conv" << spatial_dims << "d(x, w, stride="
      << python_tuple(spatial(key.stride, key)) << ", padding="
      << python_tuple(spatial(key.padding, key)) << ", dilation="
      << python_tuple(spatial(key.dilation, key)) << ", groups=" << key.groups << ")\n";
  if (backward) {
    out << "y.backward(torch.randn_like(y))\n";
  }
  return out.str();
}

}  // namespace torch_cudnn_algo
