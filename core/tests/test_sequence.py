"""The sequence batcher through the in-process Server API, with the "seqtoy" backend."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import seq_backend
from despina.errors import Cancelled, InvalidArgument, Unavailable
from despina.inference.request import InferenceRequest, RequestedOutput, SequenceFlags
from despina.plugin.manager import create_plugins
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
"""

STATE = """
  state [ {
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state { name: "hundred" data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred" }
  } ]
"""


def seq_config(
    strategy: str = "direct { }",
    mbs: int = 2,
    instances: int = 1,
    corrid_type: str = "TYPE_UINT64",
    extra: str = "",
) -> str:
    """A seqtoy model config: INT32 INPUT/OUTPUT [1] with every control input."""
    return f"""
backend: "seqtoy"
max_batch_size: {mbs}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
sequence_batching {{
  {strategy}
  {CONTROLS % corrid_type}
  {extra}
}}
"""


def seq_request(
    model: str, corrid: int | str, value: int, flags: SequenceFlags, batched: bool = True
) -> InferenceRequest:
    shape = (1, 1) if batched else (1,)
    return InferenceRequest(
        model, {"INPUT": np.full(shape, value, np.int32)}, correlation_id=corrid, flags=flags
    )


def flags_of(index: int, length: int) -> SequenceFlags:
    flags = SequenceFlags.NONE
    if index == 0:
        flags |= SequenceFlags.START
    if index == length - 1:
        flags |= SequenceFlags.END
    return flags


async def run_sequence(
    running: RunningServer, model: str, corrid: int | str, values: list[int]
) -> list[int]:
    """Send one sequence, request after request; return the OUTPUT values."""
    outputs = []
    for index, value in enumerate(values):
        request = seq_request(model, corrid, value, flags_of(index, len(values)))
        response = await running.server.infer(request)
        outputs.append(int(response.outputs["OUTPUT"].ravel()[0]))
    return outputs


async def run_interleaved(
    running: RunningServer, model: str, sequences: dict[Any, list[int]]
) -> dict[Any, list[int]]:
    results = await asyncio.gather(
        *(run_sequence(running, model, c, v) for c, v in sequences.items())
    )
    return dict(zip(sequences, results, strict=True))


def running_sums(values: list[int], start: int = 0) -> list[int]:
    return [start + int(v) for v in np.cumsum(values)]


def test_sequence_and_ensemble_schedulers_come_through_the_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["schedulers"]["distribution"] == "despina"
    assert {"sequence", "ensemble"} <= set(rows["schedulers"]["provides"]["schedulers"])


@pytest.fixture
def start_seq(
    model_repository: RepositoryBuilder, despina_server: Start
) -> Callable[..., RunningServer]:
    """Add models (name -> config) and start a server with the seqtoy backend."""

    def start(
        models: dict[str, str],
        files: dict[str, str | bytes] | None = None,
        args: tuple[str, ...] = (),
    ) -> RunningServer:
        for name, config in models.items():
            model_repository.add(name, config, {"1/model.seq": "", **(files or {})})
        seq_backend.SeqBackend.batches.clear()
        seq_backend.SeqBackend.peak = 0
        return despina_server(model_repository.root, args=args, plugins=[seq_backend])

    return start


def instances_of(corrid_control: Any) -> dict[Any, set[str]]:
    """Which instances ran each sequence (by CORRID control value, real requests only)."""
    seen: dict[Any, set[str]] = {}
    for instance, requests in seq_backend.SeqBackend.batches:
        for inputs in requests:
            if inputs.get("READY"):
                seen.setdefault(inputs[corrid_control], set()).add(instance)
    return seen


def test_direct_interleaved_sequences_with_backlog(start_seq: Callable[..., RunningServer]) -> None:
    # 2 slots on 1 instance, 3 sequences at once: one waits in the backlog for a free slot.
    running = start_seq({"direct": seq_config(extra="max_sequence_idle_microseconds: 5000000")})
    sequences = {11: [1, 2, 3, 4], 12: [10, 20, 30], 13: [5, 5, 5, 5, 5]}
    results = running.call(run_interleaved(running, "direct", sequences))
    assert results == {c: running_sums(v) for c, v in sequences.items()}
    batches = [requests for _, requests in seq_backend.SeqBackend.batches]
    assert max(len(b) for b in batches) == 2
    assert all(len(b) <= 2 for b in batches)
    first = next(r for b in batches for r in b if r["CORRID"] == 11 and r["INPUT"] == 1)
    assert (first["START"], first["END"], first["READY"]) == (1.0, 0, True)
    last = next(r for b in batches for r in b if r["CORRID"] == 11 and r["INPUT"] == 4)
    assert (last["START"], last["END"], last["READY"]) == (0.0, 1, True)
    middle = next(r for b in batches for r in b if r["CORRID"] == 12 and r["INPUT"] == 20)
    assert (middle["START"], middle["END"], middle["READY"]) == (0.0, 0, True)
    stats = running.server.models.get("direct").stats
    assert stats.success.count == sum(len(v) for v in sequences.values())


