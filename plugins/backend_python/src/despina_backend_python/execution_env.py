"""``EXECUTION_ENV_PATH`` as in Triton: the Python environment a model's process runs in.

The parameter names a directory (an unpacked conda-pack or a virtualenv) or a
``.tar.gz`` made by conda-pack (unpacked once into a cache folder). ``$$TRITON_MODEL_DIRECTORY``
expands to the model's folder. The environment's ``bin/python3`` runs the stub; it needs
numpy (this package's own code is put on its ``PYTHONPATH``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tarfile
import tempfile
from pathlib import Path

from despina import ConfigError

ENV_KEY = "EXECUTION_ENV_PATH"
_CACHE = Path(tempfile.gettempdir()) / "despina-python-envs"


def resolve_environment(parameters: dict[str, str], model_dir: Path) -> tuple[str, dict[str, str]]:
    """(python executable, extra environment variables) for a model's child processes."""
    raw = parameters.get(ENV_KEY, "")
    if not raw:
        return sys.executable, {}
    path = Path(raw.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))).expanduser()
    if path.is_file():
        path = _unpacked(path)
    if not path.is_dir():
        raise ConfigError(f"model '{model_dir.name}': {ENV_KEY} '{raw}' does not exist")
    for name in ("bin/python3", "bin/python"):
        python = path / name
        if python.exists():
            break
    else:
        raise ConfigError(f"model '{model_dir.name}': {ENV_KEY} '{raw}' has no bin/python3")
    env = {
        "PATH": os.pathsep.join([str(path / "bin"), os.environ.get("PATH", "")]),
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(path / "lib"), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
        "VIRTUAL_ENV": str(path),
        "PYTHONNOUSERSITE": "1",
    }
    return str(python), env


def _unpacked(archive: Path) -> Path:
    """The folder holding ``archive`` unpacked (done once per archive content)."""
    stat = archive.stat()
    key = hashlib.sha256(
        f"{archive.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    target = _CACHE / key
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(prefix="unpack-", dir=_ensure_cache()))
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        with contextlib.suppress(OSError):  # unpacked meanwhile by another load
            staging.rename(target)
    return target


def _ensure_cache() -> Path:
    _CACHE.mkdir(parents=True, exist_ok=True)
    return _CACHE
