"""Triton's GPU metrics (issue 22): ``nv_gpu_*`` and ``nv_energy_consumption`` per GPU the
server may use, labelled ``gpu_uuid``, read from NVML. On a host without a GPU none is
exported; the readings themselves are checked on a GPU machine only (``gpu`` marker)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from despina.memory.gpus import discover
from despina.testing import RunningServer

from .helpers import samples, scrape

GPU_FAMILIES = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}


def test_no_gpu_no_gpu_families(serve: Callable[..., RunningServer]) -> None:
    if discover().visible:
        pytest.skip("this machine has a GPU: the no-GPU case cannot be shown")
    running = serve("--allow-gpu-metrics=true")
    names = {name for _, name, _ in samples(scrape(running))}
    assert not names & GPU_FAMILIES
    assert "nv_cpu_utilization" in names  # the exporter itself runs


@pytest.mark.gpu
def test_every_gpu_has_tritons_families(serve: Callable[..., RunningServer]) -> None:
    pytest.importorskip("pynvml", reason="GPU metrics need nvidia-ml-py")
    inventory = discover()
    if inventory.source != "nvml" or not inventory.visible:
        pytest.skip(f"no GPU through NVML here ({inventory.describe()})")
    running = serve("--allow-gpu-metrics=true", "--metrics-interval-ms=100")
    found = [(name, s.labels, s.value) for _, name, s in samples(scrape(running))]
    uuids = {g.uuid for g in inventory.visible if g.uuid.startswith("GPU-")}
    by_family: dict[str, dict[str, float]] = {}
    for name, labels, value in found:
        if name in GPU_FAMILIES:
            by_family.setdefault(name, {})[labels["gpu_uuid"]] = value
    assert set(by_family["nv_gpu_memory_total_bytes"]) == uuids
    assert all(v > 0 for v in by_family["nv_gpu_memory_total_bytes"].values())
    assert all(0 <= v <= 1 for v in by_family["nv_gpu_utilization"].values())
    assert all(v >= 0 for v in by_family.get("nv_energy_consumption", {}).values())
    off = serve("--allow-gpu-metrics=false")
    assert not {name for _, name, _ in samples(scrape(off))} & GPU_FAMILIES
