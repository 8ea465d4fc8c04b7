"""Energy per training step on the zoo: stock heuristics, the ``"fastest"`` plan and the
``"lowest_energy"`` plan, measured alternately in one process, with the A/A control beside each.

    python benchmarks/energy.py --networks mobilenet_v3_large --window-s 2 --rounds 5
    python benchmarks/energy.py --render FILE.json      # no GPU

One fresh child process per network: it tunes the ``"fastest"`` plan and the ``"lowest_energy"``
plan (``tune(policy="lowest_energy")`` with ``--time-guard`` and ``--tune-energy-budget-s``),
captures the whole training step (the zoo's: forward, loss, backward, SGD) as a CUDA graph under
each mode, then measures:

- the learning rate set to 0 before capture, so that the weights stay finite and the same over
  thousands of replays while each replay does a training step's work;
- GPU ms per step: each graph replayed ``--replays`` times between CUDA events, ``--repeats``
  times in rotated order, stock twice (its A/A);
- J per step: ``torch_cudnn_algo.energy.measure`` over the graph replays (no host time in them):
  a warm-up to a steady temperature, ``--rounds`` rounds of ``--window-s`` windows aligned to NVML's
  energy counter, the modes in rotated order, stock measured twice (the A/A control), and NVML's
  power readings integrated over the same windows as the second source;
- per network, the best energy/time trade found: the mode with the least energy within the time
  guard of stock's GPU time, and the largest per-convolution saving ``"lowest_energy"`` measured.

Results go to ``<out>/energy-<gpu>-<date>.json`` and ``.md``; a network measured again replaces
its entry, the others are kept, so the networks can be measured one call at a time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .cli import child_environment, parse_child_output
from .config import CHILD_RESULT_PREFIX, WARMUP_STEPS
from .networks import ZOO
from .results import REPO_ROOT, device_slug, environment, error_text, now_iso, progress, publish, set_progress_label, \
    write_json
from .stats import num, rotated

SCRIPT = REPO_ROOT / "benchmarks" / "energy.py"
MODES = ("stock", "fastest", "lowest_energy")
AA = "stock (A/A)"
DEFAULT_NETWORKS = ("mobilenet_v3_large", "resnet50_amp")
MIN_CHILD_S = 60.0


# ------------------------------------------------------------------------------- child side


def _plans(trainer, settings: argparse.Namespace) -> tuple[dict, dict]:
    """The "fastest" and "lowest_energy" plans of the trainer's step, and what tuning them took."""
    import torch
    import torch_cudnn_algo

    from .internal import energy_decisions
    from .networks import loss_of

    plans, tuning = {}, {}
    for policy, options in (("fastest", {"retune": True}),
                            ("lowest_energy", {"time_guard": settings.time_guard,
                                               "energy_budget_s": settings.tune_energy_budget_s,
                                               "energy_settings": torch_cudnn_algo.energy.EnergySettings(
                                                   window_s=settings.tune_window_s, rounds=3)})):
        torch.cuda.synchronize()
        started = time.perf_counter()
        with trainer.autocast():
            plans[policy] = torch_cudnn_algo.tune(trainer.model, trainer.inputs, policy=policy, loss_fn=loss_of,
                                                  progress=False, **options)
        torch.cuda.synchronize()
        entries = plans[policy].entries.values()
        tuning[policy] = {"seconds": time.perf_counter() - started, "configurations": len(plans[policy]),
                          "not_stock": sum(1 for entry in entries if entry.choice is not None)}
        progress(f"tune({policy}) {tuning[policy]['seconds']:.1f} s: {tuning[policy]['not_stock']} of "
                 f"{tuning[policy]['configurations']} configurations not stock's")
    tuning["lowest_energy"]["decisions"] = energy_decisions()
    return plans, tuning


def _graphs(trainer, plans: dict) -> tuple[dict, dict]:
    """A CUDA graph of the whole step under each mode (one shared pool), and capture errors."""
    import contextlib

    import torch

    from .measure import applied
    from .timing import capture_trainer_step

    graphs, errors, pool = {}, {}, None
    for mode in MODES:
        context = applied("stock", None) if mode == "stock" else applied("plan", plans[mode])
        try:
            with context:
                graphs[mode] = capture_trainer_step(trainer, pool)
            pool = pool or graphs[mode].pool()
        except Exception as exc:  # noqa: BLE001 - recorded; the mode is left out
            errors[mode] = f"CUDA graph capture failed: {error_text(exc)}"
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
    return graphs, errors


