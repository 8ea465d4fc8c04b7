"""ResNet-50's convolutions one by one: GPU time per call of every unique layer in each direction,
for stock (heuristics), stock ``benchmark=True``, stock's own configuration pinned by name, and
the ``"fastest"`` picks (plain and with knob search) pinned by name.

    python benchmarks/layers.py [--dtypes float16,float32] [--limit N] [--quick] [--out benchmarks/results]
    python benchmarks/layers.py --render FILE.json       # the markdown of a saved result, no GPU

GPU time per call: a spin kernel is queued first, then CUDA events around ``reps`` calls, so host
time does not leak in; the variants are interleaved over ``rounds`` rounds; medians. float16 runs
channels_last (as AMP training does), float32 contiguous with TF32 allowed. The result,
``<out>/layers-<gpu>-<date>.json`` and ``.md``, holds per table its rows: ``layer`` (name, input,
weight, stride, padding, count in the network), ``direction``, ``flops``, ``stock_config``,
``median_ms`` {variant: median over the rounds of ms per call}, ``errors``, and the picks
(``fastest_pick``, ``knobs_pick``). The tables show medians alone, so each round's times and the
tuner's logs stay out of the file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .results import REPO_ROOT, cudnn_text, device_slug, environment, error_text, now_iso, progress, \
    set_progress_label, write_json
from .stats import median, num

BATCH = 64
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
TABLES = {  # dtype -> variants measured
    "float16": ("stock", "stock_benchmark", "stock_config", "fastest", "fastest_knobs"),
    "float32": ("stock", "stock_config"),
}
VARIANT_TITLES = {"stock": "stock ms", "stock_benchmark": "stock benchmark=True ms",
                  "stock_config": "stock's config pinned ms", "fastest": "fastest pick ms",
                  "fastest_knobs": "knob-search pick ms"}
FOUND = ("fastest", "fastest_knobs")  # the picks the package found; "best found" is the faster
# torch.cuda._sleep cycles queued per timed call (~55 µs on an H100): longer than the host needs
# to queue one call, so the GPU never waits for the host inside the timed span.
SLEEP_CYCLES_PER_REP = 100_000
FP16_PEAK_TFLOPS = 989.0  # H100 SXM dense fp16 tensor-core peak: the % of peak column


@dataclass(frozen=True)
class Loops:
    rounds: int = 5
    reps: int = 20
    limit: int | None = None  # only the first N unique layers


QUICK = Loops(rounds=2, reps=5, limit=3)


# ---------------------------------------------------------------------------
# Layers and their work (no GPU)
# ---------------------------------------------------------------------------


def resnet50_conv_layers(batch: int) -> list[dict]:
    """Unique (input shape, convolution parameters) of torchvision's ResNet-50 at 224x224, with
    how many times the network runs each."""
    import torch
    import torchvision  # benchmark-only dependency

    model = torchvision.models.resnet50()
    layers: dict[tuple, dict] = {}

    def hook(module: torch.nn.Conv2d, inputs: tuple, _output: object) -> None:
        shape = tuple(inputs[0].shape)
        key = (shape, tuple(module.weight.shape), module.stride, module.padding)
        layers.setdefault(key, {"name": f"{len(layers):02d}", "input": [batch, *shape[1:]],
                                "weight": list(module.weight.shape), "stride": module.stride[0],
                                "padding": module.padding[0], "count": 0})["count"] += 1

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    return list(layers.values())


def conv_flops(layer: dict) -> int:
    """2 x the multiply-adds of one call, the same for all three directions."""
    batch, _, height, width = layer["input"]
    out_channels, channels_per_group, kernel_h, kernel_w = layer["weight"]
    out_h = (height + 2 * layer["padding"] - kernel_h) // layer["stride"] + 1
    out_w = (width + 2 * layer["padding"] - kernel_w) // layer["stride"] + 1
    return 2 * batch * out_channels * channels_per_group * kernel_h * kernel_w * out_h * out_w


# ---------------------------------------------------------------------------
# Measuring (GPU)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """How one variant runs a (layer, direction): stock (with or without benchmark) or a
    configuration pinned by name (strict, so a refusal is an error rather than stock's time)."""

    benchmark: bool = False
    pinned: str | None = None


@contextlib.contextmanager
def applied(direction: str, choice: Choice) -> Iterator[None]:
    import torch

    import torch_cudnn_algo

    flag = torch_cudnn_algo.DIRECTIONS[direction].flag
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = choice.benchmark
    try:
        with torch_cudnn_algo.flags(**{flag: choice.pinned, "conv_algo_strict": choice.pinned is not None}):
            yield
    finally:
        torch.backends.cudnn.benchmark = previous


def direction_call(direction: str, x: object, w: object, grad: object, stride: int, padding: int) -> Callable:
    import torch

    if direction == "fwd":
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=padding)
    mask = [True, False, False] if direction == "bwd_data" else [False, True, False]
    index = 0 if mask[0] else 1
    return lambda: torch.ops.aten.convolution_backward(
        grad, x, w, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1, mask)[index]


