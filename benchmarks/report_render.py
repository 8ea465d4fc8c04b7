"""Turns the raw results of ``benchmarks/report.py`` into the markdown report.

Pure Python (no torch, no GPU): the report can be rendered, and this module
tested, anywhere. Everything here is a function of the merged raw dict::

    {"environment": {...}, "report": {"generated": ..., "command": ...},
     "sections": {"tuning": {...}, "host": {...}, "network": {...}, "layers": {...}}}

where each section is the content of ``<out>/raw/<section>.json`` (see
report.py's docstring for their keys). A section absent from ``sections`` is
reported as "not run".

Conventions used throughout the report:

- a **ratio** is our time / stock time (below 1 = we are faster);
- a **speedup** is stock time / our time (above 1 = we are faster).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SECTIONS = ("tuning", "host", "network", "layers")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")

# H100 SXM dense fp16/bf16 tensor-core peak: the roofline the layer table compares against.
H100_FP16_DENSE_TFLOPS = 989.0

MET, MISSED, NOT_RUN = "met", "missed", "not run"

# Target thresholds, named once so the targets table and the section text agree.
TUNING_SECONDS_MAX = 5.0
HOST_RATIO_MAX = 1.0
NETWORK_WALL_SPEEDUP_MIN = 1.0
NETWORK_GPU_SPEEDUP_MIN = 1.03
NETWORK_DETERMINISTIC_SPEEDUP_MIN = 1.0
LAYERS_SPEEDUP_MIN = 1.10
STOCK_CONFIG_RATIO_MAX = 1.02

NETWORK_VARIANTS = ("amp_fp16", "fp32_tf32", "deterministic")
NETWORK_STOCK_MODES = ("stock", "stock_benchmark")
# One process per policy, each also timing the stock modes: switching conv_knob_search
# makes "fastest" forget its decisions, so the two cannot alternate in one process.
NETWORK_POLICIES = ("fastest", "fastest_knobs")
NETWORK_METRICS = {  # raw key -> column title
    "wall_ms": "eager wall ms/step",
    "gpu_ms": "GPU ms/step",
    "conv_gpu_ms": "conv GPU ms/step",
    "graph_ms": "CUDA graph replay ms",
}
TUNING_MODES = {  # raw key -> what the child process measured
    "stock": "stock, benchmark=False (reference: no search)",
    "stock_benchmark": "stock, benchmark=True",
    "fastest": '"fastest" on all three directions',
    "fastest_deterministic": '"fastest", use_deterministic_algorithms(True)',
    "fastest_knobs": '"fastest" + conv_knob_search=True',
}
HOST_MODES = ("stock", "pinned_stock_config", "fastest")
HOST_WORKLOADS = {"fwd": "forward", "fwd_bwd": "forward + backward"}
LAYER_VARIANTS = {  # raw key -> column title
    "stock": "stock ms",
    "stock_benchmark": "stock bench ms",
    "stock_config": "stock cfg ms",
    "fastest": "fastest ms",
    "fastest_knobs": "knobs ms",
}
# The variants whose picks are what the package found (target 5's "best found").
LAYER_FOUND_VARIANTS = ("fastest", "fastest_knobs")


# ---------------------------------------------------------------------------
# Small pure helpers (also used by report.py)
# ---------------------------------------------------------------------------


def device_slug(gpu_name: str | None) -> str:
    """A short file-name part for a GPU: "NVIDIA H100 80GB HBM3" -> "h100",
    "NVIDIA H200" -> "h200"; otherwise the lower-case alphanumerics of the name."""
    if not gpu_name:
        return "unknown"
    # Model names are one or two letters then 2-4 digits (H100, A100, L40S, GH200, B200);
    # memory sizes ("80GB") start with a digit and memory types ("HBM3") have one digit.
    model = re.search(r"\b([A-Za-z]{1,2}\d{2,4}[A-Za-z]?)\b", gpu_name.replace("NVIDIA", ""))
    if model:
        return model.group(1).lower()
    return re.sub(r"[^a-z0-9]", "", gpu_name.lower()) or "unknown"


@dataclass(frozen=True)
class Stats:
    minimum: float
    median: float
    maximum: float

    def text(self, digits: int = 3) -> str:
        return f"{self.median:.{digits}f} ({self.minimum:.{digits}f}-{self.maximum:.{digits}f})"


def stats(values: Iterable[float | None] | None) -> Stats | None:
    """min / median / max of the values that are not None; None when there are none."""
    present = [v for v in values or () if v is not None]
    if not present:
        return None
    return Stats(min(present), statistics.median(present), max(present))


def median(values: Iterable[float | None] | None) -> float | None:
    summary = stats(values)
    return summary.median if summary else None


def paired_ratios(ours: Sequence[float | None], reference: Sequence[float | None]) -> list[float]:
    """ours[i] / reference[i] for every round where both were measured: rounds are
    interleaved, so pairing them cancels drift in the machine's speed."""
    return [a / b for a, b in zip(ours, reference, strict=False) if a is not None and b]


