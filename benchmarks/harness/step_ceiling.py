"""What the roofline allows a whole training step: per zoo network, the convolutions that reach
cuDNN, weighted by how often one step calls each, at their best timed candidate and at the
hardware bound (``roofline.py``), against the step time a speed-up target over stock
``benchmark=True`` needs (from a zoo result).

A tuning log lists each configuration (direction and convolution) once; a step may call it
many times (a network's repeated blocks). The calls per step come from the network itself: its
convolution modules hooked during one forward pass on the meta device (no GPU, no memory), each
1-d convolution described as cuDNN sees it (2-d, height 1). A call no log entry matches did not
reach cuDNN (stock PyTorch sends, for example, dilated depthwise convolutions to its own
kernels): it is counted apart, outside the room.

*room* is the convolution time per step above the bound: what the fastest possible
convolutions would save, and the most any choice or kernel of ours could. A target needs
``plan ms - benchmark ms / target`` off the plan's step; where that is more than the room, no
convolution kernel reaches it.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Iterable
from typing import NamedTuple

from .roofline import conv_bound

_FIELDS = ("input", "weight", "output", "stride", "padding", "dilation")
_KEY = re.compile(r"^conv(?P<transposed>_transpose)?\dd: input \[(?P<input>[\d, ]+)\] \S+ \w+, "
                  r"weight \[(?P<weight>[\d, ]+)\], output \[(?P<output>[\d, ]+)\], stride \[(?P<stride>[\d, ]+)\], "
                  r"padding \[(?P<padding>[\d, ]+)\], (?:output_padding \[[\d, ]+\], )?"
                  r"dilation \[(?P<dilation>[\d, ]+)\], groups (?P<groups>\d+)")


class ConvKey(NamedTuple):
    """A convolution as cuDNN sees it (1-d as 2-d with height 1), without dtype and layout."""

    transposed: bool
    input: tuple[int, ...]
    weight: tuple[int, ...]
    output: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int


def key_of(description: str) -> ConvKey:
    """The key of a tuning log's convolution description; ValueError if it is not one."""
    match = _KEY.match(description)
    if match is None:
        raise ValueError(f"not a convolution description: {description!r}")
    sizes = (tuple(int(v) for v in match[field].split(",")) for field in _FIELDS)
    return ConvKey(match["transposed"] is not None, *sizes, int(match["groups"]))


def _as_2d(sizes, one_d: bool, height: int = 1) -> tuple[int, ...]:
    """A 1-d shape or parameter as cuDNN sees it: ``height`` put before its last extent."""
    sizes = list(sizes)
    return tuple(sizes[:-1] + [height] + sizes[-1:]) if one_d else tuple(sizes)


def conv_calls(model, example_input) -> collections.Counter[ConvKey]:
    """How often one forward pass of ``model`` calls each convolution, from hooks on its
    Conv1d/Conv2d/ConvTranspose1d/ConvTranspose2d modules; the model and input are moved to the
    meta device (shapes only). A backward pass calls each again per gradient it computes."""
    import torch
    from torch import nn

    kinds = (nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d)
    calls: collections.Counter[ConvKey] = collections.Counter()

    def hook(module, inputs, output) -> None:
        one_d = isinstance(module, (nn.Conv1d, nn.ConvTranspose1d))
        calls[ConvKey(isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d)),
                      _as_2d(inputs[0].shape, one_d), _as_2d(module.weight.shape, one_d), _as_2d(output.shape, one_d),
                      _as_2d(module.stride, one_d), _as_2d(module.padding, one_d, 0), _as_2d(module.dilation, one_d),
                      module.groups)] += 1

    model = model.to("meta")
    handles = [module.register_forward_hook(hook) for module in model.modules() if isinstance(module, kinds)]
    try:
        with torch.no_grad():
            model(example_input.to("meta"))
    finally:
        for handle in handles:
            handle.remove()
    return calls


class StepCeiling(NamedTuple):
    """One network's convolutions per step (see the module docstring)."""

    cudnn_calls: int  # forward calls per step that reach cuDNN
    other_calls: int  # forward calls per step that do not (no tuning log entry)
    best_ms: float  # per step, each (direction, configuration) at its best timed candidate
    bound_ms: float  # per step, at the roofline bound

    @property
    def room_ms(self) -> float:
        return self.best_ms - self.bound_ms


def step_ceiling(log: Iterable[dict], calls: collections.Counter[ConvKey]) -> StepCeiling:
    """The step's convolution time at the best timed candidates and at the bound: each log
    entry (a direction of a configuration) weighted by the forward calls of its convolution."""
    best = bound = 0.0
    in_log: set[ConvKey] = set()
    for entry in log:
        timed = [c["ms"] for c in entry.get("configs", []) if c.get("ms") is not None]
        if not timed:
            continue
        key = key_of(entry["conv"])
        in_log.add(key)
        count = calls.get(key, 0)
        best += count * min(timed)
        bound += count * conv_bound(entry["conv"]).bound_ms
    cudnn = sum(n for key, n in calls.items() if key in in_log)
    return StepCeiling(cudnn, sum(calls.values()) - cudnn, best, bound)


def zoo_steps(path: str) -> dict[str, tuple[float, float]]:
    """Per network of a zoo result: the tuned plan's GPU ms per step and stock
    ``benchmark=True``'s, both from the ``benchmark=True`` process."""
    steps = {}
    for record in json.loads(open(path).read())["networks"]:
        plan = record.get("gpu_ms_plan_in_benchmark_process")
        benchmark = (record.get("gpu_ms") or {}).get("benchmark")
        if plan and benchmark:
            steps[record["name"]] = (plan, benchmark)
    return steps


def step_ceiling_table(records: Iterable[dict], zoo_path: str, target: float = 1.15) -> str:
    """Markdown: one row per network of the tuning-log records that the zoo result also has."""
    from .networks import ZOO

    steps = zoo_steps(zoo_path)
    lines = [f"| network | conv calls per forward: cuDNN / other | conv ms per step: best timed / bound / room | "
             f"plan / benchmark=True ms | {target:g}x needs off the step | within the room |",
             "|---|--:|--:|--:|--:|---|"]
    for record in records:
        name = record["network"]
        if name not in steps or name not in ZOO:
            continue
        workload = ZOO[name].build()
        ceiling = step_ceiling(record["log"], conv_calls(workload.model, workload.example_input))
        plan, benchmark = steps[name]
        need = plan - benchmark / target
        verdict = "met already" if need <= 0 else ("yes" if need <= ceiling.room_ms else "**no**")
        lines.append(f"| {name} | {ceiling.cudnn_calls} / {ceiling.other_calls} | {ceiling.best_ms:.2f} / "
                     f"{ceiling.bound_ms:.2f} / {ceiling.room_ms:.2f} | {plan:.2f} / {benchmark:.2f} | "
                     f"{max(need, 0.0):.2f} ms | {verdict} |")
    return "\n".join(lines)