def stock_config_name(direction: str, x: object, w: object, stride: int, padding: int) -> str | None:
    """The configuration stock runs with benchmark=False: the first usable one of heuristics mode A."""
    import torch_cudnn_algo

    configs = torch_cudnn_algo.diagnostics.engine_configs(direction, x, w, stride=stride, padding=padding)
    return next((c.name for c in configs if c.source == "heuristics_a" and c.refusal is None), None)


def tuned_pick(direction: str, run: Callable[[], object], knob_search: bool) -> str | None:
    """The "fastest" policy's pick for this convolution, tuned afresh (None: stock's path)."""
    import torch

    import torch_cudnn_algo

    torch_cudnn_algo.clear_cache()
    flag = torch_cudnn_algo.DIRECTIONS[direction].flag
    with torch_cudnn_algo.flags(**{flag: "fastest", "conv_knob_search": knob_search}):
        run()
        torch.cuda.synchronize()
        log = torch_cudnn_algo.diagnostics.tuning_log()  # read before the flags change back
    entries = [entry for entry in log if entry["direction"] == direction]
    if not entries:
        raise RuntimeError(f'"fastest" logged no tuning for {direction}')
    return entries[-1]["pick"]


def resolve(variant: str, direction: str, run: Callable[[], object], row: dict) -> Choice:
    """The choice a variant stands for; tunes the picks (and records them in the row)."""
    if variant == "stock":
        return Choice()
    if variant == "stock_benchmark":
        return Choice(benchmark=True)
    if variant == "stock_config":
        if row["stock_config"] is None:
            raise RuntimeError("no usable heuristics_a configuration")
        return Choice(pinned=row["stock_config"])
    prefix = "fastest" if variant == "fastest" else "knobs"
    pick = tuned_pick(direction, run, knob_search=variant == "fastest_knobs")
    row[f"{prefix}_pick"] = pick
    return Choice(pinned=pick)  # pick None: the policy runs stock's path


