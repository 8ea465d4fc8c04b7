"""The networks of the zoo benchmark (benchmarks/zoo.py), one builder each, and the training
step they all run (:class:`Trainer`).

A builder returns a :class:`Workload`, on the CPU with random weights and a random example
input: only the convolutions' shapes, dtypes and layouts matter to cuDNN's choices, so no
weights are downloaded. torchvision, timm and torchaudio are benchmark-only dependencies,
imported inside the builders: a missing library fails only the networks that need it, and
``--help``, ``--merge-only`` and the CPU tests need none of them.

Together the zoo covers every kind of convolution: plain 3x3/1x1 (ResNet-50,
in AMP fp16 and in fp32 with TF32), depthwise (MobileNetV3, EfficientNet-B0, ConvNeXt's 7x7),
grouped (ResNeXt, RegNetY), 3-d (R3D-18), transposed (the DCGAN generator) and 1-d
(Conv-TasNet, Wav2Letter) convolutions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

__all__ = ["AMP_FP16", "FP32_TF32", "ZOO", "Trainer", "Workload", "ZooEntry", "build_trainer", "dcgan_generator",
           "loss_of"]

AMP_FP16 = "amp_fp16"  # fp32 weights, torch.autocast(float16) forward, GradScaler
FP32_TF32 = "fp32_tf32"  # plain fp32 with TF32 allowed for cuDNN convolutions and cuBLAS matmuls

IMAGE_BATCH = 64
IMAGE_SIZE = 224


class Workload(NamedTuple):
    """What one training step runs: the model, its example input, the precision
    (AMP_FP16 or FP32_TF32) and the memory format of model and input."""

    model: nn.Module
    example_input: torch.Tensor
    precision: str
    memory_format: torch.memory_format


@dataclass(frozen=True)
class ZooEntry:
    """A zoo network: its builder, and the kinds of convolution it brings (the report
    names them, and a test checks that the zoo covers every kind)."""

    name: str
    kinds: frozenset[str]
    build: Callable[[], Workload]


def _images(batch: int = IMAGE_BATCH, size: int = IMAGE_SIZE) -> torch.Tensor:
    return torch.randn(batch, 3, size, size)


def resnet50_amp() -> Workload:
    import torchvision

    return Workload(torchvision.models.resnet50(weights=None), _images(), AMP_FP16, torch.channels_last)


def resnet50_tf32() -> Workload:
    import torchvision

    return Workload(torchvision.models.resnet50(weights=None), _images(), FP32_TF32, torch.contiguous_format)


def mobilenet_v3_large() -> Workload:
    import torchvision

    return Workload(torchvision.models.mobilenet_v3_large(weights=None), _images(), AMP_FP16, torch.channels_last)


def resnext50_32x4d() -> Workload:
    import torchvision

    return Workload(torchvision.models.resnext50_32x4d(weights=None), _images(), AMP_FP16, torch.channels_last)


def efficientnet_b0() -> Workload:
    import torchvision

    return Workload(torchvision.models.efficientnet_b0(weights=None), _images(), AMP_FP16, torch.channels_last)


def convnext_tiny() -> Workload:
    import timm

    return Workload(timm.create_model("convnext_tiny", pretrained=False), _images(), AMP_FP16, torch.channels_last)


def regnety_016() -> Workload:
    import timm

    return Workload(timm.create_model("regnety_016", pretrained=False), _images(), AMP_FP16, torch.channels_last)


def r3d_18() -> Workload:
    import torchvision

    clips = torch.randn(8, 3, 16, 112, 112)
    return Workload(torchvision.models.video.r3d_18(weights=None), clips, AMP_FP16, torch.channels_last_3d)


DCGAN_LATENT = 100  # nz in the PyTorch examples
DCGAN_BATCH = 128


def dcgan_generator(nz: int = DCGAN_LATENT, ngf: int = 64, nc: int = 3) -> nn.Sequential:
    """The generator of the PyTorch examples' DCGAN (dcgan/main.py, its ``main`` stack):
    a [B, nz, 1, 1] latent through five ConvTranspose2d layers to [B, nc, 64, 64] images,
    initialised as that script's ``weights_init`` does."""
    generator = nn.Sequential(
        nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),  # -> 4x4
        nn.BatchNorm2d(ngf * 8),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),  # -> 8x8
        nn.BatchNorm2d(ngf * 4),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # -> 16x16
        nn.BatchNorm2d(ngf * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),  # -> 32x32
        nn.BatchNorm2d(ngf),
        nn.ReLU(True),
        nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),  # -> 64x64
        nn.Tanh(),
    )
    for module in generator.modules():
        if isinstance(module, nn.ConvTranspose2d):
            nn.init.normal_(module.weight, 0.0, 0.02)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.normal_(module.weight, 1.0, 0.02)
            nn.init.zeros_(module.bias)
    return generator


def dcgan() -> Workload:
    latent = torch.randn(DCGAN_BATCH, DCGAN_LATENT, 1, 1)
    return Workload(dcgan_generator(), latent, AMP_FP16, torch.channels_last)


