"""Triton's PyTorch naming rules: which config tensor is which forward() argument / result.

Inputs, one convention for all of a config's inputs, as Triton's backend chooses it:
when every input is named after a forward() parameter, each binds to its parameter;
else when every name is ``<name>__<i>`` (``INPUT__0``), each binds to the i-th
parameter; else the config's order is the parameters' order (with Triton's warning).
Outputs: a model returning a dict is read by key; otherwise, when every output is named
``<name>__<i>``, the i-th element of the returned tuple or list (a lone tensor is element
0), else the config's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from despina import ConfigError, Internal, ascii_digits


def input_positions(
    names: Sequence[str],
    arg_names: Sequence[str],
    required: int,
    model: str,
    label: str,
    warn: Callable[[str], object],
) -> list[int]:
    """Each config input's forward() position; ConfigError when one has no parameter,
    two bind to one, or a required parameter is left without an input. ``warn`` gets
    Triton's text when the config's order has to be taken."""
    where = f"model '{model}', file '{label}'"
    indexed = [_named_index(name) for name in names]
    if all(name in arg_names for name in names):
        positions = [arg_names.index(name) for name in names]
    elif all(index is not None for index in indexed):
        positions = [index for index in indexed if index is not None]
    else:
        odd = next(n for n, i in zip(names, indexed, strict=True) if i is None)
        warn(
            f"input '{odd}' or previous input(s) are neither an input argument to the model "
            f"'{model}' nor do they follow the <name>__<index> naming convention. Falling "
            "back to enforcing strict ordering from model configuration."
        )
        positions = list(range(len(names)))
    seen: set[int] = set()
    for name, position in zip(names, positions, strict=True):
        if position >= len(arg_names):
            raise ConfigError(
                f"{where}: input '{name}' matches no forward() argument "
                f"({', '.join(arg_names)}): the model takes {len(arg_names)}"
            )
        if position in seen:
            raise ConfigError(
                f"{where}: input '{name}' binds to an argument another input binds to"
            )
        seen.add(position)
    missing = [arg_names[i] for i in range(required) if i not in seen]
    if missing:
        raise ConfigError(
            f"{where}: forward() argument(s) {', '.join(missing)} have no config input"
        )
    return positions


def _named_index(name: str) -> int | None:
    """``i`` of a ``<name>__<i>`` input name (Triton splits at the first ``__``)."""
    _, sep, index = name.partition("__")
    return int(index) if sep and ascii_digits(index) else None


def output_positions(names: Sequence[str]) -> dict[str, int]:
    """Each config output's place in a returned tuple or list: ``<name>__<i>`` when every
    output is named so, else the config's order (Triton's two conventions for outputs)."""
    indexed = [_named_index(name) for name in names]
    if all(index is not None for index in indexed):
        return {
            name: index for name, index in zip(names, indexed, strict=True) if index is not None
        }
    return {name: place for place, name in enumerate(names)}


def pick_outputs(result: Any, wanted: Sequence[str], positions: dict[str, int]) -> dict[str, Any]:
    """The wanted outputs out of forward()'s result (a dict by key, else by
    :func:`output_positions`). Internal when the result lacks one."""
    if isinstance(result, dict):
        missing = [name for name in wanted if name not in result]
        if missing:
            raise Internal(
                f"the model returned no '{missing[0]}' (keys: {', '.join(map(str, result))})"
            )
        return {name: result[name] for name in wanted}
    items = (
        list(result) if isinstance(result, tuple | list) and not _is_strings(result) else [result]
    )
    picked: dict[str, Any] = {}
    for name in wanted:
        if positions[name] >= len(items):
            raise Internal(
                f"output '{name}' cannot be found in the model's {len(items)} result(s): it "
                f"is result {positions[name]}"
            )
        picked[name] = items[positions[name]]
    return picked


def _is_strings(value: Any) -> bool:
    return bool(value) and all(isinstance(v, str) for v in value)