def test_direct_pads_slots_with_nothing_ready(start_seq: Callable[..., RunningServer]) -> None:
    # Sequence 21 holds slot 0 and waits; sequence 22 runs alone in slot 1: the batch
    # carries a not-ready padding request in position 0 whose response is dropped.
    running = start_seq({"direct": seq_config()})

    async def scenario() -> list[int]:
        server = running.server
        await server.infer(seq_request("direct", 21, 1, SequenceFlags.START))
        outputs = await run_sequence(running, "direct", 22, [7, 8])
        await server.infer(seq_request("direct", 21, 1, SequenceFlags.END))
        return outputs

    assert running.call(scenario()) == [7, 15]
    padded = [b for _, b in seq_backend.SeqBackend.batches if len(b) == 2]
    assert padded, "slot 1 ran without slot 0 ready"
    pad = padded[0][0]
    assert (pad["READY"], pad["START"], pad["END"], pad["CORRID"], pad["INPUT"]) == (
        False,
        0.0,
        0,
        0,
        0,
    )
    assert padded[0][1]["CORRID"] == 22
    stats = running.server.models.get("direct").stats
    assert stats.success.count == 4


def test_oldest_string_ids_implicit_state_same_instance(
    start_seq: Callable[..., RunningServer],
) -> None:
    strategy = "oldest { max_candidate_sequences: 3 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 2000 }"
    config = seq_config(strategy, mbs=4, instances=2, corrid_type="TYPE_STRING", extra=STATE)
    hundred = np.array([100], np.int32).tobytes()
    running = start_seq({"oldest": config}, {"initial_state/hundred": hundred})
    sequences = {f"seq-{i}": list(range(i, i + 4 + i % 3)) for i in range(8)}
    results = running.call(run_interleaved(running, "oldest", sequences))
    assert results == {c: running_sums(v, start=100) for c, v in sequences.items()}
    routed = instances_of("CORRID")
    assert set(routed) == set(sequences)
    assert all(len(instances) == 1 for instances in routed.values())
    assert {i for s in routed.values() for i in s} == {"oldest_0_0", "oldest_0_1"}
    for _, requests in seq_backend.SeqBackend.batches:
        ids = [r["CORRID"] for r in requests]
        assert len(ids) == len(set(ids)), "two requests of one sequence in one batch"
        assert all(r["READY"] for r in requests), "Oldest never pads"


def test_state_output_hidden_unless_declared(start_seq: Callable[..., RunningServer]) -> None:
    zero_state = STATE.replace('data_file: "hundred"', "zero_data: true")
    visible = seq_config("oldest { }", extra=zero_state).replace(
        'output [ { name: "OUTPUT"',
        'output [ { name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "OUTPUT"',
    )
    running = start_seq({"hidden": seq_config("oldest { }", extra=zero_state), "visible": visible})

    async def scenario(model: str) -> list[Any]:
        server = running.server
        only_output = [RequestedOutput("OUTPUT")]
        first = seq_request(model, 5, 3, SequenceFlags.START)
        second = seq_request(model, 5, 4, SequenceFlags.NONE)
        second.outputs = only_output  # the state must still flow when the client names outputs
        third = seq_request(model, 5, 5, SequenceFlags.END)
        return [await server.infer(r) for r in (first, second, third)]

    hidden = running.call(scenario("hidden"))
    assert [set(r.outputs) for r in hidden] == [{"OUTPUT"}] * 3
    assert [int(r.outputs["OUTPUT"].ravel()[0]) for r in hidden] == [3, 7, 12]
    shown = running.call(scenario("visible"))
    assert [set(r.outputs) for r in shown] == [
        {"OUTPUT", "STATE_OUT"},
        {"OUTPUT"},
        {"OUTPUT", "STATE_OUT"},
    ]
    assert int(shown[2].outputs["STATE_OUT"].ravel()[0]) == 12


