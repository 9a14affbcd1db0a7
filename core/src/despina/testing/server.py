"""A real Despina server in a background thread, for tests: :func:`start_server` and the
:class:`RunningServer` it returns (re-exported by :mod:`despina.testing`).

Cheap to import (pytest imports :mod:`despina.testing` in every run): the server, asyncio
and the CLI are imported by :func:`start_server` when it runs.
"""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

    from despina.serving.server import Server

T = TypeVar("T")


class RunningServer:
    """A server running on its own event loop thread, with the ports its frontends and
    exporter bound (None for one that is not installed or not serving)."""

    def __init__(
        self, server: Server, loop: asyncio.AbstractEventLoop, thread: threading.Thread
    ) -> None:
        self.server = server
        self.loop = loop
        self.thread = thread
        self.http_port = _bound_port(server.frontends, "http")
        self.grpc_port = _bound_port(server.frontends, "grpc")
        self.metrics_port = _bound_port(server.exporters, "prometheus")

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine on the server's loop and wait for its result."""
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        """Stop the server and its loop thread (idempotent). Clients the test dropped
        close their connections first, as they would at the exit of a client process:
        the stop waits for the HTTP connections still open, as Triton's."""
        if not self.thread.is_alive():
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        try:
            self.call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what still runs on the stopped ``loop`` and wait (10 s at most) for it to
    end, then close the loop, as ``asyncio.run`` ends: nothing is left pending to be
    destroyed later, no accepted socket left unserved and unclosed."""
    import asyncio

    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=10))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _bound_port(components: Sequence[Any], name: str) -> int | None:
    """The ``port`` the started frontend or exporter called ``name`` bound, or None."""
    port = next((getattr(c, "port", None) for c in components if c.name == name), None)
    return None if port is None else int(port)


def start_server(
    repository: Path | Sequence[Path] | None,
    args: Sequence[str] = (),
    plugins: Sequence[object] = (),
) -> RunningServer:
    """Start a real server and return once it serves. ``--http-port``, ``--grpc-port`` and
    ``--metrics-port`` not in ``args`` are 0 (each is set when the plugin that owns it is
    installed): the listeners bind ephemeral ports, which the RunningServer reports."""
    import asyncio
    from concurrent.futures import Future

    from despina.plugin.manager import create_plugins
    from despina.serving.event_loop import new_event_loop
    from despina.serving.flags import build_serve_parser, parse_settings
    from despina.serving.server import Server

    registered = create_plugins(plugins)
    _, inert = build_serve_parser(registered)
    argv: list[str] = []
    roots = [repository] if isinstance(repository, Path) else list(repository or [])
    for root in roots:
        argv.append(f"--model-repository={root}")
    for flag in ("--http-port", "--grpc-port", "--metrics-port"):
        owned = flag.lstrip("-").replace("-", "_") not in inert
        if owned and not any(a.startswith(flag) for a in args):
            argv.append(f"{flag}=0")
    argv.extend(args)
    settings = parse_settings(argv, registered)
    loop = new_event_loop()  # the loop despina serve runs on
    ready: Future[Server] = Future()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            server = Server(settings, plugins)
            loop.run_until_complete(server.start())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            ready.set_exception(exc)
            _finish(loop)
            return
        ready.set_result(server)
        loop.run_forever()
        _finish(loop)

    thread = threading.Thread(target=run, name="despina-test-server", daemon=True)
    thread.start()
    server = ready.result(120)
    return RunningServer(server, loop, thread)
