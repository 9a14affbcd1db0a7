"""The relay between serving processes: frames round-trip every datatype, and a
forwarded request over a real Unix socket is answered, cancelled and failed as its owner
says (the routing through real serving processes: tests/test_serving_processes.py)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.errors import Cancelled, Internal, InvalidArgument, Unavailable
from despina.inference.request import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    ResponseStream,
    SequenceFlags,
)
from despina.serving import sequence_routing
from despina.serving.relay_frames import (
    read_frame,
    request_frame,
    request_of,
    response_frame,
    response_of,
)
from despina.serving.sequence_routing import SequenceRouter, owner_of
from despina.serving.serving_processes import ServingProcess


def synchronous(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """``test`` run in a fresh event loop (its fixtures passed through)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _reader_of(frames: list[list[bytes | memoryview]]) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for frame in frames:
        reader.feed_data(b"".join(bytes(part) for part in frame))
    reader.feed_eof()
    return reader


@synchronous
async def test_a_request_round_trips_with_every_field() -> None:
    inputs = {
        "F": np.arange(6, dtype=np.float32).reshape(2, 3),
        "B": np.array([[b"a", b""], [b"\x00xyz", b"text"]], dtype=np.object_),
        "Z": np.array(True),
        "E": np.zeros((0, 4), np.int64),
        "T": np.arange(8, dtype=np.int16)[::2],  # not contiguous
    }
    outputs = [RequestedOutput("F", {"binary_data": True, "shared_memory_region": "r"})]
    request = InferenceRequest(
        "m",
        inputs,
        model_version="2",
        id="req-1",
        outputs=outputs,
        parameters={"custom": 3, "text": "x"},
        priority=2,
        timeout_us=500,
        correlation_id="session-1",
        flags=SequenceFlags.START | SequenceFlags.END,
    )
    head, payload = await read_frame(_reader_of([request_frame(5, request)]))
    assert head["tag"] == 5
    back = request_of(head, payload)
    assert (back.model_name, back.model_version, back.id) == ("m", "2", "req-1")
    assert (back.priority, back.timeout_us, back.received_ns) == (2, 500, request.received_ns)
    assert back.correlation_id == "session-1"
    assert back.flags == SequenceFlags.START | SequenceFlags.END
    assert back.parameters == {"custom": 3, "text": "x"}
    # the region binding stays with the forwarding process's frontend
    assert back.outputs == [RequestedOutput("F", {"binary_data": True})]
    assert back.inputs.keys() == inputs.keys()
    for name, array in inputs.items():
        assert back.inputs[name].shape == array.shape
        assert back.inputs[name].dtype == array.dtype
        assert back.inputs[name].tolist() == array.tolist()


@synchronous
async def test_responses_round_trip_with_errors_and_the_final_flag_alone() -> None:
    ok = InferenceResponse(
        id="r", outputs={"O": np.array([1.5, 2.5], np.float64)}, parameters={"p": True}
    )
    failed = InferenceResponse(id="r", error=InvalidArgument("bad input"))
    reader = _reader_of(
        [
            response_frame(1, ok, False),
            response_frame(1, failed, False),
            response_frame(1, None, True),
        ]
    )

    async def read_response() -> tuple[InferenceResponse | None, bool]:
        head, payload = await read_frame(reader)
        assert head["tag"] == 1
        return response_of(head, payload)

    first, final = await read_response()
    assert not final and first is not None
    assert first.outputs["O"].tolist() == [1.5, 2.5] and first.parameters == {"p": True}
    second, final = await read_response()
    assert not final and second is not None
    assert isinstance(second.error, InvalidArgument) and str(second.error) == "bad input"
    assert await read_response() == (None, True)


@synchronous
async def test_a_truncated_frame_is_an_incomplete_read() -> None:
    out = {"O": np.ones(3, np.float32)}
    frame = b"".join(bytes(p) for p in response_frame(1, InferenceResponse(outputs=out), True))
    reader = asyncio.StreamReader()
    reader.feed_data(frame[:-3])
    reader.feed_eof()
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader)


