"""The networks of tests/test_networks_gpu.py and how one training step of each is judged
against a float64 copy of the model (its own checks: tests/tooling/test_network_harness.py).

Networks: torchvision resnet18 (2-d, NCHW fp32 and channels-last bf16),
mobilenet_v3_small (depthwise and grouped, channels-last fp16), regnet_x_400mf
(grouped, bf16), deeplabv3_mobilenet_v3_large (dilated backbone and ASPP,
channels-last fp32), r3d_18 (3-d, fp32), and two networks defined here: a 1-d CNN
(strided, dilated, grouped, depthwise; fp32 and fp64) and a small encoder-decoder
with transposed convolutions (channels-last fp16). The torchvision ones need
torchvision (a GPU test without it fails). Each runs one step (forward, loss, backward) under stock
PyTorch, legacy algorithm 0 in all three directions, legacy 1, one engine
(``ENGINE``), and, on the two cheap networks, the ``"fastest"`` policy.

How a step is judged:

* Models in eval mode, each BatchNorm scaled by the RMS of one random batch
  (``calibrate_batchnorm``: untrained depthwise nets otherwise underflow fp16);
  loss = <output, fixed random probe> in at least float32, so every output
  element gets an O(1) gradient.
* The reference is a float64 copy of the model (the same dtype-rounded weights and
  input), run without cuDNN and without our overrides: on the CPU for the small
  networks, on the GPU with ``torch.backends.cudnn.enabled = False`` for the
  torchvision ones.
* The reference follows the branches the run under test took: every ReLU, ReLU6,
  Hardswish, Hardsigmoid and max-pool records its decisions (mask, piece, argmax)
  and the float64 copy replays them. Two correct algorithms differ by rounding, and
  a pre-activation within rounding of a kink takes the other branch ("mask flip":
  measured on resnet18 fp32, one ReLU input 2.9e-06 from zero changed sign and
  moved one weight gradient element by 4.5e-02). Following the run's branches
  keeps flips out of the error, so what is left is arithmetic: a wrong convolution
  still shows, because the reference recomputes every convolution itself. The
  error against the plain float64 model, and the number of flipped decisions, are
  reported beside it.
* Errors: output ``max|out - ref| / max|ref|``; gradients the relative norm
  ``||g - g64|| / ||g64||`` over all parameter gradients together, and per
  parameter. A setting passes when each is within ``FACTOR`` x stock's own error on
  the same network, or under the dtype's floor (``"fastest"``: at least the
  policy's tolerance, since it may pick a transform algorithm).
* ``torch_cudnn_algo.diagnostics.pinned_run_counts()`` around the step: every direction with
  convolutions that reach cuDNN ran ours (for a pinned choice with no refusal
  warning, exactly once per such call); stock ran none.

Each test of test_networks_gpu.py appends one JSON line to the file named by ``TORCH_CUDNN_ALGO_NETWORK_REPORT``
(when set); ``python3 tests/network_report.py FILE`` renders them as a table, which
is also printed at the end of the module (visible with ``pytest -s``).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_cudnn_algo

REPORT_ENV = "TORCH_CUDNN_ALGO_NETWORK_REPORT"
# The engine configuration of the "engine" setting, for all three directions.
# eng0 is cuDNN's generic fallback engine: slow, but expected to run every dtype and
# layout here; a refusal shows as a warning in the report and in a failure's diagnosis.
ENGINE = os.environ.get("TORCH_CUDNN_ALGO_NETWORK_ENGINE", "eng0")
DEVICE = "cuda"
FACTOR = 5.0  # a setting may be this much less accurate than stock on the same network
DIRECTION_NAMES = ("fwd", "bwd_data", "bwd_filter")

SETTINGS: dict[str, tuple[object, object, object]] = {
    "stock": (None, None, None),
    "legacy0": (0, 0, 0),
    "legacy1": (1, 1, 1),
    "engine": (ENGINE, ENGINE, ENGINE),
    "fastest": ("fastest", "fastest", "fastest"),
}
CHEAP = ("stock", "legacy0", "legacy1", "engine", "fastest")  # "fastest" profiles every conv: small nets only
STANDARD = ("stock", "legacy0", "legacy1", "engine")


@dataclass(frozen=True)
class Precision:
    name: str
    dtype: torch.dtype
    out_floor: float  # output max error (relative to max |ref|) always accepted
    grad_floor: float  # relative norm of all gradients together always accepted
    param_floor: float  # relative norm of one parameter's gradient always accepted
    stock_bound: float  # stock's own errors above this mean the harness is wrong

    @property
    def policy_tolerance(self) -> float:
        return torch_cudnn_algo.tolerance_for(self.name, False)


PRECISIONS = {
    p.name: p
    for p in (
        Precision("float64", torch.float64, 1e-12, 1e-12, 1e-10, 1e-10),
        Precision("float32", torch.float32, 2e-5, 2e-5, 1e-4, 1e-3),
        Precision("float16", torch.float16, 5e-3, 5e-3, 5e-2, 1e-1),
        Precision("bfloat16", torch.bfloat16, 3e-2, 3e-2, 2e-1, 3e-1),
    )
}


# ---------------------------------------------------------------------------
# Networks


def conv1d_net() -> nn.Module:
    """1-d: strided, dilated, grouped and depthwise (the depthwise one reaches cuDNN
    only where PyTorch sends it there)."""
    return nn.Sequential(
        nn.Conv1d(4, 16, 7, stride=2, padding=3), nn.ReLU(),
        nn.Conv1d(16, 32, 3, padding=2, dilation=2), nn.ReLU(),
        nn.Conv1d(32, 32, 3, stride=2, padding=1, groups=4), nn.ReLU(),
        nn.Conv1d(32, 32, 5, padding=2, groups=32), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def encoder_decoder() -> nn.Module:
    """2-d encoder-decoder: strided and grouped convolutions down, transposed ones up."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2), nn.ReLU(),
        nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(8, 3, 1),
    )


