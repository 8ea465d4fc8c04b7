"""Listing and profiling the candidates of one convolution.

:func:`list_algorithms` asks cuDNN which legacy algorithms and engine
configurations can run a convolution (nothing executed, nothing allocated for
descriptions). :func:`profile` runs each one on random operands of that shape:
warm-up, median of CUDA-event timings, max relative error against a float64
reference, and (where asked) energy per call, and returns a :class:`ProfileTable`.

The same profiler serves ``conv_profile`` and the ``"fastest"`` policy: the
extension calls :func:`_profile_for_extension` the first time it meets a
configuration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from typing_extensions import Unpack

from . import _energy, _flags, _ops
from ._algorithms import DIRECTIONS, KERNELS
from ._conv_spec import ConvLike, ConvSpec, Geometry, TensorLike, as_conv_spec
from ._energy import EnergySettings
from ._profile_energy import PROFILE_ENERGY, EnergyRequest, measure_rows_energy
from ._queries import _direction, _settings, engine_configs
from ._table import ProfileRow, ProfileTable

__all__ = ["Candidate", "list_algorithms", "profile"]

logger = logging.getLogger("torch_cudnn_algo")

# -- listing ---------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One choice that could run a convolution, as cuDNN reports it before running."""

    value: int | str  # assign this to the direction's flag
    kind: str  # "legacy", "engine" or "kernel" (one of our own)
    label: str  # legacy algorithm name, or where cuDNN offered the engine configuration
    status: str  # "ok", "unsupported: <why>" or "refused: <rule>" under the given settings
    workspace: int | None  # bytes; None when unknown (unsupported)
    deterministic: bool
    notes: tuple[str, ...]  # math type / cuDNN numerical and behaviour notes

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# What list_algorithms says of our own kernels.
_KERNEL_NOTES = ("direct sum, fp32 accumulation (fp64 for fp64), no TF32", "deterministic: no atomics")


def _legacy_math_type(dtype: torch.dtype, allow_tf32: bool) -> str:
    # As the legacy runner sets it on the descriptor.
    if dtype in (torch.float16, torch.bfloat16):
        return "TENSOR_OP_MATH"
    if dtype == torch.float32 and not allow_tf32:
        return "FMA_MATH"
    return "DEFAULT_MATH"


def _engine_status(refusal: str | None, workspace: int | None) -> str:
    if refusal is None:
        return "ok" if workspace is not None else "unsupported: cuDNN cannot build it here"
    return ("unsupported: " if refusal.startswith("cuDNN") else "refused: ") + refusal


