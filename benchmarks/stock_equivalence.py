"""Pinning the engine configuration stock PyTorch itself runs (the first usable
configuration of cuDNN's heuristics mode A) must cost the same GPU time as stock.
For every ResNet-50 layer at batch 64 and every direction, stock and the pinned
configuration are timed alternately in rounds (CUDA events, medians), so drift
hits both alike.

    python benchmarks/stock_equivalence.py --dtype float16
"""

from __future__ import annotations

import argparse
import statistics

import torch

import torch_cudnn_algo
from resnet50_engines import direction_pass, resnet50_conv_layers
from torch_cudnn_algo._algorithms import DIRECTIONS
from torch_cudnn_algo._timing import median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    fmt = torch.channels_last if dtype == torch.float16 else torch.contiguous_format
    ratios: dict[str, list[float]] = {d: [] for d in DIRECTIONS}
    print(f"{torch.cuda.get_device_name()} {args.dtype}: pinned stock pick / stock, per layer")
    for layer in resnet50_conv_layers(args.batch):
        x = torch.randn(layer["input"], device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        w = torch.randn(layer["weight"], device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        s, p = layer["stride"], layer["padding"]
        grad = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=s, padding=p))
        cells = []
        for direction, spec in DIRECTIONS.items():
            run = direction_pass(direction, x, w, grad, s, p)
            pick = next(c.name for c in torch_cudnn_algo.engine_configs(direction, x, w, stride=s, padding=p)
                        if c.source == "heuristics_a" and c.refusal is None)
            stock, pinned = [], []
            for _ in range(args.rounds):
                stock.append(median_ms(run, args.repeats))
                with torch_cudnn_algo.flags(**{spec.flag: pick, "conv_algo_strict": True}):
                    pinned.append(median_ms(run, args.repeats))
            ratio = statistics.median(pinned) / statistics.median(stock)
            ratios[direction].append(ratio)
            cells.append(f"{direction} {ratio:.3f}")
        print(f"  layer {layer['name']} {list(layer['input'])} {list(layer['weight'])} s{s}: " + ", ".join(cells),
              flush=True)
    for direction, values in ratios.items():
        within = sum(abs(v - 1) <= 0.03 for v in values)
        print(f"{direction:<11} median {statistics.median(values):.3f}, range {min(values):.3f}-{max(values):.3f}, "
              f"within 3%: {within}/{len(values)}")


if __name__ == "__main__":
    main()
