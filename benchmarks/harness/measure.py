"""The zoo's child processes, each a fresh process on the GPU: first steps and stock's
``benchmark=True`` are only meaningful in a process that ran nothing before.

- ``main``: the first step with stock heuristics, ``tune()`` (the plan saved to a file), one
  untimed warm-up of every mode (where ``"fastest"`` tunes), then the ``eager``, ``host`` and
  ``gpu`` sections;
- ``plan_first_step``: ``TORCH_CUDNN_ALGO_PLAN=<that file>``, the first step, and the execution
  plans built and deserialized in it;
- ``names_first_step``: the same plan with its execution plans left out (choices only), the
  first step: what the heuristics cost (stock - choices) and what building the chosen execution
  plans costs (choices - plan);
- ``benchmark``: ``torch.backends.cudnn.benchmark = True`` from the start, the first step (the
  search), then the step's GPU time by CUDA-graph replay of stock's picks and of the tuned plan,
  interleaved in this one process. Stock's cache of choices is shared between heuristic and
  benchmark mode, so this must be a process that never ran heuristics.

Each child writes its raw files and prints one result line (``CHILD_RESULT_PREFIX`` + JSON).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

import torch_cudnn_algo

from .config import CHILD_RESULT_PREFIX, EAGER_COMPARED, EAGER_MODES, MAIN_SECTIONS, MODE_WARMUP_STEPS, \
    PLAN_ENV_VAR, TUNING_DB_ENV_VAR, UNTIMED_STEPS_AFTER_SWITCH, WARMUP_STEPS, Settings, names_plan_path
from .internal import decision_counts
from .networks import Trainer, build_trainer, loss_of
from .raw import write_raw
from .results import environment, error_text, finite, progress, set_progress_label
from .stats import median, num, ratio_summary, rotated
from .timing import DEVICE, capture_trainer_step, energy_j_per_step, events_ms, gpu_drained_before_convs, \
    profile_conv_host, replay_ms, step_seconds, steps_wall_cpu_ms, warm_up_cuda


@contextlib.contextmanager
def applied(mode: str, plan: torch_cudnn_algo.Plan | None) -> Iterator[None]:
    """A mode: "stock" and "control" (no plan, flags None), "plan" (the tuned plan in use, flags
    None) or "fastest" (no plan, all three flags "fastest"); the previous state comes back on exit."""
    policy = "fastest" if mode == "fastest" else None  # "control" is stock again
    flags = dict.fromkeys((d.flag for d in torch_cudnn_algo.DIRECTIONS.values()), policy)
    with torch_cudnn_algo.use_plan(plan if mode == "plan" else None), torch_cudnn_algo.flags(**flags):
        yield


def pinned_runs_since(before: dict[str, int]) -> dict[str, int]:
    """How many calls per direction ran a pinned choice of ours since ``before`` (an earlier
    ``pinned_run_counts()``): tells "ours ran" from "stock ran" (refused or never met)."""
    after = torch_cudnn_algo.diagnostics.pinned_run_counts()
    return {direction: after[direction] - before[direction] for direction in after}


def warm_up_modes(trainer: Trainer, plan: torch_cudnn_algo.Plan) -> dict:
    """One untimed pass of every mode before any timing: "fastest" tunes on its first step here,
    and every mode's execution plans are built."""
    results = {}
    for mode in EAGER_MODES:
        tuned_before = len(torch_cudnn_algo.diagnostics.tuning_log())
        if mode == "fastest":
            # "fastest" tunes its first step, as a first run on a machine would: not from the
            # decisions tune() just kept in the tuning database.
            os.environ["TORCH_CUDNN_ALGO_DB"] = tempfile.mkdtemp(prefix="zoo-fastest-db-")
        started = time.perf_counter()
        with applied(mode, plan):
            for _ in range(MODE_WARMUP_STEPS - 1):
                trainer.step()
            torch.cuda.synchronize()
            before = torch_cudnn_algo.diagnostics.pinned_run_counts()
            trainer.step()
            torch.cuda.synchronize()
            runs = pinned_runs_since(before)
        log = torch_cudnn_algo.diagnostics.tuning_log()[tuned_before:]
        results[mode] = {"warmup_s": time.perf_counter() - started, "pinned_runs_per_step": runs,
                         "configs_tuned": len(log),
                         "tuning_s": sum(float(entry.get("seconds") or 0.0) for entry in log) if log else None}
        progress(f"warm-up {mode}: {results[mode]['warmup_s']:.2f} s, {len(log)} configurations tuned, "
                 f"pinned runs per step {runs}")
    return results


