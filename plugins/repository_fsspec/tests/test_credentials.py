"""Credentials as tritonserver takes them (its variables, its credential file), checked
against Azurite, which verifies shared-key signatures, and moto's S3 server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import toy_backend
from despina.serving.server import StartupError
from despina.testing import RunningServer, start_server
from toy_backend import toy_config

from .conftest import AZURITE_ACCOUNT, AZURITE_KEY
from .stores import Store

Start = Callable[..., RunningServer]
WRONG_KEY = "d3Jvbmcga2V5"


def serve(despina_server: Start, store: Store, url: str) -> set[str]:
    """Put model "m" in the store, start a server on ``url``; the READY models."""
    store.put("m/config.pbtxt", toy_config().encode())
    store.put("m/1/model.toy", b"")
    running = despina_server([], [f"--model-repository={url}"], plugins=[toy_backend])
    return {row["name"] for row in running.server.models.index(ready_only=True)}


def refused(url: str, match: str) -> None:
    with pytest.raises(StartupError, match=match):
        start_server([], [f"--model-repository={url}"], plugins=[toy_backend])


@pytest.mark.parametrize(
    "host", [AZURITE_ACCOUNT, f"{AZURITE_ACCOUNT}.blob.core.windows.net"], ids=["name", "host"]
)
def test_azure_account_comes_from_the_url(
    azure_store: Store, despina_server: Start, host: str
) -> None:
    assert serve(despina_server, azure_store, f"as://{host}/models/repo") == {"m"}


def test_azure_storage_account_overrides_the_url_and_a_wrong_key_is_refused(
    azure_store: Store, despina_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT)
    assert serve(despina_server, azure_store, "as://another-account/models/repo") == {"m"}
    monkeypatch.setenv("AZURE_STORAGE_KEY", WRONG_KEY)
    refused(azure_store.url, "failed to authenticate")
    monkeypatch.setenv("AZURE_STORAGE_AUTH_TYPE", "certificate")
    refused(azure_store.url, "unsupported Azure auth type 'certificate'")


def test_the_credential_file_wins_by_longest_match(
    azure_store: Store, despina_server: Start, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_KEY", WRONG_KEY)  # ignored once the file is named
    file = tmp_path / "cloud_credential.json"
    file.write_text(
        json.dumps(
            {
                "as": {
                    "": {"account_str": AZURITE_ACCOUNT, "account_key": WRONG_KEY},
                    f"as://{AZURITE_ACCOUNT}/models": {"account_key": AZURITE_KEY},
                }
            }
        )
    )
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(file))
    assert serve(despina_server, azure_store, azure_store.url) == {"m"}
    other = f"as://{AZURITE_ACCOUNT}.blob.core.windows.net/models/repo"  # the "" entry's key
    refused(other, "failed to authenticate")


def test_a_credential_file_without_a_matching_entry_is_refused(
    s3_store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = tmp_path / "cloud_credential.json"
    file.write_text(json.dumps({"s3": {"s3://another-bucket": {"key_id": "x"}}}))
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(file))
    refused(s3_store.url, "no 's3' credential in .* matches")
    file.write_text("{not json")
    refused(s3_store.url, "cannot read TRITON_CLOUD_CREDENTIAL_PATH")
