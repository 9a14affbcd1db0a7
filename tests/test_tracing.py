"""Request tracing end to end: real servers, tritonclient over HTTP and gRPC, trace mode
``triton`` (the trace files) and mode ``opentelemetry`` (spans at a real OTLP/HTTP
receiver that decodes them with ``opentelemetry-proto``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import ADD_SUB_MODEL_PY, RepositoryBuilder, RunningServer
from otlp_receiver import Receiver, attributes

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_backend_python")

ADD_SUB_IO = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }
"""


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "TWICE" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "diff" }
    output_map { key: "OUTPUT0" value: "TWICE" } } ] }
"""

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CORE_ORDER = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
]
LOCAL = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--allow-metrics=false"]


def every_request_traced_to(trace_file: Path) -> list[str]:
    """Server flags: trace mode triton, level TIMESTAMPS, every request, to ``trace_file``."""
    return [
        *LOCAL,
        f"--trace-config=triton,file={trace_file}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    ]


@pytest.fixture
def repo(model_repository: RepositoryBuilder) -> RepositoryBuilder:
    model_repository.add("add_sub", ADD_SUB_IO, {"1/model.py": ADD_SUB_MODEL_PY})
    model_repository.add("twice", ENSEMBLE, {"1/.keep": ""})
    return model_repository


def infer(protocol: str, running: RunningServer, model: str, **kwargs: Any) -> None:
    """One add_sub-shaped request through tritonclient."""
    if protocol == "http":
        import tritonclient.http as client_module

        client: Any = client_module.InferenceServerClient(running.http_url)
    else:
        import tritonclient.grpc as client_module

        client = client_module.InferenceServerClient(running.grpc_url)
    data = np.arange(4, dtype=np.float32)
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = client_module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    try:
        client.infer(model, tensors, **kwargs)
    finally:
        client.close()


def by_trace(entries: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each trace of a trace file: its model entry and timestamp names in file order."""
    traces: dict[int, dict[str, Any]] = {}
    for entry in entries:
        trace = traces.setdefault(entry["id"], {"model": None, "names": [], "tensors": []})
        if "model_name" in entry:
            trace["model"] = entry
        elif "timestamps" in entry:
            trace["names"] += [t["name"] for t in entry["timestamps"]]
            assert all(isinstance(t["ns"], int) for t in entry["timestamps"])
        else:
            trace["tensors"].append(entry)
    return traces


def core_names(names: list[str]) -> list[str]:
    return [n for n in names if n in CORE_ORDER]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_trace_file(
    protocol: str,
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    tmp_path: Path,
) -> None:
    """Level TIMESTAMPS at rate 1: every request, Triton's names; an ensemble's steps
    carry its id as parent_id; the file is written at shutdown (log-frequency 0)."""
    trace_file = tmp_path / "trace.json"
    running = despina_server(
        repo.root,
        args=every_request_traced_to(trace_file),
    )
    infer(protocol, running, "add_sub", request_id="r1")
    infer(protocol, running, "twice")
    running.stop()
    traces = by_trace(json.loads(trace_file.read_text()))
    assert sorted(traces) == [1, 2, 3, 4]
    first = traces[1]
    assert first["model"] == {
        "id": 1,
        "model_name": "add_sub",
        "model_version": 1,
        "request_id": "r1",
    }
    assert core_names(first["names"]) == CORE_ORDER
    prefix = "HTTP" if protocol == "http" else "GRPC"
    read = "RECV" if protocol == "http" else "WAITREAD"
    assert [n for n in first["names"] if n.startswith(prefix)] == [
        f"{prefix}_{read}_START",
        f"{prefix}_{read}_END",
        f"{prefix}_SEND_START",
        f"{prefix}_SEND_END",
    ]
    assert "INFER_RESPONSE_COMPLETE" in first["names"]
    ensemble = next(t for t in traces.values() if t["model"]["model_name"] == "twice")
    assert "parent_id" not in ensemble["model"] and "request_id" not in ensemble["model"]
    assert core_names(ensemble["names"]) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    steps = [t for t in traces.values() if t["model"].get("parent_id")]
    assert len(steps) == 2
    for step in steps:
        assert step["model"]["parent_id"] == ensemble["model"]["id"]
        assert step["model"]["model_name"] == "add_sub"
        assert core_names(step["names"]) == CORE_ORDER
        assert not [n for n in step["names"] if n.startswith(prefix)]


