"""The NVIDIA GPUs this process may use, found without loading CUDA.

Devices come from NVML (the optional ``nvidia-ml-py``; it loads the driver's
``libnvidia-ml``, not the CUDA runtime), else from the ``/dev/nvidia<N>`` device nodes
(compute capability then unknown). ``CUDA_VISIBLE_DEVICES`` is applied as the CUDA
runtime applies it, so the ids here are the CUDA device ordinals the frameworks use:

- unset: every GPU; a MIG-enabled GPU contributes its first MIG device (a CUDA process
  sees one MIG device unless it names more);
- a comma-separated list of indices, ``GPU-<uuid>`` or ``MIG-<uuid>`` (prefixes are
  enough when unambiguous); the list ends at the first entry that names no device, so
  ``""`` and ``"-1"`` hide every GPU.

A :class:`GpuInventory` then keeps the devices of at least the minimum compute
capability (``--min-supported-compute-capability``, Triton's default 7.5).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Triton's default ``--min-supported-compute-capability`` (TRITON_MIN_COMPUTE_CAPABILITY).
DEFAULT_MIN_COMPUTE_CAPABILITY = 7.5
#: The library nvidia-ml-py loads, and its text when the library is absent.
NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_NOT_FOUND = "NVML Shared Library Not Found"


@dataclass(frozen=True)
class Gpu:
    """One device as NVML (or a device node) describes it."""

    #: The physical index (NVML's order; a device node's number).
    index: int
    name: str = ""
    uuid: str = ""
    #: (major, minor), or None when unknown (found from device nodes only).
    compute_capability: tuple[int, int] | None = None
    #: The MIG devices of a MIG-enabled GPU (their own uuids, the parent's capability).
    mig: tuple[Gpu, ...] = ()


@dataclass(frozen=True)
class GpuInventory:
    """The devices visible to this process: ``visible[i]`` is CUDA device ordinal ``i``."""

    visible: tuple[Gpu, ...] = ()
    #: Where the devices came from: "nvml", "device nodes", or "none".
    source: str = "none"
    #: Why no devices were found where that is not plain absence (NVML failed, ...).
    note: str = ""
    min_compute_capability: float = DEFAULT_MIN_COMPUTE_CAPABILITY
    _supported: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = tuple(
            ordinal
            for ordinal, gpu in enumerate(self.visible)
            if gpu.compute_capability is None
            or _capability(gpu.compute_capability) >= self.min_compute_capability - 0.01
        )
        object.__setattr__(self, "_supported", ids)

    @property
    def supported(self) -> tuple[int, ...]:
        """CUDA ordinals of the visible devices with at least the minimum capability
        (a device of unknown capability counts as supported)."""
        return self._supported

    def describe(self) -> str:
        """One line for the log and ``despina plugins``."""
        if not self.visible:
            return "no GPU visible" + (f" ({self.note})" if self.note else "")
        parts = []
        for ordinal, gpu in enumerate(self.visible):
            cc = gpu.compute_capability
            text = f"{ordinal}: {gpu.name or 'GPU'}" + (f" (compute {cc[0]}.{cc[1]})" if cc else "")
            if ordinal not in self._supported:
                text += f" below the minimum compute capability {self.min_compute_capability}"
            parts.append(text)
        return f"GPUs from {self.source}: " + "; ".join(parts)


def _capability(cc: tuple[int, int]) -> float:
    return cc[0] + cc[1] / 10


def visible_devices(physical: Sequence[Gpu], cuda_visible: str | None) -> tuple[Gpu, ...]:
    """The devices CUDA enumerates for ``CUDA_VISIBLE_DEVICES`` = ``cuda_visible``."""
    if cuda_visible is None:
        return tuple(gpu.mig[0] if gpu.mig else gpu for gpu in physical)
    chosen: list[Gpu] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        gpu = _named(physical, entry)
        if gpu is None or gpu in chosen:
            break
        chosen.append(gpu)
    return tuple(chosen)


def _named(physical: Sequence[Gpu], entry: str) -> Gpu | None:
    """The device an entry of CUDA_VISIBLE_DEVICES names, or None."""
    if re.fullmatch(r"\d+", entry):
        index = int(entry)
        gpu = next((g for g in physical if g.index == index), None)
        return (gpu.mig[0] if gpu.mig else gpu) if gpu is not None else None
    if entry.startswith("MIG-"):
        candidates = [m for g in physical for m in g.mig if m.uuid.startswith(entry)]
    elif entry.startswith("GPU-"):
        candidates = [g for g in physical if g.uuid.startswith(entry) and not g.mig]
    else:
        return None
    return candidates[0] if len(candidates) == 1 else None


def discover(
    environ: Mapping[str, str] | None = None,
    min_compute_capability: float = DEFAULT_MIN_COMPUTE_CAPABILITY,
) -> GpuInventory:
    """This machine's visible GPUs (NVML when installed and working, else device nodes)."""
    env = os.environ if environ is None else environ
    physical, source, note = _from_nvml()
    if source != "nvml":
        physical = _from_device_nodes()
        source = "device nodes" if physical else "none"
    visible = visible_devices(physical, env.get("CUDA_VISIBLE_DEVICES"))
    return GpuInventory(visible, source if visible else "none", note, min_compute_capability)


def _from_nvml() -> tuple[list[Gpu], str, str]:
    """(GPUs, "nvml", "") from NVML, or ([], "", why not). On a host without NVIDIA's
    driver library nvidia-ml-py is not even imported (it would stay resident, ~1 MiB)."""
    if importlib.util.find_spec("pynvml") is None:
        return [], "", ""
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return [], "", f"NVML: {NVML_NOT_FOUND}"
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], "", f"NVML: {exc}"
    try:
        return [_nvml_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())], "nvml", ""
    except pynvml.NVMLError as exc:
        return [], "", f"NVML: {exc}"
    finally:
        pynvml.nvmlShutdown()


def _nvml_gpu(nv: Any, index: int) -> Gpu:
    """Physical GPU ``index`` and, when MIG is on, its MIG devices."""
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
    capability = (int(major), int(minor))
    name = str(nv.nvmlDeviceGetName(handle))
    mig: list[Gpu] = []
    try:
        current, _ = nv.nvmlDeviceGetMigMode(handle)
    except nv.NVMLError:
        current = 0  # not a MIG-capable GPU
    if current:
        for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                child = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nv.NVMLError:
                continue  # an empty MIG slot
            mig.append(
                Gpu(index, f"{name} MIG {slot}", str(nv.nvmlDeviceGetUUID(child)), capability)
            )
    return Gpu(index, name, str(nv.nvmlDeviceGetUUID(handle)), capability, tuple(mig))


def _from_device_nodes(dev: Path = Path("/dev")) -> list[Gpu]:
    """One GPU per ``/dev/nvidia<N>`` node, capability unknown."""
    numbers = sorted(
        int(p.name[6:]) for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)
    )
    return [Gpu(n) for n in numbers]
