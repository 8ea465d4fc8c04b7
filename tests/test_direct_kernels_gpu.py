"""GPU: our own kernel "tca.direct" pinned for all three directions, against float64 on CPU:
depthwise (with and without a channel multiplier), grouped with few channels per group, one
channel on a side (ConvTasNet's transposed decoder), 1-d and 2-d, transposed, stride, padding,
dilation, odd sizes, batch 1, fp16/bf16/fp32/fp64, NCHW and channels_last, non-contiguous and
misaligned operands; determinism (bitwise equal reruns) and refusals."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo

pytestmark = pytest.mark.gpu

# The kernels are in a build only with TORCH_CUDNN_ALGO_OWN_KERNELS=1 (docs/usage.md).
own_kernels = pytest.mark.skipif(
    not (torch_cudnn_algo.is_available() and torch_cudnn_algo._ops.own_kernels_built()),
    reason="this build has no own kernels: build with TORCH_CUDNN_ALGO_OWN_KERNELS=1")

ALL_DIRECTIONS = dict(conv_fwd_algo="tca.direct", conv_bwd_data_algo="tca.direct",
                      conv_bwd_filter_algo="tca.direct", conv_algo_strict=True)


@dataclass(frozen=True)
class Case:
    name: str
    dims: int  # spatial dimensions
    n: int
    c: int
    k: int  # output channels
    size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    groups: int = 1
    transposed: bool = False
    output_padding: int = 0

    def weight_shape(self) -> tuple[int, ...]:
        if self.transposed:  # [C_in, C_out / groups, *kernel]
            return (self.c, self.k // self.groups, *self.kernel)
        return (self.k, self.c // self.groups, *self.kernel)

    def conv(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.transposed:
            op = F.conv_transpose1d if self.dims == 1 else F.conv_transpose2d
            return op(x, w, None, self.stride, self.padding, self.output_padding, self.groups, self.dilation)
        op = F.conv1d if self.dims == 1 else F.conv2d
        return op(x, w, None, self.stride, self.padding, self.dilation, self.groups)


CASES = [
    Case("dw3x3", 2, 4, 32, 32, (15, 17), (3, 3), padding=1, groups=32),
    Case("dw5x5s2", 2, 3, 24, 24, (20, 19), (5, 5), stride=2, padding=2, groups=24),
    Case("dw7x7", 2, 2, 16, 16, (14, 14), (7, 7), padding=3, groups=16),
    Case("dw3x3_odd_channels", 2, 2, 13, 13, (9, 11), (3, 3), padding=1, groups=13),
    Case("dw3x3_dilated", 2, 2, 16, 16, (12, 12), (3, 3), padding=2, dilation=2, groups=16),
    Case("dw_multiplier2", 2, 2, 8, 16, (10, 10), (3, 3), padding=1, groups=8),
    Case("dw_batch1", 2, 1, 64, 64, (7, 7), (3, 3), stride=2, padding=1, groups=64),
    Case("grouped24", 2, 2, 48, 48, (14, 14), (3, 3), stride=2, padding=1, groups=2),
    Case("grouped4", 2, 2, 32, 32, (9, 9), (3, 3), padding=1, groups=8),
    Case("grouped16_unpadded", 2, 2, 64, 32, (8, 10), (3, 3), groups=4),
    Case("dw1d_k3", 1, 2, 64, 64, (101,), (3,), padding=1, groups=64),
    Case("one_to_many_1d", 1, 2, 1, 32, (200,), (16,), stride=8, padding=8),
    Case("decoder_transposed_1d", 1, 2, 32, 1, (25,), (16,), stride=8, padding=8, transposed=True),
    Case("dw_transposed_2d", 2, 2, 16, 16, (7, 9), (4, 4), stride=2, padding=1, groups=16, transposed=True),
    Case("grouped_transposed_op", 2, 2, 16, 32, (6, 6), (3, 3), stride=2, padding=1, groups=4, transposed=True,
         output_padding=1),
]

DTYPES = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5, torch.float64: 1e-12}
LAYOUTS = ["contiguous", "channels_last"]


def memory_format(layout: str, dims: int) -> torch.memory_format:
    return torch.channels_last if layout == "channels_last" and dims == 2 else torch.contiguous_format


def operands(case: Case, dtype: torch.dtype, layout: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(case.n, case.c, *case.size, generator=g, dtype=torch.float64)
    w = torch.randn(case.weight_shape(), generator=g, dtype=torch.float64)
    fmt = memory_format(layout, case.dims)
    return (x.to("cuda", dtype).contiguous(memory_format=fmt), w.to("cuda", dtype).contiguous(memory_format=fmt))


def reaches_cudnn(case: Case, x: torch.Tensor, w: torch.Tensor) -> bool:
    n = case.dims
    backend = torch._C._select_conv_backend(
        x, w, None, [case.stride] * n, [case.padding] * n, [case.dilation] * n, case.transposed,
        [case.output_padding] * n, case.groups)
    return backend in (torch._C._ConvBackend.Cudnn, torch._C._ConvBackend.CudnnTranspose)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.detach().double().cpu()
    actual = actual.detach().double().cpu()
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30))


def float64_reference(case: Case, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
    x64 = x.detach().double().cpu().requires_grad_()
    w64 = w.detach().double().cpu().requires_grad_()
    y64 = case.conv(x64, w64)
    return (y64, *torch.autograd.grad(y64, (x64, w64), grad.double().cpu()))


def run_ours(case: Case, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
    x = x.detach().requires_grad_()
    w = w.detach().requires_grad_()
    with torch_cudnn_algo.flags(**ALL_DIRECTIONS):
        y = case.conv(x, w)
        dx, dw = torch.autograd.grad(y, (x, w), grad)
    return y, dx, dw


@own_kernels
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_all_directions_match_float64(case: Case, dtype: torch.dtype, layout: str) -> None:
    x, w = operands(case, dtype, layout)
    with torch_cudnn_algo.flags(conv_fwd_algo=None):
        y_shape = case.conv(x, w).shape
    grad = torch.randn(y_shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grad_gpu = grad.to("cuda", dtype).contiguous(memory_format=memory_format(layout, case.dims))
    before = torch_cudnn_algo.pinned_run_counts()
    # cudnn.flags() defaults to enabled=False: say every setting.
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        ours = run_ours(case, x, w, grad_gpu)
    ran = {d: torch_cudnn_algo.pinned_run_counts()[d] - before[d] for d in before}
    expected = float64_reference(case, x, w, grad_gpu)
    for name, actual, reference in zip(("output", "grad_input", "grad_weight"), ours, expected):
        assert actual.dtype == dtype
        assert actual.shape == reference.shape, name
        error = relative_error(actual, reference)
        assert error <= DTYPES[dtype], f"{name}: max relative error {error:.2e} > {DTYPES[dtype]:.0e}"
    if reaches_cudnn(case, x, w):
        # Stock sends it to cuDNN: every direction ran our kernel (strict mode raises otherwise).
        assert ran == {"fwd": 1, "bwd_data": 1, "bwd_filter": 1}, ran
    else:
        assert ran == {"fwd": 0, "bwd_data": 0, "bwd_filter": 0}, ran


@own_kernels
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reruns_are_bitwise_equal_under_deterministic_algorithms(layout: str) -> None:
    case = CASES[1]
    x, w = operands(case, torch.float16, layout, seed=3)
    grad = torch.randn(case.conv(x.double().cpu(), w.double().cpu()).shape, dtype=torch.float64)
    grad = grad.to("cuda", torch.float16).contiguous(memory_format=memory_format(layout, case.dims))
    torch.use_deterministic_algorithms(True)
    try:
        first = run_ours(case, x, w, grad)
        second = run_ours(case, x, w, grad)
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


@own_kernels
@pytest.mark.parametrize("layout", LAYOUTS)
def test_non_contiguous_and_misaligned_operands(layout: str) -> None:
    case = CASES[0]
    x, w = operands(case, torch.float16, layout)
    # A view one element into a larger buffer (misaligned), and a strided slice.
    shifted = torch.empty(x.numel() + 1, dtype=x.dtype, device="cuda")[1:].view(x.shape)
    shifted.copy_(x)
    sliced = torch.stack([x, x], dim=-1)[..., 0]  # x's values with doubled strides
    grad = torch.randn(case.conv(x, w).shape, device="cuda", dtype=torch.float16)
    expected = float64_reference(case, x, w, grad)
    for operand in (shifted, sliced):
        ours = run_ours(case, operand, w, grad)
        for actual, reference in zip(ours, expected):
            assert relative_error(actual, reference) <= DTYPES[torch.float16]


@own_kernels
def test_listed_and_refused_with_a_reason() -> None:
    listed = torch_cudnn_algo.list_algorithms("conv2d 8x32x14x14 -> 32x3x3 s1 p1 g32 fp16 channels_last fwd")
    ours = [c for c in listed if c.value == "tca.direct"]
    assert len(ours) == 1 and ours[0].kind == "kernel" and ours[0].ok and ours[0].deterministic
    dense = torch_cudnn_algo.list_algorithms("conv2d 8x1024x14x14 -> 1024x3x3 s1 p1 fp16 channels_last fwd")
    (refused,) = [c for c in dense if c.value == "tca.direct"]
    assert refused.status.startswith("unsupported: ") and "dense" in refused.status
    volumetric = torch_cudnn_algo.list_algorithms("conv3d 2x8x4x4x4 -> 8x3x3x3 s1 p1 g8 fp16 contiguous fwd")
    (three_d,) = [c for c in volumetric if c.value == "tca.direct"]
    assert "3-d" in three_d.status


@own_kernels
def test_strict_refusal_names_the_reason_and_stock_runs_otherwise() -> None:
    # A 3-d convolution stock sends to cuDNN (a dense one: stock keeps depthwise 3-d to itself).
    x = torch.randn(2, 8, 4, 4, 4, device="cuda", dtype=torch.float16)
    w = torch.randn(8, 8, 3, 3, 3, device="cuda", dtype=torch.float16)
    assert torch._C._select_conv_backend(x, w, None, [1] * 3, [1] * 3, [1] * 3, False, [0] * 3, 1) == \
        torch._C._ConvBackend.Cudnn
    with torch_cudnn_algo.flags(conv_fwd_algo="tca.direct", conv_algo_strict=True):
        with pytest.raises(RuntimeError, match="tca.direct.*3-d"):
            F.conv3d(x, w, padding=1)
    with pytest.warns(UserWarning, match="tca.direct"), torch_cudnn_algo.flags(conv_fwd_algo="tca.direct"):
        y = F.conv3d(x, w, padding=1)
    assert torch.equal(y, F.conv3d(x, w, padding=1))


@own_kernels
def test_profile_times_it_beside_cudnn() -> None:
    table = torch_cudnn_algo.profile("conv2d 8x32x14x14 -> 32x3x3 s2 p1 g32 fp16 channels_last bwd_filter",
                                     energy=False, reps=3, warmup=1)
    row = table.row("tca.direct")
    assert row.ok and row.time_ms > 0 and row.max_rel_error < 2e-3 and row.deterministic


def test_a_build_without_them_refuses_naming_the_build_option() -> None:
    if torch_cudnn_algo._ops.own_kernels_built():
        pytest.skip("this build has the kernels; the refusal is that of a build without them")
    x = torch.randn(2, 8, 6, 6, device="cuda", dtype=torch.float16)
    w = torch.randn(8, 1, 3, 3, device="cuda", dtype=torch.float16)
    with torch_cudnn_algo.flags(conv_fwd_algo="tca.direct", conv_algo_strict=True):
        with pytest.raises(RuntimeError, match="TORCH_CUDNN_ALGO_OWN_KERNELS=1"):
            F.conv2d(x, w, padding=1, groups=8)
    assert not [c for c in torch_cudnn_algo.list_algorithms("conv2d 2x8x6x6 -> 8x3x3 s1 p1 g8 fp16 fwd")
                if c.kind == "kernel"]