def test_tensors_rate_count_and_log_frequency(
    repo: RepositoryBuilder, despina_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Level TENSORS writes the inputs and outputs as Triton; rate 2 traces every second
    request; count stops after that many; log-frequency 1 writes <file>.0, <file>.1, ..."""
    folder = tmp_path / "traces"
    folder.mkdir()
    trace_file = folder / "trace.json"
    running = despina_server(
        repo.root,
        args=[
            *LOCAL,
            f"--trace-file={trace_file}",  # tritonserver's deprecated form
            "--trace-config=level=TENSORS",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=2",
            "--trace-config=count=2",
            "--trace-config=triton,log-frequency=1",
        ],
    )
    for _ in range(6):
        infer("http", running, "add_sub")
    deadline = time.monotonic() + 10
    while not (folder / "trace.json.1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    running.stop()
    written = sorted(p.name for p in folder.iterdir())
    assert written == ["trace.json.0", "trace.json.1"]
    files = [json.loads((folder / name).read_text()) for name in written]
    for entries in files:
        (trace,) = by_trace(entries).values()
        inputs = [t for t in trace["tensors"] if t["activity"] == "TENSOR_QUEUE_INPUT"]
        outputs = [t for t in trace["tensors"] if t["activity"] == "TENSOR_BACKEND_OUTPUT"]
        assert inputs[0]["tensor"] == {
            "name": "INPUT0",
            "data": "0,1,2,3",
            "shape": "4",
            "dtype": "FP32",
        }
        assert {t["tensor"]["name"]: t["tensor"]["data"] for t in outputs} == {
            "OUTPUT0": "0,2,4,6",
            "OUTPUT1": "0,0,0,0",
        }
        assert core_names(trace["names"]) == CORE_ORDER


def test_settings_at_run_time_on_both_protocols(
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    grpc_client: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Tracing starts OFF; a model's level set over HTTP traces it (not the others); the
    global rate set over gRPC applies; bad values are refused with 400/INVALID_ARGUMENT."""
    from tritonclient.utils import InferenceServerException

    trace_file = tmp_path / "trace.json"
    running = despina_server(repo.root, args=[*LOCAL, f"--trace-config=triton,file={trace_file}"])
    http, grpc = http_client(running), grpc_client(running)
    assert http.get_trace_settings()["trace_level"] == ["OFF"]
    infer("http", running, "add_sub")
    answer = http.update_trace_settings(
        "add_sub", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    )
    assert answer["trace_level"] == ["TIMESTAMPS"] and answer["trace_rate"] == "1"
    assert http.get_trace_settings()["trace_level"] == ["OFF"]
    infer("http", running, "add_sub")
    infer("grpc", running, "add_sub")
    infer("http", running, "twice")  # the ensemble itself is not traced: its own setting
    grpc.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_count": "1"})
    infer("http", running, "twice")  # global rate is 1000: not sampled
    with pytest.raises(InferenceServerException, match="trace level"):
        http.update_trace_settings("add_sub", {"trace_level": ["LOUD"]})
    with pytest.raises(InferenceServerException, match="integer"):
        grpc.update_trace_settings("add_sub", {"trace_rate": "often"})
    running.stop()
    traces = by_trace(json.loads(trace_file.read_text()))
    assert [t["model"]["model_name"] for t in traces.values()] == ["add_sub", "add_sub"]
    assert {n.split("_")[0] for t in traces.values() for n in t["names"]} >= {"HTTP", "GRPC"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    pytest.importorskip("opentelemetry.sdk")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    pytest.importorskip("opentelemetry.proto")
    running = Receiver()
    yield running
    running.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_opentelemetry_spans(
    protocol: str,
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    receiver: Receiver,
) -> None:
    """Rate 0 traces only requests carrying a traceparent (Triton's rule); the spans are
    Triton's (InferRequest > model > compute; an ensemble step under the ensemble's model
    span), in the client's trace, with the resource attributes of the flags."""
    running = despina_server(
        repo.root,
        args=[
            *LOCAL,
            "--trace-config=mode=opentelemetry",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=0",
            f"--trace-config=opentelemetry,url={receiver.url}",
            "--trace-config=opentelemetry,resource=service.name=despina-test",
            "--trace-config=opentelemetry,resource=deployment=ci",
            "--trace-config=opentelemetry,bsp_schedule_delay=50",
        ],
    )
    infer(protocol, running, "add_sub")  # no traceparent: not traced at rate 0
    infer(protocol, running, "twice", headers={"traceparent": TRACEPARENT}, request_id="e1")
    running.stop()  # flushes the batch span processor
    assert set(receiver.paths) == {"/v1/traces"}
    resource = receiver.spans[0][0]
    assert resource["service.name"] == "despina-test" and resource["deployment"] == "ci"
    spans = {span.span_id: span for _, span in receiver.spans}
    names = sorted(span.name for span in spans.values())
    assert names == ["InferRequest", "add_sub", "add_sub", "compute", "compute", "twice"]
    trace_id = bytes.fromhex(TRACEPARENT.split("-")[1])
    assert {span.trace_id for span in spans.values()} == {trace_id}
    root = next(s for s in spans.values() if s.name == "InferRequest")
    assert root.parent_span_id == bytes.fromhex(TRACEPARENT.split("-")[2])
    prefix = "HTTP" if protocol == "http" else "GRPC"
    root_events = [e.name for e in root.events]
    assert root_events[0].startswith(prefix) and f"{prefix}_SEND_END" in root_events
    ensemble = next(s for s in spans.values() if s.name == "twice")
    assert ensemble.parent_span_id == root.span_id
    assert attributes(ensemble) == {
        "triton.model_name": "twice",
        "triton.model_version": 1,
        "triton.trace_id": attributes(ensemble)["triton.trace_id"],
        "triton.trace_parent_id": 0,
        "triton.request_id": "e1",
    }
    for step in (s for s in spans.values() if s.name == "add_sub"):
        assert step.parent_span_id == ensemble.span_id
        assert attributes(step)["triton.trace_parent_id"] == attributes(ensemble)["triton.trace_id"]
        assert [e.name for e in step.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
        (compute,) = (s for s in spans.values() if s.parent_span_id == step.span_id)
        assert compute.name == "compute"
        assert [e.name for e in compute.events] == CORE_ORDER[2:6]
        assert step.start_time_unix_nano <= compute.start_time_unix_nano
        assert compute.end_time_unix_nano <= step.end_time_unix_nano
    assert all(span.kind == span.SPAN_KIND_SERVER for span in spans.values())


@pytest.mark.parametrize(
    ("form", "path"),
    [("{host}:{port}/v1/traces", "/v1/traces"), ("{host}:{port}", "/")],
    ids=["no-scheme", "no-path"],
)
def test_opentelemetry_url_without_scheme_or_path(
    form: str,
    path: str,
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    receiver: Receiver,
) -> None:
    """Triton's qa/L0_trace gives the URL without a scheme (http://); without a path the
    spans go to "/", as from Triton's exporter."""
    host, port = receiver.server.server_address[:2]
    running = despina_server(
        repo.root,
        args=[
            *LOCAL,
            "--trace-config=mode=opentelemetry",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
            f"--trace-config=opentelemetry,url={form.format(host=host, port=port)}",
        ],
    )
    infer("http", running, "add_sub")
    running.stop()  # flushes the batch span processor
    assert set(receiver.paths) == {path}
    assert sorted(span.name for _, span in receiver.spans) == ["InferRequest", "add_sub", "compute"]


@pytest.mark.parametrize("level", ["MIN", "max", "On", "true"])
def test_triton_level_names_of_the_command_line(
    level: str,
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    tmp_path: Path,
) -> None:
    """tritonserver's ``--trace-level`` takes MIN, MAX, ON and TRUE (any case) for
    TIMESTAMPS, as Triton's qa/L0_batcher gives it (``--trace-level=MIN``)."""
    trace_file = tmp_path / "trace.json"
    flags = [f"--trace-file={trace_file}", f"--trace-level={level}", "--trace-rate=1"]
    running = despina_server(repo.root, args=[*LOCAL, *flags])
    infer("grpc", running, "add_sub")
    running.stop()
    traces = by_trace(json.loads(trace_file.read_text()))
    assert core_names(traces[1]["names"]) == CORE_ORDER
    assert not traces[1]["tensors"]


def test_bad_trace_flags_stop_the_start(
    repo: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match="unknown trace setting 'speed'"):
        despina_server(repo.root, args=[*LOCAL, "--trace-config=speed=3"])
    with pytest.raises(StartupError, match="invalid value for trace level option: all"):
        despina_server(repo.root, args=[*LOCAL, "--trace-config=level=ALL"])
    with pytest.raises(StartupError, match="scheme 'grpc' is not supported"):
        despina_server(
            repo.root, args=[*LOCAL, "--trace-config=opentelemetry,url=grpc://localhost:4317"]
        )


BLS_CALLER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="add_sub",
                inputs=[pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")],
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                trace=request.trace(),
            )
            answer = call.exec()
            responses.append(pb_utils.InferenceResponse(output_tensors=answer.output_tensors()))
        return responses
"""
IN_PROCESS = 'parameters { key: "DESPINA_EXECUTION_MODE" value { string_value: "in-process" } }'


@pytest.mark.parametrize("mode", ["in-process", "process"])
def test_bls_call_is_traced_as_its_callers_child(
    mode: str,
    repo: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    tmp_path: Path,
) -> None:
    """A model passing ``trace=request.trace()`` to its BLS request (either execution
    mode of the caller): the called model's trace carries the caller's id as parent_id, as
    Triton's do."""
    mode_parameter = IN_PROCESS.replace("in-process", mode)
    caller_io = ADD_SUB_IO.replace(IN_PROCESS, "") + mode_parameter
    repo.add("caller", caller_io, {"1/model.py": BLS_CALLER})
    trace_file = tmp_path / "trace.json"
    running = despina_server(
        repo.root,
        args=every_request_traced_to(trace_file),
    )
    infer("http", running, "caller")
    running.stop()
    traces = by_trace(json.loads(trace_file.read_text()))
    caller = next(t for t in traces.values() if t["model"]["model_name"] == "caller")
    called = next(t for t in traces.values() if t["model"]["model_name"] == "add_sub")
    assert "parent_id" not in caller["model"]
    assert called["model"]["parent_id"] == caller["model"]["id"]
    assert core_names(called["names"]) == CORE_ORDER
