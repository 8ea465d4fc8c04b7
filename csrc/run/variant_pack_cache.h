// Finalized cuDNN variant packs kept per thread and reused across calls.
//
// A variant pack binds a call's device pointers (x, w, y by uid) and workspace
// to an execution. The frontend builds one per call: create a backend
// descriptor, set three attributes, finalize, execute, destroy. The caching
// allocator hands a layer the same addresses step after step, so a training
// step finds its packs again and only cudnnBackendExecute remains per call.
#pragma once

#include <ATen/cudnn/cudnn-wrapper.h>

#include <cstdint>

namespace torch_cudnn_algo {

// Tensor uids of every convolution graph: the cuDNN problem x (*) w = y,
// whatever the direction.
constexpr int64_t kUidX = 1;
constexpr int64_t kUidW = 2;
constexpr int64_t kUidY = 3;

// This thread's finalized variant pack binding (kUidX, kUidW, kUidY) to
// `pointers` (in that order) and `workspace`; created and remembered on a miss.
// Valid until this thread's next call (a full cache is emptied before it grows).
cudnnBackendDescriptor_t cached_variant_pack(void* const pointers[3], void* workspace);

}  // namespace torch_cudnn_algo
