"""``despina serve --serving-processes N`` (N > 1): the supervising process.

It loads no model and serves no protocol. It refuses at once what N processes cannot
serve (each plugin's ``despina_serving_processes``), starts the plugins' services (one
metrics port), then N serving processes: ``python -m despina serve`` with the same
command line, the flags the plugins' parts add (the port-reuse flags) and
:data:`SERVING_PROCESS_ENV`. Their stdout
and stderr lines come out of its own, each prefixed with ``[<index>] ``. SIGINT and
SIGTERM are forwarded to every serving process, and it exits with their outcome (0 when
all stopped cleanly). When one exits on its own (it failed to start, or died), it stops
the others and exits non-zero, as one server failing would. A serving process also dies
with it (``PR_SET_PDEATHSIG``), so none outlives a killed supervisor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from despina.plugin.manager import Plugins
from despina.plugin.ports import ServingProcessesPart
from despina.serving.serving_processes import SERVING_PROCESS_ENV, ServingProcess

log = logging.getLogger("despina.supervisor")

#: ``prctl`` option: the signal a child gets when its parent dies.
_PR_SET_PDEATHSIG = 1
#: Seconds beyond the serving processes' own shutdown limits before they are killed.
_STOP_MARGIN_S = 30.0
#: The longest line relayed whole (longer ones come out in pieces).
_LINE_LIMIT = 1024 * 1024


def parts_of(flags: argparse.Namespace, plugins: Plugins) -> list[ServingProcessesPart]:
    """The plugins' parts for ``flags.serving_processes`` processes; ValueError (the
    user's message) for a flag that cannot work with them."""
    parts = plugins.hook.despina_serving_processes(flags=flags, count=flags.serving_processes)
    return [part for part in parts if part is not None]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    """Runs ``flags.serving_processes`` serving processes of the command line ``argv``."""

    def __init__(
        self, argv: Sequence[str], flags: argparse.Namespace, parts: list[ServingProcessesPart]
    ) -> None:
        self.argv = list(argv)
        self.count: int = flags.serving_processes
        self.parts = parts
        #: How long the serving processes may take to stop before they are killed.
        self.stop_limit_s = (
            2 * flags.exit_timeout_secs + flags.shutdown_grace_period + _STOP_MARGIN_S
        )
        self.children: list[asyncio.subprocess.Process] = []

    async def run(self) -> int:
        """Serve until a signal or a serving process's exit; the exit status."""
        folder = Path(tempfile.mkdtemp(prefix="despina-serving-"))  # 0700
        started: list[ServingProcessesPart] = []
        try:
            for part in self.parts:
                try:
                    await part.start()
                except (OSError, ValueError) as exc:
                    log.error("%s", exc)
                    return 1
                started.append(part)
            return await self._serve(folder)
        finally:
            for part in reversed(started):
                await part.stop()
            shutil.rmtree(folder, ignore_errors=True)

    async def _serve(self, folder: Path) -> int:
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[signal.Signals] = loop.create_future()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, _settle, stop, sig)
        relays: list[asyncio.Task[None]] = []
        for index in range(self.count):
            child = await self._spawn(index, folder)
            self.children.append(child)
            assert child.stdout is not None and child.stderr is not None
            prefix = f"[{index}] ".encode()
            relays.append(asyncio.create_task(_relay(child.stdout, sys.stdout.buffer, prefix)))
            relays.append(asyncio.create_task(_relay(child.stderr, sys.stderr.buffer, prefix)))
        log.info("started %d serving processes: pids %s", self.count, self._pids())
        exits = {asyncio.create_task(child.wait()): i for i, child in enumerate(self.children)}
        waited: list[asyncio.Future[Any]] = [stop, *exits]
        done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        failed = next((exits[task] for task in exits if task in done), None)
        if failed is not None and not stop.done():
            code = self.children[failed].returncode
            log.error("serving process %d exited (status %s): stopping the others", failed, code)
            self._signal(signal.SIGTERM)
        else:
            self._signal(stop.result())
        await self._wait_all()
        await asyncio.gather(*relays)
        codes = [child.returncode for child in self.children]
        if failed is not None and not stop.done():
            return _status(codes[failed]) or 1
        return next((_status(code) for code in codes if code), 0)

    async def _spawn(self, index: int, folder: Path) -> asyncio.subprocess.Process:
        extra = [flag for part in self.parts for flag in part.child_flags(index)]
        place = ServingProcess(index, self.count, folder)
        env = {**os.environ, SERVING_PROCESS_ENV: place.env_value()}
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "despina",
            "serve",
            *self.argv,
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            preexec_fn=_die_with_parent,
            limit=_LINE_LIMIT,
        )

    def _pids(self) -> str:
        return ", ".join(str(child.pid) for child in self.children)

    def _signal(self, sig: signal.Signals) -> None:
        for child in self.children:
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(sig)

    async def _wait_all(self) -> None:
        """Wait for every serving process; kill those still running after the limit."""
        waiting = asyncio.gather(*(child.wait() for child in self.children))
        try:
            await asyncio.wait_for(asyncio.shield(waiting), self.stop_limit_s)
        except TimeoutError:
            log.error("serving processes still running after %g s: killed", self.stop_limit_s)
            self._signal(signal.SIGKILL)
            await waiting


def _settle(stop: asyncio.Future[signal.Signals], sig: signal.Signals) -> None:
    if not stop.done():
        stop.set_result(sig)


def _status(code: int | None) -> int:
    """A child's return code as an exit status: a signal's death (negative) is 1."""
    if code is None or code == 0:
        return 0
    return code if code > 0 else 1


async def _relay(stream: asyncio.StreamReader, out: BinaryIO, prefix: bytes) -> None:
    """Copy ``stream``'s lines to ``out``, each after ``prefix``, until it ends."""
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line over the limit: what is buffered, as one piece
            line = await stream.read(_LINE_LIMIT) + b"\n"
        if not line:
            return
        out.write(prefix + line)
        out.flush()


def supervise(argv: Sequence[str], flags: argparse.Namespace, plugins: Plugins) -> int:
    """Run the serving processes of ``argv``; the exit status (1 for a refused flag)."""
    try:
        parts = parts_of(flags, plugins)
    except ValueError as exc:
        log.error("%s", exc)
        return 1
    return asyncio.run(Supervisor(argv, flags, parts).run())
