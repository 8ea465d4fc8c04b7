"""CPU: the ``tune`` command's embedded default network mixes the convolution kinds
today's CNNs run (plain 3x3/1x1, grouped, depthwise 3x3/5x5) with few distinct
depthwise shapes, trains on a small input, and its example input is channels_last
and the same on every call."""

from __future__ import annotations

import torch

from torch_cudnn_algo._default_net import (
    DEFAULT_BATCH,
    DEFAULT_IMAGE_SIZE,
    DefaultNet,
    conv_census,
    default_example_inputs,
)


def forward_shapes(model: torch.nn.Module, x: torch.Tensor) -> list[tuple]:
    """Each convolution's forward configuration (input shape, output channels, kernel,
    stride, groups), in the order run."""
    shapes: list[tuple] = []

    def record(module: torch.nn.Conv2d, inputs: tuple[torch.Tensor, ...], _output: torch.Tensor) -> None:
        shapes.append((tuple(inputs[0].shape), module.out_channels, module.kernel_size, module.stride,
                       module.groups))

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return shapes


def test_census_has_plain_grouped_and_depthwise_convolutions() -> None:
    model = DefaultNet()
    assert conv_census(model) == {"depthwise 3x3": 3, "depthwise 5x5": 2, "grouped 3x3": 2,
                                  "plain 1x1": 31, "plain 3x3": 2, "plain 7x7": 1}
    grouped = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and 1 < m.groups < m.in_channels]
    assert {m.groups for m in grouped} == {32}
    assert sum(p.numel() for p in model.parameters()) == 7_681_192  # the module docstring's 7.7 million


def test_census_counts_by_kind_and_kernel() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.Conv2d(8, 16, 5, groups=4),
                                torch.nn.Conv2d(16, 4, 1), torch.nn.Linear(2, 2))
    assert conv_census(model) == {"depthwise 3x3": 1, "grouped 5x5": 1, "plain 1x1": 1}


def test_few_distinct_depthwise_shapes_at_the_default_size() -> None:
    # Each distinct depthwise configuration costs cuDNN a runtime compilation: the docstring says four.
    shapes = set(forward_shapes(DefaultNet().eval(), torch.zeros(1, 3, DEFAULT_IMAGE_SIZE, DEFAULT_IMAGE_SIZE)))
    depthwise = {s for s in shapes if s[4] == s[0][1] and s[4] > 1}
    assert len(depthwise) == 4
    assert {s[2] for s in depthwise} == {(3, 3), (5, 5)}
    assert len(shapes) == 26


def test_forward_and_backward_on_cpu_with_a_small_input() -> None:
    model = DefaultNet(num_classes=10).to(memory_format=torch.channels_last)
    x = default_example_inputs(batch=2, image_size=32, device="cpu").requires_grad_()
    out = model(x)
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert all(p.grad is not None for p in model.parameters())


def test_same_seed_same_weights() -> None:
    # The tune command and its benchmark=True child build the model after torch.manual_seed(seed).
    torch.manual_seed(0)
    a = DefaultNet(num_classes=10)
    torch.manual_seed(0)
    b = DefaultNet(num_classes=10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


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
