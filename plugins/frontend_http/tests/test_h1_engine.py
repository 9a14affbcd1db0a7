"""The HTTP/1.1 connection engine without I/O: bytes fed, requests, answers and the
connection's fate read back from a recording handler (the engine's whole interface)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from despina_frontend_http.h1_engine import MAX_WAITING, H1Engine, Incoming, Limits

LIMITS = Limits(
    max_header_size=256,
    max_input_size=64,
    head_too_large="the head is too large",
    body_too_large="the body is too large",
)


class Tracing:
    def __init__(self, active: bool = False) -> None:
        self.active = active


class Turn:
    """What the recorder says answers the waiting requests (a task in the front)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Recorder:
    """The engine's handler: records what it is asked. ``take`` says what
    :meth:`answer_at_once` does: None leaves requests to wait, "answer" answers at once,
    "pending" holds the turn (as an inference answered when its stream ends)."""

    def __init__(self, take: str | None = None) -> None:
        self.take = take
        self.engine: H1Engine | None = None
        self.sent: list[bytes] = []
        self.events: list[str] = []
        self.turns: list[Turn] = []
        self.pending: list[Incoming] = []

    def send(self, parts: Sequence[bytes]) -> None:
        self.sent.append(b"".join(parts))

    def close_now(self) -> None:
        self.events.append("close")

    def linger(self) -> None:
        self.events.append("linger")

    def pause_reading(self) -> None:
        self.events.append("pause")

    def resume_reading(self) -> None:
        self.events.append("resume")

    def wait_idle(self) -> None:
        self.events.append("wait_idle")

    def answer_at_once(self, incoming: Incoming) -> bool:
        engine = self.engine
        assert engine is not None
        if self.take == "answer":
            answer(engine, self, incoming, b"at once ")
            engine.after_answer(engine.stays_open(incoming))
            return True
        if self.take == "pending":
            engine.answering = Turn()
            self.pending.append(incoming)
            return True
        return False

    def answer_waiting(self) -> Turn:
        turn = Turn()
        self.turns.append(turn)
        return turn


def answer(engine: H1Engine, recorder: Recorder, incoming: Incoming, note: bytes = b"") -> None:
    """A 200 whose body is ``note``, the request's target and its body."""
    body = note + incoming.url + b" " + b"".join(incoming.body)
    recorder.send([engine.head(incoming, 200, {"X-Test": "1"}, len(body)), body])


def answer_in_turn(engine: H1Engine, recorder: Recorder) -> None:
    """What the front's task does: answer the waiting requests in order, then one due
    before its body."""
    try:
        while not engine.closed and engine.waiting:
            incoming = engine.next_waiting()
            if incoming.refusal is not None or incoming.over_limit:
                engine.refuse(incoming)
                keep_alive = False
            else:
                answer(engine, recorder, incoming)
                keep_alive = engine.stays_open(incoming)
            if engine.closed or engine.after_answer(keep_alive):
                return
        engine.answer_early_due()
    finally:
        engine.answering = None


def finish_pending(engine: H1Engine, recorder: Recorder) -> None:
    """What the front does when a pending answer's stream ends."""
    incoming = recorder.pending.pop(0)
    engine.answering = None
    answer(engine, recorder, incoming, b"due ")
    if not engine.after_answer(engine.stays_open(incoming)):
        engine.answer_next()


def connection(take: str | None = None, tracing: bool = False) -> tuple[H1Engine, Recorder]:
    recorder = Recorder(take)
    engine = H1Engine(recorder, LIMITS, Tracing(tracing))
    recorder.engine = engine
    return engine, recorder


