"""Two ``despina serve`` processes share responses through one real Redis; a dead or a
hung Redis turns lookups into misses (with a warning), never into failed or stalled
inferences."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import numpy as np
import tritonclient.http as httpclient

from .conftest import RedisServer, Serving

Serve = Callable[..., Serving]


def _infer(serving: Serving, value: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Y, S and the seconds the request took."""
    with httpclient.InferenceServerClient(f"127.0.0.1:{serving.port}") as client:
        x = httpclient.InferInput("X", [4], "FP32")
        x.set_data_from_numpy(np.full(4, value, np.float32))
        began = time.monotonic()
        result = client.infer("echo", [x])
        took = time.monotonic() - began
    return result.as_numpy("Y"), result.as_numpy("S"), took


def _cache(serving: Serving) -> tuple[int, int, int]:
    """(hits, misses, executions) in the model's statistics."""
    stats = serving.statistics()
    inference = stats["inference_stats"]
    assert isinstance(inference, dict)
    return (
        inference["cache_hit"]["count"],
        inference["cache_miss"]["count"],
        stats["execution_count"],
    )  # type: ignore[return-value]


def _redis_flags(redis_server: RedisServer, *extra: str) -> list[str]:
    options = ["host=127.0.0.1", f"port={redis_server.port}", *extra]
    return [f"--cache-config=redis,{option}" for option in options]


def test_a_response_computed_by_one_server_is_a_hit_on_the_other(
    redis_server: RedisServer, serve: Serve
) -> None:
    first = serve(*_redis_flags(redis_server))
    second = serve(*_redis_flags(redis_server))
    y, s, _ = _infer(first, 2.0)
    assert _cache(first) == (0, 1, 1)
    deadline = time.monotonic() + 5  # the insert is written in the background
    while redis_server.command("DBSIZE") != ":1":
        assert time.monotonic() < deadline, "the entry never reached Redis"
        time.sleep(0.02)
    y2, s2, _ = _infer(second, 2.0)
    np.testing.assert_array_equal(y2, y)
    assert list(s2) == list(s) == [b"sum", b"8.0"]
    assert _cache(second) == (1, 0, 0)  # answered from Redis: the model never ran there
    _infer(second, 3.0)  # another input: a miss
    assert _cache(second) == (1, 1, 1)
    metrics = second.metrics()
    assert 'nv_cache_num_hits_per_model{model="echo",version="1"} 1' in metrics
    assert 'nv_cache_num_misses_per_model{model="echo",version="1"} 1' in metrics
    assert "# TYPE nv_cache_hit_duration_per_model counter" in metrics
    assert "# TYPE nv_cache_miss_duration_per_model counter" in metrics


def test_a_dead_redis_makes_misses_and_a_warning_then_hits_again(
    redis_server: RedisServer, serve: Serve
) -> None:
    serving = serve(*_redis_flags(redis_server))
    _infer(serving, 1.0)
    redis_server.signal(signal.SIGKILL)
    assert redis_server.process is not None
    redis_server.process.wait(10)
    for value in (1.0, 1.0, 4.0):
        y, _, took = _infer(serving, value)
        assert y[0] == value + 1 and took < 2.0
    hits, misses, executions = _cache(serving)
    assert (hits, misses, executions) == (0, 4, 4)
    log = serving.log.read_text()
    warning = rf"^W\d{{4}} .*redis cache at 127\.0\.0\.1:{redis_server.port} failed"
    assert re.search(warning, log, re.MULTILINE), log
    assert log.count("requests run as cache misses") == 1  # one warning per interval
    redis_server.start()  # the same port, empty
    time.sleep(1.2)  # past the retry interval
    _infer(serving, 5.0)
    deadline = time.monotonic() + 5
    while redis_server.command("DBSIZE") != ":1":
        assert time.monotonic() < deadline, "inserts never resumed"
        time.sleep(0.02)
    _infer(serving, 5.0)
    assert _cache(serving)[0] == 1
    assert "answers again" in serving.log.read_text()


