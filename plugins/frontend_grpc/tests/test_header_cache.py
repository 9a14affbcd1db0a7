"""The header-block cache decodes exactly as hpack does, whatever the encoder's table does."""

from __future__ import annotations

import hpack
from despina_frontend_grpc.header_cache import CachingDecoder


def call(n: int) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":path", "/inference.GRPCInferenceService/ModelInfer"),
        ("content-type", "application/grpc"),
        ("x-request", f"r{n % 3}"),
    ]


def test_cached_blocks_decode_as_hpack_does() -> None:
    """A stream of calls through one encoder: repeated blocks come from the cache, and
    blocks that add entries (new x-request values, a table resize) empty it."""
    encoder = hpack.Encoder()
    caching, plain = CachingDecoder(65536), hpack.Decoder()
    hits = 0
    for n in range(40):
        if n == 20:
            encoder.header_table_size = 64  # a size update in the next block evicts entries
        block = encoder.encode(call(n))
        hits += block in caching.blocks
        assert caching.decode(block) == [(str(k), str(v)) for k, v in plain.decode(block)]
    assert hits > 10  # calls 3-19 repeat earlier blocks exactly


def test_a_block_that_adds_entries_empties_the_cache() -> None:
    encoder = hpack.Encoder()
    decoder = CachingDecoder(65536)
    first = encoder.encode(call(0))
    decoder.decode(first)  # adds its literals to the table: not cached
    assert not decoder.blocks
    again = encoder.encode(call(0))  # all indexed now
    decoder.decode(again)
    assert again in decoder.blocks
    decoder.decode(encoder.encode([*call(0), ("x-new", "v")]))  # adds an entry
    assert not decoder.blocks
