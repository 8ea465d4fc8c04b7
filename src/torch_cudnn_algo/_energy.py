"""GPU energy per call, measured so that it holds up: the one measurement behind the profile
table's energy columns, the ``"lowest_energy"`` policy, the ``tune`` command's J/step and the
benchmarks.

:func:`measure` takes several *modes* (callables that each run one call on the GPU:
a convolution, a training step, a CUDA-graph replay) and:

1. warms the GPU up, running the modes in turn until its temperature stops rising
   (:class:`WarmupRule`), because power draw rises with temperature;
2. measures ``rounds`` rounds; in each, every mode gets one *window*, the modes in an order
   rotated round by round so that none always comes first; the reference mode is measured
   twice, as itself and as an A/A twin, so that the spread of two identical modes is reported
   beside every comparison;
3. in a window, the calls run back to back (a bounded queue of them ahead of the host, a CUDA
   event after each), from one update of NVML's energy counter to the first update after
   ``window_s``; the counter moves every 20-100 ms, so both ends are aligned to its updates
   and the calls counted are the ones that completed between them;
4. a background thread samples NVML's power reading all along; each window's readings,
   integrated over the window, are the second source reported beside the counter.

Where NVML or its counter is missing, :func:`measure` raises :class:`EnergyUnavailable`
saying why; :func:`unavailable` asks without raising (the tune command shows "n/a" and
the reason, never an exception in a training loop). docs/energy.md describes the method and
the resolution of each source.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ._energy_report import EnergyReport, ModeEnergy, WarmupResult, Window, integrate_power, paired_ratios

__all__ = ["EnergyMode", "EnergySettings", "EnergyUnavailable", "WarmupRule", "graph_replay",
           "measure", "unavailable"]

AA_SUFFIX = " (A/A)"


class EnergyUnavailable(RuntimeError):
    """Energy cannot be measured here: the message says why."""


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == math.inf:
            raise ValueError(f"{owner}.{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True)
class WarmupRule:
    """Run the modes until the GPU's temperature rose by at most ``rise_c`` degrees over the
    last ``steady_s`` seconds (it has stopped rising), or for ``max_s`` seconds at most.
    Without a temperature reading it runs ``steady_s`` (at most ``max_s``)."""

    max_s: float = 60.0
    steady_s: float = 10.0
    rise_c: float = 1.0

    def __post_init__(self) -> None:
        _positive("WarmupRule", max_s=self.max_s, steady_s=self.steady_s)
        if not (isinstance(self.rise_c, (int, float)) and self.rise_c >= 0):
            raise ValueError(f"WarmupRule.rise_c must be a number >= 0 (degrees Celsius), got {self.rise_c!r}")


# A short run before the windows with no temperature rule: for a measurement that follows
# another one on an already warm GPU (tune() measures configuration after configuration).
PRE_ROLL = WarmupRule(max_s=1.0, steady_s=1.0, rise_c=math.inf)


@dataclass(frozen=True)
class EnergySettings:
    """How :func:`measure` measures.

    - ``window_s``: the least length of a window (seconds; the counter needs seconds, not tenths);
    - ``rounds``: windows per mode, the modes alternated within each round;
    - ``warmup``: the warm-up rule (None: no warm-up);
    - ``aa_control``: measure the reference twice (the A/A control);
    - ``power_samples``: sample NVML's power reading on a background thread (the second source);
    - ``sample_period_s``: seconds between two power readings;
    - ``queue_ahead_s``: GPU work kept queued ahead of the host, so that reading the counter never
      leaves the GPU idle (calls shorter than the host's launch time still do: replay a CUDA graph
      of many calls, see :func:`graph_replay`);
    - ``untimed_calls``: calls run after switching to a mode, before its window;
    - ``counter_timeout_s``: a window fails when the counter does not move for this long.
    """

    window_s: float = 2.0
    rounds: int = 5
    warmup: WarmupRule | None = WarmupRule()
    aa_control: bool = True
    power_samples: bool = True
    sample_period_s: float = 0.005
    queue_ahead_s: float = 0.01
    untimed_calls: int = 2
    counter_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        _positive("EnergySettings", window_s=self.window_s, sample_period_s=self.sample_period_s,
                  queue_ahead_s=self.queue_ahead_s, counter_timeout_s=self.counter_timeout_s)
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"EnergySettings.rounds must be an integer >= 1, got {self.rounds!r}")
        if isinstance(self.untimed_calls, bool) or not isinstance(self.untimed_calls, int) or self.untimed_calls < 0:
            raise ValueError(f"EnergySettings.untimed_calls must be an integer >= 0, got {self.untimed_calls!r}")
        if self.warmup is not None and not isinstance(self.warmup, WarmupRule):
            raise ValueError(f"EnergySettings.warmup must be a WarmupRule or None, got {self.warmup!r}")

    def to_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["warmup"] = None if self.warmup is None else dataclasses.asdict(self.warmup)
        return data


@dataclass(frozen=True)
class EnergyMode:
    """A mode: ``run`` launches ``calls`` calls (one, or a CUDA graph replay of several);
    ``context`` (optional) is entered around each of the mode's windows and warm-up turns (a
    plan in use, flags set)."""

    run: Callable[[], object]
    context: Callable[[], contextlib.AbstractContextManager] | None = None
    calls: int = 1  # the calls one run makes (a CUDA graph of many calls): energy is reported per call

    def __post_init__(self) -> None:
        if isinstance(self.calls, bool) or not isinstance(self.calls, int) or self.calls < 1:
            raise ValueError(f"EnergyMode.calls must be an integer >= 1, got {self.calls!r}")


# -- what is measured through: NVML and the GPU's stream (fakes stand in for them in tests) --------

class Meter(Protocol):
    """The readings a measurement takes."""

    power_source: str | None

    def unavailable(self) -> str | None: ...
    def counter_mj(self) -> int | None: ...
    def power_mw(self) -> float | None: ...
    def temperature_c(self) -> float | None: ...


class Timeline(Protocol):
    """Marks on the GPU's stream: each after a call, to tell which calls have completed."""

    def mark(self) -> object: ...
    def done(self, mark: object) -> bool: ...
    def wait(self, mark: object) -> None: ...
    def seconds_between(self, first: object, last: object) -> float | None: ...
    def synchronize(self) -> None: ...


