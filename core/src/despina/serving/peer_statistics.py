"""Statistics summed over the serving processes of ``--serving-processes N``.

Each serving process answers its own statistics on a Unix socket in the supervisor's
private folder (0700), one JSON line asked (``{"name": ..., "version": ...}``), one
answered (``{"model_stats": [...]}`` or ``{"error": {"class": ..., "message": ...}}``),
then the connection closes. The process that receives a client's statistics call asks
every peer at once and answers the sum (:mod:`despina.inference.stats_sum`). A peer that
does not answer within :data:`PEER_TIMEOUT_S` (not started yet, stopping, gone) makes the
call fail with Unavailable: a sum that silently missed a process would be wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

from despina import errors
from despina.errors import DespinaError, Unavailable
from despina.inference.stats_sum import sum_model_stats
from despina.serving.serving_processes import ServingProcess

log = logging.getLogger("despina.server")

#: Seconds a peer has to answer.
PEER_TIMEOUT_S = 5.0
#: The largest answer read from a peer (a line of JSON).
ANSWER_LIMIT = 64 * 1024 * 1024

#: A process's own statistics: ``statistics(name, version)``.
LocalStatistics = Callable[[str, str], list[dict[str, Any]]]


class PeerStatistics:
    """One serving process's side of the channel: serves its own statistics to its peers
    and sums theirs into its answers."""

    def __init__(self, place: ServingProcess, local: LocalStatistics) -> None:
        self.place = place
        self._local = local
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Answer the peers (once this process serves: its models loaded)."""
        path = self.place.socket_path(self.place.index)
        self._server = await asyncio.start_unix_server(
            self._answer, path=str(path), limit=ANSWER_LIMIT
        )

    async def stop(self) -> None:
        """Stop answering (a peer's call fails with Unavailable from then on)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self.place.socket_path(self.place.index).unlink()

    async def summed(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """This process's statistics plus every peer's: its own errors (an unknown model)
        as they are, a peer's error as the peer raised it, Unavailable for a peer that
        does not answer."""
        own = self._local(name, version)
        asked = {"name": name, "version": version}
        theirs = await asyncio.gather(*(self._ask(peer, asked) for peer in self.place.peers))
        return sum_model_stats([own, *theirs])

    async def _ask(self, peer: int, asked: dict[str, str]) -> list[dict[str, Any]]:
        try:
            answer = await asyncio.wait_for(self._exchange(peer, asked), PEER_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            raise Unavailable(
                f"statistics: serving process {peer} of --serving-processes "
                f"{self.place.count} did not answer ({reason}); a sum without it would be wrong"
            ) from None
        if "error" in answer:
            raise _error_of(answer["error"])
        stats: list[dict[str, Any]] = answer["model_stats"]
        return stats

    async def _exchange(self, peer: int, asked: dict[str, str]) -> dict[str, Any]:
        path = str(self.place.socket_path(peer))
        reader, writer = await asyncio.open_unix_connection(path, limit=ANSWER_LIMIT)
        try:
            writer.write(json.dumps(asked).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if not line:
            raise ValueError("the connection closed")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            asked = json.loads(await reader.readline())
            try:
                stats = self._local(str(asked.get("name", "")), str(asked.get("version", "")))
                answer: dict[str, Any] = {"model_stats": stats}
            except DespinaError as exc:
                answer = {"error": {"class": type(exc).__name__, "message": str(exc)}}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError) as exc:  # a peer that went away, or sent no JSON
            log.debug("statistics peer connection failed: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _error_of(error: dict[str, str]) -> DespinaError:
    """A peer's error as the class it raised (one of :mod:`despina.errors`)."""
    cls = getattr(errors, error.get("class", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, DespinaError)):
        cls = Unavailable
    return cls(error.get("message", ""))
