"""``--http-restricted-api``: endpoint groups that need a header (Triton's restricted APIs,
parsed by :func:`despina.restricted.parse_restricted`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from despina import PermissionDenied, parse_restricted

FLAG = "--http-restricted-api"


class Restrictions:
    """Checks a request's headers against the rules of one endpoint group."""

    def __init__(self, values: Iterable[str]) -> None:
        self.rules = parse_restricted(values, FLAG)

    def check(self, group: str, headers: Mapping[str, str]) -> None:
        """Raise PermissionDenied (Triton's text) unless the group is open or the header matches."""
        rule = self.rules.get(group)
        if rule is not None and not rule.allows(headers.get(rule.header)):
            raise PermissionDenied(f"This API is restricted, expecting header '{rule.header}'")
