"""Triton's option names and defaults; a response's round trip through the entry layout."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from despina_cache_redis.codec import EntryError, decode, encode
from despina_cache_redis.options import RedisOptions


def test_triton_defaults_and_environment_credentials() -> None:
    options = RedisOptions.parse(
        {"host": "redis", "port": "6379"},
        environ={"TRITONCACHE_REDIS_USERNAME": "u", "TRITONCACHE_REDIS_PASSWORD": "p"},
    )
    assert (options.user, options.password, options.db, options.pool_size) == ("u", "p", 0, 1)
    assert (options.wait_timeout, options.connect_timeout, options.socket_timeout) == (
        1000,
        1000,
        1000,
    )
    flags_win = RedisOptions.parse({"host": "h", "port": "1", "password": "q"}, {"x": "y"})
    assert (flags_win.user, flags_win.password) == ("default", "q")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"host": "h"}, "Must at a minimum specify 'host' and 'port'"),
        ({"host": "h", "port": "70000"}, "port out of range"),
        ({"host": "h", "port": "1", "db": "-1"}, "db must be a whole number"),
        ({"host": "h", "port": "1", "pool_size": "0"}, "pool_size out of range"),
        ({"host": "h", "port": "1", "tls_enabled": "yes"}, "tls_enabled must be true or false"),
        ({"host": "h", "port": "1", "cacert": "/ca.pem"}, "cacert needs tls_enabled=true"),
        ({"host": "h", "port": "1", "timeout": "5"}, "unknown option 'timeout'"),
    ],
)
def test_bad_options_are_refused_with_the_reason(options: dict[str, str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        RedisOptions.parse(options, environ={})


def test_a_response_round_trips_through_the_entry() -> None:
    outputs = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([b"", b"\x00bytes", b"text"], dtype=np.object_),
        "h": np.ones(2, ml_dtypes.bfloat16),
        "e": np.zeros((0, 4), np.int64),
    }
    fields = encode(outputs, {"sequence_end": True, "n": 3, "s": "x"})
    assert fields.keys() == {"0:b", "0:s", "0:t", "0:i"} and fields["0:t"] == b"0"
    entry = decode({k.encode(): v for k, v in fields.items()})
    for name, array in outputs.items():
        assert entry.outputs[name].dtype == array.dtype and entry.outputs[name].shape == array.shape
        assert entry.outputs[name].tolist() == array.tolist()
    entry.outputs["f"][0, 0] = 9  # hits are arrays the caller may write
    assert entry.parameters == {"sequence_end": True, "n": 3, "s": "x"}


@pytest.mark.parametrize(
    "damage",
    [
        lambda f: {**f, b"0:b": f[b"0:b"][:-1]},
        lambda f: {**f, b"0:b": b"TRTN" + f[b"0:b"][4:]},
        lambda f: {**f, b"1:b": b""},
        lambda f: {**f, b"0:b": f[b"0:b"][:12]},
    ],
)
def test_entries_not_written_by_despina_are_refused(damage: object) -> None:
    fields = {k.encode(): v for k, v in encode({"f": np.ones(3, np.float32)}, {}).items()}
    with pytest.raises(EntryError):
        decode(damage(fields))  # type: ignore[operator]
