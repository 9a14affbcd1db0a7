"""Helpers of the fuzz targets (imported by the tests of this folder; conftest.py puts the
folder on ``sys.path``): example counts per profile, per-target tallies, raw HTTP/1.1 and
HTTP/2 exchanges, valid requests that prove the server still serves.

Each target counts its cases and their outcomes in :data:`TALLY` (printed at the end of
the run, and written as JSON to ``$DESPINA_FUZZ_REPORT`` for ``tests/fuzz/campaign.py``):

- ``cases``: examples run against the server;
- ``5xx``: answers that are server errors (HTTP 5xx, gRPC INTERNAL / UNKNOWN / DATA_LOSS)
  for client-made input: each one fails the test (hypothesis shrinks it and prints it);
- ``hangs``: no answer and no close within the socket timeout;
- ``crashes``: the server no longer answered a valid request after the case.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import socket
import struct
import time
from collections import Counter, defaultdict
from typing import Any

#: Examples per target for ``make fuzz`` (the "fuzz" profile); unset: the bounded "ci" run.
EXAMPLES_ENV = "DESPINA_FUZZ_EXAMPLES"
REPORT_ENV = "DESPINA_FUZZ_REPORT"
#: Seconds without an answer that count as a hang.
TIMEOUT = float(os.environ.get("DESPINA_FUZZ_TIMEOUT", "10"))

TALLY: dict[str, Counter[str]] = defaultdict(Counter)


def fuzzing() -> bool:
    """True under ``make fuzz`` (``$DESPINA_FUZZ_EXAMPLES`` set)."""
    return bool(os.environ.get(EXAMPLES_ENV))


def examples(ci: int) -> int:
    """``ci`` examples in ``make test``; ``$DESPINA_FUZZ_EXAMPLES`` under ``make fuzz``."""
    value = os.environ.get(EXAMPLES_ENV)
    return int(value) if value else ci


class Hang(AssertionError):
    """The server neither answered nor closed within :data:`TIMEOUT`."""


class Crash(AssertionError):
    """The server stopped answering valid requests."""


class ServerError(AssertionError):
    """A 5xx / INTERNAL answer to client-made input."""


def record(target: str, outcome: str | None = None) -> None:
    """Count one case of ``target`` (and one ``outcome`` among its results, if given)."""
    TALLY[target]["cases"] += 1
    if outcome is not None:
        TALLY[target][outcome] += 1
    if TALLY[target]["cases"] % 1000 == 0:
        write_report()  # a campaign stopped early still reports what it ran


def fail(target: str, kind: str, exc: AssertionError) -> None:
    """Count a finding (``5xx``, ``hangs``, ``crashes``) and raise ``exc``."""
    TALLY[target][kind] += 1
    raise exc


def names_twice(entries: Any) -> bool:
    """Whether a request's ``inputs`` or ``outputs`` (parsed JSON, or protobuf tensors)
    name one tensor twice: the request must be refused, whatever else it holds."""
    if not isinstance(entries, list | tuple) and not hasattr(entries, "add"):
        return False
    names = [e.get("name") if isinstance(e, dict) else getattr(e, "name", None) for e in entries]
    named = [n for n in names if isinstance(n, str)]
    return len(set(named)) != len(named)


def refused(target: str, ok: bool, case: Any) -> None:
    """Tally a case that names a tensor twice; fail the target unless it was refused as
    it must be (``ok``)."""
    if not ok:
        fail(target, "repeats not refused", AssertionError(f"named twice, answered: {case!r}"))
    TALLY[target]["repeats refused"] += 1


# -- HTTP/1.1 -----------------------------------------------------------------------------


class _Responses:
    """httptools callbacks: the status of every response in a byte stream, and how many
    responses are complete."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpResponseParser(self)
        self.statuses: list[int] = []
        self.bodies: list[bytes] = []
        self.complete = 0
        self.broken = False
        self.data = b""

    def on_headers_complete(self) -> None:
        self.statuses.append(int(self.parser.get_status_code()))
        self.bodies.append(b"")

    def on_body(self, body: bytes) -> None:
        if self.bodies and len(self.bodies[-1]) < 4096:
            self.bodies[-1] += body

    def on_message_complete(self) -> None:
        self.complete += 1

    def feed(self, chunk: bytes) -> None:
        import httptools

        self.data += chunk
        if self.broken:
            return
        try:
            self.parser.feed_data(chunk)
        except httptools.HttpParserUpgrade:
            self.broken = True
        except httptools.HttpParserError:
            self.broken = True


def response_statuses(data: bytes) -> list[int]:
    """Status codes of the HTTP/1.1 responses in ``data`` (a regex fallback where the
    stream does not parse)."""
    sink = _Responses()
    sink.feed(data)
    return statuses_of(sink)


