"""``release_free_heap``: memory freed inside the C heap (which glibc keeps for reuse while
a live allocation sits above it) goes back to the system."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: 400 blocks of 100 KiB (under glibc's mmap threshold: they live in the heap), written,
#: each followed by a 4 KiB block that stays (past Python's own allocator: in the heap
#: too), the 400 freed: holes between live blocks, resident until the heap is trimmed.
CODE = """
from despina.memory.heap import release_free_heap

def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))

blocks, pinned = [], []
for _ in range(400):
    blocks.append(bytearray(100 * 1024))
    blocks[-1][:] = b"x" * len(blocks[-1])
    pinned.append(bytearray(4096))
del blocks
before = rss_kib()
released = release_free_heap()
print(released, before, rss_kib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=60
    )
    released, before, after = result.stdout.split()
    if released != "True":
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert int(before) - int(after) > 30 * 1024, result.stdout
