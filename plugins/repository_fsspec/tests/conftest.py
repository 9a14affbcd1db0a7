"""Object stores the tests start on 127.0.0.1, each behind one small interface: S3 (moto's
server), Google Cloud Storage (gcp-storage-emulator) and Azure Blob Storage (Azurite, from
npm: ``make venv`` installs it under ``.venv/node``). The server under test is configured
only through tritonserver's URL forms and variables (plus the endpoint overrides)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from despina.testing import free_port

from .stores import Store

BUCKET = "models"
#: Azurite's built-in development account and its published key.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@pytest.fixture(autouse=True)
def repository_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test mirrors into its own cache folder."""
    monkeypatch.setenv("DESPINA_REPOSITORY_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def s3_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    yield Store(
        url=f"s3://127.0.0.1:{port}/{BUCKET}/repo",
        missing_url=f"s3://http://127.0.0.1:{port}/no-such-bucket/repo",
        put=lambda key, body: client.put_object(Bucket=BUCKET, Key=f"repo/{key}", Body=body),
        delete=lambda key: client.delete_object(Bucket=BUCKET, Key=f"repo/{key}"),
    )
    server.stop()


@pytest.fixture
def gcs_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    from gcp_storage_emulator.server import create_server
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", endpoint)
    client = storage.Client(
        project="despina",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )
    bucket = client.bucket(BUCKET)
    yield Store(
        url=f"gs://{BUCKET}/repo",
        missing_url="gs://no-such-bucket/repo",
        put=lambda key, body: bucket.blob(f"repo/{key}").upload_from_string(body),
        delete=lambda key: bucket.blob(f"repo/{key}").delete(),
    )
    server.stop()


def azurite_command() -> Path | None:
    """``azurite-blob`` as ``make venv`` installs it (beside this Python), else on PATH."""
    local = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "azurite-blob"
    found = shutil.which("azurite-blob")
    return local if local.is_file() else Path(found) if found else None


def wait_for_port(port: int, process: subprocess.Popen[bytes], limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"Azurite did not listen on 127.0.0.1:{port} (exit {process.poll()})")


@pytest.fixture
def azure_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Store]:
    command = azurite_command()
    if command is None:
        pytest.skip("Azurite is not installed (make venv installs it with npm)")
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    options = ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--silent"]
    options += ["--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck"]
    process = subprocess.Popen([command, *options], cwd=tmp_path, stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        for name in ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_AUTH_TYPE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
        monkeypatch.setenv("AZURE_STORAGE_KEY", AZURITE_KEY)
        monkeypatch.setenv("DESPINA_AZURE_BLOB_ENDPOINT", endpoint)
        service = BlobServiceClient(
            endpoint, credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
        )
        container = service.create_container(BUCKET)
        yield Store(
            url=f"as://{AZURITE_ACCOUNT}/{BUCKET}/repo",
            missing_url=f"as://{AZURITE_ACCOUNT}/no-such-container/repo",
            put=lambda key, body: container.upload_blob(f"repo/{key}", body, overwrite=True),
            delete=lambda key: container.delete_blob(f"repo/{key}"),
        )
        service.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(params=["s3", "gs", "as"])
def store(request: pytest.FixtureRequest) -> Store:
    """Each kind of store in turn."""
    fixture = {"s3": "s3_store", "gs": "gcs_store", "as": "azure_store"}[request.param]
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]
