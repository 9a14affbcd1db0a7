"""ModelStreamInfer: several requests in flight on one stream, errors inside the stream
without closing it, decoupled models (with empty final responses), and the aio client."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from despina.testing import RunningServer
from tritonclient.utils import InferenceServerException

Item = tuple[Any, InferenceServerException | None]


def tensor(name: str, data: np.ndarray, datatype: str = "FP32") -> grpcclient.InferInput:
    result = grpcclient.InferInput(name, list(data.shape), datatype)
    result.set_data_from_numpy(data)
    return result


def add_sub(value: float = 1.0) -> list[grpcclient.InferInput]:
    data = np.full((1, 16), value, np.float32)
    return [tensor("INPUT0", data), tensor("INPUT1", data)]


@pytest.fixture
def stream(server: RunningServer) -> Iterator[tuple[Any, queue.Queue[Item]]]:
    """A started stream on the shared server and the queue its callback fills."""
    received: queue.Queue[Item] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        yield client, received
        client.stop_stream()


def take(received: queue.Queue[Item], count: int) -> list[Item]:
    return [received.get(timeout=30) for _ in range(count)]


def test_several_requests_in_flight_on_one_stream(stream: tuple[Any, queue.Queue[Item]]) -> None:
    client, received = stream
    for index, tenths in enumerate((3.0, 1.0, 2.0, 0.0)):
        client.async_stream_infer(
            "sleep", [tensor("IN", np.array([tenths], np.float32))], request_id=f"r{index}"
        )
    items = take(received, 4)
    assert all(error is None for _, error in items)
    by_id = {result.get_response().id: result.as_numpy("OUT") for result, _ in items}
    assert sorted(by_id) == ["r0", "r1", "r2", "r3"]
    assert by_id["r0"][0] == 3.0 and by_id["r3"][0] == 0.0


def test_errors_inside_the_stream_leave_it_open(stream: tuple[Any, queue.Queue[Item]]) -> None:
    client, received = stream
    client.async_stream_infer("add_sub", add_sub(1.0), request_id="ok-1")
    client.async_stream_infer("nope", add_sub(), request_id="unknown")
    bad_shape = [
        tensor("INPUT0", np.ones((1, 15), np.float32)),
        tensor("INPUT1", np.ones((1, 15), np.float32)),
    ]
    client.async_stream_infer("add_sub", bad_shape, request_id="shape")
    client.async_stream_infer("fail", [tensor("IN", np.ones(1, np.float32))], request_id="model")
    client.async_stream_infer(
        "decoupled", [tensor("IN", np.array([-1], np.int32), "INT32")], request_id="neg"
    )
    client.async_stream_infer("add_sub", add_sub(2.0), request_id="ok-2")
    items = take(received, 6)
    errors = sorted(str(error) for _, error in items if error is not None)
    assert errors == sorted(
        [
            "Request for unknown model: 'nope' is not found",
            "[request id: shape] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], got [1,15]. ",
            "grpctest model refuses every request",
            "count must not be negative",
        ]
    )
    results = {r.get_response().id: r for r, e in items if e is None}
    assert sorted(results) == ["ok-1", "ok-2"]
    np.testing.assert_array_equal(results["ok-2"].as_numpy("OUTPUT0"), np.full((1, 16), 4.0))
    client.async_stream_infer("add_sub", add_sub(3.0), request_id="after")
    ((result, error),) = take(received, 1)
    assert error is None and result.get_response().id == "after"


def test_decoupled_model_streams_responses(stream: tuple[Any, queue.Queue[Item]]) -> None:
    client, received = stream
    count = tensor("IN", np.array([3], np.int32), "INT32")
    client.async_stream_infer(
        "decoupled", [count], request_id="d1", enable_empty_final_response=True
    )
    items = take(received, 4)
    assert all(error is None for _, error in items)
    values = [r.as_numpy("OUT") for r, _ in items[:3]]
    assert [int(v[0]) for v in values] == [0, 1, 2]
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r, _ in items]
    assert finals == [False, False, False, True]
    assert items[3][0].get_response().outputs == []
    assert items[3][0].get_response().id == "d1"
    zero = tensor("IN", np.array([0], np.int32), "INT32")
    client.async_stream_infer(
        "decoupled", [zero], request_id="d0", enable_empty_final_response=True
    )
    ((result, error),) = take(received, 1)
    assert error is None and result.get_response().parameters["triton_final_response"].bool_param
    # without the empty final response: the flag on each response, nothing after the last
    client.async_stream_infer(
        "decoupled", [tensor("IN", np.array([2], np.int32), "INT32")], request_id="d2"
    )
    client.async_stream_infer("decoupled", [zero], request_id="silent")
    client.async_stream_infer("add_sub", add_sub(1.0), request_id="plain")
    items = take(received, 3)
    flags = {
        (r.get_response().id, r.get_response().parameters["triton_final_response"].bool_param)
        for r, _ in items
    }
    assert flags == {("d2", False), ("plain", True)} and len(items) == 3
    assert received.empty()


def test_decoupled_model_refused_on_unary_infer(client: Any) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("decoupled", [tensor("IN", np.array([1], np.int32), "INT32")])
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert (
        info.value.message()
        == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )
    assert client.is_server_live()


def test_aio_client(server: RunningServer) -> None:
    async def scenario() -> list[Item]:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_live()
            assert await client.is_model_ready("add_sub")
            metadata = await client.get_model_metadata("add_sub", as_json=True)
            assert metadata["platform"] == "grpctest"
            result = await client.infer("add_sub", add_sub(2.0))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for index in range(5):
                    model = "nope" if index == 2 else "add_sub"
                    yield {
                        "model_name": model,
                        "inputs": add_sub(float(index)),
                        "request_id": str(index),
                    }

            return [item async for item in client.stream_infer(requests())]

    items = asyncio.run(scenario())
    assert len(items) == 5
    failed = [error for _, error in items if error is not None]
    assert [str(e) for e in failed] == ["Request for unknown model: 'nope' is not found"]
    ids = sorted(result.get_response().id for result, error in items if error is None)
    assert ids == ["0", "1", "3", "4"]


def test_cancelled_stream_and_call_leave_the_server_serving(server: RunningServer) -> None:
    received: queue.Queue[Item] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        client.async_stream_infer("add_sub", add_sub(1.0), request_id="quick")
        client.async_stream_infer(
            "sleep", [tensor("IN", np.array([20.0], np.float32))], request_id="long"
        )
        ((result, error),) = take(received, 1)
        assert error is None and result.get_response().id == "quick"
        client.stop_stream(cancel_requests=True)
        again: queue.Queue[Item] = queue.Queue()
        client.start_stream(callback=lambda result, error: again.put((result, error)))
        client.async_stream_infer("add_sub", add_sub(2.0), request_id="again")
        ((result, error),) = take(again, 1)
        assert error is None and result.get_response().id == "again"
        client.stop_stream()
        assert client.infer("add_sub", add_sub(3.0)).as_numpy("OUTPUT0")[0, 0] == 6.0


def test_sequence_over_a_stream(stream: tuple[Any, queue.Queue[Item]]) -> None:
    client, received = stream
    one = np.ones(1, np.float32)
    for index, (start, end) in enumerate(((True, False), (False, False), (False, True))):
        client.async_stream_infer(
            "sequence",
            [tensor("IN", one)],
            request_id=f"s{index}",
            sequence_id=7,
            sequence_start=start,
            sequence_end=end,
        )
        ((result, error),) = take(received, 1)
        assert error is None
        parameters = result.get_response().parameters
        assert parameters["correlation_id"].int64_param == 7
        assert parameters["sequence_flags"].int64_param == int(start) | (int(end) << 1)
    client.async_stream_infer("sequence", [tensor("IN", one)], request_id="no-start", sequence_id=8)
    client.async_stream_infer("sequence", [tensor("IN", one)], request_id="no-id")
    errors = sorted(str(error) for _, error in take(received, 2))
    assert errors == [
        "inference request for sequence 8 to model 'sequence' must specify the START flag on the first request of the sequence",
        "inference request to model 'sequence' must specify a non-zero or non-empty correlation ID",
    ]
    client.async_stream_infer(
        "sequence",
        [tensor("IN", one)],
        request_id="text",
        sequence_id="abc",
        sequence_start=True,
        sequence_end=True,
    )
    ((result, error),) = take(received, 1)
    assert error is None
    assert result.get_response().parameters["correlation_id"].string_param == "abc"


def test_stream_in_flight_limit_holds_back_reading(
    serve: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from despina_frontend_grpc import infer

    monkeypatch.setattr(infer, "MAX_STREAM_IN_FLIGHT", 1)
    running = serve()
    received: queue.Queue[Item] = queue.Queue()
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        for index in range(4):
            client.async_stream_infer(
                "sleep", [tensor("IN", np.array([0.5], np.float32))], request_id=str(index)
            )
        items = take(received, 4)
        client.stop_stream()
    assert [r.get_response().id for r, e in items if e is None] == ["0", "1", "2", "3"]


def test_answers_of_non_decoupled_requests_come_in_request_order(
    stream: tuple[Any, queue.Queue[Item]],
) -> None:
    """As Triton writes them: r1 (0.1 s), r2 and r3 finish before r0 (0.3 s) but are
    written after it; a decoupled model's responses are not held back by r4 (0.3 s)."""
    client, received = stream
    for index, tenths in enumerate((3.0, 1.0, 2.0, 0.0)):
        client.async_stream_infer(
            "sleep", [tensor("IN", np.array([tenths], np.float32))], request_id=f"r{index}"
        )
    items = take(received, 4)
    assert [result.get_response().id for result, _ in items] == ["r0", "r1", "r2", "r3"]
    client.async_stream_infer("sleep", [tensor("IN", np.array([3.0], np.float32))], request_id="r4")
    client.async_stream_infer(
        "decoupled", [tensor("IN", np.array([2], np.int32), "INT32")], request_id="d"
    )
    ids = [result.get_response().id for result, _ in take(received, 3)]
    assert ids == ["d", "d", "r4"]
