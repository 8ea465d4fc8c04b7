"""The workload the ``torch-cudnn-algo tune`` command times: a model with its example inputs,
autocast and seed, and the timing rounds. Its benchmark=True child process
(``_benchmark_child``) reads the same arguments and builds the same workload.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

import torch

__all__ = ["AMP_DTYPES", "DEFAULT_NET_TEXT", "build_workload", "energy_settings", "workload_arguments"]

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}

DEFAULT_NET_TEXT = ("default network (mixed CNN: ResNet stem and 3x3/1x1 bottlenecks, ResNeXt grouped 3x3, "
                    "inverted residuals with depthwise 3x3/5x5 and squeeze-excite)")


def workload_arguments(parser: argparse.ArgumentParser) -> None:
    """What the tune command times and its benchmark=True child repeats: the model, its
    inputs and autocast, the seed, the timing rounds, energy."""
    parser.add_argument("model", nargs="?", help="module:callable returning (model, example_inputs) on the GPU "
                        "(found from the current directory); default: the embedded " + DEFAULT_NET_TEXT)
    parser.add_argument("--batch", type=int, default=64, help="batch of the default network (default 64)")
    parser.add_argument("--image-size", type=int, default=224, help="image size of the default network (default 224)")
    parser.add_argument("--amp", choices=tuple(AMP_DTYPES), default="fp16",
                        help="autocast dtype of the training step (fp32: no autocast); default fp16")
    parser.add_argument("--seed", type=int, default=0,
                        help="torch.manual_seed before the model is built, in every process (default 0)")
    parser.add_argument("--rounds", type=int, default=7, help="timing rounds per mode (default 7); stock "
                        "heuristics and the tuned plan alternate within each")
    parser.add_argument("--steps", type=int, default=20, help="training steps per wall-time round (default 20)")
    parser.add_argument("--energy", action=argparse.BooleanOptionalAction, default=True,
                        help="energy per step from NVML's counter, where the GPU has it: the modes alternated "
                             "in windows of seconds, after a warm-up to a steady temperature, with an A/A control "
                             "(default: on; about --energy-rounds x (modes + 1) x --energy-window-s seconds plus "
                             "up to 60 s of warm-up; see docs/energy.md)")
    parser.add_argument("--energy-window-s", type=float, default=2.0, metavar="SECONDS",
                        help="least length of an energy window (default 2.0)")
    parser.add_argument("--energy-rounds", type=int, default=5, help="energy windows per mode (default 5)")


def _load_callable(spec: str) -> Callable[[], object]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"model must be given as module:callable, got {spec!r}")
    sys.path.insert(0, os.getcwd())  # a module beside the user, as `python -m` would find it
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target  # type: ignore[return-value]


def _user_model(spec: str) -> tuple[torch.nn.Module, tuple[object, ...]]:
    made = _load_callable(spec)()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise ValueError(f"{spec} must return (model, example_inputs), got {type(made).__name__}")
    model, inputs = made
    return model, (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


def _default_model(args: argparse.Namespace) -> tuple[torch.nn.Module, tuple[object, ...]]:
    from ._default_net import DefaultNet, default_example_inputs

    model = DefaultNet().cuda().to(memory_format=torch.channels_last)
    return model, (default_example_inputs(args.batch, args.image_size, "cuda"),)


def build_workload(args: argparse.Namespace) -> tuple[torch.nn.Module, tuple[object, ...]]:
    """The model and example inputs of ``args`` (``model``, ``batch``, ``image_size``), the
    global RNG seeded with ``seed`` first: the tune command and its benchmark child build the
    same weights."""
    torch.manual_seed(args.seed)
    return _user_model(args.model) if args.model else _default_model(args)


def energy_settings(args: argparse.Namespace):
    """The energy measurement of ``args`` (``--energy-window-s``, ``--energy-rounds``)."""
    import dataclasses

    from ._step_timing import STEP_ENERGY

    return dataclasses.replace(STEP_ENERGY, window_s=args.energy_window_s, rounds=args.energy_rounds)
