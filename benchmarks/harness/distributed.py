"""Tuning through ``torch.distributed`` on several GPUs of one host: ``tune()`` on N ranks (one
process a GPU, NCCL) against one rank alone, ``"fastest"`` on the fly in a DistributedDataParallel
loop, a second job on the first one's tuning databases, and a rank killed while tuning.

    python benchmarks/distributed.py [--network mobilenet_v3_large] [--ranks 1,2] [--out benchmarks/results]
    python benchmarks/distributed.py --render FILE.json      # no GPU

Every job's ranks are processes started as ``torchrun`` would start them (not through
``torchrun``, whose agent stops every rank when one exits), each on its own GPU with a tuning
database of its own; the rank program is ``tests/jobs/shared_decisions_job.py``, the one the
distributed GPU tests run. Per rank count N (``--ranks``, default 1 and every power of two up to
the GPUs there are):

- ``tune``: ``torch_cudnn_algo.tune`` of the network on empty databases; its time is the slowest
  rank's, from the barrier before tuning to the plan;
- ``second``: the same job again on the databases the first filled (nothing may be tuned);
- ``fly``: the flags at ``"fastest"``, three DDP training steps on empty databases;
- ``kill`` (N >= 2): ``tune`` with rank 1 exiting when about to publish its third decision; the
  others must finish without it.

Every rank's plan (or its database's decisions) is compared by digest: all must be identical, and
every configuration tuned by exactly one rank. Writes ``<out>/distributed-<gpu>x<N>-<date>.json``
and ``.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .results import REPO_ROOT, device_slug, environment, now_iso, progress, publish, set_progress_label, write_json
from .stats import num

JOB = REPO_ROOT / "tests" / "jobs" / "shared_decisions_job.py"
NETWORKS = ("mobilenet_v3_large", "efficientnet_b0", "default")
KILLED_RANK = 1  # the job's kill mode: rank 1 exits (status 3) before its third publish
KILLED_STATUS = 3


def digest(mapping: dict) -> str:
    """A short fingerprint of a plan's choices or a database's decisions, for comparing ranks."""
    return hashlib.sha256(json.dumps(mapping, sort_keys=True).encode()).hexdigest()[:16]


def rank_summary(report: dict) -> dict:
    """What the result keeps of one rank's report: times, counts and fingerprints, not the picks."""
    kept = {"device": report.get("device"), "seconds": report.get("seconds"), "tuner": report.get("tuner"),
            "coordinator": report.get("coordinator"), "warnings": report.get("warnings", [])}
    for field in ("plan", "decisions"):
        if field in report:
            kept[field] = {"entries": len(report[field]), "digest": digest(report[field])}
    return kept


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(mode: str, ranks: int, network: str, db_root: Path, timeout_s: float) -> dict:
    """Starts one job of ``ranks`` processes, rank r on GPU r, and returns each rank's summary (or
    its exit status and last output where it wrote no report) and the job's wall time."""
    out = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=db_root.parent))
    port = free_port()
    started = time.monotonic()
    procs = []
    for rank in range(ranks):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank), JOB_DB_ROOT=str(db_root), JOB_BACKEND="nccl")
        procs.append(subprocess.Popen([sys.executable, str(JOB), mode, str(out), network], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = started + timeout_s
    results: dict[str, dict] = {}
    for rank, proc in enumerate(procs):
        try:
            output = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0] + f"\n(killed after {timeout_s:.0f} s)"
        path = out / f"rank{rank}.json"
        results[str(rank)] = (rank_summary(json.loads(path.read_text())) if path.exists() else
                              {"exit": proc.returncode, "output": output[-2000:]})
    return {"wall_s": time.monotonic() - started, "ranks": results}


def rank_counts(max_gpus: int) -> list[int]:
    """1 and every power of two up to ``max_gpus``, and ``max_gpus`` itself."""
    counts, n = [1], 2
    while n <= max_gpus:
        counts.append(n)
        n *= 2
    return sorted(set(counts + [max_gpus]))


def measure(network: str, counts: list[int], timeout_s: float, work: Path) -> dict:
    """Every mode's job at every rank count, each on databases of its own (the second on the first's)."""
    runs: dict[str, dict] = {}
    for n in counts:
        run: dict[str, dict] = {}
        # (label, the job's mode, whose databases): the second job reuses the first's.
        jobs = [("tune", "tune", "tune"), ("second", "tune", "tune"), ("fly", "fly", "fly")]
        if n >= 2:
            jobs.append(("kill", "kill", "kill"))
        for label, mode, databases in jobs:
            db = work / f"n{n}-{databases}" / "db"
            db.mkdir(parents=True, exist_ok=True)
            progress(f"{n} rank(s): {label}")
            run[label] = run_job(mode, n, network, db, timeout_s)
        runs[str(n)] = run
    return runs


# ------------------------------------------------------------------------------- the tables


def reported(job: dict | None) -> list[dict]:
    """The ranks of a job that wrote a report, in rank order."""
    if not job:
        return []
    return [r for _, r in sorted(job["ranks"].items(), key=lambda item: int(item[0])) if "seconds" in r]


def identical(ranks: list[dict], field: str) -> bool | None:
    digests = {(r.get(field) or {}).get("digest") for r in ranks}
    return None if not ranks else len(digests) == 1 and None not in digests


def slowest(ranks: list[dict]) -> float | None:
    return max((r["seconds"] for r in ranks), default=None)


def tune_row(n: int, run: dict, alone_s: float | None) -> dict:
    """One rank count's tune() job: the job's time, each rank's share, the checks."""
    ranks = reported(run.get("tune"))
    configurations = ranks[0]["plan"]["entries"] if ranks else None
    tuned = [r["tuner"]["tuned"] for r in ranks]
    seconds = slowest(ranks)
    complete = len(ranks) == n
    return {"ranks": n, "complete": complete, "seconds": seconds, "configurations": configurations,
            "tuned_per_rank": tuned, "tuned_twice": sum(tuned) - configurations if complete else None,
            "identical": identical(ranks, "plan") if complete else False,
            "speedup": alone_s / seconds if alone_s and seconds else None,
            "overhead_s": seconds - alone_s / n if alone_s and seconds else None}


def summarize(report: dict) -> dict:
    """Per rank count: the tune row against one rank alone, the second job, fly and kill."""
    runs = report["runs"]
    alone = reported(runs.get("1", {}).get("tune"))
    alone_s = slowest(alone) if len(alone) == 1 else None
    rows = []
    for key in sorted(runs, key=int):
        n, run = int(key), runs[key]
        row = {"tune": tune_row(n, run, alone_s)}
        second = reported(run.get("second"))
        row["second"] = {"complete": len(second) == n, "seconds": slowest(second),
                         "tuned_per_rank": [r["tuner"]["tuned"] for r in second],
                         "same_plan": identical(reported(run.get("tune")) + second, "plan")}
        fly = reported(run.get("fly"))
        decided = [r["tuner"]["tuned"] + r["tuner"]["borrowed"] for r in fly]
        entries = fly[0]["decisions"]["entries"] if fly else None
        row["fly"] = {"complete": len(fly) == n, "seconds": slowest(fly), "decided_per_rank": decided,
                      "configurations": entries, "identical": identical(fly, "decisions"),
                      "decided_twice": sum(decided) - entries if len(fly) == n else None}
        if "kill" in run:
            killed = run["kill"]["ranks"].get(str(KILLED_RANK), {})
            survivors = reported(run["kill"])
            row["kill"] = {"killed_exit": killed.get("exit"), "survivors": len(survivors),
                           "seconds": slowest(survivors), "wall_s": run["kill"]["wall_s"],
                           "given_up": [r["coordinator"]["given_up"] for r in survivors],
                           "identical": identical(survivors, "plan")}
        rows.append(row)
    return {"alone_s": alone_s, "rows": rows}


def _yes(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "**no**")


def _list(values: list) -> str:
    return " / ".join(str(v) for v in values) if values else "—"


def render(report: dict) -> str:
    env = report["environment"]
    summary = summarize(report)
    lines = ["# Tuning through torch.distributed on several GPUs", "",
             f"{env.get('device')} x {report['gpus']}, torch {env.get('torch')}, cuDNN {env.get('cudnn')}, "
             f"{report['date']}. Network: {report['network']}. Command: `{report['command']}`.", "",
             "## tune() on N ranks against one rank alone", "",
             "The job's time is its slowest rank's, from the barrier before tuning to the plan. *overhead* is "
             "that time less one rank's alone divided by N (the target: at most 1/N of one rank's time plus "
             "a bounded overhead).", "",
             "| ranks | configurations | tuned per rank | tuned twice | identical plans | seconds | one rank's / N ranks' | "
             "overhead s |", "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for row in summary["rows"]:
        t = row["tune"]
        lines.append(f"| {t['ranks']} | {num(t['configurations'], 0)} | {_list(t['tuned_per_rank'])} | "
                     f"{num(t['tuned_twice'], 0)} | {_yes(t['identical'])} | {num(t['seconds'], 1)} | "
                     f"{num(t['speedup'], 2)} | {num(t['overhead_s'], 1)} |")
    lines += ["", "## A second job on the same databases", "",
              "| ranks | tuned per rank | same plan as the first job | seconds |", "|--:|--:|--:|--:|"]
    for row in summary["rows"]:
        s = row["second"]
        lines.append(f"| {row['tune']['ranks']} | {_list(s['tuned_per_rank'])} | {_yes(s['same_plan'])} | "
                     f"{num(s['seconds'], 1)} |")
    lines += ["", '## "fastest" on the fly: three DDP training steps', "",
              "*decided per rank* counts the configurations a rank tuned or borrowed from a nearby size; "
              "the others it took from the rank that decided them.", "",
              "| ranks | configurations | decided per rank | decided twice | identical decisions | seconds |",
              "|--:|--:|--:|--:|--:|--:|"]
    for row in summary["rows"]:
        f = row["fly"]
        lines.append(f"| {row['tune']['ranks']} | {num(f['configurations'], 0)} | {_list(f['decided_per_rank'])} | "
                     f"{num(f['decided_twice'], 0)} | {_yes(f['identical'])} | {num(f['seconds'], 1)} |")
    killed = [row for row in summary["rows"] if "kill" in row]
    if killed:
        lines += ["", f"## Rank {KILLED_RANK} killed while tuning", "",
                  f"Rank {KILLED_RANK} exits (status {KILLED_STATUS}) when about to publish its third decision; "
                  "the others wait for its claims 5 s, then take them over. *given up* counts, per survivor, "
                  "the ranks it took for dead.", "",
                  "| ranks | killed rank's exit | survivors | given up | identical plans | survivors' seconds | "
                  "job wall s |", "|--:|--:|--:|--:|--:|--:|--:|"]
        for row in killed:
            k = row["kill"]
            lines.append(f"| {row['tune']['ranks']} | {k['killed_exit']} | {k['survivors']} | {_list(k['given_up'])} | "
                         f"{_yes(k['identical'])} | {num(k['seconds'], 1)} | {num(k['wall_s'], 1)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--network", default="mobilenet_v3_large", choices=NETWORKS)
    parser.add_argument("--ranks", help="comma-separated rank counts (default: 1 and powers of two up to the GPUs)")
    parser.add_argument("--job-timeout", type=float, default=600.0, help="seconds a job may take")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    import torch

    set_progress_label("distributed")
    gpus = torch.cuda.device_count()
    try:
        counts = sorted({int(n) for n in args.ranks.split(",")}) if args.ranks else rank_counts(gpus)
    except ValueError:
        parser.error(f"--ranks {args.ranks!r}: give rank counts separated by commas, e.g. 1,2")
    if not gpus or max(counts) > gpus or min(counts) < 1:
        parser.error(f"--ranks {args.ranks}: each count must be 1 to the {gpus} GPU(s) this machine has")
    report = {"date": now_iso(), "environment": environment(), "gpus": gpus, "network": args.network,
              "command": "python benchmarks/distributed.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    with tempfile.TemporaryDirectory(prefix="tca-distributed-") as work:
        report["runs"] = measure(args.network, counts, args.job_timeout, Path(work))
    stem = args.out / f"distributed-{device_slug(report['environment']['device'])}x{gpus}-{report['date'][:10]}"
    write_json(stem.with_suffix(".json"), report)
    publish(stem.with_suffix(".md"), render(report))
    return 0
