"""The repository both servers serve: pb_utils models that Triton 2.51 runs as they are.

Most sources are the Python backend tests' own (written as Triton's documentation shows);
add_sub here leaves out ``InferenceResponse(parameters=...)``, which Triton 2.51's
pb_utils does not accept yet.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from despina.testing import RepositoryBuilder

_TESTS = Path(__file__).parents[1] / "plugins" / "backend_python" / "tests" / "models.py"


def _backend_test_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("python_backend_test_models", _TESTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: add_sub as Triton's example, plus an error response (INPUT0[0] == -1) and a raise (-2).
ADD_SUB = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a[0] == -1:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative first element")))
                continue
            if a[0] == -2:
                raise ValueError("execute exploded")
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


def build(repo: RepositoryBuilder) -> None:
    """Every model the comparisons use, in process mode (Triton's only mode)."""
    m = _backend_test_models()
    m.add(repo, "add_sub", ADD_SUB, m.ADD_SUB_IO)
    m.add(repo, "strings", m.STRINGS, m.STRINGS_IO)
    m.add(repo, "batched", m.BATCHED, m.BATCHED_IO)
    m.add(repo, "broken", m.RAISE_INIT, m.ADD_SUB_IO)
    m.add(repo, "wrong_return", m.WRONG_RETURN, m.ADD_SUB_IO)
    m.add(repo, "repeat", m.REPEAT, m.REPEAT_IO)
    m.add(repo, "bls_sync", m.BLS_SYNC, m.BLS_IO)
    m.add(repo, "bls_async", m.BLS_ASYNC, m.BLS_IO)
    m.add(repo, "metrics", m.METRICS, m.ADD_SUB_IO)
    repo.add("auto", 'backend: "python"\n', {"1/model.py": m.AUTO_COMPLETE})
