"""pb_utils' BYTES wire helpers agree with tritonclient's, byte for byte; BYTES tensors
crossing shared memory (lengths and joined data) come back element for element."""

from __future__ import annotations

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from despina_backend_python.pb.types import bytes_from_parts
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

TENSORS = [
    np.array([b"a", b"", b"xyz\x00"], dtype=np.object_),
    np.array(["h\u00e9", "b"], dtype=np.object_),
    np.array([[b"ab", b"c"], [b"", b"d"]], dtype="S2"),
]


@pytest.mark.parametrize("tensor", TENSORS, ids=["bytes", "str", "S-dtype"])
def test_serialize_and_deserialize_match_tritonclient(tensor: np.ndarray) -> None:
    ours = pb_utils.serialize_byte_tensor(tensor)
    theirs = serialize_byte_tensor(tensor)
    assert bytes(ours) == theirs.item()
    decoded = pb_utils.deserialize_bytes_tensor(ours)
    assert decoded.tolist() == deserialize_bytes_tensor(theirs.item()).tolist()


PARTS = {
    "names": [b"item-%d" % i for i in range(1000)],
    "a NUL at an element's end (sliced)": [b"ab\x00", b"c", b""],
    "NULs inside and in front": [b"\x00b", b"a\x00c", b"d"],
    "all empty": [b"", b""],
    "one long among short (sliced)": [b"x" * 10_000, b"y", b"z"],
}


@pytest.mark.parametrize("items", PARTS.values(), ids=PARTS.keys())
def test_bytes_from_parts_cuts_at_the_lengths(items: list[bytes]) -> None:
    lengths = np.array([len(item) for item in items], dtype=np.uint32)
    shape = (len(items), 1)
    array = bytes_from_parts(lengths, b"".join(items), shape)
    assert array.shape == shape and array.dtype == np.object_
    assert array.reshape(-1).tolist() == items
    assert {type(item) for item in array.reshape(-1)} == {bytes}
