"""The rate limiter: instances run only while their resources are available."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import toy_backend
from despina.scheduling.rate_limiter import parse_resource_flags
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]

LIMITED = """instance_group [ { count: 3 kind: KIND_CPU
  rate_limiter { resources [ { name: "slot" count: 1 } ] priority: 1 } } ]"""


def _peak_concurrency(
    model_repository: RepositoryBuilder, despina_server: Start, args: list[str]
) -> int:
    model_repository.add("limited", toy_config(extra=LIMITED), {"1/model.toy": '{"delay_s": 0.05}'})
    running = despina_server(model_repository.root, args, plugins=[toy_backend])
    toy_backend.ToyBackend.max_active = 0

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(running.server.infer(toy_request("limited")) for _ in range(9))
        )

    assert len(running.call(burst())) == 9
    return toy_backend.ToyBackend.max_active


@pytest.mark.parametrize(
    ("args", "peak"),
    [
        (["--rate-limit=off"], 3),
        (["--rate-limit=execution_count"], 1),  # availability: the largest count asked for
        (["--rate-limit=execution_count", "--rate-limit-resource=slot:2"], 2),
    ],
)
def test_resources_bound_concurrent_executions(
    model_repository: RepositoryBuilder, despina_server: Start, args: list[str], peak: int
) -> None:
    assert _peak_concurrency(model_repository, despina_server, args) == peak


def test_resource_flag_syntax() -> None:
    assert parse_resource_flags(["R:4", "gpu:2:1"]) == {("r", None): 4, ("gpu", 1): 2}
    with pytest.raises(ValueError, match="expected <name>:<count>"):
        parse_resource_flags(["R"])