def test_sequence_errors(start_seq: Callable[..., RunningServer]) -> None:
    running = start_seq({"direct": seq_config(mbs=2)})
    cases = [
        (
            seq_request("direct", 0, 1, SequenceFlags.START),
            "inference request to model 'direct' must specify a non-zero or non-empty correlation ID",
        ),
        (
            seq_request("direct", "", 1, SequenceFlags.START),
            "inference request to model 'direct' must specify a non-zero or non-empty correlation ID",
        ),
        (
            seq_request("direct", 99, 1, SequenceFlags.NONE),
            "inference request for sequence 99 to model 'direct' must specify the START flag "
            "on the first request of the sequence",
        ),
        (
            InferenceRequest(
                "direct",
                {"INPUT": np.ones((2, 1), np.int32)},
                correlation_id=3,
                flags=SequenceFlags.START,
            ),
            "inference request to model 'direct' must specify batch-size 1 due to requirements "
            "of sequence batcher",
        ),
    ]
    for request, message in cases:
        with pytest.raises(InvalidArgument) as info:
            running.call(running.server.infer(request))
        assert str(info.value) == message
    # the server keeps serving
    assert running.call(run_sequence(running, "direct", 7, [2, 3])) == [2, 5]


def test_idle_sequence_is_released(start_seq: Callable[..., RunningServer]) -> None:
    # One slot; a sequence that goes quiet past the idle time loses it to a waiting one.
    config = seq_config(mbs=0, extra="max_sequence_idle_microseconds: 200000")
    config = config.replace("max_batch_size: 0", "")
    running = start_seq({"idle": config})
    server = running.server

    async def scenario() -> tuple[list[int], str]:
        await server.infer(seq_request("idle", 1, 5, SequenceFlags.START, batched=False))
        waiting = asyncio.ensure_future(
            server.infer(
                seq_request("idle", 2, 9, SequenceFlags.START | SequenceFlags.END, batched=False)
            )
        )
        second = await waiting  # runs only once sequence 1 idled out and freed the slot
        await asyncio.sleep(0.05)
        try:
            await server.infer(seq_request("idle", 1, 1, SequenceFlags.END, batched=False))
        except InvalidArgument as exc:
            return [int(second.outputs["OUTPUT"].ravel()[0])], str(exc)
        return [], ""

    outputs, error = running.call(scenario())
    assert outputs == [9]
    assert error == (
        "inference request for sequence 1 to model 'idle' must specify the START flag on the "
        "first request of the sequence"
    )


@pytest.mark.parametrize(
    ("control", "message"),
    [
        (
            '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START } ] }',
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            "'bool_false_true' for CONTROL_SEQUENCE_START for bad",
        ),
        (
            '{ name: "S" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0 ] } ] }',
            "sequence batching control 'int32_false_true' must have exactly 2 entries for "
            "CONTROL_SEQUENCE_READY for bad",
        ),
        (
            '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] }',
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for bad. Allowed data "
            "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
        ),
    ],
)
def test_bad_control_config_makes_model_unavailable(
    start_seq: Callable[..., RunningServer], control: str, message: str
) -> None:
    config = f"""
backend: "seqtoy"
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{ control_input [ {control} ] }}
"""
    running = start_seq({"bad": config}, args=("--exit-on-error=false",))
    rows = {row["name"]: row for row in running.server.models.index()}
    assert rows["bad"]["state"] == "UNAVAILABLE"
    assert message in rows["bad"]["reason"]


def one_slot_config() -> str:
    """One instance, no batching: a single sequence slot."""
    return seq_config(mbs=0).replace("max_batch_size: 0", "")


def test_cancelled_request_ends_its_sequence(start_seq: Callable[..., RunningServer]) -> None:
    running = start_seq({"slow": one_slot_config()}, {"1/model.seq": '{"delay_s": 0.1}'})
    server = running.server

    async def scenario() -> list[Any]:
        requests = [
            seq_request("slow", 1, 1, SequenceFlags.START, batched=False),
            seq_request("slow", 1, 2, SequenceFlags.NONE, batched=False),
            seq_request("slow", 1, 3, SequenceFlags.END, batched=False),
        ]
        futures = [asyncio.ensure_future(server.infer(r)) for r in requests]
        await asyncio.sleep(0)  # all three submitted, the first one picked up
        requests[1].cancel()
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second, third = running.call(scenario())
    assert int(first.outputs["OUTPUT"][0]) == 1
    assert isinstance(second, Cancelled) and isinstance(third, Cancelled)
    assert str(second) == "Request was cancelled"
    # as Triton, every request the cancellation ended counts as CANCELED
    assert server.models.get("slow").stats.failures["CANCELED"] == 2
    if running.metrics_port is not None:
        with urllib.request.urlopen(running.metrics_url) as page:
            metrics = page.read().decode()
        assert (
            'nv_inference_request_failure{model="slow",reason="CANCELED",version="1"} 2' in metrics
        )
    with pytest.raises(InvalidArgument):  # the sequence is gone
        running.call(server.infer(seq_request("slow", 1, 4, SequenceFlags.END, batched=False)))


