"""Ray Serve's "Serving models with Triton Server in Ray Serve" example, in its shape,
against Despina's ``tritonserver`` on a local Ray (127.0.0.1): a FastAPI ingress
deployment starts ``tritonserver.Server`` in explicit mode, loads ``stable_diffusion`` on
the first request, infers ``{"prompt": [[prompt]]}`` and reads ``generated_image`` with
``numpy.from_dlpack``. Changed from the guide: the repository is a folder the test builds
with a stand-in ``stable_diffusion`` (a Python model drawing a small image from the
prompt: no GPU, no weights), ``num_cpus`` instead of ``num_gpus``, and the image saved with
numpy rather than PIL (not installed here)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy
import pytest
from despina.testing import RepositoryBuilder, free_port

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
fastapi = pytest.importorskip("fastapi")
requests = pytest.importorskip("requests")

import tritonserver  # noqa: E402 - after the skips, as the example's module imports it

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

STAND_IN_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "prompt" data_type: TYPE_STRING dims: [ -1, -1 ] } ]
output [ { name: "generated_image" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
"""

#: The image: 8x8 RGB, every byte the prompt's length (so the test can check it).
STAND_IN_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "prompt").as_numpy()[0][0]
            image = np.full((1, 8, 8, 3), len(prompt), dtype=np.uint8)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("generated_image", image)]))
        return responses
"""

app = fastapi.FastAPI()


@serve.deployment(ray_actor_options={"num_cpus": 1})
@serve.ingress(app)
class TritonDeployment:
    def __init__(self, model_repository: list[str]) -> None:
        self._triton_server = tritonserver

        self._triton_server = tritonserver.Server(
            model_repository=model_repository,
            model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
            log_info=False,
        )
        self._triton_server.start(wait_until_ready=True)

    @app.get("/generate")
    def generate(self, prompt: str, filename: str = "generated_image.npy") -> None:
        if not self._triton_server.model("stable_diffusion").ready():
            try:
                self._triton_server.load("stable_diffusion")
                if not self._triton_server.model("stable_diffusion").ready():
                    raise Exception("Model not ready")
            except Exception as error:  # noqa: BLE001 - the example's own code
                print(f"Error can't load stable diffusion model, {error}")
                return

        for response in self._triton_server.model("stable_diffusion").infer(
            inputs={"prompt": [[prompt]]}
        ):
            generated_image = (
                numpy.from_dlpack(response.outputs["generated_image"]).squeeze().astype(numpy.uint8)
            )
            numpy.save(filename, generated_image)


@pytest.fixture(scope="module")
def serve_port() -> Iterator[int]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        address="local",  # a cluster of its own, even where another runs on the machine
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


def test_ray_serve_triton_example(serve_port: int, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    RepositoryBuilder(repository).add(
        "stable_diffusion", STAND_IN_CONFIG, {"1/model.py": STAND_IN_MODEL_PY}
    )
    serve.run(TritonDeployment.bind([str(repository)]), name="triton", route_prefix="/")
    prompt = "dogs in new york, realistic, 4k, photograph"
    image_file = tmp_path / "generated_image.npy"
    answer = requests.get(
        f"http://127.0.0.1:{serve_port}/generate",
        params={"prompt": prompt, "filename": str(image_file)},
        timeout=120,
    )
    assert answer.status_code == 200
    image = numpy.load(image_file)
    assert image.shape == (8, 8, 3) and (image == len(prompt)).all()
