"""torch.compile against eager, each with stock's choices and with a tuned plan: GPU time per
training step, its convolutions' time against their roofline bound, wall time per step and compile
time, on the zoo's networks.

    python benchmarks/compiled.py [--networks efficientnet_b0,regnety_016] [--compile-modes default,max-autotune]
                                  [--repeats 5] [--replays 20] [--child-timeout 900] [--out benchmarks/results]
                                  [--children "max-autotune stock"] [--plan-dir DIR] [--merge] [--devices 0,1]
                                  [--inductor-cache DIR] [--baseline benchmark|heuristics]
    python benchmarks/compiled.py --render FILE.json      # no GPU

Per network, fresh child processes: a ``tune`` child makes the plan (``tune()`` on the eager
step against stock's heuristics, saved to a file); an ``eager`` child and one child per compile
mode and choice measure. Stock is ``--baseline``'s: ``benchmark`` (the default) sets
``torch.backends.cudnn.benchmark = True`` in every measuring child before its first convolution
(benchmark=True shares its plan cache with heuristics mode, so it holds for the child's whole
life), and the plan then runs benchmark=True's picks where it leaves a convolution to stock;
``heuristics`` leaves it False. ``<mode> stock`` is stock's choices under that baseline.
Inductor's ``max-autotune`` (compiled as ``max-autotune-no-cudagraphs``: the same kernel choices,
without CUDA graph trees nested in this benchmark's own capture) times ATen's convolution (which the plan steers) against its Triton
templates while it compiles, so its stock and plan variants compile in separate children; the
``default`` mode calls ATen's convolution at run time, so one compiled model serves both and the
plan is switched around it in one process. Every child starts from an empty Inductor cache (its
own ``TORCHINDUCTOR_CACHE_DIR``), so its first step is a cold compile, unless ``--inductor-cache``
keeps the caches (below).

GPU time: the whole step (the zoo's: forward, loss, backward, SGD) captured in a CUDA graph and
replayed, ``--replays`` per timing, ``--repeats`` timings in rotated order; CUDA events around
eager steps where capture fails. Every child also times the *eager stock* step, uncompiled, in
its own process: ratios across children (a max-autotune child against another) divide each
child's time by its own eager-stock time first, since GPU clocks differ between processes by more
than what is measured.

After the GPU timing, per variant with its model and choice in force: wall time, host ms per
step of uncaptured steps back to back, what the mode gives without CUDA graphs (the
graph-replayed GPU time of ``default`` is what ``mode="reduce-overhead"`` gives on the GPU),
measured before any profiling, which slows the host's later steps; then convolution time:
torch.profiler over a few uncaptured steps sums the GPU time of the ATen ``convolution`` and
``convolution_backward`` ops and of the Triton templates Inductor runs convolutions as
(max-autotune; they run outside those ops); the eager step's convolution calls, recorded
once per child by a dispatch mode (``conv_time.py``), give each profiled row its roofline bound
(``roofline.py``, the GPU's peaks). A failure there is recorded in the child's
``errors`` beside its GPU times.

A max-autotune child can compile for longer than one sitting on a GPU allows for the whole
network: ``--children`` runs some of a network's children, ``--plan-dir`` keeps each network's plan
(``<dir>/<network>.json``; a plan found there is measured instead of tuning a new one, so children
of separate runs measure the same plan) and ``--merge`` adds the run's children to the day's file,
replacing those of the same name, instead of writing it anew. On a machine of several GPUs,
``--devices 0,1`` runs a network's measuring children at once, one a GPU (``CUDA_VISIBLE_DEVICES``),
the max-autotune ones first: the cross-child ratios above already make GPUs of one machine compare.
Several networks run at once, each on an equal share of the GPUs, its plan tuned on the first of
them (``--devices 0,1,2,3`` with two networks: one on 0 and 1, the other on 2 and 3).

A max-autotune compile can also outlast one sitting by itself. ``--inductor-cache DIR`` keeps each
child's Inductor cache in ``DIR/<network>/<child>`` instead of a temporary folder: Inductor writes
each autotuning result there as soon as it has it (``cache/<hash>``, and ``.best_config`` files
beside the kernels' sources) and skips the choices it finds, so a child cut off by
``--child-timeout`` resumes in a later run with ``--merge`` where it stopped. The seconds each
child of that folder ran are added up in its ``seconds-spent`` file; a resumed child's compile time
is reported as its own plus the earlier runs' (which also include those runs' eager timing).

Writes ``<out>/compiled-<gpu>-<date>.json`` (with the baseline; ``--merge`` adds only to a file of
the same baseline) and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cli import child_environment
from .config import CHILD_RESULT_PREFIX
from .networks import ZOO, Trainer
from .results import REPO_ROOT, device_slug, environment, error_text, now_iso, progress, write_json
from .stats import median, num, ratio, rotated
from .step_profile import CONV_OPS, costliest, row_key, shapes_text

if TYPE_CHECKING:
    from .conv_time import ConvCall
    from .roofline import Peaks

SCRIPT = REPO_ROOT / "benchmarks" / "compiled.py"
COMPILE_MODES = ("default", "max-autotune")
# torch.compile's mode for each: max-autotune's kernel choices without its CUDA graph trees, which
# would nest inside the graph this benchmark captures to time the GPU (host time is out of the
# measurement either way).
TORCH_COMPILE_MODE = {"default": "default", "max-autotune": "max-autotune-no-cudagraphs"}
CHOICES = ("stock", "plan")
# The depthwise and grouped networks of the zoo, where the plan's choices differ most from stock's.
DEFAULT_NETWORKS = ("mobilenet_v3_large", "efficientnet_b0", "regnety_016", "resnext50_32x4d", "conv_tasnet")
EAGER_REFERENCE = "eager stock"  # what every child also times, for ratios across children
BASELINES = ("benchmark", "heuristics")  # stock as torch.backends.cudnn.benchmark = True, or False
BASELINE_OF_UNLABELLED_REPORTS = "heuristics"  # files written before the baseline was recorded ran with benchmark=False
PROFILED_STEPS, PROFILE_WARM_UP = 3, 2  # per variant, for its convolution time
WALL_STEPS, WALL_WARM_UP = 10, 2  # per variant, uncaptured steps back to back
KEPT_CONV_ROWS = 40  # of the costliest convolution rows per variant, in a child's result
TOP_EAGER_CONV_ROWS = 10  # rendered per network; the JSON keeps these rows of every variant


def variants_of(child: str) -> tuple[str, ...]:
    """The variants a child times besides the eager-stock reference: ``eager`` and ``default``
    switch the plan at run time; a max-autotune child compiled with one choice times that one."""
    if child in ("eager", "default"):
        return tuple(f"{child} {choice}" for choice in CHOICES)
    mode, choice = child.rsplit(" ", 1)
    return (f"{mode} {choice}",)


def children(compile_modes: Sequence[str]) -> list[str]:
    """The measuring children, in the order they run."""
    names = ["eager"]
    for mode in compile_modes:
        names += ["default"] if mode == "default" else [f"{mode} {choice}" for choice in CHOICES]
    return names


# ------------------------------------------------------------------------------- child side


@contextlib.contextmanager
def choice_in_force(choice: str, plan: object) -> Iterator[None]:
    import torch_cudnn_algo

    with torch_cudnn_algo.use_plan(plan) if choice == "plan" else contextlib.nullcontext():
        yield


def time_variants(trainer: object, variants: dict[str, Callable[[], contextlib.AbstractContextManager]],
                  models: dict[str, object], repeats: int, replays: int) -> dict:
    """GPU ms per step of each variant, as the zoo's measure_gpu: a CUDA graph per variant (its
    model and choice in force while captured), replayed in rotated order; events where capture fails."""
    import torch

    from .timing import capture_trainer_step, events_ms, replay_ms

    graphs, errors, pool = {}, {}, None
    for label, in_force in variants.items():
        trainer.model = models[label]
        try:
            with in_force():
                graphs[label] = capture_trainer_step(trainer, pool)
            pool = pool or graphs[label].pool()
        except Exception as exc:  # noqa: BLE001 - recorded; timed by events instead
            errors[label] = f"CUDA graph capture failed, timed by CUDA events: {error_text(exc)}"
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
    samples: dict[str, list[float | None]] = {label: [] for label in variants}
    for index in range(repeats):
        for label in rotated(list(variants), index):
            try:
                if label in graphs:
                    ms = replay_ms(graphs[label], replays)
                else:
                    trainer.model = models[label]
                    with variants[label]():
                        ms = events_ms(trainer, 6)
            except Exception as exc:  # noqa: BLE001 - a failed repeat is a missing sample
                errors.setdefault(label, f"timing: {error_text(exc)}")
                ms = None
            samples[label].append(ms)
    return {"repeats_ms": samples, "median_ms": {label: median(values) for label, values in samples.items()},
            "method": {label: "graph" if label in graphs else "events" for label in variants}, "errors": errors}


def child_tune(network: str, plan_path: Path) -> dict:
    from .measure import non_stock_entries, timed_tune
    from .networks import build_trainer
    from .timing import warm_up_cuda

    trainer, workload = build_trainer(network, "cuda")
    warm_up_cuda()
    trainer.step()
    plan, tune_s = timed_tune(trainer)
    plan.save(plan_path)
    return {"workload": workload, "tune_s": tune_s, "plan_entries": len(plan),
            "plan_non_stock_entries": non_stock_entries(plan)}


def wall_ms_per_step(trainer: Trainer) -> float:
    """Host wall ms per step of ``WALL_STEPS`` uncaptured steps back to back, after
    ``WALL_WARM_UP``: what a run without CUDA graphs sees (eager, or a compiled mode's own)."""
    from .timing import steps_wall_cpu_ms

    for _ in range(WALL_WARM_UP):
        trainer.step()
    wall_ms, _cpu_ms = steps_wall_cpu_ms(trainer, WALL_STEPS)
    return wall_ms


def conv_entry(profile: dict, calls: list[ConvCall] | None, peaks: Peaks | None) -> dict:
    """A variant's convolution time as the result keeps it: its costliest rows, and their
    roofline summary (None without recorded calls or without the GPU's peaks)."""
    from .conv_time import roofline_summary

    roofline = None if calls is None or peaks is None else roofline_summary(profile["rows"], calls, peaks)
    if roofline is not None:
        roofline["rows"] = costliest(roofline["rows"], KEPT_CONV_ROWS)
    return {**profile, "rows": costliest(profile["rows"], KEPT_CONV_ROWS), "roofline": roofline}


def with_kept_conv_rows(record: dict) -> dict:
    """A network's record keeping, in every variant, only the convolution rows that are among
    some variant's costliest TOP_EAGER_CONV_ROWS: every row the render can show, with each
    variant's time of it (stock's time of the plan's costliest rows among them). The totals stay."""
    record = copy.deepcopy(record)
    entries = [entry for result in record.get("children", {}).values()
               for entry in (result.get("conv") or {}).values()]
    row_lists = [rows for entry in entries
                 for rows in (entry.get("rows", []), (entry.get("roofline") or {}).get("rows", []))]
    kept = {row_key(row) for rows in row_lists for row in costliest(rows, TOP_EAGER_CONV_ROWS)}
    for entry in entries:
        entry["rows"] = [row for row in entry.get("rows", []) if row_key(row) in kept]
        if entry.get("roofline"):
            entry["roofline"]["rows"] = [row for row in entry["roofline"]["rows"] if row_key(row) in kept]
    return record


def measure_convolutions(trainer: Trainer, labels: Sequence[str],
                         variants: dict[str, Callable[[], contextlib.AbstractContextManager]],
                         models: dict[str, object]) -> tuple[dict, dict[str, str]]:
    """Each of ``labels``'s wall ms per step, then its convolution time per step (profiled
    uncaptured, its model and choice in force) against the roofline bound of the eager step's
    convolution calls (recorded once, stock's choices); and the errors of what failed. The wall
    times come first: after a torch.profiler session the host ran the step slower (mobilenet_v3_large
    on an H200: 21-29 ms before, 28-35 ms after)."""
    out: dict[str, Any] = {"wall_ms": {}}
    errors: dict[str, str] = {}
    for label in labels:
        trainer.model = models[label]
        try:
            with variants[label]():
                out["wall_ms"][label] = wall_ms_per_step(trainer)
        except Exception as exc:  # noqa: BLE001 - recorded; the graph timings stand
            errors[f"{label} wall"] = error_text(exc)
    profiled, profile_errors = profile_convolutions(trainer, labels, variants, models)
    return {**out, **profiled}, {**errors, **profile_errors}


def profile_convolutions(trainer: Trainer, labels: Sequence[str],
                         variants: dict[str, Callable[[], contextlib.AbstractContextManager]],
                         models: dict[str, object]) -> tuple[dict, dict[str, str]]:
    """Each of ``labels``'s convolution time per step and its roofline summary (``conv``), the
    GPU's peaks and the eager step's convolution calls per step; and the errors of what failed."""
    import torch

    from .conv_time import profile_conv_time, record_conv_calls
    from .roofline import peaks_of

    out: dict[str, Any] = {"conv": {}}
    errors: dict[str, str] = {}
    peaks = peaks_of(torch.cuda.get_device_name())
    out["peaks"] = peaks.name if peaks else None  # None: no figures for this GPU, so no bound
    calls = None
    trainer.model = models[EAGER_REFERENCE]  # every mode runs the eager step's convolution problems
    try:
        with variants[EAGER_REFERENCE]():
            calls = record_conv_calls(trainer.step)
        out["conv_calls_per_step"] = len(calls)
    except Exception as exc:  # noqa: BLE001 - recorded; the times stand without a bound
        errors["conv calls"] = f"recording the eager step's convolution calls: {error_text(exc)}"
    for label in labels:
        trainer.model = models[label]
        try:
            with variants[label]():
                profile = profile_conv_time(trainer.step, PROFILED_STEPS, PROFILE_WARM_UP)
            out["conv"][label] = conv_entry(profile, calls, peaks)
        except Exception as exc:  # noqa: BLE001 - recorded; the graph timings stand
            errors[f"{label} conv profile"] = error_text(exc)
    return out, errors


def child_measure(network: str, child: str, plan_path: Path, repeats: int, replays: int,
                  baseline: str = "benchmark") -> dict:
    """One measuring child: compiles (unless eager) with its choice in force, times its first
    step (the compile), then the GPU time of its variants and of the eager-stock reference, then
    each variant's convolution time, roofline bound and wall time per step. Stock is the
    ``baseline``'s: ``benchmark=True`` or cuDNN's heuristics, set before any convolution runs."""
    import torch
    import torch_cudnn_algo

    from .networks import build_trainer
    from .timing import step_seconds, warm_up_cuda

    if not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    plan = torch_cudnn_algo.load_plan(plan_path)
    trainer, _ = build_trainer(network, "cuda")  # sets benchmark=False with the network's numerics
    # Stock's benchmark=True shares its plan cache with heuristics mode: set for the child's whole
    # life, before the first convolution, so every variant sees one stock. The plan variant runs
    # benchmark=True's picks where the plan leaves a convolution to stock.
    torch.backends.cudnn.benchmark = baseline == "benchmark"
    warm_up_cuda()
    eager_model = trainer.model
    result: dict[str, object] = {}
    models = {EAGER_REFERENCE: eager_model}
    variants: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
        EAGER_REFERENCE: lambda: choice_in_force("stock", plan)}
    if child == "eager":  # its reference is the eager stock variant
        models["eager plan"] = eager_model
        variants["eager plan"] = lambda: choice_in_force("plan", plan)
    else:
        mode, _, compiled_choice = child.partition(" ")
        compiled = torch.compile(eager_model, mode=TORCH_COMPILE_MODE[mode])
        trainer.model = compiled
        with choice_in_force(compiled_choice or "stock", plan):
            result["first_step_s"] = step_seconds(trainer)  # compiles (and autotunes) forward and backward
            result["second_step_s"] = step_seconds(trainer)
        for label in variants_of(child):
            choice = label.rsplit(" ", 1)[1]
            models[label] = compiled
            variants[label] = lambda choice=choice: choice_in_force(choice, plan)
    before = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    result.update(time_variants(trainer, variants, models, repeats, replays))
    after = torch_cudnn_algo.diagnostics.plan_entry_run_counts()
    result["plan_entry_runs"] = sum(after.values()) - sum(before.values())  # the plan steered the calls
    try:
        measured, errors = measure_convolutions(trainer, variants_of(child), variants, models)
    except Exception as exc:  # noqa: BLE001 - recorded; the graph timings stand
        measured, errors = {}, {"conv": error_text(exc)}
    result.update(measured)
    result["errors"].update(errors)
    return result


