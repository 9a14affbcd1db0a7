"""A remote model repository mirrored into a local cache folder.

URLs as tritonserver takes them:

- ``s3://bucket/path`` (AWS; credentials and region from the usual AWS variables), and
  ``s3://host:port/bucket/path`` for an S3-compatible endpoint (``http://host:port``;
  set ``DESPINA_S3_USE_HTTPS=1`` for https);
- ``gs://bucket/path`` (needs the ``gcs`` extra);
- ``as://account/container/path`` (Azure; needs the ``azure`` extra).

Each sync lists the remote files and downloads only new or changed ones (by size and
ETag/mtime), each to a temporary name first and then renamed, so the poller never sees a
half-written file; local files that disappeared remotely are removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from despina.errors import InvalidArgument
from despina.paths import safe_join

CACHE_ENV = "DESPINA_REPOSITORY_CACHE"
MANIFEST = ".despina-sync.json"


def cache_root() -> Path:
    """``$DESPINA_REPOSITORY_CACHE``, else ``~/.cache/despina/repositories``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "despina" / "repositories"


def open_filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for a repository URL and the path inside it."""
    import fsspec

    scheme, _, rest = url.partition("://")
    if scheme == "s3":
        first, _, remainder = rest.partition("/")
        if ":" in first:  # s3://host:port/bucket/path: an S3-compatible endpoint
            protocol = "https" if os.environ.get("DESPINA_S3_USE_HTTPS") == "1" else "http"
            fs = fsspec.filesystem("s3", client_kwargs={"endpoint_url": f"{protocol}://{first}"})
            return fs, remainder.strip("/")
        return fsspec.filesystem("s3"), rest.strip("/")
    if scheme == "gs":
        return fsspec.filesystem("gcs"), rest.strip("/")
    if scheme == "as":
        account, _, path = rest.partition("/")
        return fsspec.filesystem("abfs", account_name=account), path.strip("/")
    raise InvalidArgument(f"unsupported repository URL scheme '{scheme}://'")


class FsspecSource:
    """A repository source for ``s3://``, ``gs://`` and ``as://`` URLs."""

    name = "fsspec"
    schemes = ("s3", "gs", "as")

    def __init__(self, url: str, settings: Any = None) -> None:
        self.url = url
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.local = cache_root() / digest

    async def localize(self) -> Path:
        """Mirror the remote repository into the local folder; return that folder."""
        return await asyncio.to_thread(self._sync)

    def _sync(self) -> Path:
        fs, root = open_filesystem(self.url)
        fs.invalidate_cache()
        self.local.mkdir(parents=True, exist_ok=True)
        manifest_path = self.local / MANIFEST
        previous = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
        current: dict[str, str] = {}
        for remote, info in fs.find(root, detail=True).items():
            relative = remote[len(root) :].lstrip("/") if root else remote
            if not relative or info.get("type") == "directory":
                continue
            stamp = (
                f"{info.get('size')}:{info.get('ETag') or info.get('etag') or info.get('mtime')}"
            )
            current[relative] = stamp
            target = safe_join(self.local, relative, "repository file path")
            if previous.get(relative) == stamp and target.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            fs.get_file(remote, str(partial))
            partial.replace(target)
        for relative in previous.keys() - current.keys():
            stale = safe_join(self.local, relative, "repository file path")
            stale.unlink(missing_ok=True)
        _remove_empty_dirs(self.local)
        manifest_path.write_text(json.dumps(current))
        return self.local


def _remove_empty_dirs(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            shutil.rmtree(folder, ignore_errors=True)
