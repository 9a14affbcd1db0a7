"""A full ``/dev/shm`` fails the request, never a process (process mode).

Docker gives a container a 64 MB ``/dev/shm`` by default, as large as the default HTTP
body limit. Tensors over 1 MB travel between the server and a model's process in a
segment of their own there; written to a sparse segment on a full tmpfs, they killed the
writing process with SIGBUS: the server itself for inputs, the model's process for
outputs. Now segments are allocated first and the request gets Triton's error ("Failed
to increase the shared memory pool size for key ..."); a BLS request that finds no room,
for its inputs in the calling model's process or for its outputs in the server, gets a
response carrying that error, as Triton's. The server runs in a mount namespace of its
own with a small tmpfs on ``/dev/shm`` (``unshare -m``, root only; skipped elsewhere).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, free_port
from tritonclient.utils import InferenceServerException

SHM_MB = 72  # two process-mode instances' 8 MB rings leave about 40 MB for segments

TILE_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] },
       { name: "REPEAT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] }]
"""

IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }'

BLS_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "MEGABYTES" data_type: TYPE_INT32 dims: [ 1 ] },
       { name: "REPEAT" data_type: TYPE_INT32 dims: [ 1 ] },
       { name: "DECOUPLED" data_type: TYPE_BOOL dims: [ 1 ] }]
output [{ name: "ANSWERS" data_type: TYPE_STRING dims: [ -1 ] }]
"""

# Calls tile_here (in-process: its outputs are packed by the server for this process)
# with MEGABYTES of data made here; answers each BLS response's error text, or "ok".
BLS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0]
            data = np.ones(int(value("MEGABYTES")) << 20, np.uint8)
            call = pb_utils.InferenceRequest(
                model_name="tile_here",
                inputs=[pb_utils.Tensor("INPUT0", data),
                        pb_utils.Tensor("REPEAT", np.array([value("REPEAT")], np.int32))],
                requested_output_names=["OUTPUT0"])
            got = list(call.exec(decoupled=True)) if value("DECOUPLED") else [call.exec()]
            answers = [r.error().message() if r.has_error() else "ok" for r in got]
            out = pb_utils.Tensor("ANSWERS", np.array(answers, dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

TILE_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            repeat = int(pb_utils.get_input_tensor_by_name(request, "REPEAT").as_numpy()[0])
            tiled = pb_utils.Tensor("OUTPUT0", np.tile(data, repeat))
            responses.append(pb_utils.InferenceResponse([tiled]))
        return responses
"""


def _can_mount_private_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    return subprocess.run(["unshare", "-m", "sh", "-c", probe], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(
    not _can_mount_private_tmpfs(),
    reason="needs `unshare -m` and mount (root) to give the server a small /dev/shm",
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpclient.InferenceServerClient]:
    repository = RepositoryBuilder(tmp_path / "models")
    repository.add("tile", TILE_CONFIG, {"1/model.py": TILE_MODEL})
    repository.add("tile_here", TILE_CONFIG + IN_PROCESS, {"1/model.py": TILE_MODEL})
    repository.add("bls", BLS_CONFIG, {"1/model.py": BLS_MODEL})
    port = free_port()
    serve = (
        f"mount -t tmpfs -o size={SHM_MB}m tmpfs /dev/shm && exec {sys.executable} -m despina "
        f"serve --model-repository={repository.root} --http-address=127.0.0.1 "
        f"--http-port={port} --allow-grpc=false --allow-metrics=false "
        "--http-max-input-size=200000000"
    )
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(["unshare", "-m", "sh", "-c", serve], stderr=log)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
    try:
        deadline = time.monotonic() + 60
        while not _ready(client):
            assert process.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        yield client
        assert process.poll() is None, "the server died"
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(client: httpclient.InferenceServerClient) -> bool:
    try:
        return bool(client.is_model_ready("tile"))
    except (OSError, InferenceServerException):
        return False


def _tile(client: httpclient.InferenceServerClient, megabytes: int, repeat: int) -> np.ndarray:
    data = np.arange(megabytes << 20, dtype=np.uint64).astype(np.uint8)
    inputs = [httpclient.InferInput("INPUT0", [data.size], "UINT8")]
    inputs.append(httpclient.InferInput("REPEAT", [1], "INT32"))
    inputs[0].set_data_from_numpy(data)
    inputs[1].set_data_from_numpy(np.array([repeat], np.int32))
    out = client.infer("tile", inputs).as_numpy("OUTPUT0")
    assert out is not None
    assert np.array_equal(out, np.tile(data, repeat))
    return out


@pytest.mark.parametrize(
    ("megabytes", "repeat", "side"),
    [(50, 1, "inputs, written by the server"), (15, 3, "outputs, written by the model")],
)
def test_no_room_for_a_tensor_fails_the_request_and_both_processes_serve_on(
    client: httpclient.InferenceServerClient, megabytes: int, repeat: int, side: str
) -> None:
    _tile(client, 2, 2)
    with pytest.raises(InferenceServerException) as refused:
        _tile(client, megabytes, repeat)
    message = str(refused.value)
    assert "Failed to increase the shared memory pool size" in message, (side, message)
    wanted = re.search(r"pool size for key '[^']+' to (\d+) bytes", message)
    assert wanted is not None and int(wanted[1]) >= megabytes * repeat << 20, message
    assert "--shm-size" in message
    # the same instance (no restart: it would answer 503 while restarting) serves on
    for _ in range(3):
        _tile(client, 2, 2)


@pytest.mark.parametrize("decoupled", [False, True], ids=["exec", "exec-decoupled"])
@pytest.mark.parametrize(
    ("megabytes", "repeat"),
    [(50, 1), (10, 4)],
    ids=["inputs, written by the calling model", "outputs, written by the server"],
)
def test_bls_request_without_room_gets_an_error_response(
    client: httpclient.InferenceServerClient, megabytes: int, repeat: int, decoupled: bool
) -> None:
    def answers(megabytes: int, repeat: int) -> list[str]:
        inputs = []
        for name, value in (("MEGABYTES", megabytes), ("REPEAT", repeat)):
            tensor = httpclient.InferInput(name, [1], "INT32")
            tensor.set_data_from_numpy(np.array([value], np.int32))
            inputs.append(tensor)
        inputs.append(httpclient.InferInput("DECOUPLED", [1], "BOOL"))
        inputs[-1].set_data_from_numpy(np.array([decoupled]))
        out = client.infer("bls", inputs).as_numpy("ANSWERS")
        assert out is not None
        return [answer.decode() for answer in out]

    assert answers(2, 2) == ["ok"]
    (error,) = answers(megabytes, repeat)  # one response (one error ends a decoupled call)
    assert error.startswith("Failed to increase the shared memory pool size for key '"), error
    assert answers(2, 2) == ["ok"]
