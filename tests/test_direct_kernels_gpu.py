"""GPU: our own kernel "tca.direct" pinned for all three directions, against float64 on CPU:
depthwise (with and without a channel multiplier), grouped with few channels per group, stems
(three input channels), one
channel on a side (ConvTasNet's transposed decoder), 1-d and 2-d, transposed, stride, padding,
dilation, odd sizes, batch 1, fp16/bf16/fp32/fp64, NCHW and channels_last, non-contiguous and
misaligned operands; determinism (bitwise equal reruns) and refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo
from conv_cases import ConvForm, memory_format, reaches_cudnn, reference, reference_grads, relative_error

pytestmark = pytest.mark.gpu

# The kernels are in every build but one made with TORCH_CUDNN_ALGO_OWN_KERNELS=0 (docs/usage.md).
own_kernels = pytest.mark.skipif(
    not (torch_cudnn_algo.is_available() and torch_cudnn_algo._ops.own_kernels_built()),
    reason="this build leaves our kernels out (TORCH_CUDNN_ALGO_OWN_KERNELS=0)")

ALL_DIRECTIONS = dict(conv_fwd_algo="tca.direct", conv_bwd_data_algo="tca.direct",
                      conv_bwd_filter_algo="tca.direct", conv_algo_strict=True)


def form(name: str, n: int, c: int, k: int, size: tuple[int, ...], kernel: tuple[int, ...], **geometry) -> ConvForm:
    """A convolution of n x c x size to k channels (weight [C_in, C_out / groups, ...] when transposed)."""
    groups = geometry.get("groups", 1)
    weight = (c, k // groups, *kernel) if geometry.get("transposed") else (k, c // groups, *kernel)
    return ConvForm(name, (n, c, *size), weight, **geometry)


CASES = [
    form("dw3x3", 4, 32, 32, (15, 17), (3, 3), padding=1, groups=32),
    form("dw5x5s2", 3, 24, 24, (20, 19), (5, 5), stride=2, padding=2, groups=24),
    form("dw7x7", 2, 16, 16, (14, 14), (7, 7), padding=3, groups=16),
    form("dw3x3_odd_channels", 2, 13, 13, (9, 11), (3, 3), padding=1, groups=13),
    form("dw3x3_dilated", 2, 16, 16, (12, 12), (3, 3), padding=2, dilation=2, groups=16),
    form("dw_multiplier2", 2, 8, 16, (10, 10), (3, 3), padding=1, groups=8),
    form("dw_batch1", 1, 64, 64, (7, 7), (3, 3), stride=2, padding=1, groups=64),
    # Small planes at stride 1 in fp16/bf16 run the plane gather (depthwise_plane.cuh): two strips
    # of seven columns, the second partial, and three channel tiles, the last partial; then a
    # 7-column backward data in strips of four, the staged band wider than the plane.
    form("dw5x5_plane", 3, 72, 72, (10, 13), (5, 5), padding=2, groups=72),
    form("dw3x3_plane_narrow", 3, 24, 24, (7, 6), (3, 3), padding=1, groups=24),
    form("dw7x7_plane_unpadded", 2, 40, 40, (14, 12), (7, 7), padding=(1, 2), groups=40),
    # The tensor-core depthwise kernels (depthwise_mma.cuh, depthwise_mma_filter.cuh; fp16/bf16, stride
    # 1, channels in 8s; 7x7 from 28 output columns, the filter gradient from 14): several bands of
    # rows and column chunks a plane, an odd row count (the filter gradient's last band half empty),
    # two images a block with the last one alone.
    form("dw7x7_mma_bands_chunks", 2, 16, 16, (35, 70), (7, 7), padding=3, groups=16),
    form("dw7x7_mma_two_images", 3, 24, 24, (7, 30), (7, 7), padding=3, groups=24),
    form("dw7x7_mma_filter", 2, 16, 16, (21, 20), (7, 7), padding=1, groups=16),
    # The depthwise kernels' shapes off their compile-time windows: non-square, stride 3, a
    # filter wider than 7, and channel counts for each vector width (8, 2 and 1 fp16 channels).
    form("dw1x7", 2, 40, 40, (9, 23), (1, 7), padding=(0, 3), groups=40),
    form("dw3x1_stride3", 2, 18, 18, (17, 16), (3, 1), stride=3, padding=(1, 0), groups=18),
    form("dw9x9s2", 2, 24, 24, (19, 21), (9, 9), stride=2, padding=4, groups=24),
    form("dw5x5s2_c3", 3, 3, 3, (13, 12), (5, 5), stride=2, padding=2, groups=3),
    # Stems: few input channels; the filter gradient of fp16/bf16 channels_last ones runs the
    # tensor-core stem kernel, several of its 64-pixel tiles a block.
    form("stem3x3s2", 2, 3, 16, (33, 35), (3, 3), stride=2, padding=1),
    form("stem7x7s2", 2, 3, 64, (29, 31), (7, 7), stride=2, padding=3),
    form("stem3x3_k24_dilated", 3, 3, 24, (20, 21), (3, 3), padding=2, dilation=2),
    form("grouped24", 2, 48, 48, (14, 14), (3, 3), stride=2, padding=1, groups=2),
    form("grouped4", 2, 32, 32, (9, 9), (3, 3), padding=1, groups=8),
    form("grouped16_unpadded", 2, 64, 32, (8, 10), (3, 3), groups=4),
    # The tensor-core filter gradient with groups: 32 channels a group (288 (ci, r, s) rows, dilated,
    # several 64-pixel tiles and slices), and 4 input channels a group (staged by element).
    form("grouped32_dilated", 3, 64, 64, (13, 11), (3, 3), padding=2, dilation=2, groups=2),
    form("grouped_in4_out8", 2, 8, 16, (12, 9), (3, 3), stride=(2, 1), padding=1, groups=2),
    # 1x1 convolutions with few channels (MBConv's, one group) run the pointwise tensor-core kernels in
    # fp16/bf16 channels_last, all three directions: 40 input channels are padded to the mma's K of
    # 48; 144 output channels take the forward kernel's widest instance (20 fragments) and split the
    # filter gradient's 27 fragments over two warp groups; 16 to 96 is EfficientNet's expansion.
    # The filter gradient of 16 to 24 runs the GEMM filter kernel instead (dy with 24 to 64
    # channels), the others the streaming one. Pixel counts leave a partial last tile of 128.
    form("pointwise16_to_24", 3, 16, 24, (9, 11), (1, 1)),
    form("pointwise40_to_8", 2, 40, 8, (7, 5), (1, 1)),
    form("pointwise24_to_144", 2, 24, 144, (13, 10), (1, 1)),
    form("pointwise16_to_96", 4, 16, 96, (16, 17), (1, 1)),
    form("dw1d_k3", 2, 64, 64, (101,), (3,), padding=1, groups=64),
    form("one_to_many_1d", 2, 1, 32, (200,), (16,), stride=8, padding=8),
    form("decoder_transposed_1d", 2, 32, 1, (25,), (16,), stride=8, padding=8, transposed=True),
    form("dw_transposed_2d", 2, 16, 16, (7, 9), (4, 4), stride=2, padding=1, groups=16, transposed=True),
    form("grouped_transposed_op", 2, 16, 32, (6, 6), (3, 3), stride=2, padding=1, groups=4, transposed=True,
         output_padding=1),
]

# Max relative error (max |out - ref| / max |ref|) allowed against float64.
DTYPES = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5, torch.float64: 1e-12}
LAYOUTS = ["contiguous", "channels_last"]


def layout_format(layout: str, spatial_dims: int) -> torch.memory_format:
    """1-d has no channels-last: it runs contiguous."""
    return memory_format(layout, spatial_dims) or torch.contiguous_format


def operands(case: ConvForm, dtype: torch.dtype, layout: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(case.input_shape, generator=g, dtype=torch.float64)
    w = torch.randn(case.weight_shape, generator=g, dtype=torch.float64)
    fmt = layout_format(layout, case.spatial_dims)
    return (x.to("cuda", dtype).contiguous(memory_format=fmt), w.to("cuda", dtype).contiguous(memory_format=fmt))


def max_relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.detach().double().cpu()
    actual = actual.detach().double().cpu()
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30))


def float64_reference(case: ConvForm, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
    return (reference(case, x, w), *reference_grads(case, x, w, grad))


def run_ours(case: ConvForm, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
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
def test_all_directions_match_float64(case: ConvForm, dtype: torch.dtype, layout: str) -> None:
    x, w = operands(case, dtype, layout)
    with torch_cudnn_algo.flags(conv_fwd_algo=None):
        y_shape = case.conv(x, w).shape
    grad = torch.randn(y_shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grad_gpu = grad.to("cuda", dtype).contiguous(memory_format=layout_format(layout, case.spatial_dims))
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
    # cudnn.flags() defaults to enabled=False: say every setting.
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        ours = run_ours(case, x, w, grad_gpu)
    ran = {d: torch_cudnn_algo.diagnostics.pinned_run_counts()[d] - before[d] for d in before}
    expected = float64_reference(case, x, w, grad_gpu)
    for name, actual, reference in zip(("output", "grad_input", "grad_weight"), ours, expected):
        assert actual.dtype == dtype
        assert actual.shape == reference.shape, name
        error = max_relative_error(actual, reference)
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
    grad = grad.to("cuda", torch.float16).contiguous(memory_format=layout_format(layout, case.spatial_dims))
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
@pytest.mark.parametrize("name", ["stem3x3s2", "grouped24"])  # x read element by element, and by vectors
def test_non_contiguous_and_misaligned_operands(layout: str, name: str) -> None:
    case = next(case for case in CASES if case.name == name)
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
            assert max_relative_error(actual, reference) <= DTYPES[torch.float16]


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
        with pytest.raises(RuntimeError, match="TORCH_CUDNN_ALGO_OWN_KERNELS=0"):
            F.conv2d(x, w, padding=1, groups=8)
    (kernel,) = [c for c in torch_cudnn_algo.list_algorithms("conv2d 2x8x6x6 -> 8x3x3 s1 p1 g8 fp16 fwd")
                 if c.kind == "kernel"]
    assert kernel.status.startswith("unsupported: this build leaves our kernels out"), kernel


@own_kernels
def test_the_default_build_lists_them_as_a_candidate_where_they_run() -> None:
    (kernel,) = [c for c in torch_cudnn_algo.list_algorithms("conv2d 8x32x28x28 -> 32x3x3 s1 p1 g32 fp16 "
                                                             "channels_last fwd") if c.kind == "kernel"]
    assert kernel.value == "tca.direct" and kernel.status == "ok", kernel


@own_kernels
def test_the_tuner_times_them_beside_cudnn_and_a_pick_of_ours_runs_as_planned() -> None:
    # RegNetY's grouped 3x3 with 24 channels per group, where the tensor-core kernel applies.
    conv = torch.nn.Conv2d(120, 120, 3, padding=1, groups=5, bias=False).cuda().half()
    conv = conv.to(memory_format=torch.channels_last)
    x = torch.randn(16, 120, 28, 28, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    plan = torch_cudnn_algo.tune(conv, x.detach().requires_grad_(), progress=False)  # all three directions
    log = torch_cudnn_algo.diagnostics.tuning_log()
    assert sorted(entry["direction"] for entry in log) == ["bwd_data", "bwd_filter", "fwd"]
    for entry in log:
        ours = [c for c in entry["configs"] if c["config"] == "tca.direct"]
        assert len(ours) == 1 and ours[0]["runnable"] and ours[0]["ms"] is not None, entry
        # Probed once first; timed in full (and so pickable) only near heuristics A's best.
        assert ours[0]["probe"] in ("near", "far"), entry
        assert ours[0]["probe"] == "near" or entry["pick"] != "tca.direct", entry
        assert entry["stock_config"] != "tca.direct"
    case = ConvForm("regnety g5", (16, 120, 28, 28), (120, 24, 3, 3), padding=1, groups=5)
    xg = x.detach().clone().requires_grad_()
    with torch_cudnn_algo.use_plan(plan):
        out = conv(xg)
        grad = torch.randn_like(out)
        out.backward(grad)
        runs = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    assert sum(runs.values()) >= 3, runs
    assert relative_error(out, reference(case, x, conv.weight)) < 1e-2
    gx, gw = reference_grads(case, x, conv.weight, grad)
    assert relative_error(xg.grad, gx) < 1e-2 and relative_error(conv.weight.grad, gw) < 1e-2
