"""HPACK decoding with a per-connection cache of whole header blocks.

A client sends nearly the same headers with every call, and once its encoder's dynamic
table has settled the blocks are byte-identical: decoding them again with ``hpack`` (pure
Python, Huffman included) cost a quarter of the server's time per gRPC call. A block's
meaning depends only on its bytes and the dynamic table, and a decoded block that left
the table unchanged can be replayed from the cache while the table stays unchanged; any
block that changes the table (an added entry, a size update) empties the cache.
"""

from __future__ import annotations

from typing import Any

import hpack

#: Distinct header blocks kept per connection (a client cycling more misses the cache).
CACHED_BLOCKS = 64


class CachingDecoder:
    """``decode(block)`` -> the block's ``(name, value)`` strings, as ``hpack.Decoder``
    (its errors included), replayed from the cache where the table allows."""

    def __init__(self, max_header_list_size: int) -> None:
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = max_header_list_size
        self.blocks: dict[bytes, list[tuple[str, str]]] = {}

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        cached = self.blocks.get(block)
        if cached is not None:
            return cached
        before = self._table_state()
        headers = [(str(k), str(v)) for k, v in self.decoder.decode(block)]
        after = self._table_state()
        if not _same(before, after):
            self.blocks.clear()
        elif len(self.blocks) < CACHED_BLOCKS:
            self.blocks[block] = headers
        return headers

    def _table_state(self) -> tuple[int, Any, int]:
        """(entries, the newest entry object, size limit): every change to the dynamic
        table adds a new newest entry or changes the limit."""
        table = self.decoder.header_table
        entries = table.dynamic_entries
        return len(entries), entries[0] if entries else None, table.maxsize


def _same(before: tuple[int, Any, int], after: tuple[int, Any, int]) -> bool:
    return before[0] == after[0] and before[1] is after[1] and before[2] == after[2]