def measure_eager(trainer: Trainer, plan: torch_cudnn_algo.Plan, settings: Settings) -> dict:
    """Wall ms per step, modes in rotated order per round, ``UNTIMED_STEPS_AFTER_SWITCH`` untimed
    steps after each switch (a switch re-registers the overrides and the plan)."""
    tuned_before = len(torch_cudnn_algo.diagnostics.tuning_log())
    rounds: dict[str, list[float]] = {mode: [] for mode in EAGER_MODES}
    cpu_rounds: dict[str, list[float]] = {mode: [] for mode in EAGER_MODES}
    orders = []
    for index in range(settings.rounds):
        order = rotated(EAGER_MODES, index)
        orders.append(order)
        for mode in order:
            with applied(mode, plan):
                for _ in range(UNTIMED_STEPS_AFTER_SWITCH):
                    trainer.step()
                wall_ms, cpu_ms = steps_wall_cpu_ms(trainer, settings.steps)
                rounds[mode].append(wall_ms)
                cpu_rounds[mode].append(cpu_ms)
        progress(f"eager round {index + 1}/{settings.rounds}: "
                 + ", ".join(f"{mode} {rounds[mode][-1]:.2f} ms" for mode in EAGER_MODES))
    return {"rounds_ms": rounds, "orders": orders,
            "median_ms": {mode: median(values) for mode, values in rounds.items()},
            "ratio": {mode: ratio_summary(rounds["stock"], rounds[mode]) for mode in EAGER_COMPARED},
            "cpu_rounds_ms": cpu_rounds,
            "cpu_median_ms": {mode: median(values) for mode, values in cpu_rounds.items()},
            "cpu_ratio": {mode: ratio_summary(cpu_rounds["stock"], cpu_rounds[mode]) for mode in EAGER_COMPARED},
            "configs_tuned_in_rounds": len(torch_cudnn_algo.diagnostics.tuning_log()) - tuned_before}


def measure_host(trainer: Trainer, plan: torch_cudnn_algo.Plan, settings: Settings) -> dict:
    """Host CPU time per conv op call, modes rotated per round, as the step runs (``rounds_us``)
    and with the GPU drained before every conv module (``drained_rounds_us``)."""
    modes = EAGER_MODES
    with applied("stock", plan):
        profile_conv_host(trainer, 1)  # the profiler's first use pays for its set-up: in no round
    rounds: dict[str, list[float | None]] = {mode: [] for mode in modes}
    drained: dict[str, list[float | None]] = {mode: [] for mode in modes}
    calls: dict[str, list[float]] = {mode: [] for mode in modes}
    ops: dict[str, dict] = {}
    drained_ops: dict[str, dict] = {}
    for index in range(settings.host_rounds):
        for mode in rotated(modes, index):
            with applied(mode, plan):
                for _ in range(UNTIMED_STEPS_AFTER_SWITCH):
                    trainer.step()
                result = profile_conv_host(trainer, settings.steps)
                with gpu_drained_before_convs(trainer.model):
                    trainer.step()  # untimed: the hooks' first run
                    drained_result = profile_conv_host(trainer, settings.steps)
            rounds[mode].append(result["us_per_call"])
            drained[mode].append(drained_result["us_per_call"])
            calls[mode].append(result["calls_per_step"])
            ops[mode] = result["ops"]
            drained_ops[mode] = drained_result["ops"]
        progress(f"host round {index + 1}/{settings.host_rounds}: "
                 + ", ".join(f"{mode} {num(rounds[mode][-1], 1)} (drained {num(drained[mode][-1], 1)}) µs/call"
                             for mode in modes))
    return {"rounds_us": rounds, "median_us_per_call": {mode: median(values) for mode, values in rounds.items()},
            "ratio": {mode: ratio_summary(rounds["stock"], rounds[mode]) for mode in EAGER_COMPARED},
            "drained_rounds_us": drained,
            "drained_median_us_per_call": {mode: median(values) for mode, values in drained.items()},
            "drained_ratio": {mode: ratio_summary(drained["stock"], drained[mode]) for mode in EAGER_COMPARED},
            "conv_calls_per_step": {mode: median(values) for mode, values in calls.items()},
            "ops": ops, "drained_ops": drained_ops}


