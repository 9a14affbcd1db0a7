"""Despina's Vertex AI frontend: tritonserver's ``--allow-vertex-ai`` endpoints (the
``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE`` routes, the ``X-Vertex-Ai-Triton-Redirect``
header) on a port of their own."""
