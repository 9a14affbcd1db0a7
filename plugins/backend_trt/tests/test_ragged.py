"""Ragged batching with the stand-in runtime (TEST-ONLY, see conftest.py): Triton's
ragged-batch example as an engine (standin_tensorrt.ragged_plan), served over HTTP and
gRPC by concurrent clients so that the dynamic batcher joins requests of different
lengths into one flat input; every batch-input kind the core generates, a scattered
batch output, the config rules against the engine, and how shape tensors compose with
ragged rules in one batch."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina import ConfigError, InferenceRequest, ModelConfig, mc
from despina.testing import RepositoryBuilder, RunningServer
from despina_backend_trt import config_rules, ragged_rules
from despina_backend_trt.batching import EngineBatch
from despina_backend_trt.engine_info import EngineInfo, EngineTensor
from despina_trt_standin import RAGGED_BATCH_INPUTS, SimulatedGpu, ragged_plan
from google.protobuf import text_format
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]

TYPES = {"FLOAT": "TYPE_FP32", "INT32": "TYPE_INT32"}
BATCH_INPUTS = ",\n".join(
    f'  {{ kind: {kind} target_name: "{name}" data_type: {TYPES[dtype]} source_input: "INPUT" }}'
    for name, (kind, dtype, _, _) in RAGGED_BATCH_INPUTS.items()
)
CONFIG = f"""backend: "tensorrt"
max_batch_size: 16
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
batch_input [
{BATCH_INPUTS}
]
output [
  {{ name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "SUM_ACC" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "MEAN" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "PADDED" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "LENGTH" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "LENGTH_FLAT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "DOUBLE" data_type: TYPE_FP32 dims: [ -1 ] }}
]
batch_output [
  {{ target_name: "DOUBLE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" }}
]
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
"""

CLIENTS = 8
ROUNDS = 4


def start(repo: RepositoryBuilder, server: Start) -> RunningServer:
    return server(repo.root, ["--exit-on-error=false"], plugins=[SimulatedGpu()])


def infer(module: Any, client: Any, data: np.ndarray) -> Any:
    item = module.InferInput("INPUT", [1, len(data)], "FP32")
    item.set_data_from_numpy(data.reshape(1, -1))
    return client.infer("ragged", [item])


def check(result: Any, data: np.ndarray) -> int:
    """Assert one request's outputs; return the width PADDED had (the batch's longest)."""
    length, total = len(data), float(data.sum())
    assert result.as_numpy("SUM").tolist() == [[total]]
    assert result.as_numpy("SUM_ACC").tolist() == [[total]]
    np.testing.assert_allclose(result.as_numpy("MEAN"), [[total / length]], rtol=1e-6)
    assert result.as_numpy("LENGTH").tolist() == [[length]]
    assert result.as_numpy("LENGTH_FLAT").tolist() == [[length]]
    np.testing.assert_array_equal(result.as_numpy("DOUBLE"), data.reshape(1, -1) * 2)
    padded = result.as_numpy("PADDED")
    assert padded.shape[0] == 1 and padded.shape[1] >= length
    np.testing.assert_array_equal(padded[0, :length], data)
    assert not padded[0, length:].any()
    return int(padded.shape[1])


def test_concurrent_requests_of_different_lengths_form_ragged_batches(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Client ``c`` sends lengths c + 1 and c + 9, so any batch of several requests joins
    different lengths; each request gets its own answers, computed from the batch inputs."""
    model_repository.add("ragged", CONFIG, {"1/model.plan": ragged_plan()})
    running = start(model_repository, despina_server)

    def client(index: int) -> list[tuple[int, int]]:
        """(length, PADDED's width) of each request client ``index`` sends."""
        module: Any = httpclient if index % 2 else grpcclient
        connection = module.InferenceServerClient(
            running.http_url if index % 2 else running.grpc_url
        )
        answered = []
        for round_ in range(ROUNDS):
            length = index + 1 + 8 * (round_ % 2)
            data = np.arange(length, dtype=np.float32) + 100 * index + round_
            answered.append((length, check(infer(module, connection, data), data)))
        connection.close()
        return answered

    with ThreadPoolExecutor(CLIENTS) as pool:
        widths = [pair for answered in pool.map(client, range(CLIENTS)) for pair in answered]
    assert len(widths) == CLIENTS * ROUNDS
    http = httpclient.InferenceServerClient(running.http_url)
    stats = http.get_inference_statistics("ragged")["model_stats"][0]
    assert stats["inference_count"] == CLIENTS * ROUNDS
    assert stats["execution_count"] < stats["inference_count"]  # batches of several ran
    assert any(width > length for length, width in widths)  # ... of different lengths


def test_a_ragged_batch_beyond_the_profile_is_a_client_error(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("ragged", CONFIG, {"1/model.plan": ragged_plan()})
    running = start(model_repository, despina_server)
    too_long = np.ones(300, np.float32)  # INPUT's profile holds 1..256 elements
    http = httpclient.InferenceServerClient(running.http_url)
    with pytest.raises(InferenceServerException) as refused:
        infer(httpclient, http, too_long)
    assert str(refused.value.status()) == "400"
    assert "input 'INPUT' shape [300] is outside optimization profile 0[0]" in str(refused.value)
    with grpcclient.InferenceServerClient(running.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as failed:
            infer(grpcclient, grpc, too_long)
        assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"
        data = np.arange(5, dtype=np.float32)
        check(infer(grpcclient, grpc, data), data)


@pytest.mark.parametrize(
    ("change", "plan", "reason"),
    [
        (
            None,
            {"input_shape": (-1, -1)},
            "model 'ragged', tensor 'INPUT': for the model to support ragged input, the engine "
            "shape is: [-1,-1] while the model config shape is: [-1]",
        ),
        (
            ('target_name: "COUNT" data_type: TYPE_FP32', 'target_name: "COUNT" data_type: TYPE_INT32'),
            {},
            "unexpected datatype TYPE_FP32 for inference input 'COUNT', expecting TYPE_INT32 for "
            "ragged",
        ),
        (
            ("kind: BATCH_ITEM_SHAPE target_name", "kind: BATCH_ITEM_SHAPE_FLATTEN target_name"),
            {},
            "batch input 'SHAPE' (BATCH_ITEM_SHAPE_FLATTEN) for model 'ragged': model "
            "configuration specifies dims [-1] (batch dimension included) that do not match the "
            "engine's dims [-1,1]",
        ),
        (
            ('target_name: "DOUBLE" kind', 'target_name: [ "DOUBLE", "TWICE" ] kind'),
            {},
            "unknown target output name 'TWICE' for ragged",
        ),
        (
            ('{ kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_FP32 '
             'source_input: "INPUT" },\n', ""),
            {},
            "expected configuration for input 'COUNT' for ragged",
        ),
    ],
)  # fmt: skip
def test_a_config_the_engine_cannot_serve_fails_the_load(
    trt_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Start,
    change: tuple[str, str] | None,
    plan: dict[str, Any],
    reason: str,
) -> None:
    config = CONFIG if change is None else CONFIG.replace(*change)
    assert change is None or config != CONFIG
    model_repository.add("ragged", config, {"1/model.plan": ragged_plan(**plan)})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    [entry] = client.get_model_repository_index()
    assert entry["state"] == "UNAVAILABLE"
    assert reason in entry["reason"]


# -- the rules as functions ------------------------------------------------------------


def parse(text: str) -> ModelConfig:
    return text_format.Parse('name: "m"\n' + text, mc.ModelConfig())


def ragged_engine(item_shape: tuple[int, ...] = (-1, 1)) -> EngineInfo:
    """INPUT [-1] (ragged) with the batch inputs L (element counts) and S (item shapes)."""
    tensors = (
        EngineTensor("INPUT", True, "TYPE_FP32", (-1,)),
        EngineTensor("L", True, "TYPE_INT32", (-1,)),
        EngineTensor("S", True, "TYPE_INT32", item_shape),
        EngineTensor("OUT", False, "TYPE_FP32", (-1,)),
    )
    bounds = {"INPUT": ((1,), (8,), (64,)), "L": ((1,), (4,), (8,)), "S": ((1, 1), (4, 1), (8, 1))}
    return EngineInfo(tensors, (bounds,))


RAGGED = """input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ELEMENT_COUNT target_name: "L" data_type: TYPE_INT32 source_input: "INPUT" },
  { kind: BATCH_ITEM_SHAPE target_name: "S" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]
"""


def test_a_ragged_input_hints_batching_and_the_batch_inputs_bound_the_max_batch() -> None:
    config = parse(RAGGED)
    config_rules.auto_complete(config, ragged_engine(), "m")
    assert config.max_batch_size == 8  # the smallest maximum first dimension: L's and S's
    assert config.HasField("dynamic_batching")
    config_rules.validate(config, ragged_engine(), "m")
    ragged_rules.validate(config, ragged_engine(), "m")


def test_batch_input_dims_as_triton_gives_them() -> None:
    source = parse(RAGGED).input[0]
    kind = mc.BatchInput.Kind
    assert ragged_rules.batch_input_dims(kind.BATCH_ITEM_SHAPE, source, batched=True) == [1]
    assert ragged_rules.batch_input_dims(kind.BATCH_ELEMENT_COUNT, source, batched=True) == []
    unbatched = {
        kind.BATCH_ELEMENT_COUNT: [1],
        kind.BATCH_ACCUMULATED_ELEMENT_COUNT: [1],
        kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: [2],
        kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: [-1],
        kind.BATCH_ITEM_SHAPE: [1, 1],
        kind.BATCH_ITEM_SHAPE_FLATTEN: [1],
    }
    for entry, dims in unbatched.items():
        assert ragged_rules.batch_input_dims(entry, source, batched=False) == dims


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("TYPE_INT32 source_input: \"INPUT\" },", "TYPE_INT64 source_input: \"INPUT\" },"),
         "batch input data type must be TYPE_INT32 or TYPE_FP32 for m"),
        (('source_input: "INPUT" },', 'source_input: "OTHER" },'),
         "unknown source input name 'OTHER' for m"),
        (('target_name: "L" data_type: TYPE_INT32 source_input: "INPUT"',
          'target_name: "L" data_type: TYPE_INT32 source_input: [ "INPUT", "INPUT" ]'),
         "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 2 for m"),
        (('target_name: "S"', 'target_name: "INPUT"'),
         "input 'INPUT'  has already appeared as an input or output for m"),
        (('target_name: "S"', 'target_name: "OUT"'),
         "input 'OUT' is expected to be an input in model for m"),
    ],
)  # fmt: skip
def test_batch_io_config_errors(change: tuple[str, str], reason: str) -> None:
    text = RAGGED.replace(*change, 1)
    assert text != RAGGED
    config = parse("max_batch_size: 8\n" + text)
    with pytest.raises(ConfigError) as refused:
        ragged_rules.validate(config, ragged_engine(), "m")
    assert str(refused.value) == reason


