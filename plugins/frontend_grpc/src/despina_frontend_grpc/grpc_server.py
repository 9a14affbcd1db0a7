"""Despina's own gRPC server: HTTP/2 on an asyncio Protocol, one task per call.

grpc.aio spends ~190 µs of the event loop's time on every call (its C core hands each
event to Python through a poller thread and several callbacks); parsing frames here costs
a fraction of that. The server implements what gRPC clients use of HTTP/2: prior-knowledge
cleartext or TLS with ALPN ``h2``, settings, flow control both ways, header blocks split
over CONTINUATION frames, padding, PING, RST_STREAM and GOAWAY; and of gRPC: unary and
streaming calls, message compression (gzip, deflate), ``grpc-timeout`` deadlines, the
keepalive and ping-abuse rules of tritonserver's ``--grpc-*`` flags, maximum connection
age, message size limits, restricted protocols and graceful shutdown.

Three layers serve a connection:

* :mod:`~despina_frontend_grpc.h2_engine`: HTTP/2 without I/O (framing, flow control, the
  limits on abuse of :mod:`~despina_frontend_grpc.h2_limits`, the two-step GOAWAY);
* :mod:`~despina_frontend_grpc.connection_calls`: gRPC call semantics over the engine's events
  (calls, message framing, deadlines, statuses, the handler tasks);
* :class:`Connection` here: the asyncio Protocol that feeds the engine what the socket
  reads, writes what it queues (once per loop iteration), passes pause/resume on, and
  runs the connection's timers (keepalive, maximum age, the GOAWAY PING's timeout,
  lingering after the half-close).

Connections are counted by a :class:`~despina.transport.roster.Roster`: one that has not
sent the connection preface within ``--grpc-handshake-timeout-secs`` is closed; at
``--grpc-max-connections`` a new connection makes room (the oldest still without its
preface is closed, else the longest-idle connection, one without calls, is drained:
GOAWAY, and calls it sent meanwhile are served). When every connection has calls, the
new one is closed as soon as it is accepted, before any frame, as grpc.aio does (a GOAWAY
would make grpc clients retry at once, in a tight loop; a closed connection makes them
back off). Running out of descriptors pauses accepting briefly
(:class:`~despina.transport.listen.Listener`).

Graceful shutdown (:meth:`Http2GrpcServer.drain` as the server stops, and at
``--grpc-max-connection-age``) sends the engine's first GOAWAY with its PING; the second
follows the PING's acknowledgement or :data:`GOAWAY_PING_TIMEOUT`. Once the calls
finished, the server half-closes and lets the client close (:data:`LINGER_S`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from despina import BodyBudget, Listener, Roster, listen, stop_listening

from despina_frontend_grpc.connection_calls import INFLATE_THREADS, GrpcCalls, Route
from despina_frontend_grpc.connection_limits import ConnectionLimits

log = logging.getLogger("despina.frontend.grpc")

#: Seconds to wait for the acknowledgement of the first GOAWAY's PING before the second.
GOAWAY_PING_TIMEOUT = 1.0
#: Seconds a connection that half-closed after its last GOAWAY waits for the client to
#: close, dropping what it still sends.
LINGER_S = 5.0


class Connection(asyncio.Protocol):
    """One client connection: the transport, the timers, and its calls' engine."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.calls = GrpcCalls(server, server.limits, self)
        self.engine = self.calls.engine
        self.flush_scheduled = False
        self.timers: list[asyncio.TimerHandle] = []
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.ping_ack_timer: asyncio.TimerHandle | None = None
        #: The loop's time when the client last sent something (the roster's measure).
        self.heard = self.loop.time()
        #: The client's connection preface came (the roster heard of it).
        self.handshaken = False

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: asyncio's, or uvloop's (not an asyncio.Transport subclass)
        self.transport = cast(asyncio.Transport, transport)
        limits = self.limits
        if not self.server.roster.admit(self):
            self.engine.closing = True
            transport.close()
            return
        self.server.connections.add(self)
        self.engine.start()
        self.keepalive_timer = self.loop.call_later(limits.keepalive_time, self._keepalive)
        if limits.max_connection_age is not None:
            age = limits.max_connection_age * random.uniform(0.9, 1.1)
            self.timers.append(self.loop.call_later(age, self._age_out))
        if self.server.draining:  # accepted as the listener closed
            self.drain()
        self._flush()

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()
        error = self.engine.receive(data)
        if not self.handshaken and self.engine.preface_seen:
            self.handshaken = True
            self.server.roster.handshaken(self)
        if error is not None:
            log.warning("gRPC connection closed: %s", error)
            self._close()
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.closing = True
        self.server.connections.discard(self)
        self.server.roster.leave(self)
        for timer in (*self.timers, self.keepalive_timer, self.ping_ack_timer):
            if timer is not None:
                timer.cancel()
        self.calls.cancel_all()
        self.server.connection_closed()

    def pause_writing(self) -> None:
        self.calls.paused = True

    def resume_writing(self) -> None:
        self.calls.resume_writing()

    # --- the roster's questions

    def idle(self) -> bool:
        """No call, no partial frame read, nothing left to write, not shutting down."""
        engine = self.engine
        return not (
            engine.streams
            or engine.buffer
            or engine.continuing
            or engine.draining
            or engine.closing
            or self.transport is None
            or self.transport.get_write_buffer_size()
        )

    def evict(self) -> None:
        """Make room: close at once without the preface, else drain (GOAWAY; calls
        the client opened meanwhile are served)."""
        if self.engine.preface_seen:
            self.drain()
        else:
            self._close()

    # --- output

    def flush_soon(self) -> None:
        """Write the engine's queued bytes once this loop iteration's work is done."""
        if not self.flush_scheduled and self.engine.out:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        transport = self.transport
        if self.engine.out and transport is not None and not transport.is_closing():
            transport.write(self.engine.data_to_send())
        else:
            self.engine.out = []

    def _close(self) -> None:
        self._flush()
        self.engine.closing = True
        if self.transport is not None:
            self.transport.close()

    def half_close(self) -> None:
        """After the last GOAWAY and the last call: send what is queued and our end of
        the stream; drop what the client still sends until it closes or LINGER_S pass
        (closing on unread bytes would reset the connection and could lose the end of
        the answers)."""
        if self.engine.closing:
            return
        transport = self.transport
        if transport is None or not transport.can_write_eof():  # TLS: a plain close
            self._close()
            return
        self._flush()
        self.engine.closing = True
        transport.write_eof()
        self.timers.append(self.loop.call_later(LINGER_S, transport.close))

    # --- connection lifetime

    def _keepalive(self) -> None:
        """Every ``keepalive_time``: PING a connection with calls (or any, when permitted);
        no ACK within ``keepalive_timeout`` closes it."""
        limits = self.limits
        self.keepalive_timer = self.loop.call_later(limits.keepalive_time, self._keepalive)
        if not self.engine.send_keepalive():
            return
        self._flush()
        if self.ping_ack_timer is not None:
            self.ping_ack_timer.cancel()
        self.ping_ack_timer = self.loop.call_later(limits.keepalive_timeout, self._ping_timeout)

    def _ping_timeout(self) -> None:
        self.ping_ack_timer = None
        if self.engine.keepalive_pending:
            self._close()

    def _age_out(self) -> None:
        self.drain()
        grace = self.limits.max_connection_age_grace
        if grace is not None:
            self.timers.append(self.loop.call_later(grace, self.abort_calls))

    def drain(self) -> None:
        """Begin a graceful shutdown (:meth:`H2Engine.drain`); the last GOAWAY follows
        the PING's acknowledgement or GOAWAY_PING_TIMEOUT."""
        if not self.engine.drain():
            return
        self._flush()
        self.timers.append(self.loop.call_later(GOAWAY_PING_TIMEOUT, self._last_goaway))

    def _last_goaway(self) -> None:
        if not self.engine.closing:
            self.engine.last_goaway()
            self._flush()

    def abort_calls(self) -> None:
        """End every call still running with UNAVAILABLE, and close."""
        self.calls.abort()
        self._close()


