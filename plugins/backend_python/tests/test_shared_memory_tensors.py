"""Tensors written by ``Arena.pack`` come back from ``unpack`` equal, through the ring
(small messages) and through a segment of their own (large ones): contiguous and
strided arrays, booleans, empty tensors and BYTES."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from despina_backend_python.shm import RING_MESSAGE_LIMIT, SHM_DIR, Arena, Ring, unpack


@pytest.fixture
def ring() -> Iterator[Ring]:
    name = f"despina_test_{uuid.uuid4().hex[:12]}"
    writer = Ring(name, create=True)
    yield writer
    writer.close()
    os.unlink(os.path.join(SHM_DIR, name))


def _roundtrip(ring: Ring, tensors: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
    fields = Arena("despina_test", uuid.uuid4().hex[:8], ring).pack(tensors)
    reader = Ring(ring.name)
    try:
        return dict(unpack(fields, reader))
    finally:
        reader.close()


def test_tensors_cross_through_the_ring(ring: Ring) -> None:
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    tensors = [
        ("contiguous", grid),
        ("transposed", grid.T),
        ("strided", grid[:, ::2]),
        ("flags", np.array([[True, False, True]])),
        ("empty", np.zeros((0, 3), dtype=np.int64)),
        ("strings", np.array([b"a", b"", b"xyz\x00"], dtype=np.object_)),
    ]
    out = _roundtrip(ring, tensors)
    assert list(out) == [name for name, _ in tensors]
    for name, array in tensors:
        assert out[name].dtype == array.dtype and out[name].shape == array.shape, name
        assert out[name].tolist() == array.tolist(), name


def test_a_large_tensor_takes_a_segment_of_its_own(ring: Ring) -> None:
    large = np.arange(RING_MESSAGE_LIMIT // 4 + 10, dtype=np.float32)
    strided = large[::2]
    out = _roundtrip(ring, [("large", large), ("strided", strided)])
    np.testing.assert_array_equal(out["large"], large)
    np.testing.assert_array_equal(out["strided"], strided)
