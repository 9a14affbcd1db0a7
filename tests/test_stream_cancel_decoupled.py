"""A gRPC ModelStreamInfer client that cancels (closes its stream) while a decoupled
Python model still sends responses: the server keeps serving, the model's later
``send()`` calls fail cleanly or are dropped and ``is_cancelled()`` tells it (Triton's
``response_sender.is_cancelled()``), and no exception reaches the event loop (pytest
turns unraisable exceptions and warnings into errors)."""

from __future__ import annotations

import json
import logging
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_backend_python")

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}
"""

#: Sends IN[0] responses 20 ms apart from a thread, then the final flag; writes what
#: each send did to LOG (sent / sent-after-cancel / the exception's type).
MODEL = """
import json, os, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

LOG = {log!r}


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.send_all, args=(sender, count)).start()
        return None

    def send_all(self, sender, count):
        outcomes = []
        for i in range(count):
            cancelled = sender.is_cancelled()
            try:
                out = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                outcomes.append("sent-after-cancel" if cancelled else "sent")
            except Exception as exc:
                outcomes.append("error:" + type(exc).__name__)
            time.sleep(0.02)
        outcomes.append("cancelled" if sender.is_cancelled() else "not-cancelled")
        try:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            outcomes.append("final")
        except Exception as exc:
            outcomes.append("final-error:" + type(exc).__name__)
        with open(LOG + ".tmp", "w") as f:
            json.dump(outcomes, f)
        os.replace(LOG + ".tmp", LOG)
"""

COUNT = 40


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _count(value: int) -> list[Any]:
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return [tensor]


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_stream_cancelled_while_decoupled_model_sends(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    import tritonclient.grpc as grpcclient

    log = tmp_path / "sends.json"
    model_repository.add(
        "chatty",
        CONFIG.format(name="chatty", mode=mode),
        {"1/model.py": MODEL.format(log=str(log))},
    )
    running = despina_server(
        model_repository.root,
        args=["--grpc-address=127.0.0.1", "--allow-http=false", "--allow-metrics=false"],
    )
    caplog.set_level(logging.ERROR)
    received: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(running.grpc_url)
    client.start_stream(callback=lambda result, error: received.put(error or result))
    client.async_stream_infer("chatty", _count(COUNT))
    first = received.get(timeout=30)
    assert not isinstance(first, Exception), first
    client.stop_stream(cancel_requests=True)  # the client cancels its stream
    client.close()
    _wait_for(log.exists)
    outcomes = json.loads(log.read_text())
    assert len(outcomes) == COUNT + 2
    sends, cancelled, final = outcomes[:COUNT], outcomes[COUNT], outcomes[COUNT + 1]
    # the model learned of the cancellation; sends after it were dropped or failed
    # cleanly (an exception raised to the model), never crashing anything
    assert cancelled == "cancelled", outcomes
    assert sends[0] == "sent"
    assert set(sends) <= {"sent", "sent-after-cancel", "error:TritonModelException"}, sends
    assert final in {"final", "final-error:TritonModelException"}, final
    assert sends[-1] != "sent", sends
    print(
        f"\n{mode}: {sends.count('sent')} sends before the cancellation was seen, "
        f"then {sorted(set(sends[sends.count('sent') :]))}; final: {final}"
    )
    # the server serves on: a new stream gets every response of the same model
    again = grpcclient.InferenceServerClient(running.grpc_url)
    answers: queue.Queue[Any] = queue.Queue()
    log.unlink()
    again.start_stream(callback=lambda result, error: answers.put(error or result))
    again.async_stream_infer("chatty", _count(3))
    values = [answers.get(timeout=30) for _ in range(3)]
    assert [int(v.as_numpy("OUT")[0]) for v in values] == [0, 1, 2]
    again.stop_stream()
    again.close()
    _wait_for(log.exists)
    assert json.loads(log.read_text()) == ["sent", "sent", "sent", "not-cancelled", "final"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
