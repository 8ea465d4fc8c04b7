// The runtime torch::Library objects that replace ATen's CUDA kernels. Each one
// exists only while a choice that needs it is pinned; destroying it restores
// ATen's kernel.
#pragma once

#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_cudnn_algo {

// Register the kernels (CUDA key) on `lib`: aten::cudnn_convolution,
// aten::cudnn_convolution_transpose and aten::convolution_backward.
void register_forward_override(torch::Library& lib);
void register_transpose_override(torch::Library& lib);
void register_backward_override(torch::Library& lib);

// Brings the registered overrides in line with the pinned choices; returns the
// lines to log (one per override added or removed).
std::vector<std::string> sync_overrides();

std::vector<std::string> registered_override_names();

}  // namespace torch_cudnn_algo