def test_backlogged_sequence_times_out(start_seq: Callable[..., RunningServer]) -> None:
    running = start_seq({"one": one_slot_config()})
    server = running.server

    async def scenario() -> Exception | None:
        await server.infer(seq_request("one", 1, 1, SequenceFlags.START, batched=False))
        waiting = seq_request("one", 2, 1, SequenceFlags.START, batched=False)
        waiting.timeout_us = 50_000
        try:
            await server.infer(waiting)  # no slot frees up: sequence 1 holds the only one
        except Unavailable as exc:
            return exc
        finally:
            await server.infer(seq_request("one", 1, 1, SequenceFlags.END, batched=False))
        return None

    error = running.call(scenario())
    assert str(error) == "timeout of the corresponding sequence has been expired"
    assert server.models.get("one").stats.failures["REJECTED"] == 1


def test_stop_fails_queued_requests(start_seq: Callable[..., RunningServer]) -> None:
    running = start_seq({"slow": one_slot_config()}, {"1/model.seq": '{"delay_s": 0.1}'})
    server = running.server

    async def scenario() -> list[Any]:
        requests = [
            seq_request("slow", 1, 1, SequenceFlags.START, batched=False),
            seq_request("slow", 1, 2, SequenceFlags.END, batched=False),
            seq_request("slow", 2, 5, SequenceFlags.START, batched=False),  # backlogged
        ]
        futures = [asyncio.ensure_future(server.infer(r)) for r in requests]
        scheduler = server.models.get("slow").scheduler
        assert scheduler is not None
        for _ in range(1000):  # until the first request executes
            if scheduler.busy:
                break
            await asyncio.sleep(0.001)
        assert scheduler.pending == 2
        await scheduler.stop()
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second, third = running.call(scenario())
    assert int(first.outputs["OUTPUT"][0]) == 1  # the running execution finished
    message = "Server is stopping, request for model 'slow' was not executed"
    assert [str(second), str(third)] == [message, message]
    assert isinstance(second, Unavailable)


def test_candidate_sequence_limit_backlogs_the_rest(
    start_seq: Callable[..., RunningServer],
) -> None:
    # One instance with one candidate slot: sequence 2 waits until sequence 1 has ended.
    running = start_seq({"single": seq_config("oldest { max_candidate_sequences: 1 }", mbs=4)})
    server = running.server

    async def scenario() -> tuple[list[int], list[int]]:
        await server.infer(seq_request("single", 1, 1, SequenceFlags.START))
        second = asyncio.ensure_future(run_sequence(running, "single", 2, [5, 6]))
        await asyncio.sleep(0)  # sequence 2 starts (into the backlog) before 1 ends
        first_end = await server.infer(seq_request("single", 1, 2, SequenceFlags.END))
        return [int(first_end.outputs["OUTPUT"].ravel()[0])], await second

    first, second = running.call(scenario())
    assert (first, second) == ([3], [5, 11])
    order = [r["CORRID"] for _, batch in seq_backend.SeqBackend.batches for r in batch]
    assert order == [1, 1, 2, 2]
    config = running.server.models.get("single").config.sequence_batching
    assert config.max_sequence_idle_microseconds == 1_000_000
    assert list(config.oldest.preferred_batch_size) == [4]


@pytest.mark.parametrize(("limited", "peak"), [(False, 2), (True, 1)])
def test_rate_limiter_applies_to_sequence_executions(
    start_seq: Callable[..., RunningServer], limited: bool, peak: int
) -> None:
    # Two instances each needing the one "R": with --rate-limit=execution_count they never
    # execute at the same time.
    config = seq_config(mbs=2, instances=2).replace(
        "kind: KIND_CPU", 'kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 1 } ] }'
    )
    args = ("--rate-limit=execution_count", "--rate-limit-resource=R:1") if limited else ()
    running = start_seq({"limited": config}, {"1/model.seq": '{"delay_s": 0.05}'}, args=args)
    sequences = {c: [1, 2, 3] for c in range(1, 5)}
    results = running.call(run_interleaved(running, "limited", sequences))
    assert results == {c: [1, 3, 6] for c in sequences}
    assert len({instance for instance, _ in seq_backend.SeqBackend.batches}) == 2
    assert seq_backend.SeqBackend.peak == peak


