"""``--grpc-restricted-protocol``: protocol groups that need a header to be called.

The flag's value is ``<group>[,<group>...]:<key>=<value>``; a call of a restricted group
must carry the metadata ``triton-grpc-protocol-<key>: <value>``, else it fails with
UNAVAILABLE and Triton's text. The values are parsed by
:func:`despina_frontend_grpc.options.parse_restrictions`; :func:`method_rules` gives the
HTTP/2 server (:meth:`~despina_frontend_grpc.grpc_server.Http2GrpcServer.refusal`) the
header each restricted method needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from despina import Restriction

SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"

#: Protocol group -> the RPC methods it covers (full method paths).
GROUPS: dict[str, tuple[str, ...]] = {
    "health": (
        f"/{SERVICE}/ServerLive",
        f"/{SERVICE}/ServerReady",
        f"/{SERVICE}/ModelReady",
        f"/{HEALTH_SERVICE}/Check",
        f"/{HEALTH_SERVICE}/Watch",
    ),
    "metadata": (f"/{SERVICE}/ServerMetadata", f"/{SERVICE}/ModelMetadata"),
    "inference": (f"/{SERVICE}/ModelInfer", f"/{SERVICE}/ModelStreamInfer"),
    "shared-memory": tuple(
        f"/{SERVICE}/{kind}SharedMemory{op}"
        for kind in ("System", "Cuda")
        for op in ("Status", "Register", "Unregister")
    ),
    "model-config": (f"/{SERVICE}/ModelConfig",),
    "model-repository": (
        f"/{SERVICE}/RepositoryIndex",
        f"/{SERVICE}/RepositoryModelLoad",
        f"/{SERVICE}/RepositoryModelUnload",
    ),
    "statistics": (f"/{SERVICE}/ModelStatistics",),
    "trace": (f"/{SERVICE}/TraceSetting",),
    "logging": (f"/{SERVICE}/LogSettings",),
}


def method_rules(restrictions: Mapping[str, Restriction]) -> dict[str, tuple[str, str]]:
    """Method path -> (metadata key, value) of every method in a restricted group."""
    return {
        method: (rule.header, rule.value)
        for group, rule in restrictions.items()
        for method in GROUPS[group]
    }
