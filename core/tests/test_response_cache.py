"""The response cache: identical requests answered without running the model."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import toy_backend
from despina.inference.request import RequestedOutput
from despina.serving.server import StartupError
from despina.testing import RepositoryBuilder, RunningServer, start_server
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]


def test_identical_requests_hit_the_cache(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add(
        "cached", toy_config(extra="response_cache { enable: true }"), {"1/model.toy": ""}
    )
    model_repository.add("uncached", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, ["--cache-config=local,size=1048576"], plugins=[toy_backend]
    )
    toy_backend.ToyBackend.executions.clear()

    def infer(model: str, value: float, outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        wanted = None if outputs is None else [RequestedOutput(o) for o in outputs]
        return running.call(
            running.server.infer(toy_request(model, value=value, outputs=wanted))
        ).outputs

    first = infer("cached", 2.0)
    second = infer("cached", 2.0)
    np.testing.assert_array_equal(first["OUTPUT0"], second["OUTPUT0"])
    assert second["OUTPUT1"][0] == 1.0
    assert infer("cached", 2.0, ["OUTPUT1"]).keys() == {"OUTPUT1"}  # other outputs: another key
    assert infer("cached", 5.0)["OUTPUT0"][0] == 6.0  # other input: a miss
    infer("uncached", 2.0)
    infer("uncached", 2.0)
    assert [name for name, _ in toy_backend.ToyBackend.executions] == ["cached_0"] * 3 + [
        "uncached_0"
    ] * 2
    stats = running.server.models.get("cached").stats.snapshot()
    assert stats["inference_stats"]["cache_hit"]["count"] == 1
    assert stats["inference_stats"]["cache_miss"]["count"] == 3
    assert stats["inference_stats"]["success"]["count"] == 4
    assert stats["inference_count"] == 3


def test_cache_evicts_least_recently_used_within_its_budget() -> None:
    from despina.inference.local_cache import LocalCache

    cache = LocalCache({"size": "292"})
    block = np.zeros(8, np.float32)  # an entry: key 1 + name 1 + array header 112 + data 32
    cache.insert(b"a", {"x": block}, {})
    cache.insert(b"b", {"x": block}, {})
    assert cache.lookup(b"a") is not None  # a is now the most recent
    cache.insert(b"c", {"x": block}, {})
    assert cache.lookup(b"b") is None and cache.lookup(b"a") is not None and len(cache) == 2
    cache.insert(b"huge", {"x": np.zeros(100, np.float32)}, {})
    assert cache.lookup(b"huge") is None


def test_an_entry_larger_than_the_cache_is_not_kept(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Triton's local cache: the entry counts more than the outputs' data (key, names,
    array headers); one larger than the cache is not inserted, with a warning, and the
    same request misses again."""
    model_repository.add(
        "cached", toy_config(extra="response_cache { enable: true }"), {"1/model.toy": ""}
    )
    running = despina_server(
        model_repository.root, ["--cache-config=local,size=200"], plugins=[toy_backend]
    )
    for _ in range(2):
        assert running.call(running.server.infer(toy_request("cached"))).error is None
    stats = running.server.models.get("cached").stats.snapshot()["inference_stats"]
    assert stats["cache_miss"]["count"] == 2 and stats["cache_hit"]["count"] == 0
    assert "Failed to insert key" in caplog.text


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--cache-config=nosuch,host=x"], "unknown cache 'nosuch'; installed caches: 'local'"),
        (["--cache-config=local,size=1k"], "expected local,size=<bytes>, got 'local,size=1k'"),
        (
            ["--cache-config=local,size=1", "--cache-config=other,a=b"],
            "found multiple cache configurations, but only a single cache is currently supported",
        ),
        (
            ["--response-cache-byte-size=8", "--cache-config=local,size=8"],
            "Incompatible flags --response-cache-byte-size and --cache-config both provided.",
        ),
        (["--cache-config=local"], "expected <cache>,<key>=<value>, got 'local'"),
    ],
)
def test_bad_cache_config_is_refused(
    model_repository: RepositoryBuilder, flags: list[str], reason: str
) -> None:
    with pytest.raises(StartupError, match=re.escape(reason)):
        start_server(model_repository.root, flags, plugins=[toy_backend])
