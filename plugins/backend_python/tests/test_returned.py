"""A response ``execute`` returns is its request's final send, whether or not the model
took the request's sender before or after (Triton's rules for default models); the
constructors of what ``execute`` returns check their arguments' types as Triton's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from despina_backend_python.hosting.returned import (
    ReturnedError,
    check_returned,
    close_senders,
)
from despina_backend_python.pb.errors import TritonModelException
from despina_backend_python.pb.messages import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceRequest,
    InferenceResponse,
    Responder,
)
from despina_backend_python.pb.tensor import Tensor

MORE_THAN_ONE = "Non-decoupled model cannot send more than one response."


class Collected(Responder):
    """Keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, bool]] = []
        self.taken_count = 0

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        self.sent.append((response, final))

    def is_cancelled(self) -> bool:
        return False

    def taken(self) -> None:
        self.taken_count += 1


def request(responder: Responder) -> InferenceRequest:
    return InferenceRequest.incoming(responder, [], [], "", 0, 0, "{}", "m", 1)


def test_a_sender_taken_after_a_returned_response_sends_no_more() -> None:
    responder = Collected()
    answered = request(responder)
    assert check_returned("m_0", [answered], [InferenceResponse()], False) == ([], [])
    assert responder.taken_count == 0  # no sender was made for the returned response
    sender = answered.get_response_sender()
    assert responder.taken_count == 1
    with pytest.raises(TritonModelException, match=MORE_THAN_ONE):
        sender.send(InferenceResponse())
    with pytest.raises(TritonModelException, match="Response sender has been closed"):
        sender.send(flags=1)
    assert responder.sent == []


def test_unanswered_and_rescheduled_requests_are_told_apart() -> None:
    """A None item: rescheduled (it runs again), answering through a taken sender, or
    left with nothing to answer it; a decoupled model's requests are only rescheduled."""
    again, taken, left = (request(Collected()) for _ in range(3))
    again.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    taken.get_response_sender()
    assert check_returned("m_0", [again, taken, left], None, False) == ([2], [0])
    assert check_returned("m_0", [left, again], None, True) == ([], [1])


def test_a_returned_response_after_a_send_fails_execute() -> None:
    responder = Collected()
    sent = request(responder)
    sent.get_response_sender().send(InferenceResponse())
    with pytest.raises(ReturnedError, match=MORE_THAN_ONE):
        check_returned("m_0", [sent], [InferenceResponse()], False)


def test_senders_closed_after_a_failed_execute_remember_a_returned_response() -> None:
    """A later request's invalid item fails ``execute`` after an earlier one's response
    was checked: the earlier request's sender keeps that response's count."""
    first, second = request(Collected()), request(Collected())
    second.get_response_sender().send(InferenceResponse())
    with pytest.raises(ReturnedError):
        check_returned("m_0", [first, second], [InferenceResponse(), InferenceResponse()], False)
    close_senders([first, second])
    with pytest.raises(TritonModelException, match=MORE_THAN_ONE):
        first.get_response_sender().send(InferenceResponse())


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Tensor(7, np.zeros(1)), "Tensor(): name: incompatible argument type int"),
        (
            lambda: InferenceResponse(output_tensors={"a": 1}),
            "InferenceResponse(): output_tensors: incompatible argument type dict",
        ),
    ],
)
def test_constructors_refuse_argument_types_as_triton(build: Any, message: str) -> None:
    """pybind11's TypeError for the wrong argument type; a tuple of tensors and a str
    subclass as a name pass, as there."""
    with pytest.raises(TypeError) as refused:
        build()
    assert str(refused.value) == message
    named = type("Named", (str,), {})("OUT")
    assert InferenceResponse(output_tensors=(Tensor(named, np.zeros(1)),)).output_tensors()
