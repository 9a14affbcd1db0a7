"""Model sources for the behaviours Triton's QA suite checks (``qa/L0_backend_python``):
served by ``test_triton_qa_behaviours.py`` and, against Triton, by
``compare/test_python_backend_rules.py`` (which loads this file by path: no imports)."""

NO_INPUTS_IO = 'output [ { name: "OUTPUT0" data_type: TYPE_FP16 dims: [ 1 ] } ]'

NO_INPUTS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.ones(1, np.float16))])
                for _ in requests]
"""

SENDER_IO = """
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: IN picks what the model does with the request's response sender.
SENDER = """
import threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

def response(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            case = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if case == 0:  # the final flag before any response
                sender.send(flags=FINAL)
            elif case == 1:  # two responses: the second raises, the client sees the first
                sender.send(response(1))
                sender.send(response(2))
            elif case == 2:  # a response from a thread, after execute returned
                def later():
                    time.sleep(0.2)
                    sender.send(response(3), flags=FINAL)
                threading.Thread(target=later).start()
            elif case == 3:  # a response sent, and one returned as well: the return fails
                sender.send(response(4), flags=FINAL)
                out.append(response(5))
                continue
            out.append(None)
        return None if all(item is None for item in out) else out
"""

DECOUPLED_RETURNS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7], np.int32))])
                for _ in requests]
"""

ASYNC_DECOUPLED_RAISES = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        raise ValueError("wait_secs cannot be negative")
"""

BF16_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_BF16 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_BF16 dims: [ 2 ] } ]
"""

BF16 = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            try:
                tensor.as_numpy()
                raise AssertionError("as_numpy() of a BF16 tensor must raise")
            except pb_utils.TritonModelException as exc:
                assert "tensor dtype is bf16 and cannot be converted to numpy" in str(exc).lower()
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor.to_dlpack())
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

MULTI_FILE = """
import numpy as np
import triton_python_backend_utils as pb_utils
from . import helper
from .helper import VALUE

class TritonPythonModel:
    def execute(self, requests):
        assert __name__.endswith(".model") and helper.VALUE == VALUE
        out = pb_utils.Tensor("OUT", np.array([VALUE], np.int32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

INIT_EXIT = """
import os, signal

class TritonPythonModel:
    def initialize(self, args):
        os.kill(os.getpid(), signal.SIGKILL)

    def execute(self, requests):
        return None
"""

GRPC_ERROR = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0:
                error = pb_utils.TritonError("negative input")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""

BLS_IN_INITIALIZE = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        request = pb_utils.InferenceRequest(
            model_name="anything", inputs=[pb_utils.Tensor("IN", np.zeros(1, np.int32))],
            requested_output_names=["OUT"])
        request.exec(decoupled=True)

    def execute(self, requests):
        return None
"""


# Request rescheduling (test_request_rescheduling.py, compare/test_python_backend_rules.py)

SUM_IO = """
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "RUNS" data_type: TYPE_INT64 dims: [ -1 ] } ]
"""

#: A default model that takes three executions per request: the first two reschedule it
#: (returning None for it), the third answers SUM = INPUT0 + INPUT1 and RUNS = [its
#: correlation ID, the flags each execution saw]. With ``RETURN_ANYWAY`` set in the
#: request's parameters it also returns a response for a rescheduled request (a mistake).
THREE_RUNS = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.flags_seen = {}

    def execute(self, requests):
        out = []
        for request in requests:
            key = str(request.correlation_id())
            seen = self.flags_seen.setdefault(key, [])
            seen.append(request.flags())
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            answer = pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", a + b),
                pb_utils.Tensor("RUNS", np.array([request.correlation_id()] + seen, np.int64)),
            ])
            if len(seen) < 3:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                out.append(answer if "RETURN_ANYWAY" in request.parameters() else None)
            else:
                del self.flags_seen[key]
                out.append(answer)
        return out
"""

COUNTDOWN_IO = """
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: A decoupled model: a request with IN = n gets n responses, one per execution, OUT
#: counting down to 0 (the last one final); every execution but the last reschedules the
#: request. IN = -1 never ends (OUT -2, -3, ... every 10 ms, until the client leaves).
COUNTDOWN = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.left = {}

    def execute(self, requests):
        for request in requests:
            key = str(request.correlation_id())
            if key not in self.left:
                self.left[key] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            self.left[key] -= 1
            left = self.left[key]
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([left], np.int32))])
            sender = request.get_response_sender()
            if left == 0:
                del self.left[key]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            sender.send(response)
            if left < 0:
                time.sleep(0.01)
        return None
"""
