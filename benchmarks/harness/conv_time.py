"""A training step's convolutions: the ATen convolution calls it makes, their GPU time per step and
their roofline bound.

``record_conv_calls`` runs the step once under a dispatch mode that notes every
``aten.convolution`` and ``aten.convolution_backward`` call: the shapes of its arguments (keyed as
torch.profiler keys them, so that the two join), its dtype, its forward problem and how many
gradients a backward call computes. Autograd hands dispatch modes on to its backward thread, so
the backward calls are seen too. ``profile_conv_time`` sums the GPU time of those ATen ops per step
(step_profile.py's profile), and of the Triton templates Inductor runs convolutions as
(max-autotune), which run outside them. ``roofline_summary`` joins the two: per profiled row, its calls' roofline bound
(roofline.py) against its GPU time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .roofline import ConvBound, Peaks, conv_bound_of
from .step_profile import CONV_OPS, conv_rows, kernel_times, profiled

Shape = tuple[int, ...]
JoinKey = tuple[str, str]  # (direction, shapes as torch.profiler's input_shapes print)
FORWARD_BIAS = 2  # the bias's position among aten.convolution's arguments


class ConvCall(NamedTuple):
    """One ATen convolution call of a step."""

    op: str                    # "forward" (aten.convolution) or "backward" (aten.convolution_backward)
    shapes: tuple[Shape, ...]  # every argument's, in the schema's order; () for one not a tensor
    dtype: str                 # "float16", "float32", ...
    x: Shape                   # the forward problem's input, weight and output (for a backward
    w: Shape                   # call, its grad_output is y)
    y: Shape
    transposed: bool
    directions: int            # 1 for a forward call; the gradients (input, weight) a backward call computes
    allow_tf32: bool           # torch.backends.cudnn.allow_tf32 when it ran

    @property
    def key(self) -> JoinKey:
        return self.op, shapes_key(self.shapes)


def shapes_key(shapes: Iterable[Sequence[int]]) -> str:
    """The shapes as ``key_averages(group_by_input_shape=True)`` gives them (step_profile's rows
    keep ``str(input_shapes)``): ``[[64, 3, 224, 224], [16, 3, 3, 3], [], ...]``."""
    return str([list(shape) for shape in shapes])


def row_key(row: Mapping[str, Any]) -> JoinKey:
    """A profiled row's join key: its op's direction and its shapes."""
    return CONV_OPS[row["op"]], row["shapes"]


def without_bias(key: JoinKey) -> JoinKey:
    """A forward key with the bias's shape left out, as Inductor calls ATen's convolution: it
    peels the bias off and adds it in a kernel of its own (torch/_inductor/kernel/conv.py)."""
    op, shapes = key
    if op != "forward":
        return key
    sizes = json.loads(shapes)
    sizes[FORWARD_BIAS] = []
    return op, str(sizes)


# ------------------------------------------------------------------------------- recording


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape(value: object) -> Shape:
    """A tensor argument's sizes; () for anything else, as torch.profiler records it."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def _in_schema_order(func: torch._ops.OpOverload, args: Sequence[object],
                     kwargs: Mapping[str, object]) -> dict[str, object]:
    """The call's arguments by name, in the schema's order (the profiler records one shape per
    schema argument, however the caller passed it)."""
    named = {}
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args):
            named[argument.name] = args[index]
        elif argument.name in kwargs:
            named[argument.name] = kwargs[argument.name]
        else:
            named[argument.name] = argument.default_value if argument.has_default_value() else None
    return named


def conv_call(op: str, arguments: Mapping[str, object], output: object) -> ConvCall:
    """The ConvCall of a forward (``output`` its result) or backward call's named arguments."""
    shapes = tuple(_shape(value) for value in arguments.values())
    tf32 = torch.backends.cudnn.allow_tf32
    if op == "forward":
        x, w = arguments["input"], arguments["weight"]
        return ConvCall(op, shapes, _dtype_name(x.dtype), _shape(x), _shape(w), _shape(output),
                        bool(arguments["transposed"]), 1, tf32)
    grad_output, x, w = arguments["grad_output"], arguments["input"], arguments["weight"]
    mask = arguments["output_mask"]
    # The bias's gradient is a sum over grad_output, no convolution: it does not count.
    return ConvCall(op, shapes, _dtype_name(grad_output.dtype), _shape(x), _shape(w), _shape(grad_output),
                    bool(arguments["transposed"]), int(mask[0]) + int(mask[1]), tf32)


class _ConvRecorder(TorchDispatchMode):
    """Notes every ATen convolution call that reaches the dispatcher's Python key (below autograd
    and autocast: the tensors as the convolution gets them)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[ConvCall] = []
        self.ops = {torch.ops.aten.convolution.default: "forward",
                    torch.ops.aten.convolution_backward.default: "backward"}

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: object, args: Sequence[object] = (),
                           kwargs: Mapping[str, object] | None = None) -> object:
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        if func in self.ops:
            self.calls.append(conv_call(self.ops[func], _in_schema_order(func, args, kwargs), output))
        return output


def record_conv_calls(step: Callable[[], None]) -> list[ConvCall]:
    """The convolution calls of one run of ``step``, forward and backward, in the order they ran."""
    recorder = _ConvRecorder()
    with recorder:
        step()
    return recorder.calls


def bound_of_call(call: ConvCall, peaks: Peaks) -> ConvBound:
    """The call's roofline bound on the GPU of ``peaks``: one direction's for a forward call, one
    per gradient it computes for a backward call (every direction shares the bound)."""
    one = conv_bound_of(call.x, call.w, call.y, call.dtype, call.transposed, call.allow_tf32, peaks)
    return one if call.op == "forward" else one.times(call.directions)


# ------------------------------------------------------------------------------- GPU time


def is_triton_fused_from_conv(name: str) -> bool:
    """A Triton kernel Inductor generated with a convolution node among its origins (it names a
    kernel by them): a convolution template, or a kernel that fused a convolution's neighbour."""
    return name.startswith("triton") and "convolution" in name


