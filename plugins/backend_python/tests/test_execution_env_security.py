"""EXECUTION_ENV_PATH's safety: archives whose members would land outside the unpacked
folder are refused with a clear load error, and a client's config override may not name
an environment outside the model folder (the repository's own config.pbtxt may)."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
from despina import ConfigError
from despina_backend_python.server import execution_env
from despina_backend_python.server.execution_env import resolve_environment
from tritonclient.utils import InferenceServerException

from .helpers import infer, pair
from .models import ADD_SUB_IO, add
from .test_environments import ENV_MODEL, packed_environment

Member = Callable[[tarfile.TarFile], None]


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> Member:
    def put(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    return put


def _link(name: str, target: str, kind: bytes) -> Member:
    def put(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, target
        tar.addfile(info)

    return put


def _device(name: str) -> Member:
    def put(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(info)

    return put


def _archive(*members: Member) -> bytes:
    """A .tar.gz: a working ``bin/python3`` launcher, then ``members``."""
    script = f'#!/bin/sh\nexec {sys.executable} "$@"\n'.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _file("bin/python3", script, 0o755)(tar)
        for member in members:
            member(tar)
    return buffer.getvalue()


def _model_dir(tmp_path: Path, archive: bytes, config: str = "") -> Path:
    model_dir = tmp_path / "models" / "m"
    model_dir.mkdir(parents=True)
    (model_dir / "env.tar.gz").write_bytes(archive)
    if config:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


IN_FOLDER = {"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (_file("../evil"), "member '../evil' would be written outside the environment's folder"),
        (_file("lib/../../evil"), "member 'lib/../../evil' would be written outside"),
        (_file("/tmp/despina-absolute-evil"), "has an absolute path"),
        (_link("lib/out", "../../../evil", tarfile.SYMTYPE), "is a link leading outside"),
        (_link("lib/etc", "/etc", tarfile.SYMTYPE), "is a link to an absolute path"),
        (_link("lib/hard", "../../evil", tarfile.LNKTYPE), "is a link leading outside"),
        (_device("dev/mem"), "is a device or other special file"),
    ],
    ids=[
        "dotdot",
        "nested-dotdot",
        "absolute",
        "symlink-out",
        "symlink-absolute",
        "hardlink",
        "device",
    ],
)
def test_archive_escaping_its_folder_is_refused(tmp_path: Path, member: Member, why: str) -> None:
    assert hasattr(tarfile, "data_filter")  # Python 3.11.4+
    model_dir = _model_dir(tmp_path, _archive(member))
    cached_before = set(execution_env._CACHE.iterdir()) if execution_env._CACHE.is_dir() else set()
    with pytest.raises(ConfigError) as refused:
        resolve_environment(IN_FOLDER, model_dir)
    text = str(refused.value)
    assert text.startswith(
        "model 'm': EXECUTION_ENV_PATH '$$TRITON_MODEL_DIRECTORY/env.tar.gz' cannot be unpacked: "
    ), text
    assert why in text
    assert str(tmp_path) not in text and "despina-python-envs" not in text
    assert not (tmp_path / "evil").exists() and not (tmp_path / "models" / "evil").exists()
    assert not Path("/tmp/despina-absolute-evil").exists()
    assert set(execution_env._CACHE.iterdir()) == cached_before  # nothing kept


def test_normal_archive_unpacks(tmp_path: Path) -> None:
    model_dir = _model_dir(
        tmp_path,
        _archive(_file("lib/site.py"), _link("bin/python", "python3", tarfile.SYMTYPE)),
    )
    python, env = resolve_environment(IN_FOLDER, model_dir)
    assert Path(python).name == "python3" and Path(python).is_file()
    assert Path(env["VIRTUAL_ENV"], "lib", "site.py").is_file()
    # the same archive again: the cached folder
    assert resolve_environment(IN_FOLDER, model_dir)[0] == python


def test_paths_outside_the_model_folder(tmp_path: Path) -> None:
    """Outside the model folder only with the repository's own config.pbtxt's value."""
    outside = tmp_path / "shared" / "env.tar.gz"
    outside.parent.mkdir()
    outside.write_bytes(_archive())
    value = {"EXECUTION_ENV_PATH": str(outside)}
    config = (
        'backend: "python"\n'
        f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{outside}" }} }}\n'
    )
    trusted = _model_dir(tmp_path / "a", _archive(), config)
    assert Path(resolve_environment(value, trusted)[0]).is_file()
    # an override naming it (the repository's config names none, or another path)
    for repository_config in ("", 'backend: "python"\n', config.replace("shared", "other")):
        model_dir = _model_dir(
            tmp_path / f"b{len(repository_config)}", _archive(), repository_config
        )
        with pytest.raises(ConfigError, match="leads outside the model folder"):
            resolve_environment(value, model_dir)
    # relative escapes from the model folder, and a link inside leading out
    escapes = ["$$TRITON_MODEL_DIRECTORY/../../shared/env.tar.gz", "shared/env.tar.gz"]
    link_dir = _model_dir(tmp_path / "c", _archive())
    (link_dir / "link.tar.gz").symlink_to(outside)
    for raw in escapes:
        with pytest.raises(ConfigError, match="leads outside the model folder"):
            resolve_environment({"EXECUTION_ENV_PATH": raw}, link_dir)
    with pytest.raises(ConfigError, match="leads outside the model folder"):
        resolve_environment(
            {"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/link.tar.gz"}, link_dir
        )
    # a folder built from a client's file override has no repository config to trust
    override = tmp_path / "despina-override-x" / "m"
    override.mkdir(parents=True)
    (override / "config.pbtxt").write_text(config)
    with pytest.raises(ConfigError, match="leads outside the model folder"):
        resolve_environment(value, override)


# --- through the server's load API


EXTRA = (
    'parameters { key: "EXECUTION_ENV_PATH" '
    'value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
)


def test_escaping_archive_fails_the_load(
    model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "bad_env", ENV_MODEL, ADD_SUB_IO, "process", EXTRA)
    (model_repository.root / "bad_env" / "env.tar.gz").write_bytes(
        _archive(_file("../evil"), _link("lib/out", "/etc", tarfile.SYMTYPE))
    )
    add(model_repository, "good_env", ENV_MODEL, ADD_SUB_IO, "process", EXTRA)
    (model_repository.root / "good_env" / "env.tar.gz").write_bytes(packed_environment("ok"))
    running = despina_server(model_repository.root, args=["--model-control-mode=explicit"])
    client: httpclient.InferenceServerClient = http_client(running)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("bad_env")
    assert "cannot be unpacked: member '../evil' would be written outside" in str(refused.value)
    assert not (model_repository.root / "evil").exists()
    client.load_model("good_env")  # a normal archive still works
    assert infer(client, "good_env", pair()).get_response()["parameters"]["env"] == "ok"


def test_client_override_may_not_leave_the_model_folder(
    tmp_path: Path, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    add(model_repository, "plain", ENV_MODEL, ADD_SUB_IO, "process")
    (model_repository.root / "plain" / "env.tar.gz").write_bytes(packed_environment("inside"))
    outside = tmp_path / "elsewhere.tar.gz"
    outside.write_bytes(packed_environment("outside"))
    running = despina_server(
        model_repository.root, args=["--model-control-mode=explicit", "--load-model=plain"]
    )
    client: httpclient.InferenceServerClient = http_client(running)
    config = client.get_model_config("plain")

    def with_env(value: str) -> str:
        changed = json.loads(json.dumps(config))
        changed.setdefault("parameters", {})["EXECUTION_ENV_PATH"] = {"string_value": value}
        return json.dumps(changed)

    for value in (str(outside), "$$TRITON_MODEL_DIRECTORY/../../elsewhere.tar.gz"):
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("plain", config=with_env(value))
        assert "leads outside the model folder" in str(refused.value), refused.value
        assert str(tmp_path) not in str(refused.value).replace(value, "")
    # the previous version keeps serving; an environment inside the folder loads
    assert infer(client, "plain", pair()).get_response()["parameters"]["env"] == ""
    client.load_model("plain", config=with_env("$$TRITON_MODEL_DIRECTORY/env.tar.gz"))
    assert infer(client, "plain", pair()).get_response()["parameters"]["env"] == "inside"
