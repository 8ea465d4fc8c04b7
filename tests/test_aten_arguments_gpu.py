"""GPU: the overrides accept every argument form ATen's own kernels accept.

Regression for PyTorch's ``test_conv{2,3}d_valid_padding_backward``: with any flag
set, ``F.conv2d(x, w, padding="valid")`` followed by ``.backward()`` raised, because
autograd hands ``aten::convolution_backward`` the one-element lists
``_convolution_mode`` was called with (``padding=[0]``), which ATen expands and we
rejected. Gradients are compared with stock on the same inputs, and the pinned
directions must really have run our plans (``pinned_run_counts``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo

pytestmark = pytest.mark.gpu

# Every direction pinned to IMPLICIT_PRECOMP_GEMM (1), which cuDNN supports for
# every dtype and layout used here.
PINNED = dict(conv_fwd_algo=1, conv_bwd_data_algo=1, conv_bwd_filter_algo=1)

CONVS = {
    "conv1d": (F.conv1d, (2, 4, 11), (6, 4, 3)),
    "conv2d": (F.conv2d, (2, 4, 9, 10), (6, 4, 3, 3)),
    "conv3d": (F.conv3d, (2, 4, 5, 6, 7), (6, 4, 3, 3, 3)),
}


def forward_backward(conv, x, w, **kwargs):
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    out = conv(x, w, **kwargs)
    out.backward(torch.ones_like(out))
    return out.detach(), x.grad, w.grad


def assert_same_as_stock(pinned, stock, dtype):
    tol = dict(rtol=1e-4, atol=1e-4) if dtype in (torch.float32, torch.complex64) else {}
    for got, expected in zip(pinned, stock):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=["float32", "complex64"])
@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_string_padding_backward_matches_stock(name, padding, dtype):
    conv, x_shape, w_shape = CONVS[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(x_shape, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(w_shape, device="cuda", dtype=dtype, generator=gen)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = forward_backward(conv, x, w, padding=padding)
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        with torch_cudnn_algo.flags(conv_algo_strict=True, **PINNED):
            pinned = forward_backward(conv, x, w, padding=padding)
        after = torch_cudnn_algo.diagnostics.pinned_run_counts()
    assert all(after[d] > before[d] for d in after), (before, after)
    assert_same_as_stock(pinned, stock, dtype)


@pytest.mark.parametrize("name", list(CONVS))
def test_direct_convolution_backward_with_one_element_lists(name):
    """What autograd passes for padding="valid", called directly."""
    _, x_shape, w_shape = CONVS[name]
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(x_shape, device="cuda", generator=gen)
    w = torch.randn(w_shape, device="cuda", generator=gen)
    spatial = x.dim() - 2
    y_shape = (x_shape[0], w_shape[0], *(x_shape[i + 2] - w_shape[i + 2] + 1 for i in range(spatial)))
    grad_output = torch.randn(y_shape, device="cuda", generator=gen)

    def call():
        return torch.ops.aten.convolution_backward(
            grad_output, x, w, [w_shape[0]], [1], [0], [1], False, [0], 1, [True, True, True])

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = call()
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        with torch_cudnn_algo.flags(conv_algo_strict=True, **PINNED):
            pinned = call()
        after = torch_cudnn_algo.diagnostics.pinned_run_counts()
    assert after["bwd_data"] > before["bwd_data"] and after["bwd_filter"] > before["bwd_filter"]
    assert_same_as_stock(pinned, stock, torch.float32)


def test_direct_convolution_backward_wrong_lengths_raise_atens_error():
    """A length ATen does not accept gets ATen's own error, not a crash."""
    x = torch.randn(2, 4, 9, 10, device="cuda")
    w = torch.randn(6, 4, 3, 3, device="cuda")
    grad_output = torch.randn(2, 6, 7, 8, device="cuda")
    with torch_cudnn_algo.flags(**PINNED):
        with pytest.raises(RuntimeError, match="padding"):
            torch.ops.aten.convolution_backward(
                grad_output, x, w, None, [1, 1], [0, 0, 0], [1, 1], False, [0, 0], 1, [True, True, False])


def test_direct_convolution_backward_wrong_grad_output_shape_is_not_run_by_us():
    """A grad_output that does not match x (*) w never reaches our descriptors."""
    x = torch.randn(2, 4, 9, 10, device="cuda")
    w = torch.randn(6, 4, 3, 3, device="cuda")
    grad_output = torch.randn(2, 6, 5, 5, device="cuda")  # x (*) w is 2x6x7x8
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
    with torch_cudnn_algo.flags(**PINNED):
        try:
            torch.ops.aten.convolution_backward(
                grad_output, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False])
        except RuntimeError:
            pass  # ATen (or cuDNN through it) may reject it: its call, not ours
    torch.cuda.synchronize()
    assert torch_cudnn_algo.diagnostics.pinned_run_counts() == before
