"""``--http-worker-processes``: worker processes parse HTTP and forward to the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from despina.testing import RunningServer

from .helpers import INFER, add_sub_inputs, expect_error, infer_ok, raw


def test_workers_serve_every_endpoint_kind(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    running = serve(
        "--http-worker-processes=2",
        "--http-max-input-size=100000",
        "--http-restricted-api=model-repository:admin-key=secret",
        "--http-header-forward-pattern=^x-fwd",
    )
    client = http_client(running)
    assert client.is_server_ready() and client.get_server_metadata()["name"] == "triton"
    assert client.get_model_config("add_sub")["name"] == "add_sub"
    for binary in (True, False):
        inputs, a, b = add_sub_inputs(binary=binary)
        outputs = [
            httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary) for i in range(2)
        ]
        result = client.infer(
            "add_sub", inputs, outputs=outputs, headers={"X-Fwd-Who": "me"}, parameters={"echo": 1}
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        assert result.get_response()["parameters"] == {"echo": 1, "x-fwd-who": "me"}
    inputs, a, b = add_sub_inputs(n=4096)
    result = client.infer(
        "add_sub",
        inputs,
        request_compression_algorithm="gzip",
        response_compression_algorithm="deflate",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    expect_error(
        lambda: client.infer("nope", inputs), 404, "Request for unknown model: 'nope' is not found"
    )
    expect_error(client.get_model_repository_index, 403, "expecting header 'admin-key'")
    assert client.get_model_repository_index(headers={"admin-key": "secret"})
    status, answer = raw(running, INFER, b"{" + b" " * 200_000 + b"}")
    assert status == 413 and "--http-max-input-size" in answer["error"]
    status, answer = raw(running, INFER, b"{bad")
    assert status == 400 and "failed to parse the request JSON buffer" in answer["error"]
    assert (
        client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["success"][
            "count"
        ]
        == 3
    )
    infer_ok(client)