@dataclass(frozen=True)
class Net:
    name: str
    build: Callable[[object], nn.Module]  # torchvision module (or None) -> model
    input_shape: tuple[int, ...]
    needs_torchvision: bool
    reference_device: str  # where the float64 copy runs: "cpu", or "cuda" with cuDNN disabled


NETS = {
    n.name: n
    for n in (
        Net("conv1d_net", lambda tv: conv1d_net(), (2, 4, 128), False, "cpu"),
        Net("encoder_decoder", lambda tv: encoder_decoder(), (2, 3, 32, 32), False, "cpu"),
        Net("resnet18", lambda tv: tv.models.resnet18(weights=None, num_classes=10), (2, 3, 64, 64), True, "cuda"),
        Net("mobilenet_v3_small", lambda tv: tv.models.mobilenet_v3_small(weights=None, num_classes=10),
            (2, 3, 64, 64), True, "cuda"),
        Net("regnet_x_400mf", lambda tv: tv.models.regnet_x_400mf(weights=None, num_classes=10),
            (2, 3, 64, 64), True, "cuda"),
        Net("deeplabv3_mobilenet_v3_large",
            lambda tv: tv.models.segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None, num_classes=4, aux_loss=False),
            (2, 3, 64, 64), True, "cuda"),
        Net("r3d_18", lambda tv: tv.models.video.r3d_18(weights=None, num_classes=10), (2, 3, 4, 32, 32), True,
            "cuda"),
    )
}


@dataclass(frozen=True)
class Case:
    net: Net
    precision: Precision
    layout: str  # "contiguous" or "channels_last" (channels_last_3d for 3-d inputs)
    settings: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.net.name}-{self.precision.name}-{self.layout}"

    @property
    def memory_format(self) -> torch.memory_format:
        if self.layout == "contiguous":
            return torch.contiguous_format
        return {4: torch.channels_last, 5: torch.channels_last_3d}[len(self.net.input_shape)]


CASES = [
    Case(NETS["conv1d_net"], PRECISIONS["float32"], "contiguous", CHEAP),
    Case(NETS["conv1d_net"], PRECISIONS["float64"], "contiguous", STANDARD),
    Case(NETS["encoder_decoder"], PRECISIONS["float16"], "channels_last", CHEAP),
    Case(NETS["resnet18"], PRECISIONS["float32"], "contiguous", STANDARD),
    Case(NETS["resnet18"], PRECISIONS["bfloat16"], "channels_last", STANDARD),
    Case(NETS["mobilenet_v3_small"], PRECISIONS["float16"], "channels_last", STANDARD),
    Case(NETS["regnet_x_400mf"], PRECISIONS["bfloat16"], "contiguous", STANDARD),
    Case(NETS["deeplabv3_mobilenet_v3_large"], PRECISIONS["float32"], "channels_last", STANDARD),
    Case(NETS["r3d_18"], PRECISIONS["float32"], "contiguous", STANDARD),
]


