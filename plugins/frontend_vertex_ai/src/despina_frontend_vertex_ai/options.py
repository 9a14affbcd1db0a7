"""The Vertex AI frontend's settings, read once (``despina_configure``): its flags and the
``AIP_*`` environment variables tritonserver reads."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from despina import StashKey


@dataclass(frozen=True)
class VertexOptions:
    """``--allow-vertex-ai``, ``--vertex-ai-*``, ``AIP_PREDICT_ROUTE`` and
    ``AIP_HEALTH_ROUTE``, typed."""

    allow: bool
    port: int
    address: str
    thread_count: int
    #: ``--vertex-ai-default-model`` ("": the repository's only ready model).
    default_model: str
    #: ``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE`` ("" when not set); each a regular
    #: expression a request path must match whole, as tritonserver reads them.
    predict_route: str
    health_route: str

    @classmethod
    def from_namespace(
        cls, flags: argparse.Namespace, environ: Mapping[str, str] | None = None
    ) -> VertexOptions:
        """Read the flags and ``environ`` (default: the process's); ValueError for a
        route that is not a regular expression."""
        env = os.environ if environ is None else environ
        options = cls(
            allow=bool(flags.allow_vertex_ai),
            port=int(flags.vertex_ai_port),
            address=str(flags.vertex_ai_address),
            thread_count=int(flags.vertex_ai_thread_count),
            default_model=str(flags.vertex_ai_default_model or ""),
            predict_route=env.get("AIP_PREDICT_ROUTE", ""),
            health_route=env.get("AIP_HEALTH_ROUTE", ""),
        )
        for name, route in (
            ("AIP_PREDICT_ROUTE", options.predict_route),
            ("AIP_HEALTH_ROUTE", options.health_route),
        ):
            try:
                re.compile(route)
            except re.error as exc:
                raise ValueError(f"{name} '{route}' is not a regular expression: {exc}") from None
        return options


#: Where the Vertex AI frontend's options live in the server's stash.
VERTEX_OPTIONS: StashKey[VertexOptions] = StashKey("despina-frontend-vertex-ai")
