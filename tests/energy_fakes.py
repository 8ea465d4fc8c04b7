"""A simulated GPU for the energy measurement's CPU tests: calls that take real time (sleep) at a
given power, NVML's energy counter that moves only every ``update_s`` (holding the energy of its
last update), an instantaneous power reading, a temperature, and a timeline whose marks are the
host time after each call (the calls are synchronous)."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable


class FakeGpu:
    def __init__(self, update_s: float = 0.02, idle_w: float = 0.0,
                 temperature: Callable[[float], float | None] | None = None,
                 counter: bool = True, power: bool = True) -> None:
        self.t0 = time.perf_counter()
        self.update_s, self.idle_w = update_s, idle_w
        self.ends: list[float] = []  # end time of each call
        self.starts: list[float] = []
        self.watts: list[float] = []
        self.cumulative_j: list[float] = []  # energy of the calls up to each call's end
        self.nominal_s: list[float] = []
        self.temperature = temperature or (lambda elapsed: 40.0)
        self.has_counter, self.has_power = counter, power
        self.power_source = "fake instant power" if power else None
        self.counter_reads = 0
        self.current: tuple[float, float, float] | None = None  # (start, watts, seconds) of the call running now

    # -- modes --------------------------------------------------------------
    def mode(self, watts: float, call_s: float) -> Callable[[], None]:
        def run() -> None:
            start = time.perf_counter()
            self.current = (start, watts, call_s)
            time.sleep(call_s)
            end = time.perf_counter()
            self.current = None
            previous = self.cumulative_j[-1] if self.cumulative_j else 0.0
            self.starts.append(start)
            self.ends.append(end)
            self.watts.append(watts)
            # Each call costs its nominal energy, however long the host's sleep overshot: the
            # tests' expected joules do not depend on the machine's load.
            self.cumulative_j.append(previous + watts * call_s)
            self.nominal_s.append(call_s)
        return run

    # -- the meter ----------------------------------------------------------
    def unavailable(self) -> str | None:
        return None if self.has_counter else "the fake GPU has no energy counter"

    def energy_at(self, t: float) -> float:
        index = bisect.bisect_right(self.ends, t)
        done = self.cumulative_j[index - 1] if index else 0.0
        current = self.current
        if index == len(self.ends) and current is not None and current[0] < t:  # a call in progress at t
            done += current[1] * min(t - current[0], current[2])
        elif index < len(self.starts) and self.starts[index] < t:  # a call that had not ended at t
            done += self.watts[index] * min(t - self.starts[index], self.nominal_s[index])
        return done

    def counter_mj(self) -> int | None:
        self.counter_reads += 1
        now = time.perf_counter()
        tick = self.t0 + ((now - self.t0) // self.update_s) * self.update_s
        return int(self.energy_at(tick) * 1e3)

    def power_mw(self) -> float | None:
        if not self.has_power:
            return None
        current = self.current
        # The GPU draws the call's power for its nominal time and idles through the host's sleep
        # overshoot, as the counter charges it: the two sources agree however loaded the host is.
        busy = current is not None and time.perf_counter() - current[0] < current[2]
        return (current[1] if busy else self.idle_w) * 1e3

    def temperature_c(self) -> float | None:
        return self.temperature(time.perf_counter() - self.t0)


class FakeTimeline:
    """Synchronous calls: a mark is the host time after the call before it."""

    def mark(self) -> float:
        return time.perf_counter()

    def done(self, mark: object) -> bool:
        return True

    def wait(self, mark: object) -> None:
        pass

    def seconds_between(self, first: float, last: float) -> float:
        return last - first

    def synchronize(self) -> None:
        pass


class StuckCounter(FakeGpu):
    """A counter that never moves."""

    def counter_mj(self) -> int | None:
        return 1000
