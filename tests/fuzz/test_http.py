"""HTTP/1.1 front (the default stack): raw request bytes, JSON inference bodies and the
binary tensor extension. Every case gets an answer or a close (no hang), no 5xx, and the
server still answers a valid inference afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fuzzkit
import pytest
from fuzzkit import ServerError, exchange_answers, fail, record, refused
from hypothesis import example, given, settings, strategies as st
from strategies import RepeatedNames, binary_request, infer_bodies, raw_http, repeated_names


@pytest.fixture(scope="module")
def http(infer_server: Any) -> Iterator[tuple[int, fuzzkit.HttpProbe]]:
    probe = fuzzkit.HttpProbe(infer_server.http_port)
    yield infer_server.http_port, probe
    probe.check("http-final")
    probe.close()


def exchange(
    target: str, port: int, probe: fuzzkit.HttpProbe, data: bytes, expect: int | None = None
) -> tuple[list[int], list[bytes]]:
    """Send one case, tally it, fail on a hang or a 5xx, then check the server serves:
    the statuses and bodies of the answers."""
    try:
        statuses, bodies = exchange_answers(port, data, expect)
    except fuzzkit.Hang as exc:
        fail(target, "hangs", exc)
    errors = [s for s in statuses if s >= 500]
    record(target, f"{statuses[-1] // 100}xx" if statuses else "closed")
    if errors:
        fail(target, "5xx", ServerError(f"{errors} answering {data[:400]!r}"))
    probe.check(target)
    return statuses, bodies


def check_repeats(target: str, header: bytes, statuses: list[int]) -> None:
    """A JSON header naming an input or an output twice must have been refused."""
    try:
        doc = json.loads(header)
    except ValueError:
        return
    if isinstance(doc, dict) and (
        fuzzkit.names_twice(doc.get("inputs")) or fuzzkit.names_twice(doc.get("outputs"))
    ):
        refused(target, not statuses or statuses[-1] >= 400, (header[:400], statuses))


@settings(max_examples=fuzzkit.examples(120))
@given(data=raw_http())
@example(data=b"POST /v2/models/toy/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"7fffffffffffffff\r\n")  # fmt: skip
@example(data=b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")
@example(data=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a TLS ClientHello
@example(data=b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
def test_raw_http(http: tuple[int, fuzzkit.HttpProbe], data: bytes) -> None:
    port, probe = http
    exchange("http-raw", port, probe, data)


@settings(max_examples=fuzzkit.examples(120))
@given(
    body=infer_bodies(),
    path=st.sampled_from(
        [
            "/v2/models/toy/infer",
            "/v2/models/toy_bytes/infer",
            "/v2/models/toy/generate",
            "/v2/models/toy/generate_stream",
        ]
    ),
    gzip=st.integers(0, 9),
)
@example(body=b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1e400]}]}',
         path="/v2/models/toy/infer", gzip=1)  # fmt: skip
def test_json_infer(http: tuple[int, fuzzkit.HttpProbe], body: bytes, path: str, gzip: int) -> None:
    port, probe = http
    headers = [("Content-Type", "application/json")]
    sent = body
    if gzip == 0:  # compressed bodies take aiohttp's path behind the front
        import zlib

        headers.append(("Content-Encoding", "deflate"))
        sent = zlib.compress(body)
    data = fuzzkit.http_request("POST", path, headers, sent)
    statuses, _ = exchange("http-json", port, probe, data, 1)
    if path.endswith("/infer"):
        check_repeats("http-json", body, statuses)


@settings(max_examples=fuzzkit.examples(120))
@given(case=binary_request(), chunked=st.booleans())
def test_binary_extension(
    http: tuple[int, fuzzkit.HttpProbe], case: tuple[bytes, str], chunked: bool
) -> None:
    port, probe = http
    body, what = case
    model, length = what.split("\n", 1)
    headers = [("Inference-Header-Content-Length", length)]
    data = fuzzkit.http_request("POST", f"/v2/models/{model}/infer", headers, body, chunked)
    statuses, _ = exchange("http-binary", port, probe, data, 1)
    try:
        header = body[: int(length)]
    except ValueError:
        return
    check_repeats("http-binary", header, statuses)


@settings(max_examples=fuzzkit.examples(60))
@given(case=repeated_names())
def test_repeated_names(http: tuple[int, fuzzkit.HttpProbe], case: RepeatedNames) -> None:
    """Valid but for a tensor named twice: Triton's 400 and text, JSON and binary alike."""
    port, probe = http
    body, header_length = case.http_body()
    headers = (
        [] if header_length is None else [("Inference-Header-Content-Length", str(header_length))]
    )
    data = fuzzkit.http_request("POST", "/v2/models/toy/infer", headers, body)
    statuses, bodies = exchange("http-repeats", port, probe, data, 1)
    answer = (statuses, [json.loads(b) for b in bodies])
    refused("http-repeats", answer == ([400], [{"error": case.refusal()}]), (case, answer))
