"""``--grpc-restricted-protocol``: protocol groups that need a header to be called.

The flag's value is ``<group>[,<group>...]:<key>=<value>``; a call of a restricted group
must carry the metadata ``triton-grpc-protocol-<key>: <value>``, else it fails with
UNAVAILABLE and Triton's text. The values are parsed by
:func:`despina_frontend_grpc.options.parse_restrictions`; the interceptor is installed only
when restrictions exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
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


def _refusal(header: str) -> Callable[..., Awaitable[Any]]:
    message = f"This protocol is restricted, expecting header '{header}'"

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    return refuse


class RestrictionInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses calls of restricted methods that lack the group's header and value."""

    def __init__(self, methods: dict[str, tuple[str, str]]) -> None:
        self.methods = methods

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        rule = self.methods.get(details.method)
        if rule is None:
            return await continuation(details)
        header, expected = rule
        if any(k == header and v == expected for k, v in details.invocation_metadata or ()):
            return await continuation(details)
        handler = await continuation(details)
        refuse = _refusal(header)
        if handler is not None and handler.request_streaming:
            if handler.response_streaming:
                return grpc.stream_stream_rpc_method_handler(refuse)
            return grpc.stream_unary_rpc_method_handler(refuse)
        if handler is not None and handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(refuse)
        return grpc.unary_unary_rpc_method_handler(refuse)
