"""One description of a convolution, shared by the queries, the profiler, plans and the CLI.

A :class:`ConvSpec` is what cuDNN needs to know about one convolution call in
one direction: shapes, dtype, layout, stride, padding, dilation, groups,
transposed, output padding. Its string form reads like the call and parses
back::

    conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd

(input N x C x spatial, then output channels x kernel, stride ``s``, padding
``p``, and when not the default dilation ``d``, groups ``g`` and a transposed
convolution's output padding ``op``; a per-dimension value is written ``2x1``.)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, Union

import torch
from typing_extensions import Unpack

from ._algorithms import DIRECTIONS

__all__ = ["ConvSpec", "Geometry", "TensorSpec", "as_conv_spec"]

DIRECTION_NAMES = tuple(DIRECTIONS)  # "fwd", "bwd_data", "bwd_filter"

_DTYPE_TOKENS = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}
_DTYPE_WORDS = {"fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
                "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
                "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
                "fp64": torch.float64, "float64": torch.float64, "double": torch.float64}
_CHANNELS_LAST_WORDS = ("channels_last", "nhwc", "ndhwc")
_CONTIGUOUS_WORDS = ("contiguous", "contiguous_format", "nchw", "ncdhw")
EXAMPLE = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"

IntOrSequence = Union[int, Sequence[int]]


class Geometry(TypedDict, total=False):
    """A convolution's parameters as ``torch.nn.functional.convNd`` (and
    ``conv_transposeNd`` with ``transposed=True``) take them."""

    stride: IntOrSequence
    padding: IntOrSequence
    dilation: IntOrSequence
    groups: int
    transposed: bool
    output_padding: IntOrSequence


@dataclass(frozen=True)
class TensorSpec:
    """A tensor described, not allocated: shape, dtype and memory format."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    memory_format: torch.memory_format = torch.contiguous_format

    @classmethod
    def parse(cls, text: str) -> TensorSpec:
        """``"64x256x56x56 float16 channels_last"`` (also ``"[64, 256, 56, 56]"``;
        dtype defaults to float32, layout to contiguous)."""
        shape_text = re.match(r"\s*\[?\s*(\d+(?:\s*[x,]\s*\d+)*)\s*\]?", text)
        if shape_text is None:
            raise ValueError(f"cannot read a tensor description from {text!r}; expected e.g. "
                             "'64x256x56x56 float16 channels_last'")
        shape = tuple(int(v) for v in re.split(r"\s*[x,]\s*", shape_text.group(1)))
        dtype, memory_format = torch.float32, torch.contiguous_format
        for word in text[shape_text.end():].replace(",", " ").split():
            word = word.lower().removeprefix("torch.")
            if word in _DTYPE_WORDS:
                dtype = _DTYPE_WORDS[word]
            elif word in _CHANNELS_LAST_WORDS:
                memory_format = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
            elif word in _CONTIGUOUS_WORDS:
                memory_format = torch.contiguous_format
            else:
                raise ValueError(f"{text!r}: unknown word {word!r}; expected a dtype "
                                 f"({', '.join(_DTYPE_WORDS)}) or a layout (channels_last, contiguous)")
        return cls(shape, dtype, memory_format)


TensorLike = Union[torch.Tensor, TensorSpec, Sequence[int], str]


def _per_dim(name: str, value: IntOrSequence, spatial: int) -> tuple[int, ...]:
    if isinstance(value, bool) or not isinstance(value, (int, Sequence)) or isinstance(value, str):
        raise TypeError(f"{name} must be an int or a sequence of {spatial} ints, got {value!r}")
    values = (int(value),) * spatial if isinstance(value, int) else tuple(int(v) for v in value)
    if len(values) == 1 and spatial > 1:  # ATen expands one-element lists
        values = values * spatial
    if len(values) != spatial:
        raise ValueError(f"{name} must be an int or {spatial} ints, got {value!r}")
    return values


def _is_channels_last(t: torch.Tensor) -> bool:
    """Whether ATen's suggest_memory_format would call `t` channels-last."""
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d) and not t.is_contiguous()
    return False


def _is_shape(value: object) -> bool:
    return (isinstance(value, Sequence) and not isinstance(value, str)
            and all(isinstance(v, int) for v in value))


def _describe(value: TensorLike, dtype: torch.dtype | None, what: str) -> TensorSpec:
    if isinstance(value, torch.Tensor):
        fmt = torch.channels_last if _is_channels_last(value) else torch.contiguous_format
        return TensorSpec(tuple(value.shape), value.dtype, fmt)
    if isinstance(value, str):
        return TensorSpec.parse(value)
    if isinstance(value, TensorSpec):
        return value
    if _is_shape(value):
        return TensorSpec(tuple(value), dtype or torch.float32)
    raise TypeError(f"{what} must be a tensor, a TensorSpec, a shape or a description string, "
                    f"got {type(value).__name__}")


