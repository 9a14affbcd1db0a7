"""Open-file limits of a ``despina serve`` process: the soft RLIMIT_NOFILE is raised to the
hard limit at start, and running out of descriptors (EMFILE on accept) pauses accepting
briefly, closing idle connections to make room, instead of stopping it or flooding the
log; once the sockets are released, both ports serve at once."""

from __future__ import annotations

import re
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from despina.testing import free_port

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")
if not Path("/proc/self/limits").exists():
    pytest.skip("needs Linux's /proc", allow_module_level=True)


class Serving:
    """A running ``despina serve`` (no models) with its ports and its log file."""

    def __init__(self, process: subprocess.Popen[bytes], http: int, grpc: int, log: Path) -> None:
        self.process = process
        self.http = http
        self.grpc = grpc
        self.log = log

    def live(self, timeout: float = 2.0) -> bool:
        """Whether both ports answer a liveness check within ``timeout`` seconds."""
        import tritonclient.grpc as grpcclient

        url = f"http://127.0.0.1:{self.http}/v2/health/live"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                if response.status != 200:
                    return False
            with grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc}") as client:
                return bool(client.is_server_live(client_timeout=timeout))
        except Exception:  # noqa: BLE001 - refused, reset or timed out: not live
            return False


@contextmanager
def serving(tmp_path: Path, soft: int, hard: int) -> Iterator[Serving]:
    """``despina serve`` started with RLIMIT_NOFILE (soft, hard), live; killed after."""
    (tmp_path / "models").mkdir()
    http, grpc = free_port(), free_port()
    log = tmp_path / "serve.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "despina",
                "serve",
                f"--model-repository={tmp_path / 'models'}",
                "--http-address=127.0.0.1",
                f"--http-port={http}",
                "--grpc-address=127.0.0.1",
                f"--grpc-port={grpc}",
                "--allow-metrics=false",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=limit,
        )
    running = Serving(process, http, grpc, log)
    try:
        deadline = time.monotonic() + 60
        while not running.live():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "not live after 60 s"
            time.sleep(0.1)
        yield running
    finally:
        process.kill()
        process.wait()


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    with serving(tmp_path, 256, 4096) as running:
        limits = Path(f"/proc/{running.process.pid}/limits").read_text()
    row = re.search(r"^Max open files\s+(\d+)\s+(\d+)", limits, re.MULTILINE)
    assert row is not None, limits
    assert (int(row[1]), int(row[2])) == (4096, 4096)


def test_out_of_descriptors_accepting_pauses_and_resumes(tmp_path: Path) -> None:
    limit = 128
    with serving(tmp_path, limit, limit) as running:
        with ExitStack() as stack:
            for port in (running.http, running.grpc) * limit:  # twice what the process may open
                stack.enter_context(socket.create_connection(("127.0.0.1", port), 10))
            deadline = time.monotonic() + 10
            while "Too many open files" not in running.log.read_text():  # out of descriptors
                assert time.monotonic() < deadline, running.log.read_text()[-4000:]
                time.sleep(0.05)
            time.sleep(1.0)
        # released: both ports serve again at once
        start = time.monotonic()
        while not running.live(timeout=1.0):
            assert time.monotonic() - start < 5, running.log.read_text()[-4000:]
        assert running.process.poll() is None
        log = running.log.read_text()
    failures = re.findall(r"accepting connections on .* failed .*Too many open files", log)
    assert 1 <= len(failures) <= 4, log[-4000:]  # reported, once per port and window
    assert "Traceback" not in log, log[-4000:]
