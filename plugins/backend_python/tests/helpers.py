"""tritonclient helpers shared by the tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.http as httpclient


def infer(client: Any, model: str, arrays: dict[str, np.ndarray], **kwargs: Any) -> Any:
    """One HTTP inference with ``arrays`` as inputs."""
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == np.object_ else np.dtype(array.dtype).name.upper()
        datatype = {"FLOAT32": "FP32", "FLOAT64": "FP64"}.get(datatype, datatype)
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(model, inputs, **kwargs)


def pair(first: float = 1.0) -> dict[str, np.ndarray]:
    a = np.array([first, 2, 3, 4], np.float32)
    return {"INPUT0": a, "INPUT1": np.ones(4, np.float32)}