def build_model(net: Net) -> nn.Module:
    """The network with seeded weights, in float32 on the CPU, eval mode (BatchNorm
    uses its running statistics, dropout is off), activations not in place (the
    branch hooks read their inputs after the call)."""
    tv = importlib.import_module("torchvision") if net.needs_torchvision else None
    torch.manual_seed(0)
    model = net.build(tv)
    for module in model.modules():
        if hasattr(module, "inplace"):
            module.inplace = False
    return model.eval()


def calibrate_batchnorm(model: nn.Module, input_shape: tuple[int, ...]) -> nn.Module:
    """Scales every BatchNorm by the root mean square its input has on one random
    batch (running mean 0, running variance the second moment), then eval mode.

    With weights=None the defaults (mean 0, variance 1) make eval-mode BatchNorm an
    identity, and depthwise convolutions' initial weights (fan-out scaled by all
    channels) then shrink the activations layer after layer: mobilenet_v3_small's
    output was 3e-10, under float16's range. Calibrating the mean as well would
    subtract large means from channels that vary little across the batch, which
    amplifies rounding (bf16 regnet's output error went to 0.45, measured on the
    CPU); RMS scaling keeps activations O(1) without that cancellation."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # cumulative average: after one batch, that batch's statistics
            m.train()
        device = next(model.parameters()).device
        x = torch.randn((4,) + tuple(input_shape[1:]), generator=torch.Generator().manual_seed(3)).to(device)
        with torch.no_grad(), torch_cudnn_algo.flags(conv_fwd_algo=None, conv_bwd_data_algo=None,
                                                     conv_bwd_filter_algo=None):
            model(x)
            for m in norms:
                m.running_var += m.running_mean.square()
                m.running_mean.zero_()
        model.eval()
    return model


# ---------------------------------------------------------------------------
# Branch decisions: record them in the run under test, replay them in float64

PIECEWISE = (nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
_MAX_POOL = {nn.MaxPool1d: F.max_pool1d, nn.MaxPool2d: F.max_pool2d, nn.MaxPool3d: F.max_pool3d}


def _piece(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """0 below (or at) `low`, 2 at or above `high`, 1 between."""
    return (x > low).to(torch.int8) + (x >= high).to(torch.int8)


def decide(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(module, nn.ReLU):
            return x > 0
        if isinstance(module, nn.ReLU6):
            return _piece(x, 0.0, 6.0)
        if isinstance(module, (nn.Hardswish, nn.Hardsigmoid)):
            return _piece(x, -3.0, 3.0)
        pool = _MAX_POOL[type(module)]
        return pool(x, module.kernel_size, module.stride, module.padding, module.dilation, module.ceil_mode,
                    return_indices=True)[1]


def follow(module: nn.Module, x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """The module's output on `x`, taking the branches `d` says (differentiable)."""
    if isinstance(module, nn.ReLU):
        return torch.where(d, x, 0.0)
    if isinstance(module, nn.ReLU6):
        return torch.where(d == 0, 0.0, torch.where(d == 2, 6.0, x))
    if isinstance(module, nn.Hardswish):
        return torch.where(d == 0, 0.0, torch.where(d == 2, x, x * (x + 3) / 6))
    if isinstance(module, nn.Hardsigmoid):
        return torch.where(d == 0, 0.0, torch.where(d == 2, 1.0, x / 6 + 0.5))
    return x.flatten(2).gather(2, d.flatten(2)).view(d.shape)  # max-pool: the recorded argmax


