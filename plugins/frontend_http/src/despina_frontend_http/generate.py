"""Triton's generate extension (``/generate``, ``/generate_stream``): its flat JSON object
to an :class:`InferenceRequest`, and a response back to a flat JSON object.

Request: ``id`` (a string) is the request's id. Every top-level key naming a model input
becomes that input's tensor; ``parameters`` (an object) is read the same way one level
down; every other key, ``id`` included, becomes a request parameter (string, integer,
boolean or number). A tensor is a JSON scalar or array; its shape is the input's metadata
shape (batch dimension included) with the element count distributed as Triton does: fixed
dimensions must divide it, the innermost variable dimension takes what remains, the other
variable dimensions are 1. Protocol parameters of ``/infer`` (priority, timeout, sequence,
binary data) have no meaning here: they are plain parameters, as in Triton (the Python
backend still leaves them out of ``request.parameters()``, as it does for ``/infer``). An
input given twice (at the top and in ``parameters``, or by two keys of one object) is
refused, as Triton refuses it.

Response: ``id`` (when set), ``model_name``, ``model_version``, each response parameter and
each output as JSON data (a one-element output as its scalar), keys in sorted order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from despina import (
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    datatype_of,
    dtype_of,
    repeated_tensor,
)

from despina_frontend_http.decode import tensor_from_json
from despina_frontend_http.encode import json_data
from despina_frontend_http.options import DEFAULT_MAX_JSON_DEPTH
from despina_frontend_http.responses import json_body

#: Input name -> (datatype, metadata shape with -1 for variable dimensions).
InputShapes = Mapping[str, tuple[str, list[int]]]
NESTED = "parameters"
#: Triton's text when a ``/generate`` model does not answer exactly once.
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


def input_shapes(metadata: Mapping[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """The :data:`InputShapes` of a model's KServe metadata."""
    return {t["name"]: (t["datatype"], list(t["shape"])) for t in metadata["inputs"]}


def generate_request(
    body: bytes,
    model: str,
    version: str,
    inputs: InputShapes,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> InferenceRequest:
    """The request a generate body asks for; InvalidArgument with Triton's texts (and
    for JSON nested deeper than ``max_depth``)."""
    document = json_body(body, allow_empty=False, max_depth=max_depth)
    request = InferenceRequest(model, {}, model_version=version)
    request_id = document.get("id")
    if request_id is not None:
        if not isinstance(request_id, str):
            raise InvalidArgument(
                "Unable to parse 'id': attempt to access JSON non-string as string"
            )
        request.id = request_id
    for key, value in document.items():
        if key == NESTED and key not in inputs:
            if not isinstance(value, dict):
                raise InvalidArgument(
                    f"Expected JSON object for keyword: '{NESTED}': "
                    "attempt to access JSON non-object as object"
                )
            try:
                for inner, inner_value in value.items():
                    _take(request, inner, inner_value, inputs)
            except InvalidArgument as exc:
                raise InvalidArgument(f"Converting keyword: '{NESTED}': {exc}") from None
        elif key == NESTED:
            raise InvalidArgument(
                f"Keyword '{NESTED}' for nested schema also given as input tensor name"
            )
        else:
            _take(request, key, value, inputs)
    _refuse_repeated_keys(body, request, inputs)
    return request


def _refuse_repeated_keys(body: bytes, request: InferenceRequest, inputs: InputShapes) -> None:
    """Triton's error for an input named by two keys, which the parse above lost (the
    last key wins; Triton reads each). Parsed again keeping every key only where such a
    key may be: an input's quoted name in the body more than once, or an escape."""
    if b"\\" not in body and all(body.count(orjson.dumps(n)) == 1 for n in request.inputs):
        return
    members = json.loads(body, object_pairs_hook=tuple)  # objects as tuples of pairs
    seen: set[str] = set()
    for key, value in members:
        if key == NESTED and key not in inputs:
            for inner, _ in value if isinstance(value, tuple) else ():
                if inner in seen and inner in inputs:
                    raise InvalidArgument(
                        f"Converting keyword: '{NESTED}': "
                        f"{repeated_tensor('input', inner, request.id)}"
                    )
                seen.add(inner)
        elif key in seen and key in inputs:
            raise repeated_tensor("input", key, request.id)
        seen.add(key)


def _take(request: InferenceRequest, key: str, value: Any, inputs: InputShapes) -> None:
    """``key`` as an input tensor when the model has one by that name, else a parameter."""
    known = inputs.get(key)
    if known is None:
        if isinstance(value, bool | int | float | str):
            request.parameters[key] = value
            return
        raise InvalidArgument(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )
    if key in request.inputs:  # given at the top and in the nested object
        raise repeated_tensor("input", key, request.id)
    datatype, dims = known
    count = len(value) if isinstance(value, list) else 1
    shape = generate_shape(key, count, dims)
    request.inputs[key] = tensor_from_json(value, dtype_of(datatype), datatype, shape, count, key)


def generate_shape(name: str, count: int, dims: list[int]) -> list[int]:
    """``dims`` with its -1s resolved for ``count`` elements (Triton's rule, module doc)."""
    remaining = count
    for dim in dims:
        if dim > 0:
            if remaining % dim:
                raise _no_shape(name)
            remaining //= dim
    shape = list(dims)
    for i in reversed(range(len(shape))):
        if shape[i] == -1:
            shape[i] = remaining
            remaining = 1
    if int(np.prod(shape, dtype=np.int64)) != count:
        raise _no_shape(name)
    return shape


def _no_shape(name: str) -> InvalidArgument:
    return InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")


def generate_body(request: InferenceRequest, response: InferenceResponse) -> bytes:
    """The flat JSON object of one successful response (module doc)."""
    fields: dict[str, Any] = {}
    if response.id:
        fields["id"] = response.id
    fields["model_name"] = response.model_name
    fields["model_version"] = response.model_version
    for key, value in response.parameters.items():
        fields.setdefault(key, value)
    for name, array, _ in request.selected_outputs(response):
        data = json_data(array, datatype_of(array))
        fields.setdefault(name, data[0] if array.size == 1 else data)
    return orjson.dumps(dict(sorted(fields.items())), option=orjson.OPT_SERIALIZE_NUMPY)


def error_body(message: str) -> bytes:
    """Triton's ``{"error": message}``."""
    return orjson.dumps({"error": message})