def test_owners_are_the_same_rule_everywhere() -> None:
    assert [owner_of(c, 3) for c in (1, 2, 3, 2**64 - 1)] == [1, 2, 0, (2**64 - 1) % 3]
    assert owner_of(0, 3) is None and owner_of("", 3) is None
    names = [f"s-{n}" for n in range(64)]
    assert {owner_of(n, 2) for n in names} == {0, 1}
    assert [owner_of(n, 2) for n in names] == [owner_of(n, 2) for n in names]


class Owner:
    """The owning process's submit: answers what each test says, keeps the requests."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[InferenceRequest] = []

    def __call__(self, request: InferenceRequest) -> ResponseStream:
        if self.answer == "refuse":
            raise InvalidArgument("must specify the START flag")
        if self.answer == "crash":
            raise RuntimeError("a scheduler's bug")
        self.requests.append(request)
        stream = ResponseStream()
        request.stream = stream
        if self.answer == "echo":  # later requests first
            delay = 0.2 - 0.01 * len(self.requests)
            asyncio.get_running_loop().call_later(delay, self._echo, request)
        elif self.answer == "two":
            for value in (1.0, 2.0):
                out = {"O": np.full(2, value, np.float32)}
                request.respond(InferenceResponse(id=request.id, outputs=out), final=False)
            stream.send(None, final=True)
        else:  # "hold": answers only once cancelled
            asyncio.get_running_loop().create_task(self._answer_when_cancelled(request))
        return stream

    @staticmethod
    def _echo(request: InferenceRequest) -> None:
        request.respond(InferenceResponse(id=request.id, outputs={"O": request.inputs["I"]}))

    @staticmethod
    async def _answer_when_cancelled(request: InferenceRequest) -> None:
        while not request.cancelled:
            await asyncio.sleep(0.01)
        request.fail(Cancelled("the request was cancelled"))


async def _forwarded(
    folder: Path, owner: Owner, request: InferenceRequest, cancel_after: float = 0
) -> list[tuple[InferenceResponse | None, bool]]:
    """``request`` forwarded from serving process 0 to process 1, which runs ``owner``."""
    theirs = SequenceRouter(ServingProcess(1, 2, folder), owner)
    ours = SequenceRouter(ServingProcess(0, 2, folder), Owner("refuse"))
    await theirs.start()
    try:
        if cancel_after:
            asyncio.get_running_loop().call_later(cancel_after, request.cancel)
        return await _answers(ours, 1, request)
    finally:
        await ours.stop()
        await theirs.stop()


async def _answers(
    router: SequenceRouter, owner: int, request: InferenceRequest
) -> list[tuple[InferenceResponse | None, bool]]:
    """Every answer ``router`` forwards to ``request`` from ``owner``, the failure raised."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    answers: list[tuple[InferenceResponse | None, bool]] = []

    def answer(response: InferenceResponse | None, final: bool) -> None:
        answers.append((response, final))
        if final:
            done.set_result(None)

    router.forward(owner, request, answer, done.set_exception)
    await done
    return answers


async def _finals_then_stop(ours: SequenceRouter, theirs: SequenceRouter) -> list[bool]:
    """The final flags of a request ``ours`` forwards to ``theirs`` (process 1); both
    routers stopped after."""
    try:
        return [final for _, final in await _answers(ours, 1, _request())]
    finally:
        await ours.stop()
        await theirs.stop()


def _request() -> InferenceRequest:
    return InferenceRequest("seq", {"I": np.ones(2, np.float32)}, id="q", correlation_id=7)


@synchronous
async def test_a_forwarded_request_gets_every_response_then_the_final_flag(
    tmp_path: Path,
) -> None:
    owner = Owner("two")
    answers = await _forwarded(tmp_path, owner, _request())
    assert [(r.outputs["O"].tolist() if r else None, f) for r, f in answers] == [
        ([1.0, 1.0], False),
        ([2.0, 2.0], False),
        (None, True),
    ]
    assert owner.requests[0].correlation_id == 7
    assert not (tmp_path / "1.relay.sock").exists()  # removed at stop


