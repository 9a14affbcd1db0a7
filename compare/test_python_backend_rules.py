"""The Python backend's rules from Triton's own QA suite, asked of Despina and Triton 2.51
alike: models without inputs, what a decoupled ``execute`` may return, the response
sender of default models, BF16 through DLPack, multi-file models, the log texts of a
model process that dies in ``initialize`` and of a coroutine that raises, and the
``triton_grpc_error`` stream header, request rescheduling on iterative sequences. The
models are those of the backend's own tests (``plugins/backend_python/tests/qa_models.py``)."""

from __future__ import annotations

import importlib.util
import json
import queue
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder
from tritonclient.utils import InferenceServerException

from .conftest import TRITONSERVER, Pair, Served, serving_pair

_BEHAVIOURS = Path(__file__).parents[1] / "plugins/backend_python/tests/qa_models.py"


def _behaviours() -> ModuleType:
    """The backend's behaviour tests, for their model sources (loaded by path: that
    folder is no package here)."""
    spec = importlib.util.spec_from_file_location("_qa_behaviours", _BEHAVIOURS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(name: str, io: str, mode: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\n{io}\ninstance_group [ {{ kind: KIND_CPU }} ]\n'
        f"{extra}\n"
        f'parameters {{ key: "DESPINA_EXECUTION_MODE" value {{ string_value: "{mode}" }} }}\n'
    )


def _build(repo: RepositoryBuilder, mode: str) -> None:
    b = _behaviours()
    decoupled = "model_transaction_policy { decoupled: true }"
    iterative = "sequence_batching { iterative_sequence: true }"
    for name, source, io, extra in (
        ("no_inputs", b.NO_INPUTS, b.NO_INPUTS_IO, ""),
        ("sender", b.SENDER, b.SENDER_IO, ""),
        ("returns", b.DECOUPLED_RETURNS, b.SENDER_IO, decoupled),
        ("raises", b.ASYNC_DECOUPLED_RAISES, b.SENDER_IO, decoupled),
        ("bf16", b.BF16, b.BF16_IO, ""),
        ("errs", b.GRPC_ERROR, b.SENDER_IO, ""),
        ("init_exit", b.INIT_EXIT, b.SENDER_IO, ""),
        ("three_runs", b.THREE_RUNS, b.SUM_IO, iterative),
        ("countdown", b.COUNTDOWN, b.COUNTDOWN_IO, f"{iterative}\n{decoupled}"),
    ):
        repo.add(name, _config(name, io, mode, extra), {"1/model.py": source})
    files = {"1/model.py": b.MULTI_FILE, "1/helper.py": "VALUE = 5\n"}
    repo.add("multi_file", _config("multi_file", b.SENDER_IO, mode), files)


@pytest.fixture(scope="module", params=["process", "in-process"])
def rules(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """Both servers on this file's repository; Despina's Python models in the param's
    execution mode (in-process: no ``init_exit``, which would end the server)."""
    if shutil.which(TRITONSERVER) is None:
        pytest.skip(f"no tritonserver at {TRITONSERVER} (set TRITONSERVER)")
    root = tmp_path_factory.mktemp("rules")
    repo = RepositoryBuilder(root / "repo")
    _build(repo, request.param)
    if request.param == "in-process":
        shutil.rmtree(repo.root / "init_exit")
    with serving_pair(repo.root, [], ["--log-verbose=1"]) as both:
        yield both


def _log(served: Served, rules: Pair) -> str:
    return (rules.repository.parent / f"{served.name}.log").read_text(errors="replace")


def _int_input(value: int, protocol: Any = grpcclient) -> Any:
    tensor = protocol.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], np.int32))
    return tensor


def _http_outcome(served: Served, model: str, inputs: list[Any]) -> Any:
    with httpclient.InferenceServerClient(served.http_url) as client:
        try:
            result = client.infer(model, inputs)
        except InferenceServerException as exc:
            return ("error", exc.message())
        outputs = result.get_response()["outputs"]
        return [
            (o["name"], o["datatype"], result.as_numpy(o["name"]).astype(np.float64).tolist())
            for o in outputs
        ]


def _stream(served: Served, model: str, values: list[int], **headers: str) -> list[Any]:
    """(values or error status and text) of every callback of one stream."""
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        client.start_stream(
            callback=lambda result, error: got.put((result, error)), headers=headers or None
        )
        for value in values:
            try:
                client.async_stream_infer(model, [_int_input(value)])
            except InferenceServerException:
                break  # the stream ended
            time.sleep(0.3)  # each answer before the next request: one order for both
        client.stop_stream()
    outcomes = []
    while not got.empty():
        result, error = got.get()
        if error is not None:
            outcomes.append((str(error.status()), error.message()))
        else:
            outcomes.append(result.as_numpy("OUT").tolist())
    return outcomes


