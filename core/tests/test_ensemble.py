"""Ensembles through the in-process Server API, composed of "enstoy" models."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import ens_backend
import numpy as np
import pytest
import seq_backend
from despina.errors import Cancelled, InvalidArgument, Unavailable, Unsupported
from despina.inference.request import InferenceRequest, RequestedOutput
from despina.testing import RepositoryBuilder, RunningServer
from test_sequence import run_interleaved, seq_config

Start = Callable[..., RunningServer]


def unary(op: str, decoupled: bool = False) -> tuple[str, dict[str, str | bytes]]:
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    config = f"""
backend: "enstoy"
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{policy}
"""
    return config, {"1/model.ens": f'{{"op": "{op}"}}'}


ADD = (
    """
backend: "enstoy"
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "B" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "DIFF" data_type: TYPE_FP32 dims: [ -1 ] } ]
""",
    {"1/model.ens": '{"op": "add"}'},
)


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


def ensemble(steps: list[str], inputs: list[str], outputs: list[str]) -> str:
    def tensors(names: list[str]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ -1 ] }}' for n in names)

    return f"""
platform: "ensemble"
input [ {tensors(inputs)} ]
output [ {tensors(outputs)} ]
ensemble_scheduling {{ step [ {", ".join(steps)} ] }}
"""


#: X -> double -> t1 and X -> neg -> t2 (a branch), then add(t1, t2) -> SUM, DIFF.
BRANCH = ensemble(
    [
        step("double", {"IN": "X"}, {"OUT": "t1"}),
        step("neg", {"IN": "X"}, {"OUT": "t2"}),
        step("add", {"A": "t1", "B": "t2"}, {"SUM": "Y", "DIFF": "Z"}),
    ],
    ["X"],
    ["Y", "Z"],
)


def add_models(model_repository: RepositoryBuilder, ensembles: dict[str, str]) -> None:
    """Add the composing models ("double", "neg", "check", "split", "add") and ensembles."""
    for name, (config, files) in {
        "double": unary("double"),
        "neg": unary("neg"),
        "check": unary("check"),
        "split": unary("split", decoupled=True),
        "add": ADD,
    }.items():
        model_repository.add(name, config, files)
    for name, config in ensembles.items():
        model_repository.add(name, config)
    ens_backend.EnsBackend.calls.clear()


@pytest.fixture
def start_ens(
    model_repository: RepositoryBuilder, despina_server: Start
) -> Callable[..., RunningServer]:
    """Add the composing models plus the given ensembles, start a server."""

    def start(ensembles: dict[str, str], args: tuple[str, ...] = ()) -> RunningServer:
        add_models(model_repository, ensembles)
        return despina_server(model_repository.root, args=args, plugins=[ens_backend])

    return start


def infer(running: RunningServer, model: str, x: list[float], **kwargs: Any) -> Any:
    request = InferenceRequest(model, {"X": np.array(x, np.float32)}, **kwargs)
    return running.call(running.server.infer(request))


def test_branching_ensemble_of_three_models(start_ens: Callable[..., RunningServer]) -> None:
    running = start_ens({"branch": BRANCH})
    response = infer(running, "branch", [1, 2, 3], id="e-1")
    assert (response.model_name, response.model_version, response.id) == ("branch", "1", "e-1")
    np.testing.assert_array_equal(response.outputs["Y"], np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(response.outputs["Z"], np.array([3, 6, 9], np.float32))
    calls = {model: (inputs, outputs) for model, inputs, outputs in ens_backend.EnsBackend.calls}
    assert set(calls) == {"double", "neg", "add"}
    # intermediate tensors reach the next step as the very arrays the step produced
    assert calls["add"][0]["A"] is calls["double"][1]["OUT"]
    assert calls["add"][0]["B"] is calls["neg"][1]["OUT"]
    stats = running.server.models.get("branch").stats
    assert (stats.success.count, stats.execution_count) == (1, 1)
    assert running.server.models.get("add").stats.success.count == 1


def test_requested_outputs_only(start_ens: Callable[..., RunningServer]) -> None:
    running = start_ens({"branch": BRANCH})
    response = infer(running, "branch", [4], outputs=[RequestedOutput("Z")])
    assert set(response.outputs) == {"Z"}
    np.testing.assert_array_equal(response.outputs["Z"], np.array([12], np.float32))


def test_step_error_fails_the_request_naming_the_step(
    start_ens: Callable[..., RunningServer],
) -> None:
    chain = ensemble(
        [step("double", {"IN": "X"}, {"OUT": "t"}), step("check", {"IN": "t"}, {"OUT": "Y"})],
        ["X"],
        ["Y"],
    )
    running = start_ens({"chain": chain})
    with pytest.raises(InvalidArgument) as info:
        infer(running, "chain", [1, -1])
    assert str(info.value) == "in ensemble 'chain', negative input"
    stats = running.server.models.get("chain").stats
    assert (stats.fail.count, stats.success.count) == (1, 0)
    # the ensemble keeps serving
    np.testing.assert_array_equal(
        infer(running, "chain", [2]).outputs["Y"], np.array([4], np.float32)
    )


def test_decoupled_step_answers_once_per_response(start_ens: Callable[..., RunningServer]) -> None:
    fan = ensemble(
        [step("split", {"IN": "X"}, {"OUT": "t"}), step("double", {"IN": "t"}, {"OUT": "Y"})],
        ["X"],
        ["Y"],
    )
    running = start_ens({"fan": fan})
    with pytest.raises(Unsupported):
        infer(running, "fan", [1])

    async def stream() -> list[list[float]]:
        request = InferenceRequest("fan", {"X": np.array([1, 2, 3], np.float32)})
        return [
            r.outputs["Y"].tolist() async for r in running.server.infer_stream(request) if r.outputs
        ]

    answers = running.call(stream())
    assert sorted(answers) == [[2.0] * 4, [4.0] * 4, [6.0] * 4]


def test_ready_only_while_composing_models_are(start_ens: Callable[..., RunningServer]) -> None:
    running = start_ens(
        {"branch": BRANCH}, args=("--model-control-mode=explicit", "--load-model=*")
    )
    manager = running.server.models
    assert manager.get("branch").ready
    running.call(manager.unload("neg"))
    with pytest.raises(Unavailable):
        manager.get("branch")
    running.call(manager.load("neg"))
    assert manager.get("branch").ready
    np.testing.assert_array_equal(
        infer(running, "branch", [5]).outputs["Y"], np.array([5], np.float32)
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            ensemble([step("double", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y", "W"]),
            "ensemble output 'W' for ensemble bad' is not used",
        ),
        (
            ensemble(
                [step("double", {"IN": "X"}, {"OUT": "t"}), step("neg", {"IN": "u"}, {"OUT": "Y"})],
                ["X"],
                ["Y"],
            ),
            "output 'Y' for ensemble 'bad' is not written: at least one of its depending "
            "tensors, 'u', is not connected",
        ),
        (
            ensemble([step("nosuch", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"]),
            "ensemble bad contains models that are not available or ambiguous: nosuch",
        ),
        (
            ensemble([step("double", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"]).replace(
                "model_version: -1", "model_version: 7"
            ),
            "ensemble 'bad' depends on 'double' whose required version 7 is not loaded.",
        ),
        (
            ensemble([step("double", {"INPUT": "X"}, {"OUT": "Y"})], ["X"], ["Y"]),
            "in ensemble bad, ensemble tensor X is mapping to non-existing input INPUT in model double",
        ),
        (
            ensemble(
                [
                    step("split", {"IN": "X"}, {"OUT": "t"}),
                    step("add", {"A": "t", "B": "X"}, {"SUM": "Y", "DIFF": "Z"}),
                ],
                ["X"],
                ["Y", "Z"],
            ),
            "in ensemble bad, step of model 'add' receives inputs originated from different "
            "decoupled models",
        ),
        (  # the ensemble's outputs meet in one response: Triton checks them as a step's inputs
            ensemble(
                [
                    step("split", {"IN": "X"}, {"OUT": "Y"}),
                    step("double", {"IN": "X"}, {"OUT": "Z"}),
                ],
                ["X"],
                ["Y", "Z"],
            ),
            "in ensemble bad, step of model 'bad' receives inputs originated from different "
            "decoupled models",
        ),
        (
            ensemble([step("double", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"]).replace(
                "TYPE_FP32", "TYPE_INT32", 1
            ),
            "in ensemble bad, ensemble tensor X: inconsistent data type: TYPE_INT32 is inferred "
            "from model bad while TYPE_FP32 is inferred from model double",
        ),
        (
            ensemble([step("double", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"]).replace(
                "dims: [ -1 ]", "dims: [ 2, 3 ]", 1
            ),
            "in ensemble bad, ensemble tensor X: inconsistent shape: [2,3] is inferred from "
            "model bad while [-1] is inferred from model double",
        ),
        (  # input_map is a map: a key given twice keeps its last value, as in Triton 2.51,
            # so no model input is fed twice; the first value's tensor is left unused
            ensemble(
                [
                    step("add", {"A": "X", "B": "W"}, {"SUM": "Y", "DIFF": "Z"}).replace(
                        'input_map { key: "B"',
                        'input_map { key: "A" value: "W" } input_map { key: "B"',
                    )
                ],
                ["X", "W"],
                ["Y", "Z"],
            ),
            "ensemble input 'X' for ensemble bad' is not used",
        ),
    ],
)
def test_invalid_ensembles_are_unavailable(
    start_ens: Callable[..., RunningServer], config: str, message: str
) -> None:
    running = start_ens({"bad": config}, args=("--exit-on-error=false",))
    rows = {row["name"]: row for row in running.server.models.index()}
    assert rows["bad"]["state"] == "UNAVAILABLE"
    assert message in rows["bad"]["reason"]
    assert rows["double"]["state"] == "READY"


def test_ensemble_passes_sequence_fields_to_a_stateful_step(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("acc", seq_config(mbs=2), {"1/model.seq": ""})
    model_repository.add(
        "stateful",
        """
