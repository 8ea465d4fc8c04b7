"""One fresh process of tests/test_plan_blobs_gpu.py, printing one JSON report.

    plan_blob_check.py save PLAN OUTPUTS   tune a small network, save the plan (with its built
                                           execution plans), run a training step under it and
                                           save the step's outputs
    plan_blob_check.py load OUTPUTS        (TORCH_CUDNN_ALGO_PLAN set) run the same step under
                                           the loaded plan, compare with the saved outputs
    plan_blob_check.py settle OUTPUTS      as load, but the first layer's forward runs alone
                                           first, then the process waits SETTLE_S: the prefetch
                                           workers that call started have loaded every other blob
    plan_blob_check.py capture OUTPUTS     as load, but the plan's first forward calls happen
                                           under CUDA graph capture (while the prefetch workers
                                           load the other blobs); the replayed logits are compared
                                           too, then the step runs as for load

The report: plan build counts before and after the step, per-entry run counts,
the graph plans in the cache (choice, workspace, deserialised or built), the
entries carrying an execution plan, the warnings, and for ``load`` whether the
logits and gradients are bit-identical to the saved ones.

The network is only convolutions and ReLUs (a 7x7 stride-2 stem, 1x1, depthwise
3x3, strided 3x3), under cudnn.deterministic: nothing in its step is
non-deterministic (no pooling backward, no atomics), so two runs of the same
engine configurations agree bit for bit.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import torch
from torch import nn

import torch_cudnn_algo

BATCH, IMAGE = 8, 64
COUNTS = ("built", "deserialized", "prefetched", "deserialize_failed")  # execution_plan_counts()'s counts
SETTLE_S = 3.0  # the workers load this network's blobs in well under a second (H100)


def network() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 7, stride=2, padding=3, bias=False), nn.ReLU(),
        nn.Conv2d(32, 64, 1, bias=False), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1, groups=64, bias=False), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False), nn.ReLU(),
        nn.Conv2d(128, 128, 3, padding=1, bias=False),
    ).cuda().to(memory_format=torch.channels_last)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=generator).cuda().to(memory_format=torch.channels_last)
    return model, x


def step(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x)
    out.float().sum().backward()
    torch.cuda.synchronize()
    return {"out": out.detach().cpu(), "grads": torch.cat([p.grad.flatten() for p in model.parameters()]).cpu()}


def graph_plans() -> list[dict]:
    return [summary._asdict() for summary in torch_cudnn_algo._ops.graph_runners()]


def main(argv: list[str]) -> dict:
    torch.backends.cudnn.deterministic = True  # bit-identical steps need deterministic engines
    model, x = network()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if argv[0] == "save":
            plan_path, outputs_path = argv[1], argv[2]
            with torch.autocast("cuda", dtype=torch.float16):
                plan = torch_cudnn_algo.tune(model, x, progress=False)
            plan.save(plan_path)
            torch_cudnn_algo.use_plan(plan)
        else:
            outputs_path = argv[1]
            plan = torch_cudnn_algo.current_plan()
            assert plan is not None, "TORCH_CUDNN_ALGO_PLAN was not applied"
        before = torch_cudnn_algo.diagnostics.execution_plan_counts()
        captured = None
        if argv[0] == "settle":
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                model[0](x)  # the step's first convolution: its call starts the prefetch
            torch.cuda.synchronize()
            time.sleep(SETTLE_S)
        elif argv[0] == "capture":
            captured = captured_logits(model, x)
        outputs = step(model, x)
    after = torch_cudnn_algo.diagnostics.execution_plan_counts()
    report = {
        "counts_before_step": {k: before[k] for k in COUNTS},
        "counts": {k: after[k] for k in COUNTS},
        "microseconds": {k: after[k] - before[k] for k in ("build_us", "deserialize_us")},
        "runs": torch_cudnn_algo.diagnostics.plan_entry_run_counts(),
        "graph_plans": graph_plans(),
        "entries": {str(c): e.choice for c, e in plan.entries.items()},
        "with_execution_plan": sorted(str(c) for c, e in plan.entries.items() if e.execution_plan is not None),
        "unavailable": {str(c): e.execution_plan_unavailable for c, e in plan.entries.items()
                        if e.execution_plan_unavailable is not None},
        "warnings": [str(w.message) for w in caught],
    }
    if argv[0] == "save":
        torch.save(outputs, outputs_path)
    else:
        saved = torch.load(outputs_path)
        report["identical"] = {name: torch.equal(saved[name], outputs[name]) for name in saved}
        if captured is not None:
            report["captured_identical"] = torch.equal(saved["out"], captured)
    return report


def captured_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The forward pass captured in a CUDA graph before any of the plan's convolutions ran, replayed."""
    # A convolution outside the plan first: this thread's cuDNN handle is created outside the capture.
    torch.nn.functional.conv2d(torch.ones(1, 1, 5, 5, device="cuda"), torch.ones(1, 1, 3, 3, device="cuda"))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):  # no cast cache across capture
            out = model(x)
    graph.replay()
    torch.cuda.synchronize()
    return out.detach().cpu()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
