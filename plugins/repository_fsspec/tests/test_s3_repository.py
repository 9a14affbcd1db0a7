"""An S3 model repository served from a real S3-compatible server (moto) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import toy_backend
from despina.plugins import create_plugins
from despina.testing import RunningServer, free_port
from moto.server import ThreadedMotoServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, object]]:
    """A moto S3 server with bucket "models"; yields (endpoint host:port, boto3 client)."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "DESPINA_REPOSITORY_CACHE": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    client.create_bucket(Bucket="models")
    yield f"127.0.0.1:{port}", client
    server.stop()


def put_model(client: object, name: str, config: str, weights: bytes = b"") -> None:
    client.put_object(Bucket="models", Key=f"repo/{name}/config.pbtxt", Body=config.encode())  # type: ignore[attr-defined]
    client.put_object(Bucket="models", Key=f"repo/{name}/1/model.toy", Body=weights)  # type: ignore[attr-defined]


def test_source_is_discovered_through_its_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["fsspec"]["distribution"] == "despina-repository-fsspec"
    assert rows["fsspec"]["provides"]["repository sources"] == ["fsspec"]


def test_models_load_from_s3_and_poll_mode_follows_the_bucket(
    s3: tuple[str, object], despina_server: Start
) -> None:
    endpoint, client = s3
    put_model(client, "first", toy_config())
    running = despina_server(
        [],
        [
            f"--model-repository=s3://{endpoint}/models/repo",
            "--model-control-mode=poll",
            "--repository-poll-secs=3600",
        ],
        plugins=[toy_backend],
    )
    assert running.call(running.server.infer(toy_request("first"))).outputs["OUTPUT0"][0] == 2.0
    put_model(client, "second", toy_config())
    client.delete_object(Bucket="models", Key="repo/first/1/model.toy")  # type: ignore[attr-defined]
    client.delete_object(Bucket="models", Key="repo/first/config.pbtxt")  # type: ignore[attr-defined]
    poller = running.server.poller
    assert poller is not None
    running.call(poller.poll_once())
    running.call(poller.poll_once())
    states = {row["name"]: row.get("state") for row in running.server.models.index()}
    assert states == {"first": "UNAVAILABLE", "second": "READY"}
    assert running.call(running.server.infer(toy_request("second"))).outputs["OUTPUT1"][0] == 0.0


def test_unknown_scheme_and_missing_bucket_stop_the_start_up(s3: tuple[str, object]) -> None:
    from despina.server import StartupError
    from despina.testing import start_server

    with pytest.raises(StartupError, match="no installed repository source handles 'hdfs://'"):
        start_server([], ["--model-repository=hdfs://cluster/models"], plugins=[toy_backend])
    endpoint, _ = s3
    with pytest.raises(StartupError, match="failed to fetch the model repository"):
        start_server(
            [], [f"--model-repository=s3://{endpoint}/no-such-bucket/x"], plugins=[toy_backend]
        )
