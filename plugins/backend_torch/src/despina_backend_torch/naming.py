"""Triton's PyTorch naming rules: which config tensor is which forward() argument / result.

Inputs, one convention for all of a config's inputs, as Triton's backend chooses it:
when every input is named after a forward() parameter, each binds to its parameter;
else when every name is ``<name>__<i>`` (``INPUT__0``), each binds to the i-th
parameter; else the config's order is the parameters' order (with Triton's warning).
Outputs: a model returning a dict is read by key; otherwise ``__<i>`` picks the i-th
element of the returned tuple or list (a lone tensor is element 0), and a config with a
single output of another name takes the single result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from despina import ConfigError, Internal, ascii_digits

_INDEXED = re.compile(r"^.+__(\d+)$")


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


def pick_outputs(result: Any, wanted: Sequence[str], single: bool) -> dict[str, Any]:
    """The wanted outputs out of forward()'s result; ``single`` when the config has one
    output. Internal when the result lacks one."""
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
        match = _INDEXED.match(name)
        index = int(match.group(1)) if match else 0
        if (match is None and not single) or index >= len(items):
            raise Internal(
                f"output '{name}' cannot be found in the model's {len(items)} result(s): name "
                "outputs <name>__<index>"
            )
        picked[name] = items[index]
    return picked


def _is_strings(value: Any) -> bool:
    return bool(value) and all(isinstance(v, str) for v in value)
