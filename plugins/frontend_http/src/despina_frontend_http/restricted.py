"""``--http-restricted-api``: endpoint groups that need a header (Triton's restricted APIs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from despina.errors import PermissionDenied

#: Triton's endpoint groups ("API categories").
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


def parse_restricted(values: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``["a,b:key=value", ...]`` -> ``{group: (header, value)}``; ValueError when malformed."""
    rules: dict[str, tuple[str, str]] = {}
    for value in values:
        groups, sep, header = value.partition(":")
        key, eq, expected = header.partition("=")
        if not sep or not eq or not key.strip():
            raise ValueError(
                f"--http-restricted-api '{value}': expected <api>[,<api>...]:<key>=<value>"
            )
        for group in (g.strip() for g in groups.split(",")):
            if group not in GROUPS:
                raise ValueError(
                    f"--http-restricted-api: unknown API '{group}'; known: {', '.join(GROUPS)}"
                )
            if group in rules:
                raise ValueError(f"--http-restricted-api: API '{group}' is restricted twice")
            rules[group] = (key.strip().lower(), expected)
    return rules


class Restrictions:
    """Checks a request's headers against the rules of one endpoint group."""

    def __init__(self, values: Iterable[str]) -> None:
        self.rules = parse_restricted(values)

    def check(self, group: str, headers: Mapping[str, str]) -> None:
        """Raise PermissionDenied (Triton's text) unless the group is open or the header matches."""
        rule = self.rules.get(group)
        if rule is None:
            return
        key, expected = rule
        if headers.get(key) != expected:
            raise PermissionDenied(f"This API is restricted, expecting header '{key}'")
