"""A client can never register shared memory the server (or a model process) created.

A real ``despina serve`` with ``--allow-client-shm=true`` and process-mode Python models.
The attacker, on the same host as shared-memory clients are, finds the server's regions
in /dev/shm (whatever their names: the files the server's processes map), and tries to
register each over HTTP and gRPC, then a hard link and a rename of them under names of
its own, before and after the server unlinked its own names: every try is refused
(400 / INVALID_ARGUMENT). A segment of a large request waiting for its busy model process
is refused too, and so is a hard link to it once the model process took it. A region the
client created itself still registers and serves inference on both protocols.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, free_port

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402

SHM_DIR = "/dev/shm"
REFUSAL = "Invalid shared memory region"
#: Elements of a request large enough for a segment of its own (over the 1 MiB ring limit).
LARGE = 300_000

IO = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

#: Echoes IN; sleeps 3 s when IN[0] is 1 (to keep its process busy).
ECHO = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if data.size and data[0] == 1:
                time.sleep(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return out
"""

#: Initializes once the file FLAG exists (at most 60 s).
SLOW_INIT = """
import os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        deadline = time.monotonic() + 60
        while not os.path.exists(FLAG) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""


class Served:
    """The running server: its process and clients of both protocols."""

    def __init__(
        self, process: subprocess.Popen[bytes], ports: tuple[int, int], flag: Path
    ) -> None:
        self.process = process
        #: The file that lets model "slow_init" finish initializing.
        self.flag = flag
        http_port, grpc_port = ports
        self.url = f"127.0.0.1:{http_port}"
        self.http = httpclient.InferenceServerClient(self.url)
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")

    def model_pids(self) -> list[int]:
        """The server's model processes."""
        pids = []
        for task in os.listdir(f"/proc/{self.process.pid}/task"):
            children = Path(f"/proc/{self.process.pid}/task/{task}/children").read_text()
            pids.extend(int(pid) for pid in children.split())
        return pids

    def mapped_shm(self, deleted: bool = False) -> set[str]:
        """The /dev/shm files the model processes map, by their current names (and with
        ``deleted``, the names they had)."""
        found = set()
        for pid in self.model_pids():
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:  # exited since the listing
                continue
            for line in maps.splitlines():
                path = line.split(maxsplit=5)[-1]
                gone = path.endswith(" (deleted)")
                if path.startswith(SHM_DIR + "/") and (deleted or not gone):
                    found.add(path.removesuffix(" (deleted)"))
        return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("repo")
    flag = root / "initialize-now"
    repo = RepositoryBuilder(root / "models")
    repo.add("echo", IO, {"1/model.py": ECHO})
    repo.add("slow_init", IO, {"1/model.py": f"FLAG = {str(flag)!r}\n{SLOW_INIT}"})
    http_port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "despina",
            "serve",
            f"--model-repository={repo.root}",
            "--model-control-mode=explicit",
            "--load-model=echo",
            "--allow-client-shm=true",
            "--http-address=127.0.0.1",
            f"--http-port={http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--allow-metrics=false",
        ],
        stderr=subprocess.DEVNULL,
    )
    running = Served(process, (http_port, grpc_port), flag)
    try:
        _wait_for(lambda: _quietly(running.http.is_server_ready), 60)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _quietly(check: Callable[[], Any]) -> Any:
    try:
        return check()
    except (InferenceServerException, OSError):  # not listening yet
        return False


def _wait_for(check: Callable[[], Any], seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.02)
    raise AssertionError("timed out")


def _key(path: str) -> str:
    """The shm_open key of a /dev/shm path."""
    return "/" + os.path.relpath(path, SHM_DIR)


def _assert_refused(served: Served, path: str) -> None:
    """Registering ``path`` is refused over HTTP (400) and gRPC (INVALID_ARGUMENT)."""
    name = f"attack_{uuid.uuid4().hex[:8]}"
    with pytest.raises(InferenceServerException) as http_error:
        served.http.register_system_shared_memory(name, _key(path), 64)
    assert http_error.value.status() == "400"
    assert REFUSAL in http_error.value.message()
    with pytest.raises(InferenceServerException) as grpc_error:
        served.grpc.register_system_shared_memory(name, _key(path), 64)
    assert grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert REFUSAL in grpc_error.value.message()
    assert served.http.get_system_shared_memory_status() == []


