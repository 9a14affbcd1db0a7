"""How each request of a load test ended, tallied from many client threads."""

from __future__ import annotations

import collections
import threading


class Outcomes:
    """A thread-safe tally of outcomes (``ok``, ``503``, ``lost``, ...) and the problems
    worth showing when a test fails."""

    def __init__(self) -> None:
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []
        self.lock = threading.Lock()

    def note(self, outcome: str, problem: str = "") -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            if problem:
                self.problems.append(problem)

    def answered(self) -> int:
        with self.lock:
            return self.outcomes["ok"]
