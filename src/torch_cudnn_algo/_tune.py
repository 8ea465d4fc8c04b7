"""tune(model, example_inputs): collect a model's convolutions, choose per configuration, return a Plan.

The model runs forward and backward once as it would in training (the
caller's autocast, layouts, flags and plan apply), while the extension records
every configuration that reaches cuDNN; the model's buffers (BatchNorm
statistics) and gradients are restored afterwards. Each recorded configuration
in the requested directions is then decided by the policy:

- ``"fastest"``: the C++ tuner of the ``"fastest"`` flag policy (heuristics
  list, stock's configuration always among the candidates, a pick must beat it
  by 1% and match a float64 reference);
- ``"least_workspace"``: the full profile table; the smallest workspace within
  5% of the fastest eligible candidate;
- ``"lowest_energy"``: every configuration decided by the ``"fastest"``
  tuner first, then ordered by stock's time, the longest first; for each, until
  the energy budget is spent, the full profile table for time, then energy per
  call measured (``_energy``: windows of seconds, alternated with stock's
  configuration, A/A control) for the few candidates within the time guard of
  stock's time; the least energy where it saves more than the A/A spread, else
  the fastest pick within the guard (time as the estimate of energy), else
  stock's path (``_tune_energy``; needs NVML's energy counter).

Each engine configuration picked is kept with its execution plan as cuDNN
built it (serialised), where cuDNN can serialise it, so that loading the plan
rebuilds it instead of compiling (the entry says why where it cannot).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from . import _compile_workers, _distributed, _energy, _flags, _ops
from ._conv_spec import DIRECTION_NAMES, ConvSpec
from ._energy import EnergySettings
from ._plan import Plan, PlanEntry, SerializedExecutionPlan
from ._profile import measure_table_energy, profile
from ._table import LOWEST_ENERGY_TIME_GUARD, POLICIES, ProfileTable
from ._tune_energy import DEFAULT_ENERGY_BUDGET_S, TUNE_ENERGY, decide_lowest_energy

__all__ = ["collect_configurations", "tune"]

Configuration = tuple[ConvSpec, bool, bool, int]  # spec, deterministic, allow_tf32, device index


def _tensors(value: object) -> Iterator[torch.Tensor]:
    """The tensors in a (nested) output: tensor, sequence or mapping."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _default_loss(output: object) -> torch.Tensor:
    """A scalar that reaches every differentiable output."""
    parts = [t.float().sum() for t in _tensors(output) if t.requires_grad]
    if not parts:
        raise ValueError("tune: the model's output has no tensor that requires grad, so no backward "
                         "convolution would run; pass directions=('fwd',) or a loss_fn")
    return torch.stack(parts).sum()


