"""pb_utils' BYTES wire helpers agree with tritonclient's, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
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
