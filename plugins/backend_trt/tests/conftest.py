"""Fixtures of the TensorRT backend's tests.

No TensorRT and no GPU exist where these tests run in CI, so the serving tests use two
TEST-ONLY pieces: ``trt_standin`` puts the numpy stand-in (standin_tensorrt.py) in
``sys.modules["tensorrt"]`` with its host-memory device layer, and ``SimulatedGpu`` is a
plugin answering ``despina_gpu_inventory`` with one GPU, so the models get KIND_GPU
instances. The backend code under test is the production code, unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "despina_trt_standin", Path(__file__).with_name("standin_tensorrt.py")
)
assert _SPEC is not None and _SPEC.loader is not None
standin: Any = importlib.util.module_from_spec(_SPEC)
sys.modules["despina_trt_standin"] = standin
_SPEC.loader.exec_module(standin)


@pytest.fixture
def trt_standin() -> Iterator[Any]:
    """The stand-in ``tensorrt`` module, installed for the test (its ``despina_device_memory``
    is the HostMemory the instances use)."""
    with standin.installed() as module:
        yield module
