"""Listening sockets shared by the frontends."""

from __future__ import annotations

import socket


def reserve_port(host: str) -> socket.socket:
    """A socket bound with SO_REUSEPORT to an ephemeral port of ``host`` (brackets of an
    IPv6 literal allowed), not listening: it holds the port while worker processes bind it
    with SO_REUSEPORT too (close it once they listen). OSError when ``host`` cannot be
    bound."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]") or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
