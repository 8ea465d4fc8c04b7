"""GPU: ``conv_backward_overlap`` runs a small convolution's two pinned gradients at once on
two streams. The gradients are those of one after the other, bit for bit, and within the
dtype's tolerance of a float64 CPU reference, for every conv form; the kernels do run on two
streams (and on one for a large layer, or with the flag off); work queued before and after on
the caller's stream is ordered around both; a CUDA graph captured in a process's first overlap
replays them."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest
import torch

import torch_cudnn_algo
from conv_cases import (
    DTYPES,
    FORMS,
    TRANSPOSED_FORMS,
    ConvForm,
    make_inputs,
    memory_format,
    reaches_cudnn,
    reference_grads,
    relative_error,
)

pytestmark = pytest.mark.gpu

# Deterministic legacy algorithms every form here supports; transposed convolutions take their
# input gradient from the forward direction.
PINS = {"conv_fwd_algo": 1, "conv_bwd_data_algo": 1, "conv_bwd_filter_algo": 1}
CASES = {case.name: case for case in DTYPES}
SETTINGS = [("float32", "contiguous"), ("float16", "channels_last")]


def gradients(form: ConvForm, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor, overlap: bool):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    with torch_cudnn_algo.flags(conv_backward_overlap=overlap, **PINS):
        return torch.autograd.grad(form.conv(x, w), (x, w), grad)


@pytest.mark.parametrize("form", FORMS + TRANSPOSED_FORMS, ids=lambda form: form.name)
@pytest.mark.parametrize("case_name, layout", SETTINGS, ids=["fp32", "fp16_channels_last"])
def test_overlapped_gradients_equal_sequential_ones_and_float64(form, case_name, layout):
    case = CASES[case_name]
    fmt = memory_format(layout, form.spatial_dims) or torch.contiguous_format
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        x, w = make_inputs(form, case, fmt, seed=7)
        if not reaches_cudnn(form, x, w):
            pytest.skip(f"stock PyTorch does not send {form.name} in {case_name} to cuDNN: nothing of ours runs")
        grad = torch.randn(form.conv(x, w).shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
        grad = grad.to(case.dtype).cuda()
        before = torch_cudnn_algo.pinned_run_counts()
        overlapped = gradients(form, x, w, grad, overlap=True)
        after = torch_cudnn_algo.pinned_run_counts()
        sequential = gradients(form, x, w, grad, overlap=False)
        torch.cuda.synchronize()
    data_direction = "fwd" if form.transposed else "bwd_data"
    assert after[data_direction] > before[data_direction] and after["bwd_filter"] > before["bwd_filter"], (
        "both gradients must run pinned for the overlap to be tested")
    references = reference_grads(form, x, w, grad)
    for mine, theirs, expected in zip(overlapped, sequential, references):
        assert torch.equal(mine, theirs) and mine.stride() == theirs.stride()
        assert relative_error(mine, expected) <= case.tolerance


def kernel_streams(run) -> set[int]:
    """The CUDA streams the kernels ``run`` launches ran on (from the profiler's trace)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        with open(trace.name) as file:
            events = json.load(file)["traceEvents"]
    return {event["args"]["stream"] for event in events if event.get("cat") == "kernel"}


@pytest.mark.parametrize("batch, overlap, streams", [(2, True, 2), (2, False, 1), (64, True, 1)],
                         ids=["small", "small_flag_off", "large"])
def test_overlap_runs_on_two_streams_only_for_small_layers_with_the_flag_on(batch, overlap, streams):
    # 64x32x32 = 65,536 pixels: over the 64x28x28 at which the gradients overlap.
    x = torch.randn(batch, 16, 32, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(32, 16, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
    grad = torch.randn(batch, 32, 32, 32, device="cuda", dtype=torch.float16)

    def backward():
        torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1), (x, w), grad)

    with torch_cudnn_algo.flags(conv_backward_overlap=overlap, **PINS):
        backward()  # builds the runners outside the profiled call
        assert len(kernel_streams(backward)) == streams


LAYER = ConvForm("conv2d_14x14", (8, 64, 14, 14), (64, 64, 3, 3), padding=1)


def test_work_on_the_callers_stream_is_ordered_around_both_gradients():
    """On a user's stream, a write to grad_output queued behind slow work, then the backward,
    then a read of both gradients: the gradients see the write and the read sees them."""
    x = torch.randn(LAYER.input_shape, device="cuda", dtype=torch.float16)
    w = torch.randn(LAYER.weight_shape, device="cuda", dtype=torch.float16)
    grad = torch.randn(LAYER.input_shape[:1] + (64, 14, 14), device="cuda", dtype=torch.float16)
    big = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    expected = [g.float().sum() * 2 for g in gradients(LAYER, x, w, grad, overlap=False)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(5):
            scaled = grad.clone()
            for _ in range(20):
                big @ big  # keeps the stream busy while the backward is queued behind it
            scaled.mul_(2)
            sums = [g.float().sum() for g in gradients(LAYER, x, w, scaled, overlap=True)]
            stream.synchronize()
            torch.testing.assert_close(torch.stack(sums), torch.stack(expected), rtol=2e-2, atol=1e-2)


CAPTURE_FIRST = """
import torch, torch_cudnn_algo
x = torch.randn(4, 32, 14, 14, device="cuda", dtype=torch.float16, requires_grad=True)
w = torch.randn(32, 32, 3, 3, device="cuda", dtype=torch.float16, requires_grad=True)
grad = torch.randn(4, 32, 14, 14, device="cuda", dtype=torch.float16)
pins = dict(conv_fwd_algo=1, conv_bwd_data_algo=1, conv_bwd_filter_algo=1)
conv = lambda: torch.nn.functional.conv2d(x, w, padding=1)
with torch_cudnn_algo.flags(conv_backward_overlap=False, **pins):  # builds the runners
    expected = torch.autograd.grad(conv(), (x, w), grad)
torch.cuda.synchronize()
static_grad = torch.zeros_like(grad)
graph = torch.cuda.CUDAGraph()
with torch_cudnn_algo.flags(conv_backward_overlap=True, **pins), torch.cuda.graph(graph):
    captured = torch.autograd.grad(conv(), (x, w), static_grad)
static_grad.copy_(grad)
graph.replay()
torch.cuda.synchronize()
assert all(torch.equal(a, b) for a, b in zip(captured, expected)), "replayed gradients differ"
print("ok")
"""


def test_a_process_whose_first_overlap_is_inside_a_cuda_graph_capture_replays_it():
    """The side stream and its events are made on first use: in a fresh process whose first
    overlapped backward is captured, they are made during the capture, and the graph replays
    both gradients as one after the other computes them."""
    done = subprocess.run([sys.executable, "-c", CAPTURE_FIRST], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
