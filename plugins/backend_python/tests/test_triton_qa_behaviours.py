"""Behaviours Triton's own Python-backend QA suite (``qa/L0_backend_python``) checks,
each in both execution modes: models without inputs, what a decoupled ``execute`` may
return, the response-sender rules of default models, BF16 through DLPack, multi-file
models, the log texts users grep for, and the ``triton_grpc_error`` stream header."""

from __future__ import annotations

import logging
import queue
import re
import subprocess
import sys
import time
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .models import add, config
from .qa_models import (
    ASYNC_DECOUPLED_RAISES,
    BF16,
    BF16_IO,
    BLS_IN_INITIALIZE,
    DECOUPLED_RETURNS,
    GRPC_ERROR,
    INIT_EXIT,
    MULTI_FILE,
    NO_INPUTS,
    NO_INPUTS_IO,
    SENDER,
    SENDER_IO,
)

MODES = ["process", "in-process"]


def int_input(value: int, protocol: Any = grpcclient) -> Any:
    tensor = protocol.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def stream_results(client: Any, model: str, values: list[int], **kwargs: Any) -> list[Any]:
    """Send ``values`` on one stream (``kwargs`` for each request); every (result,
    error) the callback got, in order."""
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    for value in values:
        client.async_stream_infer(model, [int_input(value)], **kwargs)
    client.stop_stream()
    return [got.get() for _ in range(got.qsize())]


@pytest.mark.parametrize("mode", MODES)
def test_a_model_without_inputs_loads_and_serves(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "no_inputs", NO_INPUTS, NO_INPUTS_IO, mode)
    client = http_client(despina_server(model_repository.root))
    assert client.get_model_metadata("no_inputs")["inputs"] == []
    assert client.infer("no_inputs", []).as_numpy("OUTPUT0").tolist() == [1.0]


@pytest.mark.parametrize("mode", MODES)
def test_default_model_response_sender_rules(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "sender", SENDER, SENDER_IO, mode)
    client = http_client(despina_server(model_repository.root))

    def infer(case: int) -> Any:
        return client.infer("sender", [int_input(case, httpclient)]).as_numpy("OUT").tolist()

    with pytest.raises(InferenceServerException) as failed:
        infer(0)
    assert "Non-decoupled model cannot send complete final before sending a response" in str(
        failed.value
    )
    assert infer(1) == [1]  # the second send raised in the model; one response only
    assert infer(2) == [3]  # sent from another thread after execute returned None
    assert infer(3) == [4]  # the sent response; returning another one fails execute only


@pytest.mark.parametrize("mode", MODES)
def test_decoupled_execute_must_return_none(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    extra = "model_transaction_policy { decoupled: true }"
    add(model_repository, "returns", DECOUPLED_RETURNS, SENDER_IO, mode, extra)
    client = grpc_client(despina_server(model_repository.root))
    [(result, error)] = stream_results(client, "returns", [1])
    assert result is None
    assert "Python model 'returns_0" in str(error)  # the instance's name
    assert "is using the decoupled mode and the execute function must return None." in str(error)


@pytest.mark.parametrize("mode", MODES)
def test_async_decoupled_execute_exception_is_logged(
    mode: str,
    model_repository: Any,
    despina_server: Any,
    grpc_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    extra = "model_transaction_policy { decoupled: true }"
    add(model_repository, "raises", ASYNC_DECOUPLED_RAISES, SENDER_IO, mode, extra)
    client = grpc_client(despina_server(model_repository.root))
    caplog.set_level(logging.ERROR)
    results = stream_results(client, "raises", [1], enable_empty_final_response=True)
    assert [error for _, error in results] == [None]  # the final flag, sent before raising
    # logged once the model raised, which may be after the client got its final flag
    deadline = time.monotonic() + 30
    while "ValueError" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "ValueError: wait_secs cannot be negative" in caplog.text
    assert "model.py" in caplog.text  # with the model's frames


@pytest.mark.parametrize("mode", MODES)
def test_bf16_crosses_dlpack_and_not_numpy(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "bf16", BF16, BF16_IO, mode)
    client = http_client(despina_server(model_repository.root))
    data = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    tensor = httpclient.InferInput("INPUT0", [2], "BF16").set_data_from_numpy(data)
    result = client.infer("bf16", [tensor])
    assert result.get_response()["outputs"][0]["datatype"] == "BF16"
    assert result.as_numpy("OUTPUT0").astype(np.float32).tolist() == [1.5, -2.0]


def test_pb_utils_does_not_import_torch() -> None:
    code = "import sys, triton_python_backend_utils; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("mode", MODES)
def test_multi_file_model_imports_relatively(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    for name, value in (("first", 1), ("second", 2)):  # same module names, other values
        model_repository.add(
            name,
            config(name, SENDER_IO, mode),
            {"1/model.py": MULTI_FILE, "1/helper.py": f"VALUE = {value}\n"},
        )
    client = http_client(despina_server(model_repository.root))
    for name, value in (("first", 1), ("second", 2)):
        result = client.infer(name, [int_input(0, httpclient)])
        assert result.as_numpy("OUT").tolist() == [value]


def test_model_process_exiting_in_initialize_is_an_unhealthy_stub(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """Process mode only: in-process, such a model would end the server itself."""
    add(model_repository, "init_exit", INIT_EXIT, SENDER_IO)
    running = despina_server(model_repository.root, ["--model-control-mode=explicit"])
    with pytest.raises(InferenceServerException) as failed:
        http_client(running).load_model("init_exit")
    # the instance's name (init_exit_0_0 in Triton, and here once groups name it so)
    assert re.search(r"Stub process 'init_exit_0(_0)?' is not healthy\.", str(failed.value))


@pytest.mark.parametrize("mode", MODES)
def test_triton_grpc_error_header_ends_the_stream_with_its_status(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    add(model_repository, "errs", GRPC_ERROR, SENDER_IO, mode)
    running = despina_server(model_repository.root)
    # without the header: the error is a message in the stream, which goes on
    results = stream_results(grpc_client(running), "errs", [-1, 1])
    assert "negative input" in str(results[0][1])
    assert results[1][0].as_numpy("OUT").tolist() == [1]
    # with it: the first error ends the stream with its gRPC status
    client = grpc_client(running)
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    headers = {"triton_grpc_error": "true"}
    client.start_stream(callback=lambda result, error: got.put((result, error)), headers=headers)
    client.async_stream_infer("errs", [int_input(1)])
    assert got.get(timeout=30)[0].as_numpy("OUT").tolist() == [1]
    client.async_stream_infer("errs", [int_input(-1)])
    result, error = got.get(timeout=30)
    assert result is None and str(error.status()) == "StatusCode.INTERNAL"
    assert "negative input" in error.message()
    with pytest.raises(InferenceServerException):  # the stream is over
        client.async_stream_infer("errs", [int_input(1)])
    client.stop_stream()


@pytest.mark.parametrize("mode", MODES)
def test_bls_is_refused_in_initialize(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "bls_init", BLS_IN_INITIALIZE, SENDER_IO, mode)
    running = despina_server(model_repository.root, ["--model-control-mode=explicit"])
    with pytest.raises(InferenceServerException) as failed:
        http_client(running).load_model("bls_init")
    assert "BLS is only supported during the 'execute' function." in str(failed.value)
