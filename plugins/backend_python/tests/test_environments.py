"""EXECUTION_ENV_PATH (process mode) and concurrent ``async def execute`` (both modes)."""

from __future__ import annotations

import concurrent.futures
import io
import sys
import tarfile
from typing import Any

import numpy as np
import pytest

from .helpers import infer, pair
from .models import ADD_SUB_IO, add

ENV_MODEL = """
import os, sys
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy()),
             pb_utils.Tensor("OUTPUT1", r.inputs()[1].as_numpy())],
            parameters={"env": os.environ.get("DESPINA_TEST_ENV", ""), "python": sys.executable})
            for r in requests]
"""

CONCURRENT = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.running = 0
        self.most = 0

    async def execute(self, requests):
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.3)
        self.running -= 1
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([self.most], np.int32))])
                for r in requests]
"""

ASYNC_LIFECYCLE = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def initialize(self, args):
        await asyncio.sleep(0.01)
        self.marker = args["model_repository"] + "/finalized"

    async def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([7], np.int32))])
                for r in requests]

    def finalize(self):
        open(self.marker, "w").close()
"""

CONCURRENT_IO = """
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def packed_environment(marker: str) -> bytes:
    """A .tar.gz holding ``bin/python3``: a launcher of this interpreter that sets a marker."""
    script = f'#!/bin/sh\nexport DESPINA_TEST_ENV={marker}\nexec {sys.executable} "$@"\n'.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("bin/python3")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    return buffer.getvalue()


def test_execution_env_path(model_repository: Any, despina_server: Any, http_client: Any) -> None:
    extra = (
        'parameters { key: "EXECUTION_ENV_PATH" '
        'value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
    )
    add(model_repository, "in_env", ENV_MODEL, ADD_SUB_IO, "process", extra)
    (model_repository.root / "in_env" / "env.tar.gz").write_bytes(packed_environment("packed"))
    client = http_client(despina_server(model_repository.root))
    params = infer(client, "in_env", pair()).get_response()["parameters"]
    assert params["env"] == "packed"


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_async_execute_runs_requests_concurrently(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    import tritonclient.grpc as grpcclient

    add(model_repository, "concurrent", CONCURRENT, CONCURRENT_IO, mode)
    client = grpc_client(despina_server(model_repository.root))

    def one(_: int) -> int:
        tensor = grpcclient.InferInput("X", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], np.int32))
        return int(client.infer("concurrent", [tensor]).as_numpy("Y")[0])

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        most = max(pool.map(one, range(4)))
    assert most > 1  # one instance had several executions in flight


SHARED = """
import numpy as np
import triton_python_backend_utils as pb_utils

INITIALIZED = []

class TritonPythonModel:
    def initialize(self, args):
        INITIALIZED.append(args["model_instance_name"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([len(INITIALIZED)], np.int32))])
                for r in requests]
"""

BLOCKING_BLS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        pb_utils.InferenceRequest(model_name="shared", requested_output_names=["Y"],
                                  inputs=[requests[0].inputs()[0]]).exec()
        return []
"""


def test_in_process_instances_share_one_model(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    from tritonclient.utils import InferenceServerException

    extra = "instance_group [ { count: 3 kind: KIND_CPU } ]"
    add(model_repository, "shared", SHARED, CONCURRENT_IO, "in-process", extra)
    add(model_repository, "blocking", BLOCKING_BLS, CONCURRENT_IO, "in-process")
    running = despina_server(model_repository.root)
    assert len(running.server.models.get("shared").instances) == 3
    client = http_client(running)
    result = infer(client, "shared", {"X": np.array([1], np.int32)})
    assert int(result.as_numpy("Y")[0]) == 1  # initialize ran once for the three instances
    with pytest.raises(InferenceServerException) as error:
        infer(client, "blocking", {"X": np.array([1], np.int32)})
    assert "exec() would block the server's event loop" in error.value.message()


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_async_initialize_and_finalize(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """``async def initialize`` completes (nothing but the loop wakes the child's reader)
    and ``finalize`` runs when an async model unloads."""
    import tritonclient.http as httpclient

    add(model_repository, "lifecycle", ASYNC_LIFECYCLE, CONCURRENT_IO, mode)
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit", "--load-model=lifecycle"]
    )
    client = http_client(running)
    tensor = httpclient.InferInput("X", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], np.int32))
    assert int(client.infer("lifecycle", [tensor]).as_numpy("Y")[0]) == 7
    client.unload_model("lifecycle")
    assert (model_repository.root / "lifecycle" / "finalized").exists()
