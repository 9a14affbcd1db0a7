"""Sequences under ``--serving-processes N``: every request of a sequence runs in one process.

A sequence's state lives in the instance slot of the serving process that started it,
while the kernel spreads connections, not requests, over the processes: a client's next
request of the sequence may reach any of them. So each correlation ID has an owner
(:func:`owner_of`: an integer ID modulo N, a string's CRC-32 modulo N), the same in every
process, and a sequence-batched model's scheduler is wrapped in each
(:class:`~despina.scheduling.routed_sequences.RoutedSequences`): a request this process
owns goes to its own sequence batcher, any other is forwarded to its owner
(:meth:`SequenceRouter.forward`) and its responses relayed back to the client.

The owner takes forwarded requests on a Unix socket of its own in the supervisor's
private folder (``<index>.relay.sock``, 0700). Each process keeps one connection to each
peer it forwards to, opened at the first forward and again after a failure, carrying
every request it forwards there at once (:mod:`despina.serving.relay_frames`: each frame
tagged with its request). The owner submits a forwarded request as a client's request
received at the same instant (``received_ns``: the monotonic clock is the host's, the
same in every process, so a stopping owner tells a sequence's next request from new
work as it does its own), and sends every response back. A client's cancellation, seen
within :data:`CANCEL_POLL_S`, becomes a cancel frame and the owner cancels the request;
a connection lost cancels every request the owner ran for it, and answers every request
forwarded over it with Unavailable. Requests without a correlation ID (an iterative
sequence's own, or the batcher's error) stay in the process that received them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import zlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from despina.errors import DespinaError, Unavailable
from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
from despina.serving.relay_frames import (
    cancel_frame,
    read_frame,
    request_frame,
    request_of,
    response_frame,
    response_of,
)
from despina.serving.serving_processes import ServingProcess

log = logging.getLogger("despina.server")

#: How often a forwarding process looks whether clients cancelled requests it forwarded.
CANCEL_POLL_S = 0.1
#: The stream limit of a relay connection (frames are read with ``readexactly``).
_LIMIT = 1 << 20
#: What the connection's reader hands a forwarded request: a response and whether it is
#: the final one, or why the connection failed.
_Answer = tuple[InferenceResponse | None, bool] | BaseException

#: Submit a request a peer forwarded (received when its ``received_ns`` says); its stream.
Submit = Callable[[InferenceRequest], ResponseStream]

_READ_ERRORS = (OSError, asyncio.IncompleteReadError, ValueError, KeyError, TypeError)


def owner_of(correlation_id: int | str, count: int) -> int | None:
    """The serving process (of ``count``) that runs the sequence ``correlation_id``;
    None for no ID (0 or ""): the receiving process answers it."""
    if isinstance(correlation_id, str):
        if not correlation_id:
            return None
        return zlib.crc32(correlation_id.encode()) % count
    return int(correlation_id) % count if correlation_id else None


class _Forwarded:
    """A request forwarded over a link, waiting for its answers."""

    __slots__ = ("answers", "request", "told")

    def __init__(self, request: InferenceRequest) -> None:
        self.request = request
        self.answers: asyncio.Queue[_Answer] = asyncio.Queue()
        #: Whether the owner was told that the client cancelled.
        self.told = False


class _Link:
    """This process's connection to one owner, carrying every request forwarded there."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.waiting: dict[int, _Forwarded] = {}
        self.tags = itertools.count(1)
        self.failure: BaseException | None = None
        self._tasks = (
            asyncio.create_task(self._read(reader)),
            asyncio.create_task(self._tell_cancellations()),
        )

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Hand each response to its request; at the end, every request waiting the
        connection's failure."""
        try:
            while True:
                head, payload = await read_frame(reader)
                forwarded = self.waiting.get(int(head["tag"]))
                if forwarded is not None:
                    forwarded.answers.put_nowait(response_of(head, payload))
        except _READ_ERRORS as exc:
            self.close(exc)

    async def _tell_cancellations(self) -> None:
        while self.failure is None:
            await asyncio.sleep(CANCEL_POLL_S)
            for tag, forwarded in list(self.waiting.items()):
                if forwarded.request.cancelled and not forwarded.told:
                    forwarded.told = True
                    self.writer.writelines(cancel_frame(tag))

    def close(self, failure: BaseException) -> None:
        """Fail every request waiting with ``failure``; close the connection."""
        if self.failure is None:
            self.failure = failure
            for forwarded in self.waiting.values():
                forwarded.answers.put_nowait(failure)
            self.writer.close()
            for task in self._tasks:
                if task is not asyncio.current_task():
                    task.cancel()


