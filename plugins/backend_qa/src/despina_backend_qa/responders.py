"""The response tasks of the decoupled test backends: each request's responses are sent
from a task of its own after ``execute`` returned, as Triton's backends send them from a
thread; closing an instance waits for its tasks (Triton waits for those threads)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from despina import ModelInstance


class Responders(ModelInstance):
    """A base for instances whose requests are answered by background tasks."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, responses: Coroutine[Any, Any, None]) -> None:
        """Run ``responses`` (it sends a request's responses and its final flag)."""
        task = asyncio.get_running_loop().create_task(responses)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
