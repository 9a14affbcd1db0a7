"""Explicit model control under ``--serving-processes N``: every serving process loads and
unloads a model together.

A load, in two phases. The process a client's load reaches (the coordinator) loads the
new versions; before they replace the old ones (``ModelManager.load``'s ``before_switch``)
it asks every peer to load them as well (``load_prepare``): each peer loads them and
answers once they are ready to switch in, or with its failure. When all are ready, the
coordinator tells them to switch (``load_decide``, commit) and switches itself; when one
failed or did not answer, it tells those that are ready to drop what they loaded and the
load fails with that failure: the old versions serve on everywhere, as after a failed
reload of one server. A peer refuses to prepare while a load or unload of the same model
is under way in it (two clients loading one model through two processes at once: the
loads fail with Unavailable, and a retry succeeds), so two coordinators never wait on each
other.

An unload is made by the receiving process, then by every peer.

Poll mode: serving process 0 alone polls the repository, and what it finds is loaded and
unloaded this way (:class:`JointChanges`), so all processes switch versions together; a
poll waits until every peer answers (they start at their own pace).

What the peers exchange crosses :mod:`despina.serving.peers` as JSON (file overrides in
base64); loads and unloads wait as long as they take.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from base64 import b64decode, b64encode
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from despina.errors import DespinaError, Unavailable

if TYPE_CHECKING:
    from despina.models.manager import ModelManager
    from despina.serving.peers import Operation, Peers


@dataclass
class _Prepared:
    """A peer's load waiting for the coordinator's decision."""

    decision: asyncio.Future[bool]
    load: asyncio.Task[None]


class JointChanges:
    """Poll mode's changes (:class:`despina.repository.poller.ModelChanges`) made by every
    serving process together, coordinated by the polling one."""

    def __init__(self, joint: JointLoads, peers: Peers) -> None:
        self.joint = joint
        self.peers = peers

    async def ready(self) -> bool:
        """Whether every peer answers now (a poll before that changes nothing)."""
        return await self.peers.all_answer()

    async def load(self, name: str) -> None:
        await self.joint.load(self.peers, name, None, None, sync=True)

    async def unload(self, name: str) -> None:
        await self.joint.unload(self.peers, name, unload_dependents=False)


class JointLoads:
    """One serving process's part in the loads and unloads all of them make together."""

    def __init__(self, models: ModelManager) -> None:
        self.models = models
        self._prepared: dict[str, _Prepared] = {}

    async def load(
        self,
        peers: Peers,
        name: str,
        config: str | None,
        files: Mapping[str, bytes] | None,
        sync: bool = False,
    ) -> None:
        """Coordinate a load of ``name`` (module docstring); ``sync``: each peer brings
        its copies of remote repositories up to date first (poll mode's loads: the
        polling process synced its own)."""
        token = uuid.uuid4().hex
        arguments = {
            "token": token,
            "name": name,
            "config": config,
            "files": {path: b64encode(data).decode() for path, data in (files or {}).items()},
            "sync": sync,
        }
        abort = ("load_decide", {"token": token, "commit": False})

        async def before_switch() -> None:
            await peers.fan_out("load_prepare", arguments, abort, timeout=None)
            await peers.ask_all("load_decide", {"token": token, "commit": True}, timeout=None)

        await self.models.load(name, config, files, before_switch)

    async def unload(self, peers: Peers, name: str, unload_dependents: bool) -> None:
        """A client's unload of ``name``: here, then in every peer."""
        await self.models.unload(name, unload_dependents=unload_dependents)
        arguments = {"name": name, "unload_dependents": unload_dependents}
        await peers.ask_all("unload", arguments, timeout=None)

    def operations(self) -> dict[str, Operation]:
        """What a coordinating peer asks of this process."""
        return {
            "load_prepare": self._prepare,
            "load_decide": self._decide,
            "unload": lambda a: self.models.unload(
                a["name"], unload_dependents=bool(a["unload_dependents"])
            ),
        }

    async def _prepare(self, arguments: dict[str, Any]) -> None:
        """Load the new versions and wait, ready to switch them in, for the decision;
        answer once ready (or with the load's failure)."""
        name = str(arguments["name"])
        if self.models.loading(name):
            raise Unavailable(
                f"a load or unload of '{name}' is under way in another serving process; retry"
            )
        if arguments.get("sync"):
            await self.models.repository.sync()
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        decision: asyncio.Future[bool] = loop.create_future()

        async def before_switch() -> None:
            ready.set_result(None)
            if not await decision:
                raise Unavailable(f"loading '{name}' failed in another serving process")

        files = {path: b64decode(data) for path, data in arguments["files"].items()}
        load = asyncio.create_task(
            self.models.load(name, arguments["config"], files or None, before_switch)
        )
        self._prepared[arguments["token"]] = _Prepared(decision, load)
        await asyncio.wait({ready, load}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():  # the load failed before it could switch
            del self._prepared[arguments["token"]]
            load.result()

    async def _decide(self, arguments: dict[str, Any]) -> None:
        """Switch the prepared versions in (commit) or drop them; answer once done."""
        prepared = self._prepared.pop(str(arguments["token"]), None)
        if prepared is None:
            return
        commit = bool(arguments["commit"])
        prepared.decision.set_result(commit)
        if commit:
            await prepared.load
        else:
            with contextlib.suppress(DespinaError):  # the dropped load's own failure
                await prepared.load
