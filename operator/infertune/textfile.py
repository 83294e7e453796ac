"""The text of a file a user names (a resource, a policy, samples, a trace, a token): read whole as
UTF-8, or refused in one line that names the flag; and the numbers in it (or on the command line) read
only when plainly written. Shared by the operator's commands and the lab's trace reader, so both answer
a binary file, a directory, an unreadable path or a pasted `1_000` the same way."""

from __future__ import annotations

import csv
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from infertune.errors import UserError

# No file a command reads comes near this (a week of a request log is tens of MB); more is a stream with no
# end (`<(yes)`), which would be read until memory ran out.
TEXT_MAX_BYTES = 1 << 30


def read_text(path: str | Path, flag: str) -> str:
    """The text of a file the user named, as UTF-8 (a byte-order mark is dropped); anything else
    (missing, a directory, a device, unreadable, not text, past TEXT_MAX_BYTES) is one line naming the
    flag, never a traceback or a hang. A pipe is read (`--trace <(zcat trace.csv.gz)`); a FIFO no one
    writes to reads as empty instead of waiting for ever."""
    target = Path(path)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{flag}: no such file {target}") from None
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {target}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{flag}: {target} is a directory, not a file")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        # /dev/zero or /dev/urandom would be read until memory ran out, a terminal until ^D.
        raise UserError(f"{flag}: {target} is not a regular file (a device or socket); name a file to read")
    try:
        raw = _read_bytes(target)
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {target}: {exc.strerror or exc}") from None
    if len(raw) > TEXT_MAX_BYTES:
        raise UserError(f"{flag}: {target} holds more than {TEXT_MAX_BYTES >> 30} GiB; no input of a command is "
                        "that large")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{flag}: {target} is not UTF-8 text (byte {exc.start} is "
                        f"0x{raw[exc.start]:02x})") from None


def _read_bytes(target: Path) -> bytes:
    """At most TEXT_MAX_BYTES + 1 bytes. Opened without blocking, so that a FIFO no process writes to
    opens at once (and then reads as empty), then read blocking, so that a pipe's writer is waited for."""
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        return handle.read(TEXT_MAX_BYTES + 1)


def csv_problem(exc: csv.Error) -> str:
    """What the csv module refused in a row, in words for the user: the field limit is the one a file of
    figures meets (a line of megabytes without a comma), and csv's own message names no line or flag."""
    if "field limit" in str(exc):
        return f"a field longer than {csv.field_size_limit():,} characters, which no figure is"
    return f"not CSV ({exc})"


class JsonPastLimits(Exception):
    """JSON that is valid but that Python will not read: an integer of more than 4,300 digits (int() refuses
    it), or nesting deeper than the recursion limit. `too_deep` says which; each caller words it for its input."""

    def __init__(self, too_deep: bool) -> None:
        super().__init__("nested too deeply" if too_deep else "an integer of more than 4,300 digits")
        self.too_deep = too_deep


def load_json(text: str) -> Any:
    """json.loads, with what it raises besides a syntax error as one JsonPastLimits. A syntax error
    (json.JSONDecodeError) is raised as it is, for the caller to word with its line. Pure: the commands (a
    config.json named by a flag) and the planner (one from a ConfigMap) share it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # Python's limit on an integer's digits
        raise JsonPastLimits(too_deep=False) from None
    except RecursionError:
        raise JsonPastLimits(too_deep=True) from None


# A number as a person types one: ASCII digits, a sign, a point and an exponent. int() and float() also take
# `1_000`, other scripts' digits ('١٢', '１２') and Unicode spaces around them: a paste or a typo, not a figure to
# guess at. float()'s own words for NaN and infinity still read as such, for the range check to refuse in its words.
_PLAIN_INTEGER = re.compile(r"[+-]?[0-9]+")
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))")
_ASCII_SPACE = " \t\n\r\f\v"


def plain_number(text: str, *, integer: bool = False) -> int | float | None:
    """`text` as an int (with `integer`) or a float when it is plainly written, else None. The flags, the
    samples of `fit` and `plan` (commands/_inputs.py) and the lab's traces read their numbers through it."""
    written = text.strip(_ASCII_SPACE)
    if not (_PLAIN_INTEGER if integer else _PLAIN_DECIMAL).fullmatch(written):
        return None
    try:
        return int(written) if integer else float(written)
    except ValueError:  # an integer past Python's 4,300 digits: past every flag's range too
        return None