class NvmlMeter:
    """NVML's readings for one CUDA device."""

    def __init__(self, device: int) -> None:
        from . import _nvml

        self._nvml, self.device = _nvml, device
        self.power_source = _nvml.power_source(device) if _nvml.unavailable(device) is None else None

    def unavailable(self) -> str | None:
        return self._nvml.unavailable(self.device)

    def counter_mj(self) -> int | None:
        return self._nvml.energy_counter(self.device)

    def power_mw(self) -> float | None:
        return self._nvml.power_mw(self.device)

    def temperature_c(self) -> float | None:
        return self._nvml.temperature_c(self.device)


class CudaTimeline:
    """CUDA events on the current stream of one device."""

    def __init__(self, device: int) -> None:
        import torch

        self._torch, self.device = torch, device

    def mark(self) -> object:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def done(self, mark: object) -> bool:
        return mark.query()  # type: ignore[attr-defined]

    def wait(self, mark: object) -> None:
        mark.synchronize()  # type: ignore[attr-defined]

    def seconds_between(self, first: object, last: object) -> float | None:
        return first.elapsed_time(last) / 1e3  # type: ignore[attr-defined]

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)


def unavailable(device: int | None = None) -> str | None:
    """Why GPU energy cannot be measured on ``device`` (default: the current CUDA device), or None
    where it can. Never raises."""
    try:
        import torch

        if not torch.cuda.is_available():
            return "no CUDA GPU (torch.cuda.is_available() is False)"
        from . import _nvml

        return _nvml.unavailable(torch.cuda.current_device() if device is None else device)
    except Exception as exc:  # noqa: BLE001 - a question about energy must not fail its caller
        return f"{type(exc).__name__}: {exc}"


# -- the second source ------------------------------------------------------------------------------