def is_triton_conv_kernel(name: str) -> bool:
    """A convolution Inductor runs as a Triton template (max-autotune's
    ``triton_tem_fused_convolution_2``, with any epilogue it fused). Its pointwise and reduction
    kernels that name a convolution only fused its neighbours, such as batch norm's backward in
    ``triton_poi_fused__native_batch_norm_legit_functional_convolution_backward_0`` (the default
    mode, on an H200): no convolution work."""
    return name.startswith("triton_tem") and "convolution" in name


def profile_conv_time(step: Callable[[], None], steps: int, warm_up: int) -> dict:
    """``step`` profiled as step_profile's profile: per step, all kernels' GPU microseconds
    (``total_us``), the ATen convolution ops' (``conv_us``) and their rows by shapes, Inductor's
    Triton convolution templates' (``triton_conv_us``, outside the ATen ops), and, not counted as
    convolution time, every Triton kernel's that names a convolution (``triton_named_conv_us``)."""
    prof = profiled(step, steps, warm_up)
    kernels = kernel_times(prof.events(), steps)
    rows = conv_rows(prof.key_averages(group_by_input_shape=True), steps)
    return {"total_us": sum(kernels.values()), "conv_us": sum(row.gpu_us for row in rows),
            "triton_conv_us": sum(us for name, us in kernels.items() if is_triton_conv_kernel(name)),
            "triton_named_conv_us": sum(us for name, us in kernels.items() if is_triton_fused_from_conv(name)),
            "rows": [row._asdict() for row in rows]}


# ------------------------------------------------------------------------------- the join


def _join(rows: Sequence[Mapping[str, Any]], calls: Sequence[ConvCall]
          ) -> tuple[dict[JoinKey, list[ConvCall]], list[ConvCall]]:
    """Each row's recorded calls, and the calls no row holds. A call joins the row of its key,
    or, a forward call whose key no row has, the row of its shapes without the bias (Inductor's
    peeled-off bias); one row at most."""
    keys = {row_key(row) for row in rows}
    joined: dict[JoinKey, list[ConvCall]] = {key: [] for key in keys}
    left: list[ConvCall] = []
    for call in calls:
        key = call.key if call.key in keys else without_bias(call.key)
        (joined[key] if key in keys else left).append(call)
    return joined, left


def _summed(bounds: Sequence[ConvBound]) -> ConvBound | None:
    """The bound of several calls together; None for none."""
    if not bounds:
        return None
    return ConvBound(sum(b.flops for b in bounds), sum(b.bytes for b in bounds), bounds[0].peak_tflops,
                     sum(b.bound_ms for b in bounds), all(b.memory_bound for b in bounds))


def _row_summary(row: Mapping[str, Any], bound: ConvBound | None, recorded_calls: int) -> dict:
    gpu_us = row["gpu_us"]
    ms = gpu_us / 1e3
    timed = bound is not None and gpu_us > 0
    return {"op": row["op"], "shapes": row["shapes"], "calls": row["calls"], "recorded_calls": recorded_calls,
            "gpu_us": gpu_us, "bound_us": None if bound is None else bound.bound_ms * 1e3,
            "fraction": bound.bound_ms / ms if timed else None,
            "tb_per_s": bound.tb_per_s(ms) if timed else None,
            "tflops": bound.tflops(ms) if timed else None}


def _bound_us(calls: Iterable[ConvCall], peaks: Peaks) -> float:
    return sum(bound_of_call(call, peaks).bound_ms for call in calls) * 1e3


def roofline_summary(rows: Sequence[Mapping[str, Any]], calls: Sequence[ConvCall], peaks: Peaks) -> dict:
    """Profiled convolution rows (``{op, shapes, calls, gpu_us}`` per step) joined with one step's
    recorded calls on (direction, shapes). Per row: its calls' bound (``bound_us``; None where no
    recorded call joins it, its time then counted in ``unmatched_us``), ``fraction`` = bound / GPU
    time (1: at the roofline), and the TB/s and TFLOP/s its time achieves. Totals: ``conv_us`` of
    all rows, ``bound_us`` of all recorded calls, ``fraction`` = bound_us / conv_us, and
    ``bound_without_row_us``, the bound of the calls no row holds (a convolution Inductor ran as
    a Triton kernel: its time is not in ``conv_us``)."""
    joined, left = _join(rows, calls)
    summaries = []
    for row in rows:
        row_calls = joined[row_key(row)]
        bound = _summed([bound_of_call(call, peaks) for call in row_calls])
        summaries.append(_row_summary(row, bound, len(row_calls)))
    conv_us, bound_us = sum(row["gpu_us"] for row in rows), _bound_us(calls, peaks)
    return {"peaks": peaks.name, "rows": summaries, "conv_us": conv_us, "bound_us": bound_us,
            "fraction": bound_us / conv_us if conv_us > 0 else None,
            "unmatched_us": sum(row["gpu_us"] for row in summaries if row["bound_us"] is None),
            "bound_without_row_us": _bound_us(left, peaks)}
