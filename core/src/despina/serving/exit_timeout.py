"""The ``--exit-timeout-secs`` a stopping server counts down across its steps, as Triton
does: every step gets what the ones before it left, and its log lines say the whole
seconds left (``Timeout 30: ...``)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from despina.scheduling.base import DRAIN_POLL_S


class ExitTimeout:
    """The seconds left of one stop's exit timeout, from when it is made."""

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds

    async def wait(self, done: Callable[[], bool], report: Callable[[int], None]) -> bool:
        """Wait until ``done()`` or the time runs out; whether it is done. Calls
        ``report(whole seconds left)`` at once and then each second while waiting."""
        report_at = time.monotonic()
        while not done():
            now = time.monotonic()
            if now >= self._deadline:
                return False
            if now >= report_at:
                report(math.ceil(self._deadline - now))
                report_at = now + 1.0
            await asyncio.sleep(DRAIN_POLL_S)
        return True
