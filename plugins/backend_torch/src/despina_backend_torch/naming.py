"""Triton's PyTorch naming rules: which config tensor is which forward() argument / result.

Inputs: a config input named after a forward() parameter binds to it; otherwise a name
ending in ``__<i>`` (``INPUT__0``) binds to the i-th parameter. Outputs: a model
returning a dict is read by key; otherwise ``__<i>`` picks the i-th element of the
returned tuple or list (a lone tensor is element 0), and a config with a single output
of another name takes the single result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from despina import ConfigError, Internal

_INDEXED = re.compile(r"^.+__(\d+)$")


def input_positions(
    names: Sequence[str], arg_names: Sequence[str], required: int, model: str, label: str
) -> list[int]:
    """Each config input's forward() position; ConfigError when one matches no parameter,
    two bind to one, or a required parameter is left without an input."""
    where = f"model '{model}', file '{label}'"
    positions: list[int] = []
    for name in names:
        if name in arg_names:
            position = arg_names.index(name)
        elif (match := _INDEXED.match(name)) and int(match.group(1)) < len(arg_names):
            position = int(match.group(1))
        else:
            raise ConfigError(
                f"{where}: input '{name}' matches no forward() argument ({', '.join(arg_names)}) "
                f"and is not named <name>__<index> with index < {len(arg_names)}"
            )
        if position in positions:
            raise ConfigError(
                f"{where}: input '{name}' binds to an argument another input binds to"
            )
        positions.append(position)
    missing = [arg_names[i] for i in range(required) if i not in positions]
    if missing:
        raise ConfigError(
            f"{where}: forward() argument(s) {', '.join(missing)} have no config input"
        )
    return positions


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
