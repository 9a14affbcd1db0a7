"""The server side's framing of the model process's messages (``FrameBuffer``): a
message read whole, several in one read, and messages split at every byte come out
whole and in order."""

from __future__ import annotations

from despina_backend_python.wire.channel import FrameBuffer, encode

FIRST = {"op": "executed", "id": 7, "tensors": [("OUTPUT0", "FP32", (1, 16), b"\x00" * 64)]}
SECOND = {"op": "log", "level": 20, "message": "hello"}


def test_one_whole_message_per_read() -> None:
    frames = FrameBuffer()
    assert frames.feed(encode(FIRST)) == [FIRST]
    assert frames.feed(encode(SECOND)) == [SECOND]


def test_several_messages_in_one_read() -> None:
    assert FrameBuffer().feed(encode(FIRST) + encode(SECOND) + encode(FIRST)) == [
        FIRST,
        SECOND,
        FIRST,
    ]


def test_messages_split_anywhere() -> None:
    data = encode(FIRST) + encode(SECOND)
    for cut in range(1, len(data)):
        frames = FrameBuffer()
        assert frames.feed(data[:cut]) + frames.feed(data[cut:]) == [FIRST, SECOND], cut
    frames = FrameBuffer()
    assert [m for byte in range(len(data)) for m in frames.feed(data[byte : byte + 1])] == [
        FIRST,
        SECOND,
    ]