def list_algorithms(
    conv: ConvLike,
    input: TensorLike | None = None,
    weight: TensorLike | None = None,
    /,
    *,
    allow_tf32: bool | None = None,
    deterministic: bool | None = None,
    **geometry: Unpack[Geometry],
) -> list[Candidate]:
    """Every candidate for a convolution, without executing anything: cuDNN's
    legacy algorithms (support and workspace from cuDNN's workspace query) then
    the engine configurations its heuristics and fallback list offer (execution plans
    built for their workspace and notes).

    The convolution is a :class:`ConvSpec` or its string form
    (``"conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"``), or a
    direction followed by input and weight, shaped as for
    ``torch.nn.functional.convNd`` (``conv_transposeNd`` with
    ``transposed=True``): CUDA tensors or descriptions (a :class:`TensorSpec`,
    a shape, or a string such as ``"64x256x56x56 float16 channels_last"``),
    with ``stride``, ``padding``, ... as keywords. The direction is the cuDNN
    call ("fwd", "bwd_data", "bwd_filter"); for a transposed convolution the
    forward pass is "bwd_data". ``allow_tf32`` and ``deterministic`` default to
    the current ``torch.backends.cudnn`` settings and decide which candidates
    the contract's rules refuse.
    """
    conv_spec = as_conv_spec(conv, input, weight, geometry)
    spec = _direction(conv_spec.direction)
    allow_tf32, deterministic = _settings(allow_tf32, deterministic)
    _ops.require_gpu("list_algorithms")
    candidates = []
    for algo, name in enumerate(spec.names):
        if algo in spec.unimplemented:
            continue
        workspace = _ops.legacy_workspace_size(conv_spec, allow_tf32, algo)
        algo_deterministic = algo not in spec.nondeterministic
        if workspace < 0:
            status = "unsupported: cuDNN does not support it for this convolution"
        elif deterministic and not algo_deterministic:
            status = "refused: it is non-deterministic and deterministic algorithms are required"
        else:
            status = "ok"
        candidates.append(Candidate(algo, "legacy", name, status, None if workspace < 0 else int(workspace),
                                    algo_deterministic, (_legacy_math_type(conv_spec.dtype, allow_tf32),)))
    for config in engine_configs(conv_spec, allow_tf32=allow_tf32, deterministic=deterministic):
        candidates.append(Candidate(
            config.name, "engine", config.source, _engine_status(config.refusal, config.workspace),
            config.workspace, "NONDETERMINISTIC" not in config.numerical_notes,
            config.numerical_notes + config.behavior_notes))
    for kernel in _ops.own_kernels(conv_spec, deterministic=deterministic, allow_tf32=allow_tf32):
        candidates.append(Candidate(
            kernel.name, "kernel", "torch-cudnn-algo", "ok" if kernel.refusal is None else f"unsupported: {kernel.refusal}",
            kernel.workspace, True, _KERNEL_NOTES))
    return candidates


# -- profiling -------------------------------------------------------------

@contextlib.contextmanager
def _bypass() -> Iterator[None]:
    """This thread's convolutions take the stock path and are never profiled
    (our own reference and stock timings must not come back to us)."""
    previous = _ops.set_thread_bypass(True)
    try:
        yield
    finally:
        _ops.set_thread_bypass(previous)


@contextlib.contextmanager
def _cudnn_settings(deterministic: bool, allow_tf32: bool) -> Iterator[None]:
    """Stock's cuDNN backward reads the global settings: match the profiled ones."""
    cudnn = torch.backends.cudnn
    current = (bool(cudnn.deterministic), bool(cudnn.allow_tf32))
    if current == (deterministic, allow_tf32):
        yield
        return
    cudnn.deterministic, cudnn.allow_tf32 = deterministic, allow_tf32
    try:
        yield
    finally:
        cudnn.deterministic, cudnn.allow_tf32 = current


