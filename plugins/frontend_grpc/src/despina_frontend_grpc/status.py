"""gRPC status codes (the numbers of the gRPC specification's status codes), as Despina's
own gRPC server writes them in ``grpc-status``; grpcio itself is never imported by the
server. Each member's value is ``(number, name in lower case)``, the shape of grpcio's
``grpc.StatusCode``, so a member converts to grpcio's by name where a grpcio server hosts
the servicer (``grpc.StatusCode[code.name]``)."""

from __future__ import annotations

import enum


class StatusCode(enum.Enum):
    """A gRPC status: ``value[0]`` is the number sent in ``grpc-status``."""

    OK = (0, "ok")
    CANCELLED = (1, "cancelled")
    UNKNOWN = (2, "unknown")
    INVALID_ARGUMENT = (3, "invalid argument")
    DEADLINE_EXCEEDED = (4, "deadline exceeded")
    NOT_FOUND = (5, "not found")
    ALREADY_EXISTS = (6, "already exists")
    PERMISSION_DENIED = (7, "permission denied")
    RESOURCE_EXHAUSTED = (8, "resource exhausted")
    FAILED_PRECONDITION = (9, "failed precondition")
    ABORTED = (10, "aborted")
    OUT_OF_RANGE = (11, "out of range")
    UNIMPLEMENTED = (12, "unimplemented")
    INTERNAL = (13, "internal")
    UNAVAILABLE = (14, "unavailable")
    DATA_LOSS = (15, "data loss")
    UNAUTHENTICATED = (16, "unauthenticated")
