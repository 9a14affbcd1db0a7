"""Graceful shutdown under load, over the wire: HTTP clients keep a slow batching model
busy while the server stops and never close their connections. As Triton, the open
connections are served until ``--exit-timeout-secs`` runs out; then the models stop: what
is still queued is answered "was not executed", every execution running finishes and is
answered with its result, new requests are refused as stopping; requests sent after the
port closed fail at the connection level and are counted apart. None is lost."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config

pytest.importorskip("despina_frontend_http")

CLIENTS = 8
MAX_REQUESTS_PER_CLIENT = 2000
#: Requests refused while stopping: UNAVAILABLE before the unload, NOT_FOUND after it.
REFUSED = (("503", "Server is stopping"), ("404", "has no available versions"))
BATCHING = "instance_group [{ count: 1 kind: KIND_CPU }] dynamic_batching { }"


def test_shutdown_under_load_loses_no_request(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    model_repository.add(
        "slow", toy_config(mbs=4, extra=BATCHING), {"1/model.toy": '{"delay_s": 0.05}'}
    )
    args = ["--allow-grpc=false", "--exit-timeout-secs=3"]
    running = despina_server(model_repository.root, args, plugins=[toy_backend])
    stats = running.server.models.get("slow").stats  # kept: the model is unloaded on stop
    outcomes: collections.Counter[str] = collections.Counter()
    unexpected: list[str] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        connection = httpclient.InferenceServerClient(running.http_url, network_timeout=60)
        value = np.full((1, 4), float(index), np.float32)
        inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(value)
        inputs[1].set_data_from_numpy(np.ones((1, 4), np.float32))
        for _ in range(MAX_REQUESTS_PER_CLIENT):
            try:
                result = connection.infer("slow", inputs)
            except InferenceServerException as exc:
                text = exc.message()
                if "was not executed" in text:
                    outcome = "unavailable_queued"  # accepted, then not run: never now
                elif any(exc.status() == code and t in text for code, t in REFUSED):
                    outcome = "unavailable_stopping"  # refused by the stopping server
                else:
                    outcome = "other_error"
                    unexpected.append(f"{exc.status()}: {text}")
            except Exception as exc:  # noqa: BLE001 - the port is closed: counted apart
                with lock:
                    outcomes["connection_error"] += 1
                    outcomes[f"connection_error:{type(exc).__name__}"] += 1
                break
            else:
                ok = result.as_numpy("OUTPUT0").tolist() == (value + 1).tolist()
                outcome = "ok" if ok else "wrong_output"
            with lock:
                outcomes[outcome] += 1
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while stats.success.count < 50:  # the model is under load, with a backlog
        assert time.monotonic() < deadline, "load did not start"
        time.sleep(0.02)
    running.stop()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()

    print("shutdown under load:", dict(outcomes))
    assert not unexpected
    assert outcomes["wrong_output"] == 0
    assert outcomes["other_error"] == 0
    # Every client ended on a connection-level error: the port closed after the stop.
    assert outcomes["connection_error"] == CLIENTS
    # Every request the model accepted was answered: its result reached its client, or,
    # still queued when the exit timeout ran out, "was not executed" did.
    assert outcomes["ok"] == stats.success.count
    assert outcomes["unavailable_queued"] == stats.failures["REJECTED"]
    assert stats.failures["CANCELED"] == stats.failures["BACKEND"] == stats.failures["OTHER"] == 0
    assert outcomes["ok"] > 0
