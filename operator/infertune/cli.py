"""`infertune`: the command line. Each subcommand lives in its own module under `commands/`."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Sequence

from infertune import __version__, commands
from infertune.errors import InfertuneError

# The lab's commands, when its distribution (infertune-lab) is not installed: named in the error.
LAB_COMMANDS = ("bench", "demo", "simulate")
ENTRY_POINTS = "infertune.commands"
# Set to see the traceback of an internal error instead of its one line.
TRACEBACK_ENV = "INFERTUNE_TRACEBACK"


# Every public module under `commands/` exposes `register(subparsers)`, which adds its parser and
# sets `func(args) -> int`; discovering them means a new command never edits this file. Other
# distributions (the lab) add theirs through the `infertune.commands` entry points.
def command_modules() -> tuple[str, ...]:
    own = [f"{commands.__name__}.{m.name}" for m in pkgutil.iter_modules(commands.__path__)
           if not m.name.startswith("_")]
    added = [ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINTS) if _importable(ep.value)]
    return tuple(sorted(set(own) | set(added), key=lambda name: name.rsplit(".", 1)[-1]))


def _importable(module: str) -> bool:
    """A distribution that registered commands but cannot be imported (half uninstalled) must not
    break every other command; its commands then answer as if it were absent."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infertune", description=__doc__)
    parser.add_argument("--version", action="version", version=f"infertune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(name).register(sub)
    return parser


def _missing_lab_command(argv: Sequence[str]) -> str | None:
    """The lab command asked for when the lab is not installed (the operator's image)."""
    wanted = next((a for a in argv if not a.startswith("-")), None)
    present = {name.rsplit(".", 1)[-1] for name in command_modules()}
    return wanted if wanted in LAB_COMMANDS and wanted not in present else None


def main(argv: Sequence[str] | None = None) -> int:
    missing = _missing_lab_command(sys.argv[1:] if argv is None else argv)
    if missing is not None:
        print(f"infertune {missing}: error: this command is part of the lab; install it with "
              f"`pip install infertune-lab` (the operator's image does not carry it)", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InfertuneError as exc:
        print(f"infertune {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user named: missing, unreadable, not writable, disk full
        if isinstance(exc, BrokenPipeError):  # `infertune plan ... | head` closed the pipe early: not an error
            sys.stderr.close()
            return 0
        where = f" {exc.filename}" if exc.filename else ""
        print(f"infertune {args.command}: error:{where} {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line for the user, the traceback only when asked for
        if os.environ.get(TRACEBACK_ENV):
            raise
        print(f"infertune {args.command}: internal error: {type(exc).__name__}: {exc} (a bug; rerun with "
              f"{TRACEBACK_ENV}=1 for the traceback, and please report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
