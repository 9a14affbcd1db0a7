"""Hypothesis strategies shared by the fuzz targets: JSON values, mutations of a valid
inference request, HTTP/1.1 request bytes, binary tensor bodies, requests naming an input
or output twice."""

from __future__ import annotations

import copy
import json
import struct
from dataclasses import dataclass
from typing import Any

from fuzzkit import valid_infer_json
from hypothesis import strategies as st

DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES", "BF16",
]  # fmt: skip
INTERESTING_INTS = [
    0, 1, -1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 255, 256, 65535, 65536, 2**31 - 1,
    2**31, -(2**31), 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63), 2**64 - 1, 2**64,
    10**30, -(10**30),
]  # fmt: skip
KEYS = [
    "id", "inputs", "outputs", "name", "datatype", "shape", "data", "parameters",
    "binary_data", "binary_data_size", "binary_data_output", "classification",
    "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset",
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "INPUT0",
    "INPUT1", "OUTPUT0", "",
]  # fmt: skip

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(INTERESTING_INTS)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(DATATYPES + KEYS)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.sampled_from(KEYS), children, max_size=5)
    ),
    max_leaves=16,
)


def dumps(value: Any) -> bytes:
    """JSON text of ``value``; NaN and infinities become the non-JSON ``NaN``/``Infinity``
    (the server must refuse them, not fail)."""
    return json.dumps(value, allow_nan=True).encode()


def _slots(doc: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) of a JSON document, depth first."""
    if isinstance(doc, dict):
        for key in list(doc):
            out.append((doc, key))
            _slots(doc[key], out)
    elif isinstance(doc, list):
        for index in range(len(doc)):
            out.append((doc, index))
            _slots(doc[index], out)
    return out


@st.composite
def mutated_json(draw: st.DrawFn, base: Any) -> Any:
    """``base`` after 0-4 random mutations: delete, replace (random JSON, an interesting
    value, a datatype), add a key, duplicate a list element."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 4))):
        slots = _slots(doc, [])
        op = draw(st.sampled_from(["replace", "replace", "delete", "add", "dup"]))
        if not slots or op == "add":
            targets = [d for d in [doc, *(c[k] for c, k in slots)] if isinstance(d, dict)]
            if targets:
                where = draw(st.sampled_from(targets))
                where[draw(st.sampled_from(KEYS) | st.text(max_size=6))] = draw(json_values)
            continue
        container, key = draw(st.sampled_from(slots))
        if op == "delete":
            del container[key]
        elif op == "dup" and isinstance(container, list):
            container.insert(key, copy.deepcopy(container[key]))
        else:
            container[key] = draw(
                json_values
                | st.sampled_from(INTERESTING_INTS)
                | st.sampled_from(DATATYPES)
                | st.lists(st.sampled_from(INTERESTING_INTS), max_size=4)
            )
    return doc


def infer_bodies() -> st.SearchStrategy[bytes]:
    """JSON inference bodies: mutated valid requests, arbitrary JSON, broken text."""
    base = valid_infer_json()
    return st.one_of(
        mutated_json(base).map(dumps),
        json_values.map(dumps),
        st.builds(lambda doc, cut: dumps(doc)[:cut], mutated_json(base), st.integers(0, 300)),
        st.binary(max_size=64),
    )


