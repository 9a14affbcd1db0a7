"""The worker pool (``despina.WorkerPool`` / ``despina.run_worker``) with real worker
processes serving a line protocol on 127.0.0.1: every line a client sends is forwarded to
the server process, which answers it upper-cased.

This file is also the workers' entry (``python -m test_transport_workers``); the first
argument after SOCKET and PORT picks how the worker behaves.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from despina import Frame, FrameLink, WorkerPool, run_worker

LINE, ANSWER = 1, 2
HERE = Path(__file__).resolve().parent
T = TypeVar("T")


# --- the worker process


class LineWorker:
    """Serves lines on the port; each goes to the server as a LINE frame."""

    def __init__(self, link: FrameLink, args: list[str]) -> None:
        (self.mode,) = args
        self.link = link
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[bytes]] = {}
        self.server: asyncio.Server | None = None
        self.busy = 0

    def frame_received(self, frame: Frame) -> None:
        future = self.waiting.pop(frame.call, None)
        if future is not None and frame.kind == ANSWER:
            future.set_result(bytes(frame.payload))

    def connection_lost(self) -> None:
        for future in self.waiting.values():
            future.cancel()

    async def start(self, port: int) -> int:
        if self.mode == "fail":
            raise OSError(f"port {port} is not for me")
        if self.mode == "crash":
            os._exit(7)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        self.server = await asyncio.start_server(self.client, sock=sock)
        return port

    async def client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            self.busy += 1
            call = next(self.ids)
            self.waiting[call] = asyncio.get_running_loop().create_future()
            self.link.send(LINE, call, os.getpid(), line)
            writer.write(await self.waiting[call])
            await writer.drain()
            self.busy -= 1
        writer.close()

    async def drain(self, grace: float) -> None:
        if self.mode == "stuck":
            await asyncio.sleep(3600)
        assert self.server is not None
        self.server.close()
        deadline = time.monotonic() + grace
        while self.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


# --- the server process


class Upper:
    """The server's end of a worker: answers each line upper-cased with the worker's pid,
    after ``delay`` seconds."""

    delay = 0.0

    def __init__(self, link: FrameLink) -> None:
        self.link = link

    def frame_received(self, frame: Frame) -> None:
        asyncio.get_running_loop().call_later(self.delay, self.answer, frame)

    def answer(self, frame: Frame) -> None:
        text = bytes(frame.payload).strip().upper() + b" %d\n" % frame.aux
        self.link.send(ANSWER, frame.call, 0, text)

    def connection_lost(self) -> None:
        pass


class SlowUpper(Upper):
    delay = 0.5


def _pool(
    mode: str, handler: Callable[[FrameLink], Any] = Upper, exit_timeout: float = 10.0
) -> WorkerPool:
    return WorkerPool("Line", "test_transport_workers", [mode], handler, exit_timeout)


async def _ask(port: int, text: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(text + b"\n")
        return await reader.readline()
    finally:
        writer.close()


def _run(scenario: Callable[[], Awaitable[T]], monkeypatch: pytest.MonkeyPatch) -> T:
    """Run ``scenario`` with this folder importable by the workers, within 60 s."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), *sys.path]))

    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), 60)

    return asyncio.run(bounded())


def test_workers_share_one_port_and_forward_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        pool = _pool("serve")
        port = await pool.start(2, "127.0.0.1", 0)
        try:
            assert port and len(pool.links) == 2 and len(pool.processes) == 2
            assert pool.folder.stat().st_mode & 0o777 == 0o700
            answers = await asyncio.gather(*(_ask(port, b"hi %d" % i) for i in range(40)))
            for i, answer in enumerate(answers):
                assert answer.startswith(b"HI %d " % i)
            pids = {int(answer.split()[-1]) for answer in answers}
            assert pids <= {p.pid for p in pool.processes} and pids
        finally:
            await pool.stop(1.0)
        assert [p.returncode for p in pool.processes] == [0, 0]
        assert not pool.folder.exists()
        with pytest.raises(OSError):
            await _ask(port, b"gone")

    _run(scenario, monkeypatch)


def test_a_worker_that_cannot_bind_fails_the_start_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        pool = _pool("fail")
        with pytest.raises(OSError, match=r"port \d+ is not for me"):
            await pool.start(2, "127.0.0.1", 0)
        assert all(p.returncode == 0 for p in pool.processes)  # drained, not killed
        assert not pool.folder.exists()

    _run(scenario, monkeypatch)


def test_a_worker_exiting_before_hello_fails_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        pool = _pool("crash")
        with pytest.raises(OSError, match="Line worker process exited with status 7 before"):
            await pool.start(1, "127.0.0.1", 0)
        assert not pool.folder.exists()

    _run(scenario, monkeypatch)


def test_an_unbindable_address_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        pool = _pool("serve")
        with pytest.raises(OSError, match=r"cannot bind Line to 192\.0\.2\.1:0: "):
            await pool.start(1, "192.0.2.1", 0)
        assert pool.processes == [] and not pool.folder.exists()

    _run(scenario, monkeypatch)


def test_stop_drains_calls_in_flight_and_refuses_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        pool = _pool("serve", SlowUpper)
        port = await pool.start(1, "127.0.0.1", 0)
        asking = asyncio.ensure_future(_ask(port, b"late"))
        await asyncio.sleep(0.2)  # the line is at the server, its answer 0.3 s away
        stopping = asyncio.ensure_future(pool.stop(5.0))
        await asyncio.sleep(0.1)
        with pytest.raises(OSError):  # the worker stopped accepting
            await _ask(port, b"new")
        assert (await asking).startswith(b"LATE ")
        await stopping
        assert pool.processes[0].returncode == 0

    _run(scenario, monkeypatch)


def test_a_worker_ignoring_drain_is_killed_after_the_exit_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> float:
        pool = _pool("stuck", exit_timeout=0.5)
        await pool.start(1, "127.0.0.1", 0)
        began = time.monotonic()
        await pool.stop(0.1)
        assert pool.processes[0].returncode == -signal.SIGKILL
        return time.monotonic() - began

    with caplog.at_level(logging.WARNING, logger="despina.transport"):
        took = _run(scenario, monkeypatch)
    assert 0.4 < took < 5
    assert "killing Line worker process" in caplog.text


def test_a_worker_going_away_is_logged_and_the_others_serve_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        pool = _pool("serve")
        port = await pool.start(2, "127.0.0.1", 0)
        try:
            victim = pool.processes[0]
            victim.kill()
            await victim.wait()
            for _ in range(100):
                if len(pool.links) == 1:
                    break
                await asyncio.sleep(0.02)
            assert len(pool.links) == 1
            for i in range(10):  # every connection reaches the survivor
                assert (await _ask(port, b"x%d" % i)).startswith(b"X%d " % i)
        finally:
            await pool.stop(1.0)

    with caplog.at_level(logging.ERROR, logger="despina.transport"):
        _run(scenario, monkeypatch)
    assert "a Line worker process went away; 1 remain" in caplog.text


if __name__ == "__main__":
    asyncio.run(run_worker(sys.argv[1:], LineWorker))
