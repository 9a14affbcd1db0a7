"""Request bodies -> :class:`InferenceRequest`: JSON tensors, binary tensors, shared memory.

Binary tensors become numpy arrays over the request body (``numpy.frombuffer``, no copy);
shared-memory inputs are read from the registered region's checked window (one copy).
Every size is checked before anything is allocated. Messages follow Triton's.

Clients send the same JSON header with every request of one shape (perf_analyzer,
tritonclient without request ids): :class:`HeaderLayouts` keeps what such a header says,
so the next request with those header bytes is built over its body without parsing and
checking the JSON again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeGuard

import numpy as np
import orjson
from despina import (
    InferenceRequest,
    InvalidArgument,
    RequestedOutput,
    SequenceFlags,
    SharedMemoryRegistry,
    checked_element_count,
    deserialize_bytes,
    find_dtype,
    repeated_tensor,
)

from despina_frontend_http.limits import check_json_depth
from despina_frontend_http.options import DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_OUTPUTS

_OBJECT = np.dtype(np.object_)
#: How many header layouts :class:`HeaderLayouts` keeps (the oldest is dropped first).
LAYOUTS_KEPT = 256
#: JSON headers longer than this are parsed every time, never kept.
LAYOUT_MAX_BYTES = 4096
_FLAT = (str, int, float, bool, type(None))
#: Flat JSON data up to this many values is checked value by value (booleans, range of a
#: float datatype); larger or nested data with numpy (cheaper past about this size).
_SCAN_MAX = 64
#: The smallest magnitude a cast to each float datatype overflows at: numpy rounds to
#: nearest even, so a finite value this large becomes infinity (what ``np.errstate(over=
#: "raise")`` reports). ml_dtypes casts float64 to BF16 through float32, so BF16 overflows
#: only where float32 does. FP64 takes every JSON number (orjson refuses infinities).
_OVERFLOWS_AT = {"FP16": 65520.0, "FP32": 2.0**128 - 2.0**103, "BF16": 2.0**128 - 2.0**103}


class BinaryInput(NamedTuple):
    """Where one binary input lies in the body, and what it is."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    elements: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RequestLayout:
    """What one JSON header says, for a request whose inputs are all binary."""

    inputs: tuple[BinaryInput, ...]
    #: Where the last input ends: the length of a body it fits (any other is decoded the
    #: long way, and gets its error there).
    end: int
    id: str | None
    #: Flat (scalar values), so a shallow copy per request is a full one.
    parameters: dict[str, Any]
    outputs: tuple[tuple[str, dict[str, Any]], ...] | None

    def request(self, body: bytes, model: str, version: str) -> InferenceRequest:
        """The request this header makes over ``body`` (:attr:`end` bytes long)."""
        inputs: dict[str, np.ndarray] = {}
        for item in self.inputs:
            if item.dtype is _OBJECT:
                array = deserialize_bytes(memoryview(body)[item.start : item.end], item.elements)
            else:
                array = np.frombuffer(
                    body, dtype=item.dtype, count=item.elements, offset=item.start
                )
            inputs[item.name] = array.reshape(item.shape)
        params = dict(self.parameters)
        request = InferenceRequest(model, inputs, model_version=version, parameters=params)
        if self.id is not None:
            request.id = self.id
        if self.outputs is not None:
            request.outputs = [RequestedOutput(name, dict(p)) for name, p in self.outputs]
        if params:
            _sequence_and_policy(request, params)
        return request


class HeaderLayouts:
    """The layouts of recently decoded JSON headers, by the header's bytes."""

    def __init__(self, kept: int = LAYOUTS_KEPT) -> None:
        self.kept = kept
        self._layouts: dict[bytes, RequestLayout] = {}

    @staticmethod
    def key(body: bytes, header_length: str | None) -> bytes | None:
        """The header's bytes, or None for a body whose header is not kept."""
        if header_length is None:  # all JSON: the data is in the header
            return None
        try:
            size = int(header_length)
        except ValueError:
            return None
        if not 0 < size <= min(len(body), LAYOUT_MAX_BYTES):
            return None
        return bytes(body[:size])

    def get(self, key: bytes) -> RequestLayout | None:
        return self._layouts.get(key)

    def keep(self, key: bytes, header: dict[str, Any], binary: list[BinaryInput], end: int) -> None:
        """Keep the layout of a decoded header whose inputs (``binary``, in order) all
        came from the body, which ended at ``end``; not if a parameter is not a scalar."""
        params = dict(header.get("parameters") or {})
        outputs = header.get("outputs")
        named = [(o["name"], dict(o.get("parameters") or {})) for o in outputs or ()]
        values = [*params.values(), *(v for _, p in named for v in p.values())]
        if not all(isinstance(v, _FLAT) for v in values):
            return
        if len(self._layouts) >= self.kept:
            del self._layouts[next(iter(self._layouts))]
        request_id = header.get("id")
        self._layouts[key] = RequestLayout(
            tuple(binary),
            end,
            None if request_id is None else str(request_id),
            params,
            None if outputs is None else tuple(named),
        )


