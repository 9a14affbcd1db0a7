"""Helpers shared by the HTTP frontend's tests: requests, error assertions, the front."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RunningServer
from tritonclient.utils import InferenceServerException


def add_sub_inputs(binary: bool = True, n: int = 16) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """INPUT0 = 0..n-1, INPUT1 = 1 for the add_sub model (FP32 [n])."""
    a = np.arange(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [n], "FP32"),
        httpclient.InferInput("INPUT1", [n], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs, a, b


def infer_ok(client: Any) -> None:
    """One successful add_sub inference: the server kept serving."""
    inputs, a, b = add_sub_inputs()
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def expect_error(call: Callable[[], Any], status: int, message: str) -> InferenceServerException:
    """``call`` fails with this HTTP status and a message containing ``message``."""
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == str(status), info.value.message()
    assert message in info.value.message(), info.value.message()
    return info.value


INFER = "/v2/models/add_sub/infer"


def raw(
    server: RunningServer,
    path: str,
    body: bytes | Iterable[bytes],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a raw body (an iterable is sent chunked); return (status, JSON answer)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        chunked = not isinstance(body, bytes)
        connection.request("POST", path, body=body, headers=headers or {}, encode_chunked=chunked)
        response = connection.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else {}
    finally:
        connection.close()


def front_of(server: RunningServer) -> Any:
    """``server``'s :class:`~despina_frontend_http.h1_server.Front` (the port's listener)."""
    frontend = next(f for f in server.server.frontends if f.name == "http")
    return frontend._front
