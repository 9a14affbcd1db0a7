"""pb_utils models served over HTTP/gRPC in both execution modes."""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import numpy as np
import pytest
from despina.inference.request import InferenceRequest as CoreRequest
from despina.models.call_placement import FIRST_STREAK
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import (
    ADD_SUB,
    ADD_SUB_IO,
    BATCHED,
    BATCHED_IO,
    RAISE_INIT,
    STRINGS,
    STRINGS_IO,
    WRONG_RETURN,
    add,
)

MODES = ["process", "in-process"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_add_sub(mode: str, model_repository: Any, despina_server: Any, http_client: Any) -> None:
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    running = despina_server(model_repository.root)
    client = http_client(running)
    result = infer(client, "add_sub", pair(), request_id="req-7", parameters={"custom": "v"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 3, 4, 5])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), [0, 1, 2, 3])
    params = result.get_response()["parameters"]
    assert params["custom"] == "v" and params["request_id"] == "req-7"
    assert params["model_name"] == "add_sub" and params["model_version"] == "1"
    assert params["model_instance_name"] == "add_sub_0"
    assert params["model_instance_kind"] == "CPU" and params["model_instance_device_id"] == "0"
    assert params["model_repository"].endswith("add_sub")
    assert client.is_model_ready("add_sub")


