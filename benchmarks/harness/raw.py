"""The zoo's raw files and their merge: every measurement lands in
``<out>/raw/zoo/<network>.<part>.json`` as soon as it is measured (parts: setup, eager, host, gpu,
first_step, names_first_step, benchmark), so runs split over several commands accumulate; a part
that failed holds ``{"error": ...}``. :func:`merge` turns the raw files of the latest run's GPU into
the result ``zoo-<gpu>-<date>.json``: per network, the headline fields first, then the detail. Bulk
that no table shows stays in the raw files: each round's times (the result keeps their ratios'
median, min, max and rounds), the host time per profiled op, and every part's loop settings but
the main child's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .config import EAGER_COMPARED, EAGER_MODES, REPORTED_MODES, Settings
from .networks import ZOO
from .results import nested, now_iso, progress, write_json
from .stats import ratio

def raw_dir(out: Path) -> Path:
    return out / "raw" / "zoo"


def raw_path(out: Path, network: str, part: str) -> Path:
    return raw_dir(out) / f"{network}.{part}.json"


def write_raw(settings: Settings, network: str, part: str, data: dict, environment: dict | None) -> None:
    record = {"network": network, "part": part, "measured": now_iso(), "environment": environment,
              "settings": settings.loops(), **data}
    write_json(raw_path(settings.out, network, part), record)


def load_raw(out: Path) -> list[dict]:
    records = []
    for path in sorted(raw_dir(out).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            progress(f"merge: skipping unreadable {path}: {exc}")
            continue
        if isinstance(record, dict) and isinstance(record.get("network"), str) and isinstance(record.get("part"), str):
            records.append(record)
        else:
            progress(f"merge: skipping {path}: not a zoo raw file")
    return records


def _ok(record: dict | None) -> dict | None:
    return record if record is not None and "error" not in record else None


def network_entry(name: str, parts: dict[str, dict]) -> dict:
    """One network of the result: the headline fields first (None where not measured), then the detail."""
    setup, eager, host = _ok(parts.get("setup")), _ok(parts.get("eager")), _ok(parts.get("host"))
    gpu, first, bench = _ok(parts.get("gpu")), _ok(parts.get("first_step")), _ok(parts.get("benchmark"))
    gpu_ms = {"heuristics": nested(gpu, "median_ms", "heuristics"),
              "benchmark": nested(bench, "gpu", "median_ms", "benchmark"),
              "fastest": nested(gpu, "median_ms", "fastest")}
    names = _ok(parts.get("names_first_step"))
    fastest_runs = {"first": _ok(parts.get("fastest_first_run")), "second": _ok(parts.get("fastest_second_run"))}
    first_step = {"stock": nested(setup, "first_step_s"), "plan": nested(first, "first_step_s")}
    entry: dict[str, Any] = {
        "name": name,
        "gpu_ms": gpu_ms,
        "eager_ms": {mode: nested(eager, "median_ms", mode) for mode in REPORTED_MODES},
        "host_us_per_conv_call": {mode: nested(host, "median_us_per_call", mode) for mode in ("stock", "plan")},
        "tune_s": nested(setup, "tune_s"),
        "benchmark_search_s": nested(bench, "benchmark_search_s"),
        "first_step_s": first_step,
    }
    notes: list[str] = []
    entry.update({
        "kinds": sorted(ZOO[name].kinds) if name in ZOO else None,
        "eager_control_ms": nested(eager, "median_ms", "control"),
        "eager_ratio": {mode: nested(eager, "ratio", mode) for mode in EAGER_COMPARED},
        "eager_cpu_ms": {mode: nested(eager, "cpu_median_ms", mode) for mode in EAGER_MODES},
        "eager_cpu_ratio": {mode: nested(eager, "cpu_ratio", mode) for mode in EAGER_COMPARED},
        "host_us_per_conv_call_fastest": nested(host, "median_us_per_call", "fastest"),
        "host_ratio": {mode: nested(host, "ratio", mode) for mode in EAGER_COMPARED},
        "host_conv_calls_per_step": nested(host, "conv_calls_per_step"),
        # The same calls with the GPU drained before every conv module: no call waits for a free
        # launch slot, which a GPU-bound step charges to whichever op launches.
        "host_us_per_conv_call_gpu_drained": {mode: nested(host, "drained_median_us_per_call", mode)
                                              for mode in ("stock", "plan", "fastest")},
        "host_ratio_gpu_drained": {mode: nested(host, "drained_ratio", mode) for mode in EAGER_COMPARED},
        "gpu_speedup_fastest": {"vs_heuristics": ratio(gpu_ms["heuristics"], gpu_ms["fastest"]),
                                "vs_benchmark": ratio(gpu_ms["benchmark"], gpu_ms["fastest"]),
                                "vs_heuristics_per_repeat": nested(gpu, "ratio", "fastest")},
        # The tuned plan against stock's benchmark picks in the benchmark child, interleaved: the
        # comparison that cross-process clock drift does not blur (vs_benchmark above is across
        # processes).
        "gpu_ms_plan_in_benchmark_process": nested(bench, "gpu", "median_ms", "plan"),
        "gpu_speedup_plan_vs_benchmark_same_process": nested(bench, "gpu", "ratio", "plan"),
        "benchmark_process_plan_pinned_runs_per_step": nested(bench, "plan_pinned_runs_per_step"),
        "gpu_method": {"heuristics": nested(gpu, "method", "heuristics"),
                       "benchmark": nested(bench, "gpu", "method", "benchmark"),
                       "fastest": nested(gpu, "method", "fastest")},
        "energy_j_per_step": {"heuristics": nested(gpu, "energy_j_per_step", "heuristics"),
                              "benchmark": nested(bench, "gpu", "energy_j_per_step", "benchmark"),
                              "fastest": nested(gpu, "energy_j_per_step", "fastest")},
        "tune_over_benchmark_search": ratio(entry["tune_s"], entry["benchmark_search_s"]),
        "first_step_plan_over_stock": ratio(first_step["plan"], first_step["stock"]),
        # Choices without their execution plans: heuristics skipped, every execution plan built (compiled).
        "first_step_plan_names_s": nested(names, "first_step_s"),
        "first_step_plan_build_counts": {"plan": nested(first, "plan_build_counts"),
                                         "plan_names": nested(names, "plan_build_counts")},
        # "fastest" from the environment, twice on one tuning database: what the second run's first
        # step costs against stock's, and what it tuned and built (the database should hold it all).
        "fastest_runs": {run: None if record is None else {
            key: record.get(key) for key in ("first_step_s", "second_step_s", "tuned", "tuned_first_step",
                                             "kept", "execution_plans", "tuning_db_entries",
                                             "tuning_db_bytes")} for run, record in fastest_runs.items()},
        "fastest_second_run_first_step_over_stock": ratio(nested(fastest_runs["second"], "first_step_s"),
                                                          first_step["stock"]),
        "benchmark_second_step_s": nested(bench, "second_step_s"),
        "fastest_policy_tuning_s": nested(setup, "modes", "fastest", "tuning_s"),
        "plan_file_bytes": nested(setup, "plan_file_bytes"),
        "plan_entries": nested(setup, "plan_entries"),
        "plan_non_stock_entries": nested(setup, "plan_non_stock_entries"),
        "plan_execution_plans": nested(setup, "plan_execution_plans"),
        "pinned_runs_per_step": {mode: nested(setup, "modes", mode, "pinned_runs_per_step") for mode in EAGER_MODES},
        "plan_first_step_runs": {key: nested(first, key) for key in ("plan_applied_by", "plan_entries_run",
                                                                   "plan_runs_first_step", "pinned_runs_first_step")},
        "workload": nested(setup, "workload") or nested(bench, "workload") or nested(first, "workload"),
        # The main child's (its knob_search is the plan's and "fastest"'s); a part merged from another
        # run may have had others, which its raw file keeps, and each ratio above records its rounds.
        "loops": {"setup": nested(parts.get("setup"), "settings")},
        "measured": {part: record.get("measured") for part, record in parts.items()},
        "errors": {part: record["error"] for part, record in parts.items() if "error" in record},
    })
    for part, record in parts.items():
        for label, text in (nested(record, "errors") or nested(record, "gpu", "errors") or {}).items():
            notes.append(f"{part} {label}: {text}")
    quick = [part for part, record in parts.items() if nested(record, "settings", "quick") and "error" not in record]
    if quick:
        notes.append(f"measured with --quick (a smoke run, not a measurement): {', '.join(quick)}")
    tuned_in_rounds = nested(eager, "configs_tuned_in_rounds")
    if tuned_in_rounds:
        notes.append(f'eager: "fastest" tuned {tuned_in_rounds} configurations during the timed rounds')
    entry["notes"] = notes
    return entry


def merge(out: Path) -> dict | None:
    """The result of every raw file under ``out`` measured on the latest run's GPU (another GPU's
    numbers are left out, named on stderr); None where there is none."""
    records = load_raw(out)
    measured = [r for r in records if nested(r, "environment", "device")]
    if not measured:
        return None
    latest = max(measured, key=lambda r: r.get("measured") or "")
    device = latest["environment"]["device"]
    parts: dict[str, dict[str, dict]] = {}
    for record in records:
        other = nested(record, "environment", "device")
        if other not in (None, device):
            progress(f"merge: leaving out {record['network']}.{record['part']}, measured on {other}, not {device}")
            continue
        parts.setdefault(record["network"], {})[record["part"]] = record
    order = [name for name in ZOO if name in parts] + sorted(name for name in parts if name not in ZOO)
    date = max(r.get("measured") or "" for r in measured if r["environment"]["device"] == device)[:10]
    environment = latest["environment"]
    return {"device": device, "torch": environment.get("torch"), "cudnn": environment.get("cudnn"), "date": date,
            "own_kernels": environment.get("own_kernels", False),
            "networks": [network_entry(name, parts[name]) for name in order]}
