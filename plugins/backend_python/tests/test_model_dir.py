"""``pb_utils.get_model_dir()``: the model's version folder, in ``auto_complete_config``
as in ``initialize`` and ``execute`` (Triton's Python-based backends read their model's
files there), in both execution modes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from .models import MODE_KEY

#: Takes its operation (add or sub) and its tensors' width from ``model.json`` beside it.
FROM_MODEL_DIR = """
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils

def settings():
    with open(os.path.join(pb_utils.get_model_dir(), "model.json")) as f:
        return json.load(f)

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        width = settings()["width"]
        for name in ("INPUT0", "INPUT1"):
            config.add_input({"name": name, "data_type": "TYPE_FP32", "dims": [width]})
        config.add_output({"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [width]})
        config.add_output({"name": "MODEL_DIR", "data_type": "TYPE_STRING", "dims": [1]})
        return config

    def initialize(self, args):
        self.operation = settings()["operation"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a, b = (pb_utils.get_input_tensor_by_name(request, n).as_numpy()
                    for n in ("INPUT0", "INPUT1"))
            out = a + b if self.operation == "add" else a - b
            where = np.array([pb_utils.get_model_dir().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", out.astype(np.float32)),
                pb_utils.Tensor("MODEL_DIR", where),
            ]))
        return responses
"""


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_get_model_dir_is_the_version_folder(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    config = (
        'backend: "python"\n'
        f'parameters {{ key: "{MODE_KEY}" value {{ string_value: "{mode}" }} }}\n'
    )
    settings = json.dumps({"operation": "sub", "width": 3})
    model_repository.add("sub", config, {"1/model.py": FROM_MODEL_DIR, "1/model.json": settings})
    client = http_client(despina_server(model_repository.root))

    metadata = client.get_model_metadata("sub")
    assert [t["shape"] for t in metadata["inputs"]] == [[3], [3]]
    a, b = np.array([5, 6, 7], np.float32), np.array([1, 2, 3], np.float32)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, [3], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer("sub", inputs)
    assert result.as_numpy("OUTPUT").tolist() == [4.0, 4.0, 4.0]
    where = Path(result.as_numpy("MODEL_DIR")[0].decode())
    assert where.resolve() == (Path(model_repository.root) / "sub" / "1").resolve()
