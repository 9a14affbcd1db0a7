"""Checksum agent: a model loads only when its files match the digests in its config.

```
model_repository_agents {
  agents [ { name: "checksum"
             parameters { key: "SHA256:1/model.onnx" value: "<hex digest>" } } ]
}
```

Each parameter key is ``<ALGORITHM>:<path inside the model folder>`` (SHA256, SHA512 or
MD5) and its value the expected hex digest. A missing file, a path leaving the folder or
a mismatch fails the load with a message naming the model and the file.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from despina import ConfigError, hookimpl, safe_join

ALGORITHMS = {"SHA256": "sha256", "SHA512": "sha512", "MD5": "md5"}
CHUNK = 1 << 20


class ChecksumAgent:
    """Verifies file digests before a model loads; never changes the folder."""

    name = "checksum"

    def __init__(self, parameters: dict[str, str]) -> None:
        self.expected: list[tuple[str, str, str]] = []
        for key, digest in parameters.items():
            algorithm, _, relative = key.partition(":")
            if algorithm.upper() not in ALGORITHMS or not relative:
                raise ConfigError(
                    f"checksum agent: parameter '{key}' must be <{'|'.join(ALGORITHMS)}>:<file path>"
                )
            self.expected.append((ALGORITHMS[algorithm.upper()], relative, digest.strip().lower()))

    async def prepare(self, model_dir: Path) -> Path:
        """Check every listed file; raise ConfigError on the first mismatch."""
        for algorithm, relative, digest in self.expected:
            path = safe_join(model_dir, relative, "checksum file path")
            if not path.is_file():
                raise ConfigError(
                    f"model '{model_dir.name}': checksum file '{relative}' does not exist"
                )
            actual = await asyncio.to_thread(file_digest, path, algorithm)
            if actual != digest:
                raise ConfigError(
                    f"model '{model_dir.name}': checksum mismatch for '{relative}': "
                    f"{algorithm} expected {digest}, got {actual}"
                )
        return model_dir


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks."""
    digest = hashlib.new(algorithm)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@hookimpl
def despina_repository_agents() -> list[type[Any]]:
    return [ChecksumAgent]
