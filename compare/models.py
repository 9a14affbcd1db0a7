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


#: Every input back as the output of the same name with an ``O`` prefix (F16 is optional:
#: Triton refuses FP16 in JSON).
ECHO_IO = """
max_batch_size: 0
input [ { name: "B" data_type: TYPE_BOOL dims: [ -1 ] },
        { name: "I8" data_type: TYPE_INT8 dims: [ -1 ] },
        { name: "U64" data_type: TYPE_UINT64 dims: [ -1 ] },
        { name: "F16" data_type: TYPE_FP16 dims: [ -1 ] optional: true },
        { name: "F64" data_type: TYPE_FP64 dims: [ -1 ] },
        { name: "S" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OB" data_type: TYPE_BOOL dims: [ -1 ] },
         { name: "OI8" data_type: TYPE_INT8 dims: [ -1 ] },
         { name: "OU64" data_type: TYPE_UINT64 dims: [ -1 ] },
         { name: "OF16" data_type: TYPE_FP16 dims: [ -1 ] },
         { name: "OF64" data_type: TYPE_FP64 dims: [ -1 ] },
         { name: "OS" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

ECHO = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("O" + t.name(), t.as_numpy())
                                            for t in request.inputs()])
                for request in requests]
"""

#: A running sum per sequence (correlation ID), restarted by the START flag.
ACCUMULATE_IO = """
max_batch_size: 0
sequence_batching { max_sequence_idle_microseconds: 5000000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

ACCUMULATE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.correlation_id()
            if request.flags() & 1:
                self.sums[key] = 0
            self.sums[key] = self.sums.get(key, 0) + int(request.inputs()[0].as_numpy()[0])
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SUM", np.array([self.sums[key]], np.int32))]))
            if request.flags() & 2:
                del self.sums[key]
        return responses
"""

#: add_sub twice: TWICE = (a + b) + (a - b).
ENSEMBLE = """
name: "twice"
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "TWICE" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "diff" }
    output_map { key: "OUTPUT0" value: "TWICE" } } ] }
"""


#: What execute sees of a request, as JSON in a BYTES output.
REQUEST_INFO_IO = """
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "UNUSED" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

REQUEST_INFO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            info = {"parameters": request.parameters(), "id": request.request_id(),
                    "config": self.config,
                    "correlation_id": request.correlation_id(), "flags": request.flags(),
                    "outputs": sorted(request.requested_output_names()),
                    "inputs": [t.name() for t in request.inputs()]}
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], np.object_)),
                pb_utils.Tensor("UNUSED", np.zeros(1, np.int32))]))
        return responses
"""


#: An error response whose TritonError code is the CODE input's index into CODES.
CODED_ERROR_IO = """
max_batch_size: 0
input [ { name: "CODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "UNUSED" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

CODED_ERROR = """
import triton_python_backend_utils as pb_utils

CODES = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
         "ALREADY_EXISTS"]

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = CODES[int(request.inputs()[0].as_numpy()[0])]
            error = pb_utils.TritonError("coded " + name, getattr(pb_utils.TritonError, name))
            responses.append(pb_utils.InferenceResponse(error=error))
        return responses
"""

#: Outputs that disagree with the config: FP64 for an FP32 output, a shape of its own,
#: and one the config does not declare.
SLOPPY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUTPUT0", np.arange(4, dtype=np.float64)),
            pb_utils.Tensor("OUTPUT1", np.zeros((2, 3), np.float32)),
            pb_utils.Tensor("EXTRA", np.ones(2, np.int32))]) for _ in requests]
"""

#: A decoupled model that answers (with an output its config does not declare), then
#: with an error response; raises for a negative input.
DECOUPLED_ERRORS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            if values[0] < 0:
                raise ValueError("negative input")
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([values[0]], np.int32)),
                pb_utils.Tensor("IDX", np.array([0], np.uint32)),
                pb_utils.Tensor("UNDECLARED", np.array([1], np.int32))]))
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("second failed")),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: How many codes CODED_ERROR knows.
ERROR_CODES = 7


def build(repo: RepositoryBuilder, mode: str) -> None:
    """Every model the comparisons use, in Despina's execution ``mode`` (Triton ignores
    the parameter and runs them as it always does)."""
    m = _backend_test_models()
    m.add(repo, "add_sub", ADD_SUB, m.ADD_SUB_IO, mode)
    m.add(repo, "strings", m.STRINGS, m.STRINGS_IO, mode)
    m.add(repo, "batched", m.BATCHED, m.BATCHED_IO, mode)
    m.add(repo, "broken", m.RAISE_INIT, m.ADD_SUB_IO, mode)
    m.add(repo, "wrong_return", m.WRONG_RETURN, m.ADD_SUB_IO, mode)
    m.add(repo, "repeat", m.REPEAT, m.REPEAT_IO, mode)
    m.add(repo, "bls_sync", m.BLS_SYNC, m.BLS_IO, mode)
    m.add(repo, "bls_async", m.BLS_ASYNC, m.BLS_IO, mode)
    m.add(repo, "metrics", m.METRICS, m.ADD_SUB_IO, mode)
    repo.add("auto", 'backend: "python"\n', {"1/model.py": m.AUTO_COMPLETE})
    m.add(repo, "echo", ECHO, ECHO_IO, mode)
    m.add(repo, "accumulate", ACCUMULATE, ACCUMULATE_IO, mode)
    repo.add("twice", ENSEMBLE, {"1/.keep": ""})
    m.add(repo, "request_info", REQUEST_INFO, REQUEST_INFO_IO, mode)
    m.add(repo, "coded_error", CODED_ERROR, CODED_ERROR_IO, mode)
    m.add(repo, "sloppy", SLOPPY, m.ADD_SUB_IO, mode)
    m.add(repo, "decoupled_errors", DECOUPLED_ERRORS, m.REPEAT_IO, mode)
