"""End to end across plugins: a decoupled Python-backend model (a word streamer, as LLM
models are written for Triton) answering Triton's ``/generate`` and ``/generate_stream``."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from despina.testing import RepositoryBuilder, RunningServer, http_post

pytest.importorskip("despina_backend_python")

STREAMER = """
import os
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            params = json.loads(request.parameters())
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, text.reshape(-1)[0], params)).start()
        return None

    def stream(self, sender, text, params):
        for word in text.split():
            if sender.is_cancelled():
                with open(params["cancelled_marker"] + ".tmp", "w") as marker:
                    marker.write("cancelled")
                os.replace(params["cancelled_marker"] + ".tmp", params["cancelled_marker"])
                return
            if word == b"boom":
                error = pb_utils.TritonError("boom: no such word", pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error))
                continue
            if word == b"wait":
                time.sleep(0.05)
                continue
            if params.get("upper"):
                word = word.upper()
            # "debug" is not in the config: no client sees it (the request named no outputs)
            sender.send(pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", np.array([word], dtype=np.object_)),
                 pb_utils.Tensor("debug", np.array([len(word)], dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

CONFIG = """
name: "streamer"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "%s" } }
"""

#: Shutdown waits half the exit timeout for open streams (see test_shutdown_...).
LOCAL = [
    "--http-address=127.0.0.1",
    "--allow-grpc=false",
    "--allow-metrics=false",
    "--exit-timeout-secs=4",
]


@pytest.fixture(params=["process", "in-process"])
def server(
    request: pytest.FixtureRequest,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
) -> RunningServer:
    mode = request.param
    source = "import json\n" + STREAMER
    model_repository.add("streamer", CONFIG % mode, {"1/model.py": source})
    return despina_server(model_repository.root, args=LOCAL)


def post(server: RunningServer, path: str, body: dict[str, object]) -> tuple[int, str, bytes]:
    return http_post(server.http_port, f"/v2/models/streamer/{path}", json.dumps(body))


def events(raw: bytes) -> list[dict[str, object]]:
    """The JSON objects of a server-sent-events body (every event is ``data: ...\\n\\n``)."""
    assert raw.endswith(b"\n\n") or raw == b""
    chunks = raw.split(b"\n\n")[:-1]
    assert all(c.startswith(b"data: ") for c in chunks)
    return [json.loads(c[len(b"data: ") :]) for c in chunks]


def word(text: str) -> dict[str, object]:
    return {"model_name": "streamer", "model_version": "1", "text_output": text}


def test_generate_stream_sends_one_event_per_response(server: RunningServer) -> None:
    status, kind, raw = post(
        server, "generate_stream", {"text_input": "the quick fox", "parameters": {"upper": True}}
    )
    assert (status, kind) == (200, "text/event-stream; charset=utf-8")
    assert events(raw) == [word("THE"), word("QUICK"), word("FOX")]


def test_generate_stream_error_responses_are_error_events(server: RunningServer) -> None:
    status, _, raw = post(server, "generate_stream", {"text_input": "a boom c"})
    assert status == 200
    assert events(raw) == [word("a"), {"error": "boom: no such word"}, word("c")]
    status, kind, raw = post(server, "generate_stream", {"text_input": "boom c"})
    assert (status, kind) == (400, "text/event-stream; charset=utf-8")  # the first one's status
    assert events(raw) == [{"error": "boom: no such word"}, word("c")]


def test_generate_stream_with_no_response_is_an_empty_stream(server: RunningServer) -> None:
    status, _, raw = post(server, "generate_stream", {"text_input": "wait"})
    assert status == 200 and raw == b""


def test_generate_needs_exactly_one_response(server: RunningServer) -> None:
    status, _, raw = post(server, "generate", {"id": "q1", "text_input": "one"})
    assert status == 200
    assert json.loads(raw) == {"id": "q1", **word("one")}
    for text in ("two words", "wait"):
        status, kind, raw = post(server, "generate", {"text_input": text})
        assert (status, kind) == (400, "application/json")
        assert json.loads(raw)["error"].startswith("generate expects model to produce exactly 1")


def test_a_client_leaving_a_stream_cancels_its_request(
    server: RunningServer, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    text = " ".join(["w", "wait"] * 400)  # ~20 s of words unless cancelled
    body = {"text_input": text, "parameters": {"cancelled_marker": str(marker)}}
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    connection.request("POST", "/v2/models/streamer/generate_stream", body=json.dumps(body))
    response = connection.getresponse()
    assert response.status == 200
    assert (
        response.readline()
        == b'data: {"model_name":"streamer","model_version":"1","text_output":"w"}\n'
    )
    connection.close()
    deadline = time.monotonic() + 15
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "cancelled"
    status, _, raw = post(server, "generate", {"text_input": "still"})
    assert (status, json.loads(raw)) == (200, word("still"))


def test_shutdown_ends_an_open_stream_with_an_error(server: RunningServer) -> None:
    """The model would stream for ~20 s; shutdown waits half of --exit-timeout-secs for it,
    then ends the stream with an error event (not a cut connection) and stops."""
    text = " ".join(["w", "wait"] * 400)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    connection.request(
        "POST", "/v2/models/streamer/generate_stream", json.dumps({"text_input": text})
    )
    response = connection.getresponse()
    assert response.readline().startswith(b"data: ")
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    rest = events(response.read().split(b"\n", 1)[1])  # the rest, after the first event's line
    stopping.join(60)
    connection.close()
    assert rest[-1] == {"error": "model 'streamer' was unloaded before the request completed"}
    assert all(e == word("w") for e in rest[:-1])
