"""Python models that use GPU tensors through cupy (the real one, or the TEST-ONLY stand-in
of ``core/tests/standin_cuda``), for test_gpu_tensors.py."""

from __future__ import annotations

from despina.testing import RepositoryBuilder

from .models import config

PAIR_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

#: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, both left on the GPU; CHECKS:
#: JSON of what the model saw (where its inputs were, its outputs' is_cpu, as_numpy's
#: refusal, whether to_dlpack shares the memory from_dlpack took).
GPU_ADD_IO = (
    PAIR_IO
    + """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "CHECKS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
)

GPU_ADD = """
import json
import cupy
import numpy as np
import triton_python_backend_utils as pb_utils


def on_gpu(tensor):
    if tensor.is_cpu():
        return cupy.asarray(tensor.as_numpy())
    return cupy.from_dlpack(tensor.to_dlpack())


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            y = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            a, b = on_gpu(x), on_gpu(y)
            total = a + b
            out0 = pb_utils.Tensor.from_dlpack("OUTPUT0", total)  # a __dlpack__ object
            out1 = pb_utils.Tensor.from_dlpack("OUTPUT1", (a - b).toDlpack())  # a capsule
            try:
                out0.as_numpy()
                refusal = ""
            except pb_utils.TritonModelException as exc:
                refusal = str(exc)
            back = cupy.from_dlpack(out0.to_dlpack())
            checks = {
                "inputs_cpu": [x.is_cpu(), y.is_cpu()],
                "outputs_cpu": [out0.is_cpu(), out1.is_cpu()],
                "refusal": refusal,
                "shares": int(back.data.ptr) == int(total.data.ptr),
                "device": list(out0.__dlpack_device__()),
            }
            text = pb_utils.Tensor("CHECKS", np.array([json.dumps(checks).encode()], np.object_))
            responses.append(pb_utils.InferenceResponse([out0, out1, text]))
        return responses
"""

#: OUTPUT0 = 2 * INPUT0 (on the host); OUTPUT1: 1.0 for each input that arrived on a GPU.
PROBE_IO = (
    PAIR_IO
    + """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
)

PROBE = """
import numpy as np
import triton_python_backend_utils as pb_utils


def host(tensor):
    if tensor.is_cpu():
        return tensor.as_numpy()
    import cupy
    return cupy.from_dlpack(tensor.to_dlpack()).get()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            y = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            on_gpu = np.array([not x.is_cpu(), not y.is_cpu()], np.float32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", host(x) * 2), pb_utils.Tensor("OUTPUT1", on_gpu)]))
        return responses
"""

#: Host model: OUTPUT0 = INPUT0 + INPUT1 as numpy.
CPU_ADD_IO = (
    PAIR_IO
    + """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
)

CPU_ADD = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                    pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    + pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy())])
                for r in requests]
"""

#: BLS to gpu_add and cpu_add with each preferred memory (none, CPU, GPU on the device the
#: request parameter "device" names), and GPU tensors as BLS inputs of probe_cpu and
#: probe_gpu; REPORT is JSON of what came back; OUTPUT0 = INPUT0 + INPUT1.
BLS_IO = (
    PAIR_IO
    + """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "REPORT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
)

BLS = """
import json
import cupy
import numpy as np
import triton_python_backend_utils as pb_utils


def host(tensor):
    if tensor.is_cpu():
        return tensor.as_numpy()
    return cupy.from_dlpack(tensor.to_dlpack()).get()


def placement(tensor):
    return "cpu" if tensor.is_cpu() else "gpu:%d" % tensor.__dlpack_device__()[1]


def call(model, inputs, outputs, **kwargs):
    response = pb_utils.InferenceRequest(
        model_name=model, inputs=inputs, requested_output_names=outputs, **kwargs).exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return [pb_utils.get_output_tensor_by_name(response, name) for name in outputs]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            device = json.loads(request.parameters()).get("device", 1)
            memories = {
                "default": None,
                "cpu": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
                "gpu": pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, device),
            }
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            y = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            report = {}
            for model in ("gpu_add", "cpu_add"):
                for label, memory in memories.items():
                    kwargs = {} if memory is None else {"preferred_memory": memory}
                    (out,) = call(model, [x, y], ["OUTPUT0"], **kwargs)
                    report[model + "/" + label] = [placement(out), host(out).tolist()]
            gx = pb_utils.Tensor.from_dlpack("INPUT0", cupy.asarray(x.as_numpy()))
            gy = pb_utils.Tensor.from_dlpack("INPUT1", cupy.asarray(y.as_numpy()))
            for probe in ("probe_cpu", "probe_gpu"):
                doubled, on_gpu = call(probe, [gx, gy], ["OUTPUT0", "OUTPUT1"])
                report[probe] = [host(on_gpu).tolist(), host(doubled).tolist()]
            text = np.array([json.dumps(report).encode()], np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", x.as_numpy() + y.as_numpy()),
                pb_utils.Tensor("REPORT", text)]))
        return responses
"""

#: OUTPUT0 = INPUT0; CHECKS: the error of from_dlpack on an object that says it is in
#: CUDA memory (where no cupy is installed: the hint).
NO_CUPY_IO = (
    PAIR_IO
    + """
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "CHECKS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
)

NO_CUPY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class CudaTensor:
    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("never asked for: cupy is missing")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                pb_utils.Tensor.from_dlpack("OUTPUT0", CudaTensor())
                text = "no error"
            except pb_utils.TritonModelException as exc:
                text = str(exc)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()),
                pb_utils.Tensor("CHECKS", np.array([text.encode()], np.object_))]))
        return responses
"""


def force_cpu(value: str) -> str:
    """The config parameter FORCE_CPU_ONLY_INPUT_TENSORS = ``value``."""
    return (
        f'parameters {{ key: "FORCE_CPU_ONLY_INPUT_TENSORS" value {{ string_value: "{value}" }} }}'
    )


def add_gpu_models(repo: RepositoryBuilder, mode: str) -> None:
    """gpu_add, cpu_add, probe_cpu (inputs forced to the CPU, Triton's default) and
    probe_gpu (FORCE_CPU_ONLY_INPUT_TENSORS "no"), all in execution ``mode``."""
    for name, source, io, extra in (
        ("gpu_add", GPU_ADD, GPU_ADD_IO, ""),
        ("cpu_add", CPU_ADD, CPU_ADD_IO, ""),
        ("probe_cpu", PROBE, PROBE_IO, ""),
        ("probe_gpu", PROBE, PROBE_IO, force_cpu("no")),
    ):
        repo.add(name, config(name, io, mode, extra), {"1/model.py": source})
