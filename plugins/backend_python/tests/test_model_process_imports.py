"""What a model process keeps resident: asyncio (and the ssl module it brings, ~7 MiB) is
loaded only for a model that needs an event loop, and hashlib/OpenSSL (~4 MiB) never by
Despina: a synchronous model's process imports none of them, an ``async def execute``
model's imports asyncio, and both answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, add

#: add_sub whose response parameters list which of these modules its process imported.
REPORTS_IMPORTS = ADD_SUB.replace(
    "request_id=request.request_id())",
    "request_id=request.request_id(), loaded=' '.join(m for m in "
    "('asyncio', 'ssl', 'hashlib') if m in __import__('sys').modules))",
)
ASYNC_REPORTS_IMPORTS = REPORTS_IMPORTS.replace("def execute(", "async def execute(")


def test_a_model_process_loads_asyncio_only_when_its_model_needs_it(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "sync_model", REPORTS_IMPORTS, ADD_SUB_IO)
    add(model_repository, "async_model", ASYNC_REPORTS_IMPORTS, ADD_SUB_IO)
    running = despina_server(Path(model_repository.root), ["--http-address=127.0.0.1"])
    client = http_client(running)
    for model, loaded in (("sync_model", ""), ("async_model", "asyncio ssl")):
        result = infer(client, model, pair())
        assert result.as_numpy("OUTPUT0").tolist() == [2.0, 3.0, 4.0, 5.0]
        assert result.get_response()["parameters"]["loaded"] == loaded, model
