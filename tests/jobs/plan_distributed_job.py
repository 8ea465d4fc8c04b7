"""A torchrun job (NCCL, one process per GPU): rank 0 tunes the default network
and writes the plan, the other ranks wait and load it, every rank trains a few
DDP steps under it, and rank 0 checks that every rank ran identical choices.
Per rank it also reports the first step's wall time and how many plans were
built vs deserialised from the plan's built execution plans (the other ranks
should build only the entries without one).

    torchrun --nproc-per-node 2 tests/jobs/plan_distributed_job.py OUT_DIR

Writes OUT_DIR/result.json (rank 0); exits non-zero when the ranks differ.
The pattern users follow (docs/plans.md, "Distributed jobs"): tune the bare model
before wrapping it in DistributedDataParallel, so rank 0's tuning pass runs no
collective the other ranks would have to join.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import torch_cudnn_algo
from torch_cudnn_algo._default_net import DefaultNet, default_example_inputs

BATCH, IMAGE, STEPS = 16, 64, 3


def main(out_dir: Path) -> int:
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.manual_seed(0)
    model = DefaultNet().cuda().to(memory_format=torch.channels_last)
    x = default_example_inputs(BATCH, IMAGE, "cuda")
    plan_path = out_dir / "plan.json"
    if rank == 0:
        with torch.autocast("cuda", dtype=torch.float16):
            plan = torch_cudnn_algo.tune(model, x, progress=False)
        plan.save(plan_path)
    dist.barrier()  # the others wait for the whole file (save renames it into place)
    plan = torch_cudnn_algo.load_plan(plan_path)
    torch_cudnn_algo.use_plan(plan)

    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    losses, step_seconds = [], []
    for _ in range(STEPS):
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = ddp(x).float().logsumexp(dim=1).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # synchronizes
        step_seconds.append(time.perf_counter() - started)
    torch.cuda.synchronize()
    in_force = torch_cudnn_algo._ops.plan_entries_in_force()
    mine = {"rank": rank, "gpu": torch.cuda.get_device_name(), "device": local_rank,
            "choices": {e.label: e.choice for e in in_force}, "runs": {e.label: e.runs for e in in_force},
            "losses": losses,
            "first_step_s": step_seconds[0],
            "execution_plan_counts": torch_cudnn_algo.diagnostics.execution_plan_counts(),
            "with_execution_plan": sum(1 for e in plan.entries.values() if e.execution_plan is not None)}
    everyone: list[dict] = [None] * world  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    status = 0
    if rank == 0:
        reference = everyone[0]["choices"]
        identical = all(r["choices"] == reference for r in everyone)
        all_ran = all(all(count > 0 for count in r["runs"].values()) for r in everyone)
        result = {"world_size": world, "configurations": len(reference), "identical_choices": identical,
                  "every_entry_ran_on_every_rank": all_ran,
                  "distinct_choices": len(set(reference.values())),
                  "ranks": [{k: r[k] for k in ("rank", "gpu", "device", "losses", "first_step_s",
                                               "execution_plan_counts", "with_execution_plan")} |
                            {"calls": sum(r["runs"].values())} for r in everyone],
                  "choices": reference}
        (out_dir / "result.json").write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "choices"}, indent=1))
        status = 0 if identical and all_ran and len(reference) > 0 else 1
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
