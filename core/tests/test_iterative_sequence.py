"""Iterative sequences (``sequence_batching { iterative_sequence: true }``) and request
rescheduling (:meth:`InferenceRequest.reschedule`), with a backend written here.

The "itertoy" backend runs each request ``COUNT`` times: every execution but the last
reschedules it. A default model answers once, with OUT = [correlation ID, the flags of
every execution...]; a decoupled one streams OUT = [executions left] each time. COUNT -1
never ends. ``model.iter`` may hold ``{"delay_s": seconds}`` (a pause per execution).
"""

from __future__ import annotations

import asyncio
import json
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from despina.errors import Cancelled, InvalidArgument, Unavailable
from despina.inference.request import InferenceRequest, InferenceResponse, SequenceFlags
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


class IterInstance(ModelInstance):
    def __init__(self, decoupled: bool, delay_s: float) -> None:
        self.decoupled = decoupled
        self.delay_s = delay_s
        self.flags: dict[int | str, list[int]] = {}

    async def execute(self, requests: Sequence[InferenceRequest]) -> None:
        IterBackend.runs.append(
            [(r.correlation_id, int(r.flags), _start_control(r)) for r in requests]
        )
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        for request in requests:
            self._one(request)

    def _one(self, request: InferenceRequest) -> None:
        corrid = request.correlation_id
        history = self.flags.setdefault(corrid, [])
        history.append(int(request.flags))
        count = int(request.inputs["COUNT"].ravel()[0])
        left = count - len(history)
        if left != 0:
            try:
                request.reschedule()
            except InvalidArgument as exc:
                del self.flags[corrid]
                request.fail(exc)
                return
            if self.decoupled:
                request.respond(self._response(request, [left]), final=False)
            return
        del self.flags[corrid]
        number = corrid if isinstance(corrid, int) else -1
        values = [left] if self.decoupled else [number, *history]
        request.respond(self._response(request, values), final=True)

    @staticmethod
    def _response(request: InferenceRequest, values: list[int]) -> InferenceResponse:
        out = np.array(values, np.int64)
        if request.inputs["COUNT"].ndim == 2:  # the model batches
            out = out.reshape(1, -1)
        return InferenceResponse(outputs={"OUT": out})


def _start_control(request: InferenceRequest) -> int | None:
    control = request.inputs.get("START")
    return None if control is None else int(control.ravel()[0])


class IterBackend(Backend):
    name = "itertoy"
    default_model_filename = "model.iter"

    #: Every batch executed: [(correlation ID, flags, START control or None), ...].
    runs: list[list[tuple[Any, int, int | None]]] = []

    async def load(self) -> None:
        text = self.context.model_file.read_text()
        self.behaviour = json.loads(text) if text.strip() else {}

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        decoupled = bool(self.context.config.model_transaction_policy.decoupled)
        return IterInstance(decoupled, float(self.behaviour.get("delay_s", 0)))


class ItertoyPlugin:
    @hookimpl
    def despina_backends(self) -> list[type[Backend]]:
        return [IterBackend]


START_CONTROL = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]"""


def iter_config(
    mbs: int = 0, sequence: str = "iterative", decoupled: bool = False, extra: str = ""
) -> str:
    """An itertoy config: COUNT INT32 [1] in, OUT INT64 [-1] out; ``sequence``:
    "iterative", "plain" (a sequence batcher without iterative sequences) or "none"."""
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    iterative = "iterative_sequence: true" if sequence == "iterative" else ""
    batching = f"sequence_batching {{ {iterative} {START_CONTROL} {extra} }}"
    return f"""
