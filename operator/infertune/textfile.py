"""The text of a file a user names (a resource, a policy, samples, a trace, a token): read whole as
UTF-8, or refused in one line that names the flag. Shared by the operator's commands and the lab's
trace reader, so both answer a binary file, a directory or an unreadable path the same way."""

from __future__ import annotations

from pathlib import Path

from infertune.errors import UserError


def read_text(path: str | Path, flag: str) -> str:
    """The text of a file the user named, as UTF-8 (a byte-order mark is dropped); anything else
    (missing, a directory, unreadable, not text) is one line naming the flag, never a traceback."""
    target = Path(path)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{flag}: no such file {target}") from None
    except IsADirectoryError:
        raise UserError(f"{flag}: {target} is a directory, not a file") from None
    except OSError as exc:
        raise UserError(f"{flag}: cannot read {target}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{flag}: {target} is not UTF-8 text (byte {exc.start} is "
                        f"0x{raw[exc.start]:02x})") from None
