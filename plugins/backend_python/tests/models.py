"""Model sources and configs the tests serve, written as Triton's documentation shows."""

from __future__ import annotations

from despina.testing import RepositoryBuilder

MODE_KEY = "DESPINA_EXECUTION_MODE"


def config(name: str, body: str, mode: str = "process", extra: str = "") -> str:
    """A python-backend config with ``body`` (inputs/outputs) in ``mode``."""
    return (
        f'name: "{name}"\nbackend: "python"\n{body}\n{extra}\n'
        f'parameters {{ key: "{MODE_KEY}" value {{ string_value: "{mode}" }} }}\n'
    )


ADD_SUB_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ADD_SUB = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        config = json.loads(args["model_config"])
        self.out0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a[0] == -1:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative first element", pb_utils.TritonError.INVALID_ARG)))
                continue
            if a[0] == -2:
                raise ValueError("execute exploded")
            params = dict(json.loads(request.parameters()), request_id=request.request_id())
            params.update({k: v for k, v in self.args.items() if k != "model_config"})
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", (a + b).astype(self.out0)),
                                pb_utils.Tensor("OUTPUT1", a - b)],
                parameters={k: str(v) for k, v in params.items()}))
        return responses
"""

STRINGS_IO = """
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "LENGTHS" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

STRINGS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.char.upper(text.astype(np.bytes_)).astype(np.object_)
            lengths = np.char.str_len(text.astype(np.bytes_)).astype(np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("LENGTHS", lengths)]))
        return responses
"""

BATCHED_IO = """
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 200000 }
input [ { name: "X" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT64 dims: [ 1 ] },
         { name: "BATCH" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

BATCHED = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        count = len(requests)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x * 2),
                pb_utils.Tensor("BATCH", np.full_like(x, count))]))
        return out
"""

RAISE_INIT = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot initialize: missing weights")

    def execute(self, requests):
        return []
"""

WRONG_RETURN = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""

REPEAT_IO = """
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""

REPEAT = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, values), daemon=True).start()
        return None

    def respond(self, sender, values):
        for idx, value in enumerate(values):
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("IDX", np.array([idx], np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

BLS_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

BLS_SYNC = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(
                model_name="add_sub", requested_output_names=["OUTPUT0"],
                inputs=[request.inputs()[0], request.inputs()[1]])
            answer = bls.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            stream = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([5, 6, 7], np.int32))]).exec(decoupled=True)
            count = sum(1 for r in stream if r.output_tensors())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.get_output_tensor_by_name(answer, "OUTPUT0"),
                pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
        return responses
"""

BLS_ASYNC = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            calls = [pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0"],
                inputs=request.inputs()).async_exec() for name in ("add_sub", "add_sub", "missing")]
            first, second, missing = await asyncio.gather(*calls)
            if not missing.has_error():
                raise pb_utils.TritonModelException("BLS to a missing model did not fail")
            stream = await pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("IN", np.array([1, 2], np.int32))]).async_exec(decoupled=True)
            count = sum(1 for r in stream if r.output_tensors())
            total = first.output_tensors()[0].as_numpy() + second.output_tensors()[0].as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", total), pb_utils.Tensor("COUNT", np.array([count], np.int32))]))
        return responses
"""

METRICS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        # the families live as long as their metrics (Triton invalidates orphaned metrics)
        self.family = pb_utils.MetricFamily(name="test_requests_total", description="requests seen",
                                            kind=pb_utils.MetricFamily.COUNTER)
        self.counter = self.family.Metric(labels={"model": args["model_name"]})
        self.gauge_family = pb_utils.MetricFamily(name="test_last_value", description="last value",
                                                  kind=pb_utils.MetricFamily.GAUGE)
        self.gauge = self.gauge_family.Metric(labels={"model": args["model_name"]})
        pb_utils.Logger.log_info("metrics model initialized")

    def execute(self, requests):
        out = []
        for request in requests:
            a = request.inputs()[0].as_numpy()
            self.counter.increment(1)
            self.gauge.set(float(a[0]))
            value = self.counter.value()
            pb_utils.Logger.log_verbose("count is %d" % value)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a),
                                                   pb_utils.Tensor("OUTPUT1", np.full(4, value, np.float32))]))
        return out
"""

#: Used by compare/models.py (Despina and Triton side by side).
AUTO_COMPLETE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy() * 3)])
                for r in requests]
"""

CRASHY = """
import os
import signal
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "started")
        if os.path.exists(marker):
            time.sleep(1.5)  # a restart takes a visible while
        open(marker, "a").close()

    def execute(self, requests):
        a = requests[0].inputs()[0].as_numpy()
        if a[0] < 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if a[0] > 100:
            time.sleep(30 if a[0] >= 1000 else float(a[0]) - 100)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", r.inputs()[0].as_numpy()),
                                            pb_utils.Tensor("OUTPUT1", np.full(4, os.getpid(), np.float32))])
                for r in requests]
"""


def add(
    repo: RepositoryBuilder, name: str, source: str, io: str, mode: str = "process", extra: str = ""
) -> None:
    """Add model ``name`` with ``1/model.py`` = ``source``."""
    repo.add(name, config(name, io, mode, extra), {"1/model.py": source})


SOMETIMES_BLS_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "IN_THREAD" data_type: TYPE_BOOL dims: [ 1 ] } ]
"""

#: Echoes INPUT0, or asks add_sub for INPUT0 + INPUT1 (BLS) when INPUT0[0] > 100;
#: IN_THREAD tells whether execute ran in a worker thread (not inline on the loop).
SOMETIMES_BLS = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        in_thread = threading.current_thread() is not threading.main_thread() and \\
            threading.current_thread().name.startswith("despina-py-")
        responses = []
        for request in requests:
            a = request.inputs()[0]
            out = a
            if a.as_numpy()[0] > 100:
                answer = pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=["OUTPUT0"],
                    inputs=[a, request.inputs()[1]]).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")
            responses.append(pb_utils.InferenceResponse([
                out, pb_utils.Tensor("IN_THREAD", np.array([in_thread]))]))
        return responses
"""

#: The conformance suite's add/sub model: any batch size; when the config lists no inputs
#: (no config.pbtxt at all), auto_complete_config declares the FP32 [4] tensors.
ADD_SUB_ANY_BATCH = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if not config.as_dict().get("input"):
            for name in ("INPUT0", "INPUT1"):
                config.add_input({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
            for name in ("OUTPUT0", "OUTPUT1"):
                config.add_output({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
            config.set_max_batch_size(4)
            config.set_dynamic_batching()
        return config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""

#: Gives back input IN as output OUT, whatever its datatype (through DLPack, which BF16
#: needs as in Triton; BYTES, which DLPack cannot carry, through numpy).
IDENTITY = """
import triton_python_backend_utils as pb_utils

def same(tensor):
    try:
        return pb_utils.Tensor.from_dlpack("OUT", tensor.to_dlpack())
    except TypeError:
        return pb_utils.Tensor("OUT", tensor.as_numpy())

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([same(pb_utils.get_input_tensor_by_name(r, "IN"))])
                for r in requests]
"""

#: Doubles X; a request holding a negative value gets an error response.
PICKY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "negative values are not allowed", pb_utils.TritonError.INVALID_ARG)))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return responses
"""