def measure_gpu(trainer: Trainer, modes: dict[str, Callable[[], contextlib.AbstractContextManager]],
                settings: Settings) -> dict:
    """GPU ms per step of each mode: a CUDA graph of the step per mode, replayed ``gpu_replays``
    times between CUDA events, ``gpu_repeats`` times in rotated order; median. A mode whose capture
    fails is timed by CUDA events around eager steps instead (its method says "events").

    The graphs share one memory pool: safe here because each replay writes every pool tensor before
    reading it (parameters, momentum, BatchNorm statistics and the loss scale live outside the pool)
    and replays never overlap. Run last in a process: after capture the parameters' gradients live
    in the pool, and the unconditional optimizer step may have driven the weights to inf/NaN over
    the replays (which changes no kernel's time, but is no state to go on training from)."""
    graphs: dict[str, torch.cuda.CUDAGraph] = {}
    errors: dict[str, str] = {}
    pool = None
    for label, mode in modes.items():
        try:
            with mode():
                graphs[label] = capture_trainer_step(trainer, pool)
            pool = pool or graphs[label].pool()
        except Exception as exc:  # noqa: BLE001 - recorded; timed by events instead
            errors[label] = f"CUDA graph capture failed, timed by CUDA events around eager steps: {error_text(exc)}"
            progress(f"gpu: capture failed for {label}: {errors[label]}")
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
    repeats: dict[str, list[float | None]] = {label: [] for label in modes}
    for index in range(settings.gpu_repeats):
        for label in rotated(list(modes), index):
            try:
                if label in graphs:
                    ms = replay_ms(graphs[label], settings.gpu_replays)
                else:
                    with modes[label]():
                        ms = events_ms(trainer, settings.steps)
            except Exception as exc:  # noqa: BLE001 - a failed repeat is a missing sample
                errors.setdefault(label, f"timing: {error_text(exc)}")
                ms = None
            repeats[label].append(ms)
        progress(f"gpu repeat {index + 1}/{settings.gpu_repeats}: "
                 + ", ".join(f"{label} {num(repeats[label][-1], 3)} ms" for label in modes))
    medians = {label: median(values) for label, values in repeats.items()}
    labels = list(modes)
    return {"method": {label: "graph" if label in graphs else "events" for label in modes},
            "repeats_ms": repeats, "median_ms": medians,
            "ratio": {label: ratio_summary(repeats[labels[0]], repeats[label]) for label in labels[1:]},
            "energy_j_per_step": energy_j_per_step(graphs, list(modes)),
            "errors": errors,
            "step": "fwd + bwd + GradScaler unscale_/update + SGD step (the optimizer step unconditional: "
                    "GradScaler's inf check on the host cannot be captured)"}


def require_extension() -> None:
    """Without the extension the flags and plans are inert: "ours" would silently be stock."""
    if not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")


def timed_tune(trainer: Trainer) -> tuple[torch_cudnn_algo.Plan, float]:
    """tune() on the trainer's step (its autocast and loss) and its wall seconds, the GPU drained
    before and after."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    with trainer.autocast():  # every configuration tuned: none taken from the tuning database
        plan = torch_cudnn_algo.tune(trainer.model, trainer.inputs, loss_fn=loss_of, progress=False, retune=True)
    torch.cuda.synchronize()
    return plan, time.perf_counter() - started


def non_stock_entries(plan: torch_cudnn_algo.Plan) -> int:
    """The plan's entries that run something else than stock's own path."""
    return sum(1 for entry in plan.entries.values() if entry.choice is not None)


def child_main(network: str, settings: Settings, plan_path: Path) -> dict:
    """First step (stock), tune() and the plan file, every mode's warm-up, then the main sections;
    each part's raw file is written as soon as it is measured."""
    require_extension()
    if settings.knob_search:
        torch.backends.cudnn.conv_knob_search = True
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    first = step_seconds(trainer)
    progress(f"first step (stock heuristics) {first:.2f} s")
    for _ in range(WARMUP_STEPS):
        trainer.step()
    plan, tune_s = timed_tune(trainer)
    plan.save(plan_path)
    without_execution_plans(plan).save(names_plan_path(plan_path))
    setup = {"workload": workload, "first_step_s": first, "tune_s": tune_s,
             "plan_file_bytes": plan_path.stat().st_size, "plan_entries": len(plan),
             "plan_non_stock_entries": non_stock_entries(plan), "plan_execution_plans": execution_plan_census(plan)}
    progress(f"tune() {tune_s:.2f} s: {len(plan)} configurations, {setup['plan_non_stock_entries']} not stock's; "
             f"plan file {setup['plan_file_bytes']} bytes")
    write_raw(settings, network, "setup", setup, env)
    sections = [section for section in MAIN_SECTIONS if section in settings.sections]
    if not sections:  # --sections first_step: the plan file was all the plan child needs
        return {"written": ["setup"]}
    setup["modes"] = warm_up_modes(trainer, plan)
    write_raw(settings, network, "setup", setup, env)
    gc.collect()
    gc.freeze()  # what exists now is never collected again: collections during timing stay short
    measures: dict[str, Callable[[], dict]] = {
        "eager": lambda: measure_eager(trainer, plan, settings),
        "host": lambda: measure_host(trainer, plan, settings),
        "gpu": lambda: measure_gpu(trainer, {"heuristics": lambda: applied("stock", plan),
                                             "fastest": lambda: applied("fastest", plan)}, settings),
    }
    for section in sections:
        progress(f"section {section}")
        try:
            data = measures[section]()
        except Exception as exc:  # noqa: BLE001 - the other sections still run
            traceback.print_exc()
            data = {"error": error_text(exc)}
        write_raw(settings, network, section, data, env)
    return {"written": ["setup", *sections]}


