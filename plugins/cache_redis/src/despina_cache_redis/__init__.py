"""despina-cache-redis: Triton's redis response cache (``--cache-config redis,...``)."""

from despina_cache_redis.cache import RedisCache
from despina_cache_redis.options import RedisOptions

__all__ = ["RedisCache", "RedisOptions"]
