"""Every non-inference endpoint through tritonclient.http, errors followed by a success."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from despina.testing import RunningServer

from .helpers import expect_error, infer_ok


def test_health_and_server_metadata(server: RunningServer, http_client: Callable[..., Any]) -> None:
    client = http_client(server)
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    assert "binary_tensor_data" in metadata["extensions"]
    cuda = server.server.shared_memory.cuda_support().available  # cupy sees a device
    assert ("cuda_shared_memory" in metadata["extensions"]) == cuda


def test_server_id_is_the_metadata_name(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    client = http_client(serve("--id=despina-test"))
    assert client.get_server_metadata()["name"] == "despina-test"


def test_model_metadata_ready_and_config(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    metadata = client.get_model_metadata("batched")
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}
    assert client.get_model_metadata("batched", "1")["name"] == "batched"
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("nope")
    config = client.get_model_config("labelled")
    assert config["max_batch_size"] == 8
    assert config["output"][0]["label_filename"] == "labels.txt"
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert client.get_model_config("labelled", "1")["name"] == "labelled"


@pytest.mark.parametrize(
    ("call", "status", "message"),
    [
        (
            lambda c: c.get_model_metadata("nope"),
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (
            lambda c: c.get_model_metadata("add_sub", "7"),
            404,
            "Request for unknown model: 'add_sub' version 7 is not found",
        ),
        (
            lambda c: c.get_model_config("nope"),
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        (lambda c: c.get_model_metadata("add_sub", "x"), 404, "Not Found"),
        (
            lambda c: c.get_inference_statistics("nope"),
            400,
            "requested model 'nope' is not available",
        ),
        (
            lambda c: c.get_inference_statistics("add_sub", "9"),
            400,
            "requested model version is not available for model 'add_sub'",
        ),
        (
            lambda c: c.load_model("add_sub"),
            503,
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (
            lambda c: c.unload_model("add_sub"),
            503,
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (lambda c: c.get_trace_settings("nope"), 400, "Request for unknown model : nope"),
        (
            lambda c: c.update_log_settings({"log_file": "/tmp/elsewhere.log"}),
            400,
            "log_file cannot be changed",
        ),
        (lambda c: c.update_log_settings({"log_verbose_level": "loud"}), 400, "log_verbose_level"),
        (
            lambda c: c.update_trace_settings(settings={"trace_file": "/etc/x"}),
            400,
            "trace_file cannot be changed",
        ),
    ],
)
def test_endpoint_errors_then_success(
    server: RunningServer, http_client: Callable[..., Any], call: Any, status: int, message: str
) -> None:
    client = http_client(server)
    expect_error(lambda: call(client), status, message)
    infer_ok(client)


def test_statistics_count_inferences(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    infer_ok(client)
    infer_ok(client)
    stats = client.get_inference_statistics("add_sub")["model_stats"]
    assert [s["name"] for s in stats] == ["add_sub"]
    assert stats[0]["inference_stats"]["success"]["count"] == 2
    assert stats[0]["inference_count"] == 2
    assert client.get_inference_statistics("add_sub", "1")["model_stats"][0]["version"] == "1"
    everything = client.get_inference_statistics()["model_stats"]
    assert {"add_sub", "batched", "echo_fp32"} <= {s["name"] for s in everything}


def test_logging_settings(server: RunningServer, http_client: Callable[..., Any]) -> None:
    client = http_client(server)
    assert client.get_log_settings()["log_info"] is True
    updated = client.update_log_settings({"log_verbose_level": 1, "log_info": False})
    assert updated["log_verbose_level"] == 1 and updated["log_info"] is False
    assert client.get_log_settings()["log_verbose_level"] == 1
    client.update_log_settings({"log_verbose_level": 0, "log_info": True})


def test_trace_settings_global_and_per_model(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
    assert client.get_trace_settings()["trace_rate"] == "1000"
    updated = client.update_trace_settings(
        "add_sub", {"trace_rate": "5", "trace_level": ["TIMESTAMPS"]}
    )
    assert updated["trace_rate"] == "5" and updated["trace_level"] == ["TIMESTAMPS"]
    assert client.get_trace_settings("add_sub")["trace_rate"] == "5"
    assert client.get_trace_settings()["trace_rate"] == "1000"
    client.update_trace_settings(settings={"trace_count": "10"})
    assert client.get_trace_settings()["trace_count"] == "10"


def test_repository_index_load_and_unload(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    running = serve("--model-control-mode=explicit", "--load-model=add_sub")
    client = http_client(running)
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["add_sub"]["state"] == "READY" and "state" not in index["batched"]
    assert [
        r["name"] for r in client.get_model_repository_index() if r.get("state") == "READY"
    ] == ["add_sub"]
    client.load_model("batched")
    assert client.is_model_ready("batched")
    client.unload_model("batched")
    assert not client.is_model_ready("batched")
    expect_error(lambda: client.load_model("nope"), 404, "nope")
    infer_ok(client)


def test_load_with_config_and_file_overrides(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    client = http_client(serve("--model-control-mode=explicit"))
    config_json = json.dumps(
        {
            "name": "fresh",
            "backend": "httptest",
            "max_batch_size": 0,
            "input": [
                {"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [3]} for i in range(2)
            ],
            "output": [
                {"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [3]} for i in range(2)
            ],
        }
    )
    client.load_model("fresh", config=config_json, files={"file:1/model.httptest": b""})
    assert client.get_model_metadata("fresh")["inputs"][0]["shape"] == [3]
    expect_error(
        lambda: client.load_model("evil", config=config_json, files={"file:../../escape": b"x"}),
        400,
        "invalid file override path",
    )
    client.unload_model("fresh", unload_dependents=True)
    assert not client.is_model_ready("fresh")


def test_unknown_path_is_triton_404(server: RunningServer) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://{server.http_url}/v2/nothing")
    assert info.value.code == 404
    assert json.loads(info.value.read()) == {"error": "Not Found"}
