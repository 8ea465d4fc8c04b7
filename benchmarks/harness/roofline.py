"""The hardware limit of one convolution on a GPU (an H100 unless told otherwise): its arithmetic
and its least memory traffic, against the GPU's peaks, from the description the extension gives of
a convolution (the ``conv`` field of ``tuning_log()``, written by ``describe_conv`` in
csrc/base/conv_key.cpp).

The bound is the roofline's: a convolution cannot run faster than its multiply-adds at the
tensor cores' peak, nor than reading its input and weight and writing its output once at the
memory's peak. Every direction (forward, backward-data, backward-filter) does the forward's
multiply-adds and touches the same three tensors, so they share the bound. ``conv_bound_of``
gives the same bound from the tensors' sizes and dtype, as a training step's recorded calls have
them (``conv_time.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import NamedTuple

class Peaks(NamedTuple):
    """A GPU's datasheet peaks: dense (no sparsity) TFLOPS per dtype, and memory bandwidth."""

    name: str
    tflops: dict[str, float]
    tb_per_s: float


# H100 SXM5 80GB (HBM3) and H200 SXM 141GB (HBM3e): the same SMs and clocks, so the same
# arithmetic peaks; the H200's memory is faster. NVIDIA's datasheet figures.
_HOPPER_TFLOPS = {"float16": 989.4, "bfloat16": 989.4, "tf32": 494.7, "float32": 66.9, "float64": 66.9}
H100 = Peaks("H100", _HOPPER_TFLOPS, 3.35)
H200 = Peaks("H200", _HOPPER_TFLOPS, 4.8)
PEAK_TFLOPS = H100.tflops
PEAK_TB_PER_S = H100.tb_per_s


def peaks_of(device_name: str | None) -> Peaks | None:
    """The peaks of the GPU torch names ``device_name`` ("NVIDIA H200", "NVIDIA H100 80GB HBM3");
    None for a GPU without figures here (no bound, rather than one against another GPU's)."""
    for peaks in (H200, H100):
        if device_name and peaks.name in device_name:
            return peaks
    return None


DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

_DESCRIPTION = re.compile(
    r"^conv(?P<transposed>_transpose)?\dd: input \[(?P<input>[\d, ]+)\] torch\.(?P<dtype>\w+) \w+, "
    r"weight \[(?P<weight>[\d, ]+)\], output \[(?P<output>[\d, ]+)\], .*allow_tf32=(?P<tf32>True|False)")


class ConvBound(NamedTuple):
    """A convolution's work and its fastest possible time on a GPU."""

    flops: float         # 2 x multiply-adds
    bytes: float         # input + weight + output, each once
    peak_tflops: float   # of its dtype (TF32 when fp32 allows it)
    bound_ms: float      # max(flops at peak, bytes at peak bandwidth)
    memory_bound: bool   # the bytes set the bound

    def tflops(self, ms: float) -> float:
        return self.flops / (ms * 1e-3) / 1e12

    def tb_per_s(self, ms: float) -> float:
        return self.bytes / (ms * 1e-3) / 1e12

    def times(self, count: int) -> ConvBound:
        """The bound of ``count`` such convolutions (a backward call computing both gradients is
        two directions, each with the forward's bound)."""
        return self._replace(flops=self.flops * count, bytes=self.bytes * count, bound_ms=self.bound_ms * count)


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def conv_bound(description: str, peaks: Peaks = H100) -> ConvBound:
    """The bound of the convolution ``description`` names on the GPU of ``peaks``; ValueError if
    it is not one."""
    match = _DESCRIPTION.match(description)
    if match is None:
        raise ValueError(f"not a convolution description: {description!r}")
    return conv_bound_of(_sizes(match["input"]), _sizes(match["weight"]), _sizes(match["output"]), match["dtype"],
                         transposed=bool(match["transposed"]), allow_tf32=match["tf32"] == "True", peaks=peaks)


def conv_bound_of(x: Sequence[int], w: Sequence[int], y: Sequence[int], dtype: str, transposed: bool,
                  allow_tf32: bool, peaks: Peaks = H100) -> ConvBound:
    """The bound of one direction of the convolution of input ``x``, weight ``w`` and output ``y``
    (the user's sizes; ``dtype`` as torch names it without ``torch.``, such as ``float16``) on
    the GPU of ``peaks``; ValueError for a dtype without figures here."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"no roofline figures for dtype {dtype!r}")
    # Each output element of the (cuDNN forward) problem sums prod(w[1:]) products; for a
    # transposed convolution that problem's output is the user's input.
    macs = math.prod(x if transposed else y) * math.prod(w[1:])
    flops = 2.0 * macs
    traffic = float(math.prod(x) + math.prod(w) + math.prod(y)) * DTYPE_BYTES[dtype]
    peak = peaks.tflops["tf32" if dtype == "float32" and allow_tf32 else dtype]
    compute_ms = flops / (peak * 1e12) * 1e3
    memory_ms = traffic / (peaks.tb_per_s * 1e12) * 1e3
    return ConvBound(flops, traffic, peak, max(compute_ms, memory_ms), memory_ms >= compute_ms)
