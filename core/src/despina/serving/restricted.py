"""Restricted APIs: endpoint groups a client may call only with a given header.

Triton's ``--http-restricted-api`` and ``--grpc-restricted-protocol`` take the same value,
``<group>[,<group>...]:<key>=<value>``, over the same groups; this is their one parser.
Each frontend states how a group maps onto its endpoints and how the header is carried
(HTTP: the header ``<key>``; gRPC: the metadata ``triton-grpc-protocol-<key>``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Triton's endpoint groups ("restricted features").
GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)


@dataclass(frozen=True)
class Restriction:
    """A call of a restricted group must carry ``header`` (lower case) equal to ``value``."""

    header: str
    value: str

    def allows(self, given: str | None) -> bool:
        """Whether the value a client sent for :attr:`header` opens the group."""
        return given == self.value


def parse_restricted(
    values: Iterable[str], flag: str, kind: str = "API", header_prefix: str = ""
) -> Mapping[str, Restriction]:
    """``{group: Restriction}`` from the flag's values; ValueError with Triton's texts,
    prefixed with the flag, for a malformed value, an unknown group, or a group named twice. ``kind`` is the
    word Triton's texts use ("API" for HTTP, "protocol" for gRPC); ``header_prefix`` is
    put before each key."""
    rules: dict[str, Restriction] = {}
    for raw in values:
        groups, colon, pair = raw.partition(":")
        key, equals, value = pair.partition("=")
        if not colon or not equals or not key.strip() or not groups.strip():
            raise ValueError(
                f"{flag} option format is '<{kind.lower()} list>:<setting>=<value>'. Got {raw}"
            )
        restriction = Restriction(header_prefix + key.strip().lower(), value)
        for group in (g.strip() for g in groups.split(",")):
            if group not in GROUPS:
                raise ValueError(
                    f"{flag}: unknown restricted {kind} '{group}' (known: {', '.join(GROUPS)})"
                )
            if group in rules:
                raise ValueError(
                    f"{flag}: restricted {kind} '{group}' can not be specified in multiple "
                    "config groups"
                )
            rules[group] = restriction
    return rules
