"""The event loop Despina serves on: uvloop's (libuv, the loop written in C) where it is
installed, else asyncio's own.

uvloop runs the loop's own work (readiness polling, callbacks, timers, transports) in C:
12 % fewer instructions per HTTP inference and 17 % per gRPC inference in the server
process (``bench/results/perf_wave.md``). Busy polling (``--busy-poll-us``) needs
asyncio's selector loop and keeps it (:mod:`despina.serving.busy_poll`).
``DESPINA_EVENT_LOOP=asyncio`` chooses asyncio's loop; ``uvloop`` requires uvloop.
``despina serve`` and the test harness (:mod:`despina.testing`) take their loop from here,
so the tests run on the loop production runs on.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from typing import Any

#: The environment variable choosing the loop: ``uvloop`` or ``asyncio`` (default: uvloop
#: when installed).
ENV = "DESPINA_EVENT_LOOP"


def loop_class() -> Any:
    """The loop class to create (uvloop's ``Loop``), or None for asyncio's default loop.

    Raises ValueError for an unknown ``$DESPINA_EVENT_LOOP``, ImportError when it asks for
    uvloop and uvloop is not installed."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice not in ("", "uvloop", "asyncio"):
        raise ValueError(f"{ENV} must be 'uvloop' or 'asyncio', not {choice!r}")
    if choice == "asyncio" or (not choice and importlib.util.find_spec("uvloop") is None):
        return None
    import uvloop

    return uvloop.Loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new loop of :func:`loop_class`."""
    cls = loop_class()
    loop: asyncio.AbstractEventLoop = asyncio.new_event_loop() if cls is None else cls()
    return loop
