"""What every endpoint module works with: the server's data plane and the frontend's settings."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from despina_frontend_http.decode import HeaderLayouts
from despina_frontend_http.plugin import (
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_OUTPUTS,
)
from despina_frontend_http.restricted import Restrictions

if TYPE_CHECKING:
    from despina import FrontendHost

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: (method, path, restricted-API group, handler)
Route = tuple[str, str, str, Handler]
#: Every path, a percent-decoded newline included (aiohttp's ``.*`` stops at one).
ANY_PATH = r"/{tail:[\s\S]*}"


@dataclass
class Context:
    """Shared by the endpoint modules of one frontend."""

    #: The operations the endpoints serve.
    host: FrontendHost
    max_input_size: int
    executor: ThreadPoolExecutor
    restrictions: Restrictions
    #: Request headers matching this are forwarded as request parameters.
    forward: re.Pattern[str] | None
    #: Inference requests' JSON headers already decoded (see :mod:`.decode`).
    layouts: HeaderLayouts = field(default_factory=HeaderLayouts)
    #: ``--http-max-header-size``, ``--http-max-json-depth``, ``--http-max-outputs``.
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_outputs: int = DEFAULT_MAX_OUTPUTS


def versioned(path: str) -> list[str]:
    """``/v2/models/{model}<path>`` with and without ``/versions/{version}``."""
    return [
        f"/v2/models/{{model}}{path}",
        f"/v2/models/{{model}}/versions/{{version:[0-9]+}}{path}",
    ]