platform: "ensemble"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "acc" model_version: -1
  input_map { key: "INPUT" value: "INPUT" } output_map { key: "OUTPUT" value: "OUTPUT" }
} ] }
""",
    )
    running = despina_server(model_repository.root, plugins=[seq_backend])
    sequences = {31: [1, 2, 3], 32: [10, 10]}
    results = running.call(run_interleaved(running, "stateful", sequences))
    assert results == {31: [1, 3, 6], 32: [10, 20]}


def test_explicit_load_of_an_ensemble_loads_its_composing_models(
    start_ens: Callable[..., RunningServer],
) -> None:
    running = start_ens(
        {"branch": BRANCH}, args=("--model-control-mode=explicit", "--load-model=branch")
    )
    manager = running.server.models
    states = {row["name"]: row.get("state") for row in manager.index()}
    assert {m: states[m] for m in ("branch", "double", "neg", "add")} == dict.fromkeys(
        ("branch", "double", "neg", "add"), "READY"
    )
    assert states["check"] is None  # not composing: not loaded
    running.call(manager.unload("neg"))
    running.call(manager.load("branch"))  # reloading the ensemble brings "neg" back
    assert manager.get("neg").ready
    np.testing.assert_array_equal(
        infer(running, "branch", [2]).outputs["Z"], np.array([6], np.float32)
    )


def test_max_inflight_requests_bounds_each_step(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    # A dynamic-batched step batches 3 concurrent ensemble requests into one execution,
    # unless the ensemble allows only 1 in-flight request per step.
    model_repository.add(
        "bdouble",
        """