def statuses_of(sink: _Responses) -> list[int]:
    import re

    if sink.broken:
        found = [int(m) for m in re.findall(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3}) ", sink.data)]
        return found or sink.statuses
    return sink.statuses


#: Seconds of silence after which an exchange of unknown length half-closes.
QUIET = float(os.environ.get("DESPINA_FUZZ_QUIET", "0.05"))


def raw_exchange(port: int, data: bytes, expect: int | None = None) -> list[int]:
    """Send ``data`` on a new connection and return the statuses of the answers."""
    return exchange_answers(port, data, expect)[0]


def exchange_answers(
    port: int, data: bytes, expect: int | None = None
) -> tuple[list[int], list[bytes]]:
    """Send ``data`` on a new connection: the statuses and bodies (the first 4 KiB) of
    the answers.

    With ``expect``, read until that many responses are complete (or the server closes).
    Without, read until the server has been silent for :data:`QUIET` seconds, then
    half-close (a request it is still waiting for is then cut short) and read until it
    closes. Raises :class:`Hang` when the server neither answers nor closes within
    :data:`TIMEOUT` (after the half-close, or for the expected responses)."""
    sink = _Responses()
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    half_closed = False
    try:
        # it may answer (413, 400) and close before taking everything: read that
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        deadline = time.monotonic() + TIMEOUT
        sock.settimeout(TIMEOUT if expect is not None else QUIET)
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                if expect is not None or half_closed:
                    raise Hang(f"no answer and no close within {TIMEOUT} s") from None
                half_closed = True
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    break
                sock.settimeout(TIMEOUT)
                deadline = time.monotonic() + TIMEOUT
                continue
            if not chunk:
                break
            sink.feed(chunk)
            if expect is not None and sink.complete >= expect:
                break
            if time.monotonic() > deadline:
                raise Hang(f"the answer did not end within {TIMEOUT} s")
    finally:
        sock.close()
    return statuses_of(sink), sink.bodies


def http_request(
    method: str, path: str, headers: list[tuple[str, str]], body: bytes, chunked: bool = False
) -> bytes:
    """One well-framed request's bytes (Content-Length, or chunked in one chunk)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        payload = (f"{len(body):x}\r\n".encode() + body + b"\r\n" if body else b"") + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass") + payload


#: A valid JSON inference request of the toy model (OUTPUT0 = INPUT0 + INPUT1, FP32 [-1,4]).
def valid_infer_json() -> dict[str, Any]:
    return {
        "id": "fuzz",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
        ],
        "outputs": [{"name": "OUTPUT0"}],
    }


class HttpProbe:
    """A keep-alive connection sending a valid inference: the server still serves."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection: http.client.HTTPConnection | None = None
        self.body = json.dumps(valid_infer_json()).encode()

    def check(self, target: str) -> None:
        for attempt in range(2):  # a keep-alive connection may have been closed: retry once
            try:
                if self.connection is None:
                    self.connection = http.client.HTTPConnection(
                        "127.0.0.1", self.port, timeout=TIMEOUT
                    )
                self.connection.request("POST", "/v2/models/toy/infer", body=self.body)
                answer = self.connection.getresponse()
                data = answer.read()
                if answer.status == 200 and b'"OUTPUT0"' in data:
                    return
                message = f"valid inference answered {answer.status}: {data[:200]!r}"
            except (OSError, http.client.HTTPException) as exc:
                message = f"valid inference failed: {exc!r}"
            if self.connection is not None:
                self.connection.close()
            self.connection = None
            if attempt:
                fail(target, "crashes", Crash(message))

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


# -- gRPC ------------------------------------------------------------------------------------

INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
#: gRPC status codes that are server errors (UNKNOWN, INTERNAL, DATA_LOSS).
GRPC_SERVER_ERRORS = {2, 13, 15}
#: Triton's (and Despina's) answer to a message that does not parse: INTERNAL with this
#: text. A documented Triton compatibility, so not counted as a finding.
UNPARSABLE_TEXT = "Unable to parse request"


def valid_grpc_request() -> Any:
    import numpy as np
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="toy", id="fuzz")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    return request


class GrpcProbe:
    """A channel sending a valid ModelInfer: the server still serves."""

    def __init__(self, url: str) -> None:
        import grpc

        self.channel = grpc.insecure_channel(url)
        self.raw = self.channel.unary_unary(INFER_PATH)
        self.valid = valid_grpc_request().SerializeToString()

    @staticmethod
    def call_method(method: Any, message: bytes) -> tuple[int, str]:
        """(status code value, details) of one unary call of ``method`` (a
        ``channel.unary_unary`` with identity serializers) with ``message``'s bytes;
        :class:`Hang` on DEADLINE_EXCEEDED."""
        import grpc

        try:
            method(message, timeout=TIMEOUT)
            return 0, ""
        except grpc.RpcError as exc:
            code = exc.code()
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise Hang(f"no gRPC answer within {TIMEOUT} s") from None
            return code.value[0], exc.details() or ""

    def call(self, message: bytes) -> tuple[int, str]:
        return self.call_method(self.raw, message)

    def check(self, target: str) -> None:
        try:
            code, details = self.call(self.valid)
        except Hang as exc:
            fail(target, "crashes", Crash(f"valid ModelInfer hung: {exc}"))
        if code != 0:
            fail(target, "crashes", Crash(f"valid ModelInfer failed: {code} {details}"))

    def close(self) -> None:
        self.channel.close()


