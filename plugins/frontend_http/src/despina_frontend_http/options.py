"""The HTTP frontend's settings, read once from its flags (``despina_configure``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from despina import Restriction, StashKey, parse_restricted

#: The flag whose values restrict endpoint groups.
RESTRICTED_FLAG = "--http-restricted-api"


@dataclass(frozen=True)
class HttpOptions:
    """``--allow-http``, ``--http-*`` and ``--reuse-http-port``, typed and checked."""

    allow_http: bool
    port: int
    address: str
    reuse_port: bool
    thread_count: int
    stack: str
    worker_processes: int
    header_forward_pattern: str
    #: ``--http-restricted-api`` as given (worker processes parse it again).
    restricted_api: tuple[str, ...]
    #: The restricted endpoint groups: ``{group: Restriction}``.
    restrictions: Mapping[str, Restriction]
    max_input_size: int

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> HttpOptions:
        """Read and check the flags; ValueError naming the flag for a bad value."""
        if flags.http_worker_processes < 0:
            raise ValueError("--http-worker-processes must be >= 0")
        if flags.http_max_input_size <= 0:
            raise ValueError("--http-max-input-size must be positive")
        restricted = tuple(flags.http_restricted_api)
        return cls(
            allow_http=bool(flags.allow_http),
            port=int(flags.http_port),
            address=str(flags.http_address),
            reuse_port=bool(flags.reuse_http_port),
            thread_count=max(int(flags.http_thread_count), 1),
            stack=str(flags.http_stack),
            worker_processes=int(flags.http_worker_processes),
            header_forward_pattern=str(flags.http_header_forward_pattern),
            restricted_api=restricted,
            restrictions=parse_restricted(restricted, RESTRICTED_FLAG),
            max_input_size=int(flags.http_max_input_size),
        )


#: Where the HTTP frontend's options live in the server's stash.
HTTP_OPTIONS: StashKey[HttpOptions] = StashKey("despina-frontend-http")
