"""Model repositories served from real object stores on 127.0.0.1 (see conftest): S3, GCS
and Azure Blob, each loaded at start-up and followed in poll mode."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import toy_backend
from despina.plugin.manager import create_plugins
from despina.serving.server import StartupError
from despina.testing import RunningServer, start_server
from toy_backend import toy_config, toy_request

from .stores import Store

Start = Callable[..., RunningServer]


def put_model(store: Store, name: str, version: int = 1) -> None:
    store.put(f"{name}/config.pbtxt", toy_config().encode())
    store.put(f"{name}/{version}/model.toy", b"")


def poll(running: RunningServer) -> set[tuple[str, str]]:
    """Poll until the repository is stable; the (model, version) pairs READY then."""
    poller = running.server.poller
    assert poller is not None
    running.call(poller.poll_once())  # sees the change
    running.call(poller.poll_once())  # the folder is unchanged since: acts on it
    rows = running.server.models.index(ready_only=True)
    return {(row["name"], row["version"]) for row in rows}


def test_source_is_discovered_through_its_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["fsspec"]["distribution"] == "despina-repository-fsspec"
    assert rows["fsspec"]["provides"]["repository sources"] == ["fsspec"]


def test_models_load_from_the_store_and_poll_mode_follows_it(
    store: Store, despina_server: Start
) -> None:
    put_model(store, "first")
    running = despina_server(
        [],
        [
            f"--model-repository={store.url}",
            "--model-control-mode=poll",
            "--repository-poll-secs=3600",
        ],
        plugins=[toy_backend],
    )
    assert running.call(running.server.infer(toy_request("first"))).outputs["OUTPUT0"][0] == 2.0

    put_model(store, "first", version=2)  # a new version retires 1 (latest 1 policy)
    put_model(store, "second")
    assert poll(running) == {("first", "2"), ("second", "1")}
    response = running.call(running.server.infer(toy_request("first", value=3.0)))
    assert response.outputs["OUTPUT1"][0] == 2.0

    for key in ("first/config.pbtxt", "first/1/model.toy", "first/2/model.toy"):
        store.delete(key)
    assert poll(running) == {("second", "1")}
    states = {row["name"]: row.get("state") for row in running.server.models.index()}
    assert states == {"second": "READY"}  # the index lists folders, as Triton's
    assert running.server.models.entries["first"].reason == "unloaded"


def test_a_missing_bucket_stops_the_start_up(store: Store) -> None:
    with pytest.raises(StartupError, match="failed to fetch the model repository"):
        start_server([], [f"--model-repository={store.missing_url}"], plugins=[toy_backend])


def test_an_unknown_scheme_stops_the_start_up() -> None:
    with pytest.raises(StartupError, match="no installed repository source handles 'hdfs://'"):
        start_server([], ["--model-repository=hdfs://cluster/models"], plugins=[toy_backend])