class Branches:
    """Forward hooks on every piecewise module: record each call's decisions, or
    (given `replay`) make each call follow recorded ones."""

    def __init__(self, model: nn.Module, replay: list[torch.Tensor] | None = None):
        self.model, self.replay, self.decisions, self.handles = model, replay, [], []

    def __enter__(self) -> "Branches":
        self.handles = [m.register_forward_hook(self._hook) for m in self.model.modules() if isinstance(m, PIECEWISE)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    def _hook(self, module: nn.Module, args: tuple, output: torch.Tensor):
        x = args[0]
        if self.replay is None:
            self.decisions.append(decide(module, x))
            return None
        d = self.replay[len(self.decisions)].to(x.device)
        self.decisions.append(d)
        return follow(module, x, d)


def count_flips(a: list[torch.Tensor], b: list[torch.Tensor]) -> int:
    assert len(a) == len(b)
    return int(sum(int((x != y.to(x.device)).sum()) for x, y in zip(a, b)))


# ---------------------------------------------------------------------------
# Which convolution calls reach cuDNN, per cuDNN direction


class CudnnCalls:
    """Forward pre-hooks on every convolution module: counts the cuDNN calls of one
    step per direction, following cuDNN's mapping for transposed convolutions."""

    def __init__(self, model: nn.Module):
        self.model, self.counts, self.handles = model, dict.fromkeys(DIRECTION_NAMES, 0), []

    def __enter__(self) -> "CudnnCalls":
        self.handles = [m.register_forward_pre_hook(self._hook) for m in self.model.modules()
                        if isinstance(m, nn.modules.conv._ConvNd)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    def _hook(self, module: nn.modules.conv._ConvNd, args: tuple) -> None:
        x, w = args[0], module.weight
        assert module.padding_mode == "zeros" and not isinstance(module.padding, str), module
        backend = torch._C._select_conv_backend(
            x, w, None, list(module.stride), list(module.padding), list(module.dilation), module.transposed,
            list(module.output_padding), module.groups,
        )
        grad = torch.is_grad_enabled()
        if backend == torch._C._ConvBackend.Cudnn:
            calls = {"fwd": True, "bwd_data": grad and x.requires_grad, "bwd_filter": grad and w.requires_grad}
        elif backend == torch._C._ConvBackend.CudnnTranspose:
            calls = {"bwd_data": True, "fwd": grad and x.requires_grad, "bwd_filter": grad and w.requires_grad}
        else:
            return
        for direction, called in calls.items():
            self.counts[direction] += int(called)


# ---------------------------------------------------------------------------
# One training step and its errors


@dataclass
class Step:
    out: torch.Tensor  # float64, CPU
    grads: dict[str, torch.Tensor | None]  # float64, CPU
    decisions: list[torch.Tensor]


def train_step(model: nn.Module, x: torch.Tensor, probe: torch.Tensor,
               replay: list[torch.Tensor] | None = None) -> Step:
    """forward, loss = <output, probe> in at least float32, backward. The fixed
    random probe gives every output element an O(1) gradient whatever the
    output's scale (no fp16 underflow, no dependence on the network's gain)."""
    for p in model.parameters():
        p.grad = None
    with Branches(model, replay) as branches:
        out = model(x)
        if isinstance(out, dict):  # torchvision segmentation models
            out = out["out"]
        acc = torch.promote_types(out.dtype, torch.float32)
        loss = (out.to(acc) * probe.to(out.device, acc)).sum()
        loss.backward()
    if replay is not None:
        assert len(branches.decisions) == len(replay), "replay did not meet the recorded branch points"
    grads = {name: None if p.grad is None else p.grad.detach().double().cpu() for name, p in model.named_parameters()}
    return Step(out.detach().double().cpu(), grads, branches.decisions)


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    if not torch.isfinite(actual).all():
        return math.inf
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-300))


def _norms(actual: torch.Tensor | None, expected: torch.Tensor | None) -> tuple[float, float]:
    """(||actual - expected||^2, ||expected||^2); a missing gradient counts as zeros."""
    if actual is None and expected is None:
        return 0.0, 0.0
    if actual is None:
        actual = torch.zeros_like(expected)
    if expected is None:
        expected = torch.zeros_like(actual)
    if not torch.isfinite(actual).all():
        return math.inf, float(expected.square().sum())
    return float((actual - expected).square().sum()), float(expected.square().sum())


def _ratio(diff2: float, ref2: float) -> float:
    if diff2 == 0.0:
        return 0.0
    return math.sqrt(diff2 / ref2) if ref2 > 0 else math.inf


def gradient_errors(actual: dict, expected: dict) -> tuple[float, dict[str, float]]:
    """Relative norm over all gradients together, and per parameter."""
    per_param, total_diff, total_ref = {}, 0.0, 0.0
    for name in expected:
        diff2, ref2 = _norms(actual[name], expected[name])
        per_param[name] = _ratio(diff2, ref2)
        total_diff, total_ref = total_diff + diff2, total_ref + ref2
    return _ratio(total_diff, total_ref), per_param


@dataclass
class Measured:
    out_err: float
    grad_err: float
    param_errs: dict[str, float]
    plain_out_err: float  # against the float64 model taking its own branches
    plain_grad_err: float
    flips: int  # branch decisions that differ from the plain float64 model's
    ran: dict[str, int]  # pinned_run_counts() difference around the step
    expected: dict[str, int]  # cuDNN calls of the step, per direction
    refusals: list[str]
    other_warnings: list[str]
    step_s: float