def _dims_text(values: Sequence[int]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "x".join(map(str, values))


@dataclass(frozen=True)
class ConvSpec:
    """One convolution call in one cuDNN direction, as ``torch.nn.functional``
    takes it: ``input`` is (N, C, *spatial) and ``weight`` the full weight
    shape of ``convNd`` (or ``conv_transposeNd`` when ``transposed``).

    ``direction`` is the cuDNN call: for a transposed convolution the forward
    pass is ``"bwd_data"`` and the input gradient ``"fwd"``.
    """

    input: tuple[int, ...]
    weight: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1
    transposed: bool = False
    output_padding: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    channels_last: bool = False
    direction: str = "fwd"

    def __post_init__(self) -> None:
        dims = len(self.input)
        if dims not in (3, 4, 5):
            raise ValueError(f"input must be (N, C, *spatial) with 1 to 3 spatial dimensions, got {self.input}")
        spatial = dims - 2
        object.__setattr__(self, "output_padding", self.output_padding or (0,) * spatial)
        for name in ("stride", "padding", "dilation", "output_padding"):
            object.__setattr__(self, name, _per_dim(name, getattr(self, name), spatial))
        object.__setattr__(self, "input", tuple(int(v) for v in self.input))
        object.__setattr__(self, "weight", tuple(int(v) for v in self.weight))
        self._validate()

    def _validate(self) -> None:
        spatial = len(self.input) - 2
        problems = []
        if self.direction not in DIRECTION_NAMES:
            problems.append(f"direction must be one of {', '.join(DIRECTION_NAMES)}, got {self.direction!r}")
        if self.dtype not in _DTYPE_TOKENS:
            problems.append(f"dtype must be float16, bfloat16, float32 or float64 (what cuDNN convolves), "
                            f"got {self.dtype}")
        if len(self.weight) != len(self.input):
            problems.append(f"weight {self.weight} must have as many dimensions as input {self.input}")
        if any(v < 1 for v in self.input + self.weight):
            problems.append("every input and weight size must be >= 1")
        if self.groups < 1 or self.input[1] % self.groups:
            problems.append(f"groups ({self.groups}) must be >= 1 and divide the input channels ({self.input[1]})")
        if any(v < 1 for v in self.stride + self.dilation):
            problems.append("stride and dilation must be >= 1")
        if any(v < 0 for v in self.padding + self.output_padding):
            problems.append("padding and output_padding must be >= 0")
        if self.channels_last and spatial == 1:
            problems.append("a 1-d convolution has no channels_last layout (describe it as 2-d [N, C, 1, L])")
        if problems:
            raise ValueError(f"invalid convolution: {'; '.join(problems)}")
        if self.transposed:
            if self.weight[0] != self.input[1]:
                problems.append(f"a transposed weight is (C_in, C_out / groups, *kernel): its first size "
                                f"must be the input channels {self.input[1]}, got {self.weight[0]}")
            if any(op >= max(s, d) for op, s, d in zip(self.output_padding, self.stride, self.dilation)):
                problems.append("output_padding must be smaller than stride or dilation")
        else:
            if self.weight[1] * self.groups != self.input[1]:
                problems.append(f"weight {self.weight} expects {self.weight[1] * self.groups} input channels "
                                f"with groups={self.groups}, input has {self.input[1]}")
            if self.weight[0] % self.groups:
                problems.append(f"output channels ({self.weight[0]}) must be divisible by groups ({self.groups})")
            if any(self.output_padding):
                problems.append("output_padding applies to transposed convolutions only")
            if any(size < 1 for size in self.output[2:]):
                problems.append(f"the kernel does not fit the padded input (output would be {self.output})")
        if problems:
            raise ValueError(f"invalid convolution {self}: {'; '.join(problems)}")

    # -- derived ------------------------------------------------------------
    @property
    def out_channels(self) -> int:
        return self.weight[1] * self.groups if self.transposed else self.weight[0]

    @property
    def kernel(self) -> tuple[int, ...]:
        return self.weight[2:]

    @property
    def memory_format(self) -> torch.memory_format:
        if not self.channels_last:
            return torch.contiguous_format
        return torch.channels_last if len(self.input) == 4 else torch.channels_last_3d

    @property
    def output(self) -> tuple[int, ...]:
        """The output shape of the user's call."""
        sizes = []
        for size, k, s, p, d, op in zip(self.input[2:], self.kernel, self.stride, self.padding,
                                        self.dilation, self.output_padding):
            if self.transposed:
                sizes.append((size - 1) * s - 2 * p + d * (k - 1) + 1 + op)
            else:
                sizes.append((size + 2 * p - d * (k - 1) - 1) // s + 1)
        return (self.input[0], self.out_channels, *sizes)

    def with_direction(self, direction: str) -> ConvSpec:
        return dataclasses.replace(self, direction=direction)

    def cudnn_form(self) -> ConvSpec:
        """The convolution as cuDNN runs it: a 1-d one becomes 2-d [N, C, 1, L], as in ATen."""
        if len(self.input) != 3:
            return self
        return dataclasses.replace(
            self, input=(*self.input[:2], 1, self.input[2]), weight=(*self.weight[:2], 1, self.weight[2]),
            stride=(1, *self.stride), padding=(0, *self.padding), dilation=(1, *self.dilation),
            output_padding=(0, *self.output_padding))

    def op_args(self) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int], list[int], int, bool, list[int]]:
        """The extension ops' convolution arguments (input, weight, padding,
        stride, dilation, groups, transposed, output_padding), operands as meta
        tensors in the cuDNN form: nothing is allocated."""
        c = self.cudnn_form()
        x = torch.empty(c.input, dtype=c.dtype, device="meta", memory_format=c.memory_format)
        w = torch.empty(c.weight, dtype=c.dtype, device="meta", memory_format=c.memory_format)
        return (x, w, list(c.padding), list(c.stride), list(c.dilation), c.groups, c.transposed,
                list(c.output_padding))

    # -- construction -------------------------------------------------------
    @classmethod
    def of(cls, direction: str, input: TensorLike, weight: TensorLike, **geometry: Unpack[Geometry]) -> ConvSpec:
        """From operands as ``torch.nn.functional.convNd`` takes them: tensors
        (any device; only shape, dtype and layout are read), :class:`TensorSpec`,
        shapes, or strings such as ``"64x256x56x56 float16 channels_last"``.
        The layout is channels-last when either operand's is, never for float64
        (as PyTorch's cuDNN path decides)."""
        unknown = set(geometry) - set(Geometry.__annotations__)
        if unknown:
            raise TypeError(f"unknown convolution parameters {sorted(unknown)}; "
                            f"valid: {', '.join(Geometry.__annotations__)}")
        # A bare shape takes the dtype of the other operand.
        described = [None if _is_shape(t) else _describe(t, None, what) for t, what in
                     ((input, "input"), (weight, "weight"))]
        given_dtype = next((d.dtype for d in described if d is not None), None)
        x = described[0] or _describe(input, given_dtype, "input")
        w = described[1] or _describe(weight, given_dtype, "weight")
        if x.dtype != w.dtype:
            raise ValueError(f"input and weight must have one dtype, got {x.dtype} and {w.dtype}")
        either_channels_last = torch.contiguous_format not in (x.memory_format, w.memory_format) or (
            x.memory_format != w.memory_format)
        channels_last = x.dtype != torch.float64 and len(x.shape) > 3 and either_channels_last
        return cls(x.shape, w.shape, geometry.get("stride", 1), geometry.get("padding", 0),
                   geometry.get("dilation", 1), int(geometry.get("groups", 1)),
                   bool(geometry.get("transposed", False)), geometry.get("output_padding", 0),
                   x.dtype, channels_last, direction)

    # -- text ---------------------------------------------------------------
    def __str__(self) -> str:
        spatial = len(self.input) - 2
        words = [f"{'conv_transpose' if self.transposed else 'conv'}{spatial}d",
                 "x".join(map(str, self.input)), "->", "x".join(map(str, (self.out_channels, *self.kernel))),
                 f"s{_dims_text(self.stride)}", f"p{_dims_text(self.padding)}"]
        if any(d != 1 for d in self.dilation):
            words.append(f"d{_dims_text(self.dilation)}")
        if self.groups != 1:
            words.append(f"g{self.groups}")
        if any(self.output_padding):
            words.append(f"op{_dims_text(self.output_padding)}")
        words += [_DTYPE_TOKENS[self.dtype], "channels_last" if self.channels_last else "contiguous",
                  self.direction]
        return " ".join(words)

    @classmethod
    def parse(cls, text: str) -> ConvSpec:
        """Reads the string form back (see the module docstring). Words after
        the shapes may come in any order; omitted ones default to s1 p0 d1 g1,
        fp32, contiguous, fwd."""
        def fail(what: str) -> ValueError:
            return ValueError(f"cannot read a convolution from {text!r}: {what}; expected e.g. {EXAMPLE!r}")

        if not isinstance(text, str):
            raise TypeError(f"a convolution description must be a str, got {type(text).__name__}")
        words = text.split()
        if len(words) < 4:
            raise fail("it needs at least 'convNd INPUT -> OUT_CHANNELSxKERNEL'")
        head = re.fullmatch(r"(conv|conv_transpose)([123])d", words[0])
        if head is None:
            raise fail(f"{words[0]!r} is not conv1d/2d/3d or conv_transpose1d/2d/3d")
        transposed, spatial = head.group(1) == "conv_transpose", int(head.group(2))
        shape_pattern = r"\d+(?:x\d+)*"
        if not re.fullmatch(shape_pattern, words[1]) or words[2] != "->" or not re.fullmatch(shape_pattern, words[3]):
            raise fail("the shapes must read 'NxCx<spatial> -> OUT_CHANNELSx<kernel>'")
        input_shape = tuple(int(v) for v in words[1].split("x"))
        out_kernel = tuple(int(v) for v in words[3].split("x"))
        if len(input_shape) != spatial + 2 or len(out_kernel) != spatial + 1:
            raise fail(f"a {words[0]} needs an input of {spatial + 2} sizes and OUT_CHANNELSx<kernel> of "
                       f"{spatial + 1}")
        fields: dict[str, object] = {}

        def put(name: str, value: object, word: str) -> None:
            if name in fields:
                raise fail(f"{word!r} gives the {name} a second time")
            fields[name] = value

        for word in words[4:]:
            lower = word.lower()
            param = re.fullmatch(r"(op|s|p|d|g)(\d+(?:x\d+)*)", lower)
            if param:
                name = {"s": "stride", "p": "padding", "d": "dilation", "g": "groups", "op": "output_padding"}[
                    param.group(1)]
                values = tuple(int(v) for v in param.group(2).split("x"))
                if name == "groups":
                    if len(values) != 1:
                        raise fail(f"{word!r}: groups is one number")
                    put(name, values[0], word)
                else:
                    if len(values) not in (1, spatial):
                        raise fail(f"{word!r}: give one value or {spatial}")
                    put(name, values * spatial if len(values) == 1 else values, word)
            elif lower in _DTYPE_WORDS:
                put("dtype", _DTYPE_WORDS[lower], word)
            elif lower in _CHANNELS_LAST_WORDS or lower in _CONTIGUOUS_WORDS:
                put("channels_last", lower in _CHANNELS_LAST_WORDS, word)
            elif lower in DIRECTION_NAMES:
                put("direction", lower, word)
            else:
                raise fail(f"unknown word {word!r} (s<stride> p<padding> d<dilation> g<groups> "
                           f"op<output padding>, fp16/bf16/fp32/fp64, channels_last/contiguous, "
                           f"{'/'.join(DIRECTION_NAMES)})")
        groups = int(fields.get("groups", 1))  # type: ignore[arg-type]
        out_channels, kernel = out_kernel[0], out_kernel[1:]
        if out_channels % groups or input_shape[1] % groups:
            raise fail(f"groups={groups} must divide the input ({input_shape[1]}) and output ({out_channels}) channels")
        if transposed:
            weight = (input_shape[1], out_channels // groups, *kernel)
        else:
            weight = (out_channels, input_shape[1] // groups, *kernel)
        try:
            return cls(input_shape, weight, fields.get("stride", 1), fields.get("padding", 0),  # type: ignore[arg-type]
                       fields.get("dilation", 1), groups, transposed, fields.get("output_padding", 0),  # type: ignore[arg-type]
                       fields.get("dtype", torch.float32), bool(fields.get("channels_last", False)),  # type: ignore[arg-type]
                       str(fields.get("direction", "fwd")))
        except ValueError as exc:
            raise fail(str(exc)) from None


ConvLike = Union[ConvSpec, str]


def as_conv_spec(conv: ConvLike, input: TensorLike | None, weight: TensorLike | None,
                 geometry: Geometry) -> ConvSpec:
    """The convolution a query is about: a :class:`ConvSpec`, its string form,
    or a direction name followed by input and weight (and ``geometry``)."""
    if isinstance(conv, ConvSpec) or (isinstance(conv, str) and conv not in DIRECTION_NAMES):
        if input is not None or weight is not None or geometry:
            raise TypeError("give either a ConvSpec (or its string) alone, or a direction with input, "
                            "weight and the convolution's parameters")
        return conv if isinstance(conv, ConvSpec) else ConvSpec.parse(conv)
    if not isinstance(conv, str):
        raise TypeError(f"expected a ConvSpec, its string form or a direction name, got {type(conv).__name__}")
    if conv not in DIRECTION_NAMES:
        raise ValueError(f"unknown direction {conv!r}; valid directions are {', '.join(DIRECTION_NAMES)}")
    if input is None or weight is None:
        raise TypeError(f"direction {conv!r} needs both input and weight")
    return ConvSpec.of(conv, input, weight, **geometry)
