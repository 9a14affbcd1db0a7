"""Cloud credentials found as tritonserver finds them: the longest-matching entry of the JSON
file named by ``TRITON_CLOUD_CREDENTIAL_PATH`` when that is set, else the environment.

Fields are named as in that file: S3 ``key_id``, ``secret_key``, ``session_token``,
``region``, ``profile``; Azure ``account_str``, ``account_key``, ``auth_type``,
``client_id``; a GCS entry is a key-file path, given here as field ``path``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from despina import InvalidArgument

CREDENTIAL_FILE_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"

#: Each scheme's fields and the variables they come from without a credential file.
ENVIRONMENT = {
    "s3": {
        "key_id": "AWS_ACCESS_KEY_ID",
        "secret_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
        "region": "AWS_DEFAULT_REGION",
        "profile": "AWS_PROFILE",
    },
    "gs": {"path": "GOOGLE_APPLICATION_CREDENTIALS"},
    "as": {
        "account_str": "AZURE_STORAGE_ACCOUNT",
        "account_key": "AZURE_STORAGE_KEY",
        "auth_type": "AZURE_STORAGE_AUTH_TYPE",
        "client_id": "AZURE_STORAGE_CLIENT_ID",
    },
}


def credentials(url: str) -> dict[str, str]:
    """The non-empty credential fields for a repository URL; InvalidArgument when the
    credential file cannot be read or has no entry matching the URL."""
    scheme = url.partition("://")[0]
    file = os.environ.get(CREDENTIAL_FILE_ENV)
    if file:
        fields = _from_file(Path(file), scheme, url)
    else:
        fields = {name: os.environ.get(var, "") for name, var in ENVIRONMENT[scheme].items()}
    return {name: value for name, value in fields.items() if value}


def _from_file(path: Path, scheme: str, url: str) -> dict[str, str]:
    try:
        entries = json.loads(path.read_text()).get(scheme, {})
    except (OSError, ValueError, AttributeError) as exc:
        raise InvalidArgument(f"cannot read {CREDENTIAL_FILE_ENV} '{path}': {exc}") from None
    matches = [name for name in entries if url.startswith(name)]
    if not matches:
        raise InvalidArgument(f"no '{scheme}' credential in '{path}' matches '{url}'")
    entry = entries[max(matches, key=len)]
    if isinstance(entry, str):
        return {"path": entry}
    return {name: str(value) for name, value in entry.items() if name in ENVIRONMENT[scheme]}
