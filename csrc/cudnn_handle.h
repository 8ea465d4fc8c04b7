// What every runner needs per call: torch's cuDNN handle bound to the current
// stream, and a workspace from torch's caching allocator.
#pragma once

#include <ATen/cudnn/cudnn-wrapper.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace torch_cudnn_algo {

// at::native::getCudnnHandle() (per device and thread) with the current stream set.
cudnnHandle_t current_cudnn_handle();

// Exactly `bytes` from torch's caching allocator on the current device, freed
// (stream-ordered) when the DataPtr goes. Never smaller than cuDNN asked for:
// a short workspace corrupts memory and kills the CUDA context.
c10::DataPtr allocate_workspace(size_t bytes);

}  // namespace torch_cudnn_algo
