"""fsspec filesystems for tritonserver's cloud repository URLs, configured as tritonserver is.

- ``s3://bucket/path``, ``s3://[http://|https://]host:port/bucket/path`` (an S3-compatible
  endpoint, http unless ``https://`` is given); credentials and region from the usual AWS
  variables and files (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, ``~/.aws``).
- ``gs://bucket/path``: ``GOOGLE_APPLICATION_CREDENTIALS`` (a JSON key file), else the
  attached service account, else anonymous. An emulator endpoint is taken from
  ``CLOUD_STORAGE_EMULATOR_ENDPOINT`` (as tritonserver's GCS client) or
  ``STORAGE_EMULATOR_HOST`` (as Google's Python clients); with one and no key file the
  requests are anonymous.
- ``as://account/container/path``: ``AZURE_STORAGE_ACCOUNT`` (else the URL's account) with
  ``AZURE_STORAGE_KEY`` (shared key), or ``AZURE_STORAGE_AUTH_TYPE=managed_identity``
  (``AZURE_STORAGE_CLIENT_ID`` for a user-assigned identity) or ``=default`` (the
  DefaultAzureCredential chain), else anonymous. ``DESPINA_AZURE_BLOB_ENDPOINT`` (a Despina
  extension, e.g. ``http://127.0.0.1:10000/devstoreaccount1`` for Azurite) replaces
  ``https://<account>.blob.core.windows.net``; it takes a shared key or no credential.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from despina.errors import InvalidArgument

AZURE_ENDPOINT_ENV = "DESPINA_AZURE_BLOB_ENDPOINT"
AZURE_HOST_SUFFIX = ".blob.core.windows.net"


def open_filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for a repository URL and the repository's path inside it."""
    scheme, separator, rest = url.partition("://")
    opener = OPENERS.get(scheme) if separator else None
    if opener is None:
        raise InvalidArgument(f"unsupported repository URL '{url}'")
    return opener(rest)


def open_s3(rest: str) -> tuple[Any, str]:
    import fsspec

    protocol = "http"
    for prefix in ("https://", "http://"):
        if rest.startswith(prefix):
            protocol, rest = prefix[:-3], rest[len(prefix) :]
    first, _, remainder = rest.partition("/")
    if ":" in first:  # host:port, an S3-compatible endpoint
        endpoint = f"{protocol}://{first}"
        return fsspec.filesystem("s3", client_kwargs={"endpoint_url": endpoint}), remainder.strip(
            "/"
        )
    return fsspec.filesystem("s3"), rest.strip("/")


def open_gcs(rest: str) -> tuple[Any, str]:
    # gcsfs.core's class speaks only the JSON API; gcsfs's default class also probes a gRPC
    # control plane for the bucket layout, which emulators do not serve.
    from gcsfs.core import GCSFileSystem

    endpoint = os.environ.get("CLOUD_STORAGE_EMULATOR_ENDPOINT") or os.environ.get(
        "STORAGE_EMULATOR_HOST"
    )
    key_file = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if not endpoint:
        return GCSFileSystem(token=key_file), rest.strip("/")
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    return GCSFileSystem(token=key_file or "anon", endpoint_url=endpoint), rest.strip("/")


def open_azure(rest: str) -> tuple[Any, str]:
    from adlfs import AzureBlobFileSystem

    host, _, path = rest.partition("/")
    account = os.environ.get("AZURE_STORAGE_ACCOUNT") or host.removesuffix(AZURE_HOST_SUFFIX)
    key = os.environ.get("AZURE_STORAGE_KEY")
    auth = os.environ.get("AZURE_STORAGE_AUTH_TYPE") or ("key" if key else "anonymous")
    endpoint = os.environ.get(AZURE_ENDPOINT_ENV)
    if auth not in ("key", "anonymous", "managed_identity", "default"):
        raise InvalidArgument(f"unsupported AZURE_STORAGE_AUTH_TYPE '{auth}'")
    if endpoint:
        if auth not in ("key", "anonymous"):
            raise InvalidArgument(f"{AZURE_ENDPOINT_ENV} takes a shared key or no credential")
        parts = [f"BlobEndpoint={endpoint}", f"AccountName={account}"]
        parts += [f"AccountKey={key}"] if key else []
        return AzureBlobFileSystem(connection_string=";".join(parts)), path.strip("/")
    if auth == "managed_identity":
        from azure.identity.aio import ManagedIdentityCredential

        client_id = os.environ.get("AZURE_STORAGE_CLIENT_ID") or None
        credential = ManagedIdentityCredential(client_id=client_id)
        return AzureBlobFileSystem(account_name=account, credential=credential), path.strip("/")
    if auth == "default":  # adlfs builds the DefaultAzureCredential chain when not anonymous
        return AzureBlobFileSystem(account_name=account, anon=False), path.strip("/")
    if auth == "key" and key:
        return AzureBlobFileSystem(account_name=account, account_key=key), path.strip("/")
    return AzureBlobFileSystem(account_name=account, anon=True), path.strip("/")


OPENERS: dict[str, Callable[[str], tuple[Any, str]]] = {
    "s3": open_s3,
    "gs": open_gcs,
    "as": open_azure,
}
