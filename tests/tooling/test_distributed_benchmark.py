"""CPU: the distributed tuning benchmark (benchmarks/distributed.py,
benchmarks/harness/distributed.py): its job launcher (run against a stand-in rank program that
writes what tests/jobs/shared_decisions_job.py writes), its checks across ranks, its tables and
its options."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import distributed  # noqa: E402

CONFIGURATIONS = 12

# The rank program's contract: argv MODE OUT_DIR NETWORK, the torchrun variables and JOB_DB_ROOT;
# OUT_DIR/rank<RANK>.json with seconds, plan or decisions, tuner and coordinator counts. Ranks
# split the configurations; a second job finds them in its database; rank 1 of "kill" exits 3.
STAND_IN = textwrap.dedent(f"""
    import json, os, sys, time
    from pathlib import Path
    mode, out, network = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert os.environ["LOCAL_RANK"] == str(rank) and os.environ["JOB_BACKEND"] == "nccl"
    db = Path(os.environ["JOB_DB_ROOT"]) / f"rank{{rank}}"
    filled = db.exists()
    db.mkdir(parents=True, exist_ok=True)
    if mode == "kill" and rank == 1:
        sys.exit(3)
    if network == "hang":
        time.sleep(60)
    mine = 0 if filled else len(range(rank, {CONFIGURATIONS}, world))
    picks = {{f"conv{{i}}": "eng0" if network != "split" or rank == 0 else "eng1" for i in range({CONFIGURATIONS})}}
    report = {{"rank": rank, "seconds": 10.0 / world + 0.4 + 0.1 * rank, "device": rank,
              "tuner": {{"tuned": mine, "borrowed": 0, "adopted": {CONFIGURATIONS} - mine}},
              "coordinator": {{"shared": mine, "given_up": 1 if mode == "kill" else 0}}, "warnings": []}}
    report["decisions" if mode == "fly" else "plan"] = picks
    (out / f"rank{{rank}}.json").write_text(json.dumps(report))
""")


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    job = tmp_path / "job.py"
    job.write_text(STAND_IN)
    monkeypatch.setattr(distributed, "JOB", job)
    work = tmp_path / "work"
    work.mkdir()
    return work


def report_of(runs: dict, network: str = "mobilenet_v3_large") -> dict:
    return {"date": "2026-12-07T05:00:00+00:00", "gpus": 2, "network": network, "command": "cmd", "runs": runs,
            "environment": {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "9.19.0"}}


def test_rank_counts_are_one_the_powers_of_two_and_every_gpu() -> None:
    assert distributed.rank_counts(1) == [1]
    assert distributed.rank_counts(2) == [1, 2]
    assert distributed.rank_counts(6) == [1, 2, 4, 6]
    assert distributed.rank_counts(8) == [1, 2, 4, 8]


def test_every_mode_runs_as_jobs_of_n_ranks_and_the_table_checks_them(stand_in: Path) -> None:
    runs = distributed.measure("mobilenet_v3_large", [1, 2], timeout_s=60, work=stand_in)
    assert set(runs["1"]) == {"tune", "second", "fly"} and set(runs["2"]) == {"tune", "second", "fly", "kill"}
    summary = distributed.summarize(report_of(runs))
    one, two = summary["rows"]
    assert summary["alone_s"] == pytest.approx(10.4)
    assert two["tune"] == {"ranks": 2, "complete": True, "seconds": pytest.approx(5.5), "configurations": 12,
                           "tuned_per_rank": [6, 6], "tuned_twice": 0, "identical": True,
                           "speedup": pytest.approx(10.4 / 5.5), "overhead_s": pytest.approx(5.5 - 10.4 / 2)}
    assert two["second"]["tuned_per_rank"] == [0, 0] and two["second"]["same_plan"] is True
    assert two["fly"]["decided_twice"] == 0 and two["fly"]["identical"] is True
    assert two["kill"]["killed_exit"] == 3 and two["kill"]["survivors"] == 1 and two["kill"]["given_up"] == [1]
    assert "kill" not in one
    markdown = distributed.render(report_of(runs))
    assert "| 2 | 12 | 6 / 6 | 0 | yes | 5.5 | 1.89 | 0.3 |" in markdown
    assert "| 2 | 3 | 1 | 1 | yes | 5.4 |" in markdown
    assert "**no**" not in markdown


def test_ranks_that_disagree_are_flagged(stand_in: Path) -> None:
    runs = distributed.measure("split", [2], timeout_s=60, work=stand_in)
    summary = distributed.summarize(report_of(runs, "split"))
    assert summary["alone_s"] is None  # no one-rank job: no speed-up or overhead
    row = summary["rows"][0]
    assert row["tune"]["identical"] is False and row["fly"]["identical"] is False
    assert row["tune"]["speedup"] is None
    assert "**no**" in distributed.render(report_of(runs, "split"))


def test_a_job_past_its_time_is_killed_and_recorded(stand_in: Path) -> None:
    db = stand_in / "db"
    db.mkdir()
    job = distributed.run_job("tune", 2, "hang", db, timeout_s=3)
    assert job["wall_s"] < 30
    for rank in job["ranks"].values():
        assert "seconds" not in rank and rank["exit"] != 0 and "killed after 3 s" in rank["output"]
    row = distributed.summarize(report_of({"2": {"tune": job}}))["rows"][0]
    assert row["tune"]["complete"] is False and row["tune"]["identical"] is False


def test_the_result_keeps_fingerprints_not_picks() -> None:
    kept = distributed.rank_summary({"seconds": 1.0, "tuner": {}, "coordinator": {}, "plan": {"a": "eng0"}})
    assert kept["plan"] == {"entries": 1, "digest": distributed.digest({"a": "eng0"})}
    assert distributed.digest({"a": "eng0", "b": "eng1"}) == distributed.digest({"b": "eng1", "a": "eng0"})
    assert distributed.digest({"a": "eng0"}) != distributed.digest({"a": "eng1"})


def test_render_prints_a_saved_result(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report_of({})))
    assert distributed.main(["--render", str(path)]) == 0
    assert "tune() on N ranks" in capsys.readouterr().out


def test_bad_rank_counts_are_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for bad in ("a,b", "0", "3"):
        with pytest.raises(SystemExit):
            distributed.main(["--ranks", bad])
        assert "--ranks" in capsys.readouterr().err
