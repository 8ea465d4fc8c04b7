"""CPU: the one description of a convolution (ConvSpec) and its string form."""

from __future__ import annotations

import pytest
import torch

from torch_cudnn_algo import ConvSpec
from torch_cudnn_algo._conv_spec import as_conv_spec

CASES = [
    ConvSpec((64, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1, dtype=torch.float16, channels_last=True),
    ConvSpec((8, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, dtype=torch.bfloat16, channels_last=True,
             direction="bwd_filter"),
    ConvSpec((2, 32, 9, 17), (64, 8, 3, 1), (2, 1), (1, 0), (2, 1), groups=4, direction="bwd_data"),
    ConvSpec((2, 16, 5, 6, 7), (8, 16, 3, 3, 3), 1, (0, 1, 2), 1, dtype=torch.float64),
    ConvSpec((4, 16, 100), (32, 16, 5), 1, 2, 1),
    ConvSpec((3, 32, 7, 7), (32, 8, 4, 4), 2, 1, 1, groups=2, transposed=True, output_padding=1,
             direction="bwd_data"),
    ConvSpec((1, 6, 4, 5, 6), (6, 3, 2, 2, 2), (2, 1, 1), 0, 1, transposed=True, output_padding=(1, 0, 0),
             dtype=torch.float16, channels_last=True, direction="fwd"),
    ConvSpec((2, 8, 16), (8, 4, 3), 3, 1, 2, groups=2, transposed=True, output_padding=2),
]


@pytest.mark.parametrize("spec", CASES, ids=str)
def test_string_form_parses_back_to_the_same_description(spec: ConvSpec) -> None:
    text = str(spec)
    again = ConvSpec.parse(text)
    assert again == spec
    assert str(again) == text
    assert hash(again) == hash(spec)


def test_the_issue_example_is_the_canonical_form() -> None:
    text = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
    spec = ConvSpec.parse(text)
    assert str(spec) == text
    assert spec.weight == (256, 256, 3, 3)
    assert spec.output == (64, 256, 14, 14)
    assert spec.memory_format == torch.channels_last


def test_words_after_the_shapes_come_in_any_order_with_defaults() -> None:
    spec = ConvSpec.parse("conv2d 8x16x10x10 -> 32x3x3 bwd_data FP16 p1 nhwc")
    assert spec == ConvSpec((8, 16, 10, 10), (32, 16, 3, 3), 1, 1, 1, dtype=torch.float16,
                            channels_last=True, direction="bwd_data")
    assert ConvSpec.parse("conv2d 8x16x10x10 -> 32x3x3") == ConvSpec((8, 16, 10, 10), (32, 16, 3, 3), 1, 0, 1)


def test_transposed_weight_and_output_follow_conv_transpose() -> None:
    spec = ConvSpec.parse("conv_transpose2d 3x32x7x7 -> 16x4x4 s2 p1 g2 op1 bwd_data")
    assert spec.weight == (32, 8, 4, 4)  # (C_in, C_out / groups, *kernel), as F.conv_transpose2d
    x = torch.randn(spec.input)
    w = torch.randn(spec.weight)
    y = torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)
    assert tuple(y.shape) == spec.output


def test_output_matches_torch_for_an_ordinary_convolution() -> None:
    spec = CASES[2]
    y = torch.nn.functional.conv2d(torch.randn(spec.input), torch.randn(spec.weight), stride=spec.stride,
                                   padding=spec.padding, dilation=spec.dilation, groups=spec.groups)
    assert tuple(y.shape) == spec.output


def test_cudnn_form_lifts_one_d_to_two_d_as_aten_does() -> None:
    spec = ConvSpec.parse("conv1d 4x16x100 -> 32x5 s2 p2 d3 fp32 contiguous fwd")
    lifted = spec.cudnn_form()
    assert str(lifted) == "conv2d 4x16x1x100 -> 32x1x5 s1x2 p0x2 d1x3 fp32 contiguous fwd"
    assert lifted.cudnn_form() is lifted
    x, w, padding, stride, dilation, groups, transposed, output_padding = spec.op_args()
    assert x.is_meta and tuple(x.shape) == (4, 16, 1, 100) and tuple(w.shape) == (32, 16, 1, 5)
    assert (padding, stride, dilation, groups, transposed, output_padding) == ([0, 2], [1, 2], [1, 3], 1, False,
                                                                                [0, 0])


def test_op_args_carry_the_layout() -> None:
    x, w, *_ = CASES[0].op_args()
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    assert w.is_contiguous(memory_format=torch.channels_last)


def test_of_reads_tensors_descriptions_and_shapes() -> None:
    x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)
    w = torch.randn(4, 8, 3, 3)
    assert str(ConvSpec.of("bwd_filter", x, w, padding=1)) == "conv2d 2x8x10x10 -> 4x3x3 s1 p1 fp32 channels_last bwd_filter"
    # A bare shape takes the other operand's dtype; float64 never runs channels-last.
    assert str(ConvSpec.of("fwd", "2x8x10x10 float64 channels_last", [4, 8, 3, 3])) == (
        "conv2d 2x8x10x10 -> 4x3x3 s1 p0 fp64 contiguous fwd")
    assert ConvSpec.of("fwd", [2, 8, 10, 10], "4x8x3x3 fp16 channels_last").channels_last
    assert ConvSpec.of("fwd", [2, 8, 10, 10], [4, 8, 3, 3], stride=[2]).stride == (2, 2)


