"""OpenAI's error answer: ``{"error": {"message", "type", "param", "code"}}`` with its
HTTP status (400 bad request, 401 restricted, 404 unknown model, 413 too large, 500)."""

from __future__ import annotations

import json

from despina import DespinaError
from despina_frontend_http import Response

#: The Content-Type of every JSON answer (FastAPI's, as Triton's OpenAI frontend sends).
JSON_HEADERS = {"Content-Type": "application/json"}

#: OpenAI's error ``type`` per HTTP status.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    503: "service_unavailable",
}


class OpenAIError(Exception):
    """A request answered with OpenAI's error body and ``status``."""

    def __init__(
        self, message: str, status: int = 400, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code

    @classmethod
    def of(cls, error: DespinaError) -> OpenAIError:
        """A Despina error (its HTTP status and text) as an OpenAI error."""
        return cls(str(error), error.http_status)

    def body(self) -> dict[str, object]:
        """The JSON answer (also one server-sent event's, mid-stream)."""
        kind = _TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }

    def response(self) -> Response:
        """The error as a whole answer."""
        return Response(self.status, JSON_HEADERS, json.dumps(self.body()).encode())


def unknown_model(name: str) -> OpenAIError:
    """404 ``model_not_found``, OpenAI's answer for a model it does not serve."""
    return OpenAIError(
        f"The model '{name}' does not exist", 404, param="model", code="model_not_found"
    )
