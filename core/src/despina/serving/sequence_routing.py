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
import functools
import itertools
import logging
import os
import zlib
from collections.abc import Callable

from despina.errors import DespinaError, Internal, Unavailable
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
#: Seconds a forward waits for an owner that is still starting (each serving process
#: answers its own readiness, so a client may reach one before the others serve).
OWNER_START_S = 60.0
#: The stream limit of a relay connection (frames are read with ``readexactly``).
_LIMIT = 1 << 20
#: Takes a forwarded request's response (None: the final flag alone) and whether it is
#: the final one.
Answer = Callable[[InferenceResponse | None, bool], None]
#: Takes why a forwarded request got no (more) answers.
Fail = Callable[[DespinaError], None]

#: Submit a request a peer forwarded (received when its ``received_ns`` says); its stream.
Submit = Callable[[InferenceRequest], ResponseStream]

#: What a connection that broke, or a frame that does not parse, raises on reading.
_READ_ERRORS = (
    OSError,
    asyncio.IncompleteReadError,
    ValueError,
    KeyError,
    TypeError,
    DespinaError,  # BYTES elements past their tensor
)


def owner_of(correlation_id: int | str, count: int) -> int | None:
    """The serving process (of ``count``) that runs the sequence ``correlation_id``;
    None for no ID (0 or ""): the receiving process answers it."""
    if isinstance(correlation_id, str):
        if not correlation_id:
            return None
        return zlib.crc32(correlation_id.encode()) % count
    return int(correlation_id) % count if correlation_id else None


