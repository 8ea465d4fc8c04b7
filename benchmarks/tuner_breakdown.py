"""Where the "fastest" tuner's time goes, per zoo network, from ``tuning_log()``.

    python benchmarks/tuner_breakdown.py --mode tune mobilenet_v3_large efficientnet_b0
    python benchmarks/tuner_breakdown.py --summarize run.jsonl [more.jsonl ...]

Per network, in this process (run one process per network for cold-start numbers):

- ``tune`` (default): a stock first step, one more step, then ``torch_cudnn_algo.tune()``
  timed, as ``zoo.py`` measures "tune s";
- ``flag``: the first step with all three flags set to ``"fastest"`` (the tuner runs inline);
- ``benchmark``: stock ``benchmark=True``, the first step (its search) and the second.

Prints one summary line per network (the tuning log's ``time_s`` phases and counts added up)
and, with ``--jsonl PATH``, appends the network's full tuning log to PATH. ``--summarize``
renders such files as a markdown table. The tuner's own settings come from the environment
(``TORCH_CUDNN_ALGO_TUNE_CANDIDATES``, ``TORCH_CUDNN_ALGO_TUNE_RTC_CANDIDATES``,
``TORCH_CUDNN_ALGO_TUNE_THREADS``); ``--no-prepare-ahead`` makes ``tune()`` build each
configuration's candidates only when it tunes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

PHASES = ("heuristics", "build", "build_sum", "wait", "operands", "warmup", "timing", "accuracy", "knob_search")
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
    return summary


def measure(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    import torch_cudnn_algo
    from torch_cudnn_algo import _tune
    from zoo_networks import build_trainer, loss_of

    if not torch_cudnn_algo.is_available():
        raise SystemExit(f"the torch_cudnn_algo extension is not loaded: {torch_cudnn_algo.load_error()}")
    if args.no_prepare_ahead:
        _tune._PREPARE_AHEAD = False
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
                                                        "TORCH_CUDNN_ALGO_TUNE_THREADS") if os.environ.get(name)}
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
            record["stock_first_step_s"] = round(seconds(trainer.step), 3)
            seconds(trainer.step)
            torch_cudnn_algo.clear_cache()

            def tune() -> None:
                with trainer.autocast():
                    torch_cudnn_algo.tune(trainer.model, trainer.inputs, loss_fn=loss_of, progress=False)

            record["tuning_s"] = round(seconds(tune), 3)
        log = torch_cudnn_algo.tuning_log()
        record.update(configurations=len(log), **summarize(log))
        print(json.dumps(record), flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as out:
                out.write(json.dumps({**record, "log": log}) + "\n")
        del trainer
        torch.cuda.empty_cache()


def table(paths: list[str]) -> str:
    """Markdown: one row per network and run of the JSONL files."""
    columns = ["network", "label", "mode", "configurations", "tuning_s", "heuristics", "build", "build_sum", "wait",
               "warmup", "timing", "accuracy", "built", "built_rtc", "deferred_rtc", "stock_config_rtc",
               "rtc_build_sum", "non_stock_picks", "pick_ms_sum", "stock_config_ms_sum"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for path in paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            record.update(summarize(record["log"]))
            lines.append("| " + " | ".join(str(record.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("networks", nargs="*", help="zoo network names (benchmarks/zoo_networks.py)")
    parser.add_argument("--mode", choices=("tune", "flag", "benchmark"), default="tune")
    parser.add_argument("--label", default="", help="a name for this run's settings, kept in each record")
    parser.add_argument("--no-prepare-ahead", action="store_true", help="tune() builds each configuration in turn")
    parser.add_argument("--jsonl", help="append each network's record and full tuning log to this file")
    parser.add_argument("--summarize", nargs="+", metavar="JSONL", help="print a markdown table of JSONL files")
    args = parser.parse_args(argv)
    if args.summarize:
        print(table(args.summarize))
        return 0
    if not args.networks:
        parser.error("name at least one network")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
