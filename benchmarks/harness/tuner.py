"""Where the "fastest" tuner's time goes, per zoo network, from ``tuning_log()``.

    python benchmarks/tuner_breakdown.py --mode tune mobilenet_v3_large efficientnet_b0
    python benchmarks/tuner_breakdown.py --summarize run.jsonl [more.jsonl ...]

Per network, in this process (run one process per network for cold-start numbers):

- ``tune`` (default): a stock first step, one more step, then ``torch_cudnn_algo.tune()``
  timed, as the zoo measures "tune s";
- ``tune_first``: ``tune()`` as the network's first work in the process (its collecting pass is
  the network's first forward and backward, through stock's path), then one stock step;
- ``flag``: the first step with all three flags set to ``"fastest"`` (the tuner runs inline);
- ``benchmark``: stock ``benchmark=True``, the first step (its search) and the second.

Prints one summary line per network (the tuning log's ``time_s`` phases and counts added up)
and, with ``--jsonl PATH``, appends the network's full tuning log to PATH. ``--summarize``
renders such files as a markdown table; ``--trade`` replays the pick rule on such files' logs
(each configuration's median GPU ms and host µs per candidate) for first rounds of 4 and all
timed candidates, under three launch-cost rules: none (GPU time alone), the 2x trade the tuner
makes (beyond 10% + 2 µs more host time per call, a pick must save twice that in GPU time), and
no allowance beyond 10% + 2 µs; it prints the picks' GPU ms and host µs summed over the
configurations against stock's configuration's. ``--ceiling`` sets, per network and per
configuration, stock's configuration and the best timed candidate against the
hardware limit (``roofline.py``: the multiply-adds at the tensor cores' peak or the three
tensors' traffic at HBM3's, whichever is slower), with the TFLOP/s and TB/s reached;
``--step-ceiling`` does so per training step against a speed-up target (``step_ceiling.py``). The tuner's
own settings come from the environment
(``TORCH_CUDNN_ALGO_TUNE_CANDIDATES``, ``TORCH_CUDNN_ALGO_TUNE_RTC_CANDIDATES``,
``TORCH_CUDNN_ALGO_TUNE_THREADS``, ``TORCH_CUDNN_ALGO_TUNE_WIDE``); ``--no-prepare-ahead`` makes ``tune()`` build each
configuration's candidates only when it tunes it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

from .roofline import PEAK_TB_PER_S, ConvBound, conv_bound
from .step_ceiling import step_ceiling_table

PHASES = ("heuristics", "build", "build_sum", "wait", "operands", "warmup", "timing", "accuracy", "knob_search")
OWN_KERNEL = "tca.direct"  # our own kernels' configuration name in the tuning log
COUNTS = ("built", "built_rtc", "listed_rtc", "deferred_rtc")


def summarize(log: list[dict]) -> dict:
    """The tuning log's phases and counts added up over its entries."""
    summary = {name: round(sum(e["time_s"][name] or 0 for e in log), 3) for name in PHASES}
    summary["seconds"] = round(sum(e["seconds"] for e in log), 3)
    summary.update({name: sum(e[name] for e in log) for name in COUNTS})
    configs = [(e, c) for e in log for c in e["configs"]]
    summary["rtc_build_sum"] = round(sum(c["build_s"] or 0 for _, c in configs if c["rtc"]), 3)
    summary["stock_config_build_sum"] = round(
        sum(c["build_s"] or 0 for e, c in configs if c["config"] == e["stock_config"]), 3)
    summary["stock_config_rtc"] = sum(1 for e, c in configs if c["config"] == e["stock_config"] and c["rtc"])
    summary["non_stock_picks"] = sum(1 for e in log if e["pick"] not in (None, e["stock_config"]))
    summary["pick_ms_sum"] = round(sum((e["pick_ms"] if e["pick"] else e["stock_config_ms"]) or 0 for e in log), 3)
    summary["stock_config_ms_sum"] = round(sum(e["stock_config_ms"] or 0 for e in log), 3)
    # What the wide search's extras and our own kernels cost the tuning: the extras' builds, and
    # the kernel's first runs (host ms, module loading included) and its GPU ms per call.
    extras = [c for _, c in configs if c.get("extra")]
    summary["extras"] = len(extras)
    summary["extras_near"] = sum(1 for c in extras if c.get("probe") == "near")
    summary["extra_build_sum"] = round(sum(c["build_s"] or 0 for c in extras), 3)
    own = [c for _, c in configs if c["config"] == OWN_KERNEL]
    summary["own_kernel_runnable"] = sum(1 for c in own if c["runnable"])
    summary["own_kernel_picks"] = sum(1 for e in log if e["pick"] == OWN_KERNEL)
    summary["own_kernel_warmup_ms_sum"] = round(sum(c["warmup_ms"] or 0 for c in own), 3)
    summary["own_kernel_ms_sum"] = round(sum(c["ms"] or 0 for c in own), 3)
    return summary


