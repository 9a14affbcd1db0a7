"""Request limits: the texts refusing a head over ``--http-max-header-size`` and JSON
nested deeper than ``--http-max-json-depth``, and the JSON nesting check.

orjson refuses documents nested deeper than 1024 levels itself; ``--http-max-json-depth``
refuses, before parsing, any JSON body nested deeper than the flag (default 64), so
neither orjson nor the code walking a parsed document recurses past it. A document with
no more ``[`` and ``{`` bytes than the limit cannot nest deeper (two ``bytes.count``:
the fast path); only one with more is scanned properly (strings and escapes skipped,
then the running depth of the brackets left, in numpy blocks).
"""

from __future__ import annotations

import re

import numpy as np
from despina import InvalidArgument

_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_STRINGS = re.compile(rb'"[^"]*"')
#: Every byte but brackets and quotes (deleted before the strings are cut out).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STEPS = np.zeros(256, dtype=np.int8)
_STEPS[[ord("["), ord("{")]] = 1
_STEPS[[ord("]"), ord("}")]] = -1
#: Brackets whose running depth is summed at once (bounds the scan's int32 buffer).
_BLOCK = 1 << 20


def head_too_large(limit: int) -> str:
    """The 431 answer's text for a request line plus headers over ``limit`` bytes."""
    return (
        f"request line and headers exceed {limit} bytes; "
        "use --http-max-header-size to increase the limit"
    )


def too_deep(limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"failed to parse the request JSON buffer: nested deeper than {limit} levels; "
        "use --http-max-json-depth to increase the limit"
    )


def check_json_depth(text: bytes | bytearray | memoryview, limit: int) -> None:
    """InvalidArgument when the JSON ``text`` nests arrays and objects deeper than ``limit``
    (malformed JSON is left to the parser)."""
    data = text if isinstance(text, bytes | bytearray) else bytes(text)
    if data.count(b"[") + data.count(b"{") <= limit:
        return
    if json_depth_over(data, limit):
        raise too_deep(limit)


def json_depth_over(data: bytes | bytearray, limit: int) -> bool:
    """Whether ``data``'s brackets outside strings nest deeper than ``limit``."""
    brackets = _STRINGS.sub(b"", _ESCAPES.sub(b"", data).translate(None, _NOT_STRUCTURE))
    steps = _STEPS[np.frombuffer(brackets, dtype=np.uint8)]
    depth = 0
    for start in range(0, len(steps), _BLOCK):
        running = np.cumsum(steps[start : start + _BLOCK], dtype=np.int32)
        running += depth
        if int(running.max()) > limit:
            return True
        depth = int(running[-1])
    return False