def get(path: str, *headers: str, version: str = "1.1") -> bytes:
    lines = [f"GET {path} HTTP/{version}", "Host: h", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, body: bytes, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: h", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def head_lines(answer: bytes) -> list[bytes]:
    return answer.partition(b"\r\n\r\n")[0].split(b"\r\n")


def body_of(answer: bytes) -> bytes:
    return answer.partition(b"\r\n\r\n")[2]


def test_response_head_format() -> None:
    engine, _ = connection()
    engine.receive(get("/a"))
    (incoming,) = engine.waiting
    head = engine.head(incoming, 200, {"Content-Type": "text/plain"}, 5)
    assert head == b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"


def test_pipelined_requests_are_answered_in_order() -> None:
    """Three requests in one read wait in order; one task answers them, each kept alive."""
    engine, recorder = connection()
    engine.receive(get("/a") + post("/b", b"hello") + get("/c"))
    assert [r.url for r in engine.waiting] == [b"/a", b"/b", b"/c"]
    assert len(recorder.turns) == 1  # one task for all of them
    answer_in_turn(engine, recorder)
    assert [body_of(a) for a in recorder.sent] == [b"/a ", b"/b hello", b"/c "]
    assert all(status_of(a) == 200 for a in recorder.sent)
    assert all(b"Connection: close" not in a for a in recorder.sent)
    assert recorder.events == []
    assert not engine.closed


def test_request_split_across_reads() -> None:
    engine, _ = connection()
    data = post("/split", b"0123456789")
    for i in range(len(data)):
        engine.receive(data[i : i + 1])
    (incoming,) = engine.waiting
    assert incoming.method == b"POST"
    assert incoming.headers["content-length"] == "10"
    assert b"".join(incoming.body) == b"0123456789"


def test_chunked_body() -> None:
    engine, _ = connection()
    head = b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    engine.receive(head + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    (incoming,) = engine.waiting
    assert b"".join(incoming.body) == b"hello world"


def test_answered_at_once_when_nothing_is_ahead() -> None:
    """The handler takes each request as it completes: one read's two requests are both
    answered from the parser's callbacks, no task."""
    engine, recorder = connection("answer")
    engine.receive(get("/a") + get("/b"))
    assert [body_of(a) for a in recorder.sent] == [b"at once /a ", b"at once /b "]
    assert recorder.turns == []
    assert not engine.waiting


def test_requests_behind_a_pending_answer_wait() -> None:
    """A request held (its answer due later) keeps its turn: the next waits, and is
    answered after it."""
    engine, recorder = connection("pending")
    engine.receive(post("/slow", b"x") + get("/next"))
    assert [r.url for r in engine.waiting] == [b"/next"]
    assert recorder.sent == []
    finish_pending(engine, recorder)
    assert len(recorder.turns) == 1
    answer_in_turn(engine, recorder)
    assert [body_of(a) for a in recorder.sent] == [b"due /slow x", b"/next "]


def test_write_blocked_connection_does_not_answer_at_once() -> None:
    engine, recorder = connection("answer")
    engine.write_blocked = True
    engine.receive(get("/a"))
    assert recorder.sent == []
    assert [r.url for r in engine.waiting] == [b"/a"]


@pytest.mark.parametrize(
    ("version", "headers", "says", "closes"),
    [
        ("1.1", (), None, False),
        ("1.1", ("Connection: close",), b"Connection: close", True),
        ("1.0", (), b"Connection: close", True),
        ("1.0", ("Connection: keep-alive",), b"Connection: keep-alive", False),
    ],
    ids=["1.1", "1.1-close", "1.0", "1.0-keep-alive"],
)
def test_keep_alive_rules(
    version: str, headers: tuple[str, ...], says: bytes | None, closes: bool
) -> None:
    engine, recorder = connection("answer")
    engine.receive(get("/a", *headers, version=version))
    (sent,) = recorder.sent
    assert sent.startswith(f"HTTP/{version} 200 OK\r\n".encode())
    connection_lines = [line for line in head_lines(sent) if line.startswith(b"Connection")]
    assert connection_lines == ([says] if says else [])
    assert recorder.events == (["close"] if closes else [])
    assert engine.closed is closes


def test_malformed_request_is_refused_then_lingers() -> None:
    engine, recorder = connection()
    engine.receive(b"GET / HTTP/1.1\r\nHost h\r\n\r\n")
    (sent,) = recorder.sent
    assert status_of(sent) == 400
    assert b"Connection: close" in head_lines(sent)
    assert body_of(sent).startswith(b'{"error":"malformed HTTP request: ')
    assert recorder.events == ["linger"]
    engine.receive(get("/after"))  # dropped
    assert len(recorder.sent) == 1
    assert not engine.waiting


def test_refusal_waits_for_the_answers_before_it() -> None:
    engine, recorder = connection()
    engine.receive(get("/a") + b"BAD\x01 / HTTP/1.1\r\n\r\n")
    assert len(engine.waiting) == 2
    assert recorder.sent == []
    answer_in_turn(engine, recorder)
    assert [status_of(a) for a in recorder.sent] == [200, 400]
    assert recorder.events == ["linger"]


def test_head_over_the_limit_is_refused_with_431() -> None:
    """A head that outgrows the limit over several reads is refused once it passes it."""
    engine, recorder = connection()
    engine.receive(b"GET / HTTP/1.1\r\nHost: h\r\n")
    for _ in range(10):
        engine.receive(b"X-Filler: " + b"f" * 30 + b"\r\n")
    (sent,) = recorder.sent
    assert status_of(sent) == 431
    assert body_of(sent) == b'{"error":"the head is too large"}'
    assert b"Connection: close" in head_lines(sent)
    assert recorder.events == ["linger"]


def test_head_over_the_limit_in_one_read() -> None:
    engine, recorder = connection()
    engine.receive(get("/" + "p" * 300))
    (sent,) = recorder.sent
    assert status_of(sent) == 431


def test_content_length_over_the_limit_is_refused_before_the_body() -> None:
    engine, recorder = connection()
    engine.receive(b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\n")
    (sent,) = recorder.sent
    assert status_of(sent) == 413
    assert body_of(sent) == b'{"error":"the body is too large"}'
    assert b"Connection: close" in head_lines(sent)
    assert recorder.events == ["linger"]
    engine.receive(b"x" * 65)  # the body the client still sends is dropped
    assert len(recorder.sent) == 1


def test_chunk_announcing_too_much_is_refused_before_its_bytes() -> None:
    engine, recorder = connection()
    engine.receive(b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
    engine.receive(b"10\r\n" + b"a" * 16 + b"\r\n")
    assert recorder.sent == []
    engine.receive(b"ff\r\n")  # 16 + 255 bytes announced
    (sent,) = recorder.sent
    assert status_of(sent) == 413
    assert recorder.events == ["linger"]


def test_body_over_the_limit_behind_an_answer_is_refused_in_turn() -> None:
    """A 413 due before its body waits for the answer ahead (answers stay in order)."""
    engine, recorder = connection("pending")
    engine.receive(post("/slow", b"x"))
    engine.receive(b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n")
    assert recorder.sent == []
    assert engine.current.early_due
    finish_pending(engine, recorder)
    answer_in_turn(engine, recorder)
    assert [status_of(a) for a in recorder.sent] == [200, 413]
    assert recorder.events == ["linger"]


def test_expect_100_continue_is_answered_before_the_body() -> None:
    engine, recorder = connection()
    engine.receive(
        b"POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    )
    assert recorder.sent == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    engine.receive(b"ok")
    (incoming,) = engine.waiting
    assert b"".join(incoming.body) == b"ok"


def test_upgrade_offer_is_ignored() -> None:
    """An h2c offer: the request is parsed again without it, its body included."""
    engine, recorder = connection()
    engine.receive(
        post(
            "/u",
            b"body",
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA",
        )
    )
    (incoming,) = engine.waiting
    assert b"".join(incoming.body) == b"body"
    assert recorder.sent == []  # no 101: HTTP/1.1 is answered
    assert "upgrade" not in incoming.headers
    assert "http2-settings" not in incoming.headers


def test_reading_pauses_while_too_many_wait() -> None:
    engine, recorder = connection()
    engine.receive(get("/r") * MAX_WAITING)
    assert recorder.events == ["pause"]
    for _ in range(MAX_WAITING // 2):
        engine.next_waiting()
    assert recorder.events == ["pause"]
    engine.next_waiting()
    assert recorder.events == ["pause", "resume"]


def test_lost_connection_cancels_the_answer_and_drops_the_waiting() -> None:
    engine, recorder = connection()
    engine.receive(get("/a") + get("/b"))
    engine.lost()
    (turn,) = recorder.turns
    assert turn.cancelled
    assert not engine.waiting
    assert engine.closed


def test_drain_of_an_idle_connection_closes_after_the_wait() -> None:
    engine, recorder = connection()
    engine.drain()
    assert recorder.events == ["wait_idle"]
    engine.idle_over()
    assert recorder.events == ["wait_idle", "close"]
    assert engine.closed


def test_drain_keeps_a_connection_whose_request_came_meanwhile() -> None:
    """A request that began during the idle wait is answered, with ``Connection:
    close``, and the connection lingers after it."""
    engine, recorder = connection()
    engine.drain()
    engine.receive(b"GET /late HTTP/1.1\r\n")
    engine.idle_over()
    assert recorder.events == ["wait_idle"]
    engine.receive(b"Host: h\r\n\r\n")
    answer_in_turn(engine, recorder)
    (sent,) = recorder.sent
    assert b"Connection: close" in head_lines(sent)
    assert recorder.events == ["wait_idle", "linger"]


def test_drain_closes_after_the_last_request_read() -> None:
    """Draining with requests waiting: only the last answer says ``Connection: close``."""
    engine, recorder = connection()
    engine.receive(get("/a") + get("/b"))
    engine.drain()
    assert recorder.events == []  # not idle: no wait
    answer_in_turn(engine, recorder)
    first, last = recorder.sent
    assert b"Connection: close" not in head_lines(first)
    assert b"Connection: close" in head_lines(last)
    assert recorder.events == ["linger"]


def test_drain_during_an_answer_waits_after_it() -> None:
    """An answer begun before the drain, nothing after it: the connection then waits as
    an idle one does."""
    engine, recorder = connection()
    engine.receive(get("/a"))
    engine.next_waiting()  # being answered (relayed) as the drain begins
    engine.drain()
    assert recorder.events == []
    assert engine.after_answer(True) is False  # the answer kept the connection alive
    assert recorder.events == ["wait_idle"]
    engine.answering = None
    engine.idle_over()
    assert recorder.events == ["wait_idle", "close"]


def test_first_byte_is_timed_only_while_tracing() -> None:
    engine, _ = connection(tracing=True)
    engine.receive(get("/t"))
    assert engine.waiting[0].begin_ns > 0
    engine, _ = connection()
    engine.receive(get("/t"))
    assert engine.waiting[0].begin_ns == 0