@st.composite
def binary_request(draw: st.DrawFn) -> tuple[bytes, str]:
    """(body, Inference-Header-Content-Length value) of the binary tensor extension: a
    JSON header whose inputs (one in four times with a name given twice) announce
    binary_data_size values, then random tail bytes."""
    model_bytes = draw(st.booleans())
    datatype = "BYTES" if model_bytes else "FP32"
    inputs = []
    tail = b""
    names = ["INPUT0", "INPUT1"]
    if draw(st.integers(0, 3)) == 0:  # one named twice: refused (Triton's 400)
        names.insert(draw(st.integers(0, 2)), draw(st.sampled_from(names)))
    for name in names:
        if model_bytes:
            items = draw(st.lists(st.binary(max_size=8), min_size=0, max_size=3))
            data = b"".join(struct.pack("<I", len(i)) + i for i in items)
            shape: list[Any] = [len(items)]
        else:
            data = struct.pack("<4f", *draw(st.lists(st.floats(width=32), min_size=4, max_size=4)))
            shape = [1, 4]
        size: Any = draw(st.just(len(data)) | st.sampled_from(INTERESTING_INTS) | json_scalars)
        shape = draw(st.just(shape) | st.lists(st.sampled_from(INTERESTING_INTS), max_size=3))
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
        entry["parameters"] = {"binary_data_size": size}
        inputs.append(entry)
        tail += draw(st.just(data) | st.binary(max_size=48))
    header: Any = {"inputs": inputs}
    if draw(st.booleans()):
        header["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    header = draw(st.just(header) | mutated_json(header))
    head = dumps(header)
    tail += draw(st.binary(max_size=16))
    length = draw(
        st.just(str(len(head)))
        | st.integers(-5, len(head) + len(tail) + 5).map(str)
        | st.sampled_from(INTERESTING_INTS).map(str)
        | st.text(max_size=6)
        | st.sampled_from(["", " 1", "0x10", "1e3", "+5", "1.0", "١٢"])
    )
    model = "toy_bytes" if model_bytes else "toy"
    return head + tail, f"{model}\n{length}"


METHODS = ["GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE"]
PATHS = [
    "/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/toy", "/v2/models/toy/ready",
    "/v2/models/toy/infer", "/v2/models/toy/versions/1/infer", "/v2/models/toy_bytes/infer",
    "/v2/models/toy/config", "/v2/models/toy/stats", "/v2/models/stats",
    "/v2/models/toy/generate", "/v2/models/toy/generate_stream", "/v2/repository/index",
    "/v2/logging", "/v2/trace/setting", "/v2/systemsharedmemory/status",
    "/v2/cudasharedmemory/status", "/v2/models/nope/infer", "/v2/models/%2E%2E/infer",
    "/v2/models/toy/versions/99999999999999999999/infer", "*", "/", "",
]  # fmt: skip
HEADER_NAMES = [
    "Content-Length", "Transfer-Encoding", "Inference-Header-Content-Length",
    "Content-Encoding", "Content-Type", "Expect", "Connection", "Host", "Accept-Encoding",
    "Upgrade", "Keep-Alive", "Trailer", "X-Request-Id",
]  # fmt: skip
HEADER_VALUES = [
    "0", "-1", "1", "18446744073709551616", "7fffffffffffffff", "chunked", "gzip",
    "deflate", "identity", "br", "chunked, gzip", "gzip, chunked", "100-continue", "close",
    "keep-alive", "application/json", "application/octet-stream", "h2c", "", " ", "\t",
]  # fmt: skip

header_text = st.text(
    st.characters(min_codepoint=0, max_codepoint=255, exclude_characters="\r\n"), max_size=24
)
headers = st.lists(
    st.tuples(
        st.sampled_from(HEADER_NAMES) | header_text,
        st.sampled_from(HEADER_VALUES) | st.integers().map(str) | header_text,
    ),
    max_size=6,
)


@st.composite
def chunked(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` in random chunks; sometimes with a bad size line, extension or ending."""
    out = b""
    at = 0
    while at < len(body):
        size = draw(st.integers(1, max(1, len(body) - at)))
        line = draw(
            st.just(f"{size:x}")
            | st.just(f"{size:X};ext=1")
            | st.sampled_from(["7fffffffffffffff", "ffffffffffffffffff", "-1", "0x1", "", "g"])
            | st.integers(0, 2**70).map(lambda n: f"{n:x}")
        )
        out += line.encode() + b"\r\n" + body[at : at + size] + b"\r\n"
        at += size
    return out + draw(
        st.sampled_from([b"0\r\n\r\n", b"0\r\n\r\n", b"0\r\nX-T: 1\r\n\r\n", b"", b"0\r\n"])
    )


@st.composite
def raw_http(draw: st.DrawFn) -> bytes:
    """HTTP/1.1 request bytes: a method, path and version (mostly real), headers (mostly
    those that matter), a body (mostly an inference body) framed by Content-Length (exact
    or not), chunked (good or bad) or not at all; sometimes pipelined, sometimes bytes."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.binary(max_size=200))
    method = draw(st.sampled_from(METHODS) | header_text)
    path = draw(
        st.sampled_from(PATHS)
        | st.builds(lambda p, s: p + s, st.sampled_from(PATHS), header_text)
        | st.text(max_size=40).map(lambda t: "/v2/models/" + t)
    )
    version = draw(
        st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0", "HTTP/2.0", "HTTP/1.1 x", "http/1.1", ""])
    )
    body = draw(
        infer_bodies()
        | binary_request().map(lambda b: b[0])
        | st.just(b"")
        | st.binary(max_size=64)
    )
    lines = [f"{method} {path} {version}".encode("utf-8", "surrogatepass")]
    for name, value in draw(headers):
        lines.append(f"{name}: {value}".encode("utf-8", "surrogatepass"))
    if draw(st.integers(0, 9)) == 0:
        lines.append(draw(st.binary(max_size=30)))  # a raw header line
    framing = draw(st.sampled_from(["length", "length", "chunked", "wrong-length", "none"]))
    if framing == "length":
        lines.append(b"Content-Length: %d" % len(body))
        payload = body
    elif framing == "wrong-length":
        declared = draw(st.integers(0, len(body) + 64) | st.sampled_from(INTERESTING_INTS))
        lines.append(f"Content-Length: {declared}".encode())
        payload = body
    elif framing == "chunked":
        lines.append(b"Transfer-Encoding: chunked")
        payload = draw(chunked(body))
    else:
        payload = body
    request = b"\r\n".join(lines) + b"\r\n\r\n" + payload
    if draw(st.integers(0, 7)) == 0:  # pipelined behind a valid request
        valid = dumps(valid_infer_json())
        head = b"POST /v2/models/toy/infer HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(valid)
        request = head + valid + request
    return request


@dataclass(frozen=True)
class RepeatedNames:
    """A request of the toy model (FP32 [1,4]) valid but for a name it gives twice: its
    inputs (INPUT0 and INPUT1, one of them or both more than once) or its outputs."""

    #: Input names in request order, each with its values and whether they are binary.
    inputs: list[tuple[str, list[float], bool]]
    outputs: list[str] | None
    id: str | None

    def refusal(self) -> str:
        """Triton's text: the first input given twice, else the first output."""
        for kind, names in (("input", [n for n, _, _ in self.inputs]), ("output", self.outputs)):
            for at, name in enumerate(names or ()):
                if name in names[:at]:
                    who = self.id or "<id_unknown>"
                    return f"[request id: {who}] {kind} '{name}' already exists in request"
        raise AssertionError("no name given twice")

    def http_body(self) -> tuple[bytes, int | None]:
        """The /infer body and its Inference-Header-Content-Length (None: all JSON)."""
        header: dict[str, Any] = {"inputs": []}
        if self.id is not None:
            header["id"] = self.id
        tail = b""
        for name, values, binary in self.inputs:
            entry: dict[str, Any] = {"name": name, "datatype": "FP32", "shape": [1, 4]}
            if binary:
                data = struct.pack("<4f", *values)
                entry["parameters"] = {"binary_data_size": len(data)}
                tail += data
            else:
                entry["data"] = values
            header["inputs"].append(entry)
        if self.outputs is not None:
            header["outputs"] = [{"name": n} for n in self.outputs]
        head = dumps(header)
        return head + tail, len(head) if tail else None


FP32_VALUES = st.lists(
    st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=4, max_size=4
)


@st.composite
def repeated_names(draw: st.DrawFn, binary: bool = True) -> RepeatedNames:
    """A :class:`RepeatedNames`; ``binary``: some inputs may be binary tensors."""
    names = ["INPUT0", "INPUT1"]
    for _ in range(draw(st.integers(0, 3))):
        names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(["INPUT0", "INPUT1"])))
    outputs = draw(st.none() | st.lists(st.sampled_from(["OUTPUT0", "OUTPUT1"]), max_size=4))
    if len(set(names)) == len(names) and (outputs is None or len(set(outputs)) == len(outputs)):
        if outputs and draw(st.booleans()):
            outputs.insert(draw(st.integers(0, len(outputs))), draw(st.sampled_from(outputs)))
        else:
            names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(names)))
    inputs = [(n, draw(FP32_VALUES), binary and draw(st.booleans())) for n in names]
    request_id = draw(st.none() | st.text(st.characters(exclude_categories=["Cs"]), max_size=8))
    return RepeatedNames(inputs, outputs, request_id)
