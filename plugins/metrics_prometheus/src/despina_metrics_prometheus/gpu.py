"""Triton's GPU metrics (``nv_gpu_*``, ``nv_energy_consumption``) from NVML, sampled
periodically for the GPUs the server may use, labelled ``gpu_uuid`` as Triton labels them.

NVML comes from the optional ``nvidia-ml-py`` (``pip install 'despina[gpu]'``); without it,
without a driver, or without GPUs, :func:`gpu_sampler` returns None and no GPU family is
exported. A reading NVML does not support on a device (power on some boards) is left out
for that device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from despina import GpuInventory

log = logging.getLogger("despina.metrics")

#: (name, HELP, type) of each family, Triton's texts.
FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "gauge"),
    (
        "nv_energy_consumption",
        "GPU energy consumption in joules since the Triton Server started",
        "counter",
    ),
)


@dataclass
class GpuReading:
    """The last values read for one GPU (a family missing: not supported there)."""

    uuid: str
    values: dict[str, float] = field(default_factory=dict)
    #: NVML's total energy (mJ) at the first reading: the counter starts at 0 there.
    energy_start_mj: int | None = None


class GpuSampler:
    """Reads NVML for the server's GPUs; :meth:`sample` refreshes :attr:`readings`."""

    def __init__(self, nvml: Any, uuids: list[str]) -> None:
        self._nvml = nvml
        self.readings = [GpuReading(uuid) for uuid in uuids]
        self.sample()

    def sample(self) -> None:
        """Read every GPU (a few NVML calls each, well under a millisecond)."""
        nv = self._nvml
        for reading in self.readings:
            handle = self._call(nv.nvmlDeviceGetHandleByUUID, reading.uuid)
            if handle is None:
                continue  # gone (a reset GPU): keep the last values
            values = reading.values
            rates = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None:
                values["nv_gpu_utilization"] = float(rates.gpu) / 100
            memory = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
            if memory is not None:
                values["nv_gpu_memory_total_bytes"] = float(memory.total)
                values["nv_gpu_memory_used_bytes"] = float(memory.used)
            for name, read in (
                ("nv_gpu_power_usage", nv.nvmlDeviceGetPowerUsage),
                ("nv_gpu_power_limit", nv.nvmlDeviceGetPowerManagementLimit),
            ):
                milliwatts = self._call(read, handle)
                if milliwatts is not None:
                    values[name] = milliwatts / 1000
            energy = self._call(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
            if energy is not None:
                if reading.energy_start_mj is None:
                    reading.energy_start_mj = int(energy)
                values["nv_energy_consumption"] = (int(energy) - reading.energy_start_mj) / 1000

    def _call(self, read: Any, *args: Any) -> Any:
        """``read(*args)``, or None when NVML does not support it there."""
        try:
            return read(*args)
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def gpu_sampler(gpus: GpuInventory) -> GpuSampler | None:
    """A sampler for the inventory's GPUs (MIG devices by their parent's readings are not
    reported: NVML does not give them), or None where NVML or GPUs are missing."""
    uuids = [g.uuid for g in gpus.visible if g.uuid.startswith("GPU-")]
    if not uuids:
        return None
    try:
        import pynvml
    except ImportError:
        log.warning("GPU metrics need nvidia-ml-py (pip install 'despina[gpu]'); none exported")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.warning("GPU metrics unavailable: NVML: %s", exc)
        return None
    return GpuSampler(pynvml, uuids)
