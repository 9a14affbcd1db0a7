"""Listening sockets shared by the frontends: binding and accepting (:func:`listen`), and
stopping without resetting a connection a client made (:func:`stop_listening`).

A :class:`Listener` accepts connections itself instead of asyncio's server: when the
process runs out of descriptors (EMFILE, ENFILE, or out of memory), CPython 3.11's
accept loop keeps calling ``accept()`` up to ``backlog`` times after the first failure,
logging a traceback and scheduling a retry for each (1,024 of each per readiness of the
socket, and a ValueError per retry still pending once the socket closed). Here accepting
pauses :data:`ACCEPT_BACKOFF_S`, the owner is asked to make room (``make_room``: close
idle connections, freeing their descriptors), and one warning is logged per
:data:`REPORT_WINDOW`; accepting then resumes by itself. The process's open-file limit
is raised to its hard limit before the first listener binds
(:func:`~despina.transport.open_files.raise_open_file_limit`).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Protocol

from despina.transport.open_files import raise_open_file_limit

log = logging.getLogger("despina.transport")

#: Connections accepted per readiness of a listening socket, before other work runs.
ACCEPT_BATCH = 128
#: Seconds accepting pauses after ``accept()`` failed for lack of resources.
ACCEPT_BACKOFF_S = 0.1
#: Idle connections the owner is asked to close, per pause, to free descriptors.
ROOM_PER_PAUSE = 16
#: Seconds between two warnings about failed accepts.
REPORT_WINDOW = 10.0
#: ``accept()`` errors that leave the connection queued: the socket stays readable.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

#: Connections being made (asyncio keeps only weak references to tasks).
_making: set[asyncio.Task[object]] = set()


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


class Listening(Protocol):
    """A listener :func:`stop_listening` can stop: a :class:`Listener` or asyncio's."""

    @property
    def sockets(self) -> Sequence[_HasFileno]: ...

    def close(self) -> None: ...


