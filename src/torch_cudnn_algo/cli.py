"""The ``torch-cudnn-algo`` command (also ``python -m torch_cudnn_algo``).

    torch-cudnn-algo info                      # versions, GPU, flags and plan in force (no GPU needed)
    torch-cudnn-algo list "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
    torch-cudnn-algo profile "conv2d ..." [--plot time_vs_workspace.png]
    torch-cudnn-algo tune [module:callable] [--output plan.json]

Commands that need a GPU exit with status 2 and one line saying why when
there is none.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence

import torch

from . import _benchmark_child, _step_timing, _text_table, _version_gate
from ._energy import EnergyUnavailable
from ._workload import AMP_DTYPES, DEFAULT_NET_TEXT, build_workload, energy_settings, workload_arguments

EXIT_NO_GPU = 2
DEFAULT_PLAN_PATH = "torch-cudnn-algo-plan.json"


class GpuUnavailable(Exception):
    """A command needs what this machine lacks (one line, exit status 2)."""


def _require_gpu(command: str) -> None:
    import torch_cudnn_algo

    if not torch.cuda.is_available():
        raise GpuUnavailable(f"torch-cudnn-algo {command}: needs a CUDA GPU, and torch.cuda.is_available() "
                             "is False here")
    if not torch_cudnn_algo.is_available():
        raise GpuUnavailable(f"torch-cudnn-algo {command}: the C++ extension is not loaded "
                             f"({torch_cudnn_algo.load_error()})")


def _conv_argument(text: str):
    from torch_cudnn_algo import ConvSpec

    try:
        return ConvSpec.parse(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("conv", type=_conv_argument,
                        help='the convolution, e.g. "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"')
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="allow TF32 for float32 (default: torch.backends.cudnn.allow_tf32)")
    parser.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=None,
                        help="require deterministic algorithms (default: torch's settings)")


# -- info ----------------------------------------------------------------------

class _PrintVersion(argparse.Action):
    """``--version``: prints :func:`version_text` as one line and exits (argparse's own
    version action wraps it at the terminal's width)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    """``torch-cudnn-algo 0.1.0+cu130torch2.11 (built for torch 2.11, CUDA 13.0, cuDNN 9.19.0); running torch ...``."""
    import torch_cudnn_algo
    from torch_cudnn_algo import _extension

    built = _extension.build_info()
    if built is None:
        made = f"{torch_cudnn_algo.__version__} (an in-place or editable build: what it was built for is not recorded)"
    else:
        kernels = f"our kernels for {built['KERNEL_ARCHS']}" if built.get("KERNEL_ARCHS") else "without our kernels"
        made = (f"{built['VERSION']} (built for torch {_version_gate.major_minor(built['TORCH'])}, CUDA {built['CUDA']}, "
                f"cuDNN {built['CUDNN']}, {kernels})")
    return f"torch-cudnn-algo {made}; running torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"


def _info(_args: argparse.Namespace) -> int:
    import torch_cudnn_algo
    from torch_cudnn_algo import _flags, _plan

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    print(f"torch-cudnn-algo {torch_cudnn_algo.__version__}")
    print(f"torch            {torch.__version__}")
    print(f"CUDA             {torch.version.cuda or 'none (a CPU build of torch)'}")
    print(f"cuDNN            {_version_gate.cudnn_version_string(cudnn) if cudnn is not None else 'not available'}")
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            print(f"GPU {index}            {torch.cuda.get_device_name(index)}")
    else:
        print("GPU              none (torch.cuda.is_available() is False)")
    loaded = torch_cudnn_algo.is_available()
    print(f"extension        {'loaded' if loaded else 'NOT loaded: ' + str(torch_cudnn_algo.load_error())}")
    print("flags in force (torch.backends.cudnn):")
    for name in _flags.FLAGS:
        print(f"  {name} = {_flags.get_flag(name)!r}")
    plan = _plan.current_plan()
    if plan is None:
        env = os.environ.get(_plan.ENV_VAR)
        print(f"plan in force    none{f' ({_plan.ENV_VAR}={env} was not applied)' if env else ''}")
    else:
        print(f"plan in force    {plan.source or 'set in this process'}: {len(plan)} configurations, "
              f"policy {plan.policy}, made {plan.created} with cuDNN {_version_gate.cudnn_version_string(plan.cudnn)} "
              f"on {plan.gpu}")
    return 0


# -- db --------------------------------------------------------------------------

def _db(args: argparse.Namespace) -> int:
    from torch_cudnn_algo import _db, _extension

    if not _extension.is_loaded():
        print(f"torch-cudnn-algo db: the C++ extension is not loaded ({_extension.load_error()})", file=sys.stderr)
        return 1
    directory = _db.directory()
    if directory is None:
        print("the tuning database is off (TORCH_CUDNN_ALGO_DB=0, or no home directory to keep it in)")
        return 0
    if args.action == "clear":
        print(f"removed {_db.clear()} entries from {directory}")
        return 0
    if args.action in ("import", "export") and not args.path:
        print(f"torch-cudnn-algo db {args.action}: give the "
              f"{'directory of the database to merge' if args.action == 'import' else 'plan file to write'}",
              file=sys.stderr)
        return 2
    if args.action == "import":
        try:
            report = _db.merge(args.path)
        except ValueError as exc:
            print(f"torch-cudnn-algo db import: {exc}", file=sys.stderr)
            return 2
        print(f"merged {args.path} into {directory}: {report.added} added, {report.replaced} replaced, "
              f"{report.kept} kept, {len(report.conflicts)} conflicts")
        for conflict in report.conflicts:
            here, merged = conflict["here"], conflict["merged"]
            spec = _db._configuration({"configuration": conflict["configuration"]})
            print(f"  {spec}: here {here['pick'] or 'stock'} ({here['pick_ms']} ms, {here['host']}), "
                  f"merged {merged['pick'] or 'stock'} ({merged['pick_ms']} ms, {merged['host']}): "
                  f"kept {conflict['kept']} ({conflict['by']})")
        return 0
    if args.action == "export":
        try:
            plan = _db.export_plan(args.gpu)
        except ValueError as exc:
            print(f"torch-cudnn-algo db export: {exc}", file=sys.stderr)
            return 2
        plan.save(args.path)
        print(f"wrote {args.path}: {len(plan)} configurations decided on {plan.gpu or 'no GPU'}; use it with "
              f"TORCH_CUDNN_ALGO_PLAN={args.path}")
        return 0
    entries = [entry for entry in _db.entries() if args.kind in (None, entry.kind)]
    total = sum(entry.bytes for entry in entries)
    print(f"tuning database {directory}: {len(entries)} entries, {total / 2**20:.1f} MiB "
          f"(bound {_db.max_bytes() / 2**20:.0f} MiB, TORCH_CUDNN_ALGO_DB_MAX_MB)")
    def ms(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

    rows = [("kind", "choice", "ms", "stock ms", "saved", "host", "KiB", "configuration")]
    for entry in sorted(entries, key=lambda e: (e.kind, str(e.configuration))):
        if entry.kind == "decision":
            pick = entry.header.get("pick")
            choice = ("stock's path" if pick is None else str(pick)) + (" (borrowed)" if entry.borrowed else "")
        else:
            choice = str(entry.header.get("engine", "-"))
        rows.append((entry.kind, choice, ms(entry.header.get("pick_ms")), ms(entry.header.get("stock_config_ms")),
                     entry.saved or "-", entry.host or "-", f"{entry.bytes / 1024:.1f}",
                     str(entry.configuration or "(unreadable)")))
    print("\n".join(_text_table.aligned(rows, free_last=True)))
    return 0


# -- list, profile ---------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("list")
    candidates = torch_cudnn_algo.list_algorithms(args.conv, allow_tf32=args.tf32,
                                                  deterministic=args.deterministic)
    print(f"{args.conv}: {sum(c.ok for c in candidates)} of {len(candidates)} candidates can run it "
          "(nothing executed)")
    rows = [("value", "kind", "source", "workspace", "deterministic", "status", "notes")]
    for c in candidates:
        workspace = "-" if c.workspace is None else f"{c.workspace / 2**20:.2f} MiB"
        rows.append((repr(c.value), c.kind, c.label, workspace, "yes" if c.deterministic else "no", c.status,
                     ",".join(c.notes)))
    print("\n".join(_text_table.aligned(rows, free_last=True)))
    return 0


def _profile(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("profile")
    energy: bool | object = False
    if args.energy:
        from torch_cudnn_algo._profile_energy import PROFILE_ENERGY

        energy = dataclasses.replace(PROFILE_ENERGY, window_s=args.energy_window_s, rounds=args.energy_rounds)
    table = torch_cudnn_algo.profile(args.conv, allow_tf32=args.tf32, deterministic=args.deterministic,
                                     reps=args.reps, energy=energy, energy_within=args.energy_within,
                                     energy_candidates=args.energy_candidates)
    print(f"{args.conv}")
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            file.write(table.to_json(indent=1) + "\n")
        print(f"table written to {args.json}")
    if args.plot:
        from torch_cudnn_algo._plot import plot_profile

        plot_profile(table, args.plot)
        print(f"time against workspace plotted to {args.plot}")
    if args.energy_plot:
        from torch_cudnn_algo._plot import plot_profile_energy

        plot_profile_energy(table, args.energy_plot)
        print(f"energy against time plotted to {args.energy_plot}")
    return 0


# -- tune ------------------------------------------------------------------------

BENCHMARK_LABEL = "stock benchmark=True (fresh process)"
BENCHMARK_MODULE = _benchmark_child.MODULE
TUNE_DESCRIPTION = """\
Tunes every cuDNN convolution configuration one training step (forward and
backward) of the model runs, prints each choice, writes the plan, and compares
the training step three ways:

  stock heuristics                       this process, torch.backends.cudnn.benchmark=False
  stock benchmark=True (fresh process)   a child process (python -m torch_cudnn_algo._benchmark_child)
                                         with the same model, inputs, autocast and seed; stock keeps
                                         one cache of execution plans for its two modes, so
                                         benchmark=True searches only in a process that never ran
                                         these convolutions
  tuned plan                             this process, the plan in use; it alternates with stock
                                         heuristics round by round

per step: wall ms (median, min-max over --rounds rounds of --steps eager steps),
GPU ms (kernel time of 2 steps under torch.profiler), the convolutions' share of
it, energy in joules (NVML, where the GPU has the counter, else n/a) and the
seconds each took to decide (tune() vs benchmark=True's first step); then the
tuned plan's ratios to each stock mode. A failed benchmark child is reported
and the rest stands.

Without a model: an embedded mixed CNN (ResNet stem and 3x3/1x1 bottlenecks,
ResNeXt grouped 3x3 with 32 groups, inverted residuals with depthwise 3x3/5x5
and squeeze-excite; random weights) at --batch and --image-size, channels_last.
"""


@dataclasses.dataclass
class StepRow:
    """One row of the summary: a mode's per-round measurements (``_step_timing.MEASURES``),
    the seconds it took to decide its algorithms, or why it has no numbers."""

    label: str
    times: Mapping[str, Sequence[float | None]] | None = None
    decide_s: float | None = None
    decide_what: str = ""
    failure: str | None = None


def _values(row: StepRow, measure: str) -> list[float]:
    return [v for v in (row.times or {}).get(measure, ()) if v is not None]


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _spread(values: Sequence[float], digits: int) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _ratio(stock: float | None, tuned: float | None) -> float | None:
    return stock / tuned if stock is not None and tuned else None


def _paired_ratios(stock: StepRow, tuned: StepRow, measure: str) -> list[float]:
    """Per-round stock/tuned ratios of two modes timed in the same rounds."""
    pairs = zip((stock.times or {}).get(measure, ()), (tuned.times or {}).get(measure, ()))
    return [s / t for s, t in pairs if s is not None and t]


def _num(value: float | None, digits: int, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned first column, right-aligned others; a row of two cells is a label and a
    message that runs across the other columns."""
    return _text_table.aligned(rows, right=range(1, max(len(row) for row in rows)), gap="   ", indent="  ")


_RATIO_MEASURES = (("wall_ms", "wall"), ("gpu_ms", "GPU"), ("conv_ms", "conv GPU"), ("energy_j", "energy"))


def format_summary(heuristics: StepRow, benchmark: StepRow, tuned: StepRow, *, rounds: int, steps: int,
                   energy_note: str = "", aa: StepRow | None = None, energy_summary: str = "") -> str:
    """The tune command's summary: one row per mode (stock heuristics, stock benchmark=True
    from another process, the tuned plan; ``aa``: stock heuristics measured again for energy,
    the A/A control), then the tuned plan's ratios to each stock mode and the A/A's."""
    rows: list[Sequence[str]] = [("mode", "wall ms/step", "GPU ms/step", "conv GPU ms", "J/step", "decide s"),
                                 ("", "median (min-max)", "median (min-max)", "median", "median (min-max)", "")]
    for row in (heuristics, benchmark, tuned, *((aa,) if aa is not None else ())):
        if row.times is None:
            rows.append((row.label, row.failure or "not measured"))
            continue
        decide = "-" if row.decide_s is None else f"{row.decide_s:.1f} ({row.decide_what})"
        rows.append((row.label, _spread(_values(row, "wall_ms"), 2) if _values(row, "wall_ms") else "-",
                     _spread(_values(row, "gpu_ms"), 2) if _values(row, "gpu_ms") else "-",
                     _num(_median(_values(row, "conv_ms")), 2) if _values(row, "conv_ms") else "-",
                     _spread(_values(row, "energy_j"), 3), decide))
    ratios: list[Sequence[str]] = [("tuned plan vs", *(name for _, name in _RATIO_MEASURES), "decide")]
    if heuristics.times is not None and tuned.times is not None:
        ratios.append(("stock heuristics (per round)", *(_spread(_paired_ratios(heuristics, tuned, measure), 3)
                                             for measure, _ in _RATIO_MEASURES), "-"))
    else:
        ratios.append(("stock heuristics (per round)", heuristics.failure or tuned.failure or "not measured"))
    if aa is not None and aa.times is not None and heuristics.times is not None:
        ratios.append(("stock heuristics A/A (per round)", "-", "-", "-",
                       _spread(_paired_ratios(heuristics, aa, "energy_j"), 3), "-"))
    if benchmark.times is not None and tuned.times is not None:
        decide = (f"{benchmark.decide_s / tuned.decide_s:.1f}" if benchmark.decide_s is not None and tuned.decide_s
                  else "n/a")
        ratios.append(("stock benchmark=True (medians)", *(_num(_ratio(_median(_values(benchmark, measure)),
                                                             _median(_values(tuned, measure))), 3)
                                                           for measure, _ in _RATIO_MEASURES), decide))
    else:
        ratios.append(("stock benchmark=True (medians)", benchmark.failure or tuned.failure or "not measured"))
    notes = [
        f"wall: {steps} eager steps per round. GPU: every kernel's duration summed over 2 steps under "
        "torch.profiler (no launch gaps); conv GPU: the convolution ops' kernels alone. J/step: NVML's energy "
        "counter over windows of whole eager steps, stock heuristics and the tuned plan alternated in this process "
        "after a warm-up, stock heuristics measured twice (the A/A row: two identical modes differ by this much, "
        "so a smaller difference is not resolved); the benchmark=True row's J/step is from its own process, "
        f"against its own A/A{energy_note}. decide s: tune() for the tuned plan (its recording pass, a "
        "first step on stock's heuristics, included); the first step for benchmark=True (its search and "
        "execution plan builds).",
        f"The benchmark=True row comes from another process (python -m {BENCHMARK_MODULE}): stock shares one "
        "cache of execution plans between benchmark=True and its heuristics, so benchmark=True searches only in a process that never "
        "ran these convolutions. Its rounds did not alternate with the other two rows', so the tuned plan is "
        "compared with it by medians, and with stock heuristics by per-round ratios.",
    ]
    lines = [f"training step (forward + backward), {rounds} rounds per mode:", *_table(rows),
             "ratios, stock's / tuned's (above 1: the tuned plan is faster, uses less energy, decides sooner):",
             *_table(ratios)]
    lines += [textwrap.fill(note, width=110) for note in notes]
    if energy_summary:
        lines.append(textwrap.fill(f"energy: {energy_summary}", width=110))
    return "\n".join(lines)


def _benchmark_row(args: argparse.Namespace) -> StepRow:
    """Stock benchmark=True from the child process, or a row saying why there is none."""
    if not args.benchmark_baseline:
        return StepRow(BENCHMARK_LABEL, failure="skipped (--no-benchmark-baseline)")
    print(f"{BENCHMARK_LABEL}: measuring in a child process (python -m {_benchmark_child.MODULE}, "
          f"timeout {args.benchmark_timeout:.0f} s) ...", flush=True)
    torch.cuda.empty_cache()  # the child's memory: what this process cached and no longer uses
    try:
        result = _benchmark_child.run_child(args, args.benchmark_timeout)
    except _benchmark_child.BenchmarkChildError as exc:
        print(f"{BENCHMARK_LABEL}: failed, the other rows stand: {exc}", flush=True)
        return StepRow(BENCHMARK_LABEL, failure=f"failed: {str(exc).splitlines()[0]}")
    print(f"{BENCHMARK_LABEL}: first step (the search) {result['first_step_s']:.1f} s, "
          f"second step {float(result.get('second_step_s') or 0.0) * 1e3:.0f} ms", flush=True)
    return StepRow(BENCHMARK_LABEL, {m: result.get(m, []) for m in _step_timing.MEASURES},
                   decide_s=float(result["first_step_s"]), decide_what="first step")


_ALGO_FLAGS = ("conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo")


@contextlib.contextmanager
def _stock() -> Iterator[None]:
    """Stock PyTorch: no plan and no algorithm flag (one set from the environment included,
    as the benchmark child has none)."""
    import torch_cudnn_algo

    with torch_cudnn_algo.use_plan(None), torch_cudnn_algo.flags(**dict.fromkeys(_ALGO_FLAGS)):
        yield


def _energy_note(args: argparse.Namespace, times: Mapping[str, Mapping[str, Sequence[float | None]]],
                 why: str = "") -> str:
    """Why the energy column says n/a, where it does (``why``: what the measurement said)."""
    measured = [v for mode in times.values() for v in mode.get("energy_j", ())]
    if not args.energy:
        return " (n/a: --no-energy)"
    if not measured:
        return f" (n/a: {why or 'this GPU or driver has no counter'})"
    if all(v is None for v in measured):
        return " (n/a: the counter did not update often enough to measure)"
    return ""


def _census_text(model: torch.nn.Module) -> str:
    from torch_cudnn_algo._default_net import conv_census

    census = conv_census(model)
    return f"{sum(census.values())} convolutions: " + ", ".join(f"{count} {kind}" for kind, count in census.items())


def _tune(args: argparse.Namespace) -> int:
    import torch_cudnn_algo

    _require_gpu("tune")
    directions = tuple(args.directions.split(","))
    model, inputs = build_workload(args)
    amp = AMP_DTYPES[args.amp]
    what = args.model or (f"{DEFAULT_NET_TEXT}, batch {args.batch}, {args.image_size}x{args.image_size}, "
                          f"channels_last; {_census_text(model)}")
    print(f"model: {what}; autocast {args.amp}; seed {args.seed}; policy {args.policy}; "
          f"directions {', '.join(directions)}")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {_version_gate.cudnn_version_string(torch.backends.cudnn.version())}")
    _step_timing.warm_up_cuda()  # as the benchmark child does before its first step
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        started = time.perf_counter()
        plan = torch_cudnn_algo.tune(model, inputs, policy=args.policy, directions=directions,
                                     progress=not args.no_progress, execution_plans=args.execution_plans,
                                     time_guard=args.time_guard, energy_budget_s=args.energy_budget_s)
        torch.cuda.synchronize()
    tune_seconds = time.perf_counter() - started
    print(f"tuned {len(plan)} configurations in {tune_seconds:.1f} s")
    print(plan.format())
    changed = sum(1 for e in plan.entries.values() if e.time_ms and e.stock_ms and e.time_ms < e.stock_ms * 0.99)
    print(f"{changed} of {len(plan)} configurations run something faster than stock's own configuration")
    print(own_kernel_summary(torch_cudnn_algo.diagnostics.tuning_log()))
    plan.save(args.output)
    engines = [e for e in plan.entries.values() if isinstance(e.choice, str)]
    built = sum(1 for e in engines if e.execution_plan is not None)
    print(f"plan written to {args.output} ({os.path.getsize(args.output) / 1024:.0f} KiB; {built} of "
          f"{len(engines)} engine configurations with their built execution plans)")

    def step() -> None:
        _step_timing.training_step(model, inputs, amp)
        for parameter in model.parameters():
            parameter.grad = None

    print(f"timing stock heuristics and the tuned plan in this process, {args.rounds} alternating rounds ...",
          flush=True)
    modes = {"stock": _stock, "tuned": lambda: torch_cudnn_algo.use_plan(plan)}
    times = _step_timing.measure_modes(step, modes, args.rounds, args.steps)
    aa, why, summary = None, "", ""
    if args.energy:
        settings = energy_settings(args)
        print(f"measuring energy per step: stock heuristics, the tuned plan and stock again (A/A) alternated, "
              f"{settings.rounds} rounds of {settings.window_s:g} s windows after a warm-up ...", flush=True)
        report, why = _step_timing.step_energy(step, modes, settings)
        for mode in modes:
            times[mode]["energy_j"] = _step_timing.per_round_joules(report, mode)
        if report is not None:
            aa = StepRow("stock heuristics (A/A, energy only)",
                         {"energy_j": _step_timing.per_round_joules(report, report.aa_label or "")})
            summary = report.summary()
    benchmark = _benchmark_row(args)
    print(format_summary(StepRow("stock heuristics", times["stock"]), benchmark,
                         StepRow(f"tuned plan ({args.policy})", times["tuned"], tune_seconds, "tune()"),
                         rounds=args.rounds, steps=args.steps, energy_note=_energy_note(args, times, why), aa=aa,
                         energy_summary=summary))
    print(f"use the plan with TORCH_CUDNN_ALGO_PLAN={args.output} python train.py "
          "or torch_cudnn_algo.use_plan(torch_cudnn_algo.load_plan(path))")
    return 0


def own_kernel_summary(log: list[dict]) -> str:
    """One line on what our kernels ("tca.direct") won in a tuning: how many configurations
    picked them, and their time on those against the best of cuDNN's candidates the tuner timed
    there (each configuration once, as the tuner measured it)."""
    from torch_cudnn_algo._algorithms import KERNELS

    ours = [entry for entry in log if entry.get("pick") in KERNELS]
    if not log:
        return "our kernels: nothing was tuned in this process (every decision came from the tuning database)"
    if not ours:
        return f"our kernels (tca.direct): picked for none of the {len(log)} tuned configurations"
    kernel_ms = cudnn_ms = 0.0
    for entry in ours:
        timed = [c["ms"] for c in entry.get("configs", []) if c.get("config") not in KERNELS and c.get("runnable")
                 and isinstance(c.get("ms"), (int, float))]
        best = min(timed, default=entry.get("stock_config_ms"))
        if isinstance(best, (int, float)) and isinstance(entry.get("pick_ms"), (int, float)):
            kernel_ms += entry["pick_ms"]
            cudnn_ms += best
    gain = f" ({cudnn_ms / kernel_ms:.2f}x)" if kernel_ms > 0 else ""
    return (f"our kernels (tca.direct): picked for {len(ours)} of {len(log)} tuned configurations; there "
            f"{kernel_ms:.3f} ms against {cudnn_ms:.3f} ms for the best of cuDNN's candidates{gain}, "
            "each configuration once")


# -- parser ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch-cudnn-algo",
        description="Choose, profile and plan the cuDNN convolution algorithms PyTorch runs.")
    parser.add_argument("--version", action=_PrintVersion,
                        help="this package's version, what its extension was built for, and the torch running")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = commands.add_parser("info", help="torch, CUDA, cuDNN, GPU, flags and plan in force (no GPU needed)")
    info.set_defaults(run=_info)

    db = commands.add_parser("db", help="the tuning database: list, import another, export a plan, clear "
                                         "(no GPU needed)")
    db.add_argument("action", nargs="?", choices=("list", "import", "export", "clear"), default="list",
                    help="list the entries (default); import (merge) another database's directory; export the "
                         "decisions as a plan file; clear every entry")
    db.add_argument("path", nargs="?", help="import: the other database's directory; export: the plan file to write")
    db.add_argument("--kind", choices=("decision", "execution_plan"), help="list only entries of this kind")
    db.add_argument("--gpu", help="export: the GPU model whose decisions to export (default: the only one)")
    db.set_defaults(run=_db)

    listing = commands.add_parser("list", help="candidates that can run a convolution (nothing executed)")
    _settings_arguments(listing)
    listing.set_defaults(run=_list)

    prof = commands.add_parser("profile", help="run and time every candidate of a convolution")
    _settings_arguments(prof)
    prof.add_argument("--reps", type=int, default=20, help="timed calls per candidate (median reported)")
    prof.add_argument("--energy", action=argparse.BooleanOptionalAction, default=False,
                      help="also energy per call from NVML's counter, against stock's configuration with an A/A "
                           "control, for the candidates within --energy-within of stock's time (default: off; "
                           "about 3-4 s per candidate measured plus up to 30 s of warm-up; see docs/energy.md)")
    prof.add_argument("--energy-within", type=float, default=0.10, metavar="FRACTION",
                      help="measure energy only for candidates at most this much slower than stock (default 0.10)")
    prof.add_argument("--energy-candidates", type=int, default=6,
                      help="measure energy for at most this many candidates, fastest first (default 6)")
    prof.add_argument("--energy-window-s", type=float, default=1.0, metavar="SECONDS",
                      help="least length of an energy window (default 1.0)")
    prof.add_argument("--energy-rounds", type=int, default=3, help="energy windows per candidate (default 3)")
    prof.add_argument("--energy-plot", metavar="FILE.png", help="with --energy: draw energy per call against "
                      "time per call, one point per candidate measured, stock marked (needs matplotlib)")
    prof.add_argument("--plot", metavar="FILE.png", help="draw time against workspace per candidate "
                      "(needs matplotlib: pip install 'torch-cudnn-algo[plot]')")
    prof.add_argument("--json", metavar="FILE.json", help="also write the table as JSON")
    prof.set_defaults(run=_profile)

    tune = commands.add_parser(
        "tune", help="tune a model's convolutions, compare step time with stock, write a plan",
        description=TUNE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_arguments(tune)
    tune.add_argument("--policy", choices=("fastest", "least_workspace", "lowest_energy"), default="fastest",
                      help="how each configuration is decided (default fastest; lowest_energy: see --time-guard)")
    tune.add_argument("--time-guard", type=float, default=0.02, metavar="FRACTION",
                      help="lowest_energy: a pick is at most this much slower than stock's configuration "
                           "(default 0.02)")
    tune.add_argument("--energy-budget-s", type=float, default=300.0, metavar="SECONDS",
                      help="lowest_energy: seconds of time profiles and energy measuring at most, longest "
                           "configurations first (default 300)")
    tune.add_argument("--directions", default="fwd,bwd_data,bwd_filter",
                      type=_directions_argument, help="comma-separated cuDNN directions to plan (default all three)")
    tune.add_argument("--output", "-o", default=DEFAULT_PLAN_PATH, help=f"plan file (default {DEFAULT_PLAN_PATH})")
    tune.add_argument("--benchmark-baseline", action=argparse.BooleanOptionalAction, default=True,
                      help="also measure stock torch.backends.cudnn.benchmark=True, in a fresh child process "
                           "(default: on; --no-benchmark-baseline skips it)")
    tune.add_argument("--benchmark-timeout", type=float, default=900.0, metavar="SECONDS",
                      help="give up on the benchmark=True child after this long (default 900); the rest of the "
                           "output stands")
    tune.add_argument("--no-progress", action="store_true", help="no progress bar")
    tune.add_argument("--execution-plans", action=argparse.BooleanOptionalAction, default=True,
                      help="keep each engine configuration's built execution plan in the plan, so that "
                           "loading it compiles nothing (default: on)")
    tune.set_defaults(run=_tune)
    return parser


def _directions_argument(text: str) -> str:
    from torch_cudnn_algo._conv_spec import DIRECTION_NAMES

    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in DIRECTION_NAMES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"directions are a comma-separated subset of {','.join(DIRECTION_NAMES)}, "
                                         f"got {text!r}")
    return ",".join(names)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("reps", "batch", "image_size", "rounds", "steps", "benchmark_timeout", "energy_window_s",
                 "energy_rounds", "energy_candidates"):
        if getattr(args, name, 1) < 1:
            print(f"torch-cudnn-algo {args.command}: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    for name in ("energy_within", "time_guard", "energy_budget_s"):
        if getattr(args, name, 0) < 0:
            print(f"torch-cudnn-algo {args.command}: --{name.replace('_', '-')} must be >= 0", file=sys.stderr)
            return 2
    if getattr(args, "energy_plot", None) and not args.energy:
        print(f"torch-cudnn-algo {args.command}: --energy-plot needs --energy", file=sys.stderr)
        return 2
    try:
        return args.run(args)
    except GpuUnavailable as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_GPU
    except EnergyUnavailable as exc:
        print(f"torch-cudnn-algo {args.command}: {exc}", file=sys.stderr)
        return EXIT_NO_GPU


if __name__ == "__main__":
    sys.exit(main())
