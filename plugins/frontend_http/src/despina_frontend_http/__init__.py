"""Despina's HTTP/REST frontend (KServe v2 + Triton extensions) on aiohttp."""