async def _connect(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the owner answering at ``path``; while it is still starting (its
    socket not there yet, or not listening) tried again for up to :data:`OWNER_START_S`."""
    deadline = asyncio.get_running_loop().time() + OWNER_START_S
    while True:
        try:
            return await asyncio.open_unix_connection(path, limit=_LIMIT)
        except (FileNotFoundError, ConnectionRefusedError):
            if asyncio.get_running_loop().time() >= deadline:
                raise
            await asyncio.sleep(0.05)


class _Frames:
    """A connection's outgoing frames: those written within one turn of the event loop
    leave in one system call (under load, several requests' frames share it)."""

    __slots__ = ("_parts", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._parts: list[bytes | memoryview] = []

    def write(self, frame: list[bytes | memoryview]) -> None:
        if not self._parts:
            asyncio.get_running_loop().call_soon(self._flush)
        self._parts += frame

    def _flush(self) -> None:
        parts, self._parts = self._parts, []
        if not self.writer.is_closing():
            self.writer.writelines(parts)


class _Forwarded:
    """A request forwarded over a link, waiting for its answers."""

    __slots__ = ("answer", "fail", "request", "told")

    def __init__(self, request: InferenceRequest, answer: Answer, fail: Fail) -> None:
        self.request = request
        self.answer = answer
        self.fail = fail
        #: Whether the owner was told that the client cancelled.
        self.told = False


class _Link:
    """This process's connection to one owner, carrying every request forwarded there:
    frames sent before it is open wait for it; each response read goes to its request's
    ``answer``; a failure (it does not open, or breaks) goes to every waiting request's
    ``fail``, as ``unreachable`` words it."""

    def __init__(self, path: str, unreachable: Callable[[BaseException], DespinaError]) -> None:
        self.waiting: dict[int, _Forwarded] = {}
        self.tags = itertools.count(1)
        self.failure: BaseException | None = None
        self._unreachable = unreachable
        self._frames: _Frames | None = None
        self._unsent: list[bytes | memoryview] = []
        self._tasks = [asyncio.create_task(self._run(path))]

    def send(self, frame: list[bytes | memoryview]) -> None:
        """Write ``frame`` (once the connection is open); nothing once it failed."""
        if self.failure is not None:
            return
        if self._frames is None:
            self._unsent += frame
        else:
            self._frames.write(frame)

    async def _run(self, path: str) -> None:
        """Open the connection, then hand each response to its request."""
        try:
            reader, writer = await _connect(path)
            self._frames = _Frames(writer)
            self._frames.write(self._unsent)
            self._unsent.clear()
            self._tasks.append(asyncio.create_task(self._tell_cancellations()))
            while True:
                head, payload = await read_frame(reader)
                tag = int(head["tag"])
                forwarded = self.waiting.get(tag)
                if forwarded is not None:
                    response, final = response_of(head, payload)
                    if final:
                        del self.waiting[tag]
                    forwarded.answer(response, final)
        except _READ_ERRORS as exc:
            self.close(exc)
        except Exception as exc:  # a bug: never leave the requests waiting
            log.exception("the connection to a sequence's owner failed")
            self.close(exc)

    async def _tell_cancellations(self) -> None:
        while self.failure is None:
            await asyncio.sleep(CANCEL_POLL_S)
            for tag, forwarded in list(self.waiting.items()):
                if forwarded.request.cancelled and not forwarded.told:
                    forwarded.told = True
                    self.send(cancel_frame(tag))

    def close(self, failure: BaseException) -> None:
        """Fail every request waiting; close the connection."""
        if self.failure is not None:
            return
        self.failure = failure
        waiting, self.waiting = self.waiting, {}
        error = self._unreachable(failure)
        for forwarded in waiting.values():
            forwarded.fail(error)
        if self._frames is not None:
            self._frames.writer.close()
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
        #: The forwarded requests this process runs for its peers.
        self._running: set[asyncio.Task[None]] = set()
        #: The connections peers forward over.
        self._served: set[asyncio.StreamWriter] = set()

    def _relay_path(self, index: int) -> str:
        return str(self.place.relay_path(index))

    def owner(self, correlation_id: int | str) -> int | None:
        """The owner of ``correlation_id`` when it is another process; None when this
        process runs it."""
        owner = owner_of(correlation_id, self.place.count)
        return None if owner == self.place.index else owner

    async def start(self) -> None:
        """Run the requests the peers forward (once this process serves)."""
        self._server = await asyncio.start_unix_server(
            self._serve_link, path=self._relay_path(self.place.index), limit=_LIMIT
        )

    async def stop(self) -> None:
        """Stop taking forwarded requests and close the connections peers forward over
        (their forwards fail with Unavailable), and the links to the peers (what still
        waits on them fails so)."""
        for link in self._links.values():
            link.close(ConnectionAbortedError("this serving process stopped"))
        self._links.clear()
        if self._server is not None:
            self._server.close()
            for task in self._running:
                task.cancel()
            for writer in self._served:
                writer.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._relay_path(self.place.index))

    def forward(self, owner: int, request: InferenceRequest, answer: Answer, fail: Fail) -> None:
        """Run ``request`` in serving process ``owner``: ``answer`` gets each response and
        whether it is the final one (the last call's is), or ``fail`` once Unavailable
        when the owner cannot be reached or the connection to it fails. A client's
        cancellation of ``request`` reaches the owner. Internal for a request a frame
        cannot hold (a parameter that is no JSON value)."""
        link = self._links.get(owner)
        if link is None or link.failure is not None:
            link = self._links[owner] = _Link(
                self._relay_path(owner), functools.partial(self._unreachable, owner)
            )
        tag = next(link.tags)
        try:
            frame = request_frame(tag, request)
        except (TypeError, ValueError) as exc:  # a parameter JSON cannot hold
            raise Internal(
                f"the request cannot be forwarded to its sequence's owner: {exc}"
            ) from None
        link.waiting[tag] = _Forwarded(request, answer, fail)
        link.send(frame)

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
        frames = _Frames(writer)
        self._served.add(writer)
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
                task = asyncio.create_task(self._run(tag, request, frames, running))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
        except _READ_ERRORS as exc:
            log.debug("a peer's forwarding connection ended: %s", exc)
        finally:
            for request in running.values():
                request.cancel()
            self._served.discard(writer)
            writer.close()

    async def _run(
        self,
        tag: int,
        request: InferenceRequest,
        frames: _Frames,
        running: dict[int, InferenceRequest],
    ) -> None:
        """Run one forwarded request; answer each response in a frame of its tag."""
        try:
            try:
                stream = self._submit(request)
            except DespinaError as exc:
                frames.write(response_frame(tag, InferenceResponse(id=request.id, error=exc), True))
                return
            final = False
            async for response in stream:
                final = response.final
                frames.write(response_frame(tag, response, final))
                await frames.writer.drain()  # a peer that reads slowly holds the answers back
            if not final:
                frames.write(response_frame(tag, None, True))
        except OSError as exc:  # the forwarding process is gone
            log.debug("a forwarded request's answer was not sent: %s", exc)
            request.cancel()
        except asyncio.CancelledError:  # this process stops taking forwarded requests
            request.cancel()
            raise
        except Exception as exc:  # answered: the forwarding process must not wait
            log.exception("model '%s': a forwarded request failed", request.model_name)
            error = Internal(f"{type(exc).__name__}: {exc}")
            frames.write(response_frame(tag, InferenceResponse(id=request.id, error=error), True))
        finally:
            running.pop(tag, None)
            request.release_regions()
