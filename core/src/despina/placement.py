"""Where a blocking model call runs: in a worker thread, or inline on the event loop.

Handing a call to a thread and its result back to the loop costs two thread wake-ups
(50-100 µs on a small VM, more under load), often more than a small model's whole
``execute``. :class:`CallPlacement` runs calls in its executor until it has seen
``streak`` calls in a row finish within the budget, then runs the next ones inline on
the loop, timing each; an inline call over budget sends calls back to the thread and
doubles the streak needed before the next try. So a heavy model (or one that releases
the GIL for long) stays in its threads, and a cheap one stops paying the hand-off.

A call that must not run on the loop (it would wait for the loop, e.g. a Python BLS
``exec()``) raises :class:`NeedsThread` when :func:`running_inline` is true: the call is
run again in the executor and this placement never goes inline again.

The budget comes from the model config's ``DESPINA_INLINE_EXECUTE_US`` parameter
(:func:`inline_budget`); ``0`` keeps every call in its thread, and so does a model of
several instances that does not set it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from despina.config import ModelConfig, number_parameter, parameters_of

T = TypeVar("T")

#: The model config parameter holding the inline budget in microseconds.
BUDGET_KEY = "DESPINA_INLINE_EXECUTE_US"
DEFAULT_BUDGET_US = 1000.0
#: Calls in a row within budget, in the thread, before the first inline call.
FIRST_STREAK = 16
MAX_STREAK = 1 << 20

_inline: contextvars.ContextVar[bool] = contextvars.ContextVar("despina_inline", default=False)


class NeedsThread(BaseException):
    """Raised by code that cannot run inline on the loop; the call is re-run in a thread.

    A BaseException so that a model's ``except Exception`` does not swallow it.
    """


def running_inline() -> bool:
    """True inside a call that :class:`CallPlacement` runs inline on the event loop."""
    return _inline.get()


def inline_budget(config: ModelConfig) -> float:
    """A model's inline budget in seconds (0: never inline): its ``BUDGET_KEY``
    parameter; when unset, the default for a model with one instance and 0 for several
    (their threads run calls in parallel, which inline calls would serialize).

    Raises ConfigError when the parameter is not a non-negative number.
    """
    parameters = parameters_of(config)
    if not parameters.get(BUDGET_KEY) and sum(g.count for g in config.instance_group) > 1:
        return 0.0
    return number_parameter(parameters, BUDGET_KEY, DEFAULT_BUDGET_US, "microseconds") / 1e6


def _timed(call: Callable[..., T], args: tuple[Any, ...]) -> tuple[T, float]:
    start = time.perf_counter()
    result = call(*args)
    return result, time.perf_counter() - start


class CallPlacement:
    """Runs blocking calls of one model instance (or of instances sharing ``executor``)."""

    def __init__(self, executor: Executor, budget_s: float = DEFAULT_BUDGET_US / 1e6) -> None:
        self.executor = executor
        self.budget_s = budget_s
        self.allowed = budget_s > 0
        self.streak = 0
        self.needed = FIRST_STREAK

    @property
    def inline(self) -> bool:
        """Whether the next call runs inline on the loop."""
        return self.allowed and self.streak >= self.needed

    def forbid_inline(self) -> None:
        """Run every later call in the executor."""
        self.allowed = False

    def call_inline(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the loop, timed like any inline call (for a caller that saw
        :attr:`inline`); its exceptions propagate, NeedsThread after inline calls were
        forbidden (the caller runs the call again in the executor)."""
        token = _inline.set(True)
        start = time.perf_counter()
        try:
            return call(*args)
        except NeedsThread:
            self.forbid_inline()
            raise
        finally:
            _inline.reset(token)
            self._observe(time.perf_counter() - start, inline=True)

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, inline or in the executor; its exceptions propagate."""
        if self.inline:
            with contextlib.suppress(NeedsThread):
                return self.call_inline(call, *args)
        loop = asyncio.get_running_loop()
        result, seconds = await loop.run_in_executor(self.executor, _timed, call, args)
        self._observe(seconds, inline=False)
        return result

    def _observe(self, seconds: float, inline: bool) -> None:
        if seconds <= self.budget_s:
            self.streak += 1
            return
        if inline:
            self.needed = min(self.needed * 2, MAX_STREAK)
        self.streak = 0
