"""GPU energy from NVML's total-energy counter, through the driver's own
``libnvidia-ml.so.1`` (ctypes: no extra package).

The counter (millijoules since driver load, Volta and newer) only moves every
~100 ms, so :func:`energy_per_call` measures across whole counter
updates and runs enough calls to span them.
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable

import torch

__all__ = ["energy_counter", "energy_per_call"]

_NVML_SUCCESS = 0


@functools.cache
def _library() -> ctypes.CDLL | None:
    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
        if library.nvmlInit_v2() != _NVML_SUCCESS:
            return None
        return library
    except (OSError, AttributeError):
        return None


@functools.cache
def _handle(device_index: int) -> ctypes.c_void_p | None:
    library = _library()
    if library is None:
        return None
    # CUDA and NVML number devices differently (CUDA_VISIBLE_DEVICES); the PCI
    # address identifies the same board in both.
    props = torch.cuda.get_device_properties(device_index)
    bus_id = b"%08X:%02X:%02X.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    handle = ctypes.c_void_p()
    if library.nvmlDeviceGetHandleByPciBusId_v2(bus_id, ctypes.byref(handle)) != _NVML_SUCCESS:
        return None
    return handle


def energy_counter(device_index: int) -> int | None:
    """The device's total energy in millijoules, or None where NVML does not offer it."""
    handle = _handle(device_index)
    if handle is None:
        return None
    millijoules = ctypes.c_ulonglong()
    status = _library().nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(millijoules))
    return int(millijoules.value) if status == _NVML_SUCCESS else None


def energy_per_call(
    run: Callable[[], None],
    device_index: int,
    call_ms: float,
    *,
    counter_updates: int = 2,
    chunk_ms: float = 2.0,
    timeout_s: float = 2.0,
) -> float | None:
    """Joules per call of ``run`` (one launch, ``call_ms`` of GPU time each).

    Calls run in chunks of about ``chunk_ms``; the measurement starts at a
    counter update and ends ``counter_updates`` updates later, so the energy
    and the number of calls cover the same window (error about one chunk per
    end). None where the counter is unavailable or does not move in time.
    """
    if energy_counter(device_index) is None:
        return None
    chunk = max(1, round(chunk_ms / max(call_ms, 1e-3)))

    def run_chunk() -> None:
        for _ in range(chunk):
            run()
        torch.cuda.synchronize(device_index)

    deadline = time.perf_counter() + timeout_s
    start = energy_counter(device_index)
    first = start
    while first == start:  # align on an update
        if start is None or time.perf_counter() > deadline:
            return None
        run_chunk()
        first = energy_counter(device_index)
    calls, updates, last = 0, 0, first
    while updates < counter_updates:
        if last is None or time.perf_counter() > deadline:
            return None
        run_chunk()
        calls += chunk
        now = energy_counter(device_index)
        if now != last:
            updates, last = updates + 1, now
    if first is None or last is None:
        return None
    return (last - first) / 1000.0 / calls
