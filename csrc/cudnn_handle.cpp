#include "cudnn_handle.h"

#include "common.h"

#include <ATen/cuda/EmptyTensor.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

namespace torch_cudnn_algo {

cudnnHandle_t current_cudnn_handle() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  TORCH_CUDNN_ALGO_CHECK(cudnnSetStream(handle, c10::cuda::getCurrentCUDAStream()));
  return handle;
}

c10::DataPtr allocate_workspace(size_t bytes) {
  return c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
}

at::Tensor allocate_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::Tensor(at::detail::empty_cuda(sizes, options));
}

}  // namespace torch_cudnn_algo
