"""summary.json: what the job found, per run, with the regressions classified; and
summary.md, the same as markdown (also printed on stdout).

Written after the parallel phase and after every re-run (so that a job cut short
still leaves one), and once more when the job ends.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from collections.abc import Mapping
from pathlib import Path

from .classification import classify, rerun_candidates
from .outcomes import FAILED, FAILING, PASSED, SKIPPED, RunResult, TestResult, count_outcomes
from .settings import Config, Setting

RAW_URL = "https://raw.githubusercontent.com/pytorch/pytorch/{commit}/test/nn/test_convolution.py"


@dataclasses.dataclass
class JobResults:
    """What the job has found so far."""

    torch_info: dict  # from the preflight; empty with --no-preflight
    parallel: dict[str, RunResult]  # by run name ("stock", then each setting's)
    stock_final: dict[str, TestResult]  # stock's parallel results, re-run results in place
    stock_rerun: dict  # {"tests": N, "passed_alone": [...], "still_failing": [...]}
    alone: dict[str, RunResult]  # each setting's re-run, by setting name, once done
    large: dict[str, RunResult] = dataclasses.field(default_factory=dict)  # large-tensor runs, by run name


def _json_float(value: float | None) -> float | str | None:
    """JSON has no inf or nan: those become text."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


def regression_entry(nodeid: str, result: TestResult, parallel_outcome: str, repro: str = "") -> dict:
    c = classify(result)
    return {
        "test": nodeid,
        "class": c.cls,
        "label": c.label,
        "kind": c.kind,
        "detail": c.detail,
        "max_abs": _json_float(c.max_abs),
        "max_rel": _json_float(c.max_rel),
        "parallel_outcome": parallel_outcome,
        "alone_outcome": result.outcome,
        "repro": repro,
    }


def repro_command(config: Config, setting: Setting | None, nodeid: str) -> str:
    """A shell command that runs the one test under the setting."""
    env = setting.env_vars(config.strict) if setting else {}
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"cd {shlex.quote(str(config.rootdir))} && {prefix + ' ' if prefix else ''}" \
           f"{shlex.quote(config.python)} -m pytest -p no:cacheprovider {shlex.quote(nodeid)}"


def build_summary(config: Config, found: JobResults, phase: str, elapsed: float) -> dict:
    """The summary.json content. ``phase``: "parallel" (nothing re-run yet), "rerun"
    (some settings re-run), "final". Regressions not yet re-run alone carry
    ``"confirmed": false``; the exit status is set only when final."""
    runs_json = [_run_json(config, found.parallel["stock"], None, [], [], 0)]
    totals = {"candidates": 0, "confirmed": 0, "cleared": 0}
    for setting in config.settings:
        alone = found.alone.get(setting.name)
        entry = _setting_json(config, found.parallel[setting.name], setting, found.stock_final, alone)
        runs_json.append(entry)
        if alone is not None:
            totals["candidates"] += entry["rerun_candidates"]
            totals["confirmed"] += sum(1 for r in entry["regressions"] if r["test"] != "(run)")
            totals["cleared"] += len(entry["cleared"])
    for entry in runs_json:  # the large-tensor tests ran in a process of their own
        large = found.large.get(entry["setting"])
        entry["large_duration"] = round(large.duration, 1) if large is not None else None
    ours = any(r["class"] == "ours" for run in runs_json for r in run["regressions"])
    git_version = found.torch_info.get("git_version")
    return {
        "phase": phase,
        "file": str(config.file),
        "k": config.k,
        "python": config.python,
        "jobs": config.jobs,
        "strict": config.strict,
        "timeout": config.timeout,
        "test_timeout": config.test_timeout,
        "torch": dict(found.torch_info) or None,
        "test_file_url": RAW_URL.format(commit=git_version) if git_version else None,
        "elapsed": round(elapsed, 1),
        "runs": runs_json,
        "stock_rerun": dict(found.stock_rerun),
        "rerun": totals,
        "exit_status": (1 if ours else 0) if phase == "final" else None,
    }


def _setting_json(config: Config, run: RunResult, setting: Setting, stock_final: Mapping[str, TestResult],
                  alone: RunResult | None) -> dict:
    candidates = rerun_candidates(stock_final, run.results)
    regressions, cleared = [], []
    for t in candidates:
        first = run.results[t].outcome
        if alone is None:  # not re-run yet: the parallel failure, unconfirmed
            if first in FAILING:
                regressions.append(regression_entry(t, run.results[t], first, repro_command(config, setting, t)))
                regressions[-1]["confirmed"] = False
            continue
        r = alone.results.get(t)
        if r is not None and r.outcome in FAILING:
            regressions.append(regression_entry(t, r, first, repro_command(config, setting, t)))
            regressions[-1]["confirmed"] = True
        elif first in FAILING:
            cleared.append(t)
    if run.run_error and not run.results:
        regressions.append({
            "test": "(run)", "class": "ours", "label": "ours: run failed", "kind": "run",
            "detail": run.run_error, "max_abs": None, "max_rel": None, "parallel_outcome": "",
            "alone_outcome": "", "repro": "", "confirmed": True,
        })
    failed_both = sum(1 for t, r in run.results.items()
                      if r.outcome in FAILING and t in stock_final and stock_final[t].outcome in FAILING)
    entry = _run_json(config, run, setting, regressions, cleared, failed_both)
    entry["rerun_candidates"] = len(candidates)
    entry["rerun_duration"] = round(alone.duration, 1) if alone is not None else None
    return entry