def test_response_error_and_execute_exception(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    add(model_repository, "wrong_return", WRONG_RETURN, ADD_SUB_IO, mode)
    client = http_client(despina_server(model_repository.root))
    with pytest.raises(InferenceServerException) as error:
        infer(client, "add_sub", pair(-1))
    assert error.value.message() == "negative first element" and error.value.status() == "400"
    with pytest.raises(InferenceServerException) as error:
        infer(client, "add_sub", pair(-2))
    text = error.value.message()
    assert text.startswith(
        "Failed to process the request(s) for model 'add_sub_0', message: "
        "ValueError: execute exploded\n\nAt:\n"
    )
    assert "model.py" in text and error.value.status() == "500"
    frames = text.split("\n\nAt:\n", 1)[1].splitlines()
    assert len(frames) == 1 and frames[0].endswith("): execute")  # the model's, no server's
    with pytest.raises(InferenceServerException) as error:
        infer(client, "wrong_return", pair())
    assert (
        "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0" in error.value.message()
    )
    # the model stays loaded and serves the next request
    assert infer(client, "add_sub", pair()).as_numpy("OUTPUT0")[0] == 2
    assert client.is_model_ready("add_sub")


def test_initialize_raising_makes_model_unavailable(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "broken", RAISE_INIT, ADD_SUB_IO, mode)
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    client = http_client(despina_server(model_repository.root, ["--exit-on-error=false"]))
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    reason = index["broken"]["reason"]
    assert reason.startswith("Internal: RuntimeError: cannot initialize: missing weights")
    assert "initialize" in reason
    assert not client.is_model_ready("broken") and client.is_model_ready("add_sub")


#: An ``auto_complete_config`` that completes the config in place and returns nothing.
RETURNS_NONE = ADD_SUB.replace(
    "class TritonPythonModel:",
    """class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(0)
""",
)


def test_auto_complete_config_returning_none_fails_the_load(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """As Triton's Python backend: the hook must return a pb_utils.ModelConfig."""
    add(model_repository, "none", RETURNS_NONE, ADD_SUB_IO, mode)
    client = http_client(despina_server(model_repository.root, ["--exit-on-error=false"]))
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["none"]["state"] == "UNAVAILABLE"
    assert index["none"]["reason"].endswith(
        "auto_complete_config function in model 'none' must return a valid pb.ModelConfig object."
    )


def test_model_py_that_cannot_be_imported_gives_tritons_reason(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "no_class", "x = 1\n", ADD_SUB_IO, mode)
    add(model_repository, "syntax", "def oops(:\n", ADD_SUB_IO, mode)
    client = http_client(despina_server(model_repository.root, ["--exit-on-error=false"]))
    reasons = {m["name"]: m.get("reason") for m in client.get_model_repository_index()}
    assert reasons == {
        "no_class": "Internal: AttributeError: module '1.model' has no attribute "
        "'TritonPythonModel'",
        "syntax": "Internal: SyntaxError: invalid syntax (model.py, line 1)",
    }


def test_outputs_the_config_does_not_declare_are_dropped(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    extra = ADD_SUB.replace(
        'pb_utils.Tensor("OUTPUT1", a - b)]',
        'pb_utils.Tensor("OUTPUT1", a - b), pb_utils.Tensor("EXTRA", a)]',
    )
    assert extra != ADD_SUB
    add(model_repository, "add_sub", extra, ADD_SUB_IO)
    result = infer(http_client(despina_server(model_repository.root)), "add_sub", pair())
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_bytes_tensors(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    import tritonclient.grpc as grpcclient

    add(model_repository, "strings", STRINGS, STRINGS_IO, mode)
    client = grpc_client(despina_server(model_repository.root))
    words = np.array([b"hello", b"", "w\u00f6rld".encode(), b"a\x00b"] * 2500, dtype=np.object_)
    tensor = grpcclient.InferInput("TEXT", [len(words)], "BYTES")
    tensor.set_data_from_numpy(words)
    result = client.infer("strings", [tensor])
    upper = result.as_numpy("UPPER")
    assert upper.shape == (10000,) and list(upper[:4]) == [
        b"HELLO",
        b"",
        "W\u00f6RLD".encode(),
        b"A\x00B",
    ]
    assert list(result.as_numpy("LENGTHS")[:4]) == [5, 0, 6, 3]


def test_dynamic_batching_gives_execute_several_requests(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    import tritonclient.grpc as grpcclient

    add(model_repository, "batched", BATCHED, BATCHED_IO, mode)
    client = grpc_client(despina_server(model_repository.root))

    def one(i: int) -> Any:
        tensor = grpcclient.InferInput("X", [1, 1], "INT64")
        tensor.set_data_from_numpy(np.array([[i]], np.int64))
        return client.infer("batched", [tensor])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert [int(r.as_numpy("Y")[0, 0]) for r in results] == [2 * i for i in range(8)]
    assert max(int(r.as_numpy("BATCH")[0, 0]) for r in results) > 1
    stats = client.get_inference_statistics("batched", as_json=True)["model_stats"][0]
    assert int(stats["execution_count"]) < 8


def test_model_config_seen_by_initialize(
    mode: str, model_repository: Any, despina_server: Any
) -> None:
    source = ADD_SUB.replace(
        "self.args = args",
        'self.args = args; assert json.loads(args["model_config"])["parameters"]',
    )
    add(model_repository, "add_sub", source, ADD_SUB_IO, mode)
    running = despina_server(model_repository.root)
    config = running.server.models.get("add_sub").config
    assert json.loads(json.dumps({"name": config.name}))["name"] == "add_sub"


@pytest.mark.parametrize(
    ("mode", "key", "value"),
    [
        ("process", "DESPINA_CHANNEL_POLL_US", "1000"),
        ("in-process", "DESPINA_INLINE_EXECUTE_US", "0"),
    ],
)
def test_speed_parameters(
    mode: str, key: str, value: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """The mode's speed-up set against its default (the channel polled, calls never
    inline) and the model still serves; a non-number is a load failure naming the
    parameter."""

    def param(value: str) -> str:
        return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'

    add(model_repository, "plain", ADD_SUB, ADD_SUB_IO, mode, param(value))
    add(model_repository, "bad", ADD_SUB, ADD_SUB_IO, mode, param("soon"))
    client = http_client(despina_server(model_repository.root, ["--exit-on-error=false"]))
    for _ in range(40):  # past the streak that would move in-process calls inline
        result = infer(client, "plain", pair())
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [2, 3, 4, 5])
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["bad"]["state"] == "UNAVAILABLE"
    assert f"parameter {key} must be a number of microseconds >= 0" in index["bad"]["reason"]


@pytest.mark.parametrize(("budget_us", "at_once"), [("1e6", True), ("0", False)])
def test_an_idle_inline_model_answers_within_submit(
    budget_us: str, at_once: bool, model_repository: Any, despina_server: Any
) -> None:
    """Once an in-process model's calls run inline, a request that finds the queue empty
    and the instance idle executes within ``submit`` (no worker hand-off), and counts in
    the statistics like any other; a model kept in its thread is answered by a worker."""
    budget = (
        f'parameters {{ key: "DESPINA_INLINE_EXECUTE_US" value {{ string_value: "{budget_us}" }} }}'
    )
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, "in-process", budget)
    running = despina_server(model_repository.root)

    async def scenario() -> tuple[bool, Any]:
        for _ in range(FIRST_STREAK):  # the streak after which calls move inline
            await running.server.infer(CoreRequest("add_sub", pair()))
        _, stream = running.server.submit(CoreRequest("add_sub", pair(5.0)))
        answered = stream.done
        return answered, await stream.last()

    answered, response = running.call(scenario())
    assert answered is at_once
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], [6, 3, 4, 5])
    stats = running.server.models.get("add_sub").stats
    assert stats.execution_count == stats.success.count == FIRST_STREAK + 1