def measure(args: argparse.Namespace) -> None:
    import torch

    import torch_cudnn_algo

    from .internal import set_prepare_ahead
    from .networks import build_trainer, loss_of

    if not torch_cudnn_algo.is_available():
        raise SystemExit(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    if args.no_prepare_ahead:
        set_prepare_ahead(False)
    x = torch.randn(1, 8, 8, 8, device="cuda", requires_grad=True)  # CUDA, cuDNN handles: not the network's time
    torch.nn.functional.conv2d(x, torch.randn(8, 8, 3, 3, device="cuda"), padding=1).sum().backward()

    def seconds(fn) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    cudnn = torch.backends.cudnn
    settings = {name: os.environ.get(name) for name in ("TORCH_CUDNN_ALGO_TUNE_CANDIDATES",
                                                        "TORCH_CUDNN_ALGO_TUNE_RTC_CANDIDATES",
                                                        "TORCH_CUDNN_ALGO_TUNE_THREADS",
                                                        "TORCH_CUDNN_ALGO_TUNE_WIDE") if os.environ.get(name)}
    for network in args.networks:
        trainer, _ = build_trainer(network, "cuda")
        record = {"network": network, "mode": args.mode, "label": args.label, "settings": settings,
                  "prepare_ahead": not args.no_prepare_ahead, "gpu": torch.cuda.get_device_name()}
        if args.mode == "benchmark":
            cudnn.benchmark = True
            record["benchmark_search_s"] = round(seconds(trainer.step), 3)
            record["second_step_s"] = round(seconds(trainer.step), 4)
            cudnn.benchmark = False
            print(json.dumps(record), flush=True)
            continue
        torch_cudnn_algo.clear_cache()
        if args.mode == "flag":
            cudnn.conv_fwd_algo = cudnn.conv_bwd_data_algo = cudnn.conv_bwd_filter_algo = "fastest"
            record["tuning_s"] = round(seconds(trainer.step), 3)  # the first step, tuning included
            record["second_step_s"] = round(seconds(trainer.step), 4)
            cudnn.conv_fwd_algo = cudnn.conv_bwd_data_algo = cudnn.conv_bwd_filter_algo = None
        else:
            if args.mode == "tune":
                record["stock_first_step_s"] = round(seconds(trainer.step), 3)
                seconds(trainer.step)
                torch_cudnn_algo.clear_cache()

            def tune() -> None:
                with trainer.autocast():
                    # Every configuration tuned: none taken from the tuning database.
                    torch_cudnn_algo.tune(trainer.model, trainer.inputs, loss_fn=loss_of, progress=False,
                                          retune=True)

            record["tuning_s"] = round(seconds(tune), 3)
            if args.mode == "tune_first":
                record["first_step_after_s"] = round(seconds(trainer.step), 3)  # stock's, after tune()
        log = torch_cudnn_algo.diagnostics.tuning_log()
        record.update(configurations=len(log), **summarize(log))
        print(json.dumps(record), flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as out:
                out.write(json.dumps({**record, "log": log}) + "\n")
        trainer = None  # its tensors go before the next network's
        torch.cuda.empty_cache()


def read_records(path: str) -> list[dict]:
    """The JSONL file's records (gzip-compressed when its name ends in .gz)."""
    text = gzip.open(path, "rt").read() if path.endswith(".gz") else Path(path).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# The launch-cost rules --trade compares: GPU time saved required per µs of host time added
# beyond the free allowance (None: any; inf: none allowed). The allowance and the minimum gain
# are the tuner's (kMaxHostIncrease, kHostSlackUs, kMinGain in csrc/decide/tuner/).
TRADE_RULES = {"gpu time alone": None, "2x trade": 2.0, "no trade": math.inf}
FREE_HOST_INCREASE, FREE_HOST_SLACK_US, MIN_GAIN = 0.10, 2.0, 0.01


def replay_pick(entry: dict, first_round: int | None, saved_per_added: float | None) -> dict | None:
    """The timed candidate the tuner's GPU-time and launch-cost rules pick among the first
    ``first_round`` ranks (None: every timed one); stock's configuration when none qualifies.
    The float64 accuracy check is not replayed (it is not in the log per candidate)."""
    by_name = {c["config"]: c for c in entry["configs"]}
    stock = by_name.get(entry["stock_config"])
    if stock is None or stock.get("ms") is None or stock.get("host_us") is None:
        return None
    best = stock
    for c in entry["configs"]:
        if c.get("ms") is None or c["rank"] < 0 or (first_round is not None and c["rank"] >= first_round):
            continue
        if c["ms"] >= stock["ms"] * (1 - MIN_GAIN) or c["ms"] >= best["ms"]:
            continue
        added_us = c["host_us"] - (stock["host_us"] * (1 + FREE_HOST_INCREASE) + FREE_HOST_SLACK_US)
        saved_us = (stock["ms"] - c["ms"]) * 1e3
        if added_us > 0 and saved_per_added is not None and saved_us < saved_per_added * added_us:
            continue
        best = c
    return best


def trade_table(paths: list[str]) -> str:
    """Markdown: per network and rule, the picks' summed GPU ms and host µs vs stock's configuration's."""
    lines = ["| network | label | first round | rule | stock config ms | picks ms | stock/picks | host µs added |",
             "|---|---|---|---|--:|--:|--:|--:|"]
    for path in paths:
        for record in read_records(path):
            for first_round in (4, None):
                for rule, saved_per_added in TRADE_RULES.items():
                    stock_ms = picks_ms = added_us = 0.0
                    for entry in record["log"]:
                        pick = replay_pick(entry, first_round, saved_per_added)
                        if pick is None:
                            continue
                        stock = next(c for c in entry["configs"] if c["config"] == entry["stock_config"])
                        stock_ms += stock["ms"]
                        picks_ms += pick["ms"]
                        added_us += pick["host_us"] - stock["host_us"]
                    lines.append(f"| {record['network']} | {record.get('label', '')} | "
                                 f"{first_round or 'all timed'} | {rule} | {stock_ms:.3f} | {picks_ms:.3f} | "
                                 f"{stock_ms / picks_ms if picks_ms else float('nan'):.3f} | {added_us:+.0f} |")
    return "\n".join(lines)


def _short(description: str) -> str:
    """A tuning log's convolution description without what every row of a network shares."""
    return description.split(", allow_tf32")[0].replace("torch.", "")


class _Layer(NamedTuple):
    """One configuration of a tuning log, as --ceiling sets it against the bound."""

    entry: dict
    bound: ConvBound
    stock_ms: float
    best_ms: float


def ceiling_table(paths: list[str], layers: int = 8) -> str:
    """Markdown: per network, stock's configurations, the best timed candidates and the
    hardware bound (roofline.py), summed over its distinct configurations; then its ``layers``
    configurations furthest (ms) from the bound: how far the best found is from stock and from
    the limit, and the TFLOP/s and TB/s it reaches."""
    lines = ["| network | label | configurations | stock config ms | best timed ms | bound ms | "
             "stock/best | best/bound |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    details: list[str] = []
    for path in paths:
        for record in read_records(path):
            rows: list[_Layer] = []
            for entry in record["log"]:
                timed = [c["ms"] for c in entry["configs"] if c.get("ms") is not None]
                stock_ms = entry.get("stock_config_ms")
                if not timed or stock_ms is None:
                    continue
                rows.append(_Layer(entry, conv_bound(entry["conv"]), stock_ms, min(timed)))
            stock = sum(row.stock_ms for row in rows)
            best = sum(row.best_ms for row in rows)
            limit = sum(row.bound.bound_ms for row in rows)
            lines.append(f"| {record['network']} | {record.get('label', '')} | {len(rows)} | {stock:.3f} | "
                         f"{best:.3f} | {limit:.3f} | {stock / best:.3f} | {best / limit:.2f} |")
            details += ["", f"{record['network']} ({record.get('label', '')}): the {layers} configurations "
                            "furthest from the bound", "",
                        "| direction | convolution | stock config ms | best ms | stock/best | bound ms | best/bound | "
                        "TFLOP/s (% peak) | TB/s (% peak) | bound by |",
                        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
            for entry, bound, stock_ms, best_ms in sorted(rows, key=lambda r: r.bound.bound_ms - r.best_ms)[:layers]:
                details.append(
                    f"| {entry['direction']} | {_short(entry['conv'])} | {stock_ms:.3f} | {best_ms:.3f} | "
                    f"{stock_ms / best_ms:.2f} | {bound.bound_ms:.3f} | {best_ms / bound.bound_ms:.1f} | "
                    f"{bound.tflops(best_ms):.0f} ({100 * bound.tflops(best_ms) / bound.peak_tflops:.0f}%) | "
                    f"{bound.tb_per_s(best_ms):.2f} ({100 * bound.tb_per_s(best_ms) / PEAK_TB_PER_S:.0f}%) | "
                    f"{'memory' if bound.memory_bound else 'compute'} |")
    return "\n".join(lines + details)


def table(paths: list[str]) -> str:
    """Markdown: one row per network and run of the JSONL files."""
    columns = ["network", "label", "mode", "configurations", "tuning_s", "heuristics", "build", "build_sum", "wait",
               "warmup", "timing", "accuracy", "built", "built_rtc", "deferred_rtc", "stock_config_rtc",
               "rtc_build_sum", "non_stock_picks", "pick_ms_sum", "stock_config_ms_sum", "extras", "extras_near",
               "extra_build_sum", "own_kernel_runnable", "own_kernel_picks", "own_kernel_warmup_ms_sum",
               "own_kernel_ms_sum"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for path in paths:
        for record in read_records(path):
            record.update(summarize(record["log"]))
            lines.append("| " + " | ".join(str(record.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("networks", nargs="*", help="zoo network names (benchmarks/harness/networks.py)")
    parser.add_argument("--mode", choices=("tune", "tune_first", "flag", "benchmark"), default="tune")
    parser.add_argument("--label", default="", help="a name for this run's settings, kept in each record")
    parser.add_argument("--no-prepare-ahead", action="store_true", help="tune() builds each configuration in turn")
    parser.add_argument("--jsonl", help="append each network's record and full tuning log to this file")
    parser.add_argument("--summarize", nargs="+", metavar="JSONL", help="print a markdown table of JSONL files")
    parser.add_argument("--trade", nargs="+", metavar="JSONL",
                        help="replay the pick rules on JSONL files' logs (see above); prints a markdown table")
    parser.add_argument("--ceiling", nargs="+", metavar="JSONL",
                        help="compare JSONL files' stock configurations and best timed candidates "
                             "with the H100's roofline bound (see above); prints markdown tables")
    parser.add_argument("--step-ceiling", nargs="+", metavar="JSONL",
                        help="per network of JSONL files, the convolutions per training step at their best timed "
                             "candidates and at the bound, against what --target over stock benchmark=True needs "
                             "(step_ceiling.py; needs --zoo); prints a markdown table")
    parser.add_argument("--zoo", metavar="JSON", help="--step-ceiling: a zoo result (benchmarks/zoo.py) with the "
                                                      "plan's and benchmark=True's GPU ms per step")
    parser.add_argument("--target", type=float, default=1.15,
                        help="--step-ceiling: the speed-up over stock benchmark=True to test (default 1.15)")
    args = parser.parse_args(argv)
    if args.summarize:
        print(table(args.summarize))
        return 0
    if args.trade:
        print(trade_table(args.trade))
        return 0
    if args.ceiling:
        print(ceiling_table(args.ceiling))
        return 0
    if args.step_ceiling:
        if not args.zoo:
            parser.error("--step-ceiling needs --zoo, a zoo result with the plan's and benchmark=True's step times")
        records = [record for path in args.step_ceiling for record in read_records(path)]
        print(step_ceiling_table(records, args.zoo, args.target))
        return 0
    if not args.networks:
        parser.error("name at least one network")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
