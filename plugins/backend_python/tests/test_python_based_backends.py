"""Python-based backends (Triton's): a model whose ``backend`` no plugin provides runs
``<--backend-directory>/<backend>/model.py`` on the python backend, with its own files
in its version folder (``pb_utils.get_model_dir()``), in both execution modes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .models import MODE_KEY
from .test_model_dir import FROM_MODEL_DIR


def backend_model(mode: str) -> str:
    return (
        'backend: "add_sub"\n'
        f'parameters {{ key: "{MODE_KEY}" value {{ string_value: "{mode}" }} }}\n'
    )


def pair_inputs(a: list[float], b: list[float]) -> list[Any]:
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, [len(data)], "FP32")
        tensor.set_data_from_numpy(np.array(data, np.float32))
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_a_model_runs_the_backend_directorys_model_py(
    mode: str, tmp_path: Path, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    backends = tmp_path / "backends"
    (backends / "add_sub").mkdir(parents=True)
    (backends / "add_sub/model.py").write_text(FROM_MODEL_DIR)
    for name, operation in (("add", "add"), ("sub", "sub")):
        settings = json.dumps({"operation": operation, "width": 2})
        model_repository.add(name, backend_model(mode), {"1/model.json": settings})
    running = despina_server(model_repository.root, args=[f"--backend-directory={backends}"])
    client = http_client(running)

    added = client.infer("add", pair_inputs([5, 6], [1, 2]))
    assert added.as_numpy("OUTPUT").tolist() == [6.0, 8.0]
    subtracted = client.infer("sub", pair_inputs([5, 6], [1, 2]))
    assert subtracted.as_numpy("OUTPUT").tolist() == [4.0, 4.0]
    where = Path(subtracted.as_numpy("MODEL_DIR")[0].decode())
    assert where.resolve() == (Path(model_repository.root) / "sub" / "1").resolve()
    config = client.get_model_config("add")
    assert (config["backend"], config["runtime"]) == ("add_sub", "model.py")


def test_a_backend_neither_installed_nor_in_the_backend_directory_is_refused(
    tmp_path: Path, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    model_repository.add("add", backend_model("process"), {"1/model.json": "{}"})
    running = despina_server(
        model_repository.root,
        args=[f"--backend-directory={tmp_path}", "--model-control-mode=explicit"],
    )
    with pytest.raises(InferenceServerException, match="unknown backend 'add_sub'"):
        http_client(running).load_model("add")