def conv_tasnet() -> Workload:
    import torchaudio

    # Default arguments: 2 sources, 512-filter encoder (kernel 16, stride 8), 3 stacks of 8
    # dilated depthwise-separable Conv1d blocks, ConvTranspose1d decoder. 2 s at 16 kHz.
    return Workload(torchaudio.models.ConvTasNet(), torch.randn(4, 1, 32000), AMP_FP16, torch.contiguous_format)


def wav2letter() -> Workload:
    import torchaudio

    # From the waveform (one input channel): a kernel-250 stride-160 Conv1d front end, then
    # eleven Conv1d layers (kernels 48, 7, 32 and 1, up to 2000 channels). 1 s at 16 kHz.
    model = torchaudio.models.Wav2Letter(num_classes=40, input_type="waveform", num_features=1)
    return Workload(model, torch.randn(16, 1, 16000), AMP_FP16, torch.contiguous_format)


ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in (
    ZooEntry("resnet50_amp", frozenset({"plain", "amp_fp16"}), resnet50_amp),
    ZooEntry("resnet50_tf32", frozenset({"plain", "fp32_tf32"}), resnet50_tf32),
    ZooEntry("mobilenet_v3_large", frozenset({"depthwise"}), mobilenet_v3_large),
    ZooEntry("resnext50_32x4d", frozenset({"grouped"}), resnext50_32x4d),
    ZooEntry("efficientnet_b0", frozenset({"depthwise"}), efficientnet_b0),
    ZooEntry("convnext_tiny", frozenset({"depthwise", "timm"}), convnext_tiny),
    ZooEntry("regnety_016", frozenset({"grouped", "timm"}), regnety_016),
    ZooEntry("r3d_18", frozenset({"3d"}), r3d_18),
    ZooEntry("dcgan_generator", frozenset({"transposed"}), dcgan),
    ZooEntry("conv_tasnet", frozenset({"1d", "depthwise", "transposed"}), conv_tasnet),
    ZooEntry("wav2letter", frozenset({"1d"}), wav2letter),
)}


# ---------------------------------------------------------------------------
# The training step every zoo network runs
# ---------------------------------------------------------------------------


def loss_of(output: object) -> torch.Tensor:
    """``output.float().mean()``; for a tuple, list or dict of outputs, the sum of that over
    its floating-point tensors (nested containers included)."""
    if isinstance(output, torch.Tensor):
        return output.float().mean()
    if isinstance(output, dict):
        items = list(output.values())
    elif isinstance(output, (list, tuple)):
        items = list(output)
    else:
        raise TypeError(f"cannot make a loss of a {type(output).__name__}")
    parts = [loss_of(item) for item in items
             if isinstance(item, (list, tuple, dict)) or (isinstance(item, torch.Tensor) and item.is_floating_point())]
    if not parts:
        raise TypeError("the output holds no floating-point tensor")
    return torch.stack(parts).sum()


class Trainer:
    """A zoo network's training step on ``device``.

    ``step`` is the eager step (GradScaler's ``step`` checks for infs on the host, a
    synchronisation, as every AMP training loop does). ``graph_body`` is the same work without
    that host check (unscale_, an unconditional optimizer step, update), so that a CUDA graph can
    capture it. Autocast's weight-cast cache is off in both: capture needs it off, and the eager
    step then does the same work as the graph."""

    def __init__(self, workload: Workload, device: str) -> None:
        self.amp = workload.precision == AMP_FP16
        self.model = workload.model.to(device, memory_format=workload.memory_format).train()
        self.inputs = workload.example_input.to(device).contiguous(memory_format=workload.memory_format)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp)

    def autocast(self) -> torch.autocast:
        return torch.autocast("cuda", dtype=torch.float16, enabled=self.amp, cache_enabled=False)

    def loss(self) -> torch.Tensor:
        with self.autocast():
            return loss_of(self.model(self.inputs))

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(self.loss()).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def graph_body(self) -> None:
        self.scaler.scale(self.loss()).backward()
        self.scaler.unscale_(self.optimizer)
        self.optimizer.step()
        self.scaler.update()

    def graph_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.graph_body()


def apply_precision(precision: str) -> dict[str, object]:
    """Process-wide numerics of a workload; returns them as recorded. fp32 networks run with TF32
    on, as fp32 training usually runs on Ampere and later; AMP networks keep torch's defaults."""
    if precision == FP32_TF32:
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
    elif precision != AMP_FP16:
        raise ValueError(f"unknown precision {precision!r}")
    torch.backends.cudnn.benchmark = False
    return {"precision": precision, "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "deterministic": torch.are_deterministic_algorithms_enabled()}


def build_trainer(network: str, device: str) -> tuple[Trainer, dict]:
    """The network's Trainer (seeded: every process builds the same weights and input) and what
    the raw files record of it."""
    torch.manual_seed(0)
    workload = ZOO[network].build()
    numerics = apply_precision(workload.precision)
    trainer = Trainer(workload, device)
    recorded = {"input": list(workload.example_input.shape), "memory_format": str(workload.memory_format),
                "parameters": sum(p.numel() for p in trainer.model.parameters()),
                "model": type(workload.model).__name__, **numerics}
    return trainer, recorded
