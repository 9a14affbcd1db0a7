"""Listening sockets shared by the frontends."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable

#: Connections :func:`stop_listening` is making (asyncio keeps only weak references).
_making: set[asyncio.Task[object]] = set()


def stop_listening(
    listener: asyncio.Server,
    protocol: Callable[[], asyncio.BaseProtocol],
    ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Stop accepting on ``listener`` without resetting a connection a client made: no
    more is accepted at once; at the next loop step (asyncio cannot make a connection it
    accepted once its server closed), the connections that completed their handshake
    meanwhile are accepted and served by ``protocol`` (over TLS with ``ssl_context``),
    and the sockets close. (Closing a listening socket resets the connections in its
    queue, whose clients may have sent a request already.)"""
    loop = asyncio.get_running_loop()
    queues = [socket.socket(fileno=os.dup(s.fileno())) for s in listener.sockets]
    for sock in listener.sockets:
        loop.remove_reader(sock.fileno())
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
                    made = loop.connect_accepted_socket(protocol, connection, ssl=ssl_context)
                    task: asyncio.Task[object] = loop.create_task(made)
                    _making.add(task)
                    task.add_done_callback(_made)

    loop.call_soon(close)


def _made(task: asyncio.Task[object]) -> None:
    _making.discard(task)
    if not task.cancelled():
        task.exception()  # a client gone meanwhile: nothing to serve
