"""One rank of a CPU job (gloo, a FileStore) that drives the job coordinator
(torch_cudnn_algo/_distributed.py) as the extension does, with a stand-in for
the tuner: it asks ``turn`` for each configuration it meets, "decides" the ones
it is told to (a short sleep, a pick naming this rank) and publishes them.

    python sharing_protocol_job.py SCENARIO RANK WORLD STORE_FILE OUT_DIR

Scenarios: ``same`` (every rank meets the same 40 configurations, each in its
own order), ``different`` (each rank meets its own subset of 60), ``share``
(tune()'s split: claim_share on 30 configurations, then decide them in
tune()'s order), ``dead`` (``share`` with wait_s=2, and rank 1 exits after
publishing 2 decisions), ``abandon`` (rank 0's tuning of the first
configuration raises; it gives the configuration up), ``subgroup`` (ranks 0
and 1 share within a group of their own, rank 2 is outside it), ``off``
(coordinate(False) on every rank).
Writes OUT_DIR/rank<RANK>.json: per configuration the decision this rank runs
and whether it decided it, the coordinator's counts, and the wall time.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from pathlib import Path

import torch.distributed as dist

from torch_cudnn_algo import _distributed, distributed

DECIDE_S = 0.02


def keys_met(scenario: str, rank: int) -> list[str]:
    if scenario == "different":
        pool = [f"configuration {i}" for i in range(60)]
        return random.Random(rank).sample(pool, 35)
    count = 30 if scenario in ("share", "dead") else 40
    keys = [f"configuration {i}" for i in range(count)]
    random.Random(rank).shuffle(keys)
    return keys


def main(scenario: str, rank: int, world: int, store_file: str, out_dir: Path) -> int:
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    if scenario == "subgroup":
        distributed.coordinate(group=dist.new_group([0, 1]))  # rank 2 gets the "not a member" answer
    if scenario == "off":
        distributed.coordinate(False)
    if scenario == "dead":
        distributed.coordinate(wait_s=2.0)
    coordinator = _distributed._COORDINATOR
    scope = "tune" if scenario in ("share", "dead") else "fly"
    keys = keys_met(scenario, rank)
    if scope == "tune":
        mine = _distributed.claim_share(keys, scope)
        assert mine is not None
        keys = [k for k, m in zip(keys, mine) if m] + [k for k, m in zip(keys, mine) if not m]
    dist.barrier()  # every rank starts deciding at once
    started = time.monotonic()
    runs: dict[str, str] = {}
    decided: list[str] = []
    alone: list[str] = []
    gave_up = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in keys:
            turn = coordinator("turn", scope, key, None)
            if isinstance(turn, bytes):
                runs[key] = turn.decode()
                continue
            if turn is None:
                alone.append(key)
                runs[key] = f"alone {rank}"
                continue
            assert turn == "decide", turn
            if scenario == "abandon" and rank == 0 and not gave_up:
                coordinator("abandon", scope, key, None)  # the extension does this when tuning raises
                runs[key] = "stock (tuning raised)"
                gave_up = True
                continue
            time.sleep(DECIDE_S)
            if scenario == "dead" and rank == 1 and coordinator.counts()["shared"] == 2:
                os._exit(3)  # dies while deciding its third configuration
            mine = f"pick of rank {rank}".encode()
            job = coordinator("publish", scope, key, mine)
            decided.append(key)
            runs[key] = job.decode()
    report = {"rank": rank, "runs": runs, "decided": decided, "alone": alone, "counts": distributed.sharing_counts(),
              "seconds": time.monotonic() - started, "active": distributed.coordination().active,
              "warnings": [str(w.message) for w in caught]}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])))
