"""Demo: which legacy forward algorithms cuDNN supports for three typical
convolutions, and what each one does when pinned through the flag.

    python -m torch_cudnn_algo.demo [--repeats N]

For each case it lists the supported algorithms (asked of cuDNN, nothing run),
then pins each with ``torch.backends.cudnn.conv_fwd_algo`` and prints the
median time, the time relative to stock PyTorch measured in the same run, the
workspace, and the relative error against a float64 reference.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F

import torch_cudnn_algo

CASES = [
    # name, input shape, weight shape, padding, memory format, dtype, allow_tf32
    ("2d fp32 (TF32 off) 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1, torch.contiguous_format, torch.float32, False),
    ("2d fp16 NHWC 3x3", (32, 64, 56, 56), (64, 64, 3, 3), 1, torch.channels_last, torch.float16, False),
    ("3d fp32 (TF32 off) 3x3x3", (4, 32, 16, 28, 28), (32, 32, 3, 3, 3), 1, torch.contiguous_format, torch.float32, False),
]


def median_ms(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    for _ in range(3):
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


def run_case(case: tuple, repeats: int) -> None:
    name, in_shape, w_shape, padding, fmt, dtype, allow_tf32 = case
    conv = F.conv3d if len(in_shape) == 5 else F.conv2d
    x = torch.randn(in_shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    w = torch.randn(w_shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
    reference = conv(x.double(), w.double(), padding=padding)
    names = torch_cudnn_algo.legacy_algorithm_names("fwd")

    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=allow_tf32):
        sizes = torch_cudnn_algo.legacy_workspace_sizes("fwd", x, w, padding=padding, allow_tf32=allow_tf32)
        stock_ms = median_ms(lambda: conv(x, w, padding=padding), repeats)
        print(f"\n{name}: input {list(in_shape)} weight {list(w_shape)} padding {padding}")
        supported = [a for a, b in sizes.items() if b is not None]
        print(f"  supported legacy forward algorithms: {', '.join(f'{a} ({names[a]})' for a in supported)}")
        print(f"  unsupported: {', '.join(f'{a} ({names[a]})' for a, b in sizes.items() if b is None) or 'none'}")
        print(f"  {'conv_fwd_algo':<28}{'median ms':>10}{'vs stock':>10}{'workspace MiB':>15}{'rel. error':>12}")
        print(f"  {'None (stock PyTorch)':<28}{stock_ms:>10.3f}{1.0:>10.2f}{'-':>15}"
              f"{(conv(x, w, padding=padding).double() - reference).norm() / reference.norm():>12.2e}")
        for algo in supported:
            with torch_cudnn_algo.flags(conv_fwd_algo=algo, conv_algo_strict=True):
                out = conv(x, w, padding=padding)
                ms = median_ms(lambda: conv(x, w, padding=padding), repeats)
            error = float((out.double() - reference).norm() / reference.norm())
            print(f"  {f'{algo} ({names[algo]})':<28}{ms:>10.3f}{ms / stock_ms:>10.2f}"
                  f"{sizes[algo] / 2**20:>15.1f}{error:>12.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per algorithm (median)")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, torch_cudnn_algo {torch_cudnn_algo.__version__}, "
          f"extension loaded: {torch_cudnn_algo.is_available()}")
    print(f"flags on torch.backends.cudnn: conv_fwd_algo={torch.backends.cudnn.conv_fwd_algo!r}, "
          f"conv_algo_strict={torch.backends.cudnn.conv_algo_strict!r}")
    if not torch_cudnn_algo.is_available():
        print(f"extension not loaded: {torch_cudnn_algo.load_error()}")
        return 1
    if not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
        print("no CUDA GPU with cuDNN here: the flags are registered, nothing to run.")
        return 0
    print(f"GPU {torch.cuda.get_device_name()}, cuDNN {torch_cudnn_algo.cudnn_version()}")
    for case in CASES:
        run_case(case, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
