// The extension's control surface, as torch.ops.torch_cudnn_algo.* operators,
// called from one Python module (src/torch_cudnn_algo/_ops.py). Each concern
// registers its operators as a fragment of this library: flag_ops, query_ops,
// plan_ops, tuning_ops. A convolution crosses as one JSON object (see
// conv_argument.h); structured results cross as JSON text (op_values.h).
#include <torch/library.h>

TORCH_LIBRARY(torch_cudnn_algo, m) {}
