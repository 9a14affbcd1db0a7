"""The redis response cache: entries in a Redis server that several Despina servers share.

A lookup is a coroutine the request pipeline awaits (``HGETALL`` through ``redis.asyncio``
on the event loop); an insert is a background ``HSET``. Every call is bounded by the
options' timeouts (connect, socket, wait for a pooled connection). Redis failing (down,
slow, refusing) never fails an inference: the lookup is a miss, the insert is dropped, a
warning is logged at most every :data:`WARN_EVERY_S`, and for :data:`RETRY_AFTER_S` after
a failure the cache answers misses without asking Redis, so a dead Redis costs requests
nothing but their hits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from despina import CachedResponse, DeviceArray

from despina_cache_redis.codec import EntryError, decode, encode
from despina_cache_redis.options import RedisOptions

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("despina.cache.redis")

RETRY_AFTER_S = 1.0
WARN_EVERY_S = 30.0
#: Inserts in flight per pooled connection beyond which new ones are dropped.
INSERTS_PER_CONNECTION = 64


class RedisCache:
    """``--cache-config redis,host=H,port=P[,...]``: see :class:`RedisOptions`."""

    name: ClassVar[str] = "redis"

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = RedisOptions.parse(options)
        self._client: aioredis.Redis | None = None
        self._inserts: set[asyncio.Task[None]] = set()
        self._down_until = 0.0
        self._warned_at = -WARN_EVERY_S
        self._failures = 0
        #: What a failing call raises; redis's own errors join at :meth:`start`.
        self._errors: tuple[type[Exception], ...] = (OSError,)

    async def start(self) -> None:
        """Connect and PING, as Triton does at start-up; raises when Redis does not answer.
        redis is imported here, by a server configured with this cache (6 MiB resident)."""
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        # RuntimeError: uvloop's answer to a write on a connection Redis closed (asyncio's
        # loop drops such a write); a closed connection is a failing Redis either way.
        self._errors = (RedisError, OSError, RuntimeError)
        self._client = aioredis.Redis(connection_pool=_pool(self.options))
        try:
            await self._client.ping()
        except self._errors as exc:
            await self.stop()
            raise ConnectionError(
                f"Failed to initialize RedisCache at {self.options.address}: "
                f"Failed to connect to Redis: {self._reason(exc)}"
            ) from None
        log.info("redis cache at %s (db %d)", self.options.address, self.options.db)

    def _reason(self, exc: Exception) -> str:
        """Why the start-up PING failed, as Triton's redis cache words it: Redis's reply
        with its code (``WRONGPASS`` to a wrong password, ``NOAUTH`` to none where one
        is required; redis-py drops the code), or the connection's system error."""
        from redis.exceptions import AuthenticationError

        if isinstance(exc, AuthenticationError):
            return f"{'NOAUTH' if self.options.password is None else 'WRONGPASS'} {exc}"
        errno = re.match(r"Error (\d+) connecting", str(exc))
        return os.strerror(int(errno[1])) if errno else str(exc)

    async def stop(self) -> None:
        for task in list(self._inserts):
            task.cancel()
        if self._client is not None:
            await self._client.aclose(close_connection_pool=True)
            self._client = None

    def lookup(self, key: bytes) -> Coroutine[Any, Any, CachedResponse | None] | None:
        """A miss at once while Redis is marked down, else the entry read from Redis."""
        if self._client is None or time.monotonic() < self._down_until:
            return None
        return self._read(self._client, key.hex())

    def insert(
        self,
        key: bytes,
        outputs: Mapping[str, np.ndarray | DeviceArray],
        parameters: Mapping[str, object],
    ) -> None:
        """Write the entry in the background (dropped while Redis is down or busy)."""
        limit = INSERTS_PER_CONNECTION * self.options.pool_size
        if self._client is None or time.monotonic() < self._down_until:
            return
        if len(self._inserts) >= limit:
            return
        task = asyncio.get_running_loop().create_task(
            self._write(self._client, key.hex(), encode(outputs, parameters))
        )
        self._inserts.add(task)
        task.add_done_callback(self._inserts.discard)

    async def _read(self, client: aioredis.Redis, key: str) -> CachedResponse | None:
        try:
            fields = await client.hgetall(key)
        except self._errors as exc:
            self._failed("lookup", exc)
            return None
        self._answered()
        if not fields:
            return None
        try:
            return decode(fields)
        except EntryError as exc:
            log.warning("redis cache: key %s holds %s; taken as a miss", key, exc)
            return None

    async def _write(self, client: aioredis.Redis, key: str, fields: dict[str, bytes]) -> None:
        try:
            await client.hset(key, mapping=fields)  # type: ignore[arg-type]
        except self._errors as exc:
            self._failed("insert", exc)
            return
        self._answered()

    def _failed(self, what: str, exc: BaseException) -> None:
        """Mark Redis down for RETRY_AFTER_S; warn unless a warning went out recently."""
        now = time.monotonic()
        self._down_until = now + RETRY_AFTER_S
        self._failures += 1
        if now - self._warned_at >= WARN_EVERY_S:
            log.warning(
                "redis cache at %s failed (%s: %s: %s; %d failures since the last warning): "
                "requests run as cache misses, retrying every %g s",
                self.options.address,
                what,
                type(exc).__name__,
                exc,
                self._failures,
                RETRY_AFTER_S,
            )
            self._warned_at = now
            self._failures = 0

    def _answered(self) -> None:
        if self._down_until:
            log.info("redis cache at %s answers again", self.options.address)
            self._down_until = 0.0


def _pool(options: RedisOptions) -> aioredis.BlockingConnectionPool:
    """The connection pool of ``options``: ``pool_size`` connections, each call bounded
    by the connect and socket timeouts, a wait for a free connection by ``wait_timeout``."""
    import redis.asyncio as aioredis

    kwargs: dict[str, Any] = {
        "host": options.host,
        "port": options.port,
        "db": options.db,
        "username": options.user if options.password is not None else None,
        "password": options.password,
        "protocol": 2,  # RESP2, as Triton's redis++ (redis-py 8 would send HELLO 3)
        "socket_connect_timeout": _seconds(options.connect_timeout),
        "socket_timeout": _seconds(options.socket_timeout),
        "max_connections": options.pool_size,
        "timeout": _seconds(options.wait_timeout),
    }
    if options.tls_enabled:
        kwargs |= {
            "connection_class": aioredis.SSLConnection,
            "ssl_certfile": options.cert,
            "ssl_keyfile": options.key,
            "ssl_ca_certs": options.cacert,
            "ssl_ca_path": options.cacert_dir,
        }
    return aioredis.BlockingConnectionPool(**kwargs)


def _seconds(milliseconds: int) -> float | None:
    """Triton's milliseconds as redis-py's seconds; 0 is no limit (None)."""
    return milliseconds / 1000 if milliseconds else None
