"""``unload_dependents`` with BLS: the server records which models a Python model calls
(either execution mode) and unloads them with it, except one another loaded model uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import (
    ADD_SUB,
    ADD_SUB_IO,
    BLS_ASYNC,
    BLS_IO,
    BLS_SYNC,
    REPEAT,
    REPEAT_IO,
    SOMETIMES_BLS,
    SOMETIMES_BLS_IO,
    add,
)

CALLEES = {"add_sub", "repeat"}


@pytest.fixture
def start(model_repository: Any, despina_server: Any, http_client: Any) -> Callable[..., Any]:
    """Add the models, start an explicit-mode server loading all of them; its HTTP client.
    "bls" calls add_sub and repeat (a decoupled stream); "sometimes" calls add_sub."""

    def run(mode: str = "in-process", source: str = BLS_SYNC) -> Any:
        add(model_repository, "add_sub", ADD_SUB, ADD_SUB_IO, mode)
        add(model_repository, "repeat", REPEAT, REPEAT_IO, mode)
        add(model_repository, "bls", source, BLS_IO, mode)
        add(model_repository, "sometimes", SOMETIMES_BLS, SOMETIMES_BLS_IO, mode)
        args = ("--model-control-mode=explicit", "--load-model=*")
        return http_client(despina_server(model_repository.root, args=args))

    return run


def ready(client: Any) -> set[str]:
    """The READY models of the repository index, which keeps Triton's row shape."""
    rows = client.get_model_repository_index()
    assert all(set(row) <= {"name", "version", "state", "reason"} for row in rows)
    return {row["name"] for row in rows if row.get("state") == "READY"}


@pytest.mark.parametrize("mode", ["process", "in-process"])
@pytest.mark.parametrize("source", [BLS_SYNC, BLS_ASYNC], ids=["sync", "async"])
def test_unload_with_dependents_unloads_the_callees(
    start: Callable[..., Any], mode: str, source: str
) -> None:
    client = start(mode, source)
    infer(client, "bls", pair())  # calls add_sub and repeat (the async one also "missing")
    client.unload_model("bls", unload_dependents=True)
    assert ready(client) == {"sometimes"}


def test_a_callee_another_loaded_model_uses_stays(start: Callable[..., Any]) -> None:
    client = start()
    infer(client, "bls", pair())
    infer(client, "sometimes", pair(101.0))  # calls add_sub too
    client.unload_model("bls", unload_dependents=True)
    assert ready(client) == {"sometimes", "add_sub"}
    answer = infer(client, "sometimes", pair(101.0)).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(answer, [102, 3, 4, 5])
    client.unload_model("sometimes", unload_dependents=True)
    assert ready(client) == set()


def test_without_unload_dependents_only_the_model_unloads(start: Callable[..., Any]) -> None:
    client = start()
    infer(client, "bls", pair())
    client.unload_model("bls")
    assert ready(client) == CALLEES | {"sometimes"}
    client.load_model("bls")
    client.unload_model("bls", unload_dependents=True)  # its calls before the unload are forgotten
    assert ready(client) == CALLEES | {"sometimes"}


def test_a_callee_unloaded_alone_leaves_its_caller_ready(start: Callable[..., Any]) -> None:
    """As Triton, which does not track BLS: the caller's calls then fail."""
    client = start()
    infer(client, "sometimes", pair(101.0))
    client.unload_model("add_sub", unload_dependents=True)
    assert client.is_model_ready("sometimes")
    with pytest.raises(InferenceServerException, match="add_sub"):
        infer(client, "sometimes", pair(101.0))
    assert infer(client, "sometimes", pair()).as_numpy("IN_THREAD") is not None  # no BLS: served
