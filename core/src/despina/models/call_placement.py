"""Where a blocking model call runs: in a worker thread, or inline on the event loop.

Handing a call to a thread and its result back to the loop costs two thread wake-ups
(50-100 µs on a small VM, more under load), often more than a small model's whole
``execute``. :class:`CallPlacement` times every call and keeps a running share of the
calls over budget. It runs calls in its executor until ``needed`` calls have been seen
there with that share low, then runs the next ones inline on the loop; once the share
passes :data:`LEAVE_SHARE` (a few slow calls in a row) calls go back to the thread and
``needed`` doubles before the next try. A lone late call does not count as a slow model:
on a busy host the loop's own thread is preempted or collects garbage now and then, and
a call timed across that would otherwise send a cheap model to its thread for good. So a
heavy model (or one that releases the GIL for long) stays in its threads, and a cheap
one stops paying the hand-off.

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
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from despina.repository.config import ModelConfig, mc, number_parameter, parameters_of

T = TypeVar("T")

#: The model config parameter holding the inline budget in microseconds.
BUDGET_KEY = "DESPINA_INLINE_EXECUTE_US"
DEFAULT_BUDGET_US = 1000.0
#: Calls seen in the thread before the first inline call.
FIRST_STREAK = 16
MAX_STREAK = 1 << 20
#: Weight of the latest call in the running share of calls over budget.
SHARE_WEIGHT = 1 / 16
#: Share of calls over budget above which calls go back to the thread (three slow calls
#: in a row from none) and at or above which they do not go inline.
LEAVE_SHARE = 0.15

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
        #: Whether the next call runs inline on the loop.
        self.inline = False
        #: Calls seen in the executor since calls last went there.
        self.streak = 0
        self.needed = FIRST_STREAK
        #: Running share of calls over budget (each call weighs :data:`SHARE_WEIGHT`).
        self.over_share = 0.0

    def forbid_inline(self) -> None:
        """Run every later call in the executor."""
        self.allowed = self.inline = False

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
        share = self.over_share * (1 - SHARE_WEIGHT)
        if seconds > self.budget_s:
            share += SHARE_WEIGHT
        self.over_share = share
        if inline:
            if share > LEAVE_SHARE:
                self.inline = False
                self.streak = 0
                self.needed = min(self.needed * 2, MAX_STREAK)
            return
        self.streak += 1
        if self.streak >= self.needed and share < LEAVE_SHARE:
            self.inline = self.allowed


def cpu_instances(config: ModelConfig) -> int:
    """The model's KIND_CPU instances, all groups together (the config is normalized)."""
    cpu = mc.ModelInstanceGroup.KIND_CPU
    return sum(max(int(g.count), 1) for g in config.instance_group if g.kind == cpu)


def cores() -> int:
    """CPU cores this process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_per_instance(config: ModelConfig) -> int:
    """Intra-op threads each CPU instance gets when its config sets none: with N > 1 CPU
    instances ``max(1, cores // N)``, so N instances never compete for the same cores and
    run no slower than one; 0 (the framework's own default) for one instance."""
    instances = cpu_instances(config)
    return max(1, cores() // instances) if instances > 1 else 0