@pytest.mark.parametrize("text, expected", [
    ("conv2d 1x2", "at least"),
    ("conv4d 1x2x3x4x5x6 -> 1x1x1x1x1", "conv4d"),
    ("conv2d 1x8x5x5 => 4x3x3", "NxCx"),
    ("conv2d 1x8x5x5 -> 4x3", "needs an input of 4 sizes"),
    ("conv2d 1x8x5x5 -> 4x7x7", "kernel does not fit"),
    ("conv2d 1x8x5x5 -> 4x3x3 q1", "unknown word 'q1'"),
    ("conv2d 1x8x5x5 -> 4x3x3 s1 s2", "a second time"),
    ("conv2d 1x6x5x5 -> 4x3x3 g4", "groups=4 must divide"),
    ("conv2d 1x8x5x5 -> 4x3x3 s1x2x3", "give one value or 2"),
    ("conv2d 1x8x5x5 -> 4x3x3 op1", "transposed convolutions only"),
    ("conv_transpose2d 1x8x5x5 -> 4x3x3 s2 op2", "output_padding must be smaller"),
    ("conv1d 1x8x5 -> 4x3 channels_last", "no channels_last"),
    ("conv2d 1x8x5x5 -> 4x3x3 s0", "stride and dilation must be >= 1"),
])
def test_unreadable_descriptions_say_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        ConvSpec.parse(text)
    message = str(info.value)
    assert expected in message
    assert repr(text) in message and "conv2d 64x256x14x14 -> 256x3x3" in message  # what was read, an example


def test_invalid_values_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="direction must be one of"):
        ConvSpec((1, 8, 5, 5), (4, 8, 3, 3), 1, 0, 1, direction="forward")
    with pytest.raises(ValueError, match="dtype must be"):
        ConvSpec((1, 8, 5, 5), (4, 8, 3, 3), 1, 0, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="expects 16 input channels"):
        ConvSpec((1, 8, 5, 5), (4, 16, 3, 3), 1, 0, 1)


def test_as_conv_spec_takes_one_form_or_the_other() -> None:
    spec = CASES[0]
    assert as_conv_spec(spec, None, None, {}) is spec
    assert as_conv_spec(str(spec), None, None, {}) == spec
    with pytest.raises(TypeError, match="either a ConvSpec"):
        as_conv_spec(spec, None, None, {"padding": 1})
    with pytest.raises(TypeError, match="needs both input and weight"):
        as_conv_spec("fwd", None, None, {})
    with pytest.raises(TypeError, match="unknown convolution parameters"):
        as_conv_spec("fwd", [1, 8, 5, 5], [4, 8, 3, 3], {"pading": 1})
