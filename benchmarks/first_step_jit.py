"""What a GPU pays whose architecture the installed build has only PTX for: the first training
step of a fresh process with a plan (our kernels among its picks) and an empty CUDA JIT cache,
against the same with the build's machine code.

    python benchmarks/first_step_jit.py --tune PLAN          # once: the main job's network, tuned
    python benchmarks/first_step_jit.py --plan PLAN --label sass   # per installed build
    python benchmarks/first_step_jit.py --render             # the table from the saved rows

Each measurement runs in a fresh child process whose CUDA JIT cache (``CUDA_CACHE_PATH``) is a new
empty directory, so the driver compiles whatever PTX the step needs, as on a machine that never
ran this build; a second child on the same cache shows what the cache saves. Rows are kept in
``results/first-step-jit-<gpu>-<date>.json`` under their label (the build's kernel architectures
are recorded with them); ``--render`` writes the markdown beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
CHILD = """
import json, torch, torch_cudnn_algo
from torch_cudnn_algo import _build_info, _default_net, _step_timing
model = _default_net.DefaultNet().cuda().to(memory_format=torch.channels_last)
inputs = (_default_net.default_example_inputs(device="cuda"),)
_step_timing.warm_up_cuda()
torch_cudnn_algo.use_plan(torch_cudnn_algo.load_plan({plan!r}))
before = torch_cudnn_algo.diagnostics.pinned_run_counts()
step = lambda: _step_timing.training_step(model, inputs, torch.float16)
first = _step_timing.step_seconds(step)
second = _step_timing.step_seconds(step)
ours = sum(1 for e in torch_cudnn_algo.current_plan().entries.values() if e.choice == "tca.direct")
print("RESULT" + json.dumps({{"first_step_s": first, "second_step_s": second, "kernel_entries": ours,
    "kernel_archs": _build_info.KERNEL_ARCHS, "gpu": torch.cuda.get_device_name(),
    "runs": sum(torch_cudnn_algo.diagnostics.pinned_run_counts().values()) - sum(before.values())}}))
"""


def child(plan: Path, cache: Path) -> dict:
    env = {**os.environ, "CUDA_CACHE_PATH": str(cache)}
    env.pop("TORCH_CUDNN_ALGO_PLAN", None)
    done = subprocess.run([sys.executable, "-c", CHILD.format(plan=str(plan))], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"first_step_jit: the child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT"):])


def result_path(gpu: str) -> Path:
    slug = gpu.lower().replace("nvidia ", "").split()[0]
    return RESULTS / f"first-step-jit-{slug}-{time.strftime('%Y-%m-%d')}.json"


def tune(plan: Path) -> None:
    import torch

    import torch_cudnn_algo
    from torch_cudnn_algo import _default_net

    model = _default_net.DefaultNet().cuda().to(memory_format=torch.channels_last)
    inputs = (_default_net.default_example_inputs(device="cuda"),)
    with torch.autocast("cuda", dtype=torch.float16):
        torch_cudnn_algo.tune(model, inputs, progress=False).save(str(plan))
    print(f"first_step_jit: tuned the main job's network into {plan}")


def measure(plan: Path, label: str) -> None:
    with tempfile.TemporaryDirectory(prefix="cuda-jit-") as cache:
        cold = child(plan, Path(cache))
        warm = child(plan, Path(cache))
    row = {"label": label, "kernel_archs": cold["kernel_archs"], "kernel_entries": cold["kernel_entries"],
           "cold_first_step_s": cold["first_step_s"], "warm_first_step_s": warm["first_step_s"],
           "second_step_s": cold["second_step_s"], "plan_runs": cold["runs"]}
    path = result_path(cold["gpu"])
    report = json.loads(path.read_text()) if path.exists() else {"gpu": cold["gpu"], "rows": {}}
    report["rows"][label] = row
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"first_step_jit [{label}, {row['kernel_archs']}]: first step {row['cold_first_step_s']:.3f} s with an "
          f"empty CUDA JIT cache, {row['warm_first_step_s']:.3f} s with the cache the first run filled "
          f"(second step {row['second_step_s']:.3f} s); {row['kernel_entries']} plan entries run our kernels")


def render() -> None:
    for path in sorted(RESULTS.glob("first-step-jit-*.json")):
        report = json.loads(path.read_text())
        lines = [f"# First step with a plan: machine code against PTX only ({report['gpu']})", "",
                 "The main job's network (batch 64, fp16 autocast, channels_last) with a plan tuned on this GPU, "
                 "in a fresh process: the first training step with an empty CUDA JIT cache, then again in a "
                 "second process on the cache the first filled. Command: "
                 "`python benchmarks/first_step_jit.py --plan PLAN --label LABEL`, once per installed build.", "",
                 "| build | kernel code in the build | plan entries on our kernels | first step, empty JIT cache | "
                 "first step, cache filled | second step |", "|---|---|--:|--:|--:|--:|"]
        for row in report["rows"].values():
            lines.append(f"| {row['label']} | {row['kernel_archs']} | {row['kernel_entries']} | "
                         f"{row['cold_first_step_s']:.3f} s | {row['warm_first_step_s']:.3f} s | "
                         f"{row['second_step_s']:.3f} s |")
        path.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print(path.with_suffix(".md").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tune", type=Path, metavar="PLAN", help="tune the main job's network into PLAN")
    parser.add_argument("--plan", type=Path, help="measure the installed build's first step with this plan")
    parser.add_argument("--label", default="this build", help="the row's name (e.g. sass, ptx-only)")
    parser.add_argument("--render", action="store_true", help="write the markdown of the saved rows (no GPU)")
    args = parser.parse_args()
    if args.tune:
        tune(args.tune)
    if args.plan:
        measure(args.plan, args.label)
    if args.render:
        render()
    if not (args.tune or args.plan or args.render):
        parser.error("give --tune, --plan or --render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