@contextlib.contextmanager
def _model_state_kept(model: torch.nn.Module) -> Iterator[None]:
    """Restores buffers (BatchNorm running statistics) and gradients after the collecting pass."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, p.grad) for p in model.parameters()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for parameter, grad in grads:
            parameter.grad = grad


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    _ops.set_config_recording(True)
    try:
        yield
    finally:
        _ops.set_config_recording(False)


def collect_configurations(
    model: Callable[..., object],
    example_inputs: torch.Tensor | Sequence[object],
    *,
    backward: bool = True,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
) -> list[Configuration]:
    """The cuDNN convolution configurations one forward (and backward) pass of
    ``model(*example_inputs)`` runs, in the order first met."""
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    keep = _model_state_kept(model) if isinstance(model, torch.nn.Module) else contextlib.nullcontext()
    with keep, _recording():
        output = model(*inputs)
        if backward:
            loss = (loss_fn or _default_loss)(output)
            loss.backward()
        torch.cuda.synchronize()
    return [(request.conv_spec(), request.deterministic, request.allow_tf32, request.device)
            for request in _ops.recorded_configs()]


# tune() with policy "fastest" builds every configuration's candidates ahead, in
# parallel (prepare_fastest_conv); False tunes one configuration after the other.
_PREPARE_AHEAD = True


def _decide_fastest(spec: ConvSpec, deterministic: bool, allow_tf32: bool, retune: bool) -> PlanEntry:
    entry = _ops.tune_fastest_conv(spec, deterministic, allow_tf32, retune)
    return PlanEntry(entry["pick"], entry["pick_ms"], entry["stock_config_ms"], entry["workspace"])


def _decide_from_table(spec: ConvSpec, deterministic: bool, allow_tf32: bool, policy: str) -> PlanEntry:
    """``"least_workspace"``: its pick from the configuration's profile table."""
    limit = _flags.get_flag("conv_workspace_limit")
    table = profile(spec, allow_tf32=allow_tf32, deterministic=deterministic, warmup=3, reps=10, energy=False,
                    workspace_limit=limit)
    pick = table.pick(policy, deterministic=deterministic, allow_tf32=allow_tf32, workspace_limit=limit)
    stock = table.stock
    stock_ms = stock.time_ms if stock is not None else None
    if pick is None:
        return PlanEntry(None, stock_ms, stock_ms, None)
    return PlanEntry(pick.value, pick.time_ms, stock_ms, pick.workspace)


def _with_execution_plan(spec: ConvSpec, deterministic: bool, allow_tf32: bool, entry: PlanEntry) -> PlanEntry:
    """`entry` with its choice's execution plan as built on the current device
    (the tuner's, already built), or with why there is none."""
    if not isinstance(entry.choice, str):  # a legacy algorithm or stock's path: nothing to keep
        return entry
    data, why_not = _ops.serialized_execution_plan(spec, deterministic, allow_tf32, entry.choice)
    if why_not:
        return dataclasses.replace(entry, execution_plan_unavailable=why_not)
    built = SerializedExecutionPlan(data, torch.cuda.get_device_name(), _ops.cudnn_runtime_version(),
                                    _ops.cudnn_frontend_version())
    return dataclasses.replace(entry, execution_plan=built)


def _progress(items: Sequence[Configuration], enabled: bool) -> Iterable[Configuration]:
    from tqdm.auto import tqdm

    return tqdm(items, desc="tuning cuDNN convolutions", unit="conv", disable=not enabled, leave=True)


