"""torch.compile against eager, each with stock's choices and with a tuned plan: GPU time per
training step and compile time, on the zoo's networks.

    python benchmarks/compiled.py [--networks efficientnet_b0,regnety_016] [--compile-modes default,max-autotune]
                                  [--repeats 5] [--replays 20] [--child-timeout 900] [--out benchmarks/results]
                                  [--children "max-autotune stock"] [--plan-dir DIR] [--merge] [--devices 0,1]
                                  [--inductor-cache DIR]
    python benchmarks/compiled.py --render FILE.json      # no GPU

Per network, fresh child processes: a ``tune`` child makes the plan (``tune()`` on the eager
step, saved to a file); an ``eager`` child and one child per compile mode and choice measure.
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

Writes ``<out>/compiled-<gpu>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .cli import child_environment
from .config import CHILD_RESULT_PREFIX
from .networks import ZOO
from .results import REPO_ROOT, device_slug, environment, error_text, now_iso, progress, write_json
from .stats import median, num, rotated

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


def child_measure(network: str, child: str, plan_path: Path, repeats: int, replays: int) -> dict:
    """One measuring child: compiles (unless eager) with its choice in force, times its first
    step (the compile), then the GPU time of its variants and of the eager-stock reference."""
    import torch
    import torch_cudnn_algo

    from .networks import build_trainer
    from .timing import step_seconds, warm_up_cuda

    if not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    plan = torch_cudnn_algo.load_plan(plan_path)
    trainer, _ = build_trainer(network, "cuda")
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
                    devices: Sequence[int] | None = None, inductor_cache: Path | None = None) -> dict:
    """The network's children (those named in ``only``, if given), in turn or, given ``devices``,
    at once one a GPU; ``checkpoint`` gets the record so far after each one, so a run stopped
    from outside (max-autotune compiles for minutes) keeps what it measured. With ``plan_dir``,
    the plan is ``<plan_dir>/<network>.json``: tuned and kept there if missing, else measured as
    found. With ``inductor_cache``, each measuring child's Inductor cache is kept there (see the
    module's text) and a child resuming one records the earlier runs' seconds."""
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
                                "--which", child, "--repeats", str(repeats), "--replays", str(replays)],
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


def variant_ms(record: dict) -> dict[str, float | None]:
    """Each variant's median GPU ms; the eager child's reference is the ``eager stock`` variant."""
    out = {}
    for child, result in record.get("children", {}).items():
        for label, ms in (result.get("median_ms") or {}).items():
            if label != EAGER_REFERENCE or child == "eager":
                out[label] = ms
    return out


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


def render(report: dict) -> str:
    lines = ["# torch.compile and the plan: GPU time per training step", "",
             f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. "
             "Command: " + "; ".join(f"`python benchmarks/compiled.py {argv}`" for argv in commands(report)) + ".", "",
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
    errors = [f"- {record['name']} {child}: {result['error']}" for record in report["networks"]
              for child, result in (("tune", record.get("setup", {})), *record.get("children", {}).items())
              if "error" in result]
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
                result = child_measure(args.network, args.which, args.plan_path, args.repeats, args.replays)
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
              "argv": " ".join(argv if argv is not None else sys.argv[1:]), "compile_modes": modes, "networks": []}
    stem = args.out / f"compiled-{device_slug(report['device'])}-{report['date']}"
    earlier: dict[str, dict] = {}
    if args.merge and stem.with_suffix(".json").exists():
        before = json.loads(stem.with_suffix(".json").read_text())
        earlier = {record["name"]: record for record in before["networks"]}
        report["argv"] = [*commands(before), report["argv"]]
        report["compile_modes"] = [mode for mode in COMPILE_MODES if mode in {*before["compile_modes"], *modes}]

    def save(records: list[dict]) -> str:
        """The report with ``records`` as this run's networks (merged into the earlier run's of the
        day with --merge), written as JSON and markdown."""
        names = [record["name"] for record in records]
        report["networks"] = [*(record for name, record in earlier.items() if name not in names),
                              *(merged(earlier.get(record["name"]), record) for record in records)]
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
                                   inductor_cache=args.inductor_cache))

    run_on_devices(networks, run_network, groups if len(groups) > 1 else None)
    print(save([records[name] for name in networks if name in records]), end="")
    return 0
