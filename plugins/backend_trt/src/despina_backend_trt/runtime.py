"""Finding the TensorRT runtime and the device memory layer, with the reason when absent.

:func:`load_runtime` imports ``tensorrt`` (its bindings load libnvinfer at import) and
the device layer: cupy's :class:`~despina_backend_trt.device_memory.CupyMemory`, unless
the ``tensorrt`` module itself provides a layer as ``despina_device_memory`` — which only
the numpy stand-in of the tests does (the real bindings have no such name), so tests put
their stand-in in ``sys.modules`` and never touch the production path's choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from despina import Unavailable

from despina_backend_trt.device_memory import DeviceMemory

#: The reason a plan cannot load without TensorRT, and how to install it.
RUNTIME_MISSING = (
    "TensorRT runtime not installed (install it with "
    "pip install 'despina-backend-trt[runtime]', which brings tensorrt and cupy-cuda12x; "
    "see despina-backend-trt's README)"
)
CUPY_MISSING = (
    "cupy not installed: the TensorRT backend allocates device buffers and streams with "
    "cupy (pip install 'despina-backend-trt[runtime]', or the cupy-cudaXXx wheel of your CUDA)"
)


@dataclass(frozen=True)
class Runtime:
    """The imported ``tensorrt`` module and the device layer instances use."""

    trt: Any
    memory: DeviceMemory


def load_runtime() -> Runtime:
    """The runtime; raises Unavailable naming what is missing and how to install it."""
    try:
        import tensorrt as trt
    except (ImportError, OSError) as exc:  # OSError: bindings present, libnvinfer not
        raise Unavailable(f"{RUNTIME_MISSING}: {exc}") from None
    provided = getattr(trt, "despina_device_memory", None)
    if provided is not None:
        memory: DeviceMemory = provided
        return Runtime(trt, memory)
    try:
        from despina_backend_trt.device_memory import CupyMemory

        return Runtime(trt, CupyMemory())
    except ImportError as exc:
        raise Unavailable(f"{CUPY_MISSING}: {exc}") from None


def missing_reason() -> str | None:
    """None when :func:`load_runtime` succeeds, else its reason."""
    try:
        load_runtime()
    except Unavailable as exc:
        return str(exc)
    return None
