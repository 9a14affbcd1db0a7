"""gRPC (Despina's own HTTP/2 server, the default stack): ModelInferRequest messages built
by hypothesis, random bytes as the serialized message of every unary RPC, and raw HTTP/2
frame sequences. No hang, no INTERNAL / UNKNOWN / 5xx, and the server keeps answering a
valid ModelInfer on another connection."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import fuzzkit
import pytest
from fuzzkit import (
    INFER_PATH,
    PREFACE,
    Hang,
    ServerError,
    fail,
    frame,
    grpc_headers_block,
    grpc_message,
    grpc_server_error,
    record,
    refused,
)
from hypothesis import example, given, settings, strategies as st
from strategies import DATATYPES, INTERESTING_INTS, RepeatedNames, repeated_names

pb = pytest.importorskip("tritonclient.grpc.service_pb2")

INT64 = st.integers(-(2**63), 2**63 - 1)
SHAPE_DIMS = st.sampled_from([d for d in INTERESTING_INTS if -(2**63) <= d < 2**63]) | INT64


@pytest.fixture(scope="module")
def grpc_probe(infer_server: Any) -> Iterator[tuple[Any, fuzzkit.GrpcProbe]]:
    probe = fuzzkit.GrpcProbe(infer_server.grpc_url)
    yield infer_server, probe
    probe.check("grpc-final")
    probe.close()


@st.composite
def parameters(draw: st.DrawFn, message: Any) -> None:
    """Fill a protobuf map<string, InferParameter> with random entries."""
    keys = st.sampled_from(
        ["binary_data", "classification", "priority", "timeout", "sequence_id",
         "sequence_start", "sequence_end", "shared_memory_region", "shared_memory_byte_size",
         "shared_memory_offset", "binary_data_output", ""]
    ) | st.text(max_size=8)  # fmt: skip
    for key in draw(st.lists(keys, max_size=3)):
        kind = draw(st.sampled_from(["bool", "int64", "string", "double", "uint64"]))
        param = message[key]
        if kind == "bool":
            param.bool_param = draw(st.booleans())
        elif kind == "int64":
            param.int64_param = draw(INT64)
        elif kind == "string":
            param.string_param = draw(st.text(max_size=10))
        elif kind == "double":
            param.double_param = draw(st.floats())
        else:
            param.uint64_param = draw(st.integers(0, 2**64 - 1))


@st.composite
def contents(draw: st.DrawFn, tensor: Any) -> None:
    field = draw(
        st.sampled_from(
            ["bool_contents", "int_contents", "int64_contents", "uint_contents",
             "uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents"]
        )
    )  # fmt: skip
    values = {
        "bool_contents": st.booleans(),
        "int_contents": st.integers(-(2**31), 2**31 - 1),
        "int64_contents": INT64,
        "uint_contents": st.integers(0, 2**32 - 1),
        "uint64_contents": st.integers(0, 2**64 - 1),
        "fp32_contents": st.floats(width=32),
        "fp64_contents": st.floats(),
        "bytes_contents": st.binary(max_size=8),
    }[field]
    getattr(tensor.contents, field).extend(draw(st.lists(values, max_size=6)))


@st.composite
def infer_requests(draw: st.DrawFn) -> Any:
    """A ModelInferRequest: a valid one mutated, or one built from scratch."""
    if draw(st.booleans()):
        request = fuzzkit.valid_grpc_request()
    else:
        request = pb.ModelInferRequest()
        request.model_name = draw(st.sampled_from(["toy", "toy_bytes"]))
    if draw(st.integers(0, 5)) == 0:
        request.model_name = draw(st.text(max_size=12) | st.sampled_from(["..", "/", "toy/1"]))
    if draw(st.integers(0, 5)) == 0:
        request.model_version = draw(
            st.sampled_from(["1", "0", "-1", "2", " 1"]) | st.text(max_size=4)
        )
    draw(parameters(request.parameters))
    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["add", "shape", "datatype", "name", "raw", "drop", "repeat"]))
        if op == "add" or not request.inputs:
            tensor = request.inputs.add(
                name=draw(st.sampled_from(["INPUT0", "INPUT1", "X", ""])),
                datatype=draw(st.sampled_from(DATATYPES) | st.text(max_size=5)),
                shape=draw(st.lists(SHAPE_DIMS, max_size=4)),
            )
            draw(parameters(tensor.parameters))
            if draw(st.booleans()):
                draw(contents(tensor))
            continue
        tensor = request.inputs[draw(st.integers(0, len(request.inputs) - 1))]
        if op == "shape":
            del tensor.shape[:]
            tensor.shape.extend(draw(st.lists(SHAPE_DIMS, max_size=4)))
        elif op == "datatype":
            tensor.datatype = draw(st.sampled_from(DATATYPES) | st.text(max_size=5))
        elif op == "name":
            tensor.name = draw(
                st.sampled_from(["INPUT0", "INPUT1", "OUTPUT0"]) | st.text(max_size=5)
            )
        elif op == "repeat":  # the same tensor again, and its raw contents if it has some
            request.inputs.add().CopyFrom(tensor)
            if request.raw_input_contents:
                request.raw_input_contents.append(request.raw_input_contents[-1])
        elif op == "raw":
            if request.raw_input_contents:
                at = draw(st.integers(0, len(request.raw_input_contents) - 1))
                request.raw_input_contents[at] = draw(st.binary(max_size=40))
            else:
                request.raw_input_contents.append(draw(st.binary(max_size=40)))
        else:
            del request.raw_input_contents[:]
            draw(contents(tensor))
    for _ in range(draw(st.integers(0, 2))):
        output = request.outputs.add(
            name=draw(st.sampled_from(["OUTPUT0", "OUTPUT1", "INPUT0", ""]) | st.text(max_size=5))
        )
        draw(parameters(output.parameters))
    return request


def call(target: str, probe: fuzzkit.GrpcProbe, method: Any, message: bytes) -> tuple[int, str]:
    """Send one message, tally it, fail on a hang or a server error, then check the
    server serves: the status code value and details."""
    try:
        code, details = fuzzkit.GrpcProbe.call_method(method, message)
    except Hang as exc:
        fail(target, "hangs", exc)
    record(target, "OK" if code == 0 else f"code {code}")
    if grpc_server_error(code, details):
        fail(target, "5xx", ServerError(f"status {code} {details!r} answering {message[:300]!r}"))
    probe.check(target)
    return code, details


@settings(max_examples=fuzzkit.examples(150))
@given(request=infer_requests())
def test_grpc_infer_messages(grpc_probe: tuple[Any, fuzzkit.GrpcProbe], request: Any) -> None:
    _, probe = grpc_probe
    code, _ = call("grpc-infer", probe, probe.raw, request.SerializeToString())
    if fuzzkit.names_twice(request.inputs) or fuzzkit.names_twice(request.outputs):
        refused("grpc-infer", code != 0, request)


@settings(max_examples=fuzzkit.examples(60))
@given(case=repeated_names())
def test_grpc_repeated_names(
    grpc_probe: tuple[Any, fuzzkit.GrpcProbe], case: RepeatedNames
) -> None:
    """Valid but for a tensor named twice: INVALID_ARGUMENT and Triton's text, whether
    the inputs' data is raw or typed contents."""
    _, probe = grpc_probe
    request = pb.ModelInferRequest(model_name="toy", id=case.id or "")
    raw = case.inputs[0][2]
    for name, values, _ in case.inputs:
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        if raw:
            request.raw_input_contents.append(struct.pack("<4f", *values))
        else:
            tensor.contents.fp32_contents.extend(values)
    for name in case.outputs or ():
        request.outputs.add(name=name)
    answer = call("grpc-repeats", probe, probe.raw, request.SerializeToString())
    refused("grpc-repeats", answer == (3, case.refusal()), (case, answer))


