"""Result files: strict, compact JSON written atomically, the file-name part of a GPU, progress
lines, and the environment every measurement records."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .internal import own_kernels_built

REPO_ROOT = Path(__file__).resolve().parents[2]

__all__ = ["REPO_ROOT", "cudnn_text", "device_slug", "dumps", "environment", "error_text", "finite", "heading", "nested",
           "now_iso", "progress", "publish", "set_progress_label", "write_json"]


class _Log:
    """Where progress lines come from (a child process names its kind and network) and since when."""

    label = "zoo"
    started = time.perf_counter()


def set_progress_label(label: str) -> None:
    _Log.label, _Log.started = label, time.perf_counter()


def progress(message: str) -> None:
    print(f"[{_Log.label} {time.perf_counter() - _Log.started:7.1f} s] {message}", file=sys.stderr, flush=True)


def error_text(exc: BaseException) -> str:
    """One line naming the exception: what a result file keeps of a failure."""
    first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


SIGNIFICANT_DIGITS = 7  # beyond what any measurement resolves; every rendered table stays the same


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (the files stay strict JSON) and
    every other float rounded to ``SIGNIFICANT_DIGITS`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def nested(record: Any, *keys: str) -> Any:
    """A nested value of a result record, None where the record, a key or the measurement is missing."""
    value = record
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _flat(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or not value


def dumps(value: Any, depth: int = 0) -> str:
    """JSON, one line per object or list that holds only scalars, indented by one per level."""
    pad = " " * depth
    if isinstance(value, dict) and value and not all(_flat(v) for v in value.values()):
        items = [f"{pad} {json.dumps(str(k))}: {dumps(v, depth + 1).lstrip()}" for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)) and value and not all(_flat(v) for v in value):
        return pad + "[\n" + ",\n".join(dumps(v, depth + 1) for v in value) + "\n" + pad + "]"
    return pad + json.dumps(value, ensure_ascii=False, default=str)


def write_json(path: Path, data: object) -> None:
    """Written aside, then renamed: a run cut short never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(dumps(finite(json.loads(json.dumps(data, default=str)))) + "\n")
    partial.replace(path)


def now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def device_slug(gpu_name: str | None) -> str:
    """A short file-name part for a GPU: "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA H200" ->
    "h200"; otherwise the lower-case alphanumerics of the name."""
    if not gpu_name:
        return "unknown"
    # Model names are one or two letters then 2-4 digits (H100, A100, L40S, GH200, B200);
    # memory sizes ("80GB") start with a digit and memory types ("HBM3") have one digit.
    model = re.search(r"\b([A-Za-z]{1,2}\d{2,4}[A-Za-z]?)\b", gpu_name.replace("NVIDIA", ""))
    if model:
        return model.group(1).lower()
    return re.sub(r"[^a-z0-9]", "", gpu_name.lower()) or "unknown"


def cudnn_text(version: int | str | None) -> str | None:
    """cuDNN's integer version (91900; 8 used 8907 = 8.9.7) -> ``"9.19.0"``."""
    if version is None or isinstance(version, str):
        return version
    if version >= 90000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def heading(title: str, report: dict, command: str) -> list[str]:
    """A result page's first lines: its title, then the machine, library versions and date the
    run recorded and the command that made it."""
    env = report["environment"]
    return [f"# {title}", "",
            f"{env.get('device')}, torch {env.get('torch')}, cuDNN {env.get('cudnn')}, {report['date']}. "
            f"Command: `{command}`.", ""]


def publish(path: Path, markdown: str) -> None:
    """Writes a result page to ``path`` and prints it."""
    path.write_text(markdown)
    print(markdown, end="", flush=True)


def environment() -> dict[str, object]:
    """What the numbers depend on: GPU, versions, code. Needs torch and a GPU."""
    import torch

    import torch_cudnn_algo

    def version_of(module: str) -> str | None:
        return getattr(sys.modules.get(module), "__version__", None)

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=REPO_ROOT)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": cudnn_text(torch.backends.cudnn.version()), "cuda": torch.version.cuda,
            "torch_cudnn_algo": torch_cudnn_algo.__version__, "extension_loaded": torch_cudnn_algo.is_available(),
            "own_kernels": own_kernels_built(),
            "torchvision": version_of("torchvision"), "timm": version_of("timm"),
            "torchaudio": version_of("torchaudio"), "python": platform.python_version(), "git_commit": commit,
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None}
