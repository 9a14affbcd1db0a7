"""README.md's quick start is run as written: the fenced blocks marked
``<!-- quickstart: NAME -->`` are extracted, the documented ports (HTTP 8000, gRPC 8001,
metrics 8002) replaced by free ones this test picks, and run against a real
``despina serve`` process serving ``examples/model_repository``; their output must be
the documented output block. The third-party backend example (its module and model
config) is served the same way through ``--plugin``."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples" / "model_repository"
DESPINA = Path(sys.executable).with_name("despina")
MARK = re.compile(r"<!-- quickstart: ([\w ]+?) -->\s*\n```[\w]*\n(.*?)```", re.S)
DOCUMENTED_PORTS = {"8000": "http", "8001": "grpc", "8002": "metrics"}


def blocks() -> dict[str, str]:
    """Every marked block of README.md by its name."""
    found = {name: body for name, body in MARK.findall(README.read_text(encoding="utf-8"))}
    return found


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def with_ports(text: str, ports: dict[str, int]) -> str:
    """``text`` with the documented ports (``localhost:8000``) replaced by ``ports``."""
    for documented, kind in DOCUMENTED_PORTS.items():
        text = re.sub(rf"(localhost|127\.0\.0\.1):{documented}\b", rf"\g<1>:{ports[kind]}", text)
    return text


class Served:
    def __init__(self, process: subprocess.Popen[bytes], ports: dict[str, int], log: Path):
        self.process, self.ports, self.log = process, ports, log


def serve(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> Served:
    """``despina serve ARGS`` on free ports; returns once the server is ready."""
    http, grpc, metrics = free_ports(3)
    ports = {"http": http, "grpc": grpc, "metrics": metrics}
    log = tmp_path / "server.log"
    command = [
        str(DESPINA),
        "serve",
        *args,
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"despina serve exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2):
                return Served(process, ports, log)
        except OSError:
            time.sleep(0.3)
    process.terminate()
    raise AssertionError(f"despina serve not ready: {log.read_text()[-3000:]}")


def stop(served: Served) -> None:
    served.process.terminate()
    try:
        served.process.wait(30)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait(10)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A real ``despina serve`` on the example repository, as ``make serve`` starts it."""
    served = serve(["--model-repository", str(EXAMPLES)], tmp_path_factory.mktemp("quickstart"))
    yield served
    stop(served)


def test_readme_has_the_marked_blocks() -> None:
    names = set(blocks())
    wanted = {"curl", "curl output", "python", "python output"}
    wanted |= {"plugin pyproject", "plugin module", "plugin config"}
    assert wanted <= names, f"missing in README.md: {sorted(wanted - names)}"
    # The documented commands use the documented ports (substituted below).
    assert "localhost:8000" in blocks()["curl"]
    assert "localhost:8000" in blocks()["python"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_quickstart(examples: Served) -> None:
    command = with_ports(blocks()["curl"].strip(), examples.ports)
    assert str(examples.ports["http"]) in command
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(blocks()["curl output"])


def test_python_quickstart(examples: Served, tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(with_ports(blocks()["python"], examples.ports))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == blocks()["python output"]


def test_backend_plugin_example(tmp_path: Path) -> None:
    """The README's third-party backend, as written: its module, its model folder and
    config.pbtxt, served with ``--plugin`` and answering Y = 2 * X."""
    readme = blocks()
    assert 'name = "despina-backend-doubler"' in readme["plugin pyproject"]
    package = tmp_path / "src" / "despina_backend_doubler"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(readme["plugin module"])
    model = tmp_path / "models" / "doubled"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(readme["plugin config"])
    (model / "1" / "model.double").write_bytes(b"")
    served = serve(
        ["--plugin", "despina_backend_doubler", "--model-repository", str(model.parent)],
        tmp_path,
        env={
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")])
        },
    )
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{served.ports['http']}")
        x = np.array([1, 2, 3, 4], dtype=np.float32)
        request = httpclient.InferInput("X", [4], "FP32")
        request.set_data_from_numpy(x)
        result = client.infer("doubled", [request])
        np.testing.assert_array_equal(result.as_numpy("Y"), x * 2)
    finally:
        stop(served)
