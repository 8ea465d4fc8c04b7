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

// Registers the forward override (aten::cudnn_convolution, CUDA key) on `lib`.
void register_forward_override(torch::Library& lib);

// Brings the registered overrides in line with the pinned choices; returns the
// lines to log (one per override added or removed).
std::vector<std::string> sync_overrides();

std::vector<std::string> registered_override_names();

}  // namespace torch_cudnn_algo
