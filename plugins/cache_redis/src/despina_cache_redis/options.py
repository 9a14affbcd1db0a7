"""The redis cache's ``--cache-config redis,<key>=<value>`` options: Triton's names and units.

Times are milliseconds. The port is read as Triton reads it: its leading digits, 0 when
it has none. Triton's ``user`` and ``password`` may come from the environment
(``TRITONCACHE_REDIS_USERNAME``, ``TRITONCACHE_REDIS_PASSWORD``); the flags win. Where
Triton waits forever by default (``connect_timeout``, ``socket_timeout`` of 0), Despina
waits :data:`DEFAULT_TIMEOUT_MS`: a hung Redis must not hold inferences. 0 given
explicitly still means no limit, as in Triton.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from despina import ascii_digits

USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"
DEFAULT_TIMEOUT_MS = 1000
_NUMBERS = ("port", "db", "connect_timeout", "socket_timeout", "pool_size", "wait_timeout")
_TEXTS = ("host", "user", "password")
_TLS = ("cert", "key", "cacert", "cacert_dir")
KNOWN = (*_TEXTS, *_NUMBERS, "tls_enabled", *_TLS)


@dataclass(frozen=True)
class RedisOptions:
    """A parsed redis cache configuration (times in milliseconds, 0: no limit)."""

    host: str
    port: int
    user: str = "default"
    password: str | None = None
    db: int = 0
    connect_timeout: int = DEFAULT_TIMEOUT_MS
    socket_timeout: int = DEFAULT_TIMEOUT_MS
    pool_size: int = 1
    wait_timeout: int = 1000
    tls_enabled: bool = False
    cert: str | None = None
    key: str | None = None
    cacert: str | None = None
    cacert_dir: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(
        cls, options: Mapping[str, str], environ: Mapping[str, str] = os.environ
    ) -> RedisOptions:
        """The options of ``--cache-config redis,...``; ValueError with the reason for a
        missing host or port, an unknown option, a number that is not one, or a TLS file
        without ``tls_enabled=true``."""
        unknown = sorted(options.keys() - set(KNOWN))
        if unknown:
            raise ValueError(
                f"redis cache: unknown option '{unknown[0]}'; the options are {', '.join(KNOWN)}"
            )
        if "host" not in options or "port" not in options:
            raise ValueError(
                "redis cache: Must at a minimum specify 'host' and 'port', e.g. "
                "--cache-config redis,host=redis --cache-config redis,port=6379"
            )
        numbers = {"port": _leading_number(options["port"])}
        for name in _NUMBERS[1:]:
            if name in options:
                if not ascii_digits(options[name]):
                    raise ValueError(
                        f"redis cache: {name} must be a whole number, got '{options[name]}'"
                    )
                numbers[name] = int(options[name])
        if numbers["port"] > 65535 or numbers.get("pool_size") == 0:
            bad = "port" if numbers["port"] > 65535 else "pool_size"
            raise ValueError(f"redis cache: {bad} out of range: {options[bad]}")
        tls = options.get("tls_enabled", "false")
        if tls not in ("true", "false"):
            raise ValueError(f"redis cache: tls_enabled must be true or false, got '{tls}'")
        files = {name: options[name] for name in _TLS if name in options}
        if files and tls != "true":
            raise ValueError(f"redis cache: {next(iter(files))} needs tls_enabled=true")
        fields: dict[str, Any] = {
            "host": options["host"],
            "user": options.get("user", environ.get(USERNAME_ENV, "default")),
            "password": options.get("password", environ.get(PASSWORD_ENV)),
            "tls_enabled": tls == "true",
            **numbers,
            **files,
        }
        return cls(**fields)


def _leading_number(text: str) -> int:
    """The port as Triton reads it (C's ``atoi``): its leading digits, 0 when none (no
    Redis answers on port 0, so the start-up connection is refused)."""
    digits = re.match(r"\s*\+?(\d*)", text)
    return int(digits[1]) if digits and digits[1] else 0
