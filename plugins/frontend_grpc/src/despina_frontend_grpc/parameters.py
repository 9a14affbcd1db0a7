"""``InferParameter`` maps <-> plain dicts, and the request parameters Triton reserves.

Reserved keys (sequence, priority, timeout) become fields of the InferenceRequest, typed
as Triton requires; a key starting with ``triton_`` other than :data:`EMPTY_FINAL` is
refused (Triton's text); every other key is passed on in ``InferenceRequest.parameters``.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from despina import InferenceRequest, InvalidArgument, SequenceFlags

#: Every streamed response carries ``triton_final_response``; requests whose
#: ``triton_enable_empty_final_response`` is true also get an empty final response when a
#: decoupled model ends without one (as Triton).
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_FLAG = "triton_final_response"


def value_of(parameter: Any) -> Any:
    """The set value of an ``InferParameter`` (None when none is set)."""
    kind = parameter.WhichOneof("parameter_choice")
    return None if kind is None else getattr(parameter, kind)


def to_dict(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A protobuf parameter map as ``{key: value}``."""
    return {key: value_of(p) for key, p in parameters.items()}


def fill(target: MutableMapping[str, Any], values: Mapping[str, Any]) -> None:
    """Write ``values`` into a protobuf InferParameter map, typed by Python type."""
    for key, value in values.items():
        parameter = target[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            if value < 2**63:
                parameter.int64_param = value
            else:
                parameter.uint64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        else:
            parameter.string_param = value.decode() if isinstance(value, bytes) else str(value)


def _typed(parameters: Mapping[str, Any], key: str, kinds: tuple[str, ...], expected: str) -> Any:
    parameter = parameters[key]
    kind = parameter.WhichOneof("parameter_choice")
    if kind not in kinds:
        raise InvalidArgument(f"invalid value type for '{key}' parameter, expected {expected}.")
    return getattr(parameter, kind)


def apply_request_parameters(request: InferenceRequest, parameters: Mapping[str, Any]) -> None:
    """Set sequence id/flags, priority, timeout and free-form parameters of ``request``."""
    free: dict[str, Any] = {}
    flags = SequenceFlags.NONE
    for key in parameters:
        if key == "sequence_id":
            request.correlation_id = _typed(
                parameters,
                key,
                ("int64_param", "uint64_param", "string_param"),
                "int64_param, uint64_param or string_param",
            )
        elif key == "sequence_start":
            if _typed(parameters, key, ("bool_param",), "bool_param"):
                flags |= SequenceFlags.START
        elif key == "sequence_end":
            if _typed(parameters, key, ("bool_param",), "bool_param"):
                flags |= SequenceFlags.END
        elif key == "priority":
            request.priority = _typed(
                parameters, key, ("int64_param", "uint64_param"), "int64_param or uint64_param"
            )
        elif key == "timeout":
            request.timeout_us = _typed(parameters, key, ("int64_param",), "int64_param")
        elif key.startswith("triton_") and key != EMPTY_FINAL:
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                f"the following keys starting with 'triton_' are allowed: {EMPTY_FINAL}"
            )
        else:
            free[key] = value_of(parameters[key])
    request.flags = flags
    request.parameters = free
