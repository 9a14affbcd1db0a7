"""An HTTP worker process: parses HTTP on the shared port, forwards to the server process.

Run by the core's :class:`~despina.WorkerPool` (``--http-worker-processes``) as ``python
-m despina_frontend_http.worker SOCKET PORT PROXY SETTINGS_JSON``. Inference requests
travel as INFER frames over the link (:func:`despina.run_worker`); every other endpoint is
proxied over HTTP to the server's Unix socket PROXY, where the full application answers.
The worker exits when the server drains the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
from aiohttp import web
from despina import DespinaError, Frame, FrameLink, Unavailable, parse_restricted, run_worker

from despina_frontend_http import wire
from despina_frontend_http.aioserver import GuardedSite, handler_args
from despina_frontend_http.body import read_body
from despina_frontend_http.context import ANY_PATH, versioned
from despina_frontend_http.options import RESTRICTED_FLAG
from despina_frontend_http.responses import error_response
from despina_frontend_http.restricted import Restrictions
from despina_frontend_http.routes_infer import respond
from despina_frontend_http.tls import server_context

#: Request headers not forwarded to the server (hop-by-hop, or describing the raw body).
_HOP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "content-encoding",
}
_BACK = ("content-type", "content-encoding", "inference-header-content-length")
#: Answers of this type (``/generate_stream``) are relayed as they arrive, not buffered.
_EVENT_STREAM = "text/event-stream"


class HttpWorker:
    """aiohttp serving the port; inference calls go over the link, replies are matched
    to calls by id."""

    def __init__(self, link: FrameLink, args: list[str]) -> None:
        self.proxy_path, settings = args
        self.settings: dict[str, Any] = json.loads(settings)
        self.link = link
        self.calls: dict[int, asyncio.Future[tuple[int, int, bytes]]] = {}
        self.ids = itertools.count(1)
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self.site: GuardedSite | None = None

    def frame_received(self, frame: Frame) -> None:
        future = self.calls.pop(frame.call, None)
        if frame.kind == wire.REPLY and future is not None and not future.done():
            future.set_result(wire.parse_reply(frame))

    def connection_lost(self) -> None:
        for future in self.calls.values():
            if not future.done():
                future.set_exception(Unavailable("Server is stopping"))
        self.calls.clear()

    async def infer(self, meta: list[Any], body: bytes) -> tuple[int, int, bytes]:
        """(status, inference header length, body) of an inference the server ran."""
        if not self.link.connected:
            raise Unavailable("Server is stopping")
        call = next(self.ids)
        future: asyncio.Future[tuple[int, int, bytes]] = asyncio.get_running_loop().create_future()
        self.calls[call] = future
        wire.send_infer(self.link, call, meta, body)
        return await future

    async def start(self, port: int) -> int:
        """Serve the worker application on ``port``; OSError when it cannot bind."""
        settings = self.settings
        connector = aiohttp.UnixConnector(path=self.proxy_path)
        self.session = aiohttp.ClientSession(
            "http://despina", connector=connector, auto_decompress=False
        )
        self.runner = web.AppRunner(
            build_worker_app(self, self.session, settings), access_log=None, handle_signals=False
        )
        await self.runner.setup()
        context = (
            server_context(
                settings["server_cert"],
                settings["server_key"],
                settings["root_cert"] or None,
                bool(settings["use_ssl_mutual"]),
            )
            if settings["tls"]
            else None
        )
        site = GuardedSite(
            self.runner,
            settings["address"],
            port,
            max_connections=int(settings["max_connections"]),
            max_header_size=int(settings["max_header_size"]),
            max_input_size=int(settings["max_input_size"]),
            ssl_context=context,
            reuse_port=True,
        )
        try:
            await site.start()
        except OSError:
            await self.drain(0.0)
            raise
        self.site = site
        return port

    async def drain(self, grace: float) -> None:
        """Stop listening and drain the connections as the server's own listener does
        (:meth:`GuardedSite.drain`); the requests in flight get ``grace`` seconds."""
        if self.site is not None:
            self.site.drain()
            await self.site.drained(grace)
            self.site = None
        if self.runner is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.runner.cleanup(), grace)
            self.runner = None
        if self.session is not None:
            await self.session.close()
            self.session = None


def build_worker_app(
    link: HttpWorker, session: aiohttp.ClientSession, settings: dict[str, Any]
) -> web.Application:
    """The worker's application: INFER forwarding plus a proxy for everything else."""
    limit = int(settings["max_input_size"])
    restrictions = Restrictions(parse_restricted(settings["restricted"], RESTRICTED_FLAG))
    pattern = settings["forward_pattern"]
    forward = re.compile(pattern, re.IGNORECASE) if pattern else None
    executor = ThreadPoolExecutor(max_workers=max(int(settings["threads"]), 1))

    async def infer(request: web.Request) -> web.StreamResponse:
        headers = request.headers
        try:
            if restrictions.rules:
                restrictions.check("inference", headers)
            body = await read_body(request, limit)
            forwarded = (
                {k.lower(): v for k, v in headers.items() if forward.search(k)} if forward else None
            )
            info = request.match_info
            meta = [
                info["model"],
                info.get("version", ""),
                headers.get("Inference-Header-Content-Length"),
                forwarded,
            ]
            status, header_length, payload = await link.infer(meta, body)
        except DespinaError as exc:
            return error_response(exc.http_status, str(exc))
        if status != 200:
            return web.Response(
                status=status, body=payload, headers={"Content-Type": "application/json"}
            )
        if not header_length:
            return await respond(request, executor, payload, [])
        view = memoryview(payload)
        return await respond(request, executor, bytes(view[:header_length]), [view[header_length:]])

    async def proxy(request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request, limit)
        except DespinaError as exc:
            return error_response(exc.http_status, str(exc))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with session.request(
            request.method, request.rel_url, headers=headers, data=body
        ) as answer:
            back = {k: v for k, v in answer.headers.items() if k.lower() in _BACK}
            if not answer.headers.get("Content-Type", "").startswith(_EVENT_STREAM):
                payload = await answer.read()
                return web.Response(status=answer.status, body=payload, headers=back)
            stream = web.StreamResponse(status=answer.status, headers=back)
            await stream.prepare(request)
            try:
                async for chunk in answer.content.iter_any():  # events reach the client as sent
                    await stream.write(chunk)
                await stream.write_eof()
            except ConnectionError:  # the client left: closing the answer tells the server
                pass
            return stream

    app = web.Application(
        client_max_size=limit, handler_args=handler_args(int(settings["max_header_size"]))
    )
    for path in versioned("/infer"):
        app.router.add_post(path, infer)
    app.router.add_route("*", ANY_PATH, proxy)
    return app


def main(argv: list[str]) -> int:
    asyncio.run(run_worker(argv, HttpWorker))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
