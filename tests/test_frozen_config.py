"""A prepared config is frozen (issue 38): once :mod:`despina.repository.config_pipeline` hands it
over, nothing writes to it. One server loads a model of each kind (Python in a process
and in-process, Python auto-completed, ONNX auto-completed with dynamic batching, an
ensemble, a sequence model with the Oldest strategy); each model's config must serialize
the same after the load and after inferences as when it was frozen (an ensemble's
``model_transaction_policy`` aside: its scheduler states it at start), and be the one
object its versions and scheduler read."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.repository.config_pipeline import PreparedConfig
from despina.testing import RepositoryBuilder, RunningServer
from despina.testing.client import ModelClient

pytest.importorskip("despina_backend_onnx")
pytest.importorskip("despina_backend_python")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples/model_repository"
IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }'
ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
AUTO_ECHO = (
    ECHO
    + """
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
        config.set_max_batch_size(4)
        config.set_dynamic_batching()
        return config
"""
)
SEQUENCE = f"""
backend: "python"
max_batch_size: 2
sequence_batching {{
  oldest {{ max_candidate_sequences: 2 }}
  control_input [ {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START
                                              fp32_false_true: [ 0, 1 ] }} ] }} ]
}}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{IN_PROCESS}
"""
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [ {
  model_name: "onnx_add_sub" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" }
} ] }
"""


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    root = model_repository.root
    for example in ("add_sub", "onnx_add_sub"):
        shutil.copytree(EXAMPLES / example, root / example)
    model_repository.add("py_auto", 'backend: "python"\n' + IN_PROCESS, {"1/model.py": AUTO_ECHO})
    model_repository.add("py_sequence", SEQUENCE, {"1/model.py": ECHO})
    model_repository.add("ensemble", ENSEMBLE, {"1/.keep": ""})
    return despina_server(root, ["--http-address=127.0.0.1", "--allow-metrics=false"])


def test_no_config_changes_after_it_is_prepared(
    running: RunningServer, served: Callable[[RunningServer], ModelClient]
) -> None:
    entries = running.server.models.entries
    assert sorted(entries) == ["add_sub", "ensemble", "onnx_add_sub", "py_auto", "py_sequence"]
    prepared = {name: e.prepared for name, e in entries.items() if e.prepared is not None}
    assert len(prepared) == len(entries)
    for name, entry in entries.items():
        for version in entry.versions.values():
            assert version.config is prepared[name].config, name
            assert version.scheduler is not None
            assert version.scheduler.model.config is prepared[name].config, name
    assert changed(prepared) == []

    client = served(running)
    four, sixteen = np.ones(4, np.float32), np.ones((1, 16), np.float32)
    client.infer("add_sub", {"INPUT0": four, "INPUT1": four})
    client.infer_many("py_auto", [{"IN": four[None]}] * 4)
    client.infer_many("onnx_add_sub", [{"INPUT0": sixteen, "INPUT1": sixteen}] * 4)
    assert client.infer("ensemble", {"A": sixteen, "B": sixteen})["SUM"].tolist() == [[2.0] * 16]
    sequence_input = httpclient.InferInput("IN", [1, 4], "FP32")
    sequence_input.set_data_from_numpy(four[None])
    for start in (True, False):
        client.client.infer("py_sequence", [sequence_input], sequence_id=7, sequence_start=start)
    assert changed(prepared) == []
    sequence = prepared["py_sequence"].config.sequence_batching
    assert sequence.max_sequence_idle_microseconds == 1_000_000  # filled by the pipeline
    assert list(sequence.oldest.preferred_batch_size) == [2]


def changed(prepared: dict[str, PreparedConfig]) -> list[str]:
    """The models whose config was written to since it was frozen."""
    return [name for name, one in prepared.items() if one.changed()]
