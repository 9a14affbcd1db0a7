"""fsspec filesystems for tritonserver's cloud repository URLs, configured as tritonserver is.

Credentials come from ``credentials`` (tritonserver's variables or credential file).

- ``s3://bucket/path``, ``s3://[http://|https://]host:port/bucket/path`` (an S3-compatible
  endpoint, http unless ``https://`` is given); without a key, botocore's own chain
  (``~/.aws`` and the rest).
- ``gs://bucket/path``: a key file, else the attached service account, else anonymous. An
  emulator endpoint is taken from ``CLOUD_STORAGE_EMULATOR_ENDPOINT`` (as tritonserver's GCS
  client) or ``STORAGE_EMULATOR_HOST`` (as Google's Python clients); with one and no key
  file the requests are anonymous.
- ``as://account/container/path``: the credential's account (else the URL's) with a shared
  key, or auth type ``managed_identity`` (a client id for a user-assigned identity) or
  ``default`` (the DefaultAzureCredential chain), else anonymous.
  ``DESPINA_AZURE_BLOB_ENDPOINT`` (a Despina extension, e.g.
  ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite) replaces
  ``https://<account>.blob.core.windows.net``; it takes a shared key or no credential.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from despina import InvalidArgument

from despina_repository_fsspec.credentials import credentials

AZURE_ENDPOINT_ENV = "DESPINA_AZURE_BLOB_ENDPOINT"
AZURE_HOST_SUFFIX = ".blob.core.windows.net"


def open_filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for a repository URL and the repository's path inside it."""
    scheme, separator, rest = url.partition("://")
    opener = OPENERS.get(scheme) if separator else None
    if opener is None:
        raise InvalidArgument(f"unsupported repository URL '{url}'")
    return opener(rest, credentials(url))


def open_s3(rest: str, cred: dict[str, str]) -> tuple[Any, str]:
    import fsspec

    options: dict[str, Any] = {
        "key": cred.get("key_id"),
        "secret": cred.get("secret_key"),
        "token": cred.get("session_token"),
        "profile": cred.get("profile"),
    }
    client: dict[str, str] = {"region_name": cred["region"]} if "region" in cred else {}
    protocol = "http"
    for prefix in ("https://", "http://"):
        if rest.startswith(prefix):
            protocol, rest = prefix[:-3], rest[len(prefix) :]
    first, _, remainder = rest.partition("/")
    if ":" in first:  # host:port, an S3-compatible endpoint
        client["endpoint_url"] = f"{protocol}://{first}"
        rest = remainder
    return fsspec.filesystem("s3", client_kwargs=client, **options), rest.strip("/")


def open_gcs(rest: str, cred: dict[str, str]) -> tuple[Any, str]:
    # gcsfs.core's class speaks only the JSON API; gcsfs's default class also probes a gRPC
    # control plane for the bucket layout, which emulators do not serve.
    from gcsfs.core import GCSFileSystem

    endpoint = os.environ.get("CLOUD_STORAGE_EMULATOR_ENDPOINT") or os.environ.get(
        "STORAGE_EMULATOR_HOST"
    )
    key_file = cred.get("path")
    if not endpoint:
        return GCSFileSystem(token=key_file), rest.strip("/")
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    return GCSFileSystem(token=key_file or "anon", endpoint_url=endpoint), rest.strip("/")


def open_azure(rest: str, cred: dict[str, str]) -> tuple[Any, str]:
    from adlfs import AzureBlobFileSystem

    host, _, path = rest.partition("/")
    account = cred.get("account_str") or host.removesuffix(AZURE_HOST_SUFFIX)
    key = cred.get("account_key")
    auth = cred.get("auth_type") or ("key" if key else "anonymous")
    endpoint = os.environ.get(AZURE_ENDPOINT_ENV)
    if auth not in ("key", "anonymous", "managed_identity", "default"):
        raise InvalidArgument(f"unsupported Azure auth type '{auth}'")
    if endpoint:
        if auth not in ("key", "anonymous"):
            raise InvalidArgument(f"{AZURE_ENDPOINT_ENV} takes a shared key or no credential")
        parts = [f"BlobEndpoint={endpoint}", f"AccountName={account}"]
        parts += [f"AccountKey={key}"] if key else []
        return AzureBlobFileSystem(connection_string=";".join(parts)), path.strip("/")
    if auth == "managed_identity":
        from azure.identity.aio import ManagedIdentityCredential

        credential = ManagedIdentityCredential(client_id=cred.get("client_id"))
        return AzureBlobFileSystem(account_name=account, credential=credential), path.strip("/")
    if auth == "default":  # adlfs builds the DefaultAzureCredential chain when not anonymous
        return AzureBlobFileSystem(account_name=account, anon=False), path.strip("/")
    if auth == "key" and key:
        return AzureBlobFileSystem(account_name=account, account_key=key), path.strip("/")
    return AzureBlobFileSystem(account_name=account, anon=True), path.strip("/")


OPENERS: dict[str, Callable[[str, dict[str, str]], tuple[Any, str]]] = {
    "s3": open_s3,
    "gs": open_gcs,
    "as": open_azure,
}
