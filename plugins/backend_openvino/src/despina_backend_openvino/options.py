"""The ``parameters`` Triton's OpenVINO backend reads, as OpenVINO properties.

``PERFORMANCE_HINT`` (LATENCY / THROUGHPUT / CUMULATIVE_THROUGHPUT), ``NUM_STREAMS``
(a number or AUTO), ``INFERENCE_NUM_THREADS``, ``COMPILATION_NUM_THREADS``,
``HINT_BF16`` (YES: bf16 inference precision) become compile properties;
``TARGET_DEVICE`` (default CPU) picks the OpenVINO device; ``CPU_EXTENSION_PATH`` loads a
custom-layer library; ``RESHAPE_IO_LAYERS`` (YES: reshape inputs to the config's dims)
and ``SKIP_OV_DYNAMIC_BATCHSIZE`` (YES: keep a static batch dimension) shape the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from despina import ConfigError, ascii_digits

_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


@dataclass(frozen=True)
class OpenVinoOptions:
    """Parsed parameters of one model."""

    properties: dict[str, str] = field(default_factory=dict)
    device: str = "CPU"
    extension: str = ""
    reshape_io: bool = False
    skip_dynamic_batch: bool = False

    @classmethod
    def from_parameters(cls, params: dict[str, str], model: str) -> OpenVinoOptions:
        """Parse ``params``; ConfigError naming the model and key for a bad value."""
        properties: dict[str, str] = {}
        hint = params.get("PERFORMANCE_HINT", "").strip().upper()
        if hint:
            if hint not in _HINTS:
                raise ConfigError(
                    f"model '{model}': parameter 'PERFORMANCE_HINT' must be one of "
                    f"{', '.join(_HINTS)}, got '{hint}'"
                )
            properties["PERFORMANCE_HINT"] = hint
        streams = params.get("NUM_STREAMS", "").strip().upper()
        if streams:
            properties["NUM_STREAMS"] = (
                streams
                if streams in ("AUTO", "NUMA")
                else str(_count(params, "NUM_STREAMS", model))
            )
        for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if params.get(key, "").strip():
                properties[key] = str(_count(params, key, model))
        if _yes(params, "HINT_BF16", model):
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        return cls(
            properties=properties,
            device=params.get("TARGET_DEVICE", "").strip() or "CPU",
            extension=params.get("CPU_EXTENSION_PATH", "").strip(),
            reshape_io=_yes(params, "RESHAPE_IO_LAYERS", model),
            skip_dynamic_batch=_yes(params, "SKIP_OV_DYNAMIC_BATCHSIZE", model),
        )


def _count(params: dict[str, str], key: str, model: str) -> int:
    value = params[key].strip()
    if not ascii_digits(value):
        raise ConfigError(
            f"model '{model}': parameter '{key}' must be a non-negative integer, got '{value}'"
        )
    return int(value)


def _yes(params: dict[str, str], key: str, model: str) -> bool:
    value = params.get(key, "").strip().upper()
    if value in ("", "NO", "FALSE", "0"):
        return False
    if value in ("YES", "TRUE", "1"):
        return True
    raise ConfigError(f"model '{model}': parameter '{key}' must be YES or NO, got '{value}'")
