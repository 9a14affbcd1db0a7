"""The event loop Despina serves on: asyncio's own, or uvloop's (libuv, the loop written
in C) on request with ``DESPINA_EVENT_LOOP=uvloop`` (``pip install 'despina[uvloop]'``).

uvloop runs the loop's own work in C: 12 % fewer user-space instructions per HTTP
inference and 17 % per gRPC inference in the server process at concurrency 1. But at
concurrency 8 in process mode the CPU time per request of server and model process came
out 5-10 % higher than on asyncio's loop in paired runs (``bench/results/perf_wave.md``),
so it is not the default. Busy polling (``--busy-poll-us``) needs asyncio's selector loop
and keeps it (:mod:`despina.serving.busy_poll`). ``despina serve`` and the test harness
(:mod:`despina.testing`) take their loop from here, so the tests run on the loop
production runs on.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

#: The environment variable choosing the loop: ``asyncio`` (the default) or ``uvloop``.
ENV = "DESPINA_EVENT_LOOP"


def loop_class() -> Any:
    """The loop class to create: None for asyncio's default loop, uvloop's ``Loop`` when
    ``$DESPINA_EVENT_LOOP`` is ``uvloop``.

    Raises ValueError for an unknown ``$DESPINA_EVENT_LOOP``, ImportError when it asks for
    uvloop and uvloop is not installed."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice not in ("", "uvloop", "asyncio"):
        raise ValueError(f"{ENV} must be 'uvloop' or 'asyncio', not {choice!r}")
    if choice != "uvloop":
        return None
    import uvloop

    return uvloop.Loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of :func:`loop_class`."""
    cls = loop_class()
    loop: asyncio.AbstractEventLoop = asyncio.new_event_loop() if cls is None else cls()
    return loop
