"""Podman for the image test: bounded commands, a configuration that can run containers
on this host, the base image, the build, and containers removed by name.

Every call has a timeout. :class:`Unavailable` means this host cannot build or run
containers (the test skips with its text); any other failure is the image's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The base build.sh's header makes from Debian packages when no registry is reachable.
LOCAL_BASE = "localhost/debian-python:bookworm"
MMDEBSTRAP = (
    "mmdebstrap",
    "--variant=apt",
    "--include=python3,python3-venv,ca-certificates,libgomp1",
    "bookworm",
)
#: For hosts whose defaults cannot start a container (no netavark, a RLIMIT_NOFILE the
#: runtime may not set, crun refusing hybrid cgroups): runc, no ulimits, slirp4netns.
RESTRICTED_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
"""
PORTS = (8000, 8001, 8002)


class Unavailable(Exception):
    """This host cannot build or run containers; the message says why."""


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass(frozen=True)
class Podman:
    """The podman command line with what this host needs: ``env`` (``CONTAINERS_CONF``),
    arguments for ``podman run`` and for ``podman build`` (through build.sh)."""

    label: str
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    run_args: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()

    def __call__(
        self, *args: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``podman ARGS``; with ``check``, a non-zero exit raises AssertionError."""
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {done.returncode}:\n{_tail(done.stderr)}"
            )
        return done

    def can_publish(self, image: str) -> str | None:
        """None when a container of ``image`` starts with a published port, else podman's error."""
        probe = ("run", "--rm", *self.run_args, "-p", "127.0.0.1::8000", image, "true")
        done = self(*probe, timeout=120, check=False)
        return None if done.returncode == 0 else _tail(done.stderr, 1)


def usable_podman(base: str, workdir: Path) -> Podman:
    """Podman's defaults if they run a container of ``base`` with a published port, else
    the restricted configuration if that does; else :class:`Unavailable` with both errors."""
    conf = workdir / "containers.conf"
    conf.write_text(RESTRICTED_CONF)
    candidates = [
        Podman("podman's defaults"),
        Podman(
            "runc, no ulimits, slirp4netns",
            {**os.environ, "CONTAINERS_CONF": str(conf)},
            ("--network=slirp4netns",),
            ("--network=host",),
        ),
    ]
    errors = []
    for podman in candidates:
        error = podman.can_publish(base)
        if error is None:
            return podman
        errors.append(f"{podman.label}: {error}")
    raise Unavailable("podman cannot run a container here (" + "; ".join(errors) + ")")


def ensure_base(base: str, workdir: Path) -> None:
    """Make sure image ``base`` is here: pulled, or for :data:`LOCAL_BASE` made with
    mmdebstrap and ``podman import`` as build.sh's header says."""
    if shutil.which("podman") is None:
        raise Unavailable("podman is not installed")
    podman = Podman("podman's defaults")
    if podman("image", "exists", base, check=False).returncode == 0:
        return
    if base != LOCAL_BASE:
        pulled = podman("pull", base, timeout=600, check=False)
        if pulled.returncode != 0:
            raise Unavailable(f"cannot pull the base image {base}: {_tail(pulled.stderr, 1)}")
        return
    if shutil.which("mmdebstrap") is None:
        raise Unavailable(f"no image {base}, and mmdebstrap (to make it) is not installed")
    rootfs = workdir / "rootfs.tar"
    made = subprocess.run([*MMDEBSTRAP, str(rootfs)], capture_output=True, text=True, timeout=1200)
    if made.returncode != 0:
        raise Unavailable(f"mmdebstrap could not make {base}: {_tail(made.stderr, 3)}")
    podman("import", str(rootfs), base, timeout=300)
    rootfs.unlink()


def build_image(podman: Podman, base: str, tag: str, log: Path) -> None:
    """deploy/container/build.sh (CPU, default plugins) from ``base`` as ``tag``; no
    intermediate images are kept (``--layers=false``), so removing ``tag`` removes all."""
    env = {**podman.env, "BASE_IMAGE": base, "TAG": tag, "VARIANT": "cpu"}
    env.pop("PLUGINS", None)
    command = [str(ROOT / "deploy/container/build.sh"), "--layers=false", *podman.build_args]
    with log.open("w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    if done.returncode != 0:
        raise AssertionError(f"build.sh exited {done.returncode}:\n{_tail(log.read_text(), 40)}")


def remove_image(podman: Podman, tag: str) -> None:
    """Remove ``tag`` if it exists."""
    if podman("image", "exists", tag, check=False).returncode == 0:
        podman("rmi", "--force", tag, timeout=120)


@dataclass(frozen=True)
class Container:
    """A running container: its name and the host ports published for 8000/8001/8002."""

    podman: Podman
    name: str
    ports: dict[int, int]

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.podman("exec", self.name, *command, check=check)

    def inspect(self) -> dict[str, Any]:
        found = json.loads(self.podman("inspect", self.name).stdout)
        return dict(found[0])

    def logs(self) -> str:
        done = self.podman("logs", self.name)
        return done.stdout + done.stderr

    def url(self, port: int, path: str = "") -> str:
        return f"127.0.0.1:{self.ports[port]}{path}"

    def wait_ready(self, timeout: float = 120) -> None:
        """Until ``/v2/health/ready`` answers 200; AssertionError with the logs when the
        container stops or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                ready = f"http://{self.url(8000, '/v2/health/ready')}"
                with urllib.request.urlopen(ready, timeout=5):
                    return
            if not self.inspect()["State"]["Running"]:
                break
            time.sleep(0.5)
        raise AssertionError(f"{self.name} did not turn ready:\n{_tail(self.logs(), 40)}")

    def wait_for_file(self, path: str, unless: Callable[[], bool], timeout: float = 60) -> None:
        """Until ``path`` exists in the container or ``unless()`` is true."""
        deadline = time.monotonic() + timeout
        while self.exec("test", "-e", path, check=False).returncode != 0 and not unless():
            assert time.monotonic() < deadline, f"{path} did not appear in {self.name}"
            time.sleep(0.2)


@contextlib.contextmanager
def running(
    podman: Podman,
    image: str,
    name: str,
    repository: Path,
    run_args: Sequence[str] = (),
    server_args: Sequence[str] = (),
) -> Iterator[Container]:
    """``podman run -d`` ``image`` as ``name``, ``repository`` read-only on /models and
    :data:`PORTS` published on random 127.0.0.1 ports, until ready; removed on exit."""
    publish = [arg for port in PORTS for arg in ("-p", f"127.0.0.1::{port}")]
    mount = f"{repository}:/models:ro"
    try:
        podman(
            "run", "-d", "--name", name, *podman.run_args, *publish, "-v", mount,
            *run_args, image, *server_args,
        )  # fmt: skip
        container = Container(
            podman, name, {port: _host_port(podman, name, port) for port in PORTS}
        )
        container.wait_ready()
        yield container
    finally:
        podman("rm", "--force", "--time", "0", name, timeout=120, check=False)


def _host_port(podman: Podman, name: str, port: int) -> int:
    """The host port published for ``port`` ("127.0.0.1:34435" -> 34435)."""
    published = podman("port", name, f"{port}/tcp").stdout.strip()
    return int(published.rsplit(":", 1)[1])
