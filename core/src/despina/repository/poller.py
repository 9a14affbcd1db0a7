"""Poll mode (``--model-control-mode=poll``): follow the repository while serving.

Every ``--repository-poll-secs`` the poller fingerprints each model folder (relative path,
size and modification time of every file). A folder acts only once its fingerprint was the
same on two consecutive polls, so half-written files are never picked up. Then: a new
folder loads, a removed one unloads, a changed one reloads beside the old versions (which
keep serving if the change fails to load).

What a poll finds is applied through :class:`ModelChanges`: this server's own model
manager (:class:`LocalChanges`), or under ``--serving-processes`` every serving process
together (:class:`despina.serving.joint_loads.JointChanges`: one process polls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from despina.errors import DespinaError

if TYPE_CHECKING:
    from despina.models.manager import ModelManager

log = logging.getLogger("despina.models")

Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(model_dir: Path) -> Fingerprint:
    """Every file under ``model_dir`` as (relative path, size, mtime_ns), sorted."""
    entries = []
    for path in model_dir.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                stat = path.stat()
                entries.append((str(path.relative_to(model_dir)), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))


class ModelChanges(Protocol):
    """How a poll applies the changes it found."""

    async def ready(self) -> bool:
        """Whether changes can be applied now; False skips this poll (nothing is
        recorded, the next poll looks again)."""
        ...

    async def load(self, name: str) -> None:
        """Load or reload ``name``; DespinaError when it fails (the old versions serve on)."""
        ...

    async def unload(self, name: str) -> None:
        """Unload ``name``."""
        ...


class LocalChanges:
    """The changes made by this server's own model manager."""

    def __init__(self, manager: ModelManager) -> None:
        self.manager = manager

    async def ready(self) -> bool:
        return True

    async def load(self, name: str) -> None:
        await self.manager.load(name)

    async def unload(self, name: str) -> None:
        await self.manager.unload(name)


class RepositoryPoller:
    """Background task finding the changes of ``manager``'s repository and applying them
    through ``changes``."""

    def __init__(self, manager: ModelManager, interval_s: float, changes: ModelChanges) -> None:
        self.manager = manager
        self.changes = changes
        self.interval_s = max(interval_s, 0.1)
        #: Fingerprints of the folders as last loaded.
        self.loaded: dict[str, Fingerprint] = {}
        #: Fingerprints seen on the previous poll (a change acts when it repeats).
        self.seen: dict[str, Fingerprint] = {}
        self._task: asyncio.Task[None] | None = None

    def remember_loaded(self) -> None:
        """Record the start-up state (call after the start-up load)."""
        for name in self.manager.entries:
            with contextlib.suppress(DespinaError, OSError):
                self.loaded[name] = fingerprint(self.manager.repository.model_dir(name))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.poll_once()
            except Exception:
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """One poll: load, reload and unload what changed and is stable (nothing while
        the changes are not :meth:`ModelChanges.ready`)."""
        if not await self.changes.ready():
            return
        await self.manager.repository.sync()
        current: dict[str, Fingerprint] = {}
        for name in self.manager.repository.model_names():
            with contextlib.suppress(DespinaError, OSError):
                current[name] = fingerprint(self.manager.repository.model_dir(name))
        stable = {n: f for n, f in current.items() if self.seen.get(n) == f}
        self.seen = current
        for name in sorted(self.loaded.keys() - current.keys()):
            del self.loaded[name]
            with contextlib.suppress(DespinaError):
                await self.changes.unload(name)
        for name, print_ in sorted(stable.items()):
            if self.loaded.get(name) == print_:
                continue
            self.loaded[name] = print_
            with contextlib.suppress(DespinaError):
                await self.changes.load(name)
