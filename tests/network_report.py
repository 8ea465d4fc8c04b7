"""Renders the JSON lines tests/test_networks_gpu.py writes (one per network x
setting, to the file named by TORCH_CUDNN_ALGO_NETWORK_REPORT) as a markdown table.

    TORCH_CUDNN_ALGO_NETWORK_REPORT=/tmp/networks.jsonl python3 -m pytest -q tests/test_networks_gpu.py
    python3 tests/network_report.py /tmp/networks.jsonl

Errors are against a float64 copy of the model that follows the run's own
ReLU/Hardswish/max-pool branches (so mask flips are not in them); "vs plain f64"
is the gradient error against the float64 model taking its own branches, and
"flips" how many branch decisions differ from it. "ran/calls" is, per direction
(fwd, bwd_data, bwd_filter), how many calls ran our plan / how many reached cuDNN.
A test run twice keeps its last line.
"""

from __future__ import annotations

import json
import sys

COLUMNS = ("model", "dtype", "layout", "setting", "out err", "grad err", "stock grad err", "ratio",
           "worst param err (stock)", "vs plain f64", "flips (stock)", "ran/calls fwd bwd_d bwd_f", "refusals",
           "step s", "result")


def _num(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # "inf" / "nan" as the tests write them
        return value
    return f"{value:.2e}"


def _runs(row: dict) -> str:
    ran, calls = row.get("ran") or {}, row.get("cudnn_calls") or {}
    return " ".join(f"{ran.get(d, '-')}/{calls.get(d, '-')}" for d in ("fwd", "bwd_data", "bwd_filter"))


def _ratio(value) -> str:
    if value is None or isinstance(value, str):
        return value or "-"
    return f"{value:.2f}"


def render(rows: list[dict]) -> str:
    latest: dict[str, dict] = {}
    for row in rows:
        key = row.get("test") or f"{row['model']}-{row['dtype']}-{row['layout']}-{row['setting']}"
        latest.pop(key, None)
        latest[key] = row
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in latest.values():
        cells = [
            row["model"], row["dtype"], row["layout"], row["setting"],
            _num(row.get("out_err")), _num(row.get("grad_err")), _num(row.get("stock_grad_err")),
            _ratio(row.get("ratio")),
            f"{_num(row.get('worst_param_err'))} ({_num(row.get('stock_worst_param_err'))})",
            _num(row.get("plain_grad_err")),
            f"{row.get('flips', '-')} ({row.get('stock_flips', '-')})",
            _runs(row),
            str(row.get("refusals", "-")),
            f"{row['step_s']:.3f}" if isinstance(row.get("step_s"), (int, float)) else "-",
            "pass" if row.get("passed") else "FAIL",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    first = next(iter(latest.values()), {})
    if first.get("device"):
        lines.append("")
        lines.append(f"{first['device']}, torch {first.get('torch')}, cuDNN {first.get('cudnn')}")
    failed = [r for r in latest.values() if not r.get("passed") and r.get("failures")]
    for row in failed:
        lines.append(f"- {row.get('test')}: " + "; ".join(row["failures"]))
    return "\n".join(lines)


def main(paths: list[str]) -> None:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f if line.strip())
    print(render(rows))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} REPORT.jsonl [...]")
    main(sys.argv[1:])