class Http2GrpcServer:
    """Listens on one address and serves the routes' RPCs on every connection."""

    def __init__(
        self,
        routes: dict[str, Route],
        limits: ConnectionLimits,
        restrictions: dict[str, tuple[str, str]],
        ssl_context: ssl.SSLContext | None,
        request_bodies: BodyBudget,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.restrictions = restrictions
        self.ssl_context = ssl_context
        #: The server-wide budget the calls charge request messages to.
        self.request_bodies = request_bodies
        self.connections: set[Connection] = set()
        self.roster: Roster[Connection] = Roster(
            "gRPC", "--grpc-max-connections", limits.max_connections, limits.handshake_timeout, log
        )
        self.listener: Listener | None = None
        #: Set by :meth:`drain`: a connection made after it drains at once.
        self.draining = False
        self._idle = asyncio.Event()
        self._inflater: ThreadPoolExecutor | None = None

    def inflater(self) -> ThreadPoolExecutor:
        """The threads that inflate large compressed messages (started on first use)."""
        if self._inflater is None:
            self._inflater = ThreadPoolExecutor(
                INFLATE_THREADS, thread_name_prefix="despina-grpc-inflate"
            )
        return self._inflater

    def refusal(self, path: str, metadata: tuple[tuple[str, Any], ...]) -> str | None:
        """Why a restricted method may not be called with this metadata, or None."""
        rule = self.restrictions.get(path)
        if rule is None:
            return None
        header, expected = rule
        if any(k == header and v == expected for k, v in metadata):
            return None
        return f"This protocol is restricted, expecting header '{header}'"

    async def start(self, host: str, port: int, reuse_port: bool) -> int:
        """Bind and listen; the bound port. OSError when the address cannot be bound."""
        self.listener = await listen(
            lambda: Connection(self),
            host.strip("[]"),
            port,
            reuse_port=reuse_port,
            backlog=1024,
            ssl_context=self.ssl_context,
            ssl_handshake_timeout=self.limits.handshake_timeout or None,
            make_room=self.roster.make_room,
        )
        return int(self.listener.sockets[0].getsockname()[1])

    def connection_closed(self) -> None:
        if not self.connections:
            self._idle.set()

    def drain(self) -> None:
        """Stop listening; every connection begins its graceful shutdown
        (:meth:`Connection.drain`), and so does one accepted just before, as it is made.
        Once: a second call does nothing."""
        if self.draining:
            return
        self.draining = True
        self.roster.close()
        if self.listener is not None:
            stop_listening(self.listener, lambda: Connection(self), self.ssl_context)
        for connection in list(self.connections):
            connection.drain()

    async def stop(self, grace: float) -> None:
        """:meth:`drain` unless draining; calls still running get ``grace`` seconds, then
        UNAVAILABLE."""
        self.drain()
        await asyncio.sleep(0)  # a socket accepted just before reaches connection_made
        if self.connections:
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except TimeoutError:
                for connection in list(self.connections):
                    connection.abort_calls()
                await self._closed_within(1.0)
        if self.listener is not None:
            await self.listener.wait_closed()
        if self._inflater is not None:
            # inflations still running were cancelled with their connections: each
            # stops after its current step
            self._inflater.shutdown(wait=False, cancel_futures=True)
            self._inflater = None

    async def _closed_within(self, seconds: float) -> None:
        """Wait for the connections to close; drop those still open after ``seconds``
        (a client that reads nothing would hold a closing transport open for ever)."""
        try:
            await asyncio.wait_for(self._idle.wait(), seconds)
        except TimeoutError:
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            await asyncio.sleep(0)  # their connection_lost runs before the loop may stop


def tls_context(cert: str, key: str, root: str | None, mutual: bool) -> ssl.SSLContext:
    """A server TLS context offering ALPN ``h2``; client certificates required when
    ``mutual`` (checked against ``root``), requested and checked when only ``root`` is
    given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    if root:
        context.load_verify_locations(root)
        context.verify_mode = ssl.CERT_REQUIRED if mutual else ssl.CERT_OPTIONAL
    return context
