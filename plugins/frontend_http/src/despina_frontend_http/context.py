"""What every endpoint module works with: the server's data plane and the frontend's settings."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from despina import header_forward_matcher

from despina_frontend_http.decode import HeaderLayouts
from despina_frontend_http.options import (
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_OUTPUTS,
    HTTP_OPTIONS,
)
from despina_frontend_http.restricted import Restrictions

if TYPE_CHECKING:
    from despina import FrontendHost


@dataclass
class Context:
    """Shared by the endpoint modules of one frontend."""

    #: The operations the endpoints serve.
    host: FrontendHost
    max_input_size: int
    executor: ThreadPoolExecutor
    restrictions: Restrictions
    #: Request headers for which this is truthy are forwarded as request parameters.
    forward: Callable[[str], object] | None
    #: Inference requests' JSON headers already decoded (see :mod:`.decode`).
    layouts: HeaderLayouts = field(default_factory=HeaderLayouts)
    #: ``--http-max-header-size``, ``--http-max-json-depth``, ``--http-max-outputs``.
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_outputs: int = DEFAULT_MAX_OUTPUTS

    @classmethod
    def from_options(cls, host: FrontendHost) -> Context:
        """The context of ``host``'s ``--http-*`` options, with a thread pool of
        ``--http-thread-count`` threads for (de)compressing large bodies (whoever made
        it shuts it down)."""
        options = host.stash[HTTP_OPTIONS]
        return cls(
            host=host,
            max_input_size=options.max_input_size,
            executor=ThreadPoolExecutor(
                max_workers=options.thread_count, thread_name_prefix="despina-http"
            ),
            restrictions=Restrictions(options.restrictions),
            forward=header_forward_matcher(options.header_forward_pattern),
            max_header_size=options.max_header_size,
            max_json_depth=options.max_json_depth,
            max_outputs=options.max_outputs,
        )


def versioned(path: str) -> list[str]:
    """``/v2/models/{model}<path>`` with and without ``/versions/{version}``."""
    return [
        f"/v2/models/{{model}}{path}",
        f"/v2/models/{{model}}/versions/{{version:[0-9]+}}{path}",
    ]
