"""Triton's exception classes, and the one translation from Despina's errors to them."""

from __future__ import annotations

from despina import (
    AlreadyExists,
    DespinaError,
    Internal,
    InvalidArgument,
    NotFound,
    Unavailable,
    Unknown,
    Unsupported,
)


class TritonError(Exception):
    """Base of every error the API raises (Triton's ``TritonError``)."""


class UnknownError(TritonError):
    pass


class InternalError(TritonError):
    pass


class NotFoundError(TritonError):
    pass


class InvalidArgumentError(TritonError):
    pass


class UnavailableError(TritonError):
    pass


class UnsupportedError(TritonError):
    pass


class AlreadyExistsError(TritonError):
    pass


ERRORS = (
    TritonError,
    UnknownError,
    InternalError,
    NotFoundError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    AlreadyExistsError,
)

#: Despina's error classes and the Triton class each becomes; any other: TritonError.
_BY_DESPINA: dict[type[DespinaError], type[TritonError]] = {
    AlreadyExists: AlreadyExistsError,
    Internal: InternalError,
    InvalidArgument: InvalidArgumentError,
    NotFound: NotFoundError,
    Unavailable: UnavailableError,
    Unknown: UnknownError,
    Unsupported: UnsupportedError,
}


def triton_error(error: DespinaError) -> TritonError:
    """The Triton exception for a Despina error, with the same text."""
    for despina_class in type(error).__mro__:
        triton_class = _BY_DESPINA.get(despina_class)
        if triton_class is not None:
            return triton_class(str(error))
    return TritonError(str(error))
