"""Checks, before any test runs, that each setting's flags read back after ``import torch``.

Without the package installed in the interpreter (or with autoload off) the
settings would change nothing and every run would be a stock run in disguise.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping

from .outcomes import first_line
from .settings import DIRECTIONS, Setting

# Run with ``python -c`` in the run's environment; reports on one line of stdout.
_MARKER = "TCA_PREFLIGHT "
PREFLIGHT_CODE = r"""
import json, sys, warnings
info = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        import torch
    except Exception as exc:
        print("TCA_PREFLIGHT " + json.dumps({"error": "import torch failed: %s: %s" % (type(exc).__name__, exc)}))
        sys.exit(0)
    info["version"] = torch.__version__
    info["git_version"] = getattr(torch.version, "git_version", None)
    info["cuda"] = bool(torch.cuda.is_available())
    info["device"] = torch.cuda.get_device_name(0) if info["cuda"] else None
    cudnn = torch.backends.cudnn
    missing = object()
    info["flags"] = {}
    for d in ("fwd", "bwd_data", "bwd_filter"):
        value = getattr(cudnn, "conv_%s_algo" % d, missing)
        info["flags"][d] = "<missing>" if value is missing else value
    strict = getattr(cudnn, "conv_algo_strict", missing)
    info["strict"] = "<missing>" if strict is missing else strict
    try:
        import torch_cudnn_algo
        info["extension"] = bool(torch_cudnn_algo.is_available())
        info["load_error"] = torch_cudnn_algo.load_error()
        plan = torch_cudnn_algo.current_plan()
        info["plan"] = None if plan is None else plan.source
    except Exception as exc:
        info["package_error"] = "%s: %s" % (type(exc).__name__, exc)
info["warnings"] = [str(w.message) for w in caught if "torch_cudnn_algo" in str(w.message)]
print("TCA_PREFLIGHT " + json.dumps(info, default=str))
"""


def run_preflight(python: str, env: Mapping[str, str]) -> dict:
    """The report of ``PREFLIGHT_CODE`` run by ``python`` in ``env``, or ``{"error": ...}``."""
    try:
        done = subprocess.run(
            [python, "-c", PREFLIGHT_CODE], env=env, capture_output=True, text=True,
            timeout=600, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{python} did not run: {exc}"}
    for line in done.stdout.splitlines():
        if line.startswith(_MARKER):
            return json.loads(line[len(_MARKER):])
    return {"error": f"{python} failed (exit {done.returncode}): {first_line(done.stderr[-2000:])}"}


def preflight_problems(info: Mapping, setting: Setting | None, strict: bool) -> list[str]:
    """What is wrong with a run's environment, from the preflight child's report."""
    name = setting.name if setting else "stock"
    if info.get("error"):
        return [f"{name}: {info['error']}"]
    problems = []
    if info.get("package_error"):
        problems.append(f"{name}: torch_cudnn_algo does not import ({info['package_error']})")
    elif not info.get("extension"):
        problems.append(f"{name}: the torch_cudnn_algo extension is not loaded ({info.get('load_error')})")
    expected = setting.pin_map if setting else {}
    for direction in DIRECTIONS:
        got = info.get("flags", {}).get(direction)
        if got == "<missing>":
            problems.append(
                f"{name}: torch.backends.cudnn.conv_{direction}_algo does not exist after `import torch` "
                "(package not installed in this interpreter, or TORCH_DEVICE_BACKEND_AUTOLOAD=0)"
            )
            break
        want = expected.get(direction)
        if (None if got is None else str(got)) != want:
            problems.append(f"{name}: conv_{direction}_algo reads {got!r} after autoload, expected {want!r}")
    plan = setting.plan if setting else None
    in_use = info.get("plan")
    if info.get("extension") and (in_use and os.path.realpath(in_use)) != (plan and os.path.realpath(plan)):
        problems.append(f"{name}: the plan in use after autoload is {info.get('plan')!r}, expected {plan!r}")
    if setting is not None and strict and info.get("strict") is not True:
        problems.append(f"{name}: conv_algo_strict reads {info.get('strict')!r}, expected True")
    problems += [f"{name}: {w}" for w in info.get("warnings", [])]
    return problems
