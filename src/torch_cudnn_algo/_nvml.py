"""The thin NVML binding energy measurement needs, through the driver's own
``libnvidia-ml.so.1`` (ctypes: no extra package). Every reading returns None
where NVML, the device or the reading is unavailable, and :func:`unavailable`
says why; nothing here raises. How the readings are used is ``_energy``'s
business.

Readings (see docs/energy.md for their resolution):

- :func:`energy_counter`: ``nvmlDeviceGetTotalEnergyConsumption``, millijoules
  since the driver loaded (Volta and newer); it moves every 20-100 ms.
- :func:`power_mw`: the board's power now, ``nvmlDeviceGetFieldValues`` with
  ``NVML_FI_DEV_POWER_INSTANT``; where the driver lacks that field,
  ``nvmlDeviceGetPowerUsage``, which on Ampere (except GA100) and newer is an
  average over the last second (:func:`power_source` names which one).
- :func:`temperature_c`: ``nvmlDeviceGetTemperature`` of the GPU die.
"""

from __future__ import annotations

import ctypes
import functools

import torch

__all__ = ["energy_counter", "power_mw", "power_source", "temperature_c", "unavailable"]

_NVML_SUCCESS = 0
_NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
_NVML_FI_DEV_POWER_INSTANT = 186  # nvml.h field id: instantaneous board power, mW
_NVML_VALUE_TYPES = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

POWER_INSTANT = "NVML_FI_DEV_POWER_INSTANT"
POWER_USAGE = "nvmlDeviceGetPowerUsage"


class _Value(ctypes.Union):  # nvmlValue_t
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class _FieldValue(ctypes.Structure):  # nvmlFieldValue_t
    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32), ("timestamp", ctypes.c_int64),
                ("latencyUsec", ctypes.c_int64), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", _Value)]


@functools.cache
def _library() -> tuple[ctypes.CDLL | None, str | None]:
    """NVML initialised, or None and why not."""
    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return None, f"NVML's library libnvidia-ml.so.1 cannot be loaded ({exc})"
    try:
        status = library.nvmlInit_v2()
    except AttributeError:
        return None, "libnvidia-ml.so.1 has no nvmlInit_v2"
    if status != _NVML_SUCCESS:
        return None, f"nvmlInit_v2 failed (NVML status {status})"
    return library, None


@functools.cache
def _handle(device_index: int) -> tuple[ctypes.c_void_p | None, str | None]:
    library, why = _library()
    if library is None:
        return None, why
    if not torch.cuda.is_available():
        return None, "torch.cuda.is_available() is False"
    # CUDA and NVML number devices differently (CUDA_VISIBLE_DEVICES); the PCI
    # address identifies the same board in both.
    props = torch.cuda.get_device_properties(device_index)
    bus_id = b"%08X:%02X:%02X.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    handle = ctypes.c_void_p()
    status = library.nvmlDeviceGetHandleByPciBusId_v2(bus_id, ctypes.byref(handle))
    if status != _NVML_SUCCESS:
        return None, f"NVML finds no device at PCI address {bus_id.decode()} (NVML status {status})"
    return handle, None


def unavailable(device_index: int) -> str | None:
    """Why NVML's energy counter cannot be read for this CUDA device, or None where it can."""
    handle, why = _handle(device_index)
    if handle is None:
        return why
    millijoules = ctypes.c_ulonglong()
    status = _library()[0].nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(millijoules))
    if status != _NVML_SUCCESS:
        return (f"this GPU or driver offers no total-energy counter (nvmlDeviceGetTotalEnergyConsumption: "
                f"NVML status {status}; it needs a Volta or newer GPU)")
    return None


def energy_counter(device_index: int) -> int | None:
    """The device's total energy in millijoules, or None where NVML does not offer it."""
    handle, _ = _handle(device_index)
    if handle is None:
        return None
    millijoules = ctypes.c_ulonglong()
    status = _library()[0].nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(millijoules))
    return int(millijoules.value) if status == _NVML_SUCCESS else None


def _instant_mw(handle: ctypes.c_void_p) -> float | None:
    library = _library()[0]
    if not hasattr(library, "nvmlDeviceGetFieldValues"):
        return None
    field = _FieldValue(fieldId=_NVML_FI_DEV_POWER_INSTANT)
    if library.nvmlDeviceGetFieldValues(handle, 1, ctypes.byref(field)) != _NVML_SUCCESS:
        return None
    if field.nvmlReturn != _NVML_SUCCESS or field.valueType not in _NVML_VALUE_TYPES:
        return None
    return float(getattr(field.value, _NVML_VALUE_TYPES[field.valueType]))


@functools.cache
def power_source(device_index: int) -> str | None:
    """Which NVML reading :func:`power_mw` returns on this device (:data:`POWER_INSTANT`, or
    :data:`POWER_USAGE` where the instant field is not offered), None where neither is."""
    handle, _ = _handle(device_index)
    if handle is None:
        return None
    if _instant_mw(handle) is not None:
        return POWER_INSTANT
    milliwatts = ctypes.c_uint()
    if _library()[0].nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) == _NVML_SUCCESS:
        return POWER_USAGE
    return None


def power_mw(device_index: int) -> float | None:
    """The board's power draw in milliwatts from :func:`power_source`'s reading, or None."""
    source = power_source(device_index)
    handle, _ = _handle(device_index)
    if source is None or handle is None:
        return None
    if source == POWER_INSTANT:
        return _instant_mw(handle)
    milliwatts = ctypes.c_uint()
    if _library()[0].nvmlDeviceGetPowerUsage(handle, ctypes.byref(milliwatts)) != _NVML_SUCCESS:
        return None
    return float(milliwatts.value)


def temperature_c(device_index: int) -> float | None:
    """The GPU die's temperature in degrees Celsius, or None."""
    handle, _ = _handle(device_index)
    if handle is None:
        return None
    celsius = ctypes.c_uint()
    status = _library()[0].nvmlDeviceGetTemperature(handle, _NVML_TEMPERATURE_GPU, ctypes.byref(celsius))
    return float(celsius.value) if status == _NVML_SUCCESS else None
