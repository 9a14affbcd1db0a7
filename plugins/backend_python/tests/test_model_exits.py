"""A model that calls ``sys.exit()`` (or raises KeyboardInterrupt) fails its call, never
the server: in ``execute`` (sync and async), ``initialize`` and ``finalize``, in both
execution modes. In-process, SystemExit out of an ``await`` used to stop the server's
event loop, e.g. a model running ``unittest.main()`` as Triton's QA models do."""

from __future__ import annotations

from typing import Any

import pytest
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import ADD_SUB, ADD_SUB_IO, add

MODES = ["process", "in-process"]

EXITS_IN_EXECUTE = """
import sys

class TritonPythonModel:
    def execute(self, requests):
        sys.exit(3)
"""

ASYNC_INTERRUPTED = """
class TritonPythonModel:
    async def execute(self, requests):
        raise KeyboardInterrupt("stray")
"""

EXITS_IN_INITIALIZE = """
import sys

class TritonPythonModel:
    def initialize(self, args):
        sys.exit("no thanks")

    def execute(self, requests):
        return None
"""

EXITS_IN_FINALIZE = (
    ADD_SUB
    + """

    def finalize(self):
        import sys
        sys.exit(4)
"""
)


@pytest.mark.parametrize("mode", MODES)
def test_exits_fail_the_call_and_the_server_serves_on(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "exits", EXITS_IN_EXECUTE, ADD_SUB_IO, mode)
    add(model_repository, "interrupted", ASYNC_INTERRUPTED, ADD_SUB_IO, mode)
    add(model_repository, "init_exits", EXITS_IN_INITIALIZE, ADD_SUB_IO, mode)
    add(model_repository, "fini_exits", EXITS_IN_FINALIZE, ADD_SUB_IO, mode)
    add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit", "--load-model=add_sub"]
    )
    client = http_client(running)
    for model, text in (("exits", "SystemExit: 3"), ("interrupted", "KeyboardInterrupt: stray")):
        client.load_model(model)
        for _ in range(2):  # the model stays loaded and answers again
            with pytest.raises(InferenceServerException) as failed:
                infer(client, model, pair())
            assert text in str(failed.value)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("init_exits")
    assert "SystemExit: no thanks" in str(failed.value)
    client.load_model("fini_exits")
    client.unload_model("fini_exits")  # finalize's exit is logged
    assert infer(client, "add_sub", pair()).as_numpy("OUTPUT0").tolist() == [2, 3, 4, 5]
    assert client.is_server_live()
