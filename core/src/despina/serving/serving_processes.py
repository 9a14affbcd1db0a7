"""What ``--serving-processes N`` (N > 1) means to one serving process, and what it refuses.

The supervising process (:mod:`despina.serving.supervisor`) starts N servers with the
command line it was given, the flags the plugins' parts add (``despina_serving_processes``)
and :data:`SERVING_PROCESS_ENV` set to ``<index>:<count>:<folder>``: which one of the N it
is, and the private folder (0700) where each answers its peers (:mod:`despina.serving.peers`:
statistics, shared-memory registrations, settings, explicit model control) and runs the
sequences it owns for them (:mod:`despina.serving.sequence_routing`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Set by the supervisor in each serving process's environment: ``<index>:<count>:<folder>``.
SERVING_PROCESS_ENV = "DESPINA_SERVING_PROCESS"


@dataclass(frozen=True)
class ServingProcess:
    """Serving process ``index`` of ``count``, with its peers' sockets in ``folder``."""

    index: int
    count: int
    folder: Path

    @classmethod
    def from_env(cls) -> ServingProcess | None:
        """This process's place among the serving processes; None when the supervisor did
        not start it (a lone server, or the supervisor itself)."""
        value = os.environ.get(SERVING_PROCESS_ENV)
        if not value:
            return None
        index, count, folder = value.split(":", 2)
        return cls(int(index), int(count), Path(folder))

    def env_value(self) -> str:
        """What :meth:`from_env` reads back in the serving process."""
        return f"{self.index}:{self.count}:{self.folder}"

    def socket_path(self, index: int) -> Path:
        """Where serving process ``index`` answers its peers."""
        return self.folder / f"{index}.sock"

    def relay_path(self, index: int) -> Path:
        """Where serving process ``index`` takes the requests of the sequences it owns."""
        return self.folder / f"{index}.relay.sock"

    @property
    def peers(self) -> list[int]:
        """The other serving processes' indexes."""
        return [i for i in range(self.count) if i != self.index]


def per_process_file(path: str) -> str:
    """``path`` as this process writes it: ``<path>.process-<index>`` in a serving process
    of several (N processes writing one trace file would interleave their JSON), ``path``
    itself otherwise."""
    place = ServingProcess.from_env()
    return f"{path}.process-{place.index}" if place is not None and path else path


def refuse_unshared_port(allowed: bool, allow_flag: str, count: int, instead: str) -> None:
    """ValueError when a frontend that binds a port of its own without SO_REUSEPORT is
    ``allowed`` (the second serving process could not bind it); ``instead``: what to do."""
    if allowed:
        raise ValueError(
            f"--serving-processes {count}: {allow_flag}=true is not supported (its port is "
            f"not shared between serving processes); {instead}"
        )


@dataclass(frozen=True)
class SharedPort:
    """A frontend's part: every serving process binds its port with ``reuse_flag``."""

    reuse_flag: str

    @classmethod
    def of(
        cls, allowed: bool, port: int, port_flag: str, reuse_flag: str, count: int
    ) -> SharedPort | None:
        """The part of a frontend serving ``port`` (None when it is not ``allowed``);
        ValueError for port 0, which each process would bind apart."""
        if not allowed:
            return None
        if port == 0:
            raise ValueError(
                f"--serving-processes {count}: {port_flag}=0 is not supported (the serving "
                f"processes must bind one concrete port); give {port_flag} a port number"
            )
        return cls(reuse_flag)

    def child_flags(self, index: int) -> list[str]:
        return [f"{self.reuse_flag}=true"]

    async def start(self) -> None:
        """Nothing runs in the supervisor for a shared port."""

    async def stop(self) -> None:
        """Nothing runs in the supervisor for a shared port."""