def _attacker_name() -> str:
    return os.path.join(SHM_DIR, f"despina_test_attacker_{uuid.uuid4().hex}")


def test_the_model_process_rings_are_refused_by_any_name(served: Served) -> None:
    loader = httpclient.InferenceServerClient(served.url)  # one client per thread
    loading = threading.Thread(target=loader.load_model, args=("slow_init",))
    before = served.mapped_shm()
    loading.start()
    try:
        rings = _wait_for(lambda: sorted(served.mapped_shm() - before), 30)
        ring = rings[0]
        assert stat.S_IMODE(os.stat(ring).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(ring)).st_mode) == 0o700
        _assert_refused(served, ring)
        link, moved = _attacker_name(), _attacker_name()
        os.link(ring, link)
        _assert_refused(served, link)  # the original name still exists
        os.rename(rings[-1], moved)
    finally:
        served.flag.touch()
        loading.join(60)
    try:
        assert served.http.is_model_ready("slow_init")
        assert not os.path.exists(ring)  # unlinked by the server once mapped
        _assert_refused(served, link)  # the ring lives on under the attacker's name only
        _assert_refused(served, moved)
    finally:
        os.unlink(link)
        os.unlink(moved)


def test_a_waiting_request_segment_is_refused_and_so_is_its_hard_link(served: Served) -> None:
    """A large request queued for a busy model process waits in a segment of its own."""
    private = {os.path.dirname(path) for path in served.mapped_shm(deleted=True)}
    busy = threading.Thread(target=_infer_http, args=(served.url, np.ones(4, np.float32)))
    large = np.arange(LARGE, dtype=np.float32)
    queued = threading.Thread(target=_infer_http, args=(served.url, large))
    busy.start()
    time.sleep(0.5)
    queued.start()
    link = _attacker_name()
    try:
        segment = _wait_for(lambda: _segments(private), 10)[0]
        assert stat.S_IMODE(os.stat(segment).st_mode) == 0o600
        os.link(segment, link)
        _assert_refused(served, segment)
        _assert_refused(served, link)
    finally:
        busy.join(30)
        queued.join(30)
    try:
        assert not os.path.exists(segment)  # taken by the model process
        _assert_refused(served, link)  # the model process told the server of the link
    finally:
        os.unlink(link)


def _segments(private: set[str]) -> list[str]:
    return [
        os.path.join(folder, name)
        for folder in private
        for name in os.listdir(folder)
        if re.search(r"p_[0-9]+$", name)  # server to model process, not a ring
    ]


def _infer_http(url: str, data: np.ndarray) -> None:
    """Infer ``data`` on "echo" with a client of this thread's own."""
    tensor = httpclient.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data, binary_data=True)
    httpclient.InferenceServerClient(url).infer("echo", [tensor])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_region_of_the_client_still_serves(served: Served, protocol: str) -> None:
    client, module = (served.http, httpclient) if protocol == "http" else (served.grpc, grpcclient)
    data = np.arange(16, dtype=np.float32)
    key = f"/despina_test_client_{uuid.uuid4().hex}"
    region = shm.create_shared_memory_region("mine", key, 2 * data.nbytes)
    try:
        shm.set_shared_memory_region(region, [data])
        client.register_system_shared_memory("mine", key, 2 * data.nbytes)
        tensor = module.InferInput("IN", [16], "FP32")
        tensor.set_shared_memory("mine", data.nbytes)
        output = module.InferRequestedOutput("OUT")
        output.set_shared_memory("mine", data.nbytes, offset=data.nbytes)
        client.infer("echo", [tensor], outputs=[output])
        got = shm.get_contents_as_numpy(region, np.float32, [16], offset=data.nbytes)
        np.testing.assert_array_equal(got, data)
    finally:
        client.unregister_system_shared_memory("mine")
        shm.destroy_shared_memory_region(region)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_key_with_a_nul_byte_is_the_clients_mistake(served: Served, protocol: str) -> None:
    """Found by the fuzz run of bench/shm_register_fuzz.py (it was a 500)."""
    client = served.http if protocol == "http" else served.grpc
    with pytest.raises(InferenceServerException) as error:
        client.register_system_shared_memory("nul", "/despina_test\x00key", 64)
    assert error.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert "invalid key" in error.value.message()