backend: "enstoy"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 200000 }
""",
        {"1/model.ens": '{"op": "double"}'},
    )
    for name, extra in (("free", ""), ("limited", "max_inflight_requests: 1")):
        config = ensemble([step("bdouble", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"])
        config = config.replace('platform: "ensemble"', 'platform: "ensemble"\nmax_batch_size: 4')
        config = config.replace("ensemble_scheduling {", f"ensemble_scheduling {{ {extra}")
        model_repository.add(name, config)
    running = despina_server(model_repository.root, plugins=[ens_backend])
    stats = running.server.models.get("bdouble").stats

    async def three(model: str) -> int:
        before = stats.execution_count
        requests = [
            InferenceRequest(model, {"X": np.full((1, 2), v, np.float32)}) for v in (1, 2, 3)
        ]
        responses = await asyncio.gather(*(running.server.infer(r) for r in requests))
        assert [r.outputs["Y"].tolist() for r in responses] == [[[2, 2]], [[4, 4]], [[6, 6]]]
        return stats.execution_count - before

    assert running.call(three("free")) == 1
    assert running.call(three("limited")) == 3


def test_cached_ensemble_answers_without_running_its_steps(
    start_ens: Callable[..., RunningServer],
) -> None:
    cached = BRANCH + "response_cache { enable: true }\n"
    running = start_ens({"cached": cached}, args=("--cache-config=local,size=1048576",))
    first = infer(running, "cached", [1, 2])
    second = infer(running, "cached", [1, 2])
    np.testing.assert_array_equal(first.outputs["Z"], second.outputs["Z"])
    assert [model for model, _, _ in ens_backend.EnsBackend.calls].count("add") == 1
    stats = running.server.models.get("cached").stats
    assert (stats.cache_hit.count, stats.cache_miss.count) == (1, 1)


def test_a_cached_ensemble_of_a_decoupled_model_fails_to_load(
    start_ens: Callable[..., RunningServer],
) -> None:
    """As Triton: an ensemble with a decoupled step is decoupled, which the response cache
    does not support; the load fails with the text a decoupled model gets."""
    fan = ensemble(
        [step("split", {"IN": "X"}, {"OUT": "t"}), step("double", {"IN": "t"}, {"OUT": "Y"})],
        ["X"],
        ["Y"],
    )
    running = start_ens(
        {"fan": fan + "response_cache { enable: true }\n"},
        args=("--cache-config=local,size=1048576", "--exit-on-error=false"),
    )
    assert (
        "Response Cache does not currently support model fan with 'decoupled' transaction "
        "policy. Please disable the response cache."
        in dict(running.server.models.failures())["fan"]
    )


def test_cancelled_ensemble_request_cancels_its_queued_steps(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config, _ = unary("double")
    model_repository.add("slow", config, {"1/model.ens": '{"op": "double", "delay_s": 1.0}'})
    model_repository.add("wrap", ensemble([step("slow", {"IN": "X"}, {"OUT": "Y"})], ["X"], ["Y"]))
    running = despina_server(model_repository.root, plugins=[ens_backend])
    ens_backend.EnsBackend.calls.clear()
    server = running.server

    async def scenario() -> list[Any]:
        first = InferenceRequest("wrap", {"X": np.ones(2, np.float32)})
        second = InferenceRequest("wrap", {"X": np.ones(2, np.float32)})
        futures = [asyncio.ensure_future(server.infer(r)) for r in (first, second)]
        await asyncio.sleep(0.05)  # both submitted; the second one's step waits in the queue
        second.cancel()
        return await asyncio.gather(*futures, return_exceptions=True)

    first, second = running.call(scenario())
    np.testing.assert_array_equal(first.outputs["Y"], np.full(2, 2, np.float32))
    assert isinstance(second, Cancelled)
    assert [model for model, _, _ in ens_backend.EnsBackend.calls] == ["slow"]
    assert server.models.get("wrap").stats.failures["CANCELED"] == 1
