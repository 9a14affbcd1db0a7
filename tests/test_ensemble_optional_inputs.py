"""Ensembles with optional inputs left out, over HTTP and gRPC on a real server, as
Triton's ``qa/L0_optional_input``: an optional ensemble input the request leaves out,
and a step output a response leaves out, count as there but absent; the steps reading
them run without them, and the answer leaves them out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ens_backend
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

#: OUTPUT<n> = INPUT<n> for each input sent; both inputs optional.
PASS = """
backend: "enstoy"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] optional: true },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
"""


def _step(inputs: tuple[str, str], outputs: tuple[str, str]) -> str:
    maps = [f'input_map {{ key: "INPUT{n}" value: "{t}" }}' for n, t in enumerate(inputs)]
    maps += [f'output_map {{ key: "OUTPUT{n}" value: "{t}" }}' for n, t in enumerate(outputs)]
    return f'{{ model_name: "pass" model_version: -1 {" ".join(maps)} }}'


def _ensemble(*steps: str) -> str:
    tensors = '{{ name: "{}" data_type: TYPE_FP32 dims: [ -1 ] {}}}'
    inputs = ", ".join(tensors.format(f"X{n}", "optional: true ") for n in range(2))
    outputs = ", ".join(tensors.format(f"Y{n}", "") for n in range(2))
    return (
        f'platform: "ensemble"\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


#: One step: X<n> -> pass -> Y<n>.
WRAPPER = _ensemble(_step(("X0", "X1"), ("Y0", "Y1")))
#: Two steps connected by t0, t1: the first leaves out the output of a left-out input.
CONNECTED = _ensemble(_step(("X0", "X1"), ("t0", "t1")), _step(("t0", "t1"), ("Y0", "Y1")))


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    model_repository.add("pass", PASS, {"1/model.ens": '{"op": "pass"}'})
    model_repository.add("wrapper", WRAPPER)
    model_repository.add("connected", CONNECTED)
    return despina_server(model_repository.root, plugins=[ens_backend])


def _infer(client: Any, module: Any, model: str, sent: dict[str, float], wanted: list[str]) -> Any:
    inputs = []
    for name, value in sent.items():
        tensor = module.InferInput(name, [1], "FP32")
        tensor.set_data_from_numpy(np.array([value], np.float32))
        inputs.append(tensor)
    outputs = [module.InferRequestedOutput(name) for name in wanted]
    return client.infer(model, inputs, outputs=outputs or None)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["wrapper", "connected"])
@pytest.mark.parametrize(
    ("sent", "wanted"),
    [({"X0": 1.0}, []), ({"X1": 2.0}, ["Y1"]), ({"X0": 1.0}, ["Y0"]), ({"X0": 1.0, "X1": 2.0}, [])],
)
def test_steps_run_without_left_out_optional_tensors(
    running: RunningServer, protocol: str, model: str, sent: dict[str, float], wanted: list[str]
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    url = running.http_url if protocol == "http" else running.grpc_url
    as_json = {"as_json": True} if protocol == "grpc" else {}
    expected = {name.replace("X", "Y"): value for name, value in sent.items()}
    if wanted:
        expected = {name: value for name, value in expected.items() if name in wanted}
    with module.InferenceServerClient(url) as client:
        result = _infer(client, module, model, sent, wanted)
        answered = {output["name"] for output in result.get_response(**as_json)["outputs"]}
        assert answered == set(expected)
        for name, value in expected.items():
            assert result.as_numpy(name).tolist() == [value]
        stats = client.get_inference_statistics(model, **as_json)
        assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) == 1