def _gpu_ms(graphs: dict, repeats: int, replays: int) -> dict[str, list[float]]:
    """GPU ms per step of each graph, ``repeats`` times in rotated order, stock twice (A/A)."""
    from .timing import replay_ms

    labels = [*graphs, AA] if "stock" in graphs else list(graphs)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for index in range(repeats):
        for label in rotated(labels, index):
            samples[label].append(replay_ms(graphs["stock" if label == AA else label], replays))
    return samples


def child(network: str, settings: argparse.Namespace) -> dict:
    import torch
    import torch_cudnn_algo

    from .networks import build_trainer
    from .timing import DEVICE, warm_up_cuda

    set_progress_label(f"energy {network}")
    if not torch_cudnn_algo.is_available():
        raise RuntimeError(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    why = torch_cudnn_algo.energy.unavailable()
    if why is not None:
        raise RuntimeError(f"GPU energy cannot be measured here: {why}")
    trainer, workload = build_trainer(network, DEVICE)
    warm_up_cuda()
    for _ in range(WARMUP_STEPS):
        trainer.step()
    plans, tuning = _plans(trainer, settings)
    # Thousands of replays follow: with the learning rate at 0 the weights stay as they are (no
    # drift to inf/NaN, whose arithmetic draws other power than training's), and every replay does
    # the same work (the optimizer's kernels still run).
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0
    graphs, errors = _graphs(trainer, plans)
    if "stock" not in graphs:
        raise RuntimeError(errors.get("stock", "stock's step could not be captured"))
    gpu = _gpu_ms(graphs, settings.repeats, settings.replays)
    progress("GPU ms per step: " + ", ".join(f"{label} {num(min(values), 3)}" for label, values in gpu.items()))
    warmup = torch_cudnn_algo.energy.WarmupRule(max_s=settings.warmup_max_s)
    energy = torch_cudnn_algo.energy.EnergySettings(window_s=settings.window_s, rounds=settings.rounds, warmup=warmup)
    report = torch_cudnn_algo.energy.measure({mode: graph.replay for mode, graph in graphs.items()},
                                             reference="stock", settings=energy, progress=progress)
    progress(f"energy: {report.summary()}")
    return {"workload": workload, "tuning": tuning, "capture_errors": errors, "gpu_ms": gpu,
            "energy": report.to_dict(), "time_guard": settings.time_guard}


# ------------------------------------------------------------------------------- the numbers


def _spread(values: list[float | None]) -> dict | None:
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    middle = len(present) // 2
    median = present[middle] if len(present) % 2 else (present[middle - 1] + present[middle]) / 2
    return {"median": median, "min": present[0], "max": present[-1], "n": len(present)}


def _paired(values: list[float | None], reference: list[float | None]) -> dict | None:
    return _spread([v / r if v is not None and r else None for v, r in zip(values, reference)])


def summarize(result: dict) -> dict:
    """Per mode: GPU ms and J per step with their ratio to stock per round, the A/A of each, the
    counter against the power readings; the best trade within the time guard."""
    gpu, energy = result.get("gpu_ms", {}), result.get("energy", {})
    modes = energy.get("modes", {})
    stock_ms = gpu.get("stock", [])
    rows = {}
    for label in (*MODES, AA):
        mode = modes.get(label)
        if label not in gpu and mode is None:
            continue
        rows[label] = {"gpu_ms": _spread(gpu.get(label, [])),
                       "gpu_vs_stock": _paired(gpu.get(label, []), stock_ms) if label != "stock" else None,
                       "j_per_step": (mode or {}).get("j_per_call"),
                       "j_vs_stock": (mode or {}).get("vs_reference") if label != "stock" else None,
                       "counter_vs_power": (mode or {}).get("counter_vs_power")}
    guard = result.get("time_guard", 0.02)
    within = [(label, row) for label, row in rows.items() if label in MODES[1:] and row["j_vs_stock"]
              and row["gpu_vs_stock"] and row["gpu_vs_stock"]["median"] <= 1 + guard]
    best = min(within, key=lambda item: item[1]["j_vs_stock"]["median"], default=None)
    decisions = result.get("tuning", {}).get("lowest_energy", {}).get("decisions", [])
    savings = sorted((d for d in decisions if d.get("energy_vs_stock") is not None),
                     key=lambda d: d["energy_vs_stock"])
    return {"rows": rows, "aa_energy": energy.get("aa"), "aa_gpu": rows.get(AA, {}).get("gpu_vs_stock"),
            "best_trade": None if best is None else {"mode": best[0], "energy": best[1]["j_vs_stock"]["median"],
                                                     "time": best[1]["gpu_vs_stock"]["median"]},
            "configurations_measured": sum(1 for d in decisions if d.get("measured")),
            "configurations": len(decisions),
            "picked_for_energy": sum(1 for d in decisions if d.get("choice") is not None
                                     and d.get("energy_vs_stock") is not None),
            "fastest_pick": sum(1 for d in decisions if d.get("choice") is not None
                                and d.get("energy_vs_stock") is None),
            "per_convolution_best": savings[:3]}


# ------------------------------------------------------------------------------- parent side


def run_child(network: str, settings: argparse.Namespace, timeout_s: float) -> dict:
    command = [sys.executable, str(SCRIPT), "--child", network, *settings_argv(settings)]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, env=child_environment({}), stdout=subprocess.PIPE, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    result = parse_child_output(done.stdout)
    if result is None:
        return {"error": f"exit status {done.returncode} without a result line (its stderr is above)"}
    result["child_s"] = time.perf_counter() - started
    return result


def settings_argv(settings: argparse.Namespace) -> list[str]:
    return ["--window-s", str(settings.window_s), "--rounds", str(settings.rounds),
            "--warmup-max-s", str(settings.warmup_max_s), "--repeats", str(settings.repeats),
            "--replays", str(settings.replays), "--time-guard", str(settings.time_guard),
            "--tune-energy-budget-s", str(settings.tune_energy_budget_s), "--tune-window-s", str(settings.tune_window_s)]


def _spread_text(spread: dict | None, digits: int) -> str:
    if not spread:
        return "—"
    return f"{spread['median']:.{digits}f} ({spread['min']:.{digits}f}–{spread['max']:.{digits}f})"


def render(report: dict) -> str:
    lines = ["# Energy per training step: stock heuristics, \"fastest\", \"lowest_energy\"", "",
             f"{report['device']}, torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. Commands: "
             + "; ".join(f"`python benchmarks/energy.py {argv}`" for argv in report.get("argv", [])) + ".", "",
             "Every mode measured in one process per network, the whole training step replayed as a CUDA graph "
             "(no host time). *GPU ms*: median (min–max) of the repeats; *vs stock*: the mode's over stock's, "
             "repeat by repeat (below 1: faster). *J/step*: NVML's energy counter over windows of whole replays, "
             "the modes alternated in rotated order after a warm-up; *J vs stock* per round (below 1: less "
             "energy). *stock (A/A)*: stock measured again as a mode of its own: two identical modes differ by "
             "this much, so a smaller difference is not resolved. *counter/power*: the counter's joules over "
             "NVML's power readings integrated over the same windows (1: the sources agree).", ""]
    for name, record in report["networks"].items():
        lines += [f"## {name}", ""]
        if "error" in record:
            lines += [f"not measured: {record['error']}", ""]
            continue
        summary = summarize(record)
        energy = record.get("energy", {})
        lines += ["| mode | GPU ms/step | vs stock | J/step | J vs stock | counter/power |", "|---|--:|--:|--:|--:|--:|"]
        for label, row in summary["rows"].items():
            lines.append(f"| {label} | {_spread_text(row['gpu_ms'], 3)} | {_spread_text(row['gpu_vs_stock'], 3)} | "
                         f"{_spread_text(row['j_per_step'], 3)} | {_spread_text(row['j_vs_stock'], 3)} | "
                         f"{_spread_text(row['counter_vs_power'], 3)} |")
        best = summary["best_trade"]
        aa = summary["aa_energy"]
        resolution = f"±{max(abs(aa['max'] - 1), abs(aa['min'] - 1)) * 100:.1f}%" if aa else "—"
        lines += ["", f"A/A spread of J/step: {resolution}. Warm-up: {(energy.get('warmup') or {}).get('stopped', '—')}."]
        if best is not None:
            lines.append(f"Best energy/time trade within the time guard ({record.get('time_guard', 0.02) * 100:g}% of "
                         f"stock's GPU time): `{best['mode']}`, {best['energy']:.3f}x stock's energy at "
                         f"{best['time']:.3f}x its GPU time.")
        else:
            lines.append("No mode within the time guard has an energy measurement.")
        tuning = record.get("tuning", {}).get("lowest_energy", {})
        lines.append(f"`tune(policy=\"lowest_energy\")`: {num(tuning.get('seconds'), 0)} s, energy measured on "
                     f"{summary['configurations_measured']} of {summary['configurations']} configurations; "
                     f"{summary['picked_for_energy']} run a candidate measured to save energy, "
                     f"{summary['fastest_pick']} the fastest pick (time as the estimate of energy), the others "
                     "stock's path.")
        for decision in summary["per_convolution_best"]:
            lines.append(f"- {decision['configuration']}: `{decision['choice'] or 'stock'}` "
                         f"{decision['energy_vs_stock']:.3f}x stock's J/call (A/A ±"
                         f"{(decision.get('resolution') or 0) * 100:.1f}%), {num(decision.get('time_ms'), 4)} ms "
                         f"against {num(decision.get('stock_ms'), 4)} ms")
        lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python benchmarks/energy.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", default=",".join(DEFAULT_NETWORKS),
                        help=f"comma-separated zoo networks (default {','.join(DEFAULT_NETWORKS)}); of "
                             f"{', '.join(ZOO)}")
    parser.add_argument("--window-s", type=float, default=2.0, help="least length of an energy window (default 2)")
    parser.add_argument("--rounds", type=int, default=5, help="energy windows per mode (default 5)")
    parser.add_argument("--warmup-max-s", type=float, default=60.0,
                        help="longest warm-up to a steady temperature (default 60)")
    parser.add_argument("--repeats", type=int, default=5, help="GPU-time repeats per mode (default 5)")
    parser.add_argument("--replays", type=int, default=20, help="graph replays per GPU-time repeat (default 20)")
    parser.add_argument("--time-guard", type=float, default=0.02,
                        help="lowest_energy's time guard, and the best trade's (default 0.02)")
    parser.add_argument("--tune-energy-budget-s", type=float, default=150.0,
                        help="seconds tune(policy='lowest_energy') may spend measuring energy (default 150)")
    parser.add_argument("--tune-window-s", type=float, default=1.0,
                        help="energy window of tune(policy='lowest_energy') per configuration (default 1)")
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting children after this long")
    parser.add_argument("--child-timeout", type=float, default=580.0, help="seconds per network (default 580)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    parser.add_argument("--child", metavar="NETWORK", help=argparse.SUPPRESS)
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    networks = [name for name in args.networks.split(",") if name]
    unknown = [name for name in networks if name not in ZOO]
    if unknown or not networks:
        parser.error(f"--networks: unknown {unknown}; networks are {', '.join(ZOO)}")
    for name in ("window_s", "warmup_max_s", "tune_window_s"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    for name in ("rounds", "repeats", "replays"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.time_guard < 0 or args.tune_energy_budget_s < 0:
        parser.error("--time-guard and --tune-energy-budget-s must be >= 0")
    return networks


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
        return 0
    networks = _check(parser, args)
    if args.child:
        try:
            result = child(args.child, args)
        except Exception as exc:  # noqa: BLE001 - the parent records it
            traceback.print_exc()
            result = {"error": error_text(exc)}
        print(CHILD_RESULT_PREFIX + json.dumps(result), flush=True)
        return 0
    env = environment()
    date = now_iso()[:10]
    stem = args.out / f"energy-{device_slug(env.get('device'))}-{date}"
    path = stem.with_suffix(".json")
    report = json.loads(path.read_text()) if path.exists() else {"networks": {}, "argv": []}
    report.update({"device": env.get("device"), "torch": env.get("torch"), "cudnn": env.get("cudnn"), "date": date,
                   "git_commit": env.get("git_commit")})
    report["argv"] = [*report.get("argv", []), " ".join(argv if argv is not None else sys.argv[1:])]
    started = time.perf_counter()
    unfinished = []
    for network in networks:
        left = None if args.budget_s is None else args.budget_s - (time.perf_counter() - started)
        if left is not None and left < MIN_CHILD_S:
            unfinished.append(network)
            continue
        timeout = args.child_timeout if left is None else min(args.child_timeout, left)
        progress(f"{network}: child (timeout {timeout:.0f} s)")
        report["networks"][network] = run_child(network, args, timeout)
        write_json(path, report)  # each network kept as soon as it is measured
    markdown = render(report)
    publish(stem.with_suffix(".md"), markdown)
    if unfinished:
        progress(f"not started (time budget): {', '.join(unfinished)}")
    return 0 if not unfinished and all("error" not in report["networks"][n] for n in networks) else 1
