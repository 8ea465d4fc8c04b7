"""CPU: the ``tune`` command's embedded default network has ResNet-50's topology
and its example input is channels_last and the same on every call."""

from __future__ import annotations

import torch

from torch_cudnn_algo._default_net import (
    DEFAULT_BATCH,
    DEFAULT_IMAGE_SIZE,
    DefaultNet,
    default_example_inputs,
)

RESNET50_PARAMETERS = 25_557_032  # torchvision.models.resnet50()


def _parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_small_instance_forward_and_backward() -> None:
    model = DefaultNet(layers=(1, 1, 1, 1), width=8, num_classes=10)
    x = torch.randn(2, 3, 64, 64, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 10)
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert all(p.grad is not None for p in model.parameters())


def test_default_is_resnet50() -> None:
    model = DefaultNet()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 16 * 3 + 4
    try:
        import torchvision
    except ImportError:
        expected = RESNET50_PARAMETERS
    else:
        expected = _parameter_count(torchvision.models.resnet50())
        assert expected == RESNET50_PARAMETERS
    assert _parameter_count(model) == expected


def test_default_example_inputs() -> None:
    assert (DEFAULT_BATCH, DEFAULT_IMAGE_SIZE) == (64, 224)
    a = default_example_inputs(batch=2, image_size=32, device="cpu")
    b = default_example_inputs(batch=2, image_size=32, device="cpu")
    assert a.shape == (2, 3, 32, 32)
    assert a.device.type == "cpu"
    assert a.is_contiguous(memory_format=torch.channels_last)
    assert not a.is_contiguous()
    assert torch.equal(a, b)


def test_default_example_inputs_leave_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    default_example_inputs(batch=1, image_size=8, device="cpu")
    assert torch.equal(torch.rand(3), expected)
