"""One rank of a job whose ranks share "fastest" decisions (torch_cudnn_algo.distributed).
The environment says what torchrun would: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK (the rank's GPU is LOCAL_RANK modulo the GPUs there are, so ranks may share one);
JOB_BACKEND is the process group's backend (default gloo) and JOB_DB_ROOT, when set, gives
each rank a tuning database of its own (JOB_DB_ROOT/rank<RANK>).

    python shared_decisions_job.py MODE OUT_DIR [NETWORK]

Modes:
- ``fly``: the flags at "fastest", the network wrapped in DistributedDataParallel, three
  training steps (AMP fp16, channels-last);
- ``tune``: ``torch_cudnn_algo.tune`` of the bare network;
- ``kill``: ``tune`` with wait_s=5, rank 1 exiting (status 3) when it is about to publish its
  third decision.

NETWORK: ``default`` (the package's default network, batch 8 at 64x64) or a torchvision
classifier (``mobilenet_v3_large``, ``efficientnet_b0``: batch 32 at 224x224).

Writes OUT_DIR/rank<RANK>.json: the decisions this rank's tuning database holds (key ->
pick), the plan's choices (``tune``, ``kill``), the tuner's and the coordinator's counts and
the wall time of the mode.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

import torch_cudnn_algo
from torch_cudnn_algo import _distributed, _ops
from torch_cudnn_algo._default_net import DefaultNet, default_example_inputs

BATCH, IMAGE = 8, 64  # the default network's
FLAGS = ("conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo")


def die_on_third_publish() -> None:
    publish = _distributed.JobCoordinator._publish

    def dying(self, store, rank, base, payload):
        if self.counts()["shared"] == 2:
            os._exit(3)
        return publish(self, store, rank, base, payload)

    _distributed.JobCoordinator._publish = dying


def network(name: str, device: torch.device) -> tuple[torch.nn.Module, torch.Tensor]:
    if name == "default":
        return DefaultNet().to(device), default_example_inputs(BATCH, IMAGE, device)
    import torchvision
    model = getattr(torchvision.models, name)(num_classes=1000).to(device)
    return model, torch.randn(32, 3, 224, 224, device=device).to(memory_format=torch.channels_last)


def main(mode: str, out_dir: Path, network_name: str) -> int:
    rank = int(os.environ["RANK"])
    if os.environ.get("JOB_DB_ROOT"):  # read on every use, so set before the first
        os.environ["TORCH_CUDNN_ALGO_DB"] = str(Path(os.environ["JOB_DB_ROOT"]) / f"rank{rank}")
        Path(os.environ["TORCH_CUDNN_ALGO_DB"]).mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(os.environ.get("JOB_BACKEND", "gloo"), device_id=device
                            if os.environ.get("JOB_BACKEND") == "nccl" else None)
    torch.manual_seed(0)
    model, x = network(network_name, device)
    model = model.to(memory_format=torch.channels_last)
    report: dict = {"rank": rank}
    dist.barrier()
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "fly":
            for flag in FLAGS:
                setattr(torch.backends.cudnn, flag, "fastest")
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
            optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
            for _ in range(3):
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = ddp(x).float().square().mean()
                loss.backward()
                optimizer.step()
            torch.cuda.synchronize()
        else:
            if mode == "kill":
                torch_cudnn_algo.distributed.coordinate(wait_s=5.0)
                if rank == 1:
                    die_on_third_publish()
            with torch.autocast("cuda", dtype=torch.float16):
                plan = torch_cudnn_algo.tune(model, x, progress=False)
            report["plan"] = {str(spec): str(plan[spec].choice) for spec in plan}
    report["seconds"] = time.monotonic() - started
    report["decisions"] = {e.key: e.header.get("pick") for e in torch_cudnn_algo.db.entries() if e.kind == "decision"}
    report["tuner"] = _ops.kept_decision_counts()
    report["coordinator"] = torch_cudnn_algo.distributed.sharing_counts()
    report["warnings"] = [str(w.message) for w in caught if "torch_cudnn_algo" in str(w.message)]
    report["gpu"] = torch.cuda.get_device_name(device)
    report["device"] = device.index
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "default"))
