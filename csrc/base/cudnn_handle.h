// What every runner needs per call: torch's cuDNN handle bound to the current
// stream, a workspace from torch's caching allocator, and uninitialised memory
// for the result.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cudnn/cudnn-wrapper.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace torch_cudnn_algo {

// torch's cuDNN handle of the current device and thread, bound to the current stream.
cudnnHandle_t current_cudnn_handle();

// Exactly `bytes` from torch's caching allocator on the current device, freed
// (stream-ordered) when the DataPtr goes. Never smaller than cuDNN asked for:
// a short workspace corrupts memory and kills the CUDA context.
c10::DataPtr allocate_workspace(size_t bytes);

// Uninitialised CUDA memory for a result cuDNN overwrites entirely, allocated
// as ATen's cuDNN kernels allocate theirs. Not at::empty: under
// torch.use_deterministic_algorithms(True) it fills every new tensor with NaN
// (torch.utils.deterministic.fill_uninitialized_memory), one more pass over
// each output, a measurable cost per training step.
at::Tensor allocate_output(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace torch_cudnn_algo
