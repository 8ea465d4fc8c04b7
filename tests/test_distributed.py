"""Decisions shared by the ranks of a job (torch_cudnn_algo/_distributed.py), on the CPU:
several processes on one machine (gloo, a FileStore), each driving the job coordinator as
the extension does (tests/jobs/sharing_protocol_job.py), and the settings' rules in-process.
The GPU run of the same protocol through the tuner is test_distributed_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch.distributed as dist

from torch_cudnn_algo import _distributed, distributed

JOB = Path(__file__).parent / "jobs" / "sharing_protocol_job.py"
WORLD = 3


def run_job(tmp_path: Path, scenario: str, world: int = WORLD, timeout: float = 120) -> dict[int, dict]:
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, str(JOB), scenario, str(rank), str(world), str(store), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(world)]
    outputs = {}
    for rank, proc in enumerate(procs):
        outputs[rank] = (proc.communicate(timeout=timeout)[0], proc.returncode)
    reports = {}
    for rank, (output, code) in outputs.items():
        if (tmp_path / f"rank{rank}.json").exists():
            reports[rank] = json.loads((tmp_path / f"rank{rank}.json").read_text())
        else:
            reports[rank] = {"exit": code, "output": output[-3000:]}
    return reports


def decided_by(reports: dict[int, dict]) -> Counter:
    return Counter(key for report in reports.values() for key in report.get("decided", []))


def assert_identical(reports: dict[int, dict]) -> None:
    runs: dict[str, set[str]] = {}
    for report in reports.values():
        for key, decision in report["runs"].items():
            runs.setdefault(key, set()).add(decision)
    assert {key: d for key, d in runs.items() if len(d) > 1} == {}


def test_each_configuration_is_decided_once_and_run_by_every_rank(tmp_path):
    reports = run_job(tmp_path, "same")
    assert all("runs" in r for r in reports.values()), reports
    counts = decided_by(reports)
    assert len(counts) == 40 and set(counts.values()) == {1}  # 40 configurations, each by one rank
    assert_identical(reports)
    for rank, report in reports.items():
        assert report["active"] and report["alone"] == []
        assert report["counts"]["shared"] == len(report["decided"])
        assert report["counts"]["adopted"] == 40 - len(report["decided"])
        assert report["counts"]["given_up"] == 0 and report["warnings"] == []
    # every rank meets them in its own order, so every rank decides some
    assert all(report["decided"] for report in reports.values())


def test_ranks_meeting_different_configurations_never_wait_for_a_rank_that_never_comes(tmp_path):
    reports = run_job(tmp_path, "different")
    counts = decided_by(reports)
    met = {key for report in reports.values() for key in report["runs"]}
    assert set(counts) == met and set(counts.values()) == {1}
    assert_identical(reports)
    # nobody waited out the bound: a configuration only one rank meets is decided by it at once
    assert max(r["seconds"] for r in reports.values()) < _distributed.DEFAULT_WAIT_S / 4


def test_tunes_split_is_a_third_per_rank_and_each_rank_decides_its_own_share(tmp_path):
    reports = run_job(tmp_path, "share")
    counts = decided_by(reports)
    assert len(counts) == 30 and set(counts.values()) == {1}
    assert sorted(len(r["decided"]) for r in reports.values()) == [10, 10, 10]
    assert all(r["counts"]["claimed"] == 10 for r in reports.values())
    assert_identical(reports)


def test_a_rank_that_dies_while_deciding_costs_the_others_one_bounded_wait(tmp_path):
    started = time.monotonic()
    reports = run_job(tmp_path, "dead")
    assert reports[1].get("exit") == 3, reports[1]
    survivors = {rank: reports[rank] for rank in (0, 2)}
    assert all("runs" in r for r in survivors.values()), survivors
    assert all(len(r["runs"]) == 30 for r in survivors.values())
    assert_identical(survivors)
    # rank 1 published 2 of its 10; its other 8 were decided once, by a survivor
    counts = decided_by(survivors)
    assert len(counts) == 28 and set(counts.values()) == {1}
    for report in survivors.values():
        assert report["counts"]["given_up"] == 1
        assert [w for w in report["warnings"] if "rank 1 published no decision for 2 s" in w] != []
        assert len(report["warnings"]) == 1  # said once
        # the bound: one wait_s (2 s) for the dead rank, plus deciding rank 1's share
        assert report["seconds"] < 2.0 + 30 * 0.02 + 5.0, report["seconds"]
    assert time.monotonic() - started < 60


def test_a_rank_whose_tuning_raised_gives_the_configuration_to_the_others(tmp_path):
    reports = run_job(tmp_path, "abandon")
    runs0 = reports[0]["runs"]
    given_up = [key for key, decision in runs0.items() if decision == "stock (tuning raised)"]
    assert len(given_up) == 1
    others = {rank: reports[rank] for rank in (1, 2)}
    assert_identical(others)
    # the others decided it in the next round, without waiting out the bound
    assert sum(given_up[0] in r["decided"] for r in others.values()) == 1
    assert all(r["counts"]["given_up"] == 0 for r in reports.values())
    assert max(r["seconds"] for r in reports.values()) < _distributed.DEFAULT_WAIT_S / 4


def test_a_subgroup_shares_within_itself_and_a_rank_outside_it_decides_alone(tmp_path):
    reports = run_job(tmp_path, "subgroup")
    assert reports[0]["active"] and reports[1]["active"] and not reports[2]["active"]
    assert len(reports[2]["alone"]) == 40 and reports[2]["counts"]["claimed"] == 0
    inside = {rank: reports[rank] for rank in (0, 1)}
    counts = decided_by(inside)
    assert len(counts) == 40 and set(counts.values()) == {1}
    assert_identical(inside)


# -- settings, in this process -----------------------------------------------------------------


@pytest.fixture
def coordinator_settings():
    before = distributed.coordination()
    yield
    distributed.coordinate(before.enabled, group=before.group, wait_s=before.wait_s)


@pytest.mark.parametrize("bad, message", [
    ({"enabled": "yes"}, "enabled must be True or False"),
    ({"wait_s": 0}, "wait_s must be a number of seconds > 0"),
    ({"wait_s": float("inf")}, "wait_s must be a number of seconds > 0"),
    ({"wait_s": True}, "wait_s must be a number of seconds > 0"),
    ({"group": "world"}, "group must be a torch.distributed.ProcessGroup, what new_group returns"),
])
def test_bad_settings_say_what_is_valid_and_change_nothing(coordinator_settings, bad, message):
    distributed.coordinate(wait_s=7.5)
    before = distributed.coordination()
    with pytest.raises(ValueError, match=message):
        distributed.coordinate(**bad)
    assert distributed.coordination() == before


def test_without_a_process_group_every_rank_decides_alone(coordinator_settings):
    assert not dist.is_initialized()
    state = distributed.coordination()
    assert state.enabled and not state.active and state.rank is None and state.wait_s == _distributed.DEFAULT_WAIT_S
    assert _distributed._COORDINATOR("turn", "fly", "a configuration", None) is None
    assert _distributed.claim_share(["a", "b"], "tune") is None


def test_the_off_switch_makes_every_rank_decide_alone(tmp_path):
    reports = run_job(tmp_path, "off")
    for report in reports.values():
        assert not report["active"] and len(report["alone"]) == 40 and report["decided"] == []
        assert report["counts"] == dict.fromkeys(report["counts"], 0)


@pytest.mark.parametrize("value, enabled, warns", [("", True, False), ("1", True, False), ("0", False, False),
                                                   ("off", True, True)])
def test_the_environment_variable_sets_the_default(monkeypatch, value, enabled, warns):
    monkeypatch.setenv(_distributed.ENV_VAR, value)
    with pytest.warns(UserWarning, match="is not 0 or 1") if warns else _no_warning():
        assert _distributed.JobCoordinator().enabled is enabled


class _no_warning:
    def __enter__(self):
        import warnings
        self._catch = warnings.catch_warnings(record=True)
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        assert [str(w.message) for w in self._caught] == []


class _BrokenStore:
    def check(self, keys):
        raise RuntimeError("Connection reset by peer")


def test_a_failing_store_turns_sharing_off_once_said_and_never_fails_a_convolution(monkeypatch):
    coordinator = _distributed.JobCoordinator()
    monkeypatch.setattr(coordinator, "_job", lambda: None if coordinator._broken else (_BrokenStore(), 0, 2))
    with pytest.warns(UserWarning, match=r"store failed \(RuntimeError: Connection reset by peer\)"):
        assert coordinator("turn", "fly", "a configuration", None) is None
    assert coordinator("turn", "fly", "another", None) is None  # off now, and silent


def test_retune_decides_again_in_a_scope_of_its_own():
    coordinator = _distributed.JobCoordinator()
    first = coordinator.prefix("retune", "k")
    coordinator.retune_round += 1
    assert coordinator.prefix("retune", "k") != first
    assert len({coordinator.prefix(scope, "k") for scope in ("fly", "tune", "retune")}) == 3
    assert coordinator.prefix("tune", "k on an H200") != coordinator.prefix("tune", "k on an H100")


def test_an_unknown_operation_is_a_clear_error(monkeypatch):
    coordinator = _distributed.JobCoordinator()
    monkeypatch.setattr(coordinator, "_job", lambda: (object(), 0, 2))
    with pytest.raises(ValueError, match="operations are turn, publish, abandon"):
        coordinator("guess", "fly", "k", None)
