"""Demo: which legacy algorithms cuDNN supports, per direction, for three typical
convolutions, and what each one does when pinned through the flags.

    python -m torch_cudnn_algo.demo [--repeats N]

For each case and direction (fwd, bwd_data, bwd_filter) it lists the supported
algorithms (asked of cuDNN, nothing run), then pins each through its flag and
prints the median time of that pass, the ratio to stock PyTorch measured in the
same run, the workspace, and the relative error against a float64 result.
Finally it prints the full profile table (legacy algorithms and engine
configurations) of the fp16 channels-last forward convolution.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch

import torch_cudnn_algo
from torch_cudnn_algo import _version_gate
from torch_cudnn_algo._algorithms import DIRECTIONS

CASES = [
    # name, input shape, weight shape, padding, memory format, dtype
    ("2d fp32 (TF32 off) 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1, torch.contiguous_format, torch.float32),
    ("2d fp16 NHWC 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1, torch.channels_last, torch.float16),
    ("3d fp32 (TF32 off) 3x3x3", (4, 32, 16, 28, 28), (32, 32, 3, 3, 3), 1, torch.contiguous_format, torch.float32),
]


def median_ms(fn: Callable[[], object], repeats: int = 20, warmup: int = 3) -> float:
    """Median GPU time of ``fn()`` in milliseconds, each call timed with CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def direction_pass(direction: str, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor, padding: int):
    """The one convolution pass that issues `direction`'s cuDNN call."""
    n = x.dim() - 2
    mask = {"fwd": None, "bwd_data": [True, False, False], "bwd_filter": [False, True, False]}[direction]
    if mask is None:
        conv = torch.nn.functional.conv3d if n == 3 else torch.nn.functional.conv2d
        return lambda: conv(x, w, padding=padding)
    index = mask.index(True)
    return lambda: torch.ops.aten.convolution_backward(
        grad, x, w, None, [1] * n, [padding] * n, [1] * n, False, [0] * n, 1, mask
    )[index]


def run_case(case: tuple, repeats: int) -> None:
    name, in_shape, w_shape, padding, fmt, dtype = case
    x = torch.randn(in_shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    w = torch.randn(w_shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    conv = torch.nn.functional.conv3d if len(in_shape) == 5 else torch.nn.functional.conv2d
    grad = torch.randn_like(conv(x, w, padding=padding))
    print(f"\n{name}: input {list(in_shape)} weight {list(w_shape)} padding {padding}")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        for direction, spec in DIRECTIONS.items():
            reference = direction_pass(direction, x.double(), w.double(), grad.double(), padding)()
            sizes = torch_cudnn_algo.diagnostics.legacy_workspace_sizes(direction, x, w, padding=padding,
                                                                        allow_tf32=False)
            supported = [a for a, b in sizes.items() if b is not None]
            run = direction_pass(direction, x, w, grad, padding)
            stock_ms = median_ms(run, repeats)
            print(f"  {direction}: supported {', '.join(spec.describe(a) for a in supported) or 'none'}; "
                  f"unsupported {', '.join(spec.describe(a) for a, b in sizes.items() if b is None) or 'none'}")
            print(f"    {spec.flag:<28}{'median ms':>10}{'vs stock':>10}{'workspace MiB':>15}{'rel. error':>12}")
            stock_error = float((run().double() - reference).norm() / reference.norm())
            print(f"    {'None (stock PyTorch)':<28}{stock_ms:>10.3f}{1.0:>10.2f}{'-':>15}{stock_error:>12.2e}")
            for algo in supported:
                with torch_cudnn_algo.flags(**{spec.flag: algo, "conv_algo_strict": True}):
                    error = float((run().double() - reference).norm() / reference.norm())
                    ms = median_ms(run, repeats)
                print(f"    {spec.describe(algo):<28}{ms:>10.3f}{ms / stock_ms:>10.2f}"
                      f"{sizes[algo] / 2**20:>15.1f}{error:>12.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_cudnn_algo.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per algorithm (median)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, torch_cudnn_algo {torch_cudnn_algo.__version__}, "
          f"extension loaded: {torch_cudnn_algo.is_available()}")
    flag_values = ", ".join(f"{s.flag}={getattr(torch.backends.cudnn, s.flag)!r}" for s in DIRECTIONS.values())
    print(f"flags on torch.backends.cudnn: {flag_values}, conv_algo_strict={torch.backends.cudnn.conv_algo_strict!r}")
    if not torch_cudnn_algo.is_available():
        print(f"extension not loaded: {torch_cudnn_algo.load_error()}")
        return 1
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        print("no CUDA GPU with cuDNN here: the flags are registered, nothing to run.")
        return 0
    print(f"GPU {torch.cuda.get_device_name()}, cuDNN {_version_gate.cudnn_version_string(torch_cudnn_algo.cudnn_version())}")
    for case in CASES:
        run_case(case, args.repeats)
    _, in_shape, w_shape, padding, fmt, dtype = CASES[1]
    spec = lambda shape: torch_cudnn_algo.TensorSpec(shape, dtype, fmt)  # noqa: E731
    table = torch_cudnn_algo.profile("fwd", spec(in_shape), spec(w_shape), padding=padding, reps=args.repeats)
    print(f"\n{table}\nprofiled in {table.environment['profile_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
