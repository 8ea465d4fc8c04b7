// Index rules the kernel files share (direct_conv.cu, grouped_mma.cu), written
// once. Plain C++: constexpr functions, which nvcc also compiles for the device
// (the build passes --expt-relaxed-constexpr). A .h, not a .cuh, because the
// build rebuilds the kernels when a csrc/kernels/*.h changes.
#pragma once

namespace torch_cudnn_algo::kernels {

// Source row (or column) feeding destination row y through tap r, or -1.
// Forward: y*stride - pad + r*dilation. Backward data: the dy row whose
// forward tap r lands on y, when the stride divides.
template <bool Backward, typename Index>
constexpr Index source_index(Index y, Index r, Index stride, Index pad, Index dilation, Index extent) {
  if (Backward) {
    const Index t = y + pad - r * dilation;
    if (t < 0 || t % stride != 0) return -1;
    const Index i = t / stride;
    return i < extent ? i : -1;
  }
  const Index i = y * stride - pad + r * dilation;
  return (i >= 0 && i < extent) ? i : -1;
}

}  // namespace torch_cudnn_algo::kernels