def test_model_without_inputs(rules: Pair) -> None:
    answers = [_http_outcome(s, "no_inputs", []) for s in rules]
    assert answers[0] == answers[1] == [("OUTPUT0", "FP16", [1.0])]


@pytest.mark.parametrize("case", [0, 1, 2, 3])
def test_default_model_response_sender(rules: Pair, case: int) -> None:
    """On a gRPC stream, as Triton's QA asks (over HTTP, Triton 2.51 answers case 1, a
    second send that raises, with two responses in one body, which no client parses)."""
    answers = [_stream(s, "sender", [case]) for s in rules]
    assert answers[0] == rules.as_despina_writes_paths(answers[1])


def test_decoupled_execute_must_return_none(rules: Pair) -> None:
    answers = [_stream(s, "returns", [1]) for s in rules]
    assert answers[0] == rules.as_despina_writes_paths(answers[1])
    assert "must return None." in answers[0][0][1]


def test_async_decoupled_exception_in_the_log(rules: Pair) -> None:
    for served in rules:
        _stream(served, "raises", [1])
    time.sleep(1)
    for served in rules:
        assert "ValueError: wait_secs cannot be negative" in _log(served, rules), served.name


def test_bf16_through_dlpack(rules: Pair) -> None:
    data = np.array([1.5, -2.0], ml_dtypes.bfloat16)

    def outcome(served: Served) -> Any:
        tensor = httpclient.InferInput("INPUT0", [2], "BF16").set_data_from_numpy(data)
        return _http_outcome(served, "bf16", [tensor])

    answers = [outcome(s) for s in rules]
    assert answers[0] == answers[1] == [("OUTPUT0", "BF16", [1.5, -2.0])]


def test_multi_file_model(rules: Pair) -> None:
    answers = [_http_outcome(s, "multi_file", [_int_input(0, httpclient)]) for s in rules]
    assert answers[0] == answers[1] == [("OUT", "INT32", [5])]


@pytest.mark.parametrize("headers", [{}, {"triton_grpc_error": "true"}])
def test_stream_errors(rules: Pair, headers: dict[str, str]) -> None:
    answers = [_stream(s, "errs", [1, -1, 2], **headers) for s in rules]
    assert answers[0] == rules.as_despina_writes_paths(answers[1])


def test_model_process_dying_in_initialize(rules: Pair) -> None:
    reasons = []
    for served in rules:
        index = urllib.request.Request(f"http://{served.http_url}/v2/repository/index", b"{}")
        with urllib.request.urlopen(index, timeout=10) as answer:
            rows = {r["name"]: r for r in json.loads(answer.read())}
        if "init_exit" not in rows:
            pytest.skip("in-process: a model that kills its process would end the server")
        reasons.append(rows["init_exit"].get("reason", ""))
        assert "Stub process 'init_exit_0_0' is not healthy." in _log(served, rules), served.name
    assert all(rows_reason for rows_reason in reasons)


def _sums(served: Served, **parameters: Any) -> Any:
    inputs = []
    for name, value in (("INPUT0", 1.0), ("INPUT1", 2.0)):
        tensor = httpclient.InferInput(name, [4], "FP32")
        inputs.append(tensor.set_data_from_numpy(np.full(4, value, np.float32)))
    with httpclient.InferenceServerClient(served.http_url) as client:
        try:
            result = client.infer("three_runs", inputs, parameters=parameters or None)
        except InferenceServerException as exc:
            return ("error", exc.status(), exc.message())
        return result.as_numpy("SUM").tolist(), result.as_numpy("RUNS").tolist()


def test_request_rescheduling(rules: Pair) -> None:
    """A default model rescheduling its request twice: the same answer, the server's
    sequence IDs and flags as Triton's; a response returned for a rescheduled request:
    Triton's error."""
    answers = [[_sums(s), _sums(s)] for s in rules]
    assert answers[0] == answers[1]
    assert answers[0][0][1][1:] == [1, 0, 0]  # START on the first execution only
    mistakes = [_sums(s, RETURN_ANYWAY=True) for s in rules]
    # the class's module differs: Triton's is its C extension
    theirs = str(mistakes[1]).replace(
        "c_python_backend_utils.", "despina_backend_python.pb.messages."
    )
    assert str(mistakes[0]) == theirs


def test_iterative_decoupled_stream(rules: Pair) -> None:
    answers = [_stream(s, "countdown", [3]) for s in rules]
    assert answers[0] == answers[1] == [[2], [1], [0]]
