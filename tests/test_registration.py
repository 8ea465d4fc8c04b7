"""CPU: the override exists only while a forward choice is set, replaces ATen's
CUDA kernel silently, and validates arguments before anything else."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _ops

cudnn = torch.backends.cudnn
OP = "aten::cudnn_convolution"
TRANSPOSE = "aten::cudnn_convolution_transpose"
BACKWARD = "aten::convolution_backward"


def cuda_kernel_line(op: str = OP) -> str:
    (line,) = [l for l in torch._C._dispatch_dump(op).splitlines() if l.startswith("CUDA:")]
    return line


def test_stock_kernels_when_nothing_is_pinned():
    assert torch_cudnn_algo.diagnostics.active_overrides() == []
    assert "RegisterCUDA" in cuda_kernel_line(OP)
    assert "RegisterCUDA" in cuda_kernel_line(TRANSPOSE)
    assert "RegisterCUDA" in cuda_kernel_line(BACKWARD)


def test_override_follows_the_forward_flag(caplog):
    with caplog.at_level(logging.INFO, logger="torch_cudnn_algo"), warnings.catch_warnings():
        warnings.simplefilter("error")  # the dispatcher's override warning must not surface
        cudnn.conv_fwd_algo = 1
        # convolution_backward too: a transposed convolution's input gradient is a forward call
        assert torch_cudnn_algo.diagnostics.active_overrides() == [OP, BACKWARD]
        assert "overrides.cpp" in cuda_kernel_line(OP)
        assert "overrides.cpp" in cuda_kernel_line(BACKWARD)
        cudnn.conv_fwd_algo = 5  # changing the choice keeps one registration
        assert torch_cudnn_algo.diagnostics.active_overrides() == [OP, BACKWARD]
        cudnn.conv_fwd_algo = None
    assert torch_cudnn_algo.diagnostics.active_overrides() == []
    assert "RegisterCUDA" in cuda_kernel_line()
    assert "RegisterCUDA" in cuda_kernel_line(BACKWARD)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "registered override of aten::cudnn_convolution (CUDA) for the pinned algorithm or conv_profile",
        "registered override of aten::convolution_backward (CUDA) for the pinned algorithm or conv_profile",
        "removed override of aten::cudnn_convolution; ATen's kernel is back",
        "removed override of aten::convolution_backward; ATen's kernel is back",
    ]


@pytest.mark.parametrize(
    "flag, expected",
    [("conv_bwd_data_algo", [TRANSPOSE, BACKWARD]), ("conv_bwd_filter_algo", [BACKWARD])],
)
def test_backward_flags_register_what_they_need(flag, expected):
    setattr(cudnn, flag, 1)
    assert torch_cudnn_algo.diagnostics.active_overrides() == expected
    setattr(cudnn, flag, None)
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


def test_overrides_stay_while_any_direction_is_pinned():
    cudnn.conv_fwd_algo = 0
    cudnn.conv_bwd_filter_algo = 1
    cudnn.conv_fwd_algo = None
    assert torch_cudnn_algo.diagnostics.active_overrides() == [BACKWARD]
    cudnn.conv_bwd_filter_algo = None
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


def test_strict_alone_registers_nothing():
    cudnn.conv_algo_strict = True
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


def call_cuda_kernel(x, w, padding, stride, dilation, groups=1):
    """Runs the CUDA-key kernel on CPU tensors: only the argument checks can run."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    return torch.ops.aten.cudnn_convolution.default.redispatch(
        keys, x, w, padding, stride, dilation, groups, False, False, True
    )


@pytest.mark.parametrize(
    "x_shape, w_shape, padding, stride, dilation, groups, match",
    [
        ((2, 8, 9, 9), (16, 8, 3, 3), [1], [1, 1], [1, 1], 1, "must each have 2 values for a 4-d input"),
        ((2, 8, 9, 9), (16, 8, 3, 3), [1, 1], [1, 1, 1], [1, 1], 1, "must each have 2"),
        ((2, 8, 9, 9), (16, 8, 3, 3), [1, 1], [1, 1], [], 1, "must each have 2"),
        ((2, 8, 9, 9), (16, 8, 3, 3), [1, 1], [0, 1], [1, 1], 1, "stride and dilation must be >= 1"),
        ((2, 8, 9, 9), (16, 8, 3, 3), [-1, 1], [1, 1], [1, 1], 1, "padding >= 0"),
        ((2, 8, 9, 9), (16, 8, 3, 3), [1, 1], [1, 1], [1, 1], 0, "groups must be >= 1"),
        ((2, 8, 9, 9), (16, 4, 3, 3), [1, 1], [1, 1], [1, 1], 1, "input has 8 channels"),
        ((2, 8, 9, 9), (15, 4, 3, 3), [1, 1], [1, 1], [1, 1], 2, "not divisible by groups=2"),
        ((2, 8, 9, 9), (16, 8, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, "weight must have the input's 4"),
        ((2, 8, 2, 2), (16, 8, 5, 5), [0, 0], [1, 1], [1, 1], 1, "exceeds the padded input size"),
        ((2, 8), (16, 8), [], [], [], 1, "expects a 3-d, 4-d or 5-d input"),
    ],
)
def test_bad_arguments_raise_before_any_computation(x_shape, w_shape, padding, stride, dilation, groups, match):
    cudnn.conv_fwd_algo = 0
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    with pytest.raises(RuntimeError, match=match):
        call_cuda_kernel(x, w, padding, stride, dilation, groups)


def test_valid_arguments_reach_the_device_guard():
    """Valid arguments pass validation and then need a CUDA device."""
    cudnn.conv_fwd_algo = 0
    with pytest.raises(RuntimeError, match="CUDA"):
        call_cuda_kernel(torch.randn(2, 8, 9, 9), torch.randn(16, 8, 3, 3), [1, 1], [1, 1], [1, 1])


@pytest.mark.parametrize(
    "choice, error, message",
    [
        ("123", ValueError, "123 is not a legacy algorithm number"),
        ("9", ValueError, "9 is not a fwd legacy algorithm cuDNN implements"),
        ("engX", ValueError, "not an engine configuration name"),
        ("1", RuntimeError, "run_candidate needs CUDA tensors"),
    ],
)
def test_run_candidate_validates_before_touching_cudnn(choice, error, message):
    x, w, y = torch.empty(1, 2, 5, 5), torch.empty(3, 2, 3, 3), torch.empty(1, 3, 3, 3)
    with pytest.raises(error, match=message):
        _ops.run_candidate("fwd", choice, x, w, y, [0, 0], [1, 1], [1, 1], 1, False, True, True)
