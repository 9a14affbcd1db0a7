"""``tritonserver.Server`` over Despina, with real Python-backend models: lifecycle and
options, model metadata and control, inference (sync, asyncio, response queues, decoupled
models, errors)."""

from __future__ import annotations

import asyncio
import gc
import json
import queue
from pathlib import Path

import numpy as np
import pytest
import tritonserver

X = np.array([1, 2, 3, 4], dtype=np.float32)
Y = np.array([10, 20, 30, 40], dtype=np.float32)


def test_not_started_server_refuses_calls() -> None:
    server = tritonserver.Server(model_repository="/nonexistent")
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        server.ready()
    with pytest.raises(tritonserver.InvalidArgumentError):
        server.model("add_sub")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"server_id": 1}, TypeError),
        ({"model_repository": 1}, TypeError),
        ({"exit_timeout": -1}, TypeError),
        ({"model_repository": None}, tritonserver.InvalidArgumentError),
        ({"model_repository": "/nonexistent/models"}, tritonserver.InternalError),
    ],
)
def test_bad_options_are_refused_at_start(options: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        tritonserver.Server(**options).start()


def test_server_health_metadata_and_model_index(server: tritonserver.Server) -> None:
    assert server.live() and server.ready()
    metadata = server.metadata()
    assert metadata["name"] == "triton" and "model_repository" in metadata["extensions"]
    models = server.models()
    assert models[("add_sub", 1)].state == "READY"
    assert models["identity"].version == -1  # a bare name: the model at version -1
    assert set(server.models(exclude_not_ready=True)) == {("add_sub", 1), ("repeat", 1)}
    with pytest.raises(KeyError, match="Unknown Model"):
        models["missing"]
    assert "# TYPE nv_inference_count counter" in server.metrics()


def test_model_metadata_config_and_properties(server: tritonserver.Server) -> None:
    model = server.model("add_sub")
    assert model.ready()
    metadata = model.metadata()
    assert metadata["name"] == "add_sub" and metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [4]}
    config = model.config()
    assert config["backend"] == "python" and config["max_batch_size"] == 0
    assert model.batch_properties() == tritonserver.ModelBatchFlag.UNKNOWN
    assert model.transaction_properties() == tritonserver.ModelTxnPropertyFlag.ONE_TO_ONE
    assert (
        server.model("repeat").transaction_properties()
        == tritonserver.ModelTxnPropertyFlag.DECOUPLED
    )
    assert not server.model("identity").ready()


def test_infer_answers_one_final_response(server: tritonserver.Server) -> None:
    before = server.model("add_sub").statistics()["model_stats"][0]["inference_count"]
    responses = list(server.model("add_sub").infer(inputs={"INPUT0": X, "INPUT1": Y}))
    assert len(responses) == 1
    response = responses[0]
    assert response.final and response.error is None
    assert (response.model.name, response.model.version) == ("add_sub", 1)
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), X + Y)
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT1"]), X - Y)
    after = server.model("add_sub").statistics()["model_stats"][0]["inference_count"]
    assert after == before + 1


def test_requests_leave_no_objects_behind(server: tritonserver.Server) -> None:
    """Nothing of a finished request stays referenced (no per-request growth of the
    objects the collector tracks, on either thread)."""
    model = server.model("add_sub")

    def run(count: int) -> None:
        for _ in range(count):
            for response in model.infer(inputs={"INPUT0": X, "INPUT1": Y}):
                np.from_dlpack(response.outputs["OUTPUT0"])

    run(20)
    gc.collect()
    before = len(gc.get_objects())
    run(300)
    gc.collect()
    assert len(gc.get_objects()) - before < 100


def test_request_objects_as_inputs(server: tritonserver.Server) -> None:
    request = server.model("add_sub").create_request(request_id="r-1")
    request.inputs["INPUT0"] = X
    request.inputs["INPUT1"] = tritonserver.Tensor.from_dlpack(Y)
    (response,) = server.model("add_sub").infer(request)
    assert response.request_id == "r-1"
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), X + Y)


