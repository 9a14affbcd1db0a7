"""Installs the TEST-ONLY cupy stand-in (``standin_cuda/cupy``) for a test: first on this
process's ``sys.path`` and on the PYTHONPATH its children inherit (a Python backend stub, a
client script). It simulates GPU memory in host memory and proves nothing about CUDA; tests
that use it say so in their names (``standin``) and docstrings."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STANDIN_DIR = str(Path(__file__).with_name("standin_cuda"))


@contextmanager
def installed() -> Iterator[Any]:
    """The stand-in imported as ``cupy`` until the block ends (then the previous state)."""
    saved = {n: m for n, m in sys.modules.items() if n == "cupy" or n.startswith("cupy.")}
    for name in saved:
        del sys.modules[name]
    pythonpath = os.environ.get("PYTHONPATH")
    sys.path.insert(0, STANDIN_DIR)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [STANDIN_DIR, pythonpath]))
    try:
        import cupy

        assert getattr(cupy, "DESPINA_STANDIN", False), cupy.__file__
        yield cupy
    finally:
        sys.modules.pop("cupy", None)
        sys.modules.update(saved)
        sys.path.remove(STANDIN_DIR)
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath
