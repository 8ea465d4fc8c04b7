"""The network ``torch-cudnn-algo tune`` profiles when given none: a ResNet-50.

Defined here rather than imported from torchvision so the command needs no extra
package and no download: its weights are random, which does not matter, since
only the convolutions' shapes (and so cuDNN's algorithm choices and timings) do.
Its 53 convolutions cover what image CNNs run: a 7x7 stride-2 stem, 1x1 reduce
and expand convolutions, 3x3 convolutions at stride 1 and 2, and 1x1 stride-2
downsample shortcuts, at four spatial sizes and widths up to 2048 channels.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DEFAULT_BATCH", "DEFAULT_IMAGE_SIZE", "DefaultNet", "default_example_inputs"]

DEFAULT_BATCH = 64
DEFAULT_IMAGE_SIZE = 224

_EXPANSION = 4  # a bottleneck's output has 4x its inner width (ResNet-50/101/152)
_INPUT_SEED = 0


class _Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride, as torchvision's "ResNet v1.5"
    does), 1x1 expand; BatchNorm after each convolution, residual add, ReLU."""

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * _EXPANSION
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class DefaultNet(nn.Module):
    """ResNet with bottleneck blocks; the defaults give ResNet-50's topology
    (and torchvision's resnet50 parameter count, 25,557,032). ``layers`` is the
    number of blocks per stage, ``width`` the first stage's inner width (stages
    use width * 1, 2, 4, 8); smaller values make a fast CPU test model."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        in_channels = width
        for index, blocks in enumerate(layers):
            stage_width = width * 2**index
            stride = 1 if index == 0 else 2
            stage = []
            for block in range(blocks):
                stage.append(_Bottleneck(in_channels, stage_width, stride if block == 0 else 1))
                in_channels = stage_width * _EXPANSION
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                # torchvision's initialization: keeps activations finite through
                # 50 layers, so timings are not distorted by infs or denormals.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def default_example_inputs(
    batch: int = DEFAULT_BATCH,
    image_size: int = DEFAULT_IMAGE_SIZE,
    device: str | torch.device = "cuda",
) -> torch.Tensor:
    """A random image batch for :class:`DefaultNet`, channels_last (the layout
    cuDNN's tensor-core kernels prefer, so the one worth tuning for).

    Drawn on the CPU from a local generator seeded with 0, then moved: every
    process, and every device, gets the same values without touching the global
    RNG state of the caller.
    """
    generator = torch.Generator().manual_seed(_INPUT_SEED)
    images = torch.randn(batch, 3, image_size, image_size, generator=generator)
    return images.to(device=device, memory_format=torch.channels_last)
