"""The model process loads asyncio (and the ssl module it brings, ~7 MiB resident) only
for a model that needs an event loop: a synchronous model's process never imports it,
an ``async def execute`` model's does, and both answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, add

#: add_sub whose response parameters say whether this process has imported asyncio.
REPORTS_ASYNCIO = ADD_SUB.replace(
    "request_id=request.request_id())",
    "request_id=request.request_id(), asyncio=str('asyncio' in __import__('sys').modules))",
)
ASYNC_REPORTS_ASYNCIO = REPORTS_ASYNCIO.replace("def execute(", "async def execute(")


def test_only_a_model_that_needs_the_event_loop_loads_asyncio(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "sync_model", REPORTS_ASYNCIO, ADD_SUB_IO)
    add(model_repository, "async_model", ASYNC_REPORTS_ASYNCIO, ADD_SUB_IO)
    running = despina_server(Path(model_repository.root), ["--http-address=127.0.0.1"])
    client = http_client(running)
    for model, loaded in (("sync_model", "False"), ("async_model", "True")):
        result = infer(client, model, pair())
        assert result.as_numpy("OUTPUT0").tolist() == [2.0, 3.0, 4.0, 5.0]
        assert result.get_response()["parameters"]["asyncio"] == loaded, model
