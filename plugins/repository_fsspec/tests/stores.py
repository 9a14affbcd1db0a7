"""The interface the tests see of an object store (the fixtures are in conftest)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Store:
    """Bucket ``models`` of a running store; ``url`` is the repository ``models/repo``."""

    url: str
    missing_url: str  # a repository in a bucket that does not exist
    put: Callable[[str, bytes], None]  # key below ``repo/``, contents
    delete: Callable[[str], None]
