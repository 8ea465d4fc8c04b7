"""The zoo benchmark's command line: stock PyTorch, a tuned plan and the "fastest" policy on real
networks, written as ``<out>/zoo-<gpu>-<date>.json`` and its markdown ``zoo-<gpu>-<date>.md``.

    python benchmarks/zoo.py [--networks a,b] [--sections first_step,eager,host,gpu,benchmark,fastest_db]
                             [--rounds 16] [--steps 6] [--out benchmarks/results] [--quick]
                             [--child-timeout 240] [--budget-s 510] [--knob-search]
    python benchmarks/zoo.py --merge-only [--out benchmarks/results]      # no GPU needed

The training step of every network: ``zero_grad(set_to_none=True)``, forward under autocast (AMP
fp16 networks), ``loss = output.float().mean()`` (summed over tuple outputs), GradScaler-scaled
backward (AMP) or plain backward, SGD(lr=0.01, momentum=0.9) step, ``scaler.update()``.

Per network, fresh child processes (``measure``). Sections: ``eager`` wall ms per step, modes
stock / plan / fastest / control in rotated order per round, ratios stock/X within each round;
``control`` is stock again, so stock/control is what the host's noise alone gives (an A/A test: a
ratio of ours inside its spread is no difference); ``host`` torch.profiler CPU time per
convolution op call, as the step runs and with the GPU drained before every conv module; ``gpu``
the step's GPU time by CUDA-graph replay (no host time in it), stock heuristics vs ``"fastest"``;
``first_step`` the plan children; ``benchmark`` the ``benchmark=True`` child (its search, and its
picks' GPU time against the tuned plan's in that process); ``fastest_db`` two children with the
three flags ``"fastest"`` from the environment on one empty tuning database, the second run's first
step against stock's (what the first run kept is all it should need). ``--knob-search`` turns
``conv_knob_search`` on in the main child, so the plan and the ``"fastest"`` mode search knobs.

Raw files go to ``<out>/raw/zoo/`` (``raw``); every run ends by merging all raw files of the
latest run's GPU; ``--merge-only`` only merges. Progress goes to stderr; the markdown also to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from .config import CHILD_KINDS, CHILD_RESULT_PREFIX, CUDA_JIT_CACHE_ENV_VAR, FASTEST_ENV, TUNING_DB_ENV_VAR, \
    LOOP_DEFAULTS, MAIN_SECTIONS, MIN_CHILD_S, PLAN_ENV_VAR, SECTIONS, Settings, names_plan_path
from .networks import ZOO
from .raw import merge, raw_dir, raw_path, write_raw
from .render import render_markdown
from .results import REPO_ROOT, device_slug, progress, write_json

SCRIPT = REPO_ROOT / "benchmarks" / "zoo.py"
# Environment variables that would make a "stock" child run pinned algorithms or a plan.
STOCK_UNSAFE_ENV_PREFIXES = ("TORCH_CUDNN_CONV_", PLAN_ENV_VAR)


def _name_list(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; "
                                             f"choose from {', '.join(allowed)} (comma-separated)")
        return names

    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Zoo benchmark: stock PyTorch vs a tuned plan vs the 'fastest' policy on real networks.",
        epilog=f"networks: {', '.join(ZOO)}")
    parser.add_argument("--networks", type=_name_list(list(ZOO)), default=tuple(ZOO),
                        help="comma-separated networks to measure (default: all)")
    parser.add_argument("--sections", type=_name_list(SECTIONS), default=SECTIONS,
                        help=f"comma-separated, of {','.join(SECTIONS)} (default: all)")
    for name, (default, quick) in LOOP_DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=_positive_int, default=None,
                            help=f"default {default}, with --quick {quick}")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results",
                        help="results folder; raw files go to <out>/raw/zoo (default: benchmarks/results)")
    parser.add_argument("--quick", action="store_true", help="short loops: a smoke run, not a measurement")
    parser.add_argument("--merge-only", action="store_true",
                        help="merge the raw files found into the json and md; measure nothing (no GPU needed)")
    parser.add_argument("--child-timeout", type=_positive_float, default=240.0,
                        help="seconds each child process may run (default 240)")
    parser.add_argument("--budget-s", type=_positive_float, default=None,
                        help="start no child once this many seconds have passed (and cut the last one's "
                             "timeout to fit); the networks left are named, and a later run can add them")
    parser.add_argument("--knob-search", action="store_true",
                        help="conv_knob_search on for tune() and the \"fastest\" mode (main child only)")
    parser.add_argument("--child", choices=CHILD_KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--network", choices=list(ZOO), help=argparse.SUPPRESS)
    parser.add_argument("--plan-path", type=Path, help=argparse.SUPPRESS)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    loops = {}
    for name, (default, quick) in LOOP_DEFAULTS.items():
        given = getattr(args, name)
        loops[name] = given if given is not None else quick if args.quick else default
    return Settings(networks=args.networks, sections=args.sections, out=args.out.resolve(), quick=args.quick,
                    child_timeout_s=args.child_timeout, budget_s=args.budget_s, knob_search=args.knob_search,
                    **loops)


def write_report(out: Path) -> bool:
    """Merges the raw files into ``zoo-<gpu>-<date>.json`` and ``.md`` and prints the markdown;
    False where there is nothing to merge."""
    report = merge(out)
    if report is None:
        progress(f"merge: no raw files with measurements under {raw_dir(out)}")
        return False
    stem = out / f"zoo-{device_slug(report['device'])}-{report['date']}"
    markdown = render_markdown(report)
    write_json(stem.with_suffix(".json"), report)
    stem.with_suffix(".md").write_text(markdown)
    progress(f"wrote {stem}.json and {stem}.md")
    print(markdown, flush=True)
    return True


# ---------------------------------------------------------------------------
# Parent: one network after another, each in fresh child processes
# ---------------------------------------------------------------------------


def child_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without what would pin algorithms or apply a plan (so a stock
    child is stock), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(STOCK_UNSAFE_ENV_PREFIXES)}
    return {**env, **extra}


def parse_child_output(stdout: str) -> dict | None:
    """The JSON result line a child printed last, or None. Other lines (a library printing to
    stdout) are ignored."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(CHILD_RESULT_PREFIX):
            try:
                result = json.loads(line[len(CHILD_RESULT_PREFIX):])
            except json.JSONDecodeError:
                return None
            return result if isinstance(result, dict) else None
    return None


