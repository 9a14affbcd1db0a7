"""The checksum agent, discovered through its entry point, guarding real model loads."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest
import toy_backend
from despina.plugin.manager import create_plugins
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]

WEIGHTS = b'{"delay_s": 0}'


def agent_config(key: str, digest: str) -> str:
    agents = f'model_repository_agents {{ agents [ {{ name: "checksum" parameters {{ key: "{key}" value: "{digest}" }} }} ] }}'
    return toy_config(extra=agents)


def test_agent_is_discovered_through_its_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["checksum"]["distribution"] == "despina-repoagent-checksum"
    assert rows["checksum"]["provides"]["repository agents"] == ["checksum"]


def test_matching_files_load_and_others_fail_with_the_file_named(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    good = hashlib.sha256(WEIGHTS).hexdigest()
    model_repository.add("good", agent_config("SHA256:1/model.toy", good), {"1/model.toy": WEIGHTS})
    model_repository.add(
        "tampered", agent_config("SHA256:1/model.toy", good), {"1/model.toy": WEIGHTS + b" "}
    )
    model_repository.add(
        "md5",
        agent_config("MD5:1/model.toy", hashlib.md5(WEIGHTS).hexdigest()),
        {"1/model.toy": WEIGHTS},
    )
    model_repository.add(
        "escape", agent_config("SHA256:../good/1/model.toy", good), {"1/model.toy": WEIGHTS}
    )
    model_repository.add(
        "missing", agent_config("SHA256:1/other.bin", good), {"1/model.toy": WEIGHTS}
    )
    model_repository.add(
        "unknown",
        toy_config(extra='model_repository_agents { agents [ { name: "decrypt" } ] }'),
        {"1/model.toy": WEIGHTS},
    )
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    reasons = dict(running.server.models.failures())
    assert "checksum mismatch for '1/model.toy': sha256 expected" in reasons["tampered"]
    assert "invalid checksum file path '../good/1/model.toy'" in reasons["escape"]
    assert "checksum file '1/other.bin' does not exist" in reasons["missing"]
    assert "unknown repository agent 'decrypt'; installed: checksum" in reasons["unknown"]
    for name in ("good", "md5"):
        assert running.call(running.server.infer(toy_request(name))).outputs["OUTPUT0"][
            0
        ] == pytest.approx(2.0)
