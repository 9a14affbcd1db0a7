"""Poll mode under load: models and versions added, changed and removed while clients send
requests over HTTP — every request to a model that stays is answered correctly."""

from __future__ import annotations

import collections
import shutil
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config

pytest.importorskip("despina_frontend_http")

CLIENTS = 4
MAX_REQUESTS_PER_CLIENT = 3000


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_poll_mode_reloads_lose_no_request(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    import tritonclient.http as httpclient

    model_repository.add("steady", toy_config(), {"1/model.toy": '{"delay_s": 0.002}'})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=poll", "--repository-poll-secs=1", "--allow-grpc=false"],
        plugins=[toy_backend],
    )
    models = running.server.models
    stop = threading.Event()
    versions: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        connection = httpclient.InferenceServerClient(running.http_url)
        a = np.full(4, 3.0, np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [4], "FP32"),
            httpclient.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.ones(4, np.float32))
        for _ in range(MAX_REQUESTS_PER_CLIENT):
            if stop.is_set():
                break
            try:
                result = connection.infer("steady", inputs)
                ok = result.as_numpy("OUTPUT0").tolist() == [4.0] * 4
                version = result.get_response()["model_version"]
            except Exception as exc:  # noqa: BLE001 - every failure is recorded
                with lock:
                    failures.append(str(exc))
                continue
            with lock:
                versions[version] += 1
                if not ok:
                    failures.append(f"wrong output from version {version}")
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        model_repository.add("steady", None, {"2/model.toy": '{"delay_s": 0.002}'})  # new version
        _wait_for(lambda: models.get("steady").version == 2)
        model_repository.add("other", toy_config(), {"1/model.toy": ""})  # added model
        _wait_for(lambda: "other" in models.entries and models.entries["other"].ready)
        (model_repository.root / "steady" / "config.pbtxt").write_text(  # changed config
            toy_config(extra='parameters { key: "revision" value: { string_value: "2" } }')
        )
        _wait_for(lambda: models.get("steady").config.parameters["revision"].string_value == "2")
        shutil.rmtree(model_repository.root / "other")  # removed model
        _wait_for(lambda: not models.entries["other"].ready)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    total = sum(versions.values())
    print(f"requests answered: {total}, by version: {dict(versions)}, failures: {len(failures)}")
    assert failures == []
    assert versions["1"] > 0 and versions["2"] > 0
