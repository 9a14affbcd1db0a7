"""BYTES tensors in Triton's wire encoding: ``serialize_bytes`` agrees with tritonclient's
``serialize_byte_tensor`` byte for byte on both of its paths (padded rows, and joined
elements for lengths too uneven to pad), and ``deserialize_bytes`` reads it back."""

from __future__ import annotations

import random

import numpy as np
import pytest
from despina.inference.tensors import PADDED_BYTES_LIMIT, deserialize_bytes, serialize_bytes
from tritonclient.utils import serialize_byte_tensor

_RANDOM = random.Random(7)
CASES = {
    "names": [b"item-%d" % i for i in range(1000)],
    "nul bytes inside and at the end": [b"a\x00", b"\x00", b"", b"xyz\x00\x00", b"\x00b"],
    "all empty": [b"", b"", b""],
    "one long among short (joined)": [b"x" * 10_000] + [b"y"] * 20,
    "random bytes": [
        bytes(_RANDOM.getrandbits(8) for _ in range(_RANDOM.randint(0, 12))) for _ in range(500)
    ],
}


def _object_array(items: list[object]) -> np.ndarray:
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


@pytest.mark.parametrize("items", CASES.values(), ids=CASES.keys())
def test_matches_tritonclient_and_reads_back(items: list[bytes]) -> None:
    array = _object_array(items)
    encoded = serialize_bytes(array)
    assert encoded == serialize_byte_tensor(array).item()
    assert deserialize_bytes(encoded, len(items)).tolist() == items


def test_uneven_lengths_take_the_joined_path() -> None:
    items = CASES["one long among short (joined)"]
    width, total = max(map(len, items)), sum(map(len, items))
    assert width * len(items) > PADDED_BYTES_LIMIT * (total + len(items))


def test_non_bytes_elements_are_their_utf8_text() -> None:
    array = _object_array(["h\u00e9", 3, b"raw"]).reshape(3, 1)
    expected = _object_array([b"h\xc3\xa9", b"3", b"raw"])
    assert serialize_bytes(array) == serialize_byte_tensor(expected).item()


def test_empty_tensor_is_empty() -> None:
    assert serialize_bytes(np.empty((0, 4), dtype=np.object_)) == b""
