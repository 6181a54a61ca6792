"""Errors of the sediment API, one exception type per code family, each carrying the API's
`code`, the HTTP status and the message."""

from __future__ import annotations

from typing import Optional


class SedimentError(Exception):
    """Any error answer of the API, or no answer at all (`status` 0, code `unreachable`)."""

    def __init__(self, status: int, code: str, message: str, retry_after: Optional[float] = None):
        super().__init__(f"{code} ({status}): {message}")
        self.status = status
        self.code = code
        self.message = message
        #: Seconds the API asked to wait (429, 503), when it said.
        self.retry_after = retry_after


class Unreachable(SedimentError):
    """No answer: the connection failed or timed out."""


class InvalidRequest(SedimentError):
    """400, 413, 415, 422: the request is wrong; sending it again will not help."""


class Unauthorized(SedimentError):
    """401: no credential, or one the API does not know."""


class Forbidden(SedimentError):
    """403: the credential may not do this (another team, agent or user; too little permission)."""


class NotFound(SedimentError):
    """404: nothing of the caller's has that id."""


class Conflict(SedimentError):
    """409."""


class RateLimited(SedimentError):
    """429: the team's rate limit or turn quota (`code` says which); see `retry_after`."""


class Unavailable(SedimentError):
    """503: a backend is down; nothing was stored. See `retry_after`."""


class ServerError(SedimentError):
    """Another 5xx."""


def error_for(status: int, code: str, message: str, retry_after: Optional[float] = None) -> SedimentError:
    """The exception for an error answer."""
    if status in (400, 413, 415, 422):
        kind = InvalidRequest
    elif status == 401:
        kind = Unauthorized
    elif status == 403:
        kind = Forbidden
    elif status == 404:
        kind = NotFound
    elif status == 409:
        kind = Conflict
    elif status == 429:
        kind = RateLimited
    elif status == 503:
        kind = Unavailable
    elif status >= 500:
        kind = ServerError
    else:
        kind = SedimentError
    return kind(status, code, message, retry_after)