class PowerSampler:
    """Reads power every ``period_s`` on a background thread, keeping ``(time, mW)`` pairs.
    NVML's calls release the GIL, so the thread costs the measured process little."""

    def __init__(self, read: Callable[[], float | None], clock: Callable[[], float], period_s: float) -> None:
        self._read, self._clock, self._period = read, clock, period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            value = self._read()
            if value is not None:
                self.samples.append((self._clock(), value))
            self._stop.wait(self._period)

    def __enter__(self) -> PowerSampler:
        self._thread = threading.Thread(target=self._loop, name="torch-cudnn-algo power sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def joules(self, start: float, end: float) -> tuple[float | None, int]:
        return integrate_power(list(self.samples), start, end)


# -- one window -------------------------------------------------------------------------------------

class _WindowFailed(Exception):
    pass


class _Runner:
    """Launches calls of one mode with at most ``in_flight`` of them queued, and counts the
    calls completed so far by the marks after them."""

    def __init__(self, run: Callable[[], object], timeline: Timeline, in_flight: int) -> None:
        self.run, self.timeline, self.in_flight = run, timeline, in_flight
        self.pending: collections.deque[object] = collections.deque()
        self.completed = 0
        timeline.synchronize()
        self.last_done = timeline.mark()  # stands for "no call completed yet"
        timeline.wait(self.last_done)

    def launch(self) -> None:
        self.run()
        self.pending.append(self.timeline.mark())
        if len(self.pending) > self.in_flight:
            self.timeline.wait(self.pending[0])  # the host never runs further ahead than in_flight calls

    def fill(self) -> None:
        """Launches calls until ``in_flight`` are queued (at least one)."""
        self.launch()
        while len(self.pending) < self.in_flight:
            self.launch()

    def retire(self) -> None:
        while self.pending and self.timeline.done(self.pending[0]):
            self.last_done = self.pending.popleft()
            self.completed += 1

    def run_for(self, seconds: float, clock: Callable[[], float]) -> None:
        until = clock() + seconds
        while clock() < until:
            self.launch()
        self.timeline.synchronize()


def _window(runner: _Runner, meter: Meter, clock: Callable[[], float], settings: EnergySettings,
            sampler: PowerSampler | None, calls_per_run: int = 1) -> Window:
    """Runs ``runner``'s calls from one counter update to the first update after ``window_s``."""

    def next_update(previous: int) -> tuple[int, float, int, object]:
        """Launches calls until the counter moves from ``previous``: (its value, the host time, the
        calls completed by then, the mark of the last of them)."""
        deadline = clock() + settings.counter_timeout_s
        while True:
            runner.fill()  # the GPU stays busy while the counter is read (a read can take milliseconds)
            value = meter.counter_mj()
            now = clock()
            runner.retire()  # the calls completed when the counter was read
            if value is None:
                raise _WindowFailed("the energy counter could not be read")
            if value != previous:
                return value, now, runner.completed, runner.last_done
            if now > deadline:
                raise _WindowFailed(f"the energy counter did not move in {settings.counter_timeout_s} s")

    try:
        first = meter.counter_mj()
        if first is None:
            raise _WindowFailed("the energy counter could not be read")
        start_mj, start_t, start_calls, start_mark = next_update(first)
        # Run the window's length, then on to the counter's next update.
        while clock() - start_t < settings.window_s:
            runner.launch()
            runner.retire()
        last = meter.counter_mj()
        if last is None:
            raise _WindowFailed("the energy counter could not be read")
        end_mj, end_t, end_calls, end_mark = next_update(last)
    finally:
        runner.timeline.synchronize()  # calls after the window run out, uncounted
    calls = (end_calls - start_calls) * calls_per_run
    if calls < 1:
        raise _WindowFailed("no call completed within the window: the calls are longer than the window")
    power_j, samples = sampler.joules(start_t, end_t) if sampler is not None else (None, 0)
    return Window(joules=(end_mj - start_mj) / 1e3, calls=calls, seconds=end_t - start_t,
                  gpu_seconds=runner.timeline.seconds_between(start_mark, end_mark), power_joules=power_j,
                  power_samples=samples)


# -- warm-up ------------------------------------------------------------------------------------------

def _warm_up(turns: Sequence[Callable[[float], None]], rule: WarmupRule, meter: Meter,
             clock: Callable[[], float], turn_s: float = 0.5) -> WarmupResult:
    """Runs the modes in turn, ``turn_s`` each, until ``rule`` stops it."""
    started = clock()
    first = meter.temperature_c()
    readings: list[tuple[float, float]] = [] if first is None else [(started, first)]
    index = 0
    while True:
        turns[index % len(turns)](turn_s)
        index += 1
        now, temperature = clock(), meter.temperature_c()
        elapsed = now - started
        if temperature is None:
            if elapsed >= min(rule.steady_s, rule.max_s):
                return WarmupResult(elapsed, None, None,
                                    f"no temperature reading: ran {min(rule.steady_s, rule.max_s):g} s")
            continue
        readings.append((now, temperature))
        earlier = [c for t, c in readings if t <= now - rule.steady_s]
        if earlier and temperature - earlier[-1] <= rule.rise_c:
            rise = temperature - earlier[-1]
            reason = ("pre-roll" if rule.rise_c == math.inf else
                      f"steady: {rise:+.0f} °C over the last {rule.steady_s:g} s (rule: at most {rule.rise_c:g})")
            return WarmupResult(elapsed, readings[0][1], temperature, reason)
        if elapsed >= rule.max_s:
            rise = temperature - earlier[-1] if earlier else temperature - readings[0][1]
            return WarmupResult(elapsed, readings[0][1], temperature,
                                f"stopped at its limit of {rule.max_s:g} s, still {rise:+.0f} °C over the last "
                                f"{min(rule.steady_s, elapsed):.0f} s")


# -- the measurement --------------------------------------------------------------------------------

def _rotated(items: Sequence[str], index: int) -> list[str]:
    shift = index % len(items)
    return [*items[shift:], *items[:shift]]


def _as_mode(label: str, mode: object) -> EnergyMode:
    if isinstance(mode, EnergyMode):
        return mode
    if callable(mode):
        return EnergyMode(mode)  # type: ignore[arg-type]
    raise ValueError(f"mode {label!r} must be a callable that runs one call, or an EnergyMode; got {mode!r}")


def _call_seconds(mode: EnergyMode, timeline: Timeline, clock: Callable[[], float], calls: int = 3) -> float:
    """Seconds per call, from a few calls between two marks (GPU time where the timeline has it)."""
    timeline.synchronize()
    started = clock()
    first = timeline.mark()
    for _ in range(calls):
        mode.run()
    last = timeline.mark()
    timeline.synchronize()
    gpu = timeline.seconds_between(first, last)
    return max((gpu if gpu else clock() - started) / calls, 1e-7)  # per run


def measure(
    modes: Mapping[str, Callable[[], object] | EnergyMode],
    *,
    reference: str | None = None,
    settings: EnergySettings | None = None,
    device: int | None = None,
    meter: Meter | None = None,
    timeline: Timeline | None = None,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], None] | None = None,
) -> EnergyReport:
    """Joules per call of each mode, measured alternately in this process (see the module
    docstring), with the A/A control on ``reference`` (default: the first mode).

    ``modes`` maps labels to callables that launch one call each (or :class:`EnergyMode`\\ s
    with a context entered around their windows). The calls must not synchronise the host with
    the GPU (a CUDA graph replay, a convolution or an eager training step without ``.item()``
    are fine). ``device`` defaults to the current CUDA device; ``meter`` and ``timeline`` default
    to NVML and CUDA events there (tests pass fakes). ``progress`` receives one line per round.

    Raises :class:`EnergyUnavailable` (saying why) where NVML's energy counter cannot be read,
    ValueError for bad arguments. A window that fails (the counter did not move in time) is
    left out of its mode's medians and its reason kept in the report.
    """
    settings = EnergySettings() if settings is None else settings
    if not isinstance(settings, EnergySettings):
        raise ValueError(f"settings must be an EnergySettings, got {settings!r}")
    if not modes:
        raise ValueError("energy.measure needs at least one mode")
    given = {str(label): _as_mode(str(label), mode) for label, mode in modes.items()}
    reference = next(iter(given)) if reference is None else reference
    if reference not in given:
        raise ValueError(f"reference {reference!r} is not one of the modes: {', '.join(given)}")
    aa_label = reference + AA_SUFFIX if settings.aa_control else None
    if aa_label is not None and aa_label in given:
        raise ValueError(f"mode label {aa_label!r} is reserved for the A/A control")
    if meter is None or timeline is None:
        import torch

        if not torch.cuda.is_available():
            raise EnergyUnavailable("GPU energy cannot be measured: no CUDA GPU (torch.cuda.is_available() is False)")
        device = torch.cuda.current_device() if device is None else device
        meter = NvmlMeter(device) if meter is None else meter
        timeline = CudaTimeline(device) if timeline is None else timeline
    why = meter.unavailable()
    if why is not None:
        raise EnergyUnavailable(f"GPU energy cannot be measured: {why}")
    all_modes = dict(given)
    if aa_label is not None:
        all_modes[aa_label] = given[reference]
    labels = list(all_modes)

    in_flight: dict[str, int] = {}
    for label, mode in given.items():
        with _entered(mode):
            for _ in range(max(1, settings.untimed_calls)):
                mode.run()
            call_s = _call_seconds(mode, timeline, clock)
        in_flight[label] = min(512, max(2, math.ceil(settings.queue_ahead_s / call_s)))
    if aa_label is not None:
        in_flight[aa_label] = in_flight[reference]

    def turn(label: str) -> Callable[[float], None]:
        def run_for(seconds: float) -> None:
            with _entered(all_modes[label]):
                _Runner(all_modes[label].run, timeline, in_flight[label]).run_for(seconds, clock)
        return run_for

    sampler = PowerSampler(meter.power_mw, clock, settings.sample_period_s) \
        if settings.power_samples and meter.power_source is not None else None
    windows: dict[str, list[Window | None]] = {label: [] for label in labels}
    failures: dict[str, list[str]] = {label: [] for label in labels}
    orders = []
    with sampler if sampler is not None else contextlib.nullcontext():
        warmup = None if settings.warmup is None else \
            _warm_up([turn(label) for label in given], settings.warmup, meter, clock)
        for index in range(settings.rounds):
            order = _rotated(labels, index)
            orders.append(tuple(order))
            for label in order:
                mode = all_modes[label]
                with _entered(mode):
                    runner = _Runner(mode.run, timeline, in_flight[label])
                    for _ in range(settings.untimed_calls):
                        runner.launch()
                    try:
                        windows[label].append(_window(runner, meter, clock, settings, sampler, mode.calls))
                    except _WindowFailed as exc:
                        windows[label].append(None)
                        failures[label].append(str(exc))
            if progress is not None:
                progress(f"energy round {index + 1}/{settings.rounds}: " + ", ".join(
                    f"{label} " + ("n/a" if windows[label][-1] is None else f"{windows[label][-1].j_per_call:.4g} J")
                    for label in labels))
    report_modes = {label: ModeEnergy(label, tuple(windows[label]),
                                      paired_ratios(windows[label], windows[reference]), tuple(failures[label]))
                    for label in labels}
    return EnergyReport(report_modes, reference, aa_label, settings.to_dict(), warmup,
                        meter.power_source if sampler is not None else None, tuple(orders))


