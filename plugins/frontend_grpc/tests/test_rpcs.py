"""Every RPC of inference.GRPCInferenceService, and grpc.health.v1, through tritonclient.grpc."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.memory.cuda_memory import probe_cuda
from despina.testing import RunningServer
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = grpcclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def test_health_and_server_metadata(client: Any, server: RunningServer) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("nope")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == server.server.settings.id == "triton"
    assert metadata["version"] == server.server.version
    assert {"model_repository", "statistics", "system_shared_memory"} <= set(metadata["extensions"])


def test_standard_health_service(server: RunningServer) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            stub.Check(health_pb2.HealthCheckRequest(service="unknown.Service"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        assert (
            stub.Check(health_pb2.HealthCheckRequest()).status
            == health_pb2.HealthCheckResponse.SERVING
        )


def test_model_metadata_and_config(client: Any) -> None:
    metadata = client.get_model_metadata("add_sub", as_json=True)
    assert metadata["name"] == "add_sub"
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]},
        {"name": "INPUT1", "datatype": "FP32", "shape": ["-1", "16"]},
    ]
    assert [o["name"] for o in metadata["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    config = client.get_model_config("echo_bytes").config
    assert config.name == "echo_bytes"
    assert config.backend == "grpctest"
    assert config.input[0].data_type == grpcclient.model_config_pb2.TYPE_STRING
    assert config.parameters["mode"].string_value == "echo"


def test_model_infer_and_statistics(client: Any) -> None:
    a, b = np.arange(16, dtype=np.float32).reshape(1, 16), np.ones((1, 16), np.float32)
    result = client.infer("add_sub", add_sub_inputs(a, b), request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("add_sub", "1", "r1")
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
    assert stats[0]["name"] == "add_sub" and stats[0]["version"] == "1"
    assert int(stats[0]["inference_stats"]["success"]["count"]) >= 1
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {"add_sub", "echo_fp32", "decoupled"} <= {s["name"] for s in every}
    assert client.get_inference_statistics("add_sub", "1", as_json=True)["model_stats"]


def test_requested_outputs_only(client: Any) -> None:
    a = np.ones((1, 16), np.float32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", add_sub_inputs(a, a), outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


def test_repository_index_load_unload(serve: Callable[..., RunningServer]) -> None:
    running = serve("--model-control-mode=explicit", "--load-model=add_sub")
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["add_sub"]["state"] == "READY"
        assert "state" not in index["echo_fp32"]
        ready = client.get_model_repository_index(as_json=True)["models"]
        assert [m["name"] for m in ready if m.get("state") == "READY"] == ["add_sub"]
        client.load_model("echo_fp32")
        assert client.is_model_ready("echo_fp32")
        client.unload_model("echo_fp32")
        assert not client.is_model_ready("echo_fp32")
        client.unload_model("never_loaded")  # Triton answers OK
        # a config override, then file overrides (which need a config)
        config = json.dumps(
            {
                "name": "echo_fp32",
                "backend": "grpctest",
                "max_batch_size": 0,
                "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
                "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}],
                "parameters": {"mode": {"string_value": "echo"}},
            }
        )
        client.load_model("echo_fp32", config=config)
        assert client.get_model_config("echo_fp32").config.input[0].dims == [-1]
        client.load_model(
            "renamed", config=config.replace("echo_fp32", "renamed"), files={"file:1/.keep": b""}
        )
        assert client.is_model_ready("renamed")
        client.unload_model("add_sub", unload_dependents=True)
        assert not client.is_model_ready("add_sub")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("missing_model")
        assert info.value.status() != "StatusCode.OK"
        assert client.is_server_live()


def test_load_refused_without_explicit_mode(client: Any) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("add_sub")
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "explicit model load / unload is not allowed" in info.value.message()


def test_cuda_shared_memory_without_gpu(client: Any) -> None:
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("never_registered")
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("gpu_region", b"\0" * 64, 0, 64)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    # where cupy sees a device, 64 zero bytes are no IPC handle: Triton's "invalid args"
    expected = "invalid args" if probe_cuda().available else "GPUs not supported"
    assert expected in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.get_cuda_shared_memory_status("gpu_region")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_trace_settings(client: Any) -> None:
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"] == {"value": ["OFF"]}
    assert settings["trace_rate"] == {"value": ["1000"]}
    updated = client.update_trace_settings("add_sub", {"trace_rate": "20"}, as_json=True)
    assert updated["settings"]["trace_rate"] == {"value": ["20"]}
    assert client.get_trace_settings(as_json=True)["settings"]["trace_rate"] == {"value": ["1000"]}
    reset = client.update_trace_settings("add_sub", {"trace_rate": None}, as_json=True)
    assert reset["settings"]["trace_rate"] == {"value": ["1000"]}
    with pytest.raises(InferenceServerException) as info:
        client.get_trace_settings("nope")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_log_settings(client: Any) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    assert settings["log_format"] == {"string_param": "default"}
    updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)
    assert updated["settings"]["log_verbose_level"] == {"uint32_param": 1}
    client.update_log_settings({"log_verbose_level": 0})
    with pytest.raises(InferenceServerException) as info:
        client.update_log_settings({"log_file": "/tmp/elsewhere.log"})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert client.get_log_settings(as_json=True)["settings"]["log_file"] == {"string_param": ""}


def test_client_cancellation_is_logged_as_triton_logs_it(
    serve: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Triton's verbose line for a cancelled inference call (qa/L0_request_cancellation
    greps its start), once per cancelled ModelInfer and ModelStreamInfer."""
    running = serve("--log-verbose=1")
    long = [grpcclient.InferInput("IN", [1], "FP32")]
    long[0].set_data_from_numpy(np.array([20.0], np.float32))
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        future = client.async_infer("sleep", long, callback=lambda result, error: None)
        time.sleep(0.3)
        future.cancel()
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer("sleep", long)
        time.sleep(0.3)
        client.stop_stream(cancel_requests=True)
        deadline = time.monotonic() + 5
        expected = ["ModelInferHandler", "ModelStreamInferHandler"]
        while time.monotonic() < deadline and _cancellations(caplog) != expected:
            time.sleep(0.05)
    assert _cancellations(caplog) == expected


def _cancellations(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The handlers of the cancellation lines logged so far, in order."""
    prefix = "Cancellation notification received for "
    return [
        r.getMessage()[len(prefix) :].split(",")[0]
        for r in caplog.records
        if r.levelname == "DEBUG" and r.getMessage().startswith(prefix)
    ]
