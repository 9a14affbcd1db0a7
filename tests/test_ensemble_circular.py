"""Ensembles that depend on themselves fail to load with Triton's text, over HTTP on a
real server, as Triton's ``qa/L0_model_config`` expects (``circular_dependency``,
``self_circular_dependency``); the server starts, the other models serve."""

from __future__ import annotations

from collections.abc import Callable

import ens_backend
import pytest
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")

UNARY = """
backend: "enstoy"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def _chain(*models: str) -> str:
    """An ensemble of ``models`` in a row (X -> ... -> Y)."""
    tensors = ["X", *(f"t{n}" for n in range(1, len(models))), "Y"]
    steps = ", ".join(
        f'{{ model_name: "{model}" model_version: -1 input_map {{ key: "IN" value: '
        f'"{tensors[n]}" }} output_map {{ key: "OUT" value: "{tensors[n + 1]}" }} }}'
        for n, model in enumerate(models)
    )
    return f"""
platform: "ensemble"
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {steps} ] }}
"""


def test_circular_ensembles_fail_with_tritons_text(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    model_repository.add("double", UNARY, {"1/model.ens": '{"op": "double"}'})
    model_repository.add("loop_a", _chain("double", "loop_b"))
    model_repository.add("loop_b", _chain("loop_a"))
    model_repository.add("itself", _chain("double", "itself"))
    model_repository.add("fine", _chain("double", "double"))
    running = despina_server(
        model_repository.root, args=["--exit-on-error=false"], plugins=[ens_backend]
    )
    with httpclient.InferenceServerClient(running.http_url) as client:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert client.is_model_ready("fine")
    cycle = "Invalid argument: circular dependency between ensembles: "
    assert index["loop_a"]["reason"] == cycle + "loop_a -> ... -> loop_b -> loop_a"
    assert index["loop_b"]["reason"] == cycle + "loop_b -> ... -> loop_a -> loop_b"
    assert index["itself"]["reason"] == cycle + "itself -> ... -> itself -> itself"
    assert {index[name]["state"] for name in ("loop_a", "loop_b", "itself")} == {"UNAVAILABLE"}
