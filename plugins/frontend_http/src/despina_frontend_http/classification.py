"""Triton's classification extension: an output's top-k as ``"value:index[:label]"`` strings."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from despina.errors import InvalidArgument, NotFound


def top_k(array: np.ndarray, k: int, batched: bool, labels: list[str]) -> np.ndarray:
    """Top ``k`` classes per batch row (or of the whole tensor), as a BYTES array.

    The result is ``[batch, k]`` for batched models and ``[k]`` otherwise; ``k`` is capped
    to the number of classes. Values are printed with ``%f`` as Triton does.
    """
    if array.dtype.kind not in "biuf":
        raise InvalidArgument("classification is only supported for numeric outputs")
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim else array.reshape(1, -1)
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for c, index in enumerate(order):
            text = f"{float(row[index]):f}:{int(index)}"
            if index < len(labels):
                text += f":{labels[index]}"
            out[r, c] = text.encode()
    return out if batched and array.ndim else out.reshape(k)


def read_labels(model_dir: Path | None, label_filename: str) -> list[str]:
    """The labels of an output (one a line), or [] when the output has none."""
    if not label_filename or model_dir is None:
        return []
    path = (model_dir / label_filename).resolve()
    if not path.is_relative_to(model_dir.resolve()) or not path.is_file():
        raise NotFound(f"label file of output is missing: '{label_filename}'")
    return list(_cached(path, path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _cached(path: Path, mtime_ns: int) -> tuple[str, ...]:
    return tuple(path.read_text(encoding="utf-8").splitlines())
