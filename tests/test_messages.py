"""CPU: the texts users read — the convolution description and the Python repro a
refusal carries, and the flag's error message — pinned with expecttest."""

from __future__ import annotations

import json

import expecttest
import torch

import torch_cudnn_algo


def describe(input, weight, padding, stride, dilation, groups=1, algo=6, direction="fwd", strict=True,
             transposed=False, output_padding=None):
    output_padding = output_padding or [0] * len(padding)
    # The convolution as the operators take it (one JSON object): channels-last
    # when either operand is, as PyTorch's cuDNN path decides.
    channels_last = any(t.dim() > 3 and not t.is_contiguous() for t in (input, weight))
    memory_format = ("channels_last" if input.dim() == 4 else "channels_last_3d") if channels_last else "contiguous"
    conv = json.dumps({"direction": direction, "input": list(input.shape), "weight": list(weight.shape),
                       "padding": padding, "stride": stride, "dilation": dilation, "groups": groups,
                       "transposed": transposed, "output_padding": output_padding,
                       "dtype": str(input.dtype).removeprefix("torch."), "memory_format": memory_format})
    return torch.ops.torch_cudnn_algo.describe_convolution(conv, algo, False, True, strict)


class TestMessages(expecttest.TestCase):
    def test_description_and_repro_channels_last_half(self):
        x = torch.empty(8, 64, 56, 56, dtype=torch.float16, device="meta").contiguous(memory_format=torch.channels_last)
        w = torch.empty(128, 64, 3, 3, dtype=torch.float16, device="meta")
        text, repro = describe(x, w, [1, 1], [2, 2], [1, 1])
        self.assertExpectedInline(text, """conv2d: input [8, 64, 56, 56] torch.float16 channels_last, weight [128, 64, 3, 3], output [8, 128, 28, 28], stride [2, 2], padding [1, 1], dilation [1, 1], groups 1, allow_tf32=False, deterministic=False, device cuda:0""")
        self.assertExpectedInline(repro, """\
import torch
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.deterministic = False
torch.backends.cudnn.conv_fwd_algo = 6  # WINOGRAD
torch.backends.cudnn.conv_algo_strict = True
x = torch.randn((8, 64, 56, 56), dtype=torch.float16, device='cuda:0').to(memory_format=torch.channels_last)
w = torch.randn((128, 64, 3, 3), dtype=torch.float16, device=x.device)
y = torch.nn.functional.conv2d(x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1)
""")

    def test_repro_3d_float32_is_valid_python(self):
        x = torch.empty(2, 4, 7, 8, 9, device="meta")
        w = torch.empty(8, 2, 3, 3, 3, device="meta")
        text, repro = describe(x, w, [1, 1, 1], [1, 2, 1], [1, 1, 2], groups=2, algo=1)
        self.assertIn("conv3d: input [2, 4, 7, 8, 9] torch.float32 contiguous", text)
        self.assertIn("allow_tf32=True", text)
        self.assertIn("torch.nn.functional.conv3d(x, w, stride=(1, 2, 1), padding=(1, 1, 1), dilation=(1, 1, 2), groups=2)", repro)
        compile(repro, "repro", "exec")

    def test_backward_repro_runs_backward(self):
        x = torch.empty(2, 4, 9, 9, dtype=torch.float64, device="meta")
        w = torch.empty(4, 4, 3, 3, dtype=torch.float64, device="meta")
        _, repro = describe(x, w, [0, 0], [1, 1], [1, 1], algo=3, direction="bwd_filter", strict=False)
        self.assertIn("torch.backends.cudnn.conv_bwd_filter_algo = 3  # ALGO_3", repro)
        self.assertIn("requires_grad_()", repro)
        self.assertTrue(repro.endswith("y.backward(torch.randn_like(y))\n"))
        compile(repro, "repro", "exec")

    def test_transposed_forward_is_a_backward_data_call(self):
        x = torch.empty(2, 8, 5, 5, device="meta")
        w = torch.empty(8, 3, 3, 3, device="meta")  # [C_in, C_out / groups, kH, kW]
        text, repro = describe(x, w, [1, 1], [2, 2], [1, 1], algo=1, direction="bwd_data",
                               transposed=True, output_padding=[1, 1])
        self.assertExpectedInline(text, """conv_transpose2d: input [2, 8, 5, 5] torch.float32 contiguous, weight [8, 3, 3, 3], output [2, 3, 10, 10], stride [2, 2], padding [1, 1], output_padding [1, 1], dilation [1, 1], groups 1, allow_tf32=True, deterministic=False, device cuda:0""")
        self.assertIn("torch.nn.functional.conv_transpose2d(x, w, stride=(2, 2), padding=(1, 1), output_padding=(1, 1), dilation=(1, 1), groups=1)", repro)
        self.assertNotIn("backward", repro)  # the forward pass is the backward-data call
        _, grad_repro = describe(x, w, [1, 1], [2, 2], [1, 1], algo=1, direction="fwd",
                                 transposed=True, output_padding=[1, 1])
        self.assertIn("y.backward(", grad_repro)  # its input gradient is the forward call
        compile(grad_repro, "repro", "exec")

    def test_out_of_range_flag_message(self):
        with self.assertRaises(ValueError) as ctx:
            torch.backends.cudnn.conv_fwd_algo = 8
        self.assertExpectedInline(str(ctx.exception), """torch.backends.cudnn.conv_fwd_algo: 8 is out of range; valid values are None, an int or a name among 0 (IMPLICIT_GEMM), 1 (IMPLICIT_PRECOMP_GEMM), 2 (GEMM), 3 (DIRECT), 4 (FFT), 5 (FFT_TILING), 6 (WINOGRAD), 7 (WINOGRAD_NONFUSED) (names are case-insensitive and may carry the CUDNN_CONVOLUTION_FWD_ALGO_ prefix), a cuDNN engine configuration name such as 'eng62' or 'eng62_k2=1_k13=1', our own kernel 'tca.direct', or the policy 'fastest'""")

    def test_describe_validates_arguments(self):
        x = torch.empty(2, 4, 9, 9, device="meta")
        w = torch.empty(4, 4, 3, 3, device="meta")
        with self.assertRaisesRegex(RuntimeError, "must each have 2"):
            describe(x, w, [0], [1, 1], [1, 1])
        with self.assertRaisesRegex(ValueError, "must be in"):
            describe(x, w, [0, 0], [1, 1], [1, 1], algo=8)
