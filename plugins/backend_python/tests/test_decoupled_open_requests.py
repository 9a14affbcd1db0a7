"""A decoupled model's open requests are tracked until their final response only: one
that ``execute`` failed leaves nothing behind (the unload-time settling reads this)."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from despina.testing import http_post

from .models import REPEAT_IO, add

RAISING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if values[0] < 0:
                raise ValueError("negative input")
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", values[:1]), pb_utils.Tensor("IDX", np.zeros(1, np.uint32))]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def open_requests(instance: Any) -> list[Any]:
    if hasattr(instance, "child"):  # process mode: the child process's handle
        return [request for request, _ in instance.child.open.values()]
    gc.collect()
    return instance.shared._open_requests()


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_failed_and_finished_requests_are_not_kept_open(
    mode: str, model_repository: Any, despina_server: Any
) -> None:
    add(model_repository, "raising", RAISING, REPEAT_IO, mode)
    running = despina_server(model_repository.root, ["--http-address=127.0.0.1"])
    path = "/v2/models/raising/generate_stream"
    for value in (-1, 5, -2, 6):
        status, _, body = http_post(running.http_port, path, json.dumps({"IN": [value]}))
        if value < 0:
            assert status == 500 and b"negative input" in body
        else:
            assert status == 200 and b'"OUT":' + str(value).encode() in body
    assert open_requests(running.server.models.get("raising").instances[0]) == []