# ------------------------------------------------------------------------------- parent side


def run_child(args: Sequence[str], timeout_s: float, env: dict[str, str]) -> dict:
    command = [sys.executable, str(SCRIPT), *args]
    try:
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(CHILD_RESULT_PREFIX):
            return json.loads(line[len(CHILD_RESULT_PREFIX):])
    return {"error": f"exit status {done.returncode} without a result line (its stderr is above)"}


SPENT_FILE = "seconds-spent"  # in a kept Inductor cache: the seconds its children ran, all runs


def child_cache_dir(root: Path, network: str, child: str) -> Path:
    """Where ``--inductor-cache`` keeps a child's Inductor cache: ``<root>/<network>/<child>``,
    spaces as dashes (``max-autotune stock``: ``max-autotune-stock``)."""
    return root / network / child.replace(" ", "-")


def spent_seconds(cache_dir: Path) -> float:
    """The seconds earlier children ran on this kept cache (0 for a new one)."""
    try:
        return float((cache_dir / SPENT_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return 0.0


def add_spent_seconds(cache_dir: Path, seconds: float) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / SPENT_FILE).write_text(f"{spent_seconds(cache_dir) + seconds:.1f}\n")


def child_env(cache_dir: str, device: int | None = None) -> dict[str, str]:
    """Stock's environment (nothing pinned, no plan applied at import) with its own Inductor cache,
    and with ``device``, that GPU alone visible."""
    extra = {"TORCHINDUCTOR_CACHE_DIR": cache_dir}
    if device is not None:
        extra["CUDA_VISIBLE_DEVICES"] = str(device)
    return child_environment(extra)


def run_on_devices(names: Sequence[str], run_one: Callable[[str, Any], None], devices: Sequence[Any] | None) -> None:
    """``run_one(name, device)`` for every name: one after another on the default GPU, or, given
    devices (GPU indices, or groups of them), at once, each device taking the next name as it comes
    free, max-autotune's (the longest) first. An exception in one is raised here once the ones
    already running have ended; none starts after it."""
    if not devices:
        for name in names:
            run_one(name, None)
        return
    queue = sorted(names, key=lambda name: not name.startswith("max-autotune"))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def worker(device: Any) -> None:
        while True:
            with lock:
                if not queue or failures:
                    return
                name = queue.pop(0)
            try:
                run_one(name, device)
            except BaseException as exc:  # noqa: BLE001 - raised in the calling thread
                with lock:
                    failures.append(exc)
                return

    threads = [threading.Thread(target=worker, args=(device,)) for device in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def measure_network(network: str, compile_modes: Sequence[str], repeats: int, replays: int,
                    timeout_s: float, checkpoint: Callable[[dict], None] = lambda record: None,
                    only: Sequence[str] | None = None, plan_dir: Path | None = None,
                    devices: Sequence[int] | None = None, inductor_cache: Path | None = None,
                    baseline: str = "benchmark") -> dict:
    """The network's children (those named in ``only``, if given), in turn or, given ``devices``,
    at once one a GPU; ``checkpoint`` gets the record so far after each one, so a run stopped
    from outside (max-autotune compiles for minutes) keeps what it measured. With ``plan_dir``,
    the plan is ``<plan_dir>/<network>.json``: tuned and kept there if missing, else measured as
    found. With ``inductor_cache``, each measuring child's Inductor cache is kept there (see the
    module's text) and a child resuming one records the earlier runs' seconds. Stock is the
    ``baseline``'s (``benchmark``: ``benchmark=True``; ``heuristics``), in every measuring child."""
    record: dict[str, object] = {"name": network, "children": {}}
    with tempfile.TemporaryDirectory(prefix="compiled-") as scratch:
        plan_path = plan_dir / f"{network}.json" if plan_dir else Path(scratch) / "plan.json"
        if plan_path.exists():
            record["setup"] = {"plan_from": str(plan_path)}
        else:
            progress(f"{network}: tune child")
            plan_path.parent.mkdir(parents=True, exist_ok=True)
            # On the network's first GPU: networks sharing a machine's GPUs tune each on its own.
            setup = run_child(["--child", "tune", "--network", network, "--plan-path", str(plan_path)], timeout_s,
                              child_env(os.path.join(scratch, "inductor-tune"), devices[0] if devices else None))
            record["setup"] = setup
            checkpoint(record)
            if "error" in setup:
                return record
        names = [child for child in children(compile_modes) if only is None or child in only]
        lock = threading.Lock()

        def run_one(child: str, device: int | None) -> None:
            progress(f"{network}: {child} child" + ("" if device is None else f" on GPU {device}"))
            # A temporary cache is new to every run: nothing spent on it before.
            cache = child_cache_dir(inductor_cache or Path(scratch), network, child)
            earlier_s = spent_seconds(cache)
            started = time.perf_counter()
            result = run_child(["--child", "measure", "--network", network, "--plan-path", str(plan_path),
                                "--which", child, "--repeats", str(repeats), "--replays", str(replays),
                                "--baseline", baseline],
                               timeout_s, child_env(str(cache), device))
            result["child_seconds"] = time.perf_counter() - started
            add_spent_seconds(cache, result["child_seconds"])
            if earlier_s > 0:
                result["earlier_runs_s"] = earlier_s
            if device is not None:
                result["device_index"] = device
            with lock:
                record["children"][child] = result
                checkpoint(record)
            progress(f"{network}: {child}: " + (result["error"] if "error" in result else ", ".join(
                f"{label} {num(ms, 2)} ms" for label, ms in result["median_ms"].items())))

        try:
            run_on_devices(names, run_one, devices)
        finally:  # the children in their usual order, however they ended
            record["children"] = {child: record["children"][child] for child in names if child in record["children"]}
    return record


def device_groups(devices: Sequence[int], networks: int) -> list[list[int]]:
    """The GPUs split among networks measured at once: an equal share each (at least one GPU), as
    many networks at once as there are shares."""
    share = max(1, len(devices) // max(1, networks))
    return [list(devices[start:start + share]) for start in range(0, len(devices) - share + 1, share)]


def merged(earlier: dict | None, record: dict) -> dict:
    """A network's record from an earlier run of the day updated by this run's: children of the
    same name replaced, the others kept; the setup replaced unless this run measured the earlier
    run's plan (it then says only where the plan came from)."""
    if earlier is None:
        return record
    setup = record.get("setup", {})
    return {**earlier, "children": {**earlier.get("children", {}), **record.get("children", {})},
            "setup": earlier.get("setup", {}) if "plan_from" in setup else setup}


def per_variant(record: dict, field: str) -> dict[str, Any]:
    """Each variant's ``field`` (a child's result holds it by variant label) from the child that
    measured it; the eager child's reference is the ``eager stock`` variant."""
    out = {}
    for child, result in record.get("children", {}).items():
        for label, value in (result.get(field) or {}).items():
            if label != EAGER_REFERENCE or child == "eager":
                out[label] = value
    return out


def variant_ms(record: dict) -> dict[str, float | None]:
    """Each variant's median GPU ms."""
    return per_variant(record, "median_ms")


def normalised(record: dict) -> dict[str, float]:
    """Each variant's GPU ms divided by the eager-stock ms of the child that timed it."""
    out = {}
    for child, result in record.get("children", {}).items():
        medians = result.get("median_ms") or {}
        reference = medians.get(EAGER_REFERENCE)
        for label, ms in medians.items():
            if (label != EAGER_REFERENCE or child == "eager") and ms and reference:
                out[label] = ms / reference
    return out


def commands(report: dict) -> list[str]:
    """The argument lines of the runs a report holds (one, or one per merged run)."""
    return [report["argv"]] if isinstance(report["argv"], str) else list(report["argv"])


def compile_seconds(result: dict) -> str:
    """A child's compile seconds as rendered, with what earlier runs on its kept cache spent."""
    text = num(result.get("first_step_s"), 1)
    earlier = result.get("earlier_runs_s")
    return f"{text} + {earlier:.0f} earlier" if earlier and result.get("first_step_s") is not None else text


def baseline_of(report: dict) -> str:
    return report.get("baseline", BASELINE_OF_UNLABELLED_REPORTS)


BASELINE_TEXT = {
    "benchmark": "Stock: `torch.backends.cudnn.benchmark = True` in every measuring child (the plan runs its "
                 "picks where it leaves a convolution to stock).",
    "heuristics": "Stock: cuDNN's heuristics (`torch.backends.cudnn.benchmark = False`).",
}


def conv_ms(entry: dict | None) -> float | None:
    """A variant's convolution GPU ms per step: the ATen convolution ops' and Inductor's Triton
    convolution templates' (which run outside them)."""
    return None if entry is None else (entry["conv_us"] + entry.get("triton_conv_us", 0.0)) / 1e3


def bound_ms(*entries: dict | None) -> float | None:
    """The roofline bound of the step's convolutions, from the first entry that has one (every
    variant of a network joins the same recorded calls)."""
    for entry in entries:
        roofline = (entry or {}).get("roofline")
        if roofline:
            return roofline["bound_us"] / 1e3
    return None


def peaks_named(report: dict) -> str | None:
    """The GPU whose peaks the children's bounds used."""
    return next((result["peaks"] for record in report["networks"] for result in record.get("children", {}).values()
                 if result.get("peaks")), None)


def conv_time_lines(report: dict) -> list[str]:
    """The table of convolution time per step, bound and wall time, per network and mode."""
    peaks = peaks_named(report)
    lines = ["", "## Convolution time per step", "",
             f"GPU ms of the convolutions per training step, from torch.profiler over {PROFILED_STEPS} uncaptured "
             "steps of each variant (its model and choice in force): the ATen `convolution` and "
             "`convolution_backward` ops and all they launch, and the Triton templates Inductor runs convolutions "
             "as (max-autotune), which run outside them; Triton kernels that only fused a convolution's neighbours "
             "(batch norm, a bias, an activation) do not count. *conv gain* = stock / plan. "
             "*bound*: the roofline bound of the eager step's convolution calls (" +
             (f"{peaks} peaks" if peaks else "no peaks known for this GPU: no bound") +
             ", `roofline.py`: the multiply-adds at the tensor cores' peak or the three tensors once at the memory's "
             "peak, each gradient of a backward call one such bound); the modes of a network run the same "
             "convolutions. *plan conv / bound*: the plan's convolution time in multiples of the bound (1: at the "
             "roofline). The first table's GPU times replay the whole step in a CUDA graph: for `default`, that is "
             "what `torch.compile(mode=\"reduce-overhead\")` (the same kernels under CUDA graphs) gives on the "
             f"GPU. *wall ms*: host wall time per step of {WALL_STEPS} uncaptured steps back to back, the GPU "
             "drained at the end, before any profiling: what the mode takes without CUDA graphs (eager, or "
             "`torch.compile` in that mode); one run of each variant after the other, host-bound and without an "
             "A/A control, so it shows the scale, not a ratio (the zoo's eager section interleaves rounds beside "
             "an A/A control for that).",
             "", "| network | mode | conv ms stock / plan | conv gain | bound ms | plan conv / bound | wall ms stock / "
             "plan |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for record in report["networks"]:
        conv, wall = per_variant(record, "conv"), per_variant(record, "wall_ms")
        for mode in ("eager", *report["compile_modes"]):
            stock, plan = conv.get(f"{mode} stock"), conv.get(f"{mode} plan")
            stock_ms, plan_ms, bound = conv_ms(stock), conv_ms(plan), bound_ms(plan, stock)
            lines.append(f"| {record['name']} | {mode} | {num(stock_ms, 2)} / {num(plan_ms, 2)} | "
                         f"{num(ratio(stock_ms, plan_ms), 3)} | {num(bound, 2)} | {num(ratio(plan_ms, bound), 2)} | "
                         f"{num(wall.get(f'{mode} stock'), 2)} / {num(wall.get(f'{mode} plan'), 2)} |")
    return lines


def us_as_ms(us: float | None) -> float | None:
    return None if us is None else us / 1e3


def eager_conv_rows_lines(record: dict) -> list[str]:
    """The plan's costliest convolution rows of the eager step, beside stock's and the bound."""
    conv = per_variant(record, "conv")
    plan, stock = conv.get("eager plan"), conv.get("eager stock") or {}
    if plan is None:
        return []
    rows = plan["roofline"]["rows"] if plan.get("roofline") else plan["rows"]
    stock_us = {row_key(row): row["gpu_us"] for row in stock.get("rows", [])}
    lines = ["", f"### {record['name']}", "",
             "| op | tensor shapes | calls | stock ms | plan ms | bound ms | % of bound | TB/s |",
             "|---|---|--:|--:|--:|--:|--:|--:|"]
    for row in costliest(rows, TOP_EAGER_CONV_ROWS):
        fraction = row.get("fraction")
        percent_of_bound = None if fraction is None else 100 * fraction
        lines.append(f"| {CONV_OPS[row['op']]} | {shapes_text(row['shapes'])} | {row['calls']:g} | "
                     f"{num(us_as_ms(stock_us.get(row_key(row))), 3)} | {num(row['gpu_us'] / 1e3, 3)} | "
                     f"{num(us_as_ms(row.get('bound_us')), 3)} | {num(percent_of_bound, 0)} | "
                     f"{num(row.get('tb_per_s'), 2)} |")
    return lines


def eager_conv_rows_section(report: dict) -> list[str]:
    tables = [line for record in report["networks"] for line in eager_conv_rows_lines(record)]
    if not tables:
        return []
    return ["", "## The plan's costliest convolutions, eager", "",
            "Per network, the eager step's convolution rows (an ATen op and its tensors' shapes; ms per step, all "
            "calls of the row) where the plan spends most, beside stock's time of the same row and the row's "
            "roofline bound. *% of bound*: bound / plan ms (100: at the roofline); *TB/s*: the plan's, reading "
            "and writing each of the three tensors once per direction.", *tables]


def has_conv_time(report: dict) -> bool:
    return any(result.get("conv") for record in report["networks"] for result in record.get("children", {}).values())


def error_lines(report: dict) -> list[str]:
    """A child that failed, and what a child recorded as failing while it measured (a capture
    timed by events instead, a profile or wall time that failed)."""
    lines = []
    for record in report["networks"]:
        for child, result in (("tune", record.get("setup", {})), *record.get("children", {}).items()):
            if "error" in result:
                lines.append(f"- {record['name']} {child}: {result['error']}")
            lines += [f"- {record['name']} {child} ({what}): {message}"
                      for what, message in (result.get("errors") or {}).items()]
    return lines


def render(report: dict) -> str:
    lines = ["# torch.compile and the plan: GPU time per training step", "",
             f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. "
             f"{BASELINE_TEXT[baseline_of(report)]} Command: " +
             "; ".join(f"`python benchmarks/compiled.py {argv}`" for argv in commands(report)) + ".", "",
             "GPU ms per step by CUDA-graph replay (median of the repeats). Each cell is measured in the child "
             "that ran it; *vs eager stock* divides it by that child's own eager-stock step, so cells from "
             "different children compare. *plan gain* = stock / plan of the same mode (above 1: the plan "
             "helps). *compile s*: the first step of a cold Inductor cache, compile and autotuning included "
             "(`default` compiles once for both choices); *+ N earlier*: the child resumed an Inductor cache "
             "that earlier runs, cut off, had spent N seconds on.", "",
             "| network | mode | stock ms | plan ms | stock vs eager stock | plan vs eager stock | plan gain | "
             "compile s (stock / plan) |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    for record in report["networks"]:
        rel, medians = normalised(record), variant_ms(record)
        children_run = record.get("children", {})
        for mode in ("eager", *report["compile_modes"]):
            stock, plan = f"{mode} stock", f"{mode} plan"
            gain = rel[stock] / rel[plan] if stock in rel and plan in rel else None
            if mode == "eager":
                compile_cell = "-"
            elif mode == "default":  # one compile serves both choices
                compile_cell = compile_seconds(children_run.get("default", {}))
            else:
                compile_cell = " / ".join(compile_seconds(children_run.get(f"{mode} {choice}", {}))
                                          for choice in CHOICES)
            lines.append(f"| {record['name']} | {mode} | {num(medians.get(stock), 2)} | {num(medians.get(plan), 2)} | "
                         f"{num(rel.get(stock), 3)} | {num(rel.get(plan), 3)} | {num(gain, 3)} | {compile_cell} |")
    if "max-autotune" in report["compile_modes"]:
        lines += ["", "## Against max-autotune", "",
                  "max-autotune stock's GPU time over ours (above 1: ours is faster), each first divided by its "
                  "own child's eager-stock step.", "",
                  "| network | eager plan | default plan | max-autotune plan |", "|---|--:|--:|--:|"]
        for record in report["networks"]:
            rel = normalised(record)
            peer = rel.get("max-autotune stock")
            cells = [num(peer / rel[label], 3) if peer and rel.get(label) else "—"
                     for label in ("eager plan", "default plan", "max-autotune plan")]
            lines.append(f"| {record['name']} | " + " | ".join(cells) + " |")
    placed = {f"{record['name']} {child}": result["device_index"] for record in report["networks"]
              for child, result in record.get("children", {}).items() if "device_index" in result}
    if placed:
        lines += ["", "Children that ran at once, each on its own GPU of the machine (GPU index): " +
                  ", ".join(f"{name} {index}" for name, index in placed.items()) + "."]
    if has_conv_time(report):
        lines += conv_time_lines(report) + eager_conv_rows_section(report)
    errors = error_lines(report)
    if errors:
        lines += ["", "## Errors", "", *errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", default=",".join(DEFAULT_NETWORKS),
                        help=f"comma-separated, of {', '.join(ZOO)}")
    parser.add_argument("--compile-modes", default=",".join(COMPILE_MODES),
                        help=f"comma-separated, of {', '.join(COMPILE_MODES)}")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--child-timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--children", help="comma-separated: only these of each network's children, of "
                        "eager, default, '<mode> stock', '<mode> plan' (the modes given)")
    parser.add_argument("--plan-dir", type=Path, help="keep each network's plan here as <network>.json; a plan "
                        "found there is measured instead of tuning a new one")
    parser.add_argument("--merge", action="store_true", help="add this run's children to the day's file "
                        "instead of writing it anew")
    parser.add_argument("--devices", help="comma-separated GPU indices: a network's measuring children run at "
                        "once, one a GPU (each divides by its own eager-stock step, so GPUs of one machine "
                        "compare); several networks at once, each on an equal share")
    parser.add_argument("--inductor-cache", type=Path, metavar="DIR", help="keep each child's Inductor cache in "
                        "DIR/<network>/<child>: a child cut off by --child-timeout resumes there in a later run "
                        "(with --merge), its compile seconds adding the earlier runs'")
    parser.add_argument("--baseline", choices=BASELINES, default="benchmark", help="stock as "
                        "torch.backends.cudnn.benchmark = True (benchmark, the default) or False (heuristics), set "
                        "in every measuring child from its start (with benchmark, the plan runs benchmark=True's "
                        "picks where it leaves a convolution to stock)")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    parser.add_argument("--child", choices=("tune", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--network", help=argparse.SUPPRESS)
    parser.add_argument("--plan-path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--which", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    if args.child:
        try:
            if args.child == "tune":
                result = child_tune(args.network, args.plan_path)
            else:
                result = child_measure(args.network, args.which, args.plan_path, args.repeats, args.replays,
                                       args.baseline)
        except Exception as exc:  # noqa: BLE001 - the parent records it
            result = {"error": error_text(exc)}
        print(CHILD_RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    networks = [name for name in args.networks.split(",") if name]
    modes = [mode for mode in args.compile_modes.split(",") if mode]
    unknown = [name for name in networks if name not in ZOO] + [mode for mode in modes if mode not in COMPILE_MODES]
    only = None if args.children is None else [name.strip() for name in args.children.split(",") if name.strip()]
    unknown += [name for name in only or [] if name not in children(modes)]
    if unknown or args.repeats < 1 or args.replays < 1 or only == []:
        parser.error(f"unknown networks, compile modes or children {unknown}, no child named, or repeats/replays "
                     f"below 1; networks are {', '.join(ZOO)}, compile modes {', '.join(COMPILE_MODES)}, children "
                     f"of these modes {', '.join(children(modes))}")
    if args.merge and args.plan_dir is None:
        parser.error("--merge needs --plan-dir: children merged into one record must have measured one plan")
    if args.inductor_cache and args.plan_dir is None:
        parser.error("--inductor-cache needs --plan-dir: a kept cache holds max-autotune's timings of ATen's "
                     "convolutions as the plan steered them, so a child resuming it must run the same plan")
    devices = None
    if args.devices is not None:
        fields = [field.strip() for field in args.devices.split(",")]
        if not all(field.isdigit() for field in fields) or len(set(fields)) != len(fields):
            parser.error(f"--devices takes distinct GPU indices separated by commas, such as 0,1; got {args.devices!r}")
        devices = [int(field) for field in fields]
    env = environment()
    report = {"device": env.get("device"), "torch": env.get("torch"), "cudnn": env.get("cudnn"), "date": now_iso()[:10],
              "argv": " ".join(argv if argv is not None else sys.argv[1:]), "baseline": args.baseline,
              "compile_modes": modes, "networks": []}
    stem = args.out / f"compiled-{device_slug(report['device'])}-{report['date']}"
    earlier: dict[str, dict] = {}
    if args.merge and stem.with_suffix(".json").exists():
        before = json.loads(stem.with_suffix(".json").read_text())
        if baseline_of(before) != args.baseline:
            parser.error(f"--merge: the day's file measured stock as --baseline {baseline_of(before)}, this run as "
                         f"{args.baseline}; one file holds one baseline")
        earlier = {record["name"]: record for record in before["networks"]}
        report["argv"] = [*commands(before), report["argv"]]
        report["compile_modes"] = [mode for mode in COMPILE_MODES if mode in {*before["compile_modes"], *modes}]

    def save(records: list[dict]) -> str:
        """The report with ``records`` as this run's networks (merged into the earlier run's of the
        day with --merge), written as JSON and markdown."""
        names = [record["name"] for record in records]
        report["networks"] = [*(record for name, record in earlier.items() if name not in names),
                              *(merged(earlier.get(record["name"]), record) for record in records)]
        report["networks"] = [with_kept_conv_rows(record) for record in report["networks"]]
        write_json(stem.with_suffix(".json"), report)
        markdown = render(report)
        stem.with_suffix(".md").write_text(markdown)
        return markdown

    # Several networks share the GPUs given, each on its own share (device_groups); a single
    # network, or a single GPU, runs the networks one after another, each over all the GPUs.
    groups = device_groups(devices, len(networks)) if devices else []
    records: dict[str, dict] = {}  # each network's record so far
    lock = threading.Lock()

    def checkpoint(record: dict) -> None:
        with lock:
            records[record["name"]] = record
            save([records[name] for name in networks if name in records])

    def run_network(network: str, group: list[int] | None) -> None:
        checkpoint(measure_network(network, modes, args.repeats, args.replays, args.child_timeout,
                                   checkpoint=checkpoint, only=only, plan_dir=args.plan_dir,
                                   devices=group if group is not None else devices,
                                   inductor_cache=args.inductor_cache, baseline=args.baseline))

    run_on_devices(networks, run_network, groups if len(groups) > 1 else None)
    print(save([records[name] for name in networks if name in records]), end="")
    return 0