def test_item_shape_rank_must_match_the_engine() -> None:
    config = parse("max_batch_size: 8\n" + RAGGED)
    with pytest.raises(ConfigError, match=r"specifies dims \[-1,1\] .* engine's dims \[-1,2\]"):
        ragged_rules.validate(config, ragged_engine(item_shape=(-1, 2)), "m")


def test_shape_tensors_and_ragged_inputs_join_in_one_batch() -> None:
    """A batch of a model with a shape tensor and a ragged input: the ragged input flat,
    the batch inputs generated, the shape tensor led by the batch's total size."""
    config = parse(
        "max_batch_size: 8\n"
        + RAGGED.replace(
            "allow_ragged_batch: true }",
            'allow_ragged_batch: true },\n  { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] '
            "is_shape_tensor: true }",
        )
    )
    requests = [
        InferenceRequest(
            "m",
            {
                "INPUT": np.arange(n, dtype=np.float32).reshape(1, n),
                "SIZE": np.array([3], np.int32),
            },
        )
        for n in (2, 5)
    ]
    batch = EngineBatch.for_engine(config, ["SIZE"])
    assert batch is not None
    joined = batch.join(requests)
    assert joined["INPUT"].tolist() == [0, 1, 0, 1, 2, 3, 4]
    assert joined["L"].tolist() == [2, 5] and joined["S"].tolist() == [[2], [5]]
    assert joined["SIZE"].tolist() == [2, 3] and joined["SIZE"].dtype == np.int32
    parts = batch.split({"OUT": joined["INPUT"] * 2}, requests)
    assert [p["OUT"].tolist() for p in parts] == [[[0, 2]], [[0, 2, 4, 6, 8]]]
    assert EngineBatch.for_engine(parse("max_batch_size: 8"), []) is None
