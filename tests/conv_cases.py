"""Convolution forms, dtypes and layouts the GPU tests sweep, with an independent
float64 CPU reference and the tolerance each dtype implies."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ConvForm:
    name: str
    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    stride: int | tuple[int, ...] = 1
    padding: int | tuple[int, ...] = 0
    dilation: int = 1
    groups: int = 1
    transposed: bool = False
    output_padding: int = 0

    @property
    def spatial_dims(self) -> int:
        return len(self.input_shape) - 2

    def conv(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.transposed:
            fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[self.spatial_dims]
            return fn(x, w, stride=self.stride, padding=self.padding, output_padding=self.output_padding,
                      groups=self.groups, dilation=self.dilation)
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[self.spatial_dims]
        return fn(x, w, stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)

    def kwargs(self) -> dict[str, object]:
        kwargs = dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)
        if self.transposed:
            kwargs.update(transposed=True, output_padding=self.output_padding)
        return kwargs


FORMS = [
    ConvForm("conv1d", (2, 8, 37), (16, 8, 3), padding=1),
    ConvForm("conv2d_3x3", (2, 8, 17, 19), (16, 8, 3, 3), padding=1),
    ConvForm("conv2d_stride2", (2, 8, 17, 19), (16, 8, 3, 3), stride=2),
    ConvForm("conv2d_dilation2", (2, 8, 17, 19), (16, 8, 3, 3), padding=2, dilation=2),
    ConvForm("conv2d_groups2", (2, 8, 17, 19), (16, 4, 3, 3), padding=1, groups=2),
    ConvForm("conv2d_depthwise", (2, 8, 17, 19), (8, 1, 3, 3), padding=1, groups=8),
    ConvForm("conv2d_1x1", (2, 8, 17, 19), (16, 8, 1, 1)),
    ConvForm("conv2d_5x5", (2, 8, 32, 32), (16, 8, 5, 5), padding=2),
    ConvForm("conv3d", (2, 4, 7, 8, 9), (8, 4, 3, 3, 3), padding=1),
    ConvForm("conv3d_stride2", (2, 4, 9, 8, 9), (8, 4, 3, 3, 3), stride=2, padding=1),
]


TRANSPOSED_FORMS = [
    ConvForm("conv_transpose1d", (2, 8, 15), (8, 4, 3), stride=2, padding=1, transposed=True, output_padding=1),
    ConvForm("conv_transpose2d", (2, 8, 9, 10), (8, 6, 3, 3), stride=2, padding=1, transposed=True, output_padding=1),
    ConvForm("conv_transpose2d_groups2", (2, 8, 9, 9), (8, 3, 3, 3), padding=1, groups=2, transposed=True),
    ConvForm("conv_transpose2d_dilation2", (2, 8, 9, 9), (8, 6, 3, 3), dilation=2, transposed=True),
    ConvForm("conv_transpose3d", (2, 4, 5, 6, 7), (4, 4, 3, 3, 3), stride=2, padding=1, transposed=True, output_padding=1),
]


@dataclass(frozen=True)
class DtypeCase:
    name: str
    dtype: torch.dtype
    allow_tf32: bool
    # Relative Frobenius error allowed against the float64 reference.
    tolerance: float


DTYPES = [
    DtypeCase("float32", torch.float32, allow_tf32=False, tolerance=2e-5),
    DtypeCase("float32_tf32", torch.float32, allow_tf32=True, tolerance=5e-3),
    DtypeCase("float16", torch.float16, allow_tf32=False, tolerance=5e-3),
    DtypeCase("bfloat16", torch.bfloat16, allow_tf32=False, tolerance=3e-2),
    DtypeCase("float64", torch.float64, allow_tf32=False, tolerance=1e-10),
]

LAYOUTS = ["contiguous", "channels_last"]

# FFT and Winograd compute through transforms whose rounding error grows with the
# tile and kernel size (measured on the H100: 4.7e-4 for WINOGRAD_NONFUSED on a
# 5x5 fp32 conv with FMA math); cuDNN documents them as less accurate.
TRANSFORM_ALGOS = {
    "fwd": frozenset({4, 5, 6, 7}),  # FFT, FFT_TILING, WINOGRAD, WINOGRAD_NONFUSED
    "bwd_data": frozenset({2, 3, 4, 5}),  # FFT, FFT_TILING, WINOGRAD, WINOGRAD_NONFUSED
    "bwd_filter": frozenset({2, 5, 6}),  # FFT, WINOGRAD_NONFUSED, FFT_TILING
}
TRANSFORM_FWD_ALGOS = TRANSFORM_ALGOS["fwd"]
TRANSFORM_TOLERANCE = 2e-3


def tolerance(case: "DtypeCase", algo: int | None, direction: str = "fwd") -> float:
    if algo in TRANSFORM_ALGOS[direction]:
        return max(case.tolerance, TRANSFORM_TOLERANCE)
    return case.tolerance


def form_layouts(forms: list["ConvForm"] | None = None) -> list[tuple["ConvForm", str]]:
    """Every (form, layout) pair that exists: 1-d convolutions have no channels-last."""
    return [(form, layout) for form in (forms or FORMS) for layout in LAYOUTS
            if memory_format(layout, form.spatial_dims)]


def memory_format(layout: str, spatial_dims: int) -> torch.memory_format | None:
    """None when the layout does not exist for this rank (channels-last 1-d)."""
    if layout == "contiguous":
        return torch.contiguous_format
    return {2: torch.channels_last, 3: torch.channels_last_3d}.get(spatial_dims)


def make_inputs(form: ConvForm, case: DtypeCase, fmt: torch.memory_format, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(form.input_shape, generator=gen, dtype=torch.float64)
    w = torch.randn(form.weight_shape, generator=gen, dtype=torch.float64)
    # Inputs are rounded to the dtype first, so the reference sees the same values.
    x = x.to(case.dtype).cuda().contiguous(memory_format=fmt)
    w = w.to(case.dtype).cuda().contiguous(memory_format=fmt)
    return x, w


def reference(form: ConvForm, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 on the CPU: independent of cuDNN and of this package."""
    return form.conv(x.double().cpu(), w.double().cpu())


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    actual, expected = actual.double().cpu(), expected.double().cpu()
    if not torch.isfinite(actual).all():
        return float("inf")
    return float((actual - expected).norm() / expected.norm().clamp_min(1e-300))


def reaches_cudnn(form: ConvForm, x: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether stock PyTorch routes this convolution to cuDNN at all."""
    n = form.spatial_dims

    def per_dim(value: int | tuple[int, ...]) -> list[int]:
        return list(value) if isinstance(value, tuple) else [value] * n

    backend = torch._C._select_conv_backend(
        x, w, None, per_dim(form.stride), per_dim(form.padding), per_dim(form.dilation), form.transposed,
        per_dim(form.output_padding), form.groups,
    )
    expected = torch._C._ConvBackend.CudnnTranspose if form.transposed else torch._C._ConvBackend.Cudnn
    return backend == expected


def reference_grads(form: ConvForm, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor):
    """float64 CPU gradients of the convolution w.r.t. input and weight."""
    x64 = x.detach().double().cpu().requires_grad_()
    w64 = w.detach().double().cpu().requires_grad_()
    return torch.autograd.grad(form.conv(x64, w64), (x64, w64), grad.double().cpu())
