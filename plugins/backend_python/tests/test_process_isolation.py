"""Process mode: a killed or hung instance process fails only its requests, the model is
not ready while the instance restarts, and it serves again afterwards."""

from __future__ import annotations

import concurrent.futures
import os
import time
from typing import Any

import pytest
from despina_backend_python.server.process_mode import PIPELINE_DEPTH
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, BATCHED, BATCHED_IO, CRASHY, add


def wait_ready(client: Any, model: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not client.is_model_ready(model):
        assert time.monotonic() < deadline, f"{model} did not come back"
        time.sleep(0.1)


TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]"


def instance_pid(client: Any) -> int:
    return int(infer(client, "crashy", pair()).as_numpy("OUTPUT1")[0])


def test_killed_instance_fails_its_request_then_restarts(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "crashy", CRASHY, ADD_SUB_IO, "process")
    client = http_client(despina_server(model_repository.root))
    first_pid = instance_pid(client)
    assert first_pid != os.getpid()
    with pytest.raises(InferenceServerException) as error:
        infer(client, "crashy", pair(-1))  # the model kills its own process mid-request
    assert "stopped unexpectedly (exit code -9)" in error.value.message()
    assert "crashy_0" in error.value.message()
    assert not client.is_model_ready("crashy")
    wait_ready(client, "crashy")
    assert instance_pid(client) not in (first_pid, 0)


def test_hung_execute_times_out_and_instance_restarts(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    extra = 'parameters { key: "DESPINA_EXECUTE_TIMEOUT_SECONDS" value { string_value: "1" } }'
    add(model_repository, "crashy", CRASHY, ADD_SUB_IO, "process", extra)
    client = http_client(despina_server(model_repository.root))
    first_pid = instance_pid(client)
    with pytest.raises(InferenceServerException) as error:
        infer(client, "crashy", pair(1000))  # sleeps 30 s
    assert "execute did not finish within 1 s" in error.value.message()
    wait_ready(client, "crashy")
    assert instance_pid(client) != first_pid


def test_shared_memory_keys_are_internal(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    from despina.errors import InvalidArgument
    from despina.memory.own_shm import INTERNAL_KEY_PREFIX, private_shm_dir

    add(model_repository, "crashy", CRASHY, ADD_SUB_IO, "process")
    running = despina_server(model_repository.root, ["--allow-client-shm=true"])
    instance_pid(http_client(running))
    with pytest.raises(InvalidArgument, match="Invalid shared memory region: 'mine'"):
        running.server.shared_memory.register("mine", f"/{INTERNAL_KEY_PREFIX}_py_x", 0, 16)
    stem = running.server.models.get("crashy").instances[0].child.arena.stem
    assert stem.startswith(private_shm_dir() + "/")
    assert stem.startswith(INTERNAL_KEY_PREFIX)
    leftovers = os.listdir(os.path.join("/dev/shm", private_shm_dir()))
    assert leftovers == []


def test_pipelined_executions_answer_each_request(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """Without a batcher the server sends a child its next executions while one runs
    (max_in_flight PIPELINE_DEPTH); every concurrent request still gets its own answer. A model
    whose batches the dynamic batcher forms takes one execution at a time."""
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, "process")
    add(model_repository, "batched", BATCHED, BATCHED_IO, "process")
    running = despina_server(model_repository.root)
    models = running.server.models
    assert models.get("add_sub").instances[0].max_in_flight == PIPELINE_DEPTH
    assert models.get("batched").instances[0].max_in_flight == 1

    def client_run(worker: int) -> None:
        client = http_client(running)
        for step in range(25):
            first = float(worker * 100 + step)
            result = infer(client, "add_sub", pair(first))
            assert result.as_numpy("OUTPUT0").tolist() == [first + 1, 3, 4, 5]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(client_run, w) for w in range(8)]:
            future.result()


def test_an_idle_instance_is_chosen_before_queueing_behind_a_busy_one(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    """Two instances, each taking several executions at once: two concurrent requests
    run in the two processes, not one after another in the first."""
    add(model_repository, "crashy", CRASHY, ADD_SUB_IO, "process", TWO_INSTANCES)
    running = despina_server(model_repository.root)
    assert running.server.models.get("crashy").instances[0].max_in_flight > 1

    def slow_pid(_: int) -> int:
        return int(infer(http_client(running), "crashy", pair(100.5)).as_numpy("OUTPUT1")[0])

    for _ in range(3):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert len(set(pool.map(slow_pid, range(2)))) == 2
