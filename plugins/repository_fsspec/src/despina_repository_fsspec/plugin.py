"""The ``despina_repository_sources`` hook: cheap to import (fsspec loads on first sync)."""

from __future__ import annotations

from typing import Any

from despina import hookimpl


@hookimpl
def despina_repository_sources() -> list[type[Any]]:
    from despina_repository_fsspec.source import FsspecSource

    return [FsspecSource]
