"""OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi.responses import JSONResponse

from cascade_cli.errors import CascadeError, ContextFullError, InputError

log = logging.getLogger("cascade.serve")


class ApiError(Exception):
    """An error answered to the client as OpenAI does."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body (also the payload of a stream's error event)."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_field(param: str, message: str) -> ApiError:
    """400 invalid_request_error naming the field."""
    return ApiError(400, message, param=param, code="invalid_value")


def internal(message: str = "The server had an error while processing your request.") -> ApiError:
    """500 server_error (details are logged, never sent)."""
    return ApiError(500, message, type="server_error", code="internal_error")


def from_cascade(exc: CascadeError, param: str = "messages") -> ApiError:
    """The engine's errors as API errors: unusable input and a prompt that does not fit are the
    client's (400; `param`: the field holding the prompt); anything else is the server's (500,
    message without internals)."""
    if isinstance(exc, ContextFullError):
        return ApiError(400, exc.one_line(), param=param, code="context_length_exceeded")
    if isinstance(exc, InputError):
        return ApiError(400, exc.one_line(), code="invalid_value")
    log.error("internal error: %s", exc.one_line())
    return internal()