def gpu_ms_per_call(run: Callable[[], object], reps: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(reps * SLEEP_CYCLES_PER_REP)  # holds the GPU while the host queues the calls
    start.record()
    for _ in range(reps):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def measure_row(layer: dict, direction: str, tensors: tuple, variants: Sequence[str], loops: Loops) -> dict:
    import torch

    x, w, grad = tensors
    run = direction_call(direction, x, w, grad, layer["stride"], layer["padding"])
    row: dict = {"layer": layer, "direction": direction, "flops": conv_flops(layer),
                 "stock_config": stock_config_name(direction, x, w, layer["stride"], layer["padding"]),
                 "median_ms": {}, "errors": {}}
    choices: dict[str, Choice] = {}
    for variant in variants:
        try:
            choices[variant] = resolve(variant, direction, run, row)
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            row["errors"][variant] = error_text(exc)
    # Warm-up only after all the tuning: tuned_pick's clear_cache() forgets what was built before it.
    for variant, choice in list(choices.items()):
        try:
            with applied(direction, choice):  # execution plans built, stock's benchmark search done
                for _ in range(3):
                    run()
                torch.cuda.synchronize()
        except (RuntimeError, torch.OutOfMemoryError) as exc:
            row["errors"][variant] = error_text(exc)
            del choices[variant]
    rounds_ms: dict[str, list[float]] = {variant: [] for variant in choices}
    for _ in range(loops.rounds):
        for variant, choice in choices.items():
            with applied(direction, choice):
                run()  # untimed: the first call after the flags change
                rounds_ms[variant].append(gpu_ms_per_call(run, loops.reps))
    row["median_ms"] = {variant: median(samples) for variant, samples in rounds_ms.items()}
    return row


def measure_table(dtype_name: str, loops: Loops, on_row: Callable[[dict], None]) -> dict:
    import torch

    fp16 = dtype_name == "float16"
    table = {"dtype": dtype_name, "memory_format": "channels_last" if fp16 else "contiguous", "allow_tf32": True,
             "variants": list(TABLES[dtype_name]), "rows": []}
    dtype = getattr(torch, dtype_name)
    memory_format = torch.channels_last if fp16 else torch.contiguous_format
    previous_tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    try:
        for layer in resnet50_conv_layers(BATCH)[:loops.limit]:
            x = torch.randn(layer["input"], device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
            w = torch.randn(layer["weight"], device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
            grad = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=layer["stride"],
                                                               padding=layer["padding"]))
            for direction in DIRECTIONS:
                row = measure_row(layer, direction, (x, w, grad), table["variants"], loops)
                table["rows"].append(row)
                on_row(row)
    finally:
        torch.backends.cudnn.allow_tf32 = previous_tf32
    return table


# ---------------------------------------------------------------------------
# Summaries and markdown (no GPU)
# ---------------------------------------------------------------------------


def row_medians(row: dict) -> dict[str, float]:
    """Median ms per variant of one row, for the variants measured (a copy the caller may add to)."""
    return dict(row.get("median_ms") or {})


def weighted_totals(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per direction and ``total``: the sum over rows with every variant measured of the layer's
    count x median ms, per variant and for ``best_found`` (the faster of the picks)."""
    variants = {variant for row in rows for variant in (row.get("median_ms") or {})}
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        values = row_medians(row)
        if not variants <= values.keys():
            continue
        found = [values[v] for v in FOUND if v in values]
        if found:
            values["best_found"] = min(found)
        for key in (row["direction"], "total"):
            bucket = totals.setdefault(key, {})
            for variant, ms in values.items():
                bucket[variant] = bucket.get(variant, 0.0) + row["layer"].get("count", 1) * ms
    return totals


def stock_config_ratios(rows: list[dict]) -> list[tuple[float, dict]]:
    """(stock's configuration pinned / stock, row) for every row with both measured."""
    pairs = [(row_medians(row), row) for row in rows]
    return [(m["stock_config"] / m["stock"], row) for m, row in pairs if "stock_config" in m and m.get("stock")]


def _cells(values: Sequence[object]) -> str:
    return "| " + " | ".join("—" if v is None else str(v) for v in values) + " |"


def _table(headers: Sequence[str], rows: list[Sequence[object]]) -> list[str]:
    return [_cells(headers), "|" + "---|" * len(headers), *(_cells(row) for row in rows), ""]


def render_table(table: dict) -> list[str]:
    rows = table.get("rows", [])
    variants = [v for v in VARIANT_TITLES if any(v in (row.get("median_ms") or {}) for row in rows)]
    fp16 = table.get("dtype") == "float16"
    lines = [f"## {table.get('dtype')}, {table.get('memory_format')}, allow_tf32={table.get('allow_tf32')}", ""]
    totals = weighted_totals(rows)
    if totals:
        columns = [v for v in (*variants, "best_found") if v in totals.get("total", {})]
        references = [r for r in ("stock_benchmark", "stock") if r in columns] if "best_found" in columns else []
        summary = [(key, *(num(totals[key].get(v), 3) for v in columns),
                    *(f"{totals[key][r] / totals[key]['best_found']:.3f}" for r in references))
                   for key in (*DIRECTIONS, "total") if key in totals]
        lines += ["Sum over layers of count x ms per call (one training step's convolutions):", "",
                  *_table(("direction", *(f"{v} ms" for v in columns),
                           *(f"{r} / best found" for r in references)), summary)]
    ratios = stock_config_ratios(rows)
    if ratios:
        worst, row = max(ratios, key=lambda pair: pair[0])
        lines += [f"Stock's configuration pinned / stock: median {median(r for r, _ in ratios):.3f}, worst "
                  f"{worst:.3f} (layer {row['layer']['name']} {row['direction']}) over {len(ratios)} "
                  "layer-direction pairs.", ""]
    body = []
    for row in rows:
        layer, medians = row["layer"], row_medians(row)
        fastest = min(medians.values()) if medians else None
        tflops = row.get("flops", conv_flops(layer)) / (fastest * 1e-3) / 1e12 if fastest else None
        body.append((layer["name"], "x".join(map(str, layer["input"])), "x".join(map(str, layer["weight"])),
                     layer["stride"], layer.get("count"), row["direction"],
                     *(num(medians.get(v), 4) for v in variants), num(tflops, 1),
                     *([num(tflops / FP16_PEAK_TFLOPS * 100 if tflops else None, 1)] if fp16 else [])))
    lines += _table(("layer", "input", "weight", "stride", "count", "dir", *(VARIANT_TITLES[v] for v in variants),
                     "TFLOP/s", *(["% of fp16 peak"] if fp16 else [])), body)
    errors = [(r["layer"]["name"], r["direction"], v, e[:160]) for r in rows for v, e in (r.get("errors") or {}).items()]
    if errors:
        lines += ["Errors:", "", *_table(("layer", "dir", "variant", "error"), errors)]
    return lines


def render_markdown(result: dict) -> str:
    """The markdown of a layers result: this module's file, or an older report whose
    ``sections.layers`` holds the same tables."""
    result = (result.get("sections") or {}).get("layers") or result
    env, settings = result.get("environment") or {}, result.get("settings") or {}
    lines = [f"# ResNet-50 convolutions, one by one — {env.get('gpu') or env.get('device') or 'GPU'}", "",
             f"torch {env.get('torch')}, cuDNN {cudnn_text(env.get('cudnn'))}, {str(env.get('date') or '')[:10]}. "
             f"Batch {settings.get('batch', BATCH)}; GPU ms per call behind a spin kernel, {settings.get('reps')} "
             f"calls per timing, variants interleaved over {settings.get('rounds')} rounds, medians. Made by "
             "`python benchmarks/layers.py`.", ""]
    for table in (result.get("tables") or {}).values():
        lines += render_table(table)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ResNet-50's convolutions one by one: GPU time per call.")
    parser.add_argument("--dtypes", default=",".join(TABLES), help=f"comma-separated, of {','.join(TABLES)}")
    parser.add_argument("--limit", type=int, help="only the first N unique layers")
    parser.add_argument("--quick", action="store_true", help="short loops and 3 layers: a smoke run")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    parser.add_argument("--render", type=Path, metavar="JSON", help="print the markdown of a saved result; no GPU")
    args = parser.parse_args(argv)
    if args.render:
        print(render_markdown(json.loads(args.render.read_text())), end="")
        return 0
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in TABLES]
    if unknown or not dtypes:
        parser.error(f"unknown dtypes {unknown}; choose from {', '.join(TABLES)}")
    loops = QUICK if args.quick else Loops()
    if args.limit is not None:
        loops = Loops(loops.rounds, loops.reps, args.limit)
    import torch

    import torch_cudnn_algo

    if not torch.cuda.is_available() or not torch_cudnn_algo.is_available():
        print(f"layers.py needs a CUDA GPU and the extension ({torch_cudnn_algo.load_error()})", file=sys.stderr)
        return 1
    set_progress_label("layers")
    env = {**environment(), "date": now_iso()}
    result: dict = {"environment": env, "quick": args.quick,
                    "settings": {"batch": BATCH, "reps": loops.reps, "rounds": loops.rounds,
                                 "sleep_cycles_per_rep": SLEEP_CYCLES_PER_REP}, "tables": {}}
    stem = args.out / f"layers-{device_slug(env['device'])}-{env['date'][:10]}"
    for dtype_name in dtypes:
        def on_row(row: dict, dtype_name: str = dtype_name) -> None:
            medians = row_medians(row)
            progress(f"{dtype_name} {row['layer']['name']} {row['direction']}: "
                     + ", ".join(f"{v} {ms:.4f} ms" for v, ms in medians.items())
                     + (f"; errors: {row['errors']}" if row["errors"] else ""))

        result["tables"][dtype_name] = measure_table(dtype_name, loops, on_row)
        write_json(stem.with_suffix(".json"), result)  # a table at a time: a run cut short keeps what it has
    markdown = render_markdown(result)
    stem.with_suffix(".md").write_text(markdown)
    progress(f"wrote {stem}.json and {stem}.md")
    print(markdown, end="")
    return 0
