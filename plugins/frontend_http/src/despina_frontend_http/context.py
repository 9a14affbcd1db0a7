"""What every endpoint module works with: the server's data plane and the frontend's settings."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from despina_frontend_http.decode import HeaderLayouts
from despina_frontend_http.restricted import Restrictions

if TYPE_CHECKING:
    from despina import FrontendHost

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: (method, path, restricted-API group, handler)
Route = tuple[str, str, str, Handler]


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


def versioned(path: str) -> list[str]:
    """``/v2/models/{model}<path>`` with and without ``/versions/{version}``."""
    return [
        f"/v2/models/{{model}}{path}",
        f"/v2/models/{{model}}/versions/{{version:[0-9]+}}{path}",
    ]
