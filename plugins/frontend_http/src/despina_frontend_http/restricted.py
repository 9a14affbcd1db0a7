"""Restricted endpoint groups (Triton's restricted APIs): checks a request's headers."""

from __future__ import annotations

from collections.abc import Mapping

from despina import PermissionDenied, Restriction


class Restrictions:
    """Checks a request's headers against the rules of one endpoint group."""

    def __init__(self, rules: Mapping[str, Restriction]) -> None:
        self.rules = rules

    def check(self, group: str, headers: Mapping[str, str]) -> None:
        """Raise PermissionDenied (Triton's text) unless the group is open or the header matches."""
        rule = self.rules.get(group)
        if rule is not None and not rule.allows(headers.get(rule.header)):
            raise PermissionDenied(f"This API is restricted, expecting header '{rule.header}'")