def execution_plan_census(plan: torch_cudnn_algo.Plan) -> dict:
    """How many of the plan's entries carry their built execution plan, and why the others
    do not (reason -> count): what cuDNN would not serialise."""
    unavailable = collections.Counter(entry.execution_plan_unavailable for entry in plan.entries.values()
                                      if entry.execution_plan is None and entry.execution_plan_unavailable)
    return {"carried": sum(1 for entry in plan.entries.values() if entry.execution_plan is not None),
            "unavailable": dict(unavailable.most_common())}


def without_execution_plans(plan: torch_cudnn_algo.Plan) -> torch_cudnn_algo.Plan:
    """``plan``'s choices alone, as a plan saved without execution plans would hold them."""
    data = plan.to_dict()
    for entry in data["entries"].values():
        entry.pop("execution_plan", None)
        entry["execution_plan_unavailable"] = "left out by the zoo benchmark (choices-only first step)"
    return torch_cudnn_algo.Plan.from_json(json.dumps(data))


def child_names_first_step(network: str, settings: Settings, plan_path: Path) -> dict:
    """The first step with the tuned plan's choices alone (TORCH_CUDNN_ALGO_PLAN names the
    choices-only file): no heuristics query, every chosen plan built."""
    return plan_first_step(network, settings, names_plan_path(plan_path), "names_first_step")


def child_plan_first_step(network: str, settings: Settings, plan_path: Path) -> dict:
    """The first step of a fresh process whose plan came from TORCH_CUDNN_ALGO_PLAN at import."""
    return plan_first_step(network, settings, plan_path, "first_step")


def plan_first_step(network: str, settings: Settings, plan_path: Path, part: str) -> dict:
    require_extension()
    applied_by = "environment"
    if torch_cudnn_algo.current_plan() is None:  # the autoload did not apply it: say so, then apply it
        applied_by = f"use_plan (the autoload did not apply {PLAN_ENV_VAR})"
        torch_cudnn_algo.use_plan(plan_path)
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
    first = step_seconds(trainer)
    runs = pinned_runs_since(before)
    counts = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    builds = torch_cudnn_algo.diagnostics.execution_plan_counts()
    second = step_seconds(trainer)
    progress(f"first step with the plan {first:.2f} s (second {second:.3f} s); plan applied by {applied_by}")
    write_raw(settings, network, part, {
        "workload": workload, "first_step_s": first, "second_step_s": second, "plan_build_counts": builds,
        "plan_applied_by": applied_by, "plan_entries": len(counts),
        "plan_entries_run": sum(1 for runs_of_entry in counts.values() if runs_of_entry > 0),
        "plan_runs_first_step": sum(counts.values()), "pinned_runs_first_step": runs, "plan_run_counts": counts,
    }, env)
    return {"written": [part]}