UNTYPED_INPUT = (
    "a ModelInferRequest whose raw contents mismatch one input's size while another input "
    "has no datatype answered INTERNAL (fixed): despina_frontend_grpc/codec.py _stand_in looked up "
    "DATATYPE_TO_DTYPE[''] (KeyError) while building the error; it should be "
    "INVALID_ARGUMENT"
)


def test_untyped_input_beside_a_size_mismatch_is_invalid_argument(
    grpc_probe: tuple[Any, fuzzkit.GrpcProbe],
) -> None:
    _, probe = grpc_probe
    request = pb.ModelInferRequest(model_name="toy")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[])
    request.inputs.add(name="INPUT1")
    request.raw_input_contents.append(bytes(16))
    code, details = probe.call(request.SerializeToString())
    assert code == 3, details  # INVALID_ARGUMENT


UNARY_METHODS = [
    m.name
    for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    if not m.client_streaming and not m.server_streaming
]


@st.composite
def mutated_bytes(draw: st.DrawFn, base: bytes) -> bytes:
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[at : at + draw(st.integers(1, 8))]
    return bytes(data)


@settings(max_examples=fuzzkit.examples(150))
@given(
    method=st.sampled_from(["ModelInfer"] * 4 + UNARY_METHODS),
    message=st.binary(max_size=120)
    | mutated_bytes(fuzzkit.valid_grpc_request().SerializeToString()),
)
@example(method="ModelInfer", message=b"\x0a\xff\xff\xff\xff\x0f")
def test_grpc_random_bytes(
    grpc_probe: tuple[Any, fuzzkit.GrpcProbe], method: str, message: bytes
) -> None:
    _, probe = grpc_probe
    stub = probe.channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
    call("grpc-bytes", probe, stub, message)


# -- raw HTTP/2 frames ---------------------------------------------------------------------

