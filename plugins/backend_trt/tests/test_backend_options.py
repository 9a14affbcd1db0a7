"""``--backend-config=tensorrt,<key>=<value>`` with the stand-in runtime (TEST-ONLY, see
conftest.py): plugin libraries (a real shared library built with the C compiler, loaded
with ctypes before the engine is deserialized), version-compatible engines, the execution
policy, and bad values failing the load with a clear text."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, RunningServer
from despina_trt_standin import SimulatedGpu, add_sub_plan

from .test_serving import add_sub

Start = Callable[..., RunningServer]


def start(
    repo: RepositoryBuilder, server: Start, *options: str
) -> httpclient.InferenceServerClient:
    flags = [f"--backend-config=tensorrt,{option}" for option in options]
    running = server(repo.root, ["--exit-on-error=false", *flags], plugins=[SimulatedGpu()])
    return httpclient.InferenceServerClient(running.http_url)


def index(client: httpclient.InferenceServerClient) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in client.get_model_repository_index()}


@pytest.fixture
def plugin_library(tmp_path: Path) -> Path:
    """A shared library of a unique name (so no earlier test has loaded it)."""
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build a plugin library")
    source = tmp_path / "plugin.c"
    source.write_text("int despina_test_plugin(void) { return 7; }\n")
    library = tmp_path / f"libdespina_plugin_{uuid.uuid4().hex[:8]}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def test_plugins_are_loaded_before_the_engine_is_deserialized(
    trt_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Start,
    plugin_library: Path,
) -> None:
    plan = add_sub_plan(plugins=[plugin_library.name])
    model_repository.add("custom", 'platform: "tensorrt_plan"\n', {"1/model.plan": plan})
    without = index(start(model_repository, despina_server))["custom"]
    assert without["state"] == "UNAVAILABLE"
    assert (
        f"getPluginCreator could not find plugin of library {plugin_library.name}"
        in (without["reason"])
    )
    missing = plugin_library.with_name("libabsent.so")
    option = f"plugins={missing};{plugin_library}"
    refused = index(start(model_repository, despina_server, option))["custom"]
    assert refused["state"] == "UNAVAILABLE"
    # the reason clients see names the file; the server's log has the whole path
    assert f"TensorRT plugin library '{missing.name}' not found" in refused["reason"]
    client = start(model_repository, despina_server, f"plugins={plugin_library}")
    assert index(client)["custom"]["state"] == "READY"
    add_sub(client, 2, model="custom")


def test_version_compatible_engines_need_the_option(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    plan = add_sub_plan(version_compatible=True)
    model_repository.add("lean", 'platform: "tensorrt_plan"\n', {"1/model.plan": plan})
    refused = index(start(model_repository, despina_server))["lean"]
    assert refused["state"] == "UNAVAILABLE"
    assert "engine host code is not allowed" in refused["reason"]
    client = start(model_repository, despina_server, "version-compatible=true")
    assert index(client)["lean"]["state"] == "READY"
    add_sub(client, 2, model="lean")


TWO_INSTANCES = (
    'platform: "tensorrt_plan"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_GPU count: 2 } ]\n'
)


@pytest.mark.parametrize(("policy", "shared"), [("DEVICE_BLOCKING", True), ("BLOCKING", False)])
def test_execution_policy_decides_whether_a_gpus_instances_share_a_lock(
    trt_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Start,
    policy: str,
    shared: bool,
) -> None:
    model_repository.add("add_sub", TWO_INSTANCES, {"1/model.plan": add_sub_plan()})
    running = despina_server(
        model_repository.root,
        ["--exit-on-error=false", f"--backend-config=tensorrt,execution-policy={policy}"],
        plugins=[SimulatedGpu()],
    )
    first, second = running.server.models.get("add_sub").instances
    if shared:
        assert first.lock is not None and first.lock is second.lock
    else:
        assert first.lock is None and second.lock is None


def test_device_blocking_serializes_executions_on_the_engine(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """DEVICE_BLOCKING is the default: two instances under concurrent load never run two
    executions of the shared engine at once (each execution takes a while)."""
    plan = add_sub_plan(execute_delay_s=0.01)
    model_repository.add("slow", TWO_INSTANCES, {"1/model.plan": plan})
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[SimulatedGpu()]
    )
    client = httpclient.InferenceServerClient(running.http_url, concurrency=8)
    a = np.ones((1, 4), np.float32)
    pending = []
    for _ in range(16):
        items = []
        for name in ("INPUT0", "INPUT1"):
            item = httpclient.InferInput(name, [1, 4], "FP32")
            item.set_data_from_numpy(a)
            items.append(item)
        pending.append(client.async_infer("slow", items))
    for call in pending:
        assert call.get_result().as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
    first, second = running.server.models.get("slow").instances
    assert first.engine is second.engine
    assert first.engine.most_running == 1


def test_sequence_models_run_blocking_as_in_triton(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config = (
        'platform: "tensorrt_plan"\nmax_batch_size: 8\nsequence_batching { }\n'
        "instance_group [ { kind: KIND_GPU count: 2 } ]\n"
    )
    model_repository.add("sequence", config, {"1/model.plan": add_sub_plan()})
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[SimulatedGpu()]
    )
    assert [i.lock for i in running.server.models.get("sequence").instances] == [None, None]


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("coalesce-request-input=maybe", "coalesce-request-input=maybe: expected a boolean"),
        ("version-compatible=2", "version-compatible=2: expected a boolean"),
        (
            "execution-policy=FAST",
            "execution-policy=FAST: expected one of DEVICE_BLOCKING, BLOCKING",
        ),
    ],
)
def test_bad_values_fail_the_load_naming_the_option(
    trt_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Start,
    option: str,
    reason: str,
) -> None:
    model_repository.add("add_sub", 'platform: "tensorrt_plan"\n', {"1/model.plan": add_sub_plan()})
    entry = index(start(model_repository, despina_server, option))["add_sub"]
    assert entry["state"] == "UNAVAILABLE"
    assert f"--backend-config=tensorrt,{reason}" in entry["reason"]


def test_coalesce_request_input_is_accepted(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("add_sub", 'platform: "tensorrt_plan"\n', {"1/model.plan": add_sub_plan()})
    client = start(model_repository, despina_server, "coalesce-request-input=true")
    add_sub(client, 2)
