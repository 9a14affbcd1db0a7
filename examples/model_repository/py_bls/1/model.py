"""py_bls: business logic scripting with async_exec (OUTPUT0 = 2 * (INPUT0 + INPUT1))."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub",
                    requested_output_names=["OUTPUT0"],
                    inputs=request.inputs(),
                ).async_exec()
                for _ in range(2)
            ]
            answers = await asyncio.gather(*calls)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            total = sum(
                pb_utils.get_output_tensor_by_name(a, "OUTPUT0").as_numpy() for a in answers
            )
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
