"""The HTTP frontend's settings, read once from its flags (``despina_configure``)."""

from __future__ import annotations

import argparse
import dataclasses
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from despina import Restriction, StashKey, header_forward_matcher, parse_restricted

from despina_frontend_http.tls import server_context

#: The flag whose values restrict endpoint groups.
RESTRICTED_FLAG = "--http-restricted-api"
#: Triton's default for --http-max-input-size (bytes).
DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024
#: Defaults of the other limit flags (the limits themselves: :mod:`.limits`).
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
DEFAULT_MAX_CONNECTIONS = 4096
DEFAULT_HANDSHAKE_TIMEOUT = 5.0
DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_OUTPUTS = 256


@dataclass(frozen=True)
class HttpOptions:
    """``--allow-http``, ``--http-*`` and ``--reuse-http-port``, typed and checked."""

    allow_http: bool
    port: int
    address: str
    reuse_port: bool
    thread_count: int
    header_forward_pattern: str
    #: The restricted endpoint groups: ``{group: Restriction}``.
    restrictions: Mapping[str, Restriction]
    max_input_size: int
    #: ``--http-max-header-size``: request line plus headers, in bytes.
    max_header_size: int
    #: ``--http-max-connections``: open client connections.
    max_connections: int
    #: ``--http-handshake-timeout-secs``: time for a first request head; 0: no limit.
    handshake_timeout_secs: float
    max_json_depth: int
    max_outputs: int
    use_ssl: bool
    use_ssl_mutual: bool
    server_cert: str
    server_key: str
    root_cert: str
    #: The port's TLS context (built once, files checked) when :attr:`tls`, else None.
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    @property
    def tls(self) -> bool:
        """Whether the port is served over TLS (``--http-use-ssl`` or ``-mutual``)."""
        return self.use_ssl or self.use_ssl_mutual

    def build_ssl_context(self) -> ssl.SSLContext | None:
        """A new TLS context from the certificate flags, or None without TLS (OSError,
        ssl.SSLError for unusable files)."""
        if not self.tls:
            return None
        return server_context(
            self.server_cert, self.server_key, self.root_cert or None, self.use_ssl_mutual
        )

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> HttpOptions:
        """Read and check the flags; ValueError naming the flag for a bad value."""
        try:
            header_forward_matcher(flags.http_header_forward_pattern)
        except ValueError as exc:
            raise ValueError(f"--http-header-forward-pattern: {exc}") from None
        if flags.http_max_input_size <= 0:
            raise ValueError("--http-max-input-size must be positive")
        if not flags.http_handshake_timeout_secs >= 0:
            raise ValueError("--http-handshake-timeout-secs must be 0 (no limit) or more")
        for flag, minimum in _MINIMUMS.items():
            value = getattr(flags, flag.lstrip("-").replace("-", "_"))
            if value < minimum:
                raise ValueError(f"{flag} must be at least {minimum}")
        options = cls(
            allow_http=bool(flags.allow_http),
            port=int(flags.http_port),
            address=str(flags.http_address),
            reuse_port=bool(flags.reuse_http_port),
            thread_count=max(int(flags.http_thread_count), 1),
            header_forward_pattern=str(flags.http_header_forward_pattern),
            restrictions=parse_restricted(flags.http_restricted_api, RESTRICTED_FLAG),
            max_input_size=int(flags.http_max_input_size),
            max_header_size=int(flags.http_max_header_size),
            max_connections=int(flags.http_max_connections),
            handshake_timeout_secs=float(flags.http_handshake_timeout_secs),
            max_json_depth=int(flags.http_max_json_depth),
            max_outputs=int(flags.http_max_outputs),
            use_ssl=bool(flags.http_use_ssl),
            use_ssl_mutual=bool(flags.http_use_ssl_mutual),
            server_cert=str(flags.http_server_cert),
            server_key=str(flags.http_server_key),
            root_cert=str(flags.http_root_cert),
        )
        if not (options.allow_http and options.tls):
            return options
        if not (options.server_cert and options.server_key):
            raise ValueError("--http-use-ssl needs --http-server-cert and --http-server-key")
        if options.use_ssl_mutual and not options.root_cert:
            raise ValueError("--http-use-ssl-mutual needs --http-root-cert")
        try:
            context = options.build_ssl_context()
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                "cannot use --http-server-cert / --http-server-key / --http-root-cert: "
                f"{exc.strerror or exc}"
            ) from None
        return dataclasses.replace(options, ssl_context=context)


#: Smallest values of the limit flags (a smaller one would refuse every request).
_MINIMUMS = {
    "--http-max-header-size": 1024,
    "--http-max-connections": 1,
    "--http-max-json-depth": 4,
    "--http-max-outputs": 0,
}


#: Where the HTTP frontend's options live in the server's stash.
HTTP_OPTIONS: StashKey[HttpOptions] = StashKey("despina-frontend-http")
