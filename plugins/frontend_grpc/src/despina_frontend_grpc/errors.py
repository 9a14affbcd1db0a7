"""Turning exceptions into gRPC statuses: DespinaError's ``grpc_code`` and text, anything
else INTERNAL with a text that names no internals (the traceback goes to the log)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from despina import DespinaError

from despina_frontend_grpc.status import StatusCode

if TYPE_CHECKING:
    from despina_frontend_grpc.servicer_context import ServicerContext

log = logging.getLogger("despina.frontend.grpc")

INTERNAL_TEXT = "internal server error; the server log has the details"
#: Triton's text for a request message that does not parse.
UNPARSABLE_TEXT = "Unable to parse request"


class Unparsable:
    """Stands for a request message that failed to parse (see :func:`rpc_dispatch.parse`)."""


UNPARSABLE = Unparsable()

R = TypeVar("R")


def status_of(error: DespinaError) -> StatusCode:
    """The gRPC status code of a DespinaError (INTERNAL for an unknown code name)."""
    return getattr(StatusCode, error.grpc_code, StatusCode.INTERNAL)


def client_text(exc: BaseException) -> str:
    """What a client may read about ``exc``; unexpected exceptions are logged here."""
    if isinstance(exc, DespinaError):
        return str(exc)

    log.error("gRPC request failed", exc_info=exc)
    return INTERNAL_TEXT


def guarded(
    handler: Callable[[Any, Any, ServicerContext], Awaitable[R]],
) -> Callable[[Any, Any, ServicerContext], Awaitable[R]]:
    """Wrap a unary RPC method: errors end the call with their status, never the server."""

    @functools.wraps(handler)
    async def run(self: Any, request: Any, context: ServicerContext) -> R:
        if request is UNPARSABLE:
            await context.abort(StatusCode.INTERNAL, UNPARSABLE_TEXT)
        try:
            return await handler(self, request, context)
        except DespinaError as exc:
            await context.abort(status_of(exc), str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            await context.abort(StatusCode.INTERNAL, client_text(exc))
        raise AssertionError("unreachable: abort raises")

    return run