def _stream_sequences(
    running: RunningServer, sends: list[tuple[int, int, SequenceFlags]], pause_after: int
) -> tuple[int, list[int]]:
    """Send ``sends`` (corrid, value, flags) in order on one gRPC stream, pausing 0.5 s
    after the first ``pause_after``: the batches run by then, and every OUTPUT."""
    import queue

    import tritonclient.grpc as grpcclient

    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(running.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    ran_in_pause = -1
    for index, (corrid, value, flags) in enumerate(sends):
        if index == pause_after:
            time.sleep(0.5)
            ran_in_pause = len(seq_backend.SeqBackend.batches)
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
        client.async_stream_infer(
            "delayed",
            [tensor],
            sequence_id=corrid,
            sequence_start=SequenceFlags.START in flags,
            sequence_end=SequenceFlags.END in flags,
        )
    results = [answers.get(timeout=30) for _ in sends]
    client.stop_stream()
    client.close()
    return ran_in_pause, sorted(int(r.as_numpy("OUTPUT").ravel()[0]) for r in results)


def test_delay_scheduler_hook_holds_the_first_batch_until_n_are_queued(
    start_seq: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TRITONSERVER_DELAY_SCHEDULER=4`` (Triton's test hook): nothing runs while 2 of
    the 4 requests of two sequences are queued; then both slots run together."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    running = start_seq({"delayed": seq_config()})
    start, end = SequenceFlags.START, SequenceFlags.END
    sends = [(1, 1, start), (1, 2, end), (2, 10, start), (2, 20, end)]
    ran_in_pause, outputs = _stream_sequences(running, sends, pause_after=2)
    assert ran_in_pause == 0
    assert outputs == [1, 3, 10, 30]
    assert [len(batch) for _, batch in seq_backend.SeqBackend.batches] == [2, 2]


def test_backlog_delay_hook_holds_the_first_batch_until_m_are_backlogged(
    start_seq: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=1`` with ``TRITONSERVER_DELAY_SCHEDULER=1``:
    the one slot's first request waits until a second sequence waits in the backlog."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "1")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "1")
    running = start_seq({"delayed": seq_config(mbs=1)})
    start, end = SequenceFlags.START, SequenceFlags.END
    sends = [(1, 1, start), (2, 10, start), (1, 2, end), (2, 20, end)]
    ran_in_pause, outputs = _stream_sequences(running, sends, pause_after=1)
    assert ran_in_pause == 0
    assert outputs == [1, 3, 10, 30]


def test_direct_padding_counts_in_the_batch_size_statistics(
    start_seq: Callable[..., RunningServer],
) -> None:
    """As Triton's backends count a sequence batch's null requests: sequence 22 running
    in slot 1 while slot 0's sequence waits executes a batch of 2 in the statistics."""
    import tritonclient.grpc as grpcclient

    running = start_seq({"direct": seq_config()})
    client = grpcclient.InferenceServerClient(running.grpc_url)
    start, end, none = SequenceFlags.START, SequenceFlags.END, SequenceFlags.NONE
    for corrid, flags in ((21, start), (22, start), (22, none), (22, end), (21, end)):
        tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 1), np.int32))
        client.infer(
            "direct",
            [tensor],
            sequence_id=corrid,
            sequence_start=SequenceFlags.START in flags,
            sequence_end=SequenceFlags.END in flags,
        )
    stats = client.get_inference_statistics("direct", as_json=True)["model_stats"][0]
    client.close()
    batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert batches == {1: 2, 2: 3}
    assert (int(stats["inference_count"]), int(stats["execution_count"])) == (5, 5)


def test_delay_hooks_once_met_let_every_instance_go(
    start_seq: Callable[..., RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two instances of one slot each, sequences 1 and 2 in them and 3 backlogged: once
    the hooks are met both instances run, also when the first to go ends its sequence
    and takes sequence 3 out of the backlog before the other looked again."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    monkeypatch.setenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", "2")
    running = start_seq({"delayed": seq_config(mbs=1, instances=2)})
    start, end = SequenceFlags.START, SequenceFlags.END
    sends = [(1, 1, start), (1, 2, end), (2, 10, start), (2, 20, end)]
    sends += [(3, 100, start), (3, 200, end)]
    ran_in_pause, outputs = _stream_sequences(running, sends, pause_after=4)
    assert ran_in_pause == 0
    assert outputs == [1, 3, 10, 30, 100, 300]
