// What differs between the torch minor releases this extension builds against
// (2.11 to 2.15: SUPPORTED_TORCH in src/torch_cudnn_algo/_version_gate.py), in one place.
// Everything else it calls (at::native::cudnn_convolution, cudnn_convolution_transpose,
// convolution_backward, select_conv_backend, getCudnnHandle, the descriptor classes,
// Context's cuDNN flags) keeps its signature across them: docs/design.md, "Torch releases".
#pragma once

#include <ATen/Context.h>
#include <torch/headeronly/version.h>

#include <cstdint>

#define TORCH_CUDNN_ALGO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace torch_cudnn_algo {

// torch 2.13 added torch.backends.cudnn.depthwise_kernel ("auto", "cudnn", "native"):
// a process-wide setting that ATen's backend choice reads to send a depthwise
// convolution to cuDNN or to its native kernel. Whatever memoises that choice must
// carry it in its key. 0 before 2.13, which has no such setting; 1 + the setting after.
inline int8_t cudnn_depthwise_kernel_setting() {
#if TORCH_CUDNN_ALGO_TORCH_AT_LEAST(2, 13)
  return static_cast<int8_t>(1 + static_cast<int>(at::globalContext().cudnnDepthwiseKernel()));
#else
  return 0;
#endif
}

}  // namespace torch_cudnn_algo