def test_a_hung_redis_delays_a_request_by_the_socket_timeout_at_most(
    redis_server: RedisServer, serve: Serve
) -> None:
    serving = serve(*_redis_flags(redis_server, "socket_timeout=300"))
    _infer(serving, 1.0)
    redis_server.signal(signal.SIGSTOP)  # accepts nothing, answers nothing
    try:
        _, _, took = _infer(serving, 1.0)
        assert 0.25 < took < 1.5
        _, _, took = _infer(serving, 2.0)  # Redis is marked down: no wait at all
        assert took < 0.25
    finally:
        redis_server.signal(signal.SIGCONT)
    assert _cache(serving)[:2] == (0, 3)
    # the lookup times out, or the first request's insert when the host is slow
    assert re.search(
        r"failed \((lookup|insert): TimeoutError: Timeout reading", serving.log.read_text()
    )


def test_options_are_refused_at_start_up_with_the_reason(
    redis_server: RedisServer, serve: Serve
) -> None:
    cases = {
        ("--cache-config=redis,host=127.0.0.1",): "Must at a minimum specify 'host' and 'port'",
        (*_redis_flags(redis_server, "pool_size=two"),): "pool_size must be a whole number",
        (*_redis_flags(redis_server, "sni=redis"),): "unknown option 'sni'",
        (
            "--cache-config=redis,host=127.0.0.1",
            f"--cache-config=redis,port={redis_server.port + 1}",
        ): "Failed to connect to Redis: Connection refused",
        (
            "--cache-config=redis,host=127.0.0.1",
            "--cache-config=redis,port=nonexistent",  # port 0, as Triton reads it
        ): "Failed to initialize RedisCache at 127.0.0.1:0: Failed to connect to Redis: "
        "Connection refused",
    }
    for flags, reason in cases.items():
        serving = serve(*flags, ready=False)
        assert serving.process.wait(60) != 0
        assert reason in serving.log.read_text()


def test_redis_authentication_failures_are_refused_with_redis_reply(
    redis_server: RedisServer, serve: Serve
) -> None:
    """As Triton's redis cache: a wrong password fails the start with Redis's WRONGPASS
    reply, none where one is required with NOAUTH; the right one (a flag or
    TRITONCACHE_REDIS_PASSWORD) serves."""
    assert redis_server.command("CONFIG", "SET", "requirepass", "pw") == "+OK"
    for extra, reply in (("password=wrong", "WRONGPASS"), (None, "NOAUTH Authentication required")):
        flags = _redis_flags(redis_server, *([extra] if extra else []))
        serving = serve(*flags, ready=False)
        assert serving.process.wait(60) != 0
        assert f"Failed to connect to Redis: {reply}" in serving.log.read_text()
    serving = serve(*_redis_flags(redis_server, "password=pw"))
    assert _infer(serving, 1.0)[0][0] == 2.0


def test_two_servers_share_hits_over_mutual_tls(
    tls_redis_server: RedisServer, serve: Serve
) -> None:
    """Triton's TLS options (``tls_enabled``, ``cert``, ``key``, ``cacert``) against a
    Redis that serves TLS only and asks for a client certificate; without TLS the
    start fails with the connection's reason."""
    tls = tls_redis_server.tls
    assert tls is not None
    secure = _redis_flags(
        tls_redis_server,
        "tls_enabled=true",
        f"cert={tls['client.crt']}",
        f"key={tls['client.key']}",
        f"cacert={tls['ca']}",
    )
    first, second = serve(*secure), serve(*secure)
    y, _, _ = _infer(first, 4.0)
    deadline = time.monotonic() + 5  # the insert is written in the background
    while tls_redis_server.command("DBSIZE") != ":1":
        assert time.monotonic() < deadline, "the entry never reached Redis"
        time.sleep(0.02)
    np.testing.assert_array_equal(_infer(second, 4.0)[0], y)
    assert _cache(second) == (1, 0, 0)
    plain = serve(*_redis_flags(tls_redis_server), ready=False)
    assert plain.process.wait(60) != 0
    assert "Failed to connect to Redis" in plain.log.read_text()
