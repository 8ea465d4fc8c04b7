#include "base/cudnn_handle.h"

#include "base/common.h"

#include <ATen/cuda/EmptyTensor.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

namespace torch_cudnn_algo {

cudnnHandle_t current_cudnn_handle() {
  // torch 2.11's getCudnnHandle() already binds the handle to the current stream
  // (its code calls cudnnSetStream after reserving the handle): a second
  // cudnnSetStream here was one more cuDNN call on every convolution.
  return at::native::getCudnnHandle();
}

c10::DataPtr allocate_workspace(size_t bytes) {
  return c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
}

at::Tensor allocate_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::Tensor(at::detail::empty_cuda(sizes, options));
}

}  // namespace torch_cudnn_algo