class Listener:
    """Listening sockets whose connections are served by ``protocol`` (over TLS with
    ``ssl_context``), accepted by this object (see the module's text)."""

    def __init__(
        self,
        sockets: list[socket.socket],
        protocol: Callable[[], asyncio.BaseProtocol],
        ssl_context: ssl.SSLContext | None,
        ssl_handshake_timeout: float | None,
        make_room: Callable[[int], int] | None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self._sockets = sockets
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.ssl_handshake_timeout = ssl_handshake_timeout if ssl_context else None
        self.make_room = make_room
        self._closed = asyncio.Event()
        self._failures = 0
        self._reported = float("-inf")
        self._resume()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        """The listening sockets; empty once closed."""
        return () if self._closed.is_set() else tuple(self._sockets)

    def close(self) -> None:
        """Stop accepting and close the sockets (connections already made stay open)."""
        if self._closed.is_set():
            return
        self._closed.set()
        for sock in self._sockets:
            self.loop.remove_reader(sock.fileno())
            sock.close()

    async def wait_closed(self) -> None:
        """Wait for :meth:`close` (called by :func:`stop_listening` a loop step later)."""
        await self._closed.wait()

    def _resume(self) -> None:
        for sock in self.sockets:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                connection, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client gave up before its turn
                continue
            except OSError as exc:
                self._pause(exc)
                return
            connection.setblocking(False)
            serve(
                self.loop, self.protocol, connection, self.ssl_context, self.ssl_handshake_timeout
            )

    def _pause(self, exc: OSError) -> None:
        """Accepting failed (out of descriptors, most likely): stop reading the sockets,
        have the owner make room, resume after ACCEPT_BACKOFF_S."""
        for sock in self._sockets:
            self.loop.remove_reader(sock.fileno())
        made = self.make_room(ROOM_PER_PAUSE) if self.make_room is not None else 0
        self.loop.call_later(ACCEPT_BACKOFF_S, self._resume)
        self._failures += 1
        now = self.loop.time()
        if now - self._reported < REPORT_WINDOW:
            return
        level = logging.WARNING if exc.errno in _OUT_OF_RESOURCES else logging.ERROR
        log.log(
            level,
            "accepting connections on %s failed %d times since the last report (%s); "
            "retrying every %.1f s, %d idle connections closed to make room",
            self._sockets[0].getsockname(),
            self._failures,
            exc.strerror or exc,
            ACCEPT_BACKOFF_S,
            made,
        )
        self._failures, self._reported = 0, now


class AddressInUse(OSError):
    """The address ``host:port`` another socket holds, from :func:`listen`. A frontend
    raises it again with its Triton service name ("GRPC", "HTTP", "Metrics"); str() is
    then Triton's start-up text ``failed to start GRPC service: Unavailable - Socket
    '0.0.0.0:8001' already in use``."""

    def __init__(self, address: str, service: str = "") -> None:
        super().__init__(errno.EADDRINUSE, f"Socket '{address}' already in use")
        self.address = address
        self.service = service

    def __str__(self) -> str:
        text = f"Unavailable - {self.strerror}"
        return f"failed to start {self.service} service: {text}" if self.service else text


async def listen(
    protocol: Callable[[], asyncio.BaseProtocol],
    host: str | None,
    port: int,
    *,
    reuse_port: bool,
    backlog: int,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
    make_room: Callable[[int], int] | None = None,
) -> Listener:
    """Bind ``host:port`` (every address of ``host``; None or "": all interfaces) as
    asyncio's ``create_server`` does, and accept connections served by ``protocol``;
    OSError naming the address when one cannot be bound. ``make_room(n)`` closes up to
    ``n`` idle connections when the process is out of descriptors, and says how many."""
    raise_open_file_limit()
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise AddressInUse(f"{host or '0.0.0.0'}:{port}") from None
                raise OSError(
                    exc.errno,
                    f"error while attempting to bind on address {address!r}: "
                    f"{(exc.strerror or '').lower()}",
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return Listener(sockets, protocol, ssl_context, ssl_handshake_timeout, make_room)


def serve(
    loop: asyncio.AbstractEventLoop,
    protocol: Callable[[], asyncio.BaseProtocol],
    connection: socket.socket,
    ssl_context: ssl.SSLContext | None,
    ssl_handshake_timeout: float | None = None,
) -> None:
    """Serve an accepted (non-blocking) socket with a new ``protocol``; a client gone
    meanwhile, or one that fails its TLS handshake, is dropped quietly."""
    made = loop.connect_accepted_socket(
        protocol, connection, ssl=ssl_context, ssl_handshake_timeout=ssl_handshake_timeout
    )
    task: asyncio.Task[object] = loop.create_task(made)
    _making.add(task)
    task.add_done_callback(functools.partial(_made, connection))


def stop_listening(
    listener: Listening,
    protocol: Callable[[], asyncio.BaseProtocol],
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Stop accepting on ``listener`` without resetting a connection a client made: no
    more is accepted at once; at the next loop step (asyncio cannot make a connection it
    accepted once its server closed), the connections that completed their handshake
    meanwhile are accepted and served by ``protocol`` (over TLS with ``ssl_context``),
    and the sockets close. (Closing a listening socket resets the connections in its
    queue, whose clients may have sent a request already.) Out of descriptors, the
    queue's connections are left to that reset."""
    loop = asyncio.get_running_loop()
    queues = []
    for sock in listener.sockets:
        loop.remove_reader(sock.fileno())
        try:
            queues.append(socket.socket(fileno=os.dup(sock.fileno())))
        except OSError:  # out of descriptors
            continue
    for queue in queues:
        queue.setblocking(False)

    def close() -> None:
        listener.close()  # the copies keep the sockets listening until they are emptied
        for queue in queues:
            with queue:
                while True:
                    try:
                        connection, _ = queue.accept()
                    except OSError:  # empty (EAGAIN), or out of descriptors
                        break
                    connection.setblocking(False)
                    serve(loop, protocol, connection, ssl_context)

    loop.call_soon(close)


def _made(connection: socket.socket, task: asyncio.Task[object]) -> None:
    """A connection's serving began, failed or was cancelled (its loop closing first):
    one that is not served is closed here (closing a socket twice is harmless)."""
    _making.discard(task)
    if task.cancelled() or task.exception() is not None:  # a client gone meanwhile
        connection.close()
