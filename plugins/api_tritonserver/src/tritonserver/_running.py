"""A started Despina server on its own event loop thread: :class:`RunningServer`.

The API is synchronous (and asyncio-compatible where Triton's is) while Despina's
:class:`~despina.Server` is asynchronous: it runs on a private loop in a daemon thread,
and every call crosses to it. Despina errors come back as Triton's exceptions. When the
last object referring to a running server (the Server, its Models, requests, responses)
is gone, the server stops, as Triton's does when its C server object is released.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from despina import DespinaError, FrontendHost, Server, StartupError

from tritonserver._errors import InternalError, InvalidArgumentError, triton_error

T = TypeVar("T")


class Component(Protocol):
    """A frontend or metrics exporter started over the server."""

    async def stop(self) -> None: ...


class RunningServer:
    """A started Despina server and the loop thread it runs on."""

    def __init__(self, args: Sequence[str]) -> None:
        """Start a server from a ``despina serve`` command line; InternalError when it
        cannot start, InvalidArgumentError for a flag it refuses."""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="tritonserver-despina", daemon=True
        )
        self.thread.start()
        try:
            self.server: Server = self.call(_start(list(args)))
        except BaseException:
            _close_loop(self.loop, self.thread)
            raise
        #: What every operation goes through (health, metadata, inference, models).
        self.host: FrontendHost = self.server.dataplane
        #: Frontends started over the server (tritonfrontend), stopped after it at the latest.
        self.components: list[Component] = []
        self._stopper = weakref.finalize(
            self, _stop, self.server, self.components, self.loop, self.thread
        )

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the server's loop and return its result (its Despina error
        raised as Triton's)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise InternalError("a blocking tritonserver call on the server's own loop")
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result()
        except DespinaError as exc:
            raise triton_error(exc) from None

    def run(self, function: Callable[..., T], *args: Any) -> T:
        """Call a synchronous server method on the loop (the server's state is the loop's)."""

        async def on_loop() -> T:
            return function(*args)

        return self.call(on_loop())

    @property
    def stopped(self) -> bool:
        return not self._stopper.alive

    def start_component(self, name: str, args: Sequence[str]) -> Component:
        """Start the frontend or exporter ``name`` over the server
        (:meth:`despina.Server.start_frontend`; its errors raised as they are)."""
        component = self.call(self.server.start_frontend(name, args))
        self.components.append(component)
        return component

    def stop_component(self, component: Component) -> None:
        """Stop a component :meth:`start_component` started (no-op once the server stopped,
        which stopped it)."""
        if component in self.components:
            self.components.remove(component)
            self.call(component.stop())

    def stop(self) -> None:
        """Stop the server (graceful, within its exit timeout), then the frontends started
        over it, then its loop thread."""
        self._stopper()


async def _start(args: list[str]) -> Server:
    try:
        server = Server.from_args(args)
        await server.start()
    except SystemExit:  # argparse refused a flag (its message is on stderr)
        raise InvalidArgumentError(f"invalid server options: {' '.join(args)}") from None
    except StartupError as exc:
        raise InternalError(str(exc)) from None
    return server


def _stop(
    server: Server,
    components: list[Component],
    loop: asyncio.AbstractEventLoop,
    thread: threading.Thread,
) -> None:
    """Stop ``server`` and ``components``, then the loop (from any thread but the loop's
    own, where the stop is scheduled and not waited for)."""
    if threading.current_thread() is thread:
        task = loop.create_task(_stop_all(server, components))
        task.add_done_callback(lambda _: loop.stop())
        return
    try:
        asyncio.run_coroutine_threadsafe(_stop_all(server, components), loop).result()
    finally:
        _close_loop(loop, thread)


async def _stop_all(server: Server, components: list[Component]) -> None:
    try:
        await server.stop()
    finally:
        while components:
            await components.pop().stop()


def _close_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
