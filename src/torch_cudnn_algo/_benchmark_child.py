"""Stock ``torch.backends.cudnn.benchmark = True`` for ``torch-cudnn-algo tune``,
measured in a fresh process:

    python -m torch_cudnn_algo._benchmark_child [module:callable] --batch 64 --image-size 224 \\
        --amp fp16 --seed 0 --rounds 7 --steps 20

Stock PyTorch keeps one cache of execution plans for its heuristic and benchmark
modes: in a process that already ran a configuration with ``benchmark=False``,
``benchmark=True`` reuses that execution plan and searches nothing. So the command runs
this module in a process of its own, with this package's variables
(``TORCH_CUDNN_CONV_*``, ``TORCH_CUDNN_ALGO_PLAN``) removed from its
environment, on the same model, inputs, autocast and seed. It times the first
step (stock's search, with its execution plan builds), then measures the step as the
command measures stock heuristics and the tuned plan (``_step_timing``), and
prints one line: :data:`RESULT_PREFIX` and a JSON object, ``{"error": ...}``
when it failed. The parent's side of that protocol is here too
(:func:`child_command`, :func:`child_environment`, :func:`parse_result`,
:func:`run_child`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence

RESULT_PREFIX = "torch-cudnn-algo benchmark child result: "
MODULE = "torch_cudnn_algo._benchmark_child"
_STRIPPED_PREFIXES = ("TORCH_CUDNN_CONV_",)
_STRIPPED_NAMES = ("TORCH_CUDNN_ALGO_PLAN",)
_STDERR_LINES = 6  # the last lines of a failed child's stderr the parent shows


class BenchmarkChildError(Exception):
    """What went wrong with the benchmark child, in one line."""


# -- the parent's side ---------------------------------------------------------------

def child_arguments(args: argparse.Namespace) -> list[str]:
    """The child's arguments for the tune command's ``args``: the same workload and timing."""
    argv = [args.model] if args.model else []
    argv += ["--batch", str(args.batch), "--image-size", str(args.image_size), "--amp", args.amp,
             "--seed", str(args.seed), "--rounds", str(args.rounds), "--steps", str(args.steps),
             "--energy" if args.energy else "--no-energy", "--energy-window-s", str(args.energy_window_s),
             "--energy-rounds", str(args.energy_rounds)]
    return argv


def child_command(args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", MODULE, *child_arguments(args)]


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what would pin an algorithm or apply a plan in the child."""
    return {key: value for key, value in environ.items()
            if not key.startswith(_STRIPPED_PREFIXES) and key not in _STRIPPED_NAMES}


def _numbers(result: Mapping[str, object], key: str, allow_none: bool = False) -> list[float | None]:
    values = result.get(key)
    if not isinstance(values, list):
        raise BenchmarkChildError(f"its result has no list {key!r}")
    for value in values:
        if value is None and allow_none:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BenchmarkChildError(f"its result's {key!r} holds {value!r}, not a number")
    return values


def parse_result(stdout: str) -> dict:
    """The result the child printed (its last :data:`RESULT_PREFIX` line), checked; other
    lines (a model printing to stdout) are ignored. Raises :class:`BenchmarkChildError`
    for no result line, one that is not a JSON object, a reported failure, or missing or
    non-numeric measurements."""
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        raise BenchmarkChildError("it printed no result line")
    try:
        result = json.loads(lines[-1][len(RESULT_PREFIX):])
    except json.JSONDecodeError as exc:
        raise BenchmarkChildError(f"its result line is not JSON ({exc})") from None
    if not isinstance(result, dict):
        raise BenchmarkChildError(f"its result is a JSON {type(result).__name__}, not an object")
    if "error" in result:
        raise BenchmarkChildError(str(result["error"]))
    first = result.get("first_step_s")
    if isinstance(first, bool) or not isinstance(first, (int, float)) or not math.isfinite(first) or first < 0:
        raise BenchmarkChildError(f"its result's 'first_step_s' is {first!r}, not a time")
    for key in ("wall_ms", "gpu_ms", "conv_ms"):
        if not _numbers(result, key):
            raise BenchmarkChildError(f"its result's {key!r} is empty")
    _numbers(result, "energy_j", allow_none=True)
    return result


