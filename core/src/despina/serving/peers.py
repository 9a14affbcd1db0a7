"""The local channel between the serving processes of ``--serving-processes N``.

Each serving process answers its peers on a Unix socket in the supervisor's private folder
(0700): one JSON line asked (``{"op": ..., ...arguments}``), one answered (``{"result":
...}`` or ``{"error": {"class": ..., "message": ...}}``), then the connection closes. What a
peer may ask is the table of operations the process was given (its dataplane's
``peer_operations``; an operation may be a coroutine function). Uses:

- **sums**: the process that receives a client's statistics call asks every peer at once
  and answers the sum (:meth:`Peers.summed`, :mod:`despina.inference.stats_sum`);
- **fan-outs**: a change a client made over one connection (a shared-memory registration,
  log and trace settings) is made in every peer as well, or in none (:meth:`Peers.fan_out`);
- **joint loads**: explicit model control, in two phases, and poll mode's changes
  (:mod:`despina.serving.joint_loads`).

A peer that does not answer within :data:`PEER_TIMEOUT_S` (not started yet, stopping,
gone; loads and unloads wait as long as they take) makes the call fail with Unavailable
naming it: a sum that silently missed a process
would be wrong, and so would a change one process silently lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from despina.errors import DespinaError, Unavailable, error_named
from despina.inference.stats_sum import sum_model_stats
from despina.serving.serving_processes import ServingProcess

log = logging.getLogger("despina.server")

#: Seconds a peer has to answer.
PEER_TIMEOUT_S = 5.0
#: The largest answer read from a peer (a line of JSON).
ANSWER_LIMIT = 64 * 1024 * 1024

#: One operation a peer may ask for: its arguments -> its result (JSON, or an awaitable of
#: it), or a DespinaError.
Operation = Callable[[dict[str, Any]], Any]


class Peers:
    """One serving process's side of the channel: answers its peers' asks with its own
    ``operations`` and asks theirs."""

    def __init__(self, place: ServingProcess, operations: Mapping[str, Operation]) -> None:
        self.place = place
        self._operations = {"ping": _pong, **operations}
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
        asked = {"name": name, "version": version}
        own = self._operations["statistics"](asked)
        theirs = await self.ask_all("statistics", asked)
        return sum_model_stats([own, *theirs])

    async def all_answer(self) -> bool:
        """Whether every peer answers now, within :data:`PEER_TIMEOUT_S`."""
        try:
            await self.ask_all("ping", {})
        except DespinaError:
            return False
        return True

    async def ask_all(
        self, op: str, arguments: dict[str, Any], timeout: float | None = PEER_TIMEOUT_S
    ) -> list[Any]:
        """Every peer's result of ``op``; the first failure raised (a peer's error as it
        raised it, Unavailable for one that does not answer within ``timeout`` seconds,
        None: as long as it takes)."""
        return list(
            await asyncio.gather(
                *(self._ask(peer, op, arguments, timeout) for peer in self.place.peers)
            )
        )

    async def fan_out(
        self,
        op: str,
        arguments: dict[str, Any],
        undo: tuple[str, dict[str, Any]],
        timeout: float | None = PEER_TIMEOUT_S,
    ) -> None:
        """Have every peer do ``op`` (this process did it already). When one fails, the
        peers that did it are asked to ``undo`` it (``(op, arguments)``) and the failure
        is raised: the caller undoes its own share, so that no process keeps the change."""
        peers = self.place.peers
        results = await asyncio.gather(
            *(self._ask(peer, op, arguments, timeout) for peer in peers), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if not failures:
            return
        done = [p for p, r in zip(peers, results, strict=True) if not isinstance(r, BaseException)]
        undone = await asyncio.gather(
            *(self._ask(peer, *undo, timeout) for peer in done), return_exceptions=True
        )
        for peer, outcome in zip(done, undone, strict=True):
            if isinstance(outcome, BaseException):
                log.error("%s: serving process %d kept it (%s)", op, peer, outcome)
        raise failures[0]

    async def _ask(
        self, peer: int, op: str, arguments: dict[str, Any], timeout: float | None
    ) -> Any:
        try:
            answer = await asyncio.wait_for(self._exchange(peer, {"op": op, **arguments}), timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
            raise Unavailable(
                f"{op}: serving process {peer} of --serving-processes {self.place.count} "
                f"did not answer ({reason}); it cannot be left out"
            ) from None
        if "error" in answer:
            error = answer["error"]
            raise error_named(str(error.get("class", "")), str(error.get("message", "")))
        return answer["result"]

    async def _exchange(self, peer: int, asked: dict[str, Any]) -> dict[str, Any]:
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
            operation = self._operations.get(str(asked.pop("op", "")))
            try:
                if operation is None:
                    raise Unavailable("unknown operation between serving processes")
                result = operation(asked)
                if inspect.isawaitable(result):
                    result = await result
                answer: dict[str, Any] = {"result": result}
            except DespinaError as exc:
                answer = {"error": {"class": type(exc).__name__, "message": str(exc)}}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, AttributeError) as exc:  # gone, or sent no JSON object
            log.debug("peer connection failed: %s", exc)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _pong(arguments: dict[str, Any]) -> None:
    """The answer to ``ping`` (:meth:`Peers.all_answer`)."""
