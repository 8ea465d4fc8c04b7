"""Builds of the package against each other, convolution by convolution, through PyTorch's own
calls: each build installed in its own directory (``pip install --target DIR --no-deps WHEEL``),
timed in a fresh process per round with ``"tca.direct"`` pinned in all three directions, the order
of the builds reversed every other round, so that a machine's drift between rounds falls on all of
them alike. A layer is ``NxCxHWxKxRxSTRIDE[xGROUPS]`` (square planes and filters, padding R // 2,
fp16 channels_last; groups default to depthwise where K == C and R > 1, else 1); a direction is
``fwd``, ``data`` or ``filter``. Each cell is the median over rounds of a process's median of 40
CUDA-event samples of 5 calls.

    python benchmarks/builds_ab.py --builds /tmp/A,/tmp/B --layers 64x240x28x240x5x1 --directions filter
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SAMPLES, CALLS = 40, 5
MARKER = "BUILDS_AB "
ENTRY = Path(__file__).resolve().parents[1] / "builds_ab.py"


def parse_layer(text: str) -> tuple[int, int, int, int, int, int, int]:
    try:
        fields = [int(part) for part in text.split("x")]
    except ValueError:
        fields = []
    if len(fields) not in (6, 7) or min(fields) < 1:
        raise ValueError(f"layer {text!r}: expected NxCxHWxKxRxSTRIDE[xGROUPS] of positive integers")
    n, c, hw, k, r, stride = fields[:6]
    groups = fields[6] if len(fields) == 7 else (c if k == c and r > 1 else 1)
    return n, c, hw, k, r, stride, groups


def time_layers(layers: list[str], directions: list[str]) -> dict[str, float]:
    """In the child: the median ms per call of every layer and direction, our kernels pinned."""
    import torch
    from torch_cudnn_algo.demo import median_ms  # importing the package registers the flags

    for flag in ("conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo"):
        setattr(torch.backends.cudnn, flag, "tca.direct")
    masks = {"fwd": None, "data": (True, False, False), "filter": (False, True, False)}
    out = {}
    for text in layers:
        n, c, hw, k, r, stride, groups = parse_layer(text)
        half = dict(device="cuda", dtype=torch.half)
        x = torch.randn(n, c, hw, hw, **half).to(memory_format=torch.channels_last)
        w = torch.randn(k, c // groups, r, r, **half).to(memory_format=torch.channels_last)
        y = torch.nn.functional.conv2d(x, w, stride=stride, padding=r // 2, groups=groups)
        dy = torch.randn_like(y)
        for direction in directions:
            mask = masks[direction]

            def call() -> None:
                if mask is None:
                    torch.nn.functional.conv2d(x, w, stride=stride, padding=r // 2, groups=groups)
                else:
                    torch.ops.aten.convolution_backward(dy, x, w, None, [stride] * 2, [r // 2] * 2, [1, 1], False,
                                                        [0, 0], groups, mask)

            def calls() -> None:
                for _ in range(CALLS):
                    call()

            # One warm-up sample of CALLS calls, then the median of SAMPLES samples.
            out[f"{text} {direction}"] = median_ms(calls, repeats=SAMPLES, warmup=1) / CALLS
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", required=True, help="comma-separated directories, each holding one build")
    parser.add_argument("--layers", required=True, help="comma-separated NxCxHWxKxRxSTRIDE[xGROUPS]")
    parser.add_argument("--directions", default="fwd,data,filter")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write every round's times here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    layers, directions = args.layers.split(","), args.directions.split(",")
    try:
        for text in layers:
            parse_layer(text)
    except ValueError as exc:
        parser.error(f"--layers: {exc}")
    if any(d not in ("fwd", "data", "filter") for d in directions):
        parser.error(f"--directions: each of fwd, data, filter; got {args.directions!r}")
    if args.child:
        print(MARKER + json.dumps(time_layers(layers, directions)), flush=True)
        return 0
    builds = args.builds.split(",")
    times: dict[str, dict[str, list[float]]] = {build: {} for build in builds}
    for round_index in range(args.rounds):
        for build in builds if round_index % 2 == 0 else builds[::-1]:
            env = dict(os.environ, PYTHONPATH=build)
            child = subprocess.run([sys.executable, str(ENTRY), "--child",
                                    "--builds", build, "--layers", args.layers, "--directions", args.directions],
                                   env=env, capture_output=True, text=True)
            lines = [line for line in child.stdout.splitlines() if line.startswith(MARKER)]
            if child.returncode != 0 or not lines:
                print(f"{build}: round {round_index} failed\n{child.stderr[-2000:]}", file=sys.stderr)
                continue
            for key, value in json.loads(lines[0][len(MARKER):]).items():
                times[build].setdefault(key, []).append(value)
        print(f"round {round_index + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    names = [Path(build).name for build in builds]
    print("| layer | direction | " + " | ".join(f"{name} ms (rounds)" for name in names) +
          "".join(f" | {names[0]}/{name}" for name in names[1:]) + " |")
    print("|---|---|" + "--:|" * (2 * len(builds) - 1))
    for key in times[builds[0]]:
        layer, direction = key.split(" ")
        rows = [times[build].get(key, []) for build in builds]
        medians = [statistics.median(row) if row else float("nan") for row in rows]
        cells = [f"{m:.4f} ({min(row):.4f}-{max(row):.4f})" if row else "-" for m, row in zip(medians, rows)]
        gains = [f"{medians[0] / m:.3f}" for m in medians[1:]]
        print(f"| {layer} | {direction} | " + " | ".join(cells) + "".join(f" | {g}" for g in gains) + " |")
    if args.json:
        args.json.write_text(json.dumps(times, indent=1))
    return 0