def grpc_server_error(code: int, details: str) -> bool:
    """Whether a gRPC status is a server error (the unparsable-message text excepted)."""
    return code in GRPC_SERVER_ERRORS and not (code == 13 and details == UNPARSABLE_TEXT)


# -- HTTP/2 ----------------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes, length: int | None = None) -> bytes:
    """One HTTP/2 frame (``length`` overrides the declared payload length)."""
    size = len(payload) if length is None else length
    return struct.pack(">I", size)[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def grpc_headers_block(path: str = INFER_PATH, extra: list[tuple[str, str]] | None = None) -> bytes:
    """An HPACK block of a gRPC call's request headers (a fresh encoder: no indexing state)."""
    import hpack

    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *(extra or []),
    ]
    return bytes(hpack.Encoder().encode(headers))


def grpc_message(message: bytes, compressed: bool = False) -> bytes:
    """A gRPC length-prefixed message."""
    return bytes([1 if compressed else 0]) + struct.pack(">I", len(message)) + message


def h2_answers(data: bytes) -> tuple[list[dict[str, str]], int | None]:
    """The header lists the server sent (responses and trailers, HPACK-decoded in order)
    and the GOAWAY error code if it sent one."""
    import hpack

    decoder = hpack.Decoder()
    decoder.max_allowed_table_size = 1 << 16
    lists: list[dict[str, str]] = []
    goaway: int | None = None
    block = b""
    at = 0
    while at + 9 <= len(data):
        size = int.from_bytes(data[at : at + 3], "big")
        kind, flags = data[at + 3], data[at + 4]
        payload = data[at + 9 : at + 9 + size]
        at += 9 + size
        if kind == 1:  # HEADERS (the server sends no padding or priority)
            block = payload
        elif kind == 9:
            block += payload
        elif kind == 7 and len(payload) >= 8:
            goaway = int.from_bytes(payload[4:8], "big")
        if kind in (1, 9) and flags & 0x4:
            try:
                lists.append({k: v for k, v in decoder.decode(block)})
            except hpack.HPACKError:
                break
            block = b""
    return lists, goaway


def h2_server_errors(lists: list[dict[str, str]]) -> list[str]:
    """Server errors among decoded header lists: a 5xx ``:status`` or a gRPC server error."""
    found = []
    for headers in lists:
        status = headers.get(":status")
        if status is not None and status.isdigit() and int(status) >= 500:
            found.append(f":status {status}")
        code = headers.get("grpc-status")
        if code is not None and code.isdigit():
            details = headers.get("grpc-message", "")
            from urllib.parse import unquote

            if grpc_server_error(int(code), unquote(details)):
                found.append(f"grpc-status {code} {details}")
    return found


#: Server errors already reported, by (target, status, regex matching the start of the
#: error text): tallied as
#: ``known <status>`` instead of failing the target, each pinned by a strict-xfail test.
KNOWN: dict[tuple[str, int, str], str] = {}


def known(target: str, status: int, body: bytes) -> bool:
    """Whether a server error is a reported one (see :data:`KNOWN`); tallies it."""
    try:
        text = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        return False
    for (where, code, start), _why in KNOWN.items():
        if where == target and code == status and re.match(start, text):
            TALLY[target][f"known {status}"] += 1
            return True
    return False


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_report() -> None:
    """Write :data:`TALLY` as JSON to ``$DESPINA_FUZZ_REPORT`` when set."""
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "w") as out:
            json.dump({k: dict(v) for k, v in TALLY.items()}, out, indent=1, sort_keys=True)


def table() -> str:
    """The tally as a text table."""
    rows = [f"{'target':<22} {'cases':>9} {'crashes':>8} {'hangs':>6} {'5xx':>5}  outcomes"]
    for target in sorted(TALLY):
        counts = TALLY[target]
        others = ", ".join(
            f"{k} {v}"
            for k, v in sorted(counts.items())
            if k not in ("cases", "crashes", "hangs", "5xx")
        )
        rows.append(
            f"{target:<22} {counts['cases']:>9} {counts['crashes']:>8} {counts['hangs']:>6} "
            f"{counts['5xx']:>5}  {others}"
        )
    return "\n".join(rows)
