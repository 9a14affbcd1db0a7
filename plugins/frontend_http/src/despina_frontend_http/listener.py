"""A listener of its own for any :class:`~despina_frontend_http.router.Router`: the HTTP
port's HTTP/1.1 front (parsing, keep-alive, pipelining, body limit, streamed answers,
drain) on another address and port, for plugins serving their own protocol on a port of
their own (the OpenAI frontend, the metrics exporter).

Such a listener answers every request through its router: it has no inference fast path
(a ``POST /v2/models/m/infer`` is whatever its router says) and no restricted APIs but
its router's.
"""

from __future__ import annotations

import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from despina_frontend_http.context import Context
from despina_frontend_http.h1_engine import Limits
from despina_frontend_http.h1_server import Front
from despina_frontend_http.limits import head_too_large
from despina_frontend_http.options import DEFAULT_MAX_HEADER_SIZE, DEFAULT_MAX_INPUT_SIZE
from despina_frontend_http.router import Router

if TYPE_CHECKING:
    from despina import FrontendHost


class RouterListener:
    """A started :func:`serve_router` listener."""

    def __init__(self, front: Front, port: int, executor: ThreadPoolExecutor) -> None:
        self._front = front
        self._executor = executor
        #: The port bound (the ephemeral one chosen for port 0).
        self.port = port

    def drain(self) -> None:
        """Stop listening; open connections close after the answer they are owed."""
        self._front.drain()

    @property
    def settled(self) -> bool:
        """Every request read is answered (the server's stop waits for it)."""
        return self._front.settled

    async def stop(self) -> None:
        """Drain unless draining, and wait (a few seconds at most) for the connections to
        close."""
        await self._front.stop()
        self._executor.shutdown(wait=False)


async def serve_router(
    router: Router,
    host: FrontendHost,
    address: str,
    port: int,
    *,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    input_size_flag: str = "--http-max-input-size",
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    reuse_port: bool = False,
    ssl_context: ssl.SSLContext | None = None,
) -> RouterListener:
    """Serve ``router`` on ``address:port`` (port 0: an ephemeral one) on the running
    event loop, over TLS with ``ssl_context``; OSError when it cannot be bound.

    A body over ``max_input_size`` is answered 413 ``{"error": ...}`` naming
    ``input_size_flag``; a head over ``max_header_size`` 431. ``host`` is the server's
    (requests are timed for its tracer)."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="despina-listener")
    ctx = Context(
        host=host,
        max_input_size=max_input_size,
        executor=executor,
        restrictions=router.restrictions,
        forward=None,
        max_header_size=max_header_size,
    )
    front = Front(ctx, router)
    front.infer_fast_path = False
    front.limits = Limits(
        max_header_size,
        max_input_size,
        head_too_large(max_header_size),
        f"request body exceeds the maximum allowed size of {max_input_size} bytes; "
        f"use {input_size_flag} to increase the limit",
    )
    try:
        bound = await front.start(address, port, reuse_port, ssl_context)
    except BaseException:
        executor.shutdown(wait=False)
        raise
    return RouterListener(front, bound, executor)


class OwnPortFrontend:
    """The frontend contract (``drain``, ``settled``, ``stop``) of a plugin serving a
    router on a port of its own: a subclass's ``start`` calls :meth:`listen` once.

    ``ctx``, when the subclass made one for its routes (``Context.from_options``), has its
    threads stopped with the listener."""

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        #: The port :meth:`listen` bound; None before, and when nothing listens.
        self.port: int | None = None
        self._listener: RouterListener | None = None
        self._ctx: Context | None = None

    async def listen(
        self,
        router: Router,
        address: str,
        port: int,
        *,
        ctx: Context | None = None,
        max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
        input_size_flag: str = "--http-max-input-size",
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    ) -> None:
        """:func:`serve_router` ``router`` on ``address:port``; OSError when it cannot be
        bound (``ctx``'s threads are then stopped too)."""
        self._ctx = ctx
        try:
            self._listener = await serve_router(
                router,
                self.host,
                address,
                port,
                max_input_size=max_input_size,
                input_size_flag=input_size_flag,
                max_header_size=max_header_size,
            )
        except BaseException:
            await self.stop()
            raise
        self.port = self._listener.port

    def drain(self) -> None:
        """Stop listening; open connections close after the answer they are owed."""
        if self._listener is not None:
            self._listener.drain()

    @property
    def settled(self) -> bool:
        """False while requests read before the stop are not answered."""
        return self._listener is None or self._listener.settled

    async def stop(self) -> None:
        """Close the listening socket and the connections; stop ``ctx``'s threads."""
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self._ctx is not None:
            self._ctx.executor.shutdown(wait=False)
            self._ctx = None
