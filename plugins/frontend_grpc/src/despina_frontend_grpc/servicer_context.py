"""What the servicers use of a call's context: the gRPC frontend's own calls pass a
:class:`~despina_frontend_grpc.rpc_dispatch.CallContext`; hosts serving the servicer
elsewhere (the Ray Serve deployment) pass their own."""

from __future__ import annotations

from typing import Any, Protocol

from despina_frontend_grpc.status import StatusCode


class ServicerContext(Protocol):
    """The part of ``grpc.aio.ServicerContext`` the servicers use."""

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]: ...

    async def abort(self, code: StatusCode, details: str = "") -> None:
        """End the call with ``code`` and ``details``: raises, never returns."""
