"""GPU discovery as CUDA sees it: CUDA_VISIBLE_DEVICES applied to a simulated inventory,
the minimum compute capability, and NVML absent (this machine has no GPU driver)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
from despina.memory.gpus import NVML_LIBRARY, Gpu, GpuInventory, discover, visible_devices

MIG_A = Gpu(1, "A100 MIG 0", "MIG-aaaa-1111", (8, 0))
MIG_B = Gpu(1, "A100 MIG 1", "MIG-bbbb-2222", (8, 0))
PHYSICAL = [
    Gpu(0, "T4", "GPU-0000-t4", (7, 5)),
    Gpu(1, "A100", "GPU-1111-a100", (8, 0), mig=(MIG_A, MIG_B)),
    Gpu(2, "P100", "GPU-2222-p100", (6, 0)),
]


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        (None, ["T4", "A100 MIG 0", "P100"]),  # a MIG GPU shows its first MIG device
        ("", []),
        ("-1", []),
        ("2,0", ["P100", "T4"]),  # CUDA's ordinals follow the list
        ("0,7,2", ["T4"]),  # the list ends at the first entry naming no device
        ("0,0", ["T4"]),  # a repeated device ends it too
        ("GPU-2222", ["P100"]),  # a unique uuid prefix is enough
        ("GPU-", []),  # an ambiguous prefix names nothing
        ("MIG-bbbb-2222,MIG-aaaa", ["A100 MIG 1", "A100 MIG 0"]),
        ("GPU-1111-a100", []),  # a MIG-enabled GPU is used through its MIG devices
        (" 1 , 0", ["A100 MIG 0", "T4"]),
    ],
)
def test_cuda_visible_devices(variable: str | None, expected: list[str]) -> None:
    assert [g.name for g in visible_devices(PHYSICAL, variable)] == expected


def test_minimum_compute_capability_keeps_older_gpus_out() -> None:
    visible = visible_devices(PHYSICAL, None)
    assert GpuInventory(visible, "nvml", min_compute_capability=7.5).supported == (0, 1)
    assert GpuInventory(visible, "nvml", min_compute_capability=6.0).supported == (0, 1, 2)
    assert GpuInventory(visible, "nvml", min_compute_capability=9.0).supported == ()
    text = GpuInventory(visible, "nvml", min_compute_capability=7.5).describe()
    assert "2: P100 (compute 6.0) below the minimum compute capability 7.5" in text


def test_unknown_capability_counts_as_supported() -> None:
    """Found from device nodes only, a GPU's capability is unknown: it is not excluded."""
    assert GpuInventory((Gpu(0), Gpu(1)), "device nodes").supported == (0, 1)


def test_discover_without_a_driver_finds_nothing_and_says_why() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be checked")
    if any(Path("/dev").glob("nvidia[0-9]*")):
        pytest.skip("this machine has NVIDIA device nodes: they would be counted")
    inventory = discover({"CUDA_VISIBLE_DEVICES": "0"})
    assert inventory.visible == () and inventory.supported == ()
    assert inventory.note.startswith("NVML: ")
    assert inventory.describe().startswith("no GPU visible (NVML: ")


def test_without_the_driver_library_nvml_is_not_imported() -> None:
    """On a host without libnvidia-ml nvidia-ml-py is never imported (it would stay
    resident for nothing); the note says why, in pynvml's words."""
    pytest.importorskip("pynvml")
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        pass
    else:
        pytest.skip("this machine has NVIDIA's driver library: NVML is used")
    code = (
        "import sys; from despina.memory.gpus import discover; "
        "print(discover({}).note, 'pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "NVML: NVML Shared Library Not Found False"
