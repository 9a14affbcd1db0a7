"""``unload_dependents`` with ensembles over HTTP (tritonclient), as tritonserver 2.51 does:
the composing models go with the ensemble, except one another loaded ensemble still
uses and one that was loaded on its own (named by ``--load-model`` or a load request)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ens_backend
import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer
from test_ensemble import add_models, ensemble, step

pytest.importorskip("despina_frontend_http")

import tritonclient.http as httpclient

#: X -> double -> neg -> Y, and X -> neg -> check -> Y: "neg" is shared.
FIRST = ensemble(
    [step("double", {"IN": "X"}, {"OUT": "t"}), step("neg", {"IN": "t"}, {"OUT": "Y"})],
    ["X"],
    ["Y"],
)
SECOND = ensemble(
    [step("neg", {"IN": "X"}, {"OUT": "t"}), step("check", {"IN": "t"}, {"OUT": "Y"})],
    ["X"],
    ["Y"],
)
#: An ensemble of an ensemble: X -> first -> double -> Y.
OUTER = ensemble(
    [step("first", {"X": "X"}, {"Y": "t"}), step("double", {"IN": "t"}, {"OUT": "Y"})],
    ["X"],
    ["Y"],
)


@pytest.fixture
def start(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
) -> Callable[..., Any]:
    """Start an explicit-mode server loading ``models``; return its HTTP client."""

    def run(*models: str) -> Any:
        add_models(model_repository, {"first": FIRST, "second": SECOND, "outer": OUTER})
        args = ["--model-control-mode=explicit", *(f"--load-model={m}" for m in models)]
        return http_client(despina_server(model_repository.root, args=args, plugins=[ens_backend]))

    return run


def ready(client: Any) -> set[str]:
    """The READY models of the repository index, which keeps Triton's row shape."""
    rows = client.get_model_repository_index()
    assert all(set(row) <= {"name", "version", "state", "reason"} for row in rows)
    return {row["name"] for row in rows if row.get("state") == "READY"}


def infer(client: Any, model: str, values: list[float]) -> list[float]:
    tensor = httpclient.InferInput("X", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, np.float32))
    return [float(v) for v in client.infer(model, [tensor]).as_numpy("Y")]


def test_composing_models_unload_except_one_still_used(start: Callable[..., Any]) -> None:
    client = start("first", "second")
    assert ready(client) == {"first", "second", "double", "neg", "check"}
    client.unload_model("first", unload_dependents=True)
    assert ready(client) == {"second", "neg", "check"}  # "neg" is used by "second"
    assert infer(client, "second", [-2]) == [2]
    client.unload_model("second", unload_dependents=True)
    assert ready(client) == set()


def test_a_composing_model_loaded_on_its_own_stays(start: Callable[..., Any]) -> None:
    client = start("double", "first")
    client.unload_model("first", unload_dependents=True)
    assert ready(client) == {"double"}
    client.load_model("neg")  # a load request makes it a model loaded on its own too
    client.load_model("second")
    client.unload_model("second", unload_dependents=True)
    assert ready(client) == {"double", "neg"}


def test_nested_ensembles_unload_recursively(start: Callable[..., Any]) -> None:
    client = start("outer")
    assert ready(client) == {"outer", "first", "double", "neg"}
    assert infer(client, "outer", [1.5]) == [-6]
    client.unload_model("outer", unload_dependents=True)
    assert ready(client) == set()


def test_without_unload_dependents_only_the_model_unloads(start: Callable[..., Any]) -> None:
    client = start("first")
    client.unload_model("first")
    assert ready(client) == {"double", "neg"}


def test_a_composing_model_unloaded_alone_stops_its_ensemble(start: Callable[..., Any]) -> None:
    """As Triton: the ensemble is unavailable until the composing model is loaded again."""
    client = start("first")
    client.unload_model("neg", unload_dependents=True)
    assert ready(client) == {"double"}
    assert not client.is_model_ready("first")
    client.load_model("neg")
    assert ready(client) == {"first", "double", "neg"}
    assert infer(client, "first", [1]) == [-2]
