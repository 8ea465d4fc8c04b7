"""The profile table of one ResNet-50 layer (default: layer3's 3x3 conv, input
[64, 256, 14, 14], fp16 channels_last) in each direction, with the wall time to
list and to profile it, and a training-style check of the "fastest" policy:
the time of the first step (which profiles) and the wall time per training step
(forward + backward, a loop of 200, modes interleaved over 5 rounds) against stock.

    python benchmarks/profile_table.py --out profile_table.json

Needs a GPU. Prints the tables and writes them (and the timings) as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import torch_cudnn_algo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default="64x256x14x14 float16 channels_last")
    parser.add_argument("--weight", default="256x256x3x3 float16 channels_last")
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--padding", type=int, default=1)
    parser.add_argument("--no-energy", action="store_true")
    parser.add_argument("--policy-only", action="store_true", help="skip the tables")
    parser.add_argument("--out", default="profile_table.json")
    args = parser.parse_args()

    conv = dict(stride=args.stride, padding=args.padding)
    results: dict[str, object] = {"input": args.input, "weight": args.weight, **conv, "directions": {}}
    for direction in () if args.policy_only else ("fwd", "bwd_data", "bwd_filter"):
        started = time.perf_counter()
        candidates = torch_cudnn_algo.list_algorithms(direction, args.input, args.weight, **conv)
        list_s = time.perf_counter() - started
        base = torch.cuda.memory_allocated()
        started = time.perf_counter()
        table = torch_cudnn_algo.profile(direction, args.input, args.weight, **conv,
                                         energy=not args.no_energy)
        profile_s = time.perf_counter() - started
        leaked = torch.cuda.memory_allocated() - base
        print(table)
        print(f"{direction}: {len(candidates)} candidates listed in {list_s:.2f} s "
              f"({sum(c.ok for c in candidates)} runnable); profiled in {profile_s:.2f} s; "
              f"memory after - before = {leaked} bytes\n")
        results["directions"][direction] = {
            "list_seconds": list_s, "profile_seconds": profile_s, "memory_delta": leaked,
            "table": json.loads(table.to_json()),
        }

    # The "fastest" policy in a training-style loop: first call profiles.
    spec = torch_cudnn_algo.TensorSpec.parse(args.input)
    wspec = torch_cudnn_algo.TensorSpec.parse(args.weight)
    x = torch.randn(spec.shape, device="cuda", dtype=spec.dtype).to(memory_format=spec.memory_format)
    w = torch.randn(wspec.shape, device="cuda", dtype=wspec.dtype).to(memory_format=wspec.memory_format)
    x.requires_grad_()
    w.requires_grad_()

    def step() -> None:
        y = torch.nn.functional.conv2d(x, w, **conv)
        y.backward(torch.ones_like(y))

    def step_ms(steps: int = 200) -> float:
        """Wall time per step over a loop: what training throughput sees."""
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - started) / steps * 1e3

    policy = dict(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest", conv_bwd_filter_algo="fastest")
    step()  # stock warm-up
    with torch_cudnn_algo.flags(**policy):
        torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - started
    samples: dict[str, list[float]] = {"stock": [], "fastest": []}
    for _ in range(5):
        samples["stock"].append(step_ms())
        with torch_cudnn_algo.flags(**policy):
            samples["fastest"].append(step_ms())
    stock_ms, fastest_ms = (statistics.median(samples[k]) for k in ("stock", "fastest"))
    print(f"fastest policy: first step (profiles 3 directions) {first_s:.2f} s; "
          f"step {fastest_ms:.3f} ms vs stock {stock_ms:.3f} ms ({fastest_ms / stock_ms:.3f}x)")
    results["policy"] = {"first_step_seconds": first_s, "step_ms": fastest_ms, "stock_step_ms": stock_ms,
                         "samples": samples}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
