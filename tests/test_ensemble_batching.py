"""Ensembles mixing models that batch and models that do not, over HTTP and gRPC on a
real server, as Triton's ``qa/L0_infer`` runs them (its ``sequence_*_nobatch_*``
ensembles put a batching ``nop`` model before a non-batching one): a step whose model
batches gets a tensor made without batching with a batch dimension of 1 in front, and a
step whose model does not batch gets a tensor of batch size 1 without it (Triton's
``ReshapeTensorDims``); the ensemble's outputs are reshaped the same way for the
ensemble's own batching."""

from __future__ import annotations

from collections.abc import Callable

import ens_backend
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")


def _pass(max_batch_size: int) -> str:
    """OUTPUT0 = INPUT0, four FP32 elements (plus the batch dimension where it batches)."""
    return (
        f'backend: "enstoy"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )


def _chain(max_batch_size: int, first: str, second: str) -> str:
    """X -> first -> t -> second -> Y."""
    step = '{{ model_name: "{}" model_version: -1 input_map {{ key: "INPUT0" value: "{}" }} '
    step += 'output_map {{ key: "OUTPUT0" value: "{}" }} }}'
    return (
        f'platform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"ensemble_scheduling {{ step [ {step.format(first, 'X', 't')}, "
        f"{step.format(second, 't', 'Y')} ] }}\n"
    )


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    model_repository.add("batched", _pass(8), {"1/model.ens": '{"op": "pass"}'})
    model_repository.add("unbatched", _pass(0), {"1/model.ens": '{"op": "pass"}'})
    model_repository.add("nobatch_chain", _chain(0, "batched", "unbatched"))
    model_repository.add("batch_chain", _chain(8, "unbatched", "batched"))
    model_repository.add("nobatch_ends_batched", _chain(0, "unbatched", "batched"))
    model_repository.add("batch_ends_unbatched", _chain(8, "batched", "unbatched"))
    return despina_server(model_repository.root, plugins=[ens_backend])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(
    ("model", "sent", "seen", "answered"),
    [
        # [4] -> batched gets [1, 4] -> unbatched gets [4] (batch size 1 stripped)
        ("nobatch_chain", [4], {"batched": [1, 4], "unbatched": [4]}, [4]),
        # [1, 4] -> unbatched gets [4] -> batched gets [1, 4]
        ("batch_chain", [1, 4], {"unbatched": [4], "batched": [1, 4]}, [1, 4]),
        # [4] -> unbatched gets [4] -> batched gets [1, 4] -> Y without the batch dimension
        ("nobatch_ends_batched", [4], {"unbatched": [4], "batched": [1, 4]}, [4]),
        # [1, 4] -> batched gets [1, 4] -> unbatched gets [4] -> Y with the batch dimension
        ("batch_ends_unbatched", [1, 4], {"batched": [1, 4], "unbatched": [4]}, [1, 4]),
    ],
)
def test_steps_get_their_models_batch_dimension(
    running: RunningServer,
    protocol: str,
    model: str,
    sent: list[int],
    seen: dict[str, list[int]],
    answered: list[int],
) -> None:
    module = httpclient if protocol == "http" else grpcclient
    url = running.http_url if protocol == "http" else running.grpc_url
    data = np.arange(4, dtype=np.float32).reshape(sent)
    tensor = module.InferInput("X", sent, "FP32")
    tensor.set_data_from_numpy(data)
    ens_backend.EnsBackend.calls.clear()
    with module.InferenceServerClient(url) as client:
        result = client.infer(model, [tensor])
    assert result.as_numpy("Y").tolist() == data.reshape(answered).tolist()
    shapes = {
        name: list(inputs["INPUT0"].shape) for name, inputs, _ in ens_backend.EnsBackend.calls
    }
    assert shapes == seen
