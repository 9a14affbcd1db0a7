"""The ``despina`` entry point: the "redis" response cache."""

from __future__ import annotations

from despina import ResponseCache, hookimpl

from despina_cache_redis.cache import RedisCache


@hookimpl
def despina_response_caches() -> list[type[ResponseCache]]:
    return [RedisCache]
