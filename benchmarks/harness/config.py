"""What the zoo measures and for how long: its sections, modes and child processes, and the loop
settings the parent hands to every child."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SECTIONS = ("first_step", "eager", "host", "gpu", "benchmark", "fastest_db")
MAIN_SECTIONS = ("eager", "host", "gpu")  # measured by the main child, in this order (gpu last: see measure_gpu)
EAGER_MODES = ("stock", "plan", "fastest", "control")  # control: stock again (A/A)
EAGER_COMPARED = EAGER_MODES[1:]
REPORTED_MODES = EAGER_MODES[:3]  # the result's eager_ms shape; control goes with the detail
CHILD_KINDS = ("main", "plan_first_step", "names_first_step", "benchmark", "fastest_first_run", "fastest_second_run")
CHILD_RESULT_PREFIX = "ZOO_CHILD_RESULT "  # a child's last stdout line: this, then its result as JSON
PLAN_ENV_VAR = "TORCH_CUDNN_ALGO_PLAN"
TUNING_DB_ENV_VAR = "TORCH_CUDNN_ALGO_DB"  # the tuning database (compiled execution plans among its entries)
CUDA_JIT_CACHE_ENV_VAR = "CUDA_CACHE_PATH"  # the CUDA driver's cache of kernels compiled at run time
# The flags' environment variables: all three "fastest" makes a child decide on the fly, as a user's
# `TORCH_CUDNN_CONV_FWD_ALGO=fastest python train.py` would.
FASTEST_ENV = ("TORCH_CUDNN_CONV_FWD_ALGO", "TORCH_CUDNN_CONV_BWD_DATA_ALGO", "TORCH_CUDNN_CONV_BWD_FILTER_ALGO")

WARMUP_STEPS = 3  # after the first step, before tune(): the caching allocator and lazy state settle
MODE_WARMUP_STEPS = 3  # per mode before the rounds ("fastest" tunes in the first)
UNTIMED_STEPS_AFTER_SWITCH = 2
GRAPH_WARMUP_STEPS = 3  # side-stream iterations before capture, as in PyTorch's CUDA graphs docs
MIN_CHILD_S = 30.0  # with less of the budget left, a child is not started

# Loop settings: (default, --quick). An explicit option wins over both. Host rounds: with 2,
# mobilenet_v3_large's per-round host ratio spread 0.74-1.15 on an H100.
LOOP_DEFAULTS = {"rounds": (16, 3), "steps": (6, 3), "host_rounds": (4, 1), "gpu_repeats": (5, 2),
                 "gpu_replays": (20, 5)}


@dataclass(frozen=True)
class Settings:
    """How long every loop runs, and what to run; the parent hands the loop settings to each child."""

    networks: tuple[str, ...]
    sections: tuple[str, ...]
    rounds: int
    steps: int
    host_rounds: int
    gpu_repeats: int
    gpu_replays: int
    out: Path
    quick: bool
    child_timeout_s: float
    budget_s: float | None
    knob_search: bool = False  # conv_knob_search on in the main child: tune() and "fastest" search knobs

    def loops(self) -> dict[str, object]:
        """The loop settings, as recorded in every raw file."""
        return {"rounds": self.rounds, "steps": self.steps, "host_rounds": self.host_rounds,
                "gpu_repeats": self.gpu_repeats, "gpu_replays": self.gpu_replays, "quick": self.quick,
                "warmup_steps": WARMUP_STEPS, "mode_warmup_steps": MODE_WARMUP_STEPS,
                "untimed_steps_after_switch": UNTIMED_STEPS_AFTER_SWITCH,
                "graph_warmup_steps": GRAPH_WARMUP_STEPS, "knob_search": self.knob_search}

    def child_argv(self) -> list[str]:
        return ["--out", str(self.out), "--sections", ",".join(self.sections), "--rounds", str(self.rounds),
                "--steps", str(self.steps), "--host-rounds", str(self.host_rounds),
                "--gpu-repeats", str(self.gpu_repeats), "--gpu-replays", str(self.gpu_replays),
                *(["--quick"] if self.quick else []), *(["--knob-search"] if self.knob_search else [])]


def names_plan_path(plan_path: Path) -> Path:
    """Where the choices-only copy of the plan at ``plan_path`` goes."""
    return plan_path.with_name(plan_path.name.replace(".plan.json", ".names.plan.json"))
