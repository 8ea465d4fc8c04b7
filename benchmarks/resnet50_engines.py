"""ResNet-50 convolution layers at batch 64: for each layer and direction, how many
engine configurations cuDNN offers, the fastest one pinned through the flags, and
its time against stock PyTorch measured in the same run; also the time of the
configuration stock itself picks (first usable of heuristics mode A), pinned,
against stock (the equivalence check: same kernel, so the ratio should be ~1).

    python benchmarks/resnet50_engines.py --dtype float16 --out results.json

Needs a GPU and torchvision. Prints a table and writes every number as JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import torch_cudnn_algo
from torch_cudnn_algo._algorithms import DIRECTIONS
from torch_cudnn_algo._timing import median_ms


def resnet50_conv_layers(batch: int) -> list[dict]:
    """Unique (input shape, conv parameters) of torchvision's ResNet-50 at 224x224."""
    import torchvision  # benchmark-only dependency: imported where the network is built

    model = torchvision.models.resnet50()
    layers: dict[tuple, dict] = {}

    def hook(module, inputs, _output):
        shape = tuple(inputs[0].shape)
        key = (shape, tuple(module.weight.shape), module.stride, module.padding)
        layers.setdefault(key, {"name": f"{len(layers):02d}", "input": (batch, *shape[1:]),
                                "weight": tuple(module.weight.shape), "stride": module.stride[0],
                                "padding": module.padding[0], "count": 0})["count"] += 1

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    return list(layers.values())


def direction_pass(direction, x, w, grad, stride, padding):
    if direction == "fwd":
        return lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=padding)
    mask = [True, False, False] if direction == "bwd_data" else [False, True, False]
    index = 0 if mask[0] else 1
    return lambda: torch.ops.aten.convolution_backward(
        grad, x, w, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1, mask)[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=240, help="stop starting new layers after this")
    parser.add_argument("--first-layer", type=int, default=0, help="skip the layers before this index")
    parser.add_argument("--out", default="resnet50_engines.json")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    fmt = torch.channels_last if dtype == torch.float16 else torch.contiguous_format
    started = time.perf_counter()
    results = []
    print(f"{torch.cuda.get_device_name()} cuDNN {torch_cudnn_algo.cudnn_version()} {args.dtype} "
          f"{'channels_last' if dtype == torch.float16 else 'NCHW'} batch {args.batch}, TF32 "
          f"{torch.backends.cudnn.allow_tf32}")
    print(f"{'layer':<6}{'input':<20}{'weight':<18}{'s':>2}{'dir':>11}{'configs':>8}{'usable':>7}"
          f"{'stock ms':>10}{'best ms':>9}{'best/stock':>11}{'stockpick/stock':>16}  best configuration")
    for layer in resnet50_conv_layers(args.batch)[args.first_layer:]:
        if time.perf_counter() - started > args.max_seconds:
            print(f"time budget reached: stopped before layer {layer['name']}")
            break
        x = torch.randn(layer["input"], device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        w = torch.randn(layer["weight"], device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        s, p = layer["stride"], layer["padding"]
        grad = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=s, padding=p))
        for direction, spec in DIRECTIONS.items():
            run = direction_pass(direction, x, w, grad, s, p)
            configs = torch_cudnn_algo.engine_configs(direction, x, w, stride=s, padding=p)
            stock_ms = median_ms(run, args.repeats)
            timings = {}
            for config in configs:
                if config.refusal is not None:
                    continue
                try:
                    with torch_cudnn_algo.flags(**{spec.flag: config.name, "conv_algo_strict": True}):
                        timings[config.name] = median_ms(run, args.repeats)
                except (RuntimeError, torch.OutOfMemoryError) as exc:
                    timings[config.name] = None
                    print(f"  {config.name}: {str(exc).splitlines()[0][:120]}")
                torch_cudnn_algo.clear_cache()
            stock_pick = next((c.name for c in configs if c.source == "heuristics_a" and c.refusal is None), None)
            ok = {n: t for n, t in timings.items() if t is not None}
            best = min(ok, key=ok.get) if ok else None
            row = {"layer": layer, "direction": direction, "configs": len(configs), "usable": len(ok),
                   "stock_ms": stock_ms, "best": best, "best_ms": ok.get(best), "stock_pick": stock_pick,
                   "stock_pick_ms": ok.get(stock_pick), "timings": timings,
                   "notes": {c.name: c.numerical_notes + c.behavior_notes for c in configs}}
            results.append(row)
            ratio = lambda t: f"{t / stock_ms:.2f}" if t else "-"  # noqa: E731
            print(f"{layer['name']:<6}{str(list(layer['input'])):<20}{str(list(layer['weight'])):<18}{s:>2}"
                  f"{direction:>11}{len(configs):>8}{len(ok):>7}{stock_ms:>10.3f}"
                  f"{(ok.get(best) or 0):>9.3f}{ratio(ok.get(best)):>11}{ratio(ok.get(stock_pick)):>16}  {best}",
                  flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "dtype": args.dtype, "batch": args.batch,
                   "seconds": time.perf_counter() - started, "rows": results}, f, indent=1)
    print(f"done in {time.perf_counter() - started:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    main()
