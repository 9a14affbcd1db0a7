"""Asking a model's own ``is_ready()`` from the server, as Triton's Python backend asks it:
at most one call in flight per instance (a check that comes meanwhile waits for that call's
answer), and a check that waits :data:`READINESS_TIMEOUT_S` answers not ready while the
call goes on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

#: How long a readiness check waits for ``is_ready()`` (Triton's five seconds).
READINESS_TIMEOUT_S = 5.0


class ReadinessCheck:
    """Calls ``ask`` (one ``is_ready()`` call: its answer, or the reason it failed raised)
    for the checks of one instance."""

    def __init__(self, ask: Callable[[], Awaitable[bool]]) -> None:
        self._ask = ask
        self._call: asyncio.Future[bool] | None = None

    async def __call__(self) -> bool:
        """The answer of the call in flight, else of a new one; raises its error, or
        TimeoutError with Triton's text after :data:`READINESS_TIMEOUT_S`."""
        if self._call is None or self._call.done():
            self._call = asyncio.ensure_future(self._ask())
            self._call.add_done_callback(_retrieved)
        try:
            return await asyncio.wait_for(asyncio.shield(self._call), READINESS_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError("Timed out waiting for user-defined is_ready() response") from None


def _retrieved(call: asyncio.Future[bool]) -> None:
    """A call's error is each waiting check's; once none waits it is dropped unlogged."""
    if not call.cancelled():
        call.exception()
