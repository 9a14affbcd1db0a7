"""The busy-polling event loop of ``--busy-poll-us``: sockets and timers behave as on the
default loop."""

from __future__ import annotations

import asyncio
import selectors
import socket
import time

from despina.serving.busy_poll import BusyPollSelector, loop_factory
from despina.serving.event_loop import loop_class


def test_zero_keeps_the_serving_loop() -> None:
    assert loop_factory(0) is loop_class()


def test_select_still_honours_its_timeout() -> None:
    selector = BusyPollSelector(poll_s=0.001)
    a, b = socket.socketpair()
    try:
        selector.register(a, selectors.EVENT_READ)
        started = time.monotonic()
        assert selector.select(0.05) == []
        assert time.monotonic() - started >= 0.05
        b.send(b"x")
        assert [key.fileobj for key, _ in selector.select(None)] == [a]
        assert [key.fileobj for key, _ in selector.select(0)] == [a]
    finally:
        selector.close()
        a.close()
        b.close()


def test_a_loop_that_polls_serves_sockets_and_timers() -> None:
    factory = loop_factory(300)
    assert factory is not None

    async def exchange() -> tuple[bytes, float]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        answer = await reader.readexactly(5)
        writer.close()
        server.close()
        await server.wait_closed()
        started = time.monotonic()
        await asyncio.sleep(0.05)
        return answer, time.monotonic() - started

    with asyncio.Runner(loop_factory=factory) as runner:
        assert isinstance(runner.get_loop(), factory)
        answer, slept = runner.run(exchange())
    assert answer == b"hello"
    assert slept >= 0.05
