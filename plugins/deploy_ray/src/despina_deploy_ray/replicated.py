"""Requests a replica refuses because they would change it alone: every replica of the
deployment serves the same repository with the same settings, and Ray Serve sends each
request to any one of them, so a change made through one would make it differ from the
others (and be lost when Ray replaces it). Both protocols refuse them with
:class:`PerReplica` (HTTP 409, gRPC FAILED_PRECONDITION) and a text saying what to do.
"""

from __future__ import annotations

from despina import DespinaError


class PerReplica(DespinaError):
    """The request would change only the replica that answers it."""

    http_status = 409
    grpc_code = "FAILED_PRECONDITION"
    triton_code = "UNAVAILABLE"


_WHY = "on a Ray Serve deployment: it would change only the replica that answers"

#: The texts (raise ``PerReplica(text)``). Model load and unload:
MODEL_CONTROL = (
    f"model load and unload are not available {_WHY}; change the repository and "
    "redeploy, or run the replicas with --model-control-mode=poll (each polls the "
    "repository)"
)
#: Shared-memory registration and unregistration (system and CUDA).
SHARED_MEMORY = (
    f"shared-memory registration is not available {_WHY}, and requests go to any "
    "replica on any node; send tensors in the request instead"
)
#: Log and trace setting updates.
SETTINGS = (
    f"changing log or trace settings is not available {_WHY}; give them on the "
    "replicas' command line and redeploy"
)