def tune(
    model: Callable[..., object],
    example_inputs: torch.Tensor | Sequence[object],
    policy: str = "fastest",
    directions: Sequence[str] = DIRECTION_NAMES,
    *,
    loss_fn: Callable[[object], torch.Tensor] | None = None,
    progress: bool = True,
    execution_plans: bool = True,
    retune: bool = False,
    time_guard: float = LOWEST_ENERGY_TIME_GUARD,
    energy_budget_s: float = DEFAULT_ENERGY_BUDGET_S,
    energy_settings: EnergySettings | None = None,
) -> Plan:
    """Runs ``model(*example_inputs)`` forward (and backward when a backward
    direction is asked for) to collect its cuDNN convolutions, decides each
    configuration in ``directions`` by ``policy`` (with a progress bar) and
    returns the :class:`Plan`; nothing is put in use (see :func:`use_plan`).

    Run it as training runs: under the same ``torch.autocast``, layouts,
    batch size and determinism settings, since each is a different
    configuration. ``loss_fn(output)`` gives the scalar to differentiate
    (default: the sum of every output tensor requiring grad). Policies:
    ``"fastest"``, ``"least_workspace"`` (smallest workspace within 5% of the
    fastest), ``"lowest_energy"``: energy per call measured for the few
    candidates (at most 3) within ``time_guard`` of stock's own configuration's
    time (0.02: 2% slower at most), against stock's configuration with an A/A
    control, configurations with the longest stock time first until
    ``energy_budget_s`` seconds of time profiles and energy measuring are
    spent (``energy_settings``:
    default 1 s windows, 3 rounds, one warm-up); a configuration runs the
    candidate with the least energy where it saves more than 1% and more
    than the A/A spread, else the ``"fastest"`` pick where it is within the
    guard and not measured to cost more energy, else stock's path
    (docs/energy.md). It raises
    :class:`EnergyUnavailable` where NVML has no energy counter. With
    ``execution_plans`` (default) each engine
    configuration picked keeps its execution plan as cuDNN built it, so that a
    process loading the plan skips cuDNN's heuristics and compilation for it.
    With ``"fastest"``, a configuration the tuning database already holds a
    decision for (made by any earlier process under the same settings, GPU
    model and releases: see docs/tuning-db.md) takes that decision instead of
    being tuned again, unless ``retune``; every decision tuned is kept there.
    With a ``torch.distributed`` process group initialised, the ranks calling
    ``tune`` split the ``"fastest"`` decisions among them and every rank gets
    the same plan (:mod:`torch_cudnn_algo.distributed`, docs/distributed.md).
    Must run outside CUDA graph capture.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; policies are {', '.join(POLICIES)}")
    if isinstance(directions, str):
        directions = (directions,)
    unknown = [d for d in directions if d not in DIRECTION_NAMES]
    if unknown or not directions:
        raise ValueError(f"directions must be a non-empty subset of {', '.join(DIRECTION_NAMES)}, "
                         f"got {tuple(directions)!r}")
    if not (isinstance(time_guard, (int, float)) and not isinstance(time_guard, bool) and time_guard >= 0):
        raise ValueError(f"time_guard must be a fraction >= 0 (0.02: at most 2% slower than stock), got {time_guard!r}")
    if not (isinstance(energy_budget_s, (int, float)) and not isinstance(energy_budget_s, bool)
            and energy_budget_s >= 0):
        raise ValueError(f"energy_budget_s must be a number of seconds >= 0, got {energy_budget_s!r}")
    if energy_settings is not None and not isinstance(energy_settings, EnergySettings):
        raise ValueError(f"energy_settings must be an EnergySettings or None, got {energy_settings!r}")
    _ops.require_gpu("tune")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("torch_cudnn_algo.tune cannot run during CUDA graph capture")
    if policy == "lowest_energy":
        why = _energy.unavailable(torch.cuda.current_device())
        if why is not None:
            raise _energy.EnergyUnavailable(f"the lowest_energy policy measures GPU energy, which cannot be "
                                            f"measured here: {why}; use 'fastest' or 'least_workspace'")
    backward = any(d != "fwd" for d in directions)
    configurations = [c for c in collect_configurations(model, example_inputs, backward=backward,
                                                         loss_fn=loss_fn)
                      if c[0].direction in directions]
    plan = Plan({}, policy=policy)
    if policy == "lowest_energy":
        _decide_lowest_energy(configurations, plan, progress, execution_plans, time_guard, energy_budget_s,
                              energy_settings or TUNE_ENERGY)
        return plan
    with _compile_workers.running(policy == "fastest" and _PREPARE_AHEAD):
        _decide_all(configurations, plan, policy, progress, execution_plans, retune)
    return plan


def _decide_lowest_energy(configurations: Sequence[Configuration], plan: Plan, progress: bool,
                          execution_plans: bool, time_guard: float, energy_budget_s: float,
                          settings: EnergySettings) -> None:
    limit = _flags.get_flag("conv_workspace_limit")
    devices = {spec: device for spec, _, _, device in configurations}

    def fastest_for(spec: ConvSpec, deterministic: bool, allow_tf32: bool) -> PlanEntry:
        # The "fastest" tuner times stock's configuration beside its pick in a fraction of a
        # profile table's time (or takes both from the tuning database).
        with torch.cuda.device(devices[spec]):
            return _decide_fastest(spec, deterministic, allow_tf32, retune=False)

    def table_for(spec: ConvSpec, deterministic: bool, allow_tf32: bool) -> ProfileTable:
        with torch.cuda.device(devices[spec]):
            return profile(spec, allow_tf32=allow_tf32, deterministic=deterministic, warmup=3, reps=10,
                           energy=False, workspace_limit=limit)

    def energy_for(spec: ConvSpec, table: ProfileTable, values: Sequence[int | str], energy: EnergySettings,
                   allow_tf32: bool, deterministic: bool) -> ProfileTable:
        with torch.cuda.device(devices[spec]):
            return measure_table_energy(spec, table, values, energy, allow_tf32=allow_tf32,
                                        deterministic=deterministic)

    entries = decide_lowest_energy(configurations, fastest_for, table_for, energy_for, time_guard=time_guard,
                                   energy_budget_s=energy_budget_s, settings=settings, workspace_limit=limit,
                                   progress=lambda items: _progress(items, progress))
    for spec, deterministic, allow_tf32, device in configurations:
        entry = entries[spec]
        if execution_plans:
            with torch.cuda.device(device):
                entry = _with_execution_plan(spec, deterministic, allow_tf32, entry)
        plan[spec] = entry


def _shared_order(configurations: Sequence[Configuration], retune: bool) -> tuple[list[Configuration], list[str]]:
    """In a job whose ranks share decisions (``_distributed``): this rank's share claimed, and the
    configurations ordered with its share first, so that it decides its own before it waits for
    the others'; returns the order and the keys it claimed. Outside a job: the configurations
    as they are."""
    if retune:
        _distributed.begin_retune()
    scope = "retune" if retune else "tune"
    keys = []
    for spec, deterministic, allow_tf32, device in configurations:
        with torch.cuda.device(device):
            keys.append(_ops.fastest_decision_key(spec, deterministic, allow_tf32))
    mine = _distributed.claim_share(keys, scope)
    if mine is None:
        return list(configurations), []
    order = [c for c, m in zip(configurations, mine) if m] + [c for c, m in zip(configurations, mine) if not m]
    return order, [k for k, m in zip(keys, mine) if m]


def _decide_all(configurations: Sequence[Configuration], plan: Plan, policy: str, progress: bool,
                execution_plans: bool, retune: bool) -> None:
    """Decides every configuration into ``plan`` (see :func:`tune`)."""
    claimed: list[str] = []
    entries: dict[ConvSpec, PlanEntry] = {}
    try:
        order = list(configurations)
        if policy == "fastest":
            order, claimed = _shared_order(configurations, retune)
        if policy == "fastest" and _PREPARE_AHEAD:
            # Every configuration's candidates are built in background threads,
            # configurations side by side; each is timed once its own are built,
            # while the threads build the ones after it. The tuning database's
            # decisions need no candidates, nor do those another rank of the job
            # decides.
            shared = bool(claimed) or _distributed.coordination().active
            for spec, deterministic, allow_tf32, device in order[:len(claimed)] if shared else order:
                with torch.cuda.device(device):
                    if retune or not _ops.fastest_decision_kept(spec, deterministic, allow_tf32):
                        _ops.prepare_fastest_conv(spec, deterministic, allow_tf32)
        for spec, deterministic, allow_tf32, device in _progress(order, progress):
            with torch.cuda.device(device):
                if policy == "fastest":
                    entry = _decide_fastest(spec, deterministic, allow_tf32, retune)
                else:
                    entry = _decide_from_table(spec, deterministic, allow_tf32, policy)
                if execution_plans:
                    entry = _with_execution_plan(spec, deterministic, allow_tf32, entry)
                entries[spec] = entry
        for spec, *_ in configurations:  # the plan lists them in the order the step met them
            plan[spec] = entries[spec]
    finally:
        _ops.cancel_prepared_fastest()  # an interrupted tune() leaves no thread building
        _distributed.release_claims(claimed, "retune" if retune else "tune")  # those it did not decide
