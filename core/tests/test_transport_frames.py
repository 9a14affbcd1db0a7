"""The frame codec (``despina.transport.frames``): encoding as parts, incremental decoding
with views and a bound, and :class:`FrameLink` over a real TCP connection on 127.0.0.1."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable

import pytest
from despina import Frame, FrameLink
from despina.transport.frames import (
    HEADER,
    FrameDecoder,
    FrameTooLarge,
    Part,
    encode_frame,
)


def test_encode_gives_the_header_then_the_parts_untouched() -> None:
    body = bytearray(b"body")
    view = memoryview(b"xyz")
    parts = encode_frame(7, 42, -3, [b"ab", body, view])
    assert parts[0] == HEADER.pack(7, 42, -3, 9) and len(parts[0]) == 13
    assert parts[1] == b"ab" and parts[2] is body and parts[3] is view
    assert encode_frame(1, 0) == [HEADER.pack(1, 0, 0, 0)]


def test_decoder_yields_every_frame_of_one_chunk_as_views_of_it() -> None:
    data = b"".join(b"".join(encode_frame(k, k * 10, -k, [bytes([k]) * k])) for k in (1, 2, 0, 5))
    frames = FrameDecoder().feed(data)
    assert [(f.kind, f.call, f.aux, bytes(f.payload)) for f in frames] == [
        (k, k * 10, -k, bytes([k]) * k) for k in (1, 2, 0, 5)
    ]
    assert all(isinstance(f.payload, memoryview) and f.payload.obj is data for f in frames)
    assert all(f.payload.readonly for f in frames)


@pytest.mark.parametrize("seed", range(5))
def test_decoder_reassembles_frames_split_anywhere(seed: int) -> None:
    rng = random.Random(seed)
    sent = [
        (rng.randrange(256), rng.randrange(2**32), rng.randrange(-(2**31), 2**31), rng.randbytes(n))
        for n in (0, 1, 12, 13, 14, 1000, 70_000, 0, 3)
    ]
    stream = b"".join(b"".join(encode_frame(k, c, a, [p])) for k, c, a, p in sent)
    decoder, got = FrameDecoder(), []
    offset = 0
    while offset < len(stream):
        step = rng.choice((1, 2, 7, 13, 500, 65_536))
        got += decoder.feed(stream[offset : offset + step])
        offset += step
    assert [(f.kind, f.call, f.aux, bytes(f.payload)) for f in got] == sent


def test_a_buffered_frame_is_copied_once_it_completes_not_before() -> None:
    decoder = FrameDecoder()
    frame = b"".join(encode_frame(3, 1, 0, [b"x" * 100]))
    assert decoder.feed(frame[:5]) == []
    assert decoder.feed(frame[5:50]) == []
    (done,) = decoder.feed(frame[50:] + frame[:20])  # the next frame starts in this chunk
    assert bytes(done.payload) == b"x" * 100
    (again,) = decoder.feed(frame[20:])
    assert bytes(again.payload) == b"x" * 100


def test_a_frame_above_the_bound_is_refused_from_its_header() -> None:
    decoder = FrameDecoder(max_payload=1024)
    assert decoder.feed(b"".join(encode_frame(1, 1, 0, [b"x" * 1024])))[0].payload.nbytes == 1024
    with pytest.raises(FrameTooLarge, match="1025 bytes"):
        decoder.feed(HEADER.pack(1, 2, 0, 1025))  # refused before any payload arrives


class _Collect:
    def __init__(self, link: FrameLink) -> None:
        self.link = link
        self.frames: list[Frame] = []
        self.lost = asyncio.Event()

    def frame_received(self, frame: Frame) -> None:
        self.frames.append(frame)
        if frame.kind == 1:  # echo, payload reversed
            self.link.send(2, frame.call, frame.aux, bytes(frame.payload)[::-1])

    def connection_lost(self) -> None:
        self.lost.set()


async def _pair(max_payload: int = 2**31 - 1) -> tuple[FrameLink, FrameLink, asyncio.Server]:
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[FrameLink] = loop.create_future()

    def serve() -> FrameLink:
        link = FrameLink(_Collect, max_payload)
        accepted.set_result(link)
        return link

    server = await loop.create_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await loop.create_connection(lambda: FrameLink(_Collect), "127.0.0.1", port)
    return client, await asyncio.wait_for(accepted, 5), server


def test_frame_link_batches_a_loop_iteration_into_one_write_and_echoes() -> None:
    async def scenario() -> None:
        client, served, server = await _pair()
        assert client.transport is not None
        writes: list[int] = []
        writelines = client.transport.writelines

        def counted(parts: Iterable[Part]) -> None:
            parts = list(parts)
            writes.append(len(parts))
            writelines(parts)

        client.transport.writelines = counted  # type: ignore[method-assign,assignment]
        for call in range(100):
            client.send(1, call, -call, b"ab", memoryview(b"cd"))
        assert writes == []  # queued until the loop turns
        await asyncio.sleep(0)
        assert writes == [300]  # one writelines: a header and two parts per frame
        collected = client.handler
        assert isinstance(collected, _Collect)
        for _ in range(200):
            if len(collected.frames) == 100:
                break
            await asyncio.sleep(0.01)
        assert [(f.kind, f.call, f.aux, bytes(f.payload)) for f in collected.frames] == [
            (2, call, -call, b"dcba") for call in range(100)
        ]
        client.close()
        await asyncio.wait_for(client.closed, 5)
        assert not client.connected
        client.send(1, 1)  # dropped once closed
        assert isinstance(served.handler, _Collect)
        await asyncio.wait_for(served.handler.lost.wait(), 5)
        server.close()

    asyncio.run(scenario())


def test_frame_link_drops_a_connection_sending_an_oversized_frame() -> None:
    async def scenario() -> None:
        client, served, server = await _pair(max_payload=10)
        client.send(1, 1, 0, b"0123456789")
        client.send(1, 2, 0, b"0123456789x")
        await asyncio.wait_for(served.closed, 5)  # the server's end aborted the link
        await asyncio.wait_for(client.closed, 5)
        assert isinstance(served.handler, _Collect)
        assert [f.call for f in served.handler.frames] == [1]
        server.close()

    asyncio.run(scenario())
