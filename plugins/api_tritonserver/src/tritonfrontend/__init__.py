"""Triton's ``tritonfrontend``: KServe HTTP and gRPC and the metrics endpoint, started over
an in-process ``tritonserver.Server`` — here Despina's frontends over Despina's server
(distribution ``despina-tritonserver-api``; ``__despina__`` is True)."""

from tritonserver._provenance import version, warn_if_shadowing

from tritonfrontend._services import KServeGrpc, KServeHttp, Metrics

#: True: this is Despina's implementation, not NVIDIA's C binding.
__despina__ = True
__version__ = version()
__all__ = ["KServeGrpc", "KServeHttp", "Metrics"]

warn_if_shadowing("tritonfrontend")
