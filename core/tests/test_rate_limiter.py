"""The rate limiter: instances run only while their resources are available."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import toy_backend
from despina.errors import DespinaError
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


def test_a_need_above_the_given_count_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Triton's check: with ``--rate-limit-resource`` given, an instance asking for more
    of a resource (or for one not given) cannot load; the server keeps serving."""
    greedy = LIMITED.replace("count: 1 }", "count: 32 }")
    model_repository.add("greedy", toy_config(extra=greedy), {"1/model.toy": ""})
    other = LIMITED.replace('name: "slot"', 'name: "other"')
    model_repository.add("unlisted", toy_config(extra=other), {"1/model.toy": ""})
    model_repository.add("fits", toy_config(extra=LIMITED), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--rate-limit=execution_count", "--rate-limit-resource=slot:10", "--exit-on-error=false"],
        plugins=[toy_backend],
    )
    reasons = dict(running.server.models.failures())
    assert (
        'Resource count for "slot" is limited to 10 which will prevent scheduling of one or '
        "more model instances, the minimum required count is 32" in reasons["greedy"]
    )
    assert 'Resource count for "other" is limited to 0' in reasons["unlisted"]
    assert running.call(running.server.infer(toy_request("fits"))).error is None


def test_a_resource_both_global_and_per_device_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Triton's check across the instances loaded: one resource name cannot be global
    for one instance and per device for another; the model loaded second fails."""
    model_repository.add("per_device", toy_config(extra=LIMITED), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--rate-limit=execution_count", "--model-control-mode=explicit", "--load-model=*"],
        plugins=[toy_backend],
    )
    shared = LIMITED.replace("count: 1 }", "global: true count: 1 }")
    model_repository.add("shared", toy_config(extra=shared), {"1/model.toy": ""})
    with pytest.raises(DespinaError) as refused:
        running.call(running.server.models.load("shared"))
    assert (
        'Resource "slot" is present as both global and device-specific resource in the '
        "model configuration." in str(refused.value)
    )
    assert running.call(running.server.infer(toy_request("per_device"))).error is None


def test_turns_follow_priority_when_instances_stay_busy(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Two models that always have requests queued share one resource: the instance of
    priority 1 gets two turns for each of priority 2's (Triton's executions x priority
    order), also for the instance that just finished and asks again at once."""
    for name, priority in (("first", 1), ("second", 2)):
        extra = LIMITED.replace("count: 3", "count: 1").replace(
            "priority: 1", f"priority: {priority}"
        )
        model_repository.add(name, toy_config(extra=extra), {"1/model.toy": '{"delay_s": 0.01}'})
    running = despina_server(
        model_repository.root, ["--rate-limit=execution_count"], plugins=[toy_backend]
    )
    toy_backend.ToyBackend.executions.clear()

    async def both() -> list[Any]:
        return await asyncio.gather(
            *(running.server.infer(toy_request(m)) for _ in range(20) for m in ("first", "second"))
        )

    running.call(both())
    turns = [name.split("_")[0] for name, _ in toy_backend.ToyBackend.executions[:21]]
    assert turns.count("first") == 14, turns


def test_availability_follows_the_instances_loaded() -> None:
    """Without given counts a resource is as available as the most a loaded instance
    asks for, and shrinks back when that instance is released."""
    from despina.scheduling.rate_limiter import Needs, RateLimiter

    limiter = RateLimiter({})
    small, large = Needs({("r", None): 3}), Needs({("r", None): 4})
    limiter.register(small)
    limiter.register(large)
    assert limiter._capacity == {("r", None): 4}
    limiter.release(large)
    limiter.release(large)  # idempotent
    assert limiter._capacity == {("r", None): 3}
    assert limiter._available == {("r", None): 3}


BATCHED = """instance_group [ { count: 1 kind: KIND_CPU
  rate_limiter { resources [ { name: "slot" count: 1 } ] } } ]
dynamic_batching { preferred_batch_size: [ 1, 2, 3, 4 ] max_queue_delay_microseconds: 1000000 }"""


def _batches(
    model_repository: RepositoryBuilder, despina_server: Start, blocked: bool
) -> list[int]:
    """The batch sizes of four requests to a dynamically batched model sent 10 ms apart
    while another model holding the resource runs (``blocked``) or after it ran."""
    blocker = LIMITED.replace("count: 3", "count: 1")
    model_repository.add("blocker", toy_config(extra=blocker), {"1/model.toy": '{"delay_s": 0.3}'})
    model_repository.add("batched", toy_config(4, BATCHED), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, ["--rate-limit=execution_count"], plugins=[toy_backend]
    )
    toy_backend.ToyBackend.executions.clear()

    async def send() -> None:
        sent = [asyncio.ensure_future(running.server.infer(toy_request("blocker")))]
        await asyncio.sleep(0.05 if blocked else 0.35)
        for _ in range(4):
            sent.append(asyncio.ensure_future(running.server.infer(toy_request("batched", 1))))
            await asyncio.sleep(0.01)
        await asyncio.gather(*sent)

    running.call(send())
    return [n for name, n in toy_backend.ToyBackend.executions if name.startswith("batched")]


def test_a_batch_forms_once_its_instance_can_run(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Triton's dynamic batcher waits for a free slot before forming a batch: requests
    that come while another model holds the resource join one batch."""
    assert _batches(model_repository, despina_server, blocked=True) == [4]


def test_the_delay_scheduler_hook_holds_the_first_batch(
    model_repository: RepositoryBuilder, despina_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TRITONSERVER_DELAY_SCHEDULER=N`` (Triton's test hook): the first batch forms
    once N requests are queued, whatever the preferred sizes."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "4")
    assert _batches(model_repository, despina_server, blocked=False) == [4]
