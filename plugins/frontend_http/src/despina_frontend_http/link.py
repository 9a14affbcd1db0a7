"""The server side of the HTTP worker processes' links: each worker connects once (the
core's :class:`~despina.WorkerPool`); every INFER frame runs
:func:`~despina_frontend_http.routes_infer.start_infer` and ``finish_infer`` as its own task and
is answered with a REPLY frame carrying Triton's status and body.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from despina import DespinaError, Frame, FrameLink

from despina_frontend_http import wire
from despina_frontend_http.context import Context
from despina_frontend_http.routes_infer import (
    finish_infer,
    start_infer,
    trace_sending,
    trace_sent,
)

log = logging.getLogger("despina.http")


class WorkerCalls:
    """The server's end of one worker: runs its INFER frames, one task each."""

    def __init__(self, ctx: Context, link: FrameLink) -> None:
        self.ctx = ctx
        self.link = link
        self.tasks: set[asyncio.Task[None]] = set()

    def frame_received(self, frame: Frame) -> None:
        if frame.kind == wire.INFER:
            task = asyncio.ensure_future(self._infer(frame))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def connection_lost(self) -> None:
        """The calls in flight see it (:meth:`_connected`) and are cancelled."""

    def _connected(self) -> bool:
        """True while the worker process is connected (its requests are still wanted)."""
        return self.link.transport is not None

    async def _infer(self, frame: Frame) -> None:
        call, link = frame.call, self.link
        try:
            (name, version, header_length, forwarded), body = wire.parse_infer(frame)
            started = start_infer(self.ctx, name, version, body, header_length, forwarded)
            header, blobs = await finish_infer(self.ctx, started, self._connected)
            trace_sending(started)  # a traced request's answer leaves to the worker
            wire.send_reply(link, call, 200, len(header) if blobs else 0, [header, *blobs])
            trace_sent(started)
        except DespinaError as exc:
            _error(link, call, exc.http_status, str(exc))
        except Exception:
            log.exception("HTTP worker request failed")
            _error(link, call, 500, "internal server error")


def _error(link: FrameLink, call: int, status: int, message: str) -> None:
    wire.send_reply(link, call, status, 0, [orjson.dumps({"error": message})])
