"""Model manager: start-up policies, control modes, reload, overrides, warm-up, shutdown."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import toy_backend
from despina.errors import InvalidArgument, NotFound, Unavailable
from despina.repository.poller import LocalChanges, RepositoryPoller
from despina.serving.server import StartupError
from despina.testing import RepositoryBuilder, RunningServer, start_server
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]


def states(running: RunningServer) -> dict[str, str]:
    return {row["name"]: row.get("state", "") for row in running.server.models.index()}


def test_folder_with_only_a_model_file_loads_by_auto_complete(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("bare", None, {"1/model.toy": ""})
    running = despina_server(model_repository.root, plugins=[toy_backend])
    config = running.server.models.get("bare").config
    assert config.backend == "toy"
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert running.call(running.server.infer(toy_request("bare"))).outputs["OUTPUT0"][0] == 2.0


def test_strict_model_config_loads_a_config_without_tensors(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Auto-complete off, no config: the model loads with no inputs or outputs, as Triton's
    core takes it, and a request naming an input gets Triton's text."""
    model_repository.add("bare", None, {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, ["--strict-model-config=true"], plugins=[toy_backend]
    )
    config = running.server.models.get("bare").config
    assert (list(config.input), list(config.output)) == ([], [])
    with pytest.raises(
        InvalidArgument, match="unexpected inference input 'INPUT0' for model 'bare'"
    ):
        running.call(running.server.infer(toy_request("bare")))


def test_failed_model_does_not_stop_the_others(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("good", toy_config(), {"1/model.toy": ""})
    model_repository.add("bad", toy_config(), {"1/model.toy": '{"fail_load": true}'})
    model_repository.add("typo", 'backend: "toy"\nmax_batch_sise: 3', {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    assert states(running) == {"good": "READY", "bad": "UNAVAILABLE", "typo": "UNAVAILABLE"}
    reasons = dict(running.server.models.failures())
    assert reasons["bad"].startswith("Internal: ")  # Triton's form: status code, message
    assert "toy model refuses to load" in reasons["bad"]
    assert "typo/config.pbtxt:2:" in reasons["typo"]
    assert running.server.ready is False  # strict readiness: a model is not ready
    with pytest.raises(NotFound, match="'bad' has no available versions"):
        running.call(running.server.infer(toy_request("bad")))
    assert running.call(running.server.infer(toy_request("good"))).outputs["OUTPUT0"][0] == 2.0


def test_exit_on_error_refuses_to_start(model_repository: RepositoryBuilder) -> None:
    model_repository.add("bad", toy_config(), {"1/model.toy": '{"fail_load": true}'})
    with pytest.raises(StartupError, match="toy model refuses to load"):
        start_server(model_repository.root, plugins=[toy_backend])


def test_unknown_backend_names_the_installed_ones(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("tf", 'platform: "tensorflow_graphdef"', {"1/model.graphdef": ""})
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    reason = running.server.models.entries["tf"].reason
    assert "unknown backend 'tensorflow'" in reason and "toy" in reason


def test_explicit_mode_loads_unloads_and_reloads(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("a", toy_config(), {"1/model.toy": ""})
    model_repository.add("b", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=explicit", "--load-model=a"],
        plugins=[toy_backend],
    )
    manager = running.server.models
    assert states(running) == {"a": "READY", "b": ""}
    running.call(manager.load("b"))
    assert states(running)["b"] == "READY"
    running.call(manager.unload("a"))
    assert states(running)["a"] == "UNAVAILABLE"
    assert running.server.ready  # strict readiness: an unloaded model does not count (Triton)
    with pytest.raises(NotFound):
        running.call(running.server.infer(toy_request("a")))
    # reload with a config override: version 1 keeps serving until the new one is READY
    override = '{"backend": "toy", "max_batch_size": 4, "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}, {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}], "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}, {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}]}'
    running.call(manager.load("b", config_json=override))
    assert manager.get("b").config.max_batch_size == 4
    with pytest.raises(NotFound):
        running.call(manager.load("missing"))
    assert "missing" not in states(running)  # as Triton: no index row for it
    model_repository.add("c", toy_config(), {"1/model.toy": '{"fail_load": true}'})
    with pytest.raises(InvalidArgument) as failed:
        running.call(manager.load("c"))
    assert not running.server.ready  # a version that failed to load does count
    assert str(failed.value).startswith(
        "load failed for model 'c': version 1 is at UNAVAILABLE state: Internal: "
    )
    assert str(failed.value).endswith(";\n")


def test_reload_keeps_serving_in_flight_requests(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("slow", toy_config(), {"1/model.toy": '{"delay_s": 0.3}'})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=explicit", "--load-model=*"],
        plugins=[toy_backend],
    )

    async def scenario() -> list[Any]:
        in_flight = [
            asyncio.ensure_future(running.server.infer(toy_request("slow"))) for _ in range(3)
        ]
        await asyncio.sleep(0.05)
        await running.server.models.load("slow")
        after = await running.server.infer(toy_request("slow"))
        return [*(await asyncio.gather(*in_flight)), after]

    responses = running.call(scenario())
    assert [r.outputs["OUTPUT0"][0] for r in responses] == [2.0] * 4


def test_none_mode_refuses_load_requests(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("a", toy_config(), {"1/model.toy": ""})
    running = despina_server(model_repository.root, plugins=[toy_backend])
    with pytest.raises(Unavailable, match="explicit model load / unload is not allowed"):
        running.server.models.check_control()


@pytest.mark.parametrize("path", ["../escape/1/model.toy", "/etc/passwd", "1/../../x", "a/../../b"])
def test_file_overrides_never_leave_the_temporary_folder(
    model_repository: RepositoryBuilder, despina_server: Start, path: str
) -> None:
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit"], plugins=[toy_backend]
    )
    config = '{"backend": "toy"}'
    with pytest.raises(InvalidArgument, match="invalid file override path"):
        running.call(running.server.models.load("over", config_json=config, files={path: b""}))
    assert not (model_repository.root.parent / "escape").exists()


def test_file_overrides_load_a_model_from_request_bytes(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit"], plugins=[toy_backend]
    )
    running.call(
        running.server.models.load(
            "over", config_json='{"backend": "toy"}', files={"1/model.toy": b""}
        )
    )
    assert running.call(running.server.infer(toy_request("over"))).outputs["OUTPUT1"][0] == 0.0


def test_warm_up_runs_before_ready_and_failures_fail_the_load(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    warm = 'model_warmup [ { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [4] zero_data: true } } inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [4] random_data: true } } } ]'
    model_repository.add("warm", toy_config(mbs=4, extra=warm), {"1/model.toy": ""})
    model_repository.add("cold", toy_config(mbs=4, extra=warm), {"1/model.toy": '{"raise": true}'})
    toy_backend.ToyBackend.executions.clear()
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    assert [e for e in toy_backend.ToyBackend.executions if e[0] == "warm_0"] == [("warm_0", 1)] * 3
    assert states(running) == {"warm": "READY", "cold": "UNAVAILABLE"}
    assert (
        "warm-up 'zeros' failed: toy model exploded"
        in dict(running.server.models.failures())["cold"]
    )


def test_shutdown_answers_every_request(model_repository: RepositoryBuilder) -> None:
    model_repository.add("slow", toy_config(), {"1/model.toy": '{"delay_s": 0.2}'})
    running = start_server(model_repository.root, plugins=[toy_backend])

    async def scenario() -> list[Any]:
        pending = [
            asyncio.ensure_future(running.server.infer(toy_request("slow"))) for _ in range(5)
        ]
        await asyncio.sleep(0.05)
        await running.server.stop()
        return await asyncio.gather(*pending, return_exceptions=True)

    results = running.call(scenario())
    running.stop()
    # every accepted request runs before the server stops (as Triton), none is refused
    assert [type(r).__name__ for r in results] == ["InferenceResponse"] * 5


def test_two_servers_live_in_one_process(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("a", toy_config(), {"1/model.toy": ""})
    one = despina_server(model_repository.root, plugins=[toy_backend])
    two = despina_server(model_repository.root, ["--id=second"], plugins=[toy_backend])
    assert one.server.plugins is not two.server.plugins
    assert (one.server.id, two.server.id) == ("triton", "second")
    assert one.call(one.server.infer(toy_request("a"))).outputs["OUTPUT0"][0] == 2.0
    assert two.call(two.server.infer(toy_request("a"))).outputs["OUTPUT0"][0] == 2.0


def test_poll_mode_follows_the_repository(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("kept", toy_config(), {"1/model.toy": ""})
    model_repository.add("removed", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=poll", "--repository-poll-secs=3600"],
        plugins=[toy_backend],
    )
    poller = running.server.poller
    assert poller is not None

    def poll_twice() -> None:  # a change acts once two polls saw the same folder
        running.call(poller.poll_once())
        running.call(poller.poll_once())

    shutil.rmtree(model_repository.root / "removed")
    model_repository.add("added", toy_config(), {"1/model.toy": ""})
    running.call(poller.poll_once())
    assert "added" not in running.server.models.entries  # seen once: maybe still being written
    running.call(poller.poll_once())
    assert states(running) == {"added": "READY", "kept": "READY"}  # folders, as Triton's
    assert running.server.models.entries["removed"].reason == "unloaded"

    model_repository.add("kept", None, {"2/model.toy": ""})  # a new version folder
    poll_twice()
    assert running.server.models.get("kept").version == 2

    model_repository.add("kept", toy_config(), {"3/model.toy": '{"fail_load": true}'})
    poll_twice()  # the broken version fails; version 2 keeps serving
    assert running.server.models.get("kept").version == 2
    assert running.call(running.server.infer(toy_request("kept"))).outputs["OUTPUT0"][0] == 2.0


class Gate(LocalChanges):
    """Poll mode's changes through the server's own manager, applied only when open
    (as :class:`~despina.serving.joint_loads.JointChanges` waits for every peer)."""

    open = False

    async def ready(self) -> bool:
        return self.open


def test_a_poll_waits_until_its_changes_are_ready(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("kept", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=poll", "--repository-poll-secs=3600"],
        plugins=[toy_backend],
    )
    gate = Gate(running.server.models)
    poller = RepositoryPoller(running.server.models, 3600, gate)
    poller.remember_loaded()
    model_repository.add("added", toy_config(), {"1/model.toy": ""})
    for _ in range(3):  # closed: nothing is looked at or recorded
        running.call(poller.poll_once())
    assert "added" not in running.server.models.entries
    assert poller.seen == {}
    gate.open = True
    running.call(poller.poll_once())
    assert "added" not in running.server.models.entries  # seen once
    running.call(poller.poll_once())
    assert states(running) == {"added": "READY", "kept": "READY"}


def test_the_index_lists_the_repository_folders(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """As Triton's: a loaded model whose folder was removed serves on and is not listed."""
    model_repository.add("kept", toy_config(), {"1/model.toy": ""})
    model_repository.add("removed", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        ["--model-control-mode=explicit", "--load-model=*"],
        plugins=[toy_backend],
    )
    running.call(running.server.models.unload("kept"))
    shutil.rmtree(model_repository.root / "removed")
    assert running.server.models.index() == [
        {"name": "kept", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert running.call(running.server.infer(toy_request("removed"))).outputs["OUTPUT0"][0] == 2.0