def parse_header(
    body: bytes, header_length: str | None, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> tuple[dict[str, Any], int]:
    """The request's JSON object and where its binary part starts; InvalidArgument for
    JSON nested deeper than ``max_depth`` (before parsing)."""
    if header_length is None:
        size = len(body)
        text: bytes | memoryview = body
    else:
        try:
            size = int(header_length)
        except ValueError:
            raise InvalidArgument(f"invalid inference header size '{header_length}'") from None
        if size <= 0 or size > len(body):
            raise InvalidArgument(
                f"inference header size should be in range (0, {len(body)}), got: {size}"
            )
        text = memoryview(body)[:size]
    if body.count(b"[", 0, size) + body.count(b"{", 0, size) > max_depth:  # counted in place
        check_json_depth(text, max_depth)
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(header, dict):
        raise _parse_error("inputs", None, "array")
    return header, size


def decode_request(
    body: bytes,
    header_length: str | None,
    model: str,
    version: str,
    shm: SharedMemoryRegistry,
    layouts: HeaderLayouts,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_outputs: int = DEFAULT_MAX_OUTPUTS,
) -> InferenceRequest:
    """Build the request for ``model``; InvalidArgument for anything malformed, JSON
    nested deeper than ``max_depth`` or more than ``max_outputs`` outputs.
    ``layouts``: where headers already seen are looked up, and new ones kept (only
    headers within both limits are)."""
    key = HeaderLayouts.key(body, header_length)
    if key is not None:
        layout = layouts.get(key)
        if layout is not None and layout.end == len(body):
            return layout.request(body, model, version)
    header, offset = parse_header(body, header_length, max_depth)
    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise _parse_error("inputs", inputs_json, "array")
    inputs: dict[str, np.ndarray] = {}
    binary: list[BinaryInput] = []  # only while the header may be kept
    booleans = b"true" in body or b"false" in body  # else no JSON value is a boolean
    for item in inputs_json:
        start = offset
        name, array, offset = _decode_input(item, body, offset, model, shm, booleans)
        if name in inputs:  # Triton's check, where it adds the input
            raise repeated_tensor("input", name, _id(header))
        inputs[name] = array
        if key is not None and "binary_data_size" in (item.get("parameters") or ()):
            binary.append(BinaryInput(name, array.dtype, array.shape, array.size, start, offset))
    if offset != len(body):  # bytes after the last binary input (Triton refuses them too)
        raise InvalidArgument(f"unexpected additional input data for model '{model}'")
    params = _params(header.get("parameters"), "request")
    request = InferenceRequest(model, inputs, model_version=version, parameters=params)
    request_id = _id(header)
    if request_id is not None:
        request.id = request_id
    outputs_json = header.get("outputs")
    if outputs_json is not None:
        if not isinstance(outputs_json, list):
            raise InvalidArgument("Unable to parse 'outputs': expected a JSON array")
        if len(outputs_json) > max_outputs:
            raise InvalidArgument(
                f"the request names {len(outputs_json)} outputs, more than {max_outputs}; "
                "use --http-max-outputs to increase the limit"
            )
        request.outputs = [_decode_output(o) for o in outputs_json]
    if params:
        _sequence_and_policy(request, params)
    if key is not None and len(binary) == len(inputs_json):
        layouts.keep(key, header, binary, offset)
    return request


def _id(header: dict[str, Any]) -> str | None:
    """The request id the header gives, if any."""
    request_id = header.get("id")
    return None if request_id is None else str(request_id)


def _decode_input(
    item: Any, body: bytes, offset: int, model: str, shm: SharedMemoryRegistry, booleans: bool
) -> tuple[str, np.ndarray, int]:
    if type(item) is not dict:
        raise _parse_error("inputs", item, "object")
    name = item.get("name")
    if type(name) is not str:
        raise _parse_error("name", name, "string")
    datatype = item.get("datatype")
    if type(datatype) is not str:
        raise _parse_error("datatype", datatype, "string")
    dtype = find_dtype(datatype)
    if dtype is None:
        raise InvalidArgument(f"invalid datatype for input {name}")
    shape = item.get("shape")
    count = _count(shape, dtype.itemsize, name, model)
    params = item.get("parameters")
    if params is None:
        params = {}
    elif type(params) is not dict:
        raise _parse_error("parameters", params, "object")
    data = item.get("data")
    binary = "binary_data_size" in params
    if binary:
        size = params["binary_data_size"]
        if type(size) is not int or size < 0:  # null, bool, float, negative
            raise _parse_error("binary_data_size", size, "unsigned-integer", present=True)
    region = params.get("shared_memory_region")
    if (data is not None) + binary + (region is not None) != 1:
        given = zip(
            ("data", "binary_data_size", "shared_memory_region"),
            (data is not None, binary, region is not None),
            strict=True,
        )
        fields = [f for f, present in given if present]
        raise InvalidArgument(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + ("set " + " ".join(f"'{f}'" for f in fields) if fields else "no field is set")
        )
    if binary:
        if offset + size > len(body):
            raise InvalidArgument(
                f"unexpected size for input '{name}', expecting {offset + size - len(body)} "
                f"additional bytes for model '{model}'"
            )
        if dtype is _OBJECT:
            array = deserialize_bytes(memoryview(body)[offset : offset + size], count)
        else:
            _check_size(size, count * dtype.itemsize, name, model)
            array = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
        return name, array.reshape(shape), offset + size
    if region is not None:
        byte_size = params.get("shared_memory_byte_size")
        region_offset = params.get("shared_memory_offset", 0)
        if not _is_int(byte_size) or not _is_int(region_offset):
            raise InvalidArgument(f"invalid shared memory parameters for input '{name}'")
        window = shm.window(str(region), region_offset, byte_size)
        if dtype is _OBJECT:
            return name, deserialize_bytes(window.read(), count).reshape(shape), offset
        _check_size(byte_size, count * dtype.itemsize, name, model)
        return name, window.tensor(dtype).reshape(shape), offset  # type: ignore[return-value]
    return name, tensor_from_json(data, dtype, datatype, shape, count, name, booleans), offset


def _count(shape: Any, itemsize: int, name: str, model: str) -> int:
    """The element count of a JSON shape; Triton's parse errors for a bad one, and
    :func:`~despina.inference.tensors.checked_element_count`'s for one no tensor can have."""
    if type(shape) is not list:
        raise _parse_error("shape", shape, "array")
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise _parse_error("shape", dim, "unsigned-integer", present=True)
    return checked_element_count(shape, itemsize, name, model)


def _check_size(got: int, expected: int, name: str, model: str) -> None:
    if got != expected:
        raise InvalidArgument(
            f"[request id: <id_unknown>] input byte size mismatch for input '{name}' for model "
            f"'{model}'. Expected {expected}, got {got}"
        )


#: numpy kind of a tensor's datatype -> (kinds of parsed JSON data it takes, Triton's text).
_JSON_KINDS = {
    "b": ("b", "attempt to access JSON non-boolean as boolean"),
    "u": ("iu", "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    "i": ("i", "attempt to access JSON non-signed-integer as signed-integer"),
    "f": ("iuf", "attempt to access JSON non-number as double"),
    "V": ("iuf", "attempt to access JSON non-number as double"),  # BF16 (ml_dtypes)
}


def tensor_from_json(
    data: Any,
    dtype: np.dtype[Any],
    datatype: str,
    shape: Any,
    count: int,
    name: str,
    booleans: bool = True,
) -> np.ndarray:
    """A JSON value (scalar, flat or nested array) as a tensor of ``shape``; InvalidArgument
    when a value has the wrong JSON type (Triton's texts), is out of the datatype's range,
    or the element count is not ``count``. ``booleans=False``: the JSON text it came from
    holds no ``true`` or ``false``, so no value is looked at for being one."""
    if not isinstance(data, list):
        data = [data]
    try:
        if dtype is _OBJECT:
            flat = np.array(data, dtype=np.object_).reshape(-1)
            array = np.empty(flat.size, dtype=np.object_)
            array[:] = [_to_bytes(v) for v in flat]
        else:
            array = _numbers(data, dtype, datatype, booleans)
    except (ValueError, TypeError, OverflowError) as exc:
        what = "JSON bytes array" if dtype is _OBJECT else "'data'"
        raise InvalidArgument(f"Unable to parse {what}: {exc}") from None
    if array.size != count:
        raise InvalidArgument(
            "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )
    return array.reshape(shape)


def _numbers(data: list[Any], dtype: np.dtype[Any], datatype: str, booleans: bool) -> np.ndarray:
    """JSON numbers (nested lists) as a flat ``dtype`` array; ValueError for a value of
    the wrong JSON type (a boolean only looked for where ``booleans``) or outside the
    datatype's range."""
    read = np.asarray(data)
    parsed = read.reshape(-1)
    if parsed.size == 0:
        return parsed.astype(dtype)
    kinds, text = _JSON_KINDS[dtype.kind]
    # each value of flat data is checked in Python, cheaper than numpy for a few values
    scan = read.ndim == 1 and parsed.size <= _SCAN_MAX
    if dtype.kind not in "iu":
        if parsed.dtype.kind not in kinds:
            raise ValueError(text)
        if dtype.kind != "b":
            if booleans:
                _no_booleans(data, parsed, text, scan)
            limit = _OVERFLOWS_AT.get(datatype)
            if limit is not None:
                low, high = _bounds(data, parsed, scan)
                if high >= limit or low <= -limit:
                    raise ValueError(f"a value is outside the range of {datatype}")
        return parsed.astype(dtype)
    if parsed.dtype.kind not in kinds:
        # numpy reads integers past int64 mixed with others as float64 (or object): check
        # the JSON values themselves on this rare path, exactly.
        exact = list(_flat(data))
        if any(type(v) is not int for v in exact):
            raise ValueError(text)
        values: Any = exact
        low, high = min(exact), max(exact)
    else:
        if booleans:
            _no_booleans(data, parsed, text, scan)
        values = parsed
        low, high = _bounds(data, parsed, scan)
    limits = np.iinfo(dtype)
    if low < limits.min:
        raise ValueError(text if dtype.kind == "u" else f"a value is below the range of {datatype}")
    if high > limits.max:
        raise ValueError(f"a value is above the range of {datatype}")
    return np.asarray(values, dtype=dtype)


def _bounds(data: list[Any], parsed: np.ndarray, scan: bool) -> tuple[Any, Any]:
    """The least and the greatest number of ``data`` (read by numpy into ``parsed``, flat);
    from ``data`` itself where ``scan`` (flat and short)."""
    if scan:
        return min(data), max(data)
    return parsed.min(), parsed.max()


def _no_booleans(data: list[Any], parsed: np.ndarray, text: str, scan: bool) -> None:
    """ValueError(text) when ``data`` (read by numpy into the numbers ``parsed``, flat)
    holds a JSON boolean: numpy reads ``[1.5, true]`` as ``[1.5, 1.0]``. ``scan``: ``data``
    is flat and short enough to check value by value."""
    if scan:
        found = bool in set(map(type, data))
    else:  # a boolean became 0 or 1: only those values' types
        candidates = (parsed == 0) | (parsed == 1)
        found = bool(candidates.any()) and bool in set(
            map(type, np.asarray(data, dtype=object).reshape(-1)[candidates])
        )
    if found:
        raise ValueError(text)


def _flat(data: list[Any]) -> Iterator[Any]:
    for value in data:
        if isinstance(value, list):
            yield from _flat(value)
        else:
            yield value


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    raise ValueError("attempt to access JSON non-string as string")


def _parse_error(member: str, value: Any, kind: str, present: bool = False) -> InvalidArgument:
    """Triton's text for a missing or mistyped JSON member (Triton answers 500; we 400);
    ``present``: the member is there, as null."""
    if value is None and not present:
        return InvalidArgument(
            f"Unable to parse '{member}': attempt to access non-existing object member '{member}'"
        )
    return InvalidArgument(
        f"Unable to parse '{member}': attempt to access JSON non-{kind} as {kind}"
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _params(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"Unable to parse 'parameters' of {where}: expected a JSON object")
    return value


def _decode_output(item: Any) -> RequestedOutput:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidArgument("Unable to parse 'outputs': expected objects with a 'name'")
    return RequestedOutput(
        item["name"], _params(item.get("parameters"), f"output '{item['name']}'")
    )


def _sequence_and_policy(request: InferenceRequest, params: dict[str, Any]) -> None:
    """Triton's reserved request parameters: sequence, priority and timeout; a key
    starting with ``triton_`` is refused (Triton's text)."""
    for key in params:
        if key.startswith("triton_"):
            raise InvalidArgument(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
    sequence_id = params.get("sequence_id")
    if sequence_id is not None:
        if not isinstance(sequence_id, int | str) or isinstance(sequence_id, bool):
            raise InvalidArgument("Unable to parse 'sequence_id': expected an integer or a string")
        request.correlation_id = sequence_id
    flags = SequenceFlags.NONE
    if params.get("sequence_start") is True:
        flags |= SequenceFlags.START
    if params.get("sequence_end") is True:
        flags |= SequenceFlags.END
    request.flags = flags
    for key in ("priority", "timeout"):
        value = params.get(key)
        if value is None:
            continue
        if not _is_int(value) or value < 0:
            raise _parse_error(key, value, "unsigned-integer")
        if key == "priority":
            request.priority = value
        else:
            request.timeout_us = value