class CaseData:
    """A case's model on the GPU, its input, its float64 copy and the plain float64
    step, shared by the case's settings (one case is kept at a time)."""

    def __init__(self, case: Case):
        self.case = case
        precision, fmt = case.precision, case.memory_format
        base = calibrate_batchnorm(build_model(case.net).to(DEVICE), case.net.input_shape)
        gen = torch.Generator().manual_seed(1)
        x64 = torch.randn(case.net.input_shape, generator=gen, dtype=torch.float64)
        self.model = base.to(dtype=precision.dtype)
        if case.layout != "contiguous":
            self.model = self.model.to(memory_format=fmt)
        self.x = x64.to(precision.dtype).to(DEVICE).contiguous(memory_format=fmt)  # rounded once: both see it
        self.reference = copy.deepcopy(self.model).to(
            device=case.net.reference_device, dtype=torch.float64, memory_format=torch.contiguous_format)
        self.x_reference = self.x.double().to(case.net.reference_device).contiguous()
        with torch.no_grad(), self.reference_mode():
            shape = self._output(self.reference(self.x_reference)).shape
        self.probe = torch.randn(shape, generator=torch.Generator().manual_seed(2)).float()  # float32 values
        self.plain = self.reference_step(None)
        self.stock: Measured | None = None

    @staticmethod
    def _output(out):
        return out["out"] if isinstance(out, dict) else out

    @staticmethod
    @contextlib.contextmanager
    def reference_mode():
        """No override and no cuDNN: the float64 copy is independent of both."""
        with torch_cudnn_algo.flags(conv_fwd_algo=None, conv_bwd_data_algo=None, conv_bwd_filter_algo=None):
            with torch.backends.cudnn.flags(enabled=False):
                yield

    def reference_step(self, replay: list[torch.Tensor] | None) -> Step:
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        with self.reference_mode():
            step = train_step(self.reference, self.x_reference, self.probe.double(), replay)
        assert torch_cudnn_algo.diagnostics.pinned_run_counts() == before, "the float64 reference ran one of our plans"
        return step

    def measure(self, setting: str) -> Measured:
        fwd, bwd_data, bwd_filter = SETTINGS[setting]
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with torch_cudnn_algo.flags(conv_fwd_algo=fwd, conv_bwd_data_algo=bwd_data,
                                            conv_bwd_filter_algo=bwd_filter):
                    torch.cuda.synchronize()
                    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
                    start = time.perf_counter()
                    with CudnnCalls(self.model) as calls:
                        step = train_step(self.model, self.x, self.probe)
                    torch.cuda.synchronize()
                    step_s = time.perf_counter() - start
                    after = torch_cudnn_algo.diagnostics.pinned_run_counts()
        matched = self.reference_step(step.decisions)  # the float64 copy on this run's branches
        grad_err, param_errs = gradient_errors(step.grads, matched.grads)
        messages = [str(w.message) for w in caught]
        return Measured(
            out_err=max_error(step.out, matched.out),
            grad_err=grad_err,
            param_errs=param_errs,
            plain_out_err=max_error(step.out, self.plain.out),
            plain_grad_err=gradient_errors(step.grads, self.plain.grads)[0],
            flips=count_flips(step.decisions, self.plain.decisions),
            ran={d: after[d] - before[d] for d in DIRECTION_NAMES},
            expected=dict(calls.counts),
            refusals=[m for m in messages if "cannot run" in m],
            other_warnings=[m for m in messages if "cannot run" not in m],
            step_s=step_s,
        )


_CURRENT: list[CaseData] = []


def case_data(case: Case) -> CaseData:
    if not _CURRENT or _CURRENT[0].case != case:
        _CURRENT.clear()  # free the previous case's models first
        _CURRENT.append(CaseData(case))
    data = _CURRENT[0]
    if data.stock is None:
        data.stock = data.measure("stock")
    return data


# ---------------------------------------------------------------------------
# Verdicts and the report