def conv_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def conv_flops(layer: dict) -> int:
    """2 * N * K * (C / groups) * R * S * P * Q: the multiply-adds of one call, which
    are the same for the forward, backward-data and backward-filter passes."""
    batch, _, height, width = layer["input"]
    out_channels, channels_per_group, kernel_h, kernel_w = layer["weight"]
    out_h = conv_output_size(height, kernel_h, layer["stride"], layer["padding"])
    out_w = conv_output_size(width, kernel_w, layer["stride"], layer["padding"])
    return 2 * batch * out_channels * channels_per_group * kernel_h * kernel_w * out_h * out_w


def _num(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _stats_text(values: Iterable[float | None] | None, digits: int = 3) -> str:
    summary = stats(values)
    return summary.text(digits) if summary else "-"


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    def cell(value: object) -> str:
        return "-" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def _details(summary: str, lines: list[str]) -> list[str]:
    return ["<details><summary>" + summary + "</summary>", "", *lines, "", "</details>", ""]


def _section_note(section: dict) -> str:
    """One line saying when and how a section was measured (sections may come from
    different runs of report.py)."""
    env = section.get("environment") or {}
    parts = [f"measured {env.get('date', '?')}", f"{section.get('seconds', 0):.0f} s"]
    if env.get("git_commit"):
        parts.append(f"commit {env['git_commit'][:10]}{' (dirty)' if env.get('git_dirty') else ''}")
    if section.get("quick"):
        parts.append("**--quick (smoke run: few rounds, not for conclusions)**")
    if not section.get("complete", True):
        parts.append("**incomplete: the run stopped before the section finished**")
    return "_" + ", ".join(parts) + "_"


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetResult:
    number: str
    target: str
    measured: str
    verdict: str  # MET, MISSED or NOT_RUN


def _verdict(passed: bool) -> str:
    return MET if passed else MISSED


def _partial(section: dict) -> str:
    return "" if section.get("complete", True) else " (partial)"


def target_tuning_time(raw: dict) -> TargetResult:
    target = f'"fastest" tunes ResNet-50 (AMP fp16, batch 64) in <= {TUNING_SECONDS_MAX:g} s'
    section = raw.get("sections", {}).get("tuning")
    modes = (section or {}).get("modes", {})
    seconds = (modes.get("fastest") or {}).get("tuning_s")
    if seconds is None:
        return TargetResult("1", target, _missing_text(section, "fastest"), NOT_RUN)
    others = [f"{label} {modes[key]['tuning_s']:.2f} s" for key, label in
              (("fastest_deterministic", "deterministic"), ("fastest_knobs", "knob search"))
              if (modes.get(key) or {}).get("tuning_s") is not None]
    search = first_step_overhead(section, "stock_benchmark")
    if search is not None:
        others.append(f"stock benchmark=True's first step +{search:.2f} s over stock's")
    measured = f"{seconds:.2f} s" + (f" ({', '.join(others)})" if others else "") + _partial(section)
    return TargetResult("1", target, measured, _verdict(seconds <= TUNING_SECONDS_MAX))


def slower_than_stock_config(log: list[dict]) -> tuple[list[dict], int]:
    """Rows of a tuning log whose pick measured slower than stock's own configuration,
    and how many rows had both times (the others cannot be compared)."""
    comparable = [e for e in log if e.get("pick_ms") is not None and e.get("stock_config_ms") is not None]
    return [e for e in comparable if e["pick_ms"] > e["stock_config_ms"]], len(comparable)


def target_never_worse(raw: dict) -> TargetResult:
    target = "\"fastest\" never picks slower than stock's config (tuner's times), also deterministic"
    section = raw.get("sections", {}).get("tuning")
    modes = (section or {}).get("modes", {})
    judged = [("fastest", "fastest"), ("fastest_deterministic", "deterministic")]
    counts, passed = [], True
    for key, label in judged:
        log = (modes.get(key) or {}).get("tuning_log")
        if log is None:
            return TargetResult("2", target, _missing_text(section, key), NOT_RUN)
        worse, comparable = slower_than_stock_config(log)
        counts.append(f"{label} {len(worse)}/{comparable} slower")
        passed = passed and not worse and comparable > 0
    knobs = (modes.get("fastest_knobs") or {}).get("tuning_log")
    if knobs is not None:
        worse, comparable = slower_than_stock_config(knobs)
        counts.append(f"(knob search {len(worse)}/{comparable})")
    return TargetResult("2", target, ", ".join(counts) + _partial(section), _verdict(passed))


def host_ratio(section: dict, workload: str, mode: str) -> Stats | None:
    """Per-round host time ratio mode / stock of one workload."""
    samples = section.get("workloads", {}).get(workload, {}).get("us_per_call", {})
    return stats(paired_ratios(samples.get(mode, []), samples.get("stock", [])))


def target_host(raw: dict) -> TargetResult:
    target = f"host time per call <= {HOST_RATIO_MAX:g}x stock (fwd and fwd+bwd; pinned engine and \"fastest\")"
    section = raw.get("sections", {}).get("host")
    if section is None:
        return TargetResult("3", target, "-", NOT_RUN)
    parts, passed = [], True
    for workload in HOST_WORKLOADS:
        cells = []
        for mode, label in (("pinned_stock_config", "pinned"), ("fastest", "fastest")):
            ratio = host_ratio(section, workload, mode)
            if ratio is None:
                return TargetResult("3", target, f"no {workload} {mode} data", NOT_RUN)
            cells.append(f"{label} {ratio.median:.2f}x")
            passed = passed and ratio.median <= HOST_RATIO_MAX
        parts.append(f"{workload}: " + ", ".join(cells))
    return TargetResult("3", target, "; ".join(parts) + _partial(section), _verdict(passed))


@dataclass(frozen=True)
class Speedup:
    """Our mode against the better stock mode (the one with the lower median) on one metric."""

    stock_mode: str
    per_round: Stats  # stock[i] / ours[i] over rounds

    @property
    def value(self) -> float:
        return self.per_round.median


def network_speedup(modes: dict, ours: str, metric: str) -> Speedup | None:
    medians = {m: median((modes.get(m) or {}).get(metric)) for m in NETWORK_STOCK_MODES}
    measured = {m: v for m, v in medians.items() if v is not None}
    our_samples = (modes.get(ours) or {}).get(metric)
    if not measured or median(our_samples) is None:
        return None
    better = min(measured, key=measured.get)
    per_round = stats(paired_ratios(modes[better][metric], our_samples))
    return Speedup(better, per_round) if per_round else None


def _network_thresholds(variant: str) -> dict[str, float]:
    if variant == "deterministic":  # determinism narrows the candidates: break-even is the target
        return dict.fromkeys(("wall_ms", "gpu_ms", "graph_ms"), NETWORK_DETERMINISTIC_SPEEDUP_MIN)
    return {"wall_ms": NETWORK_WALL_SPEEDUP_MIN, "gpu_ms": NETWORK_GPU_SPEEDUP_MIN,
            "graph_ms": NETWORK_GPU_SPEEDUP_MIN}


def network_process(raw: dict, variant: str, policy: str) -> dict | None:
    """The modes one network process measured (stock, stock_benchmark and ``policy``), or
    None where that process was not run or failed."""
    section = raw.get("sections", {}).get("network") or {}
    process = (section.get("variants", {}).get(variant) or {}).get(policy)
    return process.get("modes") if process and not process.get("error") else None


def target_network(raw: dict, variant: str, number: str) -> TargetResult:
    thresholds = _network_thresholds(variant)
    target = (f"ResNet-50 {variant}: \"fastest\" speedup vs better stock >= "
              f"{thresholds['wall_ms']:g}x eager wall, >= {thresholds['gpu_ms']:g}x GPU time, "
              f">= {thresholds['graph_ms']:g}x CUDA graph replay")
    section = raw.get("sections", {}).get("network")
    modes = network_process(raw, variant, "fastest")
    if modes is None:
        process = ((section or {}).get("variants", {}).get(variant) or {}).get("fastest") or {}
        return TargetResult(number, target, process.get("error", "-")[:120], NOT_RUN)
    knob_modes = network_process(raw, variant, "fastest_knobs") or {}
    labels = {"wall_ms": "wall", "gpu_ms": "GPU", "graph_ms": "graph"}
    cells, passed = [], True
    for metric, minimum in thresholds.items():
        speedup = network_speedup(modes, "fastest", metric)
        if speedup is None:
            cells.append(f"{labels[metric]} -")
            passed = False
            continue
        knobs = network_speedup(knob_modes, "fastest_knobs", metric)
        knob_text = f" (knobs {knobs.value:.3f}x)" if knobs else ""
        cells.append(f"{labels[metric]} {speedup.value:.3f}x{knob_text}")
        passed = passed and speedup.value >= minimum
    return TargetResult(number, target, ", ".join(cells) + _partial(section), _verdict(passed))


def layer_medians(row: dict) -> dict[str, float]:
    """Median ms per variant of one (layer, direction) row, for the variants measured."""
    result = {}
    for variant, samples in (row.get("ms") or {}).items():
        value = median(samples)
        if value is not None:
            result[variant] = value
    return result


def best_found_ms(row: dict) -> float | None:
    """The faster of the package's picks ("fastest", knob search) for one row."""
    found = [v for k, v in layer_medians(row).items() if k in LAYER_FOUND_VARIANTS]
    return min(found) if found else None


def comparable_rows(rows: list[dict]) -> list[dict]:
    """The rows with every variant of the table measured (a variant that failed on one
    layer would otherwise make the sums compare different work)."""
    variants = {k for row in rows for k in (row.get("ms") or {})}
    return [row for row in rows if variants <= layer_medians(row).keys()]


def weighted_totals(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per direction (and "total"): sum over the comparable rows of the layer's count x
    median ms, per variant and for "best_found" (where the picks were measured)."""
    totals: dict[str, dict[str, float]] = {}
    for row in comparable_rows(rows):
        values = layer_medians(row)
        best = best_found_ms(row)
        if best is not None:
            values["best_found"] = best
        count = row["layer"].get("count", 1)
        for key in (row["direction"], "total"):
            bucket = totals.setdefault(key, {})
            for variant, ms in values.items():
                bucket[variant] = bucket.get(variant, 0.0) + count * ms
    return totals


def target_layers_speedup(raw: dict) -> TargetResult:
    target = (f"conv GPU time, ResNet-50 layers x count, fp16: best found >= {LAYERS_SPEEDUP_MIN:.2f}x "
              "faster than stock benchmark=True")
    section = raw.get("sections", {}).get("layers")
    table = (section or {}).get("tables", {}).get("float16")
    totals = weighted_totals(table["rows"]).get("total", {}) if table else {}
    if "stock_benchmark" not in totals or "best_found" not in totals:
        return TargetResult("5", target, "-", NOT_RUN)
    speedup = totals["stock_benchmark"] / totals["best_found"]
    measured = f"{speedup:.3f}x (vs benchmark=False {totals['stock'] / totals['best_found']:.3f}x)" \
        if "stock" in totals else f"{speedup:.3f}x"
    return TargetResult("5", target, measured + _partial(section), _verdict(speedup >= LAYERS_SPEEDUP_MIN))


def stock_config_ratios(rows: list[dict]) -> list[tuple[float, dict]]:
    """(pinned stock config / stock, row) for every row with both measured."""
    result = []
    for row in rows:
        medians = layer_medians(row)
        if "stock_config" in medians and medians.get("stock"):
            result.append((medians["stock_config"] / medians["stock"], row))
    return result


def target_stock_config(raw: dict) -> TargetResult:
    target = f"stock's config pinned by name <= {STOCK_CONFIG_RATIO_MAX:g}x stock on every layer and direction"
    section = raw.get("sections", {}).get("layers")
    tables = (section or {}).get("tables", {})
    cells, passed, any_data = [], True, False
    for dtype, table in tables.items():
        ratios = stock_config_ratios(table.get("rows", []))
        if not ratios:
            continue
        any_data = True
        worst, row = max(ratios, key=lambda pair: pair[0])
        within = sum(r <= STOCK_CONFIG_RATIO_MAX for r, _ in ratios)
        cells.append(f"{dtype}: {within}/{len(ratios)} within, worst {worst:.3f} "
                     f"(layer {row['layer']['name']} {row['direction']})")
        passed = passed and within == len(ratios)
    if not any_data:
        return TargetResult("6", target, "-", NOT_RUN)
    return TargetResult("6", target, "; ".join(cells) + _partial(section), _verdict(passed))


def _missing_text(section: dict | None, mode: str) -> str:
    if section is None:
        return "-"
    error = ((section.get("modes") or {}).get(mode) or {}).get("error")
    return f"{mode} failed: {error[:120]}" if error else f"{mode} not measured"


def evaluate_targets(raw: dict) -> list[TargetResult]:
    return [
        target_tuning_time(raw),
        target_never_worse(raw),
        target_host(raw),
        target_network(raw, "amp_fp16", "4a"),
        target_network(raw, "fp32_tf32", "4b"),
        target_network(raw, "deterministic", "4c"),
        target_layers_speedup(raw),
        target_stock_config(raw),
        TargetResult("7", "this report exists", "this file", MET),
    ]


# ---------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------


def _environment_lines(raw: dict) -> list[str]:
    env = raw.get("environment") or {}
    commit = env.get("git_commit")
    rows = [
        ("GPU", env.get("gpu")),
        ("driver", env.get("driver")),
        ("torch", f"{env.get('torch')} (CUDA {env.get('cuda')}, torch's cuDNN {env.get('cudnn_torch')})"),
        ("cuDNN (torch_cudnn_algo.cudnn_version())", env.get("cudnn")),
        ("torchvision", env.get("torchvision")),
        ("torch_cudnn_algo", f"{env.get('torch_cudnn_algo')}, commit "
                             f"{commit[:12] if commit else 'unknown'}{' (dirty)' if env.get('git_dirty') else ''}"),
        ("python", env.get("python")),
    ]
    return _table(("environment", ""), rows)


def _command_lines(raw: dict) -> list[str]:
    """The report.py command of each run whose raw data is in the report."""
    by_command: dict[str, list[str]] = {}
    for name, section in raw.get("sections", {}).items():
        env = section.get("environment") or {}
        by_command.setdefault(env.get("command", "?"), []).append(f"{name} ({env.get('date', '?')})")
    lines = ["```"]
    for command, sections in by_command.items():
        lines.append(f"{command}    # {', '.join(sections)}")
    report = raw.get("report") or {}
    lines.append(f"{report.get('command', 'python benchmarks/report.py --report-only')}    # rendered "
                 f"{report.get('generated', '?')}")
    return lines + ["```"]


def _targets_lines(raw: dict) -> list[str]:
    rows = [(t.number, t.target, t.measured, f"**{t.verdict}**" if t.verdict == MISSED else t.verdict)
            for t in evaluate_targets(raw)]
    return _table(("#", "target", "measured", "verdict"), rows)


# ---------------------------------------------------------------------------
# Section 1: tuning
# ---------------------------------------------------------------------------


def _tuning_lines(section: dict) -> list[str]:
    settings = section.get("settings", {})
    lines = [
        "ResNet-50 (torchvision, weights=None), batch "
        f"{settings.get('batch', 64)}, {settings.get('resolution', 224)}x{settings.get('resolution', 224)}, "
        "AMP fp16, channels_last, SGD(lr=0.01, momentum=0.9). Each mode ran in a fresh process with CUDA "
        "initialised and a tiny unrelated convolution run first, so the first step's wall time is the "
        "search/tuning plus first-use costs common to all modes. \"tuning s\" is the sum of the tuner's "
        "own per-configuration times (`tuning_log()`).",
        "",
    ]
    rows = [_tuning_mode_row(key, description, mode, first_step_overhead(section, key))
            for key, description in TUNING_MODES.items()
            if (mode := section.get("modes", {}).get(key)) is not None]
    lines += _table(("mode", "what", "first step s", "minus stock's first step s", "second step s", "tuning s",
                     "configs tuned", "pick = stock's config", "pick = stock path",
                     "pick slower than stock's config"), rows)
    lines.append("")
    for key in ("fastest", "fastest_deterministic", "fastest_knobs"):
        log = (section.get("modes", {}).get(key) or {}).get("tuning_log")
        if not log:
            continue
        title = f"Per configuration, {TUNING_MODES[key]} ({len(log)} configurations)"
        table = _tuning_log_table(log)
        if key == "fastest":
            lines += [f"**{title}**", "", *table, ""]
        else:
            lines += _details(title, table)
    return lines


def first_step_overhead(section: dict, key: str) -> float | None:
    """A mode's first-step wall time minus stock's (benchmark=False, no search): roughly what
    the search or tuning added, with the first-use costs common to all modes taken out."""
    modes = section.get("modes", {})
    first, reference = ((modes.get(k) or {}).get("first_step_s") for k in (key, "stock"))
    return first - reference if first is not None and reference is not None and key != "stock" else None


def _tuning_mode_row(key: str, description: str, mode: dict, overhead: float | None) -> tuple:
    if mode.get("error"):
        return (key, description, f"failed: {mode['error'][:160]}", *[""] * 7)
    log = mode.get("tuning_log") or []
    if mode.get("tuning_s") is None:  # a stock mode: nothing tuned
        return (key, description, _num(mode.get("first_step_s"), 2), _num(overhead, 2),
                _num(mode.get("second_step_s"), 3), *["-"] * 5)
    worse, comparable = slower_than_stock_config(log)
    return (
        key, description, _num(mode.get("first_step_s"), 2), _num(overhead, 2), _num(mode.get("second_step_s"), 3),
        _num(mode.get("tuning_s"), 2), mode.get("configs_tuned"),
        sum(1 for e in log if e.get("pick") is not None and e.get("pick") == e.get("stock_config")),
        sum(1 for e in log if e.get("pick") is None),
        f"{len(worse)}/{comparable}",
    )


def _tuning_log_table(log: list[dict]) -> list[str]:
    rows = []
    for entry in log:
        pick_ms, stock_ms = entry.get("pick_ms"), entry.get("stock_config_ms")
        ratio = pick_ms / stock_ms if pick_ms is not None and stock_ms else None
        flag = "**SLOWER**" if pick_ms is not None and stock_ms is not None and pick_ms > stock_ms else ""
        rows.append((
            entry.get("direction"), entry.get("conv"),
            entry.get("pick") or "stock path", entry.get("stock_config"),
            _num(pick_ms, 4), _num(stock_ms, 4), _num(ratio, 3), entry.get("candidates"), entry.get("timed"),
            entry.get("knob_configs"), _num(entry.get("seconds"), 3), flag,
        ))
    return _table(("dir", "conv", "pick", "stock's config", "pick ms", "stock cfg ms", "pick/stock cfg",
                   "candidates", "timed", "knob configs", "tuning s", ""), rows)


# ---------------------------------------------------------------------------
# Section 2: host
# ---------------------------------------------------------------------------


def _host_lines(section: dict) -> list[str]:
    settings = section.get("settings", {})
    lines = [
        f"conv2d x {settings.get('input')} w {settings.get('weight')} padding {settings.get('padding')}, "
        f"{settings.get('dtype')} on CUDA: GPU time far below host time, so the wall time per call over "
        f"{settings.get('calls')} calls (synchronised before and after) is the host's. "
        f"{settings.get('rounds')} interleaved rounds after a warm-up round (which tunes \"fastest\"). "
        "Ratio = mode / stock per round (below 1 = less host time than stock).",
        "",
        "Stock's config per direction (pinned): "
        + ", ".join(f"{d} `{n}`" for d, n in (section.get("stock_configs") or {}).items()),
        "",
    ]
    for workload, title in HOST_WORKLOADS.items():
        samples = section.get("workloads", {}).get(workload, {}).get("us_per_call")
        if not samples:
            continue
        rows = []
        for mode in HOST_MODES:
            if mode not in samples:
                continue
            ratio = host_ratio(section, workload, mode) if mode != "stock" else None
            rows.append((mode, _stats_text(samples[mode], 2), ratio.text(3) if ratio else "-"))
        lines += [f"**{title}**", "", *_table(("mode", "µs/call median (min-max)",
                                                "ratio vs stock median (min-max)"), rows), ""]
    return lines


# ---------------------------------------------------------------------------
# Section 3: network
# ---------------------------------------------------------------------------


def _network_lines(section: dict) -> list[str]:
    settings = section.get("settings", {})
    lines = [
        f"ResNet-50 training step, batch {settings.get('batch', 64)}. Per variant two fresh processes, one "
        "timing stock, stock benchmark=True and \"fastest\", the other the same stock modes and \"fastest\" "
        "with conv_knob_search (switching conv_knob_search makes \"fastest\" re-tune, so the two policies "
        f"cannot alternate in one process). Each mode is warmed up ({settings.get('warmup_steps')} steps: "
        f"tuning happens here), then {settings.get('rounds')} interleaved rounds of: eager wall per step "
        f"over {settings.get('eager_steps')} steps; GPU time per step = sum of CUDA kernel durations "
        f"(torch.profiler) over {settings.get('profiled_steps')} steps; conv GPU time = the GPU time of the "
        "kernels launched inside aten::cudnn_convolution(_transpose) and aten::convolution_backward (the "
        "profiler's op attribution: cuDNN's GEMM-based engines count too); CUDA graph replay time over {settings.get('graph_replays')} replays of "
        "one captured step. Values: median (min-max) over rounds. **Speedup = better stock mode's time / "
        "our time**, per round, against the stock modes of the same process (above 1 = faster than "
        "stock); the better stock mode is the one with the lower median for that metric.",
        "",
    ]
    for variant, processes in section.get("variants", {}).items():
        lines += [f"### {variant}", ""]
        for policy, process in processes.items():
            lines += [f"**Process with {policy}**" + (f" (measured {process['measured']})"
                                                      if process.get("measured") else ""), ""]
            if process.get("error"):
                lines += [f"failed: `{process['error'][:300]}`", ""]
                continue
            lines += _network_process_lines(process, policy)
    return lines


def _network_process_lines(process: dict, policy: str) -> list[str]:
    modes = process.get("modes", {})
    settings = process.get("settings") or {}
    lines = ["settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()), ""] if settings else []
    rows = []
    for name, mode in modes.items():
        cells = [_stats_text(mode.get(metric), 3) for metric in NETWORK_METRICS]
        if mode.get("graph_error"):
            cells[-1] = f"failed: {mode['graph_error'][:80]}"
        rows.append((name, *cells, _num(mode.get("warmup_s"), 1), mode.get("configs_tuned_in_warmup"),
                     mode.get("configs_tuned_in_rounds"), _runs_text(mode.get("pinned_runs_per_step"))))
    lines += _table(("mode", *NETWORK_METRICS.values(), "warm-up s", "tuned in warm-up", "tuned in rounds",
                     "our plans ran per step (fwd/bwd_d/bwd_f)"), rows)
    lines.append("")
    cells = []
    for metric in NETWORK_METRICS:
        speedup = network_speedup(modes, policy, metric)
        cells.append(f"{speedup.per_round.text(3)} vs {speedup.stock_mode}" if speedup else "-")
    lines += [f"Speedup of {policy} (better stock / ours, per round: median (min-max)):", "",
              *_table(NETWORK_METRICS.values(), [cells]), ""]
    retuned = [n for n, m in modes.items() if m.get("configs_tuned_in_rounds")]
    if retuned:
        lines += [f"**Warning**: {', '.join(retuned)} tuned during the timed rounds; their times include tuning.",
                  ""]
    lines += _details("Top kernels per mode", _top_kernel_lines(modes))
    return lines


def _runs_text(runs: dict | None) -> str:
    if not runs:
        return "-"
    return "/".join(str(runs.get(d, "-")) for d in DIRECTIONS)


def _top_kernel_lines(modes: dict) -> list[str]:
    lines: list[str] = []
    for name, mode in modes.items():
        kernels = mode.get("top_kernels") or []
        rows = [(_num(k.get("ms_per_step"), 3), k.get("name", "")[:160]) for k in kernels]
        lines += [f"**{name}**", "", *_table(("ms/step", "kernel"), rows), ""]
    return lines


# ---------------------------------------------------------------------------
# Section 4: layers
# ---------------------------------------------------------------------------


def _layers_lines(section: dict) -> list[str]:
    settings = section.get("settings", {})
    roofline = settings.get("roofline_tflops", H100_FP16_DENSE_TFLOPS)
    lines = [
        f"Every unique ResNet-50 convolution at batch {settings.get('batch', 64)}, each direction. GPU time "
        f"per call: a spin kernel is queued first, then CUDA events around {settings.get('reps')} calls, so "
        f"host time does not leak in; variants interleaved over {settings.get('rounds')} rounds; medians. "
        "Variants: stock (benchmark=False), stock benchmark=True, stock's config pinned by name, the "
        "\"fastest\" pick pinned by name, the knob-search pick pinned by name. \"best found\" = the faster "
        f"of the two picks. TFLOP/s of the fastest variant; % of the H100 dense fp16 tensor-core peak "
        f"({roofline:g} TFLOP/s). cfg/stock = pinned stock config / stock (ratio: below 1 = faster).",
        "",
    ]
    for dtype, table in section.get("tables", {}).items():
        lines += [f"### {dtype}, {table.get('memory_format')}, allow_tf32={table.get('allow_tf32')}", ""]
        rows = table.get("rows", [])
        # The roofline is the fp16 tensor-core peak: a percentage of it means nothing for fp32.
        lines += _layer_table_lines(rows, roofline if dtype == "float16" else None)
        lines += _weighted_total_lines(rows)
        lines += _stock_config_summary_lines(rows)
        lines += _picks_vs_stock_config_lines(rows)
        if any(row.get("fastest_pick") or row.get("knobs_pick") for row in rows):
            lines += _details("Picks per layer and direction", _layer_pick_lines(rows))
        errors = [(r["layer"]["name"], r["direction"], v, e[:160])
                  for r in rows for v, e in (r.get("errors") or {}).items()]
        if errors:
            lines += ["Errors:", "", *_table(("layer", "dir", "variant", "error"), errors), ""]
    return lines


def _layer_table_lines(rows: list[dict], roofline: float | None) -> list[str]:
    """One row per (layer, direction); ``roofline`` (TFLOP/s) adds a % of peak column."""
    variants = [v for v in LAYER_VARIANTS if any(v in (row.get("ms") or {}) for row in rows)]
    table_rows = []
    for row in rows:
        layer, medians = row["layer"], layer_medians(row)
        flops = row.get("flops") or conv_flops(layer)
        fastest = min(medians.values()) if medians else None
        tflops = flops / (fastest * 1e-3) / 1e12 if fastest else None
        ratio = medians["stock_config"] / medians["stock"] if "stock_config" in medians and "stock" in medians \
            else None
        table_rows.append((
            layer["name"], _shape(layer["input"]), _shape(layer["weight"]), layer["stride"], layer.get("count"),
            row["direction"], f"{flops / 1e9:.1f}", *(_num(medians.get(v), 4) for v in variants),
            _num(tflops, 1), *([_num(tflops / roofline * 100 if tflops else None, 1, "%")] if roofline else []),
            _num(ratio, 3),
        ))
    peak = ["% peak"] if roofline else []
    return [*_table(("layer", "input", "weight", "s", "count", "dir", "GFLOP", *(LAYER_VARIANTS[v] for v in variants),
                     "TFLOP/s", *peak, "cfg/stock"), table_rows), ""]


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(s) for s in shape)


def _weighted_total_lines(rows: list[dict]) -> list[str]:
    totals = weighted_totals(rows)
    if not totals:
        return []
    columns = [v for v in (*LAYER_VARIANTS, "best_found") if v in totals.get("total", {})]
    # Speedup columns only where the picks were measured (the fp32 table has none).
    references = [r for r in ("stock_benchmark", "stock") if r in columns] if "best_found" in columns else []
    table_rows = []
    for key in (*DIRECTIONS, "total"):
        bucket = totals.get(key)
        if not bucket:
            continue
        speedups = [f"{bucket[ref] / bucket['best_found']:.3f}x" for ref in references if ref in bucket]
        table_rows.append((key, *(_num(bucket.get(v), 3) for v in columns), *speedups))
    used = len(comparable_rows(rows))
    title = (f"Sum over layers of count x ms per call (one training step's convolutions; {used} of "
             f"{len(rows)} rows, those with every variant measured):")
    return [title, "", *_table(("direction", *(f"{v} ms" for v in columns),
                                *(f"speedup best found vs {ref}" for ref in references)), table_rows), ""]


def _stock_config_summary_lines(rows: list[dict]) -> list[str]:
    ratios = stock_config_ratios(rows)
    if not ratios:
        return []
    table_rows = []
    for direction in DIRECTIONS:
        values = [r for r, row in ratios if row["direction"] == direction]
        if values:
            within = sum(v <= STOCK_CONFIG_RATIO_MAX for v in values)
            table_rows.append((direction, stats(values).text(3), f"{within}/{len(values)}"))
    worst = sorted(ratios, key=lambda pair: pair[0], reverse=True)[:5]
    worst_rows = [(row["layer"]["name"], row["direction"], f"{r:.3f}", row.get("stock_config")) for r, row in worst]
    return [f"Pinned stock config / stock (target <= {STOCK_CONFIG_RATIO_MAX:g}):", "",
            *_table(("direction", "ratio median (min-max)", f"within {STOCK_CONFIG_RATIO_MAX:g}"), table_rows),
            "", "Worst pairs:", "", *_table(("layer", "dir", "cfg/stock", "stock's config"), worst_rows), ""]


def _picks_vs_stock_config_lines(rows: list[dict]) -> list[str]:
    """The tuner's picks against stock's config, both pinned and timed here: an independent
    check of target 2, which uses the tuner's own times."""
    table_rows = []
    for variant in LAYER_FOUND_VARIANTS:
        ratios = [(m[variant] / m["stock_config"], row) for row in rows
                  if variant in (m := layer_medians(row)) and m.get("stock_config")]
        if not ratios:
            continue
        worst, row = max(ratios, key=lambda pair: pair[0])
        slower = sum(r > STOCK_CONFIG_RATIO_MAX for r, _ in ratios)
        table_rows.append((variant, stats(r for r, _ in ratios).text(3), f"{slower}/{len(ratios)}",
                           f"{worst:.3f} (layer {row['layer']['name']} {row['direction']})"))
    if not table_rows:
        return []
    return [f"Picks pinned / stock's config pinned, timed here (above 1 = the pick is slower; "
            f"more than {STOCK_CONFIG_RATIO_MAX:g} counted as slower, the rest is within noise):", "",
            *_table(("pick", "ratio median (min-max)", "slower", "worst"), table_rows), ""]


def _layer_pick_lines(rows: list[dict]) -> list[str]:
    table_rows = [(row["layer"]["name"], row["direction"], row.get("stock_config"),
                   row.get("fastest_pick") or "stock path", row.get("knobs_pick") or "stock path")
                  for row in rows]
    return _table(("layer", "dir", "stock's config", "fastest pick", "knob-search pick"), table_rows)


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------

SECTION_TITLES = {
    "tuning": ("1. Tuning cost (ResNet-50, first training step)", _tuning_lines),
    "host": ("2. Host time per call (tiny convolution)", _host_lines),
    "network": ("3. ResNet-50 training step", _network_lines),
    "layers": ("4. ResNet-50 convolution layers", _layers_lines),
}


def render_markdown(raw: dict) -> str:
    """The whole report as markdown, from the merged raw dict (see the module docstring)."""
    env = raw.get("environment") or {}
    report = raw.get("report") or {}
    lines = [
        f"# torch_cudnn_algo performance report: {env.get('gpu') or 'unknown GPU'}, "
        f"{str(report.get('generated', env.get('date', '')))[:10]}",
        "",
        *_environment_lines(raw),
        "",
        "Commands:",
        "",
        *_command_lines(raw),
        "",
        "Conventions: **ratio** = our time / stock time (below 1 = faster than stock); **speedup** = stock "
        "time / our time (above 1 = faster than stock). Stock runs in the same process, interleaved with our "
        "modes.",
        "",
        "## Targets",
        "",
        *_targets_lines(raw),
        "",
    ]
    for name, (title, render_section) in SECTION_TITLES.items():
        section = raw.get("sections", {}).get(name)
        lines += [f"## {title}", ""]
        if section is None:
            lines += ["not run", ""]
            continue
        lines += [_section_note(section), ""]
        lines += render_section(section)
    return "\n".join(lines).rstrip() + "\n"
