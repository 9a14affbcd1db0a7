"""A remote model repository mirrored into a local cache folder.

URLs and credentials as tritonserver takes them: see ``filesystems``.

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

from despina import safe_join

from despina_repository_fsspec.filesystems import open_filesystem

CACHE_ENV = "DESPINA_REPOSITORY_CACHE"
MANIFEST = ".despina-sync.json"


#: tritonserver's per-scheme variables naming where it copies a remote repository.
TRITON_MOUNT_ENV = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}


def cache_root(scheme: str) -> Path:
    """Where repositories of ``scheme`` are mirrored: tritonserver's
    ``TRITON_{AWS,GCS,AZURE}_MOUNT_DIRECTORY`` when set, else ``$DESPINA_REPOSITORY_CACHE``,
    else ``~/.cache/despina/repositories``."""
    configured = os.environ.get(TRITON_MOUNT_ENV.get(scheme, "")) or os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "despina" / "repositories"


class FsspecSource:
    """A repository source for ``s3://``, ``gs://`` and ``as://`` URLs."""

    name = "fsspec"
    schemes = ("s3", "gs", "as")

    def __init__(self, url: str, settings: Any = None) -> None:
        self.url = url
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.local = cache_root(url.partition("://")[0]) / digest

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
        found = fs.find(root, detail=True)
        bucket = root.partition("/")[0]
        if not found and not fs.exists(bucket):  # some stores list a missing bucket as empty
            raise FileNotFoundError(f"bucket or container '{bucket}' does not exist")
        for remote, info in found.items():
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
