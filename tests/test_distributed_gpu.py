"""GPU: the ranks of a job share their "fastest" decisions through the process group's store
(a TCPStore hosted by rank 0; tests/jobs/shared_decisions_job.py), on the fly in a
DistributedDataParallel loop and in tune(): three processes sharing one GPU (gloo), and, where
two GPUs are, one process per GPU (NCCL). Every rank must run identical choices, each
configuration tuned by exactly one rank, a second job tune nothing, and a rank killed while
tuning must not hang the others."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

JOB = Path(__file__).parent / "jobs" / "shared_decisions_job.py"
WORLD = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(mode: str, out: Path, dbs: Path, timeout: float = 400, world: int = WORLD, gpu_per_rank: bool = False,
            backend: str = "gloo") -> dict[int, dict]:
    """Starts the job's ranks as torchrun would (all on GPU 0, or rank r on GPU r) and returns
    each rank's report, or its exit status and output when it wrote none."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(rank if gpu_per_rank else 0), JOB_DB_ROOT=str(dbs),
                   JOB_BACKEND=backend)
        procs.append(subprocess.Popen([sys.executable, str(JOB), mode, str(out)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    reports = {}
    for rank, proc in enumerate(procs):
        output = proc.communicate(timeout=timeout)[0]
        path = out / f"rank{rank}.json"
        reports[rank] = json.loads(path.read_text()) if path.exists() else {"exit": proc.returncode,
                                                                            "output": output[-4000:]}
    return reports


def assert_identical(reports: dict[int, dict], field: str) -> None:
    first = next(iter(reports.values()))[field]
    assert first
    for rank, report in reports.items():
        assert report[field] == first, f"rank {rank}'s {field} differ"


def test_on_the_fly_in_ddp_each_configuration_is_tuned_by_one_rank_and_run_by_all(tmp_path):
    reports = run_job("fly", tmp_path / "fly", tmp_path / "db")
    assert all("decisions" in r for r in reports.values()), reports
    assert_identical(reports, "decisions")  # every rank's database holds the same picks
    configurations = len(reports[0]["decisions"])
    assert all(f"GPU {reports[0]['gpu']};" in key for key in reports[0]["decisions"])  # keyed by GPU model
    assert configurations >= 40  # the default network: 26 distinct convolutions, three directions
    decided = sum(r["tuner"]["tuned"] + r["tuner"]["borrowed"] for r in reports.values())
    assert decided == configurations  # each once, across the ranks
    for r in reports.values():
        assert r["tuner"]["adopted"] + r["tuner"]["tuned"] + r["tuner"]["borrowed"] == configurations
        assert r["coordinator"]["shared"] == r["tuner"]["tuned"] + r["tuner"]["borrowed"]
        assert r["warnings"] == [], r["warnings"]


def test_tune_splits_the_configurations_and_a_second_job_tunes_nothing(tmp_path):
    first = run_job("tune", tmp_path / "first", tmp_path / "db")
    assert all("plan" in r for r in first.values()), first
    assert_identical(first, "plan")
    assert_identical(first, "decisions")
    configurations = len(first[0]["plan"])
    tuned = [r["tuner"]["tuned"] for r in first.values()]
    assert sum(tuned) == configurations and min(tuned) >= configurations // WORLD - 2, tuned
    second = run_job("tune", tmp_path / "second", tmp_path / "db")
    assert_identical(second, "plan")
    assert second[0]["plan"] == first[0]["plan"]
    assert [r["tuner"]["tuned"] for r in second.values()] == [0] * WORLD
    print(json.dumps({"configurations": configurations, "tuned_per_rank": tuned,
                      "seconds_per_rank": [round(r["seconds"], 2) for r in first.values()],
                      "second_job_seconds": [round(r["seconds"], 2) for r in second.values()]}))


def test_a_rank_killed_while_tuning_does_not_hang_the_others(tmp_path):
    started = time.monotonic()
    reports = run_job("kill", tmp_path / "kill", tmp_path / "db")
    assert reports[1].get("exit") == 3, reports[1]
    survivors = {rank: reports[rank] for rank in (0, 2)}
    assert all("plan" in r for r in survivors.values()), survivors
    assert_identical(survivors, "plan")
    configurations = len(survivors[0]["plan"])
    assert sum(r["tuner"]["tuned"] for r in survivors.values()) == configurations - 2  # rank 1 published 2
    # The first survivor to wait out rank 1 takes it for dead (once, said once) and claims its
    # configurations again; the other may find them decided by then, never waiting for rank 1.
    given_up = [r["coordinator"]["given_up"] for r in survivors.values()]
    assert 1 in given_up and set(given_up) <= {0, 1}, given_up
    for r in survivors.values():
        said = [w for w in r["warnings"] if "rank 1 published no decision for 5 s" in w]
        assert len(said) == r["coordinator"]["given_up"], r["warnings"]
    print(json.dumps({"survivor_seconds": [round(r["seconds"], 2) for r in survivors.values()],
                      "wall_s": round(time.monotonic() - started, 1)}))


# -- one process per GPU ---------------------------------------------------------------------


@pytest.mark.multi_gpu
def test_on_two_gpus_with_nccl_each_configuration_is_tuned_once_and_run_by_both(tmp_path):
    fly = run_job("fly", tmp_path / "fly", tmp_path / "fly-db", world=2, gpu_per_rank=True, backend="nccl")
    assert all("decisions" in r for r in fly.values()), fly
    assert sorted(r["device"] for r in fly.values()) == [0, 1]
    assert_identical(fly, "decisions")
    assert sum(r["tuner"]["tuned"] + r["tuner"]["borrowed"] for r in fly.values()) == len(fly[0]["decisions"])
    first = run_job("tune", tmp_path / "first", tmp_path / "db", world=2, gpu_per_rank=True, backend="nccl")
    assert all("plan" in r for r in first.values()), first
    assert_identical(first, "plan")
    configurations = len(first[0]["plan"])
    tuned = [r["tuner"]["tuned"] for r in first.values()]
    assert sum(tuned) == configurations and min(tuned) >= configurations // 2 - 2, tuned
    second = run_job("tune", tmp_path / "second", tmp_path / "db", world=2, gpu_per_rank=True, backend="nccl")
    assert second[0]["plan"] == first[0]["plan"] == second[1]["plan"]
    assert [r["tuner"]["tuned"] for r in second.values()] == [0, 0]
    print(json.dumps({"configurations": configurations, "tuned_per_rank": tuned,
                      "seconds_per_rank": [round(r["seconds"], 2) for r in first.values()],
                      "second_job_seconds": [round(r["seconds"], 2) for r in second.values()]}))