class Budget:
    """The time left for children under ``--budget-s``; without one, every child runs."""

    def __init__(self, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self.started = time.perf_counter()

    def child_timeout(self, child_timeout_s: float) -> float | None:
        """The timeout for the next child, or None where the budget leaves too little to start one."""
        if self.budget_s is None:
            return child_timeout_s
        left = self.budget_s - (time.perf_counter() - self.started)
        return min(child_timeout_s, left) if left >= MIN_CHILD_S else None


def run_child(kind: str, network: str, parts: Sequence[str], settings: Settings, timeout_s: float,
              plan_path: Path, extra_env: dict[str, str] | None = None) -> dict:
    """Runs one child process and returns its result. The raw files of ``parts`` are removed first,
    so that any the child did not write afterwards get its error (a crash, a timeout)."""
    for part in parts:
        raw_path(settings.out, network, part).unlink(missing_ok=True)
    command = [sys.executable, str(SCRIPT), "--child", kind, "--network", network, "--plan-path", str(plan_path),
               *settings.child_argv()]
    started = time.perf_counter()
    progress(f"{network}: {kind} child (fresh process, timeout {timeout_s:.0f} s)")
    try:
        done = subprocess.run(command, env=child_environment(extra_env or {}), stdout=subprocess.PIPE, text=True,
                              timeout=timeout_s, check=False)
        result = parse_child_output(done.stdout) or {
            "error": f"{kind} child: exit status {done.returncode} without a result line (its stderr is above)"}
        for line in done.stdout.splitlines():
            if not line.startswith(CHILD_RESULT_PREFIX):
                print(f"[{network} {kind} stdout] {line}", file=sys.stderr, flush=True)
    except subprocess.TimeoutExpired:
        result = {"error": f"{kind} child timed out after {timeout_s:.0f} s"}
    seconds = time.perf_counter() - started
    for part in parts:
        if not raw_path(settings.out, network, part).exists():
            write_raw(settings, network, part, {"error": result.get("error") or f"{kind} child did not write it",
                                                "child": kind, "child_seconds": seconds}, None)
    progress(f"{network}: {kind} child {'failed: ' + result['error'] if 'error' in result else 'done'} "
             f"in {seconds:.1f} s")
    return result


def cold_jit_cache(plans: Path, network: str) -> dict[str, str]:
    """An empty CUDA JIT cache of the child's own (``CUDA_CACHE_PATH``), unless the caller names
    one: stock's ``benchmark=True`` search runs as on a machine that never ran it, as ``tune()``
    runs on an empty tuning database. The driver's cache of kernels compiled at run time spares a
    later search much of its time (on the H200 ResNeXt's took 12.8 s on an empty cache, 6.3 s in the
    next process on the same cache)."""
    if CUDA_JIT_CACHE_ENV_VAR in os.environ:
        return {}
    return {CUDA_JIT_CACHE_ENV_VAR: str(plans / f"{network}-cuda-jit-cache")}


def run_network(network: str, settings: Settings, budget: Budget, plans: Path) -> bool:
    """The children of one network; False where the budget stopped it before it was done."""
    plan_path = plans / f"{network}.plan.json"
    children: list[tuple[str, list[str], dict[str, str]]] = []
    main_parts = [s for s in MAIN_SECTIONS if s in settings.sections]
    # The main child tunes the plan that the first-step and benchmark children load, and times
    # stock's first step, which the first-step children compare with.
    if main_parts or {"first_step", "benchmark", "fastest_db"} & set(settings.sections):
        children.append(("main", ["setup", *main_parts], {}))
    if "first_step" in settings.sections:
        children.append(("plan_first_step", ["first_step"], {PLAN_ENV_VAR: str(plan_path)}))
        children.append(("names_first_step", ["names_first_step"], {PLAN_ENV_VAR: str(names_plan_path(plan_path))}))
    if "benchmark" in settings.sections:
        children.append(("benchmark", ["benchmark"], cold_jit_cache(plans, network)))
    if "fastest_db" in settings.sections:
        # "fastest" from the environment twice on one tuning database of the network's own: the
        # first run tunes and keeps its decisions, the second should start like a plan.
        fastest = {**dict.fromkeys(FASTEST_ENV, "fastest"), TUNING_DB_ENV_VAR: str(plans / f"{network}-fastest-db")}
        children.append(("fastest_first_run", ["fastest_first_run"], fastest))
        children.append(("fastest_second_run", ["fastest_second_run"], fastest))
    for kind, parts, env in children:
        timeout = budget.child_timeout(settings.child_timeout_s)
        if timeout is None:
            progress(f"{network}: time budget spent; {kind} and later children not started")
            return False
        if kind in ("plan_first_step", "names_first_step") and not plan_path.exists():
            write_raw(settings, network, parts[0],
                      {"error": "no plan file: the main child did not save one (see the setup part)"}, None)
            continue
        run_child(kind, network, parts, settings, timeout, plan_path, env)
    return True


def run_parent(settings: Settings) -> int:
    progress(f"networks {', '.join(settings.networks)}; sections {', '.join(settings.sections)}; "
             f"loops {settings.loops()}; raw files in {raw_dir(settings.out)}")
    unfinished: list[str] = []
    budget = Budget(settings.budget_s)
    plans = Path(tempfile.mkdtemp(prefix="zoo-plans-"))
    # tune() measured as on a machine that never tuned these networks: an empty tuning database
    # for this run, unless the caller names one (to measure a warm one).
    os.environ.setdefault(TUNING_DB_ENV_VAR, str(plans / "tuning-db"))
    try:
        for network in settings.networks:
            try:
                if not run_network(network, settings, budget, plans):
                    unfinished.append(network)
            except Exception:  # noqa: BLE001 - a bug around one network must not cost the others
                traceback.print_exc()
                unfinished.append(network)
    finally:
        shutil.rmtree(plans, ignore_errors=True)
    written = write_report(settings.out)
    if unfinished:
        progress(f"not finished (run again with --networks {','.join(unfinished)}): {', '.join(unfinished)}")
    return 0 if written and not unfinished else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from(args)
    if args.child:
        if args.network is None or args.plan_path is None:
            print("zoo.py: --child needs --network and --plan-path", file=sys.stderr)
            return 2
        from .measure import run_as_child  # needs torch and the package

        return run_as_child(args, settings)
    if args.merge_only:
        return 0 if write_report(settings.out) else 1
    progress(f"command: {shlex.join([sys.executable, *sys.argv])}")
    return run_parent(settings)