STREAMS = st.sampled_from([0, 1, 1, 1, 3, 5, 2, 2**31 - 1]) | st.integers(0, 2**32 - 1)
FLAGS = st.sampled_from([0, 0x1, 0x4, 0x5, 0x8, 0xC, 0x20, 0x24, 0x25, 0x2D]) | st.integers(0, 255)


@st.composite
def payloads(draw: st.DrawFn, kind: int) -> bytes:
    if kind == 0:  # DATA
        message = draw(
            st.just(fuzzkit.valid_grpc_request().SerializeToString()) | st.binary(max_size=40)
        )
        return draw(
            st.just(grpc_message(message))
            | st.builds(grpc_message, st.just(message), st.booleans())
            | st.binary(max_size=40)
        )
    if kind == 1:  # HEADERS
        block = grpc_headers_block(
            draw(st.sampled_from([INFER_PATH, "/x", "/inference.GRPCInferenceService/ServerLive"])),
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(
                            ["grpc-timeout", "grpc-encoding", "content-type", ":path", "te",
                             "content-length", ":method", "x-y"]
                        ),
                        st.sampled_from(["1S", "0m", "gzip", "deflate", "br", "application/grpc",
                                         "text/plain", "-1", "99999999999999999999", "GET", ""]),
                    ),
                    max_size=3,
                )
            ),
        )  # fmt: skip
        return draw(st.just(block) | mutated_bytes(block) | st.binary(max_size=40))
    if kind == 4:  # SETTINGS
        pairs = draw(
            st.lists(
                st.tuples(st.integers(0, 8) | st.integers(0, 2**16 - 1), st.integers(0, 2**32 - 1)),
                max_size=4,
            )
        )
        return b"".join(struct.pack(">HI", k, v) for k, v in pairs)
    if kind in (3, 8):  # RST_STREAM, WINDOW_UPDATE
        return struct.pack(">I", draw(st.integers(0, 2**32 - 1)))
    if kind == 6:  # PING
        return draw(st.binary(min_size=8, max_size=8))
    if kind == 7:  # GOAWAY
        return struct.pack(">II", draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 20)))
    if kind == 2:  # PRIORITY
        return struct.pack(">IB", draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 255)))
    return draw(st.binary(max_size=48))


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A connection's bytes: a preface (rarely broken), SETTINGS, then 1-8 frames, among
    them sometimes a whole valid call."""
    preface = PREFACE if draw(st.integers(0, 29)) else draw(mutated_bytes(PREFACE))
    out = preface + frame(4, 0, 0, b"")
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 5)) == 0:
            stream = draw(st.sampled_from([1, 3, 5, 7]))
            message = grpc_message(fuzzkit.valid_grpc_request().SerializeToString())
            out += frame(1, 0x4, stream, grpc_headers_block()) + frame(0, 0x1, stream, message)
            continue
        kind = draw(st.integers(0, 9) | st.integers(0, 255))
        payload = draw(payloads(kind))
        length = None if draw(st.integers(0, 9)) else draw(st.integers(0, 2**24 - 1))
        out += frame(kind, draw(FLAGS), draw(STREAMS), payload, length)
    return out


def h2_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``; read until the server is silent for QUIET s, half-close, read until
    it closes (Hang if it does not within TIMEOUT)."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=fuzzkit.TIMEOUT) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        sock.settimeout(fuzzkit.QUIET)
        half_closed = False
        deadline = time.monotonic() + fuzzkit.TIMEOUT
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                if half_closed:
                    raise Hang(f"HTTP/2: no close within {fuzzkit.TIMEOUT} s") from None
                half_closed = True
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    break
                sock.settimeout(fuzzkit.TIMEOUT)
                continue
            if not chunk:
                break
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise Hang(f"HTTP/2: the connection did not end within {fuzzkit.TIMEOUT} s")
    return b"".join(chunks)


@settings(max_examples=fuzzkit.examples(120))
@given(data=frames())
@example(data=PREFACE + frame(4, 0, 0, b"") + frame(1, 0x4, 1, b"\xff" * 20))
@example(data=PREFACE + frame(4, 0, 0, b"") + frame(9, 0x4, 1, b""))
def test_http2_frames(grpc_probe: tuple[Any, fuzzkit.GrpcProbe], data: bytes) -> None:
    server, probe = grpc_probe
    target = "http2-frames"
    try:
        answer = h2_exchange(server.grpc_port, data)
    except Hang as exc:
        fail(target, "hangs", exc)
    lists, goaway = fuzzkit.h2_answers(answer)
    errors = fuzzkit.h2_server_errors(lists)
    if goaway is not None:
        outcome = f"goaway {goaway}"
    elif lists:
        outcome = "answered"
    else:
        outcome = "closed"
    record(target, outcome)
    if errors:
        fail(target, "5xx", ServerError(f"{errors} answering {data[:300]!r}"))
    probe.check(target)
