"""Giving back the memory a model's start-up freed (the model process's side of
``despina.memory.heap``: model processes do not import despina's core).

Importing the model and its ``initialize`` free much of what they allocated (loading
weights, parsing files), and glibc keeps freed heap pages for reuse. The model process
calls :func:`release_free_heap` once the model is ready.
"""

from __future__ import annotations

import ctypes
import gc


def release_free_heap() -> None:
    """Collect garbage, then have glibc return its heaps' free pages to the system; nothing
    where the C library has no ``malloc_trim`` (musl, macOS)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        gc.collect()
        trim(0)
