"""The server side of the HTTP worker processes: a Unix socket taking INFER frames.

Each worker connects once; every INFER frame runs
:func:`~despina_frontend_http.routes_infer.start_infer` and ``finish_infer`` as its own task and
is answered with a REPLY frame carrying Triton's status and body.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from despina import DespinaError

from despina_frontend_http import wire
from despina_frontend_http.context import Context
from despina_frontend_http.routes_infer import (
    finish_infer,
    start_infer,
    trace_sending,
    trace_sent,
)

log = logging.getLogger("despina.http")


class WorkerConnection(asyncio.Protocol):
    """One worker's connection to the server process."""

    def __init__(self, ctx: Context, hello: asyncio.Queue[int]) -> None:
        self.ctx = ctx
        self.hello = hello
        self.transport: asyncio.Transport | None = None
        self.reader = wire.FrameReader(self._frame)
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _connected(self) -> bool:
        """True while the worker process is connected (its requests are still wanted)."""
        return self.transport is not None

    def _frame(self, call_id: int, kind: int, payload: memoryview) -> None:
        if kind == wire.HELLO:
            self.hello.put_nowait(int.from_bytes(payload[:4], "little"))
        elif kind == wire.INFER:
            task = asyncio.ensure_future(self._infer(call_id, payload))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _infer(self, call_id: int, payload: memoryview) -> None:
        try:
            (name, version, header_length, forwarded), body = wire.parse_infer(payload)
            started = start_infer(self.ctx, name, version, body, header_length, forwarded)
            header, blobs = await finish_infer(self.ctx, started, self._connected)
            trace_sending(started)  # a traced request's answer leaves to the worker
            frame = wire.reply_frame(call_id, 200, len(header) if blobs else 0, [header, *blobs])
            trace_sent(started)
        except DespinaError as exc:
            frame = _error(call_id, exc.http_status, str(exc))
        except Exception:
            log.exception("HTTP worker request failed")
            frame = _error(call_id, 500, "internal server error")
        if self.transport is not None:
            self.transport.writelines(frame)


def _error(call_id: int, status: int, message: str) -> list[Any]:
    return wire.reply_frame(call_id, status, 0, [orjson.dumps({"error": message})])