def child_benchmark(network: str, settings: Settings, plan_path: Path) -> dict:
    """Stock ``benchmark=True`` in a process that never ran the heuristics on this network:
    the first step (the search), then the step's GPU time with stock's benchmark picks and, where
    the main child saved one, with the tuned plan, interleaved."""
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    torch.backends.cudnn.benchmark = True
    first = step_seconds(trainer)
    second = step_seconds(trainer)
    progress(f"benchmark=True: first step {first:.2f} s, second {second:.3f} s")
    for _ in range(WARMUP_STEPS):
        trainer.step()
    gc.collect()
    gc.freeze()
    modes: dict[str, Callable[[], contextlib.AbstractContextManager]] = {"benchmark": contextlib.nullcontext}
    plan_runs = None
    if plan_path.exists():
        plan = torch_cudnn_algo.load_plan(plan_path)
        modes["plan"] = lambda: torch_cudnn_algo.use_plan(plan)
        with torch_cudnn_algo.use_plan(plan):
            trainer.step()  # the plan's configurations built (or rebuilt) before any timing
            torch.cuda.synchronize()
            before = torch_cudnn_algo.diagnostics.pinned_run_counts()
            trainer.step()
            torch.cuda.synchronize()
            plan_runs = pinned_runs_since(before)
        progress(f"plan in the benchmark process: pinned runs per step {plan_runs}")
    gpu = measure_gpu(trainer, modes, settings)
    write_raw(settings, network, "benchmark", {"workload": {**workload, "cudnn_benchmark": True},
                                               "benchmark_search_s": first, "second_step_s": second, "gpu": gpu,
                                               "plan_pinned_runs_per_step": plan_runs},
              env)
    return {"written": ["benchmark"]}


def fastest_run(network: str, settings: Settings, part: str) -> dict:
    """A fresh process with all three flags ``"fastest"`` from the environment, as a user's
    ``TORCH_CUDNN_CONV_FWD_ALGO=fastest python train.py``, on the tuning database the parent named:
    empty for the first run, what the first run kept for the second. The first step (where the
    first run tunes), a second step, and what the process tuned, took from the database and built."""
    require_extension()
    flags = {d.flag: getattr(torch.backends.cudnn, d.flag) for d in torch_cudnn_algo.DIRECTIONS.values()}
    if any(policy != "fastest" for policy in flags.values()):
        raise RuntimeError(f'the flags should all be "fastest" from the environment, got {flags}')
    trainer, workload = build_trainer(network, DEVICE)
    env = environment()
    warm_up_cuda()
    first = step_seconds(trainer)
    tuned_first_step = decision_counts()["tuned"]
    second = step_seconds(trainer)
    database = Path(os.environ[TUNING_DB_ENV_VAR])
    data = {
        "workload": workload, "first_step_s": first, "second_step_s": second, "tuned_first_step": tuned_first_step,
        **decision_counts(),
        "tuning_db_bytes": sum(f.stat().st_size for f in database.rglob("*") if f.is_file()),
    }
    progress(f"{part}: first step {first:.2f} s (second {second:.3f} s), tuned {data['tuned']}, "
             f"execution plans {data['execution_plans']}, database {data['tuning_db_entries']} entries "
             f"{data['tuning_db_bytes']} bytes")
    write_raw(settings, network, part, data, env)
    return {"written": [part]}


CHILDREN: dict[str, Callable[[str, Settings, Path], dict]] = {
    "main": child_main, "plan_first_step": child_plan_first_step, "names_first_step": child_names_first_step,
    "benchmark": child_benchmark,
    "fastest_first_run": lambda network, settings, _: fastest_run(network, settings, "fastest_first_run"),
    "fastest_second_run": lambda network, settings, _: fastest_run(network, settings, "fastest_second_run")}


def run_as_child(args: argparse.Namespace, settings: Settings) -> int:
    """One child: its raw files, then one result line on the real stdout. Everything else printed
    to stdout goes to stderr, so the result line is never mixed with a library's output."""
    result_stream, sys.stdout = sys.stdout, sys.stderr
    set_progress_label(f"zoo {args.network} {args.child}")
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA GPU available")
        progress(f"on {torch.cuda.get_device_name()}")
        result = CHILDREN[args.child](args.network, settings, args.plan_path)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        traceback.print_exc()
        result = {"error": error_text(exc)}
    print(CHILD_RESULT_PREFIX + json.dumps(finite(result), default=str), file=result_stream, flush=True)
    return 1 if "error" in result else 0
