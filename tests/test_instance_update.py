"""Instance updates, as Triton's ``L0_model_update`` checks them: a reload whose config
changed only in ``instance_group`` creates just the instances added and finalizes just the
ones removed, while the model serves; anything else changed is a full reload.

The model is a Python-backend model (process mode, as Triton runs it) that counts its
``initialize`` and ``finalize`` calls in files and can be told to take its time in either.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_backend_python")

NAME = "counted"

MODEL = """
import os
import time

import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}


def bump(kind):
    path = os.path.join(FOLDER, kind)
    with open(path, "a") as counts:
        counts.write("x")


def delay(kind):
    path = os.path.join(FOLDER, kind + ".delay")
    return float(open(path).read()) if os.path.exists(path) else 0.0


class TritonPythonModel:
    def initialize(self, args):
        bump("initialize.started")
        time.sleep(delay("initialize"))
        bump("initialize")

    def execute(self, requests):
        time.sleep(delay("infer"))
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]

    def finalize(self):
        bump("finalize")
"""


def config(groups: str, extra: str = "") -> str:
    return f"""
name: "{NAME}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {groups} ]
{extra}
"""


def cpu(count: int, name: str = "") -> str:
    named = f'name: "{name}" ' if name else ""
    return f"{{ {named}count: {count} kind: KIND_CPU }}"


class Counted:
    """The model's repository folder, its counters and a gRPC client of its server."""

    def __init__(self, repository: RepositoryBuilder, counts: Path, running: RunningServer):
        import tritonclient.grpc as grpcclient

        self.repository, self.counts, self.running = repository, counts, running
        self.client = grpcclient.InferenceServerClient(running.grpc_url)

    def count(self, kind: str) -> int:
        path = self.counts / kind
        return len(path.read_text()) if path.exists() else 0

    def counted(self) -> tuple[int, int]:
        """(initialize, finalize) calls so far."""
        return self.count("initialize"), self.count("finalize")

    def set_delay(self, kind: str, seconds: float) -> None:
        (self.counts / f"{kind}.delay").write_text(str(seconds))

    def write_config(self, text: str) -> None:
        path = self.repository.root / NAME / "config.pbtxt"
        path.write_text(text)

    def load(self, text: str | None = None, **kwargs: Any) -> None:
        if text is not None:
            self.write_config(text)
        self.client.load_model(NAME, **kwargs)

    def infer(self) -> np.ndarray:
        import tritonclient.grpc as grpcclient

        data = np.arange(4, dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        result = self.client.infer(NAME, [tensor]).as_numpy("OUTPUT0")
        assert result.tolist() == data.tolist()
        return result


@pytest.fixture
def counted(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    tmp_path: Path,
) -> Iterator[Counted]:
    counts = tmp_path / "counts"
    counts.mkdir()
    model_repository.add(NAME, config(cpu(1)), {"1/model.py": MODEL.format(folder=str(counts))})
    running = despina_server(
        model_repository.root,
        [
            "--model-control-mode=explicit",
            "--grpc-address=127.0.0.1",
            "--http-address=127.0.0.1",
            "--allow-metrics=false",
        ],
    )
    model = Counted(model_repository, counts, running)
    yield model
    model.client.close()


def wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_added_and_removed_instances_only_under_load(counted: Counted) -> None:
    counted.load(config(cpu(3)))
    assert counted.counted() == (3, 0)
    stop, errors, answered = threading.Event(), [], [0]

    def client() -> None:
        while not stop.is_set():
            try:
                counted.infer()
                answered[0] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is recorded
                errors.append(str(exc))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        counted.load(config(cpu(4)))  # add one
        assert counted.counted() == (4, 0)
        counted.load(config(cpu(3)))  # remove one: finalized before the load answers
        assert counted.counted() == (4, 1)
        counted.load(config(cpu(1, "renamed")))  # a name is not a difference
        assert counted.counted() == (4, 3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert errors == []
    assert answered[0] > 0
    counted.client.unload_model(NAME)
    wait_for(lambda: counted.counted() == (4, 4))


def test_unchanged_config_reloads_nothing(counted: Counted) -> None:
    counted.load(config(cpu(2)))
    counted.load()
    counted.load(config(cpu(1, "a") + ", " + cpu(1, "b")))  # the same two instances
    assert counted.counted() == (2, 0)
    counted.infer()


def test_load_api_config_adds_an_instance(counted: Counted) -> None:
    counted.load(config(cpu(1)))
    served = counted.client.get_model_config(NAME, as_json=True)["config"]
    served["instance_group"][0]["count"] = 2
    counted.load(config=json.dumps(served))
    assert counted.counted() == (2, 0)
    counted.infer()


def test_an_update_does_not_wait_for_a_running_execution(counted: Counted) -> None:
    counted.load(config(cpu(1)))
    counted.set_delay("infer", 3)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        running = pool.submit(counted.infer)
        wait_for(lambda: counted.running.server.models.get(NAME).scheduler.busy > 0)
        counted.load(config(cpu(2)))
        assert not running.done(), "the update waited for the running execution"
        running.result(30)
    assert counted.counted() == (2, 0)


def test_requests_run_while_a_new_instance_initializes(counted: Counted) -> None:
    counted.load(config(cpu(1)))
    counted.set_delay("initialize", 3)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        update = pool.submit(counted.load, config(cpu(2)))
        wait_for(lambda: counted.count("initialize.started") == 2)
        counted.infer()
        assert not update.done(), "the request waited for the new instance"
        update.result(30)
    assert counted.counted() == (2, 0)


def test_other_changes_reload_in_full(counted: Counted) -> None:
    counted.load(config(cpu(2)))
    counted.load(config(cpu(2), 'parameters { key: "p" value: { string_value: "1" } }'))
    wait_for(lambda: counted.counted() == (4, 2))
    model_file = counted.repository.root / NAME / "1" / "model.py"
    time.sleep(0.01)  # a new modification time
    model_file.write_text(model_file.read_text() + "\n# changed\n")
    counted.load(config(cpu(3), 'parameters { key: "p" value: { string_value: "1" } }'))
    wait_for(lambda: counted.counted() == (7, 4))
    counted.infer()


def test_an_invalid_update_keeps_the_instances_serving(counted: Counted) -> None:
    from tritonclient.utils import InferenceServerException

    counted.load(config(cpu(3)))
    counted.write_config("--- not a config ---")
    with pytest.raises(InferenceServerException):
        counted.load()
    counted.infer()
    counted.load(config(cpu(2)))
    assert counted.counted() == (3, 1)


def test_a_plain_load_of_an_unchanged_model_keeps_a_given_config(counted: Counted) -> None:
    """As Triton: a load without overrides of a model whose folder did not change since
    it was loaded reloads nothing, and a config an earlier load request gave stays."""
    counted.load(config(cpu(1)))
    served = counted.client.get_model_config(NAME, as_json=True)["config"]
    served["parameters"] = {"given": {"string_value": "yes"}}
    counted.load(config=json.dumps(served))  # another config: a full reload
    wait_for(lambda: counted.counted() == (2, 1))
    counted.load()
    assert counted.counted() == (2, 1)
    kept = counted.client.get_model_config(NAME, as_json=True)["config"]
    assert kept["parameters"]["given"]["string_value"] == "yes"
    counted.infer()
