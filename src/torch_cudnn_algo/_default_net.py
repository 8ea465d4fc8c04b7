"""The network ``torch-cudnn-algo tune`` tunes when given none: a compact mixed CNN.

Defined here rather than imported from torchvision so the command needs no extra
package and no download: its weights are random, which does not matter, since
only the convolutions' shapes (and so cuDNN's algorithm choices and timings) do.

It puts side by side the convolution kinds today's image CNNs run, because
cuDNN's heuristics choose about as well as a search for some and not for others,
so that what choosing buys shows on one network:

- a ResNet stem (7x7 stride 2, max pool) and two plain ResNet-50 bottlenecks at
  56x56 (1x1 reduce, 3x3, 1x1 expand, 1x1 shortcut): dense convolutions, as
  ResNets, U-Nets and detection backbones run;
- two ResNeXt-50 32x4d bottlenecks at 28x28 whose 3x3 has 32 groups (the first
  with stride 2 and a 1x1 stride-2 shortcut): grouped convolutions, as ResNeXt
  and RegNet run;
- MobileNetV2/EfficientNet inverted residuals: 1x1 expand, depthwise 3x3 (three
  blocks, 14x14) or 5x5 (two blocks, 7x7), squeeze-excite by two 1x1
  convolutions on the pooled 1x1 map, 1x1 project; the first block of each
  stage has stride 2: depthwise convolutions, as EfficientNet, MobileNetV3 and
  ConvNeXt run;
- a 1x1 head to 1280 channels, pooling and a linear classifier.

Depthwise convolutions make cuDNN compile engines at run time (in stock's first
step, in ``benchmark=True``'s search and in the tuner alike), so the network
has only four distinct depthwise shapes: the tuning stays short. 41
convolutions (26 distinct forward shapes), 7.7 million parameters.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DEFAULT_BATCH", "DEFAULT_IMAGE_SIZE", "DefaultNet", "conv_census", "default_example_inputs"]

DEFAULT_BATCH = 64
DEFAULT_IMAGE_SIZE = 224

_EXPANSION = 4  # a ResNet bottleneck's output has 4x its inner width (ResNet-50/101/152)
_INPUT_SEED = 0


class _Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride, as torchvision's "ResNet v1.5"
    does; ``groups`` > 1 makes it ResNeXt's grouped 3x3), 1x1 expand; BatchNorm
    after each convolution, residual add (a 1x1 shortcut where the shape
    changes), ReLU."""

    def __init__(self, in_channels: int, width: int, stride: int, out_channels: int | None = None,
                 groups: int = 1) -> None:
        super().__init__()
        out_channels = out_channels or width * _EXPANSION
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
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


class _SqueezeExcite(nn.Module):
    """Channel attention as EfficientNet and MobileNetV3 have it: global average
    pool, 1x1 convolution down to ``squeeze`` channels, SiLU, 1x1 back up,
    sigmoid, scale."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, channels, 1)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.expand(self.act(self.reduce(self.pool(x))))
        return x * torch.sigmoid(scale)


class _InvertedResidual(nn.Module):
    """MobileNetV2/EfficientNet's MBConv: 1x1 expand to ``hidden`` channels,
    depthwise ``kernel`` x ``kernel`` (carrying the stride), squeeze-excite, 1x1
    project (no activation after it); BatchNorm after each convolution, SiLU,
    residual add where the shape is kept."""

    def __init__(self, in_channels: int, out_channels: int, hidden: int, kernel: int, stride: int,
                 squeeze: int) -> None:
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(in_channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                    nn.SiLU(inplace=True))
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel, stride=stride, padding=kernel // 2, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.SiLU(inplace=True))
        self.se = _SqueezeExcite(hidden, squeeze)
        self.project = nn.Sequential(nn.Conv2d(hidden, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels))
        self.residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.se(self.depthwise(self.expand(x))))
        return x + out if self.residual else out


class DefaultNet(nn.Module):
    """The mixed CNN of the module docstring: ResNet stem and bottlenecks at
    56x56, ResNeXt grouped bottlenecks at 28x28, inverted residuals with
    depthwise 3x3 at 14x14 and 5x5 at 7x7, a 1x1 head. The spatial sizes are
    those of a 224x224 input; any input of at least 32x32 runs."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        # output channels x size for a 224x224 input, in the comments
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),   # 64 x 56
                                  nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        self.plain = nn.Sequential(_Bottleneck(64, 64, 1), _Bottleneck(256, 64, 1))      # 256 x 56
        self.grouped = nn.Sequential(_Bottleneck(256, 256, 2, 512, groups=32),           # 512 x 28
                                     _Bottleneck(512, 256, 1, 512, groups=32))
        # in, out, hidden (expanded) channels, depthwise kernel, stride, squeeze-excite channels
        self.depthwise3 = nn.Sequential(_InvertedResidual(512, 256, 1024, 3, 2, 64),     # 256 x 14
                                        _InvertedResidual(256, 256, 1024, 3, 1, 64),
                                        _InvertedResidual(256, 256, 1024, 3, 1, 64))
        self.depthwise5 = nn.Sequential(_InvertedResidual(256, 384, 1536, 5, 2, 96),     # 384 x 7
                                        _InvertedResidual(384, 384, 1536, 5, 1, 96))
        self.head = nn.Sequential(nn.Conv2d(384, 1280, 1, bias=False), nn.BatchNorm2d(1280),
                                  nn.SiLU(inplace=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(1280, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                # torchvision's initialization: keeps activations finite through the
                # network, so timings are not distorted by infs or denormals.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.depthwise5(self.depthwise3(self.grouped(self.plain(self.stem(x)))))
        return self.fc(torch.flatten(self.pool(self.head(x)), 1))


def conv_census(model: nn.Module) -> dict[str, int]:
    """How many of ``model``'s 2-d convolutions are depthwise (one group per
    input channel), grouped (other groups > 1) and plain, by kernel size:
    ``{"depthwise 3x3": 3, "grouped 3x3": 2, "plain 1x1": 31, ...}``."""
    census: dict[str, int] = {}
    for module in model.modules():
        if not isinstance(module, nn.Conv2d):
            continue
        if module.groups == 1:
            kind = "plain"
        elif module.groups == module.in_channels:
            kind = "depthwise"
        else:
            kind = "grouped"
        key = f"{kind} {module.kernel_size[0]}x{module.kernel_size[1]}"
        census[key] = census.get(key, 0) + 1
    return dict(sorted(census.items()))


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