class SequenceRouter:
    """One serving process's side: forwards the requests of sequences others own, and
    runs those its peers forward to it with ``submit``."""

    def __init__(self, place: ServingProcess, submit: Submit) -> None:
        self.place = place
        self._submit = submit
        self._server: asyncio.AbstractServer | None = None
        self._links: dict[int, _Link] = {}
        self._linking: dict[int, asyncio.Lock] = {}
        #: The forwarded requests this process runs for its peers.
        self._running: set[asyncio.Task[None]] = set()

    def relay_path(self, index: int) -> str:
        """Where serving process ``index`` takes forwarded requests."""
        return str(self.place.folder / f"{index}.relay.sock")

    def owner(self, correlation_id: int | str) -> int | None:
        """The owner of ``correlation_id`` when it is another process; None when this
        process runs it."""
        owner = owner_of(correlation_id, self.place.count)
        return None if owner == self.place.index else owner

    async def start(self) -> None:
        """Run the requests the peers forward (once this process serves)."""
        self._server = await asyncio.start_unix_server(
            self._serve_link, path=self.relay_path(self.place.index), limit=_LIMIT
        )

    async def stop(self) -> None:
        """Stop taking forwarded requests (a peer's forward fails with Unavailable) and
        close the links to the peers."""
        for link in self._links.values():
            link.close(ConnectionAbortedError("this serving process stopped"))
        self._links.clear()
        if self._server is not None:
            self._server.close()
            for task in self._running:
                task.cancel()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.relay_path(self.place.index))

    async def forward(
        self, owner: int, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | None, bool], None]:
        """Run ``request`` in serving process ``owner``; yield each response it answers
        and whether it is the final one (the last yielded is). Unavailable when the
        owner cannot be reached or the connection to it fails."""
        link = await self._link(owner)
        tag = next(link.tags)
        forwarded = link.waiting[tag] = _Forwarded(request)
        final = False
        try:
            link.writer.writelines(request_frame(tag, request))
            await link.writer.drain()
            while not final:
                answer = await forwarded.answers.get()
                if isinstance(answer, BaseException):
                    raise self._unreachable(owner, answer)
                response, final = answer
                yield response, final
        except OSError as exc:
            link.close(exc)
            raise self._unreachable(owner, exc) from None
        finally:
            del link.waiting[tag]
            if not final and link.failure is None and not forwarded.told:
                link.writer.writelines(cancel_frame(tag))  # the forward itself was stopped

    async def _link(self, owner: int) -> _Link:
        """The open connection to ``owner``, opened now when there is none."""
        link = self._links.get(owner)
        if link is not None and link.failure is None:
            return link
        async with self._linking.setdefault(owner, asyncio.Lock()):
            link = self._links.get(owner)
            if link is None or link.failure is not None:
                try:
                    opened = await asyncio.open_unix_connection(
                        self.relay_path(owner), limit=_LIMIT
                    )
                except OSError as exc:
                    raise self._unreachable(owner, exc) from None
                link = self._links[owner] = _Link(*opened)
            return link

    def _unreachable(self, owner: int, exc: BaseException) -> Unavailable:
        reason = "the connection closed" if isinstance(exc, asyncio.IncompleteReadError) else exc
        return Unavailable(
            f"serving process {owner} of --serving-processes {self.place.count}, which runs "
            f"this sequence, did not answer ({reason})"
        )

    async def _serve_link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Run every request a peer forwards over one connection; when it closes, cancel
        those still running."""
        running: dict[int, InferenceRequest] = {}
        try:
            while True:
                head, payload = await read_frame(reader)
                tag = int(head["tag"])
                if "cancel" in head:
                    if tag in running:
                        running[tag].cancel()
                    continue
                request = request_of(head, payload)
                running[tag] = request
                task = asyncio.create_task(self._run(tag, request, writer, running))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
        except _READ_ERRORS as exc:
            log.debug("a peer's forwarding connection ended: %s", exc)
        finally:
            for request in running.values():
                request.cancel()
            writer.close()

    async def _run(
        self,
        tag: int,
        request: InferenceRequest,
        writer: asyncio.StreamWriter,
        running: dict[int, Any],
    ) -> None:
        """Run one forwarded request; answer each response in a frame of its tag."""
        try:
            try:
                stream = self._submit(request)
            except DespinaError as exc:
                writer.writelines(
                    response_frame(tag, InferenceResponse(id=request.id, error=exc), True)
                )
                return
            final = False
            async for response in stream:
                final = response.final
                writer.writelines(response_frame(tag, response, final))
                await writer.drain()
            if not final:
                writer.writelines(response_frame(tag, None, True))
            await writer.drain()
        except OSError as exc:  # the forwarding process is gone
            log.debug("a forwarded request's answer was not sent: %s", exc)
            request.cancel()
        finally:
            running.pop(tag, None)
            request.release_regions()
