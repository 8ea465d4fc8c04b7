"""GPU, two or more GPUs: "rank 0 tunes and writes, the others wait and load"
in a real torchrun job (NCCL, one process per GPU, DDP training steps); every
rank must run identical choices, each of them actually run (per-entry counters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]  # torchrun, one process per GPU

JOB = Path(__file__).parent / "jobs" / "plan_distributed_job.py"


def test_every_rank_runs_the_plan_rank_zero_tuned(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(JOB),
         str(tmp_path)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "result.json").read_text())
    assert report["world_size"] == 2
    assert report["identical_choices"] and report["every_entry_ran_on_every_rank"]
    assert report["configurations"] >= 40  # the default network: 26 distinct convolutions, three directions
    assert {r["device"] for r in report["ranks"]} == {0, 1}
    losses = [r["losses"] for r in report["ranks"]]
    assert losses[0] == pytest.approx(losses[1], rel=1e-3)  # DDP keeps the replicas in step
    # Rank 1 loads rank 0's built execution plans: it builds only the entries without one.
    loader = report["ranks"][1]
    with_blob = loader["with_execution_plan"]
    assert with_blob > 0
    counts = {k: loader["execution_plan_counts"][k] for k in ("built", "deserialized", "deserialize_failed")}
    assert counts == {"built": report["configurations"] - with_blob, "deserialized": with_blob,
                      "deserialize_failed": 0}, loader
