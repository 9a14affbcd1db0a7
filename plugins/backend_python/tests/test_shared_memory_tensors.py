"""Tensors written by ``Arena.pack`` come back from ``unpack`` equal, inside the message
(small fixed-size ones), through the ring (other small messages) and through a segment of
their own (large ones): contiguous and strided arrays, booleans, empty tensors and BYTES;
a segment found hard-linked goes to the link handler."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from despina import claim_shm
from despina_backend_python.wire import shm
from despina_backend_python.wire.shm import (
    INLINE_LIMIT,
    RING_MESSAGE_LIMIT,
    SHM_DIR,
    Arena,
    Ring,
    unpack,
)


@pytest.fixture
def ring() -> Iterator[Ring]:
    name = f"despina_test_{uuid.uuid4().hex[:12]}"
    writer = Ring(name, create=True)
    yield writer
    writer.close()
    os.unlink(os.path.join(SHM_DIR, name))


@pytest.fixture
def folder() -> Iterator[str]:
    """A private directory of /dev/shm, relative to it (the segments' prefix)."""
    path = tempfile.mkdtemp(prefix="despina_test_", dir=SHM_DIR)
    yield os.path.basename(path)
    shutil.rmtree(path)


def _roundtrip(
    ring: Ring, folder: str, tensors: list[tuple[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    fields = Arena(folder, uuid.uuid4().hex[:8], ring).pack(tensors)
    reader = Ring(ring.name)
    try:
        return dict(unpack(fields, reader))
    finally:
        reader.close()


def _small_tensors() -> list[tuple[str, np.ndarray]]:
    """Small tensors of fixed-size datatypes: contiguous and strided, booleans, empty."""
    grid = np.arange(24, dtype=np.float32).reshape(4, 6)
    return [
        ("contiguous", grid),
        ("transposed", grid.T),
        ("strided", grid[:, ::2]),
        ("flags", np.array([[True, False, True]])),
        ("empty", np.zeros((0, 3), dtype=np.int64)),
        ("half", np.array([1.5, -2.0], dtype=np.float16)),
    ]


def _assert_equal(out: dict[str, np.ndarray], tensors: list[tuple[str, np.ndarray]]) -> None:
    assert list(out) == [name for name, _ in tensors]
    for name, array in tensors:
        assert out[name].dtype == array.dtype and out[name].shape == array.shape, name
        assert out[name].tolist() == array.tolist(), name
        assert out[name].flags.writeable, name  # the reader's own copy


def test_tensors_cross_through_the_ring(ring: Ring, folder: str) -> None:
    # a BYTES tensor sends the message through the ring
    tensors = [*_small_tensors(), ("strings", np.array([b"a", b"", b"xyz\x00"], dtype=object))]
    _assert_equal(_roundtrip(ring, folder, tensors), tensors)


def test_small_fixed_size_tensors_travel_inside_the_message(ring: Ring, folder: str) -> None:
    tensors = _small_tensors()
    fields = Arena(folder, "t", ring).pack(tensors)
    assert fields["ring"] is None and fields["shm"] is None and "tensors" not in fields
    assert ring.reserve(ring.capacity) is not None  # nothing of the ring was taken
    _assert_equal(dict(unpack(fields)), tensors)


@pytest.mark.parametrize(
    "tensors",
    [
        [("over", np.zeros(INLINE_LIMIT // 8 + 1, dtype=np.float64))],
        [("numbers", np.zeros(4, dtype=np.int32)), ("strings", np.array([b"a"], dtype=object))],
    ],
    ids=["over the inline limit", "with a BYTES tensor"],
)
def test_other_small_messages_take_the_ring(
    ring: Ring, folder: str, tensors: list[tuple[str, np.ndarray]]
) -> None:
    fields = Arena(folder, "t", ring).pack(tensors)
    assert fields["ring"] is not None and "inline" not in fields
    reader = Ring(ring.name)
    try:
        out = dict(unpack(fields, reader))
    finally:
        reader.close()
    for name, array in tensors:
        assert out[name].tolist() == array.tolist(), name


def test_a_large_tensor_takes_a_segment_of_its_own(ring: Ring, folder: str) -> None:
    large = np.arange(RING_MESSAGE_LIMIT // 4 + 10, dtype=np.float32)
    strided = large[::2]
    out = _roundtrip(ring, folder, [("large", large), ("strided", strided)])
    assert os.listdir(os.path.join(SHM_DIR, folder)) == []  # unlinked by the reader
    np.testing.assert_array_equal(out["large"], large)
    np.testing.assert_array_equal(out["strided"], strided)


def test_a_hard_linked_segment_goes_to_the_link_handler(ring: Ring, folder: str) -> None:
    found: list[shm.Identity] = []
    shm.set_link_handler(found.append)
    try:
        _unpack_linked(ring, folder, found)
    finally:
        shm.set_link_handler(claim_shm)  # the server's handler


def _unpack_linked(ring: Ring, folder: str, found: list[shm.Identity]) -> None:
    large = np.arange(RING_MESSAGE_LIMIT // 4 + 10, dtype=np.float32)
    fields = Arena(folder, "t", ring).pack([("large", large)])
    segment = os.path.join(SHM_DIR, fields["shm"])
    st = os.stat(segment)
    assert st.st_mode & 0o777 == 0o600
    link = os.path.join(SHM_DIR, f"despina_test_link_{uuid.uuid4().hex}")
    os.link(segment, link)
    try:
        out = dict(unpack(fields, ring))
    finally:
        os.unlink(link)
    np.testing.assert_array_equal(out["large"], large)
    assert found == [(st.st_dev, st.st_ino)]
    out = dict(unpack(Arena(folder, "u", ring).pack([("large", large)]), ring))  # no link
    np.testing.assert_array_equal(out["large"], large)
    assert found == [(st.st_dev, st.st_ino)]