backend: "itertoy"
max_batch_size: {mbs}
{policy}
input [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT64 dims: [ -1 ] }} ]
{batching if sequence != "none" else ""}
"""


@pytest.fixture
def start(
    model_repository: RepositoryBuilder, despina_server: Start
) -> Callable[..., RunningServer]:
    """Add models (name -> (config, model.iter text)) and start a server with itertoy."""

    def run(models: dict[str, tuple[str, str]], flags: Sequence[str] = ()) -> RunningServer:
        for name, (config, behaviour) in models.items():
            model_repository.add(name, config, {"1/model.iter": behaviour})
        IterBackend.runs.clear()
        return despina_server(model_repository.root, list(flags), plugins=[ItertoyPlugin()])

    return run


def count(value: int, module: Any = httpclient) -> Any:
    tensor = module.InferInput("COUNT", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def core_request(model: str, value: int, **fields: Any) -> InferenceRequest:
    return InferenceRequest(model, {"COUNT": np.array([value], np.int32)}, **fields)


def out(response: InferenceResponse) -> list[int]:
    return [int(value) for value in response.outputs["OUT"].ravel()]


async def wait_for_runs(at_least: int) -> None:
    """Until the backend executed ``at_least`` batches (bounded)."""
    for _ in range(2000):
        if len(IterBackend.runs) >= at_least:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"only {len(IterBackend.runs)} executions")


def test_a_request_without_correlation_id_starts_its_own_sequence_and_runs_again(
    start: Callable[..., RunningServer], http_client: Any
) -> None:
    client = http_client(start({"iter": (iter_config(), "")}))
    # [server-assigned ID, START on the first execution only]
    assert client.infer("iter", [count(3)]).as_numpy("OUT").tolist() == [1, 1, 0, 0]
    assert client.infer("iter", [count(2)]).as_numpy("OUT").tolist() == [2, 1, 0]
    # a client's own sequence keeps its ID; its rescheduled runs carry neither START nor END
    both = {"sequence_id": 42, "sequence_start": True, "sequence_end": True}
    assert client.infer("iter", [count(3)], **both).as_numpy("OUT").tolist() == [42, 3, 0, 0]
    # the START control tensor follows the flags, filled in by the scheduler
    assert [run[0][2] for run in IterBackend.runs] == [1, 0, 0, 1, 0, 1, 0, 0]
    # every sequence ended and freed the one slot: the model keeps serving
    assert client.infer("iter", [count(1)]).as_numpy("OUT").tolist() == [3, 1]


def test_reschedule_is_refused_where_sequences_are_not_iterative(
    start: Callable[..., RunningServer], http_client: Any
) -> None:
    models = {
        "plain_sequence": (iter_config(sequence="plain"), ""),
        "no_sequence": (iter_config(sequence="none"), ""),
    }
    client = http_client(start(models))
    with pytest.raises(InferenceServerException) as info:
        client.infer("plain_sequence", [count(2)])
    assert info.value.message() == (
        "inference request to model 'plain_sequence' must specify a non-zero or non-empty "
        "correlation ID"
    )
    started = {"sequence_id": 7, "sequence_start": True}
    cases = [
        ("plain_sequence", started, [7, int(SequenceFlags.START)]),
        ("no_sequence", {}, [0, 0]),
    ]
    for model, fields, answer in cases:
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, [count(2)], **fields)
        assert info.value.message() == NOT_CONFIGURED
        # nothing was rescheduled: the model keeps serving, one execution per request
        assert client.infer(model, [count(1)], **fields).as_numpy("OUT").tolist() == answer


def test_decoupled_iterations_stream_until_the_final_response(
    start: Callable[..., RunningServer], grpc_client: Any
) -> None:
    client = grpc_client(start({"iter_dec": (iter_config(decoupled=True), "")}))
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    client.async_stream_infer("iter_dec", [count(3, grpcclient)])
    client.async_stream_infer("iter_dec", [count(2, grpcclient)])  # waits for the one slot
    client.stop_stream()  # returns once both requests ended
    results = [got.get() for _ in range(got.qsize())]
    assert [error for _, error in results] == [None] * 5
    assert [r.as_numpy("OUT").tolist() for r, _ in results] == [[2], [1], [0], [1], [0]]
    assert [run[0][0] for run in IterBackend.runs] == [1, 1, 1, 2, 2]


def test_rescheduled_requests_of_several_sequences_share_batches(
    start: Callable[..., RunningServer],
) -> None:
    oldest = "oldest { max_candidate_sequences: 2 }"  # no padding once one sequence is left
    running = start({"batched": (iter_config(mbs=2, extra=oldest), "")})

    async def both() -> list[list[int]]:
        requests = [
            InferenceRequest("batched", {"COUNT": np.full((1, 1), n, np.int32)}) for n in (3, 5)
        ]
        answers = await asyncio.gather(*(running.server.infer(r) for r in requests))
        return [out(answer) for answer in answers]

    assert running.call(both()) == [[1, 1, 0, 0], [2, 1, 0, 0, 0, 0]]
    shared = [run for run in IterBackend.runs if len(run) == 2]
    assert len(shared) == 3  # both ran in one batch while the first was not done
    assert all({corrid for corrid, _, _ in run} == {1, 2} for run in shared)


def test_an_execution_longer_than_the_idle_timeout_keeps_the_sequence(
    start: Callable[..., RunningServer], http_client: Any
) -> None:
    config = iter_config(extra="max_sequence_idle_microseconds: 50000")
    client = http_client(start({"slow": (config, '{"delay_s": 0.15}')}))
    assert client.infer("slow", [count(3)]).as_numpy("OUT").tolist() == [1, 1, 0, 0]


def test_a_cancelled_rescheduled_request_is_answered_and_frees_its_slot(
    start: Callable[..., RunningServer],
) -> None:
    running = start({"forever": (iter_config(), '{"delay_s": 0.001}')})

    async def scenario() -> list[int]:
        endless = core_request("forever", -1)
        task = asyncio.ensure_future(running.server.infer(endless))
        await wait_for_runs(3)
        endless.cancel()
        with pytest.raises(Cancelled, match="Request was cancelled"):
            await task
        answer = await running.server.infer(core_request("forever", 2))
        return out(answer)

    assert running.call(scenario()) == [2, 1, 0]


def test_unload_lets_a_rescheduled_request_finish_and_shutdown_answers_an_endless_one(
    start: Callable[..., RunningServer],
) -> None:
    models = {"finite": (iter_config(), '{"delay_s": 0.05}'), "endless": (iter_config(), "")}
    running = start(models, ["--exit-timeout-secs=1"])
    server = running.server

    async def unload_while_running() -> list[int]:
        task = asyncio.ensure_future(server.infer(core_request("finite", 4)))
        await wait_for_runs(1)
        await server.models.unload("finite")
        return out(await task)

    assert running.call(unload_while_running()) == [1, 1, 0, 0, 0]

    async def stop_while_running() -> None:
        task = asyncio.ensure_future(server.infer(core_request("endless", -1)))
        await wait_for_runs(len(IterBackend.runs) + 3)
        began = time.monotonic()
        await server.stop()  # it runs on until the exit timeout, then is answered
        assert 1 <= time.monotonic() - began < 10
        with pytest.raises(Unavailable, match="Server is stopping"):
            await task

    running.call(stop_while_running())