def _run_json(config: Config, run: RunResult, setting: Setting | None, regressions: list, cleared: list,
              failed_both: int) -> dict:
    counts = count_outcomes(run.results)
    return {
        "setting": run.name,
        "env": setting.env_vars(config.strict) if setting else {},
        "pins": setting.describe() if setting else "",
        "passed": counts[PASSED],
        "failed": counts[FAILED],
        "skipped": counts[SKIPPED],
        "errors": counts["errors"],
        "crashed": counts["crashed"],
        "duration": round(run.duration, 1),
        "attempts": len(run.attempts),
        "run_error": run.run_error,
        "failed_both": failed_both,
        "regressions": regressions,
        "cleared": cleared,
    }


def write_summary(out: Path, summary: Mapping) -> str:
    """Writes summary.json and summary.md into ``out``, each atomically (a reader never
    sees half a file); returns the markdown."""
    markdown = render_markdown(summary)
    for name, text in (("summary.json", json.dumps(summary, indent=2) + "\n"), ("summary.md", markdown)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)
    return markdown


# --------------------------------------------------------------------------- summary.md

def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short_test(nodeid: str) -> str:
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def render_markdown(summary: Mapping) -> str:
    """The summary (the dict written to summary.json) as markdown."""
    out = ["# PyTorch's tests under pinned cuDNN algorithms", ""]
    torch_info = summary.get("torch") or {}
    facts = [f"file `{summary.get('file', '?')}`", f"`-k {summary.get('k') or ''}`"]
    if torch_info.get("version"):
        facts.append(f"torch {torch_info['version']} (git {str(torch_info.get('git_version') or '?')[:12]})")
    if torch_info.get("device"):
        facts.append(str(torch_info["device"]))
    facts.append(f"{summary.get('jobs', '?')} runs in parallel")
    facts.append("strict" if summary.get("strict") else "not strict")
    if summary.get("elapsed") is not None:
        facts.append(f"{summary['elapsed']:.0f} s in all")
    out += [", ".join(facts) + ".", ""]
    if summary.get("phase") not in (None, "final"):
        out += ["**Preliminary**: the job has not finished; regressions marked *unconfirmed* have not been "
                "re-run alone yet.", ""]
    out.append("| setting | pins | passed | failed | skipped | errors | crashed | ours | numerics | cleared | time |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in summary.get("runs", []):
        regressions = run.get("regressions", [])
        is_stock = run["setting"] == "stock"
        ours = sum(1 for r in regressions if r["class"] == "ours")
        numerics = sum(1 for r in regressions if r["class"] == "numerics")
        row = [
            run["setting"],
            run.get("pins") or "-",
            run.get("passed", 0),
            run.get("failed", 0),
            run.get("skipped", 0),
            run.get("errors", 0),
            run.get("crashed", 0),
            "-" if is_stock else ours,
            "-" if is_stock else numerics,
            "-" if is_stock else len(run.get("cleared", [])),
            f"{run.get('duration', 0.0):.1f} s"
            + (f" + {run['large_duration']:.1f} s" if run.get("large_duration") is not None else ""),
        ]
        out.append("| " + " | ".join(_cell(x) for x in row) + " |")
    out += [
        "",
        "Counts are the parallel runs', the large-tensor tests' results (run alone, after them) "
        "in place; *time*: the parallel run's, + the large-tensor run's. *ours* and *numerics* "
        "count the tests that pass stock and fail under the setting, confirmed by a re-run alone on "
        "the GPU; *cleared* failed in the parallel run and passed alone.",
    ]
    run_errors = [(run["setting"], run["run_error"]) for run in summary.get("runs", []) if run.get("run_error")]
    if run_errors:
        out += ["", "Runs that did not finish normally:", ""]
        out += [f"- {_cell(name)}: {_cell(err)}" for name, err in run_errors]
    stock = summary.get("stock_rerun") or {}
    if stock.get("tests"):
        out += [
            "",
            f"Stock failures re-run alone: {stock['tests']}; passed alone: {len(stock.get('passed_alone', []))}, "
            f"still failing: {len(stock.get('still_failing', []))}.",
        ]
        for item in stock.get("still_failing", []):
            test, label, detail = _cell(_short_test(item["test"])), _cell(item["label"]), _cell(item["detail"])
            out.append(f"- stock fails: `{test}`: {label}: {detail}")
    rerun = summary.get("rerun") or {}
    if rerun:
        out += [
            "",
            f"Re-run alone: {rerun.get('candidates', 0)} tests that passed stock and failed or skipped "
            f"under a setting in parallel; {rerun.get('confirmed', 0)} failed again (confirmed), "
            f"{rerun.get('cleared', 0)} failed in parallel and passed alone (cleared).",
        ]
    rows = [(run["setting"], reg) for run in summary.get("runs", []) for reg in run.get("regressions", [])]
    out += ["", "## Regressions: pass stock, fail under the setting", ""]
    if rows:
        out += ["| setting | test | class | detail |", "|---|---|---|---|"]
        for name, reg in rows:
            test, label, detail = _cell(_short_test(reg["test"])), _cell(reg["label"]), _cell(reg["detail"])
            if reg.get("confirmed") is False:
                label += " (unconfirmed)"
            out.append(f"| {_cell(name)} | `{test}` | {label} | {detail} |")
    else:
        out.append("None.")
    cleared = [(run["setting"], t) for run in summary.get("runs", []) for t in run.get("cleared", [])]
    if cleared:
        out += ["", "Cleared by the re-run alone (failed only while runs shared the GPU):", ""]
        out += [f"- {_cell(name)}: `{_cell(_short_test(t))}`" for name, t in cleared]
    status = summary.get("exit_status")
    if status is not None:
        verdict = "no failure classified ours." if status == 0 else "failures classified ours."
        out += ["", f"Exit status {status}: {verdict}"]
    return "\n".join(out) + "\n"
