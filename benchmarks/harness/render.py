"""The zoo's result as markdown: one table per measurement, for the networks that have it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .results import nested
from .stats import median, num, ratio, spread, trio

Row = Callable[[dict], list[str]]


def network_label(net: dict) -> str:
    kinds = [k for k in net.get("kinds") or () if k != "timm"]
    return net["name"] + (f" ({', '.join(kinds)})" if kinds else "")


def _gpu_row(net: dict) -> list[str]:
    gpu, speedup = net.get("gpu_ms") or {}, net.get("gpu_speedup_fastest") or {}
    return [trio([gpu.get("heuristics"), gpu.get("benchmark"), gpu.get("fastest")], 2),
            num(net.get("gpu_ms_plan_in_benchmark_process"), 2),
            spread(net.get("gpu_speedup_plan_vs_benchmark_same_process")),
            num(speedup.get("vs_heuristics"), 3), num(speedup.get("vs_benchmark"), 3)]


def _first_step_row(net: dict) -> list[str]:
    first = net.get("first_step_s") or {}
    return [trio([first.get("stock"), net.get("first_step_plan_names_s"), first.get("plan")], 2),
            num(net.get("first_step_plan_over_stock"), 2), num(net.get("benchmark_search_s"), 2)]


def _fastest_runs_row(net: dict) -> list[str]:
    first, second = nested(net, "fastest_runs", "first") or {}, nested(net, "fastest_runs", "second") or {}
    built = nested(second, "execution_plans", "built")
    return [trio([nested(net, "first_step_s", "stock"), first.get("first_step_s"), second.get("first_step_s")], 2),
            num(net.get("fastest_second_run_first_step_over_stock"), 2),
            f"{num(second.get('tuned'), 0)} / {num(built, 0)}",
            f"{num(first.get('tuning_db_entries'), 0)} / {num(first.get('tuning_db_bytes'), 0)}"]


def _tuning_row(net: dict) -> list[str]:
    return [num(net.get("tune_s"), 2), num(net.get("benchmark_search_s"), 2),
            num(net.get("tune_over_benchmark_search"), 3), num(net.get("plan_entries"), 0)]


def _eager_row(net: dict) -> list[str]:
    eager, ratios, cpu = net.get("eager_ms") or {}, net.get("eager_ratio") or {}, net.get("eager_cpu_ratio") or {}
    return [trio([eager.get("stock"), eager.get("plan"), eager.get("fastest")], 2),
            spread(ratios.get("plan")), spread(ratios.get("fastest")), spread(ratios.get("control")),
            spread(cpu.get("plan")), spread(cpu.get("fastest"))]


def _host_row(net: dict) -> list[str]:
    host = net.get("host_us_per_conv_call") or {}
    drained = net.get("host_us_per_conv_call_gpu_drained") or {}
    return [trio([host.get("stock"), host.get("plan")], 1), spread(nested(net, "host_ratio", "plan")),
            trio([drained.get("stock"), drained.get("plan")], 1),
            spread(nested(net, "host_ratio_gpu_drained", "plan"))]


# (title, what it shows, column headers after "network", the row, whether a network has it)
TABLES: Sequence[tuple[str, str, tuple[str, ...], Row, Callable[[dict], bool]]] = (
    ("GPU time per training step",
     "The whole step captured in a CUDA graph and replayed: GPU time without host time. `heuristics` and "
     "`fastest` are measured in one process, `benchmark=True` in a fresh process (its search needs one). "
     "`plan vs benchmark=True, same process`: stock's `benchmark=True` picks / the tuned plan's, both "
     "replayed interleaved in the `benchmark=True` process, per repeat, median (min–max): GPU clocks "
     "differ between processes by more than what is measured. `fastest vs X` = X's time / fastest's. "
     "Above 1, ours is faster.",
     ("GPU ms heuristics / benchmark=True / fastest", "plan ms (benchmark=True process)",
      "plan vs benchmark=True, same process", "fastest vs heuristics", "fastest vs benchmark=True"),
     _gpu_row, lambda net: any(v is not None for v in (net.get("gpu_ms") or {}).values())
     or net.get("gpu_ms_plan_in_benchmark_process") is not None),
    ("First step of a fresh process",
     "Wall time of a new process's first training step (CUDA and cuDNN initialised beforehand by a tiny "
     "unrelated convolution): stock heuristics; `TORCH_CUDNN_ALGO_PLAN` with the plan's choices alone "
     "(`choices`: no heuristics query, every execution plan built); with the plan's serialized execution "
     "plans (`plan`). `benchmark=True`: the first step of stock's search, for comparison.",
     ("first step s stock / choices / plan", "plan / stock", "benchmark=True first step s"),
     _first_step_row, lambda net: any(v is not None for v in (net.get("first_step_s") or {}).values())),
    ("`\"fastest\"` run twice on one tuning database",
     "Two fresh processes with `TORCH_CUDNN_CONV_{FWD,BWD_DATA,BWD_FILTER}_ALGO=fastest` in the environment "
     "and one tuning database (`TORCH_CUDNN_ALGO_DB`), empty before the first: the first run's first step "
     "tunes every configuration and keeps its decisions, the second run's should take them all from the "
     "database. First-step wall time against stock heuristics' (the main child's); what the second run tuned "
     "and built (execution plans compiled or built from cuDNN's heuristics rather than loaded); the database "
     "after the first run.",
     ("first step s stock / fastest first run / second run", "second run / stock",
      "second run: tuned / built", "database entries / bytes"),
     _fastest_runs_row, lambda net: any(nested(net, "fastest_runs", run) for run in ("first", "second"))),
    ("Tuning time",
     "`tune()` on the network's training step (one forward and backward collected, every convolution "
     "timed), against stock `benchmark=True`'s search (its first step in a fresh process, with an empty CUDA "
     "JIT cache as `tune()` has an empty tuning database). `plan entries`: the configurations the plan holds "
     "(a direction of a convolution each).",
     ("tune() s", "benchmark=True search s", "tune / search", "plan entries"),
     _tuning_row, lambda net: net.get("tune_s") is not None),
    ("Eager training step",
     "Wall ms per step (forward, backward, SGD; GradScaler under AMP), the modes interleaved in rotated order "
     "in every round; `stock/X` is the per-round ratio, median (min–max), above 1 X is faster. `control` is "
     "stock measured again as a fourth mode (an A/A test): `stock/control` is the spread the host's noise "
     "alone gives. `CPU`: the same rounds' process CPU time, garbage collector off while timed.",
     ("ms stock / plan / fastest", "stock/plan", "stock/fastest", "stock/control (A/A)", "CPU stock/plan",
      "CPU stock/fastest"),
     _eager_row, lambda net: any(v is not None for v in (net.get("eager_ms") or {}).values())),
    ("Host time per convolution call",
     "torch.profiler CPU time (self + children) per call of `aten::cudnn_convolution`, "
     "`aten::cudnn_convolution_transpose` and `aten::convolution_backward`. `GPU drained`: the same with "
     "the GPU drained before every convolution module's forward and backward, so that no call waits for a "
     "free launch slot (a GPU-bound step charges that wait to whichever op launches).",
     ("µs stock / plan", "stock/plan", "GPU drained µs stock / plan", "GPU drained stock/plan"),
     _host_row, lambda net: any(v is not None for v in (net.get("host_us_per_conv_call") or {}).values())),
)


def render_markdown(report: dict) -> str:
    """The markdown of a merged zoo result (``merge``'s output, or a kept result file)."""
    networks = report["networks"]
    lines = [
        f"# Zoo: stock PyTorch vs a tuned plan vs `\"fastest\"` — {report['device']}",
        "",
        f"torch {report['torch']}, cuDNN {report['cudnn']}, {report['date']}. Made by `python benchmarks/zoo.py` "
        "(see `docs/performance.md`); numbers are medians, `—` not measured.",
    ]
    if report.get("own_kernels"):
        lines += ["", "The extension has our own kernels (the default build): `tune()` and "
                  "`\"fastest\"` time `\"tca.direct\"` beside cuDNN's configurations."]
    else:
        lines += ["", "The extension was built without our own kernels (`TORCH_CUDNN_ALGO_OWN_KERNELS=0`): `tune()` "
                  "and `\"fastest\"` choose among cuDNN's configurations only."]
    if any(nested(net, "loops", "setup", "knob_search") for net in networks):
        lines += ["", "Measured with `--knob-search`: `conv_knob_search` on for `tune()` and `\"fastest\"`."]
    for title, text, headers, row, has in TABLES:
        measured = [net for net in networks if has(net)]
        if not measured:
            continue
        lines += ["", f"## {title}", "", text, "",
                  "| network | " + " | ".join(headers) + " |", "|" + "---|" * (len(headers) + 1)]
        lines += ["| " + " | ".join([network_label(net), *row(net)]) + " |" for net in measured]
    notes = [(net["name"], text) for net in networks
             for text in [*(f"{part} failed: {error}" for part, error in (net.get("errors") or {}).items()),
                          *(net.get("notes") or ())]]
    if notes:
        lines += ["", "## Errors and notes", ""]
        lines += [f"- {name}: {text}" for name, text in notes]
    return "\n".join(lines) + "\n"


def summary(report: dict) -> dict[str, float | None]:
    """Medians over the networks of the headline ratios (None where no network has one): the
    tuned plan's GPU time against stock ``benchmark=True``'s in one process, the first step with
    the plan over stock's, and ``tune()`` over ``benchmark=True``'s search."""
    nets = report["networks"]
    return {
        "plan_vs_benchmark_gpu": median([nested(n, "gpu_speedup_plan_vs_benchmark_same_process", "median") for n in nets]),
        "fastest_vs_heuristics_gpu": median([nested(n, "gpu_speedup_fastest", "vs_heuristics") for n in nets]),
        "first_step_plan_over_stock": median([n.get("first_step_plan_over_stock") for n in nets]),
        "fastest_second_run_first_step_over_stock": median([n.get("fastest_second_run_first_step_over_stock")
                                                            for n in nets]),
        "tune_over_benchmark_search": median([ratio(n.get("tune_s"), n.get("benchmark_search_s")) for n in nets]),
    }
