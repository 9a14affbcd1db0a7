"""Triton's classification extension: an output's top-k as ``"value:index[:label]"`` strings.

A requested output with the ``classification: k`` parameter is replaced, in the core and for
every protocol, by a BYTES tensor of its top ``k`` classes, labelled from the output's
``label_filename`` in the model folder (an ensemble's output without one: the labels of
the step's output written to it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from despina.errors import InvalidArgument, NotFound
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.memory.device_arrays import to_host
from despina.repository.paths import safe_join

#: Elements one batch row (or a tensor without batching) may have to be classified:
#: newer Triton's bound against pathological sort cost (server #8603), with its text.
MAX_CLASSIFIED_ELEMENTS = 1_000_000


def top_k(array: np.ndarray, k: int, batched: bool, labels: list[str]) -> np.ndarray:
    """Top ``k`` classes per batch row (or of the whole tensor), as a BYTES array.

    The result is ``[batch, k]`` for batched models and ``[k]`` otherwise; ``k`` is capped
    to the number of classes. Values are printed as their data type, as Triton does:
    integers (and booleans) as integers, floating-point values with ``%f``. A row of more
    than :data:`MAX_CLASSIFIED_ELEMENTS` elements is InvalidArgument.
    """
    if array.dtype.kind not in "biuf":
        raise InvalidArgument("classification is only supported for numeric outputs")
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim else array.reshape(1, -1)
    if rows.shape[1] > MAX_CLASSIFIED_ELEMENTS:
        raise InvalidArgument("classification output tensor too large")
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    integral = array.dtype.kind in "biu"
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            value = str(int(row[index])) if integral else f"{float(row[index]):f}"
            text = f"{value}:{int(index)}"
            if index < len(labels):
                text += f":{labels[index]}"
            out[r, c] = text.encode()
    return out if batched and array.ndim else out.reshape(k)


def read_labels(model_dir: Path | None, label_filename: str) -> list[str]:
    """The labels of an output (one a line), or [] when the output has none."""
    if not label_filename or model_dir is None:
        return []
    path = safe_join(model_dir, label_filename, "label_filename")
    if not path.is_file():
        raise NotFound(f"label file of output is missing: '{label_filename}'")
    return list(_cached(path, path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _cached(path: Path, mtime_ns: int) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8").splitlines())


def classification_count(output: str, parameters: dict[str, Any]) -> int | None:
    """The ``classification`` parameter of a requested output (None if absent);
    InvalidArgument unless it is a positive integer."""
    k = parameters.get("classification")
    if k is None:
        return None
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidArgument(f"invalid classification count for output '{output}'")
    return k


def classify_outputs(
    request: InferenceRequest,
    response: InferenceResponse,
    batched: bool,
    labels: Callable[[str], list[str]],
) -> None:
    """Replace, in place, each output the request asked to classify by its top-k, of a
    model that does or does not batch, labelled by ``labels(output name)``."""
    for output in request.outputs or ():
        k = classification_count(output.name, output.parameters)
        array = response.outputs.get(output.name)
        if k is None or array is None:
            continue
        response.outputs[output.name] = top_k(to_host(array), k, batched, labels(output.name))
