"""Error types, one per status Triton reports.

Frontends map each class to its protocol: ``http_status`` for HTTP/REST and
``grpc_code`` (the name of a ``grpc.StatusCode`` member) for gRPC. The message is the
text a client sees, so it must never name internal paths or shared-memory keys.
"""

from __future__ import annotations

from typing import ClassVar

#: How Triton names a status code where it writes a status as text ("Internal: ...").
_TRITON_CODE_TEXT = {
    "UNKNOWN": "Unknown",
    "INTERNAL": "Internal",
    "INVALID_ARG": "Invalid argument",
    "NOT_FOUND": "Not found",
    "UNAVAILABLE": "Unavailable",
    "UNSUPPORTED": "Unsupported",
    "ALREADY_EXISTS": "Already exists",
}


class DespinaError(Exception):
    """Base of every error that reaches a client; ``str(error)`` is the client's text."""

    http_status: ClassVar[int] = 500
    grpc_code: ClassVar[str] = "INTERNAL"
    #: Triton's TRITONSERVER_Error_Code name, used by the Python backend's TritonError.
    triton_code: ClassVar[str] = "INTERNAL"

    @property
    def message(self) -> str:
        return str(self)

    @property
    def status_text(self) -> str:
        """The error as Triton writes a status, e.g. in a model's load failure reason:
        ``"Internal: <message>"``."""
        return f"{_TRITON_CODE_TEXT.get(self.triton_code, 'Unknown')}: {self}"


class InvalidArgument(DespinaError):
    """The client sent something wrong (bad shape, dtype, JSON, ...)."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"
    triton_code = "INVALID_ARG"


class NotFound(DespinaError):
    """The named model, version or region does not exist."""

    http_status = 404
    grpc_code = "NOT_FOUND"
    triton_code = "NOT_FOUND"


class Unavailable(DespinaError):
    """The model or server exists but cannot serve now (not ready, queue full, stopping)."""

    http_status = 503
    grpc_code = "UNAVAILABLE"
    triton_code = "UNAVAILABLE"


class Unsupported(DespinaError):
    """The request asks for something this server or model does not support."""

    http_status = 501  # Triton's HTTP status for UNSUPPORTED
    grpc_code = "UNIMPLEMENTED"
    triton_code = "UNSUPPORTED"


class AlreadyExists(DespinaError):
    """The thing to create exists already (e.g. a shared-memory region name)."""

    http_status = 400  # Triton's HTTP status for ALREADY_EXISTS
    grpc_code = "ALREADY_EXISTS"
    triton_code = "ALREADY_EXISTS"


class PermissionDenied(DespinaError):
    """A restricted endpoint was called without the required header or opt-in."""

    http_status = 403
    grpc_code = "PERMISSION_DENIED"
    triton_code = "UNAVAILABLE"


class Cancelled(DespinaError):
    """The request was cancelled by its client or by server shutdown."""

    http_status = 499
    grpc_code = "CANCELLED"
    triton_code = "CANCELLED"


class DeadlineExceeded(DespinaError):
    """The request timed out in the queue."""

    http_status = 504
    grpc_code = "DEADLINE_EXCEEDED"
    triton_code = "UNAVAILABLE"


class Unknown(DespinaError):
    """An error a model reported with Triton's UNKNOWN code."""

    http_status = 400  # Triton's HTTP status for UNKNOWN
    grpc_code = "UNKNOWN"
    triton_code = "UNKNOWN"


class Internal(DespinaError):
    """Something failed inside the server or a model (not the client's fault)."""


class ConfigError(InvalidArgument):
    """A model configuration is invalid; the message names the file, line and field."""


def error_named(name: str, message: str) -> DespinaError:
    """The error class called ``name`` (one of this module's) with ``message``, as another
    serving process raised it; Unavailable for a name that is none of them."""
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, DespinaError)):
        cls = Unavailable
    return cls(message)