def _stderr_tail(stderr: str | bytes | None) -> str:
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    lines = [line for line in (stderr or "").splitlines() if line.strip()]
    return "\n".join(f"    {line}" for line in lines[-_STDERR_LINES:])


def run_child(args: argparse.Namespace, timeout_s: float) -> dict:
    """Runs the child and returns its checked result; raises :class:`BenchmarkChildError`
    (the message names the cause and ends with the child's last stderr lines) when it
    cannot start, times out, or gives no usable result."""
    command = child_command(args)
    try:
        done = subprocess.run(command, env=child_environment(os.environ), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = _stderr_tail(exc.stderr)
        raise BenchmarkChildError(f"timed out after {timeout_s:.0f} s (--benchmark-timeout)"
                                  + (f"; its stderr ended:\n{tail}" if tail else "")) from None
    except OSError as exc:
        raise BenchmarkChildError(f"could not start {command[0]}: {exc}") from None
    try:
        return parse_result(done.stdout)
    except BenchmarkChildError as exc:
        tail = _stderr_tail(done.stderr)
        status = f"exit status {done.returncode}; " if done.returncode else ""
        raise BenchmarkChildError(f"{status}{exc}" + (f"; its stderr ended:\n{tail}" if tail else "")) from None


# -- the child -------------------------------------------------------------------------

def _pinned() -> list[str]:
    """What in this process would keep it from being stock PyTorch."""
    import torch_cudnn_algo
    from torch_cudnn_algo import _flags

    pinned = []
    for name in ("conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo"):
        value = _flags.get_flag(name)
        if value is not None:
            pinned.append(f"torch.backends.cudnn.{name} = {value!r}")
    if torch_cudnn_algo.current_plan() is not None:
        pinned.append("a plan is in use")
    return pinned


def measure(args: argparse.Namespace) -> dict:
    import torch

    from . import _step_timing, _workload

    if not torch.cuda.is_available():
        raise RuntimeError("needs a CUDA GPU, and torch.cuda.is_available() is False here")
    pinned = _pinned()
    if pinned:
        raise RuntimeError(f"not stock PyTorch: {'; '.join(pinned)}")
    model, inputs = _workload.build_workload(args)
    amp = _workload.AMP_DTYPES[args.amp]

    def step() -> None:
        _step_timing.training_step(model, inputs, amp)
        for parameter in model.parameters():
            parameter.grad = None

    _step_timing.warm_up_cuda()
    torch.backends.cudnn.benchmark = True
    first = _step_timing.step_seconds(step)
    second = _step_timing.step_seconds(step)
    modes = {"benchmark": contextlib.nullcontext}
    times = _step_timing.measure_modes(step, modes, args.rounds, args.steps)["benchmark"]
    energy: dict[str, object] = {"note": "n/a: --no-energy"}
    if args.energy:
        # This process's one mode, with its A/A control: its spread is this process's own.
        report, why = _step_timing.step_energy(step, modes, _workload.energy_settings(args))
        times["energy_j"] = _step_timing.per_round_joules(report, "benchmark")
        energy = {"note": why} if report is None else {"summary": report.summary(), "resolution": report.resolution}
    return {"first_step_s": first, "second_step_s": second, **times, "energy": energy,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark), "gpu": torch.cuda.get_device_name(),
            "pid": os.getpid()}


def build_parser() -> argparse.ArgumentParser:
    from . import _workload

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="Stock cudnn.benchmark=True for torch-cudnn-algo tune, "
                                                 "in a fresh process (prints one JSON result line).")
    _workload.workload_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result, status = measure(args), 0
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the result
        traceback.print_exc()
        result, status = {"error": f"{type(exc).__name__}: {exc}"}, 1
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
