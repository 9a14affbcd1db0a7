"""A model's own ``is_ready()`` (Triton 2.67+) decides its readiness, as in Triton: called
at every model-ready check over HTTP and gRPC (never cached), sync or ``async def``, in
both execution modes; False, an exception or a non-bool answer make the model not ready
for that check; inference is not gated by it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from despina_backend_python.server import readiness

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, add

MODES = ["process", "in-process"]

#: Ready while the file READY in its model folder says "yes"; counts its calls in CALLS.
FLAGGED = (
    ADD_SUB
    + """
    def is_ready(self):
        import os
        folder = self.model_config_folder
        with open(os.path.join(folder, "CALLS"), "a") as calls:
            calls.write(".")
        with open(os.path.join(folder, "READY")) as flag:
            return flag.read() == "yes"
"""
).replace(
    "class TritonPythonModel:",
    "class TritonPythonModel:\n"
    "    def __init__(self):\n"
    "        import os\n"
    "        self.model_config_folder = os.path.dirname(os.path.dirname(__file__))\n",
)
ASYNC_FLAGGED = FLAGGED.replace("def is_ready(self):", "async def is_ready(self):")
RAISES = ADD_SUB + "\n    def is_ready(self):\n        raise RuntimeError('db down')\n"
NOT_BOOL = ADD_SUB + "\n    def is_ready(self):\n        return 1\n"


@pytest.mark.parametrize("mode", MODES)
def test_is_ready_decides_model_readiness(
    mode: str,
    model_repository: Any,
    despina_server: Any,
    http_client: Any,
    grpc_client: Any,
) -> None:
    for name, source in (("flagged", FLAGGED), ("async_flagged", ASYNC_FLAGGED)):
        add(model_repository, name, source, ADD_SUB_IO, mode)
    add(model_repository, "raises", RAISES, ADD_SUB_IO, mode)
    add(model_repository, "not_bool", NOT_BOOL, ADD_SUB_IO, mode)
    add(model_repository, "plain", ADD_SUB, ADD_SUB_IO, mode)
    root = Path(model_repository.root)
    for name in ("flagged", "async_flagged"):
        (root / name / "READY").write_text("yes")
    running = despina_server(root, ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"])
    clients = (http_client(running), grpc_client(running))
    for client in clients:
        assert client.is_model_ready("plain")
        assert client.is_model_ready("flagged") and client.is_model_ready("async_flagged")
        assert not client.is_model_ready("raises")
        assert not client.is_model_ready("not_bool")
    for name in ("flagged", "async_flagged"):
        (root / name / "READY").write_text("no")
    for client in clients:
        assert not client.is_model_ready("flagged")
        assert not client.is_model_ready("async_flagged", "1")
    # asked at every check: four checks of each over two protocols, none cached
    assert (root / "flagged" / "CALLS").read_text() == "." * 4
    # readiness is not a gate: a model that says it is not ready still infers
    assert infer(clients[0], "flagged", pair()).as_numpy("OUTPUT0").tolist() == [2, 3, 4, 5]
    assert clients[0].is_server_live()


def test_checks_share_the_call_in_flight_and_time_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``is_ready()`` call at a time: checks meanwhile wait for its answer; a check
    that waits too long fails with Triton's text while the call goes on."""
    monkeypatch.setattr(readiness, "READINESS_TIMEOUT_S", 0.2)
    calls: list[asyncio.Event] = []

    async def ask() -> bool:
        calls.append(asyncio.Event())
        await calls[-1].wait()
        return True

    async def scenario() -> None:
        check = readiness.ReadinessCheck(ask)
        first = asyncio.ensure_future(check())
        second = asyncio.ensure_future(check())
        await asyncio.sleep(0.05)
        assert len(calls) == 1
        calls[0].set()
        assert await first is True and await second is True
        with pytest.raises(TimeoutError, match="Timed out waiting for user-defined is_ready"):
            await check()
        assert len(calls) == 2
        with pytest.raises(TimeoutError):
            await check()  # the slow call is still in flight: no new one
        assert len(calls) == 2
        calls[1].set()

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", MODES)
def test_server_readiness_asks_every_model(
    mode: str,
    model_repository: Any,
    despina_server: Any,
    http_client: Any,
    grpc_client: Any,
) -> None:
    """With strict readiness (the default) the server is ready only while every READY
    model's ``is_ready()`` says so, over HTTP and gRPC; without it, only liveness counts."""
    add(model_repository, "flagged", FLAGGED, ADD_SUB_IO, mode)
    root = Path(model_repository.root)
    (root / "flagged" / "READY").write_text("yes")
    local = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
    strict = despina_server(root, local)
    lenient = despina_server(root, [*local, "--strict-readiness=false"])
    clients = [http_client(strict), grpc_client(strict)]
    assert all(client.is_server_ready() for client in clients)
    (root / "flagged" / "READY").write_text("no")
    assert not any(client.is_server_ready() for client in clients)
    assert http_client(lenient).is_server_ready() and grpc_client(lenient).is_server_ready()
