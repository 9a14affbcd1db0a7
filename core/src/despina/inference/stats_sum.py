"""The sum of several serving processes' statistics (Triton's ``model_stats`` entries, as
:meth:`despina.inference.stats.ModelStats.snapshot` writes them).

Counts and durations add; ``batch_stats`` add per batch size; ``last_inference`` is the
latest; ``memory_usage`` is one process's (every process loads the same models). A model
version only some processes report is summed over those that do.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

#: Keys that are not summed: one process's value is the answer.
_AS_ONE = frozenset({"name", "version", "batch_size", "memory_usage"})


def sum_model_stats(answers: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One ``model_stats`` list from every process's, in the first-seen order of the
    model versions."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for answer in answers:
        for entry in answer:
            key = (entry["name"], entry["version"])
            if key in merged:
                _add(merged[key], entry)
            else:
                merged[key] = copy.deepcopy(entry)
    return list(merged.values())


def _add(total: dict[str, Any], more: dict[str, Any]) -> None:
    """Add ``more`` into ``total`` (same shape, keys missing from ``total`` copied)."""
    for key, value in more.items():
        if key in _AS_ONE:
            continue
        if key not in total:
            total[key] = copy.deepcopy(value)
        elif key == "last_inference":
            total[key] = max(total[key], value)
        elif key == "batch_stats":
            total[key] = _add_batches(total[key], value)
        elif isinstance(value, dict):
            _add(total[key], value)
        elif isinstance(value, int | float):
            total[key] += value


def _add_batches(total: list[dict[str, Any]], more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``batch_stats`` lists added per batch size, sorted by it."""
    sizes = {entry["batch_size"]: copy.deepcopy(entry) for entry in total}
    for entry in more:
        size = entry["batch_size"]
        if size in sizes:
            _add(sizes[size], entry)
        else:
            sizes[size] = copy.deepcopy(entry)
    return [sizes[size] for size in sorted(sizes)]
