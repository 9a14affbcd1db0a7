"""py_repeat: streams each element of IN back as its own response (decoupled)."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("py_repeat needs a decoupled transaction policy")

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            threading.Thread(target=self._respond, args=(sender, values), daemon=True).start()
        return None

    @staticmethod
    def _respond(sender, values):
        for index, value in enumerate(values):
            if sender.is_cancelled():
                break
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUT", np.array([value], np.int32)),
                        pb_utils.Tensor("IDX", np.array([index], np.uint32)),
                    ]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
