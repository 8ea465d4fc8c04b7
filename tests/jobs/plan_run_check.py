"""Loads the plan named by TORCH_CUDNN_ALGO_PLAN (at autoload, as a user's job
would), runs the default network's training step under it, then the same step
on stock PyTorch and in float64, and prints one JSON report:

- ``entries``: per plan configuration, its choice and how many calls ran it;
- ``announced``: the "requested <dir> algorithm plan -> <choice> is set" lines;
- ``error_plan`` / ``error_stock``: max |out - ref| / max |ref| of the logits
  and of the concatenated weight gradients, ref = the float64 step.

Used by tests/test_plan_gpu.py (fresh processes) and the distributed job.
"""

from __future__ import annotations

import json
import logging
import sys

import torch

import torch_cudnn_algo
from torch_cudnn_algo._default_net import DefaultNet, default_example_inputs


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def step(model: torch.nn.Module, x: torch.Tensor, amp: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and every parameter's gradient (flattened, float64) of one step."""
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(x)
    logits.float().sum().backward()
    grads = torch.cat([p.grad.double().flatten() for p in model.parameters()])
    return logits.double().detach(), grads


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out - ref).abs().max() / ref.abs().max()).item()


def main(batch: int, image_size: int) -> dict:
    handler = Lines()
    logging.getLogger("torch_cudnn_algo").addHandler(handler)
    logging.getLogger("torch_cudnn_algo").setLevel(logging.INFO)
    plan = torch_cudnn_algo.current_plan()
    assert plan is not None, "TORCH_CUDNN_ALGO_PLAN was not applied"
    torch.manual_seed(0)
    model = DefaultNet().cuda().to(memory_format=torch.channels_last)
    model.eval()  # BatchNorm from running statistics: the three steps see one function
    x = default_example_inputs(batch, image_size, "cuda")
    logits_plan, grads_plan = step(model, x, amp=True)
    torch.cuda.synchronize()
    in_force = torch_cudnn_algo._ops.plan_entries_in_force()
    with torch_cudnn_algo.use_plan(None):
        logits_stock, grads_stock = step(model, x, amp=True)
        reference = model.double()
        logits_ref, grads_ref = step(reference, x.double(), amp=False)
    return {
        "plan": plan.source,
        "entries": [{"conv": e.label, "choice": e.choice, "runs": e.runs} for e in in_force],
        "announced": sorted(line.split(" | ")[0] for line in handler.lines if " algorithm plan -> " in line),
        "error_plan": {"logits": rel(logits_plan, logits_ref), "grads": rel(grads_plan, grads_ref)},
        "error_stock": {"logits": rel(logits_stock, logits_ref), "grads": rel(grads_stock, grads_ref)},
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