@contextlib.contextmanager
def _entered(mode: EnergyMode) -> Iterator[None]:
    with mode.context() if mode.context is not None else contextlib.nullcontext():
        yield


def graph_replay(run: Callable[[], object], calls: int,
                 warmup_calls: int = 3) -> tuple[Callable[[], None] | None, str | None]:
    """``calls`` calls of ``run`` captured in one CUDA graph: (its replay, None), or (None, why
    capture failed). Replaying many short calls as one launch keeps host time out of the
    measurement. ``run`` must be capturable (no host synchronisation, no new cuDNN plan built
    on its first call: run it before)."""
    import torch

    from . import _graph_capture

    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be an integer >= 1, got {calls!r}")

    def body() -> None:
        for _ in range(calls):
            run()

    try:
        _graph_capture.warm_up(run, warmup_calls)
        graph = _graph_capture.capture(body)
    except Exception as exc:  # noqa: BLE001 - the caller measures eagerly instead, and says why
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"CUDA graph capture failed ({type(exc).__name__}: {first_line})"
    return _GraphReplay(graph, run), None


class _GraphReplay:
    """A captured graph's replay that keeps the captured callable alive. The graph reads and
    writes the memory of the tensors ``run`` holds; were they freed, a later capture's
    ``empty_cache()`` would hand that memory back to the driver under the graph."""

    __slots__ = ("_graph", "_run")

    def __init__(self, graph: object, run: Callable[[], object]) -> None:
        self._graph, self._run = graph, run

    def __call__(self) -> None:
        self._graph.replay()


def calls_per_replay(call_ms: float, target_ms: float = 2.0, most: int = 1000) -> int:
    """How many calls of ``call_ms`` to capture in one graph so that a replay lasts about ``target_ms``."""
    if not call_ms or call_ms <= 0:
        return 1
    return max(1, min(most, math.ceil(target_ms / call_ms)))