def verdict(case: Case, setting: str, m: Measured, stock: Measured) -> list[str]:
    """The reasons a setting fails (empty: it passes)."""
    p, failures = case.precision, []
    if setting == "stock":
        for label, err in (("output", m.out_err), ("gradient", m.grad_err)):
            if not err <= p.stock_bound:
                failures.append(f"stock's own {label} error {err:.3g} > {p.stock_bound:.3g}: the harness is wrong")
        if any(m.ran.values()):
            failures.append(f"stock ran our plans: {m.ran}")
        return failures
    out_floor, grad_floor, param_floor = p.out_floor, p.grad_floor, p.param_floor
    if setting == "fastest":
        tol = p.policy_tolerance
        out_floor, grad_floor, param_floor = max(out_floor, tol), max(grad_floor, tol), max(param_floor, 10 * tol)
    if not m.out_err <= max(FACTOR * stock.out_err, out_floor):
        failures.append(
            f"output error {m.out_err:.3g} > max({FACTOR:g} x stock's {stock.out_err:.3g}, {out_floor:.3g})")
    if not m.grad_err <= max(FACTOR * stock.grad_err, grad_floor):
        failures.append(
            f"gradient error {m.grad_err:.3g} > max({FACTOR:g} x stock's {stock.grad_err:.3g}, {grad_floor:.3g})")
    for name, err in m.param_errs.items():
        if not err <= max(FACTOR * stock.param_errs[name], param_floor):
            failures.append(f"gradient of {name}: error {err:.3g} > max({FACTOR:g} x stock's "
                            f"{stock.param_errs[name]:.3g}, {param_floor:.3g})")
    for d in DIRECTION_NAMES:
        if m.expected[d] and m.ran[d] <= 0:
            failures.append(f"{d}: none of the step's {m.expected[d]} cuDNN calls ran our plan")
        elif m.ran[d] > m.expected[d]:
            failures.append(f"{d}: our plan ran {m.ran[d]} times; only {m.expected[d]} calls of the step reach cuDNN")
        elif setting != "fastest" and not m.refusals and m.ran[d] != m.expected[d]:
            failures.append(f"{d}: our plan ran {m.ran[d]} times for {m.expected[d]} cuDNN calls, with no refusal")
    return failures


def diagnosis(m: Measured, stock: Measured) -> str:
    worst = sorted(m.param_errs, key=lambda n: -m.param_errs[n] / max(stock.param_errs[n], 1e-300))[:12]
    lines = [
        "Errors are against a float64 copy that follows this run's ReLU/Hardswish/max-pool branches, so a "
        "mask flip is not in them: an error well beyond stock's here is arithmetic, not a flip.",
        f"Against the plain float64 model: output {m.plain_out_err:.3g} (stock {stock.plain_out_err:.3g}), "
        f"gradients {m.plain_grad_err:.3g} (stock {stock.plain_grad_err:.3g}); flipped branch decisions "
        f"{m.flips} (stock {stock.flips}).",
        f"our plan ran {m.ran}, cuDNN calls {m.expected}, refusals {len(m.refusals)}",
        *[f"  refusal: {r.splitlines()[0]}" for r in m.refusals[:5]],
        *[f"  other warning: {w.splitlines()[0]}" for w in m.other_warnings[:5]],
        "parameters by error / stock's error (error, stock's error):",
        *[f"  {n:<50} {m.param_errs[n]:10.3g} {stock.param_errs[n]:10.3g}" for n in worst],
    ]
    return "\n".join(lines)


_ROWS: list[dict] = []


def report_row(case: Case, setting: str, m: Measured, stock: Measured, failures: list[str]) -> dict:
    worst = max(m.param_errs, key=lambda n: m.param_errs[n]) if m.param_errs else None
    return {
        "test": f"{case.id}-{setting}",
        "model": case.net.name,
        "dtype": case.precision.name,
        "layout": case.layout,
        "setting": setting,
        "flags": [v for v in SETTINGS[setting]],
        "out_err": m.out_err,
        "grad_err": m.grad_err,
        "stock_out_err": stock.out_err,
        "stock_grad_err": stock.grad_err,
        "ratio": m.grad_err / stock.grad_err if stock.grad_err > 0 else (0.0 if m.grad_err == 0 else math.inf),
        "worst_param": worst,
        "worst_param_err": m.param_errs.get(worst),
        "stock_worst_param_err": stock.param_errs.get(worst),
        "plain_out_err": m.plain_out_err,
        "plain_grad_err": m.plain_grad_err,
        "flips": m.flips,
        "stock_flips": stock.flips,
        "ran": m.ran,
        "cudnn_calls": m.expected,
        "refusals": len(m.refusals),
        "step_s": m.step_s,
        "passed": not failures,
        "failures": failures,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _load_renderer():
    """The table renderer of tests/network_report.py (also run by hand on a report file)."""
    from network_report import render

    return render