def test_refused_requests_raise_from_infer(server: tritonserver.Server) -> None:
    model = server.model("add_sub")
    with pytest.raises(tritonserver.InvalidArgumentError):
        model.infer(inputs={"INPUT0": X})  # INPUT1 missing
    with pytest.raises(tritonserver.InvalidArgumentError, match="FP64"):
        model.infer(inputs={"INPUT0": X.tolist(), "INPUT1": Y})  # a list of floats is FP64
    with pytest.raises(tritonserver.InvalidArgumentError):
        model.infer(inputs={"INPUT0": X, "INPUT1": Y}, parameters={"bad": [1]})
    with pytest.raises(tritonserver.InvalidArgumentError, match="not supported"):
        model.infer(inputs={"INPUT0": X, "INPUT1": Y}, output_memory_type="gpu")
    with pytest.raises(tritonserver.TritonError):
        server.model("no_such_model").infer(inputs={"INPUT0": X})


def test_response_queue_gets_every_response(server: tritonserver.Server) -> None:
    responses: queue.SimpleQueue[tritonserver.InferenceResponse] = queue.SimpleQueue()
    iterators = [
        server.model("add_sub").infer(inputs={"INPUT0": X, "INPUT1": Y}, response_queue=responses)
        for _ in range(3)
    ]
    for _ in range(3):
        response = responses.get(timeout=30)
        np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), X + Y)
    assert [len(list(iterator)) for iterator in iterators] == [1, 1, 1]
    assert responses.empty()


def test_decoupled_model_streams_then_ends_with_an_empty_final_response(
    server: tritonserver.Server,
) -> None:
    responses = list(server.model("repeat").infer(inputs={"COUNT": np.array([3], np.int32)}))
    assert [int(np.from_dlpack(r.outputs["OUT"])[0]) for r in responses[:3]] == [0, 1, 2]
    assert [r.final for r in responses] == [False, False, False, True]
    assert responses[-1].outputs == {}


def test_async_infer(server: tritonserver.Server) -> None:
    async def run() -> list[np.ndarray]:
        outputs = []
        async for response in server.model("repeat").async_infer(
            inputs={"COUNT": np.array([2], np.int32)}
        ):
            outputs += [np.from_dlpack(t) for t in response.outputs.values()]
        answers: asyncio.Queue[tritonserver.InferenceResponse] = asyncio.Queue()
        iterator = server.model("add_sub").async_infer(
            inputs={"INPUT0": X, "INPUT1": Y}, response_queue=answers
        )
        queued = await asyncio.wait_for(answers.get(), 30)
        outputs.append(np.from_dlpack(queued.outputs["OUTPUT0"]))
        assert [r.final async for r in iterator] == [True]
        return outputs

    outputs = asyncio.run(run())
    assert [o.tolist() for o in outputs] == [[0], [1], (X + Y).tolist()]


def test_load_unload_and_config_override(server: tritonserver.Server) -> None:
    identity = server.load("identity")
    assert identity.ready()
    (response,) = identity.infer(inputs={"INPUT0": [["a", "bc"]]})
    assert response.outputs["OUTPUT0"].to_string_array().tolist() == [["a", "bc"]]
    server.unload("identity", wait_until_unloaded=True, timeout=60)
    assert server.models()[("identity", 1)].state == "UNAVAILABLE"
    assert not server.model("identity").ready()

    config = json.loads(json.dumps(server.model("add_sub").config()))
    config["parameters"] = {"tag": {"string_value": "override"}}
    server.load("add_sub", {"config": json.dumps(config)})
    assert server.model("add_sub").config()["parameters"]["tag"]["string_value"] == "override"


def test_load_with_files(server: tritonserver.Server, repository: Path) -> None:
    doubled = (repository / "add_sub" / "1" / "model.py").read_text().replace("a + b", "a + a")
    config = json.dumps(server.model("add_sub").config())
    server.load("add_sub", {"config": config, "file:1/model.py": doubled.encode()})
    (response,) = server.model("add_sub").infer(inputs={"INPUT0": X, "INPUT1": Y})
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), X + X)
    server.load("add_sub")  # back to the repository's files
    (response,) = server.model("add_sub").infer(inputs={"INPUT0": X, "INPUT1": Y})
    np.testing.assert_array_equal(np.from_dlpack(response.outputs["OUTPUT0"]), X + Y)


def test_stop_then_start_again(repository: Path) -> None:
    server = tritonserver.Server(
        model_repository=str(repository),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        startup_models=["add_sub"],
    ).start(wait_until_ready=True, timeout=120)
    with pytest.raises(tritonserver.InvalidArgumentError, match="already started"):
        server.start()
    server.stop()
    with pytest.raises(tritonserver.InvalidArgumentError):
        server.ready()
    server.start(wait_until_ready=True, timeout=120)
    assert server.model("add_sub").ready()
    server.stop()
