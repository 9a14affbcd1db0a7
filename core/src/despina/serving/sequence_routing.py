"""Sequences under ``--serving-processes N``: every request of a sequence runs in one process.

A sequence's state lives in the instance slot of the serving process that started it,
while the kernel spreads connections, not requests, over the processes: a client's next
request of the sequence may reach any of them. So each correlation ID has an owner
(:func:`owner_of`: an integer ID modulo N, a string's CRC-32 modulo N), the same in every
process, and a sequence-batched model's scheduler is wrapped in each
(:class:`~despina.scheduling.routed_sequences.RoutedSequences`): a request this process
owns goes to its own sequence batcher, any other one is forwarded to its owner
(:meth:`SequenceRouter.forward`) and its responses relayed back to the client.

The owner answers on a Unix socket of its own in the supervisor's private folder
(``<index>.relay.sock``, 0700), one connection per forwarded request
(:mod:`despina.serving.relay_frames`): it submits the request as a client's request
received at the same instant (``received_ns``: the monotonic clock is the host's, the
same in every process, so a stopping owner tells a sequence's next request from new
work as it does its own), and sends every response back. The forwarding process closes
its writing side when its client cancels; the owner then cancels the request. Requests
without a correlation ID (an iterative sequence's own, or the batcher's error) stay in the
process that received them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import zlib
from collections.abc import AsyncGenerator, Callable

from despina.errors import DespinaError, Unavailable
from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
from despina.serving.relay_frames import (
    read_request,
    read_response,
    request_frame,
    response_frame,
)
from despina.serving.serving_processes import ServingProcess

log = logging.getLogger("despina.server")

#: How often a forwarding process looks whether its client cancelled the request.
CANCEL_POLL_S = 0.1
#: The stream limit of a relay connection (a frame is read with ``readexactly``).
_LIMIT = 1 << 20

#: Submit a request a peer forwarded (received when its ``received_ns`` says); its stream.
Submit = Callable[[InferenceRequest], ResponseStream]


def owner_of(correlation_id: int | str, count: int) -> int | None:
    """The serving process (of ``count``) that runs the sequence ``correlation_id``;
    None for no ID (0 or ""): the receiving process answers it."""
    if isinstance(correlation_id, str):
        if not correlation_id:
            return None
        return zlib.crc32(correlation_id.encode()) % count
    return int(correlation_id) % count if correlation_id else None


class SequenceRouter:
    """One serving process's side: forwards the requests of sequences others own, and
    runs those its peers forward to it with ``submit``."""

    def __init__(self, place: ServingProcess, submit: Submit) -> None:
        self.place = place
        self._submit = submit
        self._server: asyncio.AbstractServer | None = None

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
            self._run_forwarded, path=self.relay_path(self.place.index), limit=_LIMIT
        )

    async def stop(self) -> None:
        """Stop taking forwarded requests (a peer's forward fails with Unavailable)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.relay_path(self.place.index))

    async def forward(
        self, owner: int, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | None, bool], None]:
        """Run ``request`` in serving process ``owner``; yield each response it answers
        and whether it is the final one (the last yielded is). Unavailable when the
        owner cannot be reached or stops answering."""
        try:
            reader, writer = await asyncio.open_unix_connection(
                self.relay_path(owner), limit=_LIMIT
            )
        except OSError as exc:
            raise self._unreachable(owner, exc) from None
        try:
            writer.writelines(request_frame(request))
            await writer.drain()
            final = False
            while not final:
                response, final = await self._next_response(reader, writer, request)
                yield response, final
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise self._unreachable(owner, exc) from None
        finally:
            writer.close()

    def _unreachable(self, owner: int, exc: BaseException) -> Unavailable:
        reason = "the connection closed" if isinstance(exc, asyncio.IncompleteReadError) else exc
        return Unavailable(
            f"serving process {owner} of --serving-processes {self.place.count}, which runs "
            f"this sequence, did not answer ({reason})"
        )

    @staticmethod
    async def _next_response(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: InferenceRequest
    ) -> tuple[InferenceResponse | None, bool]:
        """The owner's next response; tells it (closing this side's writing) once the
        client cancelled ``request``."""
        reading = asyncio.ensure_future(read_response(reader))
        try:
            while True:
                done, _ = await asyncio.wait((reading,), timeout=CANCEL_POLL_S)
                if done:
                    return reading.result()
                if request.cancelled and writer.can_write_eof() and not writer.is_closing():
                    writer.write_eof()
        finally:
            reading.cancel()

    async def _run_forwarded(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Run one request a peer forwarded; answer each response in a frame."""
        request: InferenceRequest | None = None
        watch: asyncio.Task[None] | None = None
        try:
            request = await read_request(reader)
            try:
                stream = self._submit(request)
            except DespinaError as exc:
                writer.writelines(response_frame(InferenceResponse(id=request.id, error=exc), True))
                await writer.drain()
                return
            watch = asyncio.create_task(_cancel_at_eof(reader, request))
            final = False
            async for response in stream:
                final = response.final
                writer.writelines(response_frame(response, final))
                await writer.drain()
            if not final:
                writer.writelines(response_frame(None, True))
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ValueError, KeyError, TypeError) as exc:
            log.debug("a forwarded request failed: %s", exc)
            if request is not None:
                request.cancel()
        finally:
            if watch is not None:
                watch.cancel()
            if request is not None:
                request.release_regions()
            writer.close()


async def _cancel_at_eof(reader: asyncio.StreamReader, request: InferenceRequest) -> None:
    """Cancel ``request`` once the forwarding process closes its writing side (its client
    cancelled) or the connection."""
    with contextlib.suppress(OSError):
        await reader.read()
    request.cancel()
