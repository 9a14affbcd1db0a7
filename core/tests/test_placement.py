"""CallPlacement: cheap calls move inline on the loop, slow ones and NeedsThread go back."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from despina.errors import ConfigError
from despina.models.call_placement import (
    FIRST_STREAK,
    LEAVE_SHARE,
    SHARE_WEIGHT,
    CallPlacement,
    NeedsThread,
    inline_budget,
    running_inline,
)
from despina.repository.config import ModelConfig, parse_text

T = TypeVar("T")

#: Slow inline calls in a row that send calls back to the thread.
LEAVE_AFTER = next(n for n in range(1, 100) if 1 - (1 - SHARE_WEIGHT) ** n > LEAVE_SHARE)


def where() -> tuple[int, bool]:
    return threading.get_ident(), running_inline()


def run(scenario: Callable[[ThreadPoolExecutor], Coroutine[Any, Any, T]]) -> T:
    """``scenario(executor)`` on a new event loop in this thread."""
    with ThreadPoolExecutor(1) as executor:
        return asyncio.run(scenario(executor))


def test_cheap_calls_move_inline_after_the_streak() -> None:
    async def scenario(executor: ThreadPoolExecutor) -> list[tuple[int, bool]]:
        placement = CallPlacement(executor, budget_s=1.0)
        return [await placement.run(where) for _ in range(FIRST_STREAK + 3)]

    loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
    seen = run(scenario)
    assert all(ident != loop_thread and not inline for ident, inline in seen[:FIRST_STREAK])
    assert all(ident == loop_thread and inline for ident, inline in seen[FIRST_STREAK:])


def test_a_lone_slow_inline_call_stays_inline() -> None:
    """One late call (the loop's thread preempted, a garbage collection) is no slow model."""

    async def scenario(executor: ThreadPoolExecutor) -> list[bool]:
        placement = CallPlacement(executor, budget_s=0.05)
        for _ in range(FIRST_STREAK):
            await placement.run(where)
        assert placement.inline
        seen = []
        for _ in range(3):
            await placement.run(time.sleep, 0.06)  # inline, over budget
            seen += [(await placement.run(where))[1] for _ in range(8)]
        return seen

    assert all(run(scenario))


def test_slow_inline_calls_in_a_row_send_calls_back_to_the_thread() -> None:
    async def scenario(executor: ThreadPoolExecutor) -> tuple[CallPlacement, list[bool]]:
        placement = CallPlacement(executor, budget_s=0.05)
        for _ in range(FIRST_STREAK):
            await placement.run(where)
        for _ in range(LEAVE_AFTER):
            assert placement.inline
            await placement.run(time.sleep, 0.06)  # inline, over budget
        return placement, [(await placement.run(where))[1] for _ in range(3)]

    placement, inline_after = run(scenario)
    assert inline_after == [False, False, False]
    assert placement.needed == 2 * FIRST_STREAK and placement.streak == 3


def test_slow_calls_keep_calls_in_the_thread() -> None:
    async def scenario(executor: ThreadPoolExecutor) -> list[bool]:
        placement = CallPlacement(executor, budget_s=0.002)
        for _ in range(FIRST_STREAK):
            await placement.run(time.sleep, 0.003)
        return [(await placement.run(where))[1] for _ in range(4)]

    assert not any(run(scenario))


def test_needs_thread_reruns_the_call_in_the_thread_for_good() -> None:
    calls: list[bool] = []

    def picky() -> str:
        calls.append(running_inline())
        if running_inline():
            raise NeedsThread
        return threading.current_thread().name

    async def scenario(executor: ThreadPoolExecutor) -> tuple[CallPlacement, list[str]]:
        placement = CallPlacement(executor, budget_s=1.0)
        for _ in range(FIRST_STREAK):
            await placement.run(where)
        return placement, [await placement.run(picky) for _ in range(FIRST_STREAK + 2)]

    placement, names = run(scenario)
    assert calls[0] is True and not any(calls[1:])
    assert all(name != threading.current_thread().name for name in names)
    assert not placement.allowed and not placement.inline


def test_exceptions_propagate_from_both_placements() -> None:
    def boom() -> None:
        raise KeyError("x")

    async def scenario(executor: ThreadPoolExecutor) -> None:
        placement = CallPlacement(executor, budget_s=1.0)
        with pytest.raises(KeyError):
            await placement.run(boom)
        placement.inline = True
        with pytest.raises(KeyError):
            await placement.run(boom)

    run(scenario)


def config(budget: str | None = None, count: int = 1) -> ModelConfig:
    """A model config with ``count`` instances and, if given, the budget parameter."""
    text = f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
    if budget is not None:
        text += f'parameters {{ key: "DESPINA_INLINE_EXECUTE_US" value {{ string_value: "{budget}" }} }}'
    return parse_text(text)


def test_a_zero_budget_never_goes_inline() -> None:
    async def scenario(executor: ThreadPoolExecutor) -> list[bool]:
        placement = CallPlacement(executor, budget_s=inline_budget(config("0")))
        return [(await placement.run(where))[1] for _ in range(FIRST_STREAK * 2)]

    assert not any(run(scenario))


def test_inline_budget_parameter() -> None:
    assert inline_budget(config()) == pytest.approx(0.001)
    assert inline_budget(config("250")) == pytest.approx(0.00025)
    assert inline_budget(config(count=2)) == 0.0  # several instances keep their threads
    assert inline_budget(config("250", count=2)) == pytest.approx(0.00025)
    for bad in ("-1", "fast", "nan"):
        with pytest.raises(ConfigError, match="DESPINA_INLINE_EXECUTE_US"):
            inline_budget(config(bad))
