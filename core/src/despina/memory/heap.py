"""Giving back the memory start-up freed.

Start-up (imports, parsing configs, loading models) frees much of what it allocated, and
glibc keeps freed heap pages for reuse: an idle server would hold them for good. The
server calls :func:`release_free_heap` once it serves (about 1 MB of a small server).
"""

from __future__ import annotations

import ctypes
import gc


def release_free_heap() -> bool:
    """Collect garbage, then return the C heap's free pages to the system (glibc's
    ``malloc_trim``). False, doing nothing, where the C library has no ``malloc_trim``
    (musl, macOS)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    gc.collect()
    trim(0)
    return True
