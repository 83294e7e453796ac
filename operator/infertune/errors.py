"""The one root of infertune's own exceptions, and the kinds under it.

Callers catch these, never a bare ValueError: an internal bug must surface as a bug (a traceback in
the operator's log, exit code 1), not pass as a bad spec or bad input."""

from __future__ import annotations


class InfertuneError(Exception):
    """Anything infertune reports on purpose; the message is written for the person reading it."""


class UserError(InfertuneError):
    """Bad input on the command line or in a file it names: one clear line, exit code 2."""


class SpecError(InfertuneError):
    """A resource that cannot be acted on as written; the message starts with the field's path."""


class ApiError(InfertuneError):
    """A call to the Kubernetes API server failed. Status 0: the server was not reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def retryable(self) -> bool:
        """Worth trying again later: unreachable, a conflict, throttled, or the server's own fault."""
        return self.status in (0, 409, 429) or self.status >= 500

    @property
    def retry_after(self) -> float:
        return 5.0 if self.status == 0 else 2.0


class SourceError(InfertuneError):
    """A metrics source failed, or answered with something that cannot be trusted."""


class StatusError(InfertuneError):
    """A status field the operator wrote and can no longer read (edited by hand, or by an older version)."""
