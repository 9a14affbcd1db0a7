"""``TritonError`` (a response's error) and ``TritonModelException`` (raised by models)."""

from __future__ import annotations

from types import UnionType


class TritonError:
    """An error carried by an ``InferenceResponse``; ``code`` defaults to INTERNAL."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    NAMES = (
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    )

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if not 0 <= int(code) < len(self.NAMES):
            raise ValueError(f"invalid TritonError code {code}")
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self.NAMES[self._code]})"


class TritonModelException(Exception):
    """Raised by model code (or by this API) to fail the current call with a message."""

    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def require(value: object, kinds: type | UnionType, what: str) -> None:
    """Raise TypeError where Triton's bindings (pybind11) refuse an argument's type."""
    if not isinstance(value, kinds):
        raise TypeError(f"{what}: incompatible argument type {type(value).__name__}")
