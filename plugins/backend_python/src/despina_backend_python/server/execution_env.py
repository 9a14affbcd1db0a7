"""``EXECUTION_ENV_PATH`` as in Triton: the Python environment a model's process runs in.

The parameter names a directory (an unpacked conda-pack or a virtualenv) or a
``.tar.gz`` made by conda-pack (unpacked once into a cache folder). ``$$TRITON_MODEL_DIRECTORY``
expands to the model's folder. The environment's ``bin/python3`` runs the stub; it needs
numpy (this package's own code is put on its ``PYTHONPATH``).

Security:

- Archives unpack with tarfile's ``data`` filter (Python 3.11.4+), and absolute member
  names are refused rather than stripped: a member whose path or link leads out of the
  target folder (``..``, an absolute name, a symlink or hard link pointing out) or a device
  file fails the load with :class:`~despina.ConfigError` naming the member; nothing
  of the archive is kept. The cache folder is the server user's own (mode 0700).
- A path that leads outside the model folder (an absolute one, ``..``, or a link going
  out) is allowed only when it is the value of the repository's own ``config.pbtxt``: a
  client's config override (the load API with a config) may name only environments
  inside the model folder, e.g. ``$$TRITON_MODEL_DIRECTORY/env.tar.gz``. The backend
  cannot see whether the config came from the client, so it compares the value with the
  one in ``<model folder>/config.pbtxt``; a folder built from a client's file override
  has no config of the repository's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import sys
import tarfile
import tempfile
from pathlib import Path

from despina import ConfigError, ModelConfig, parameters_of
from google.protobuf import text_format

ENV_KEY = "EXECUTION_ENV_PATH"
_CACHE = Path(tempfile.gettempdir()) / "despina-python-envs"
#: The prefix of the temporary folders the core builds for a client's file override.
_OVERRIDE_PREFIX = "despina-override-"


def resolve_environment(parameters: dict[str, str], model_dir: Path) -> tuple[str, dict[str, str]]:
    """(python executable, extra environment variables) for a model's child processes."""
    raw = parameters.get(ENV_KEY, "")
    if not raw:
        return sys.executable, {}
    path = Path(raw.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))).expanduser()
    if not _inside(path, model_dir) and raw != _repository_value(model_dir):
        raise ConfigError(
            f"model '{model_dir.name}': {ENV_KEY} '{raw}' leads outside the model folder; "
            "only the repository's config.pbtxt may name an environment elsewhere"
        )
    if path.is_file():
        path = _unpacked(path, raw, model_dir.name)
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


def _inside(path: Path, model_dir: Path) -> bool:
    """Whether ``path`` (links followed) is in the model folder."""
    try:
        return path.resolve().is_relative_to(model_dir.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def _repository_value(model_dir: Path) -> str | None:
    """``EXECUTION_ENV_PATH`` in the repository's ``<model_dir>/config.pbtxt``; None
    without one (or for a folder built from a client's file override)."""
    if model_dir.parent.name.startswith(_OVERRIDE_PREFIX):
        return None
    try:
        text = (model_dir / "config.pbtxt").read_text(encoding="utf-8")
        config = text_format.Parse(text, ModelConfig())
    except (OSError, UnicodeDecodeError, text_format.ParseError):
        return None
    return parameters_of(config).get(ENV_KEY) or None


def _unpacked(archive: Path, raw: str, model: str) -> Path:
    """The folder holding ``archive`` unpacked (done once per archive content); a
    ConfigError naming the member for an archive that would write outside it."""
    info = archive.stat()
    key = hashlib.sha256(
        f"{archive.resolve()}:{info.st_size}:{info.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    target = _ensure_cache() / key
    if not target.is_dir():
        if not hasattr(tarfile, "data_filter"):
            raise ConfigError(
                f"model '{model}': {ENV_KEY} '{raw}': unpacking an archive safely needs "
                "Python 3.11.4 or later (tarfile extraction filters)"
            )
        staging = Path(tempfile.mkdtemp(prefix="unpack-", dir=_CACHE))
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging, filter=_refuse_escapes)
        except (tarfile.TarError, OSError, EOFError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ConfigError(
                f"model '{model}': {ENV_KEY} '{raw}' cannot be unpacked: {_describe(exc)}"
            ) from None
        with contextlib.suppress(OSError):  # unpacked meanwhile by another load
            staging.rename(target)
        shutil.rmtree(staging, ignore_errors=True)  # still there when another load won
    return target


def _refuse_escapes(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, refusing absolute names too (it would strip the
    leading ``/``: a member meant for elsewhere has no place in the environment)."""
    if member.name.startswith(("/", os.sep)) or (os.altsep and member.name.startswith(os.altsep)):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, dest)


def _describe(exc: BaseException) -> str:
    """An unpacking error as a load error text: a filter's refusal names the member (a
    path inside the archive), never the server's folders."""
    if isinstance(exc, tarfile.FilterError):
        member = exc.tarinfo.name
        if isinstance(exc, tarfile.AbsolutePathError):
            return f"member '{member}' has an absolute path"
        if isinstance(exc, tarfile.OutsideDestinationError):
            return f"member '{member}' would be written outside the environment's folder"
        if isinstance(exc, tarfile.AbsoluteLinkError):
            return f"member '{member}' is a link to an absolute path"
        if isinstance(exc, tarfile.LinkOutsideDestinationError):
            return f"member '{member}' is a link leading outside the environment's folder"
        if isinstance(exc, tarfile.SpecialFileError):
            return f"member '{member}' is a device or other special file"
        return f"member '{member}' is refused ({type(exc).__name__})"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__


def _ensure_cache() -> Path:
    """The cache folder: created mode 0700; ConfigError when it is not this user's own
    or others may write in it (another local user could plant an environment there)."""
    _CACHE.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = _CACHE.lstat()
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise ConfigError(
            f"{_CACHE.name}: the Python environments' cache folder must be a folder of "
            "the server's user that no one else may write to"
        )
    return _CACHE
