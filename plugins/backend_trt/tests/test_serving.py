"""The whole server path with the stand-in runtime (TEST-ONLY, see conftest.py): real
servers on 127.0.0.1, real tritonclient HTTP and gRPC clients, the backend's production
code from engine deserialization to execute_async_v3 and the copies back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer
from despina_trt_standin import SimulatedGpu, add_sub_plan, nonzero_plan
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]


def start(repo: RepositoryBuilder, server: Start, *args: str) -> RunningServer:
    return server(repo.root, ["--exit-on-error=false", *args], plugins=[SimulatedGpu()])


def add_sub(
    client: Any, batch: int, seed: int = 0, model: str = "add_sub", module: Any = httpclient
) -> None:
    """One add/sub inference of ``model`` through ``client`` (of tritonclient's ``module``),
    its outputs checked."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((batch, 4), dtype=np.float32) for _ in range(2))
    items = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        item = module.InferInput(name, [batch, 4], "FP32")
        item.set_data_from_numpy(value)
        items.append(item)
    result = client.infer(model, items)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_plan_autocompletes_and_serves_over_http_and_grpc(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("add_sub", None, {"1/model.plan": add_sub_plan()})
    running = start(model_repository, despina_server)
    client = httpclient.InferenceServerClient(running.http_url)
    config = client.get_model_config("add_sub")
    assert config["platform"] == "tensorrt_plan" or config["backend"] == "tensorrt"
    assert config["max_batch_size"] == 8  # the profile's max batch, not the default 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])
    ]  # fmt: skip
    assert [(g["kind"], g["gpus"]) for g in config["instance_group"]] == [("KIND_GPU", [0])]
    add_sub(client, 3)
    with grpcclient.InferenceServerClient(running.grpc_url) as grpc:
        add_sub(grpc, 2, module=grpcclient)


def test_several_instances_each_own_a_stream_and_dynamic_batches_run(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config = (
        'platform: "tensorrt_plan"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        "instance_group [ { kind: KIND_GPU count: 2 } ]\n"
    )
    model_repository.add("add_sub", config, {"1/model.plan": add_sub_plan()})
    running = start(model_repository, despina_server)
    version = running.server.models.get("add_sub")
    assert [(i.spec.name, i.spec.kind) for i in version.instances] == [
        ("add_sub_0_0", "KIND_GPU"), ("add_sub_0_1", "KIND_GPU")
    ]  # fmt: skip
    assert trt_standin.despina_device_memory.streams == {0: 2}
    client = httpclient.InferenceServerClient(running.http_url, concurrency=8)
    sent = []
    for seed in range(24):
        a = np.full((1, 4), seed, np.float32)
        items = []
        for name in ("INPUT0", "INPUT1"):
            item = httpclient.InferInput(name, [1, 4], "FP32")
            item.set_data_from_numpy(a)
            items.append(item)
        sent.append((a, client.async_infer("add_sub", items)))
    for a, pending in sent:
        np.testing.assert_array_equal(pending.get_result().as_numpy("OUTPUT0"), a + a)
    stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["inference_count"] == 24
    assert stats["execution_count"] < 24  # requests were batched


def test_profiles_per_instance_group_and_per_batch(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Two profiles (batch 1-2 and 3-16); the group names both: each batch runs on the
    profile whose bounds hold it; a group naming only profile 0 refuses batch 5."""
    plan = add_sub_plan([(1, 1, 2), (3, 8, 16)])
    both = 'platform: "tensorrt_plan"\ninstance_group [ { kind: KIND_GPU profile: ["0", "1"] } ]\n'
    first = 'platform: "tensorrt_plan"\nmax_batch_size: 2\ninstance_group [ { kind: KIND_GPU profile: ["0"] } ]\n'
    model_repository.add("add_sub", both, {"1/model.plan": plan})
    model_repository.add("small", first, {"1/model.plan": plan})
    running = start(model_repository, despina_server)
    client = httpclient.InferenceServerClient(running.http_url)
    assert client.get_model_config("add_sub")["max_batch_size"] == 16
    for batch in (1, 2, 3, 16):
        add_sub(client, batch)
    [instance] = running.server.models.get("add_sub").instances
    assert [p.index for p in instance.profiles] == [0, 1]
    assert client.get_model_config("small")["max_batch_size"] == 2


def test_shape_outside_the_profile_is_a_clear_client_error(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    plan = add_sub_plan([(2, 4, 8)])
    model_repository.add("add_sub", 'platform: "tensorrt_plan"\n', {"1/model.plan": plan})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    with pytest.raises(InferenceServerException) as failed:
        add_sub(client, 1)
    assert str(failed.value.status()) == "400"
    assert "input 'INPUT0' shape [1, 4] is outside optimization profile 0[0]" in str(failed.value)
    add_sub(client, 2)  # the server serves on


def test_data_dependent_output_through_the_output_allocator(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config = 'backend: "tensorrt"\nmax_batch_size: 0\n'
    model_repository.add("nonzero", config, {"1/model.plan": nonzero_plan()})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    for values in ([0, 3, 0, 5, 7], [1, 0], [0.0] * 9):
        x = httpclient.InferInput("X", [len(values)], "FP32")
        x.set_data_from_numpy(np.array(values, np.float32))
        result = client.infer("nonzero", [x]).as_numpy("INDICES")
        assert result.tolist() == np.flatnonzero(values).tolist()


def test_kind_cpu_is_refused_with_tritons_text(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config = 'platform: "tensorrt_plan"\ninstance_group [ { kind: KIND_CPU } ]\n'
    model_repository.add("cpu", config, {"1/model.plan": add_sub_plan()})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    [entry] = client.get_model_repository_index()
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"].endswith(
        "unable to load model 'cpu', TensorRT backend supports only GPU device"
    )


def test_config_and_engine_disagreeing_fail_the_load(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    too_big = 'platform: "tensorrt_plan"\nmax_batch_size: 32\n'
    model_repository.add("too_big", too_big, {"1/model.plan": add_sub_plan()})
    model_repository.add("garbage", 'platform: "tensorrt_plan"\n', {"1/model.plan": b"not a plan"})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    reasons = {e["name"]: e.get("reason", "") for e in client.get_model_repository_index()}
    assert reasons["too_big"].endswith(
        "autofill failed for model 'too_big': configuration specified max-batch 32 but "
        "TensorRT engine only supports max-batch 8"
    )
    assert "unable to create TensorRT engine from '1/model.plan'" in reasons["garbage"]
    assert "magic tag" in reasons["garbage"]  # TensorRT's own error, from the logger


def test_without_tensorrt_the_model_is_unavailable_saying_how_to_install(
    model_repository: RepositoryBuilder, despina_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)  # import fails, as here
    model_repository.add("add_sub", None, {"1/model.plan": add_sub_plan()})
    full = (
        'platform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    model_repository.add("strict", full, {"1/model.plan": add_sub_plan()})
    for args in ((), ("--disable-auto-complete-config",)):
        client = httpclient.InferenceServerClient(
            start(model_repository, despina_server, *args).http_url
        )
        index = client.get_model_repository_index()
        # with auto-complete off, the config without outputs fails before the runtime is looked for
        for entry in [e for e in index if not args or e["name"] == "strict"]:
            assert entry["state"] == "UNAVAILABLE"
            assert "TensorRT runtime not installed" in entry["reason"]
            assert "pip install 'despina-backend-trt[runtime]'" in entry["reason"]