def _median_gpu_ms(run: Callable[[], object], reps: int) -> float:
    """Median of per-call CUDA-event times. A spin kernel queued first gives
    the host a head start, so each timed call finds its launch already queued
    and host overhead does not leak into GPU time."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(100_000 * reps)  # ~50 us per call at 2 GHz
    for start, end in zip(starts, ends):
        start.record()
        run()
        end.record()
    ends[-1].synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in zip(starts, ends))


def _max_rel_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    """max |out - ref| / max |ref|: NaN or an unwritten (NaN-poisoned) output gives inf."""
    scale = reference.abs().max().item()
    error = (out.double() - reference).abs().max().item()
    if error != error:  # NaN
        return float("inf")
    return error / scale if scale > 0 else error


def _memory_format(problem: _ops.ConvRequest) -> torch.memory_format:
    if not problem.channels_last:
        return torch.contiguous_format
    return torch.channels_last if len(problem.input) == 4 else torch.channels_last_3d


class _Operands:
    """The operands of one problem and the calls that time candidates on them."""

    def __init__(self, problem: _ops.ConvRequest, seed: int) -> None:
        self.problem = problem
        device = torch.device("cuda", problem.device)
        dtype = getattr(torch, problem.dtype)
        generator = torch.Generator(device=device).manual_seed(seed)

        def randn(shape: tuple[int, ...]) -> torch.Tensor:
            t = torch.randn(shape, dtype=dtype, device=device, generator=generator)
            return t.contiguous(memory_format=_memory_format(problem))

        self.x, self.w, self.dy = randn(problem.input), randn(problem.weight), randn(problem.output)
        self.reference = self._stock(self.x.double(), self.w.double(), self.dy.double()).double()
        a_b_out = {"fwd": (self.x, self.w, problem.output), "bwd_data": (self.dy, self.w, problem.input),
                   "bwd_filter": (self.x, self.dy, problem.weight)}
        self.a, self.b, out_shape = a_b_out[problem.direction]
        self.out = torch.empty(out_shape, dtype=dtype, device=device).contiguous(
            memory_format=_memory_format(problem))

    def _stock(self, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        """Stock PyTorch's result of the problem's direction on (x, w, dy)."""
        p = self.problem
        zeros = [0] * len(p.padding)
        if p.direction == "fwd":
            return torch.ops.aten.convolution(x, w, None, p.stride, p.padding, p.dilation, False, zeros,
                                              p.groups)
        mask = [p.direction == "bwd_data", p.direction == "bwd_filter", False]
        grads = torch.ops.aten.convolution_backward(dy, x, w, None, p.stride, p.padding, p.dilation,
                                                    False, zeros, p.groups, mask)
        return grads[0] if p.direction == "bwd_data" else grads[1]

    def candidate(self, value: int | str, execute: bool) -> _ops.CandidateRun:
        p = self.problem
        return _ops.run_candidate(p.direction, str(value), self.a, self.b, self.out, p.padding, p.stride,
                                  p.dilation, p.groups, p.deterministic, p.allow_tf32, execute)

    def stock_call(self) -> torch.Tensor:
        return self._stock(self.x, self.w, self.dy)


def _measure(
    row: ProfileRow,
    run: Callable[[], object],
    output: Callable[[], torch.Tensor],
    operands: _Operands,
    warmup: int,
    reps: int,
) -> ProfileRow:
    """Times one runnable candidate; an allocation failure or a cuDNN error
    marks the row instead of escaping."""
    try:
        operands.out.fill_(float("nan"))  # an output the candidate fails to write shows as inf error
        for _ in range(max(1, warmup)):
            run()
        torch.cuda.synchronize()
        error = _max_rel_error(output(), operands.reference)
        time_ms = _median_gpu_ms(run, reps)
    except torch.OutOfMemoryError:
        return dataclasses.replace(row, status="out of memory")
    except RuntimeError as exc:
        return dataclasses.replace(row, status="failed: " + str(exc).strip().splitlines()[0])
    return dataclasses.replace(row, time_ms=time_ms, max_rel_error=error)


def _measure_energy(operands: _Operands, rows: list[ProfileRow],
                    request: EnergyRequest) -> tuple[list[ProfileRow], dict[str, object]]:
    def run_of(row: ProfileRow) -> Callable[[], object]:
        if row.value is None:
            return operands.stock_call
        return lambda: operands.candidate(row.value, execute=True)

    return measure_rows_energy(rows, run_of, request)


def _profile_problem(
    problem: _ops.ConvRequest,
    description: str,
    *,
    warmup: int,
    reps: int,
    energy: EnergyRequest | None,
    include_stock: bool,
    workspace_limit: int | None,
    seed: int,
) -> ProfileTable:
    if reps < 1 or warmup < 0:
        raise ValueError(f"reps must be >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    started = time.perf_counter()
    device = torch.device("cuda", problem.device)
    spec = DIRECTIONS[problem.direction]
    with torch.cuda.device(device), _bypass(), _cudnn_settings(problem.deterministic, problem.allow_tf32):
        operands = _Operands(problem, seed)
        listed: list[ProfileRow] = []
        for algo, name in enumerate(spec.names):
            if algo not in spec.unimplemented:
                listed.append(ProfileRow(algo, name, "ok", deterministic=algo not in spec.nondeterministic,
                                         notes=(_legacy_math_type(operands.x.dtype, problem.allow_tf32),)))
        configs = engine_configs(problem.direction, operands.x, operands.w, stride=problem.stride,
                                 padding=problem.padding, dilation=problem.dilation, groups=problem.groups,
                                 allow_tf32=problem.allow_tf32, deterministic=problem.deterministic)
        for config in configs:
            listed.append(ProfileRow(config.name, config.source, "ok",
                                     deterministic="NONDETERMINISTIC" not in config.numerical_notes,
                                     notes=config.numerical_notes + config.behavior_notes))
        for kernel in KERNELS:  # run_candidate says where one cannot run (a build without them, this GPU)
            listed.append(ProfileRow(kernel, "torch-cudnn-algo", "ok", deterministic=True, notes=_KERNEL_NOTES))
        rows = []
        for row in listed:
            status, workspace = operands.candidate(row.value, execute=False)
            row = dataclasses.replace(row, status=status, workspace=None if workspace < 0 else workspace)
            if not row.ok:
                rows.append(row)
            elif workspace_limit is not None and workspace > workspace_limit:
                rows.append(dataclasses.replace(row, status="over workspace limit"))
            else:
                value = row.value
                rows.append(_measure(row, lambda v=value: operands.candidate(v, execute=True),
                                     lambda: operands.out, operands, warmup, reps))
        stock_output: list[torch.Tensor] = []
        if include_stock:

            def stock_run() -> None:
                stock_output[:] = [operands.stock_call()]

            rows.append(_measure(ProfileRow(None, "stock", "ok"), stock_run, lambda: stock_output[0],
                                 operands, warmup, reps))
        energy_measure = None
        if energy is not None:
            rows, energy_measure = _measure_energy(operands, rows, energy)
        del operands, stock_output  # everything profiling allocated goes back to the allocator
        torch.cuda.synchronize(device)
    environment = {
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cudnn": _ops.cudnn_runtime_version(),
        "warmup": warmup,
        "reps": reps,
        "energy": energy is not None,
        "workspace_limit": workspace_limit,
        "profile_seconds": round(time.perf_counter() - started, 3),
        "error": "max |out - ref| / max |ref|, ref = stock PyTorch in float64",
    }
    if energy_measure is not None:
        environment["energy_measure"] = energy_measure
    return ProfileTable(problem.direction, description, problem.dtype, rows, environment)


def profile(
    conv: ConvLike,
    input: TensorLike | None = None,
    weight: TensorLike | None = None,
    /,
    *,
    allow_tf32: bool | None = None,
    deterministic: bool | None = None,
    warmup: int = 3,
    reps: int = 20,
    energy: bool | EnergySettings = False,
    energy_within: float | None = 0.10,
    energy_candidates: int = 6,
    include_stock: bool = True,
    workspace_limit: int | None | str = "flag",
    seed: int = 0,
    **geometry: Unpack[Geometry],
) -> ProfileTable:
    """Runs every candidate of :func:`list_algorithms` (the convolution given
    the same way) on random operands of the convolution's shape and returns
    their :class:`ProfileTable`.

    Per candidate: ``warmup`` runs, then the median GPU time of ``reps``
    CUDA-event-timed runs; the workspace cuDNN asked for (allocated exactly);
    determinism; math type and cuDNN notes; the max relative error against
    stock PyTorch computed once in float64 on the same operands. With
    ``energy`` (True, or an :class:`EnergySettings`; default settings: 1 s
    windows, 3 rounds, warm-up of at most 30 s), joules per call median
    (min-max) and the ratio to stock's, measured alternately with stock's own
    configuration and an A/A control (see docs/energy.md), each candidate
    replayed as a CUDA graph of calls; only for the candidates within
    ``energy_within`` of stock's time (a fraction; None: all), at most
    ``energy_candidates``, fastest first: about 3-4 s per candidate measured
    plus the warm-up. Raises :class:`EnergyUnavailable` where NVML has no
    energy counter. Candidates that cannot
    run carry their status: unsupported, refused (determinism/TF32 rules), out
    of memory, over ``workspace_limit`` (default: the ``conv_workspace_limit``
    flag), failed. ``include_stock`` adds stock PyTorch's own choice, timed the
    same way. GPU memory allocated by the profile is freed before it returns.
    Must not be called during CUDA graph capture.
    """
    conv_spec = as_conv_spec(conv, input, weight, geometry)
    _ops.require_gpu("profile")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("torch_cudnn_algo.profile cannot run during CUDA graph capture")
    if workspace_limit == "flag":
        workspace_limit = _flags.get_flag("conv_workspace_limit")
    elif workspace_limit is not None:
        workspace_limit = _flags.FLAGS["conv_workspace_limit"].parse(workspace_limit)
    allow_tf32, deterministic = _settings(allow_tf32, deterministic)
    energy_request = _energy_request(energy, energy_within, energy_candidates)
    request, description = _ops.conv_request(conv_spec, deterministic, allow_tf32)
    if energy_request is not None:
        why = _energy.unavailable(request.device)
        if why is not None:
            raise _energy.EnergyUnavailable(f"torch_cudnn_algo.profile(energy=...): GPU energy cannot be "
                                            f"measured: {why}; profile without energy (energy=False)")
    return _profile_problem(request, description, warmup=warmup, reps=reps, energy=energy_request,
                            include_stock=include_stock, workspace_limit=workspace_limit, seed=seed)


def measure_table_energy(
    conv: ConvSpec,
    table: ProfileTable,
    values: Sequence[int | str],
    settings: EnergySettings,
    *,
    allow_tf32: bool,
    deterministic: bool,
    seed: int = 0,
) -> ProfileTable:
    """``table`` (a profile of ``conv`` under these settings) with the energy of the candidates
    ``values`` and of stock's configuration measured (see :func:`profile`'s ``energy``): what
    ``tune(policy="lowest_energy")`` measures for the few candidates within its time guard."""
    problem, _ = _ops.conv_request(conv, deterministic, allow_tf32)
    with torch.cuda.device(torch.device("cuda", problem.device)), _bypass(), \
            _cudnn_settings(problem.deterministic, problem.allow_tf32):
        operands = _Operands(problem, seed)
        rows, info = _measure_energy(operands, list(table.rows), EnergyRequest(settings, values=tuple(values)))
        del operands
        torch.cuda.synchronize()
    return ProfileTable(table.direction, table.convolution, table.dtype, rows,
                        {**table.environment, "energy": True, "energy_measure": info})


def _energy_request(energy: bool | EnergySettings, within: float | None, candidates: int) -> EnergyRequest | None:
    if energy is False:
        return None
    if energy is True:
        return EnergyRequest(PROFILE_ENERGY, within, candidates)
    if isinstance(energy, EnergySettings):
        return EnergyRequest(energy, within, candidates)
    raise ValueError(f"energy must be True, False or an EnergySettings, got {energy!r}")


def _profile_for_extension(problem: _ops.ConvRequest, description: str) -> str:
    """Called by the extension (conv_profile, the "fastest" policy) the first
    time it meets a configuration: profiles it (no energy: that would add
    seconds per candidate to a training run), logs the table (INFO under conv_profile,
    DEBUG otherwise) and returns the policy's pick as a flag value, "" for none."""
    limit = _flags.get_flag("conv_workspace_limit")
    table = _profile_problem(problem, description, warmup=3, reps=10, energy=None, include_stock=True,
                             workspace_limit=limit, seed=0)
    pick = table.fastest(deterministic=problem.deterministic, allow_tf32=problem.allow_tf32,
                         workspace_limit=limit)
    level = logging.INFO if _flags.get_flag("conv_profile") else logging.DEBUG
    logger.log(level, "%s\n-> fastest: %s (profiled in %.2f s)", table,
               "none qualifies, stock runs" if pick is None else pick.value,
               table.environment["profile_seconds"])
    return "" if pick is None else str(pick.value)


def install_profiler() -> None:
    """Hands :func:`_profile_for_extension` to the extension."""
    _ops.set_profiler(_profile_for_extension)
