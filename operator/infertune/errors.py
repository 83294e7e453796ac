"""The one root of infertune's own exceptions, and the kinds under it.

Callers catch these, never a bare ValueError: an internal bug must surface as a bug (a traceback in
the operator's log, exit code 1), not pass as a bad spec or bad input."""

from __future__ import annotations


class InfertuneError(Exception):
    """Anything infertune reports on purpose; the message is written for the person reading it."""


class UserError(InfertuneError):
    """Bad input on the command line or in a file it names: one clear line, exit code 2."""