@pytest.mark.parametrize(
    ("answer", "error", "text"),
    [
        ("refuse", InvalidArgument, "must specify the START flag"),  # the owner's refusal
        ("crash", Internal, "RuntimeError: a scheduler's bug"),  # a bug in the owner
    ],
)
@synchronous
async def test_the_owners_failure_comes_back_as_a_final_error(
    tmp_path: Path, answer: str, error: type[Exception], text: str
) -> None:
    ((response, final),) = await _forwarded(tmp_path, Owner(answer), _request())
    assert final and response is not None
    assert isinstance(response.error, error)
    assert str(response.error) == text


@synchronous
async def test_a_cancelled_client_cancels_the_owners_request(tmp_path: Path) -> None:
    owner = Owner("hold")
    ((response, final),) = await _forwarded(tmp_path, owner, _request(), cancel_after=0.2)
    assert owner.requests[0].cancelled
    assert final and response is not None and isinstance(response.error, Cancelled)


def test_an_owner_that_does_not_serve_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sequence_routing, "OWNER_START_S", 0.3)

    async def scenario() -> None:
        ours = SequenceRouter(ServingProcess(0, 2, tmp_path), Owner("refuse"))
        with pytest.raises(Unavailable, match="serving process 1 of --serving-processes 2"):
            await _answers(ours, 1, _request())
        await ours.stop()

    asyncio.run(scenario())


@synchronous
async def test_a_forward_waits_for_an_owner_still_starting(tmp_path: Path) -> None:
    ours = SequenceRouter(ServingProcess(0, 2, tmp_path), Owner("refuse"))
    theirs = SequenceRouter(ServingProcess(1, 2, tmp_path), Owner("two"))
    asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(theirs.start()))
    assert await _finals_then_stop(ours, theirs) == [False, False, True]


@synchronous
async def test_requests_forwarded_at_once_share_one_connection_and_get_their_own_answers(
    tmp_path: Path,
) -> None:
    owner = Owner("echo")
    theirs = SequenceRouter(ServingProcess(1, 2, tmp_path), owner)
    ours = SequenceRouter(ServingProcess(0, 2, tmp_path), Owner("refuse"))
    accepted = 0
    serve_link = theirs._serve_link

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await serve_link(reader, writer)

    theirs._serve_link = counting  # type: ignore[method-assign]  # counts its connections
    await theirs.start()

    async def one(value: int) -> list[float]:
        request = InferenceRequest("seq", {"I": np.full(2, value, np.float32)}, correlation_id=1)
        answers = await _answers(ours, 1, request)
        ((response, final),) = answers
        assert final and response is not None
        return list(response.outputs["O"].tolist())

    try:
        results = await asyncio.gather(*(one(value) for value in range(16)))
    finally:
        await ours.stop()
        await theirs.stop()
    assert results == [[float(v)] * 2 for v in range(16)]
    assert accepted == 1


@synchronous
async def test_a_lost_connection_fails_its_requests_and_the_next_forward_reconnects(
    tmp_path: Path,
) -> None:
    ours = SequenceRouter(ServingProcess(0, 2, tmp_path), Owner("refuse"))
    held = Owner("hold")
    theirs = SequenceRouter(ServingProcess(1, 2, tmp_path), held)
    await theirs.start()
    waiting = asyncio.ensure_future(_answers(ours, 1, _request()))
    while not held.requests:
        await asyncio.sleep(0.01)
    await theirs.stop()  # the owner stops: the connection closes under the request
    with pytest.raises(Unavailable, match=r"serving process 1 .* did not answer"):
        await waiting
    for _ in range(100):  # the owner reads the end of its connection: cancels what ran
        if held.requests[0].cancelled:
            break
        await asyncio.sleep(0.01)
    assert held.requests[0].cancelled
    again = SequenceRouter(ServingProcess(1, 2, tmp_path), Owner("two"))
    await again.start()
    assert await _finals_then_stop(ours, again) == [False, False, True]
