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
from typing import NoReturn

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


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag answered in one line that names the command and the flag (the usage
    is a `--help` away). Subcommands' parsers are of this class too (argparse makes them like their
    parent)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)}\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, or, when `argv` names a command, only that command's parser: importing
    every command (the lab's bench and demo pull in matplotlib, the operator's run kopf and the
    Kubernetes client) took seconds before `infertune plan` read its first flag."""
    parser = Parser(prog="infertune", description=__doc__)
    parser.add_argument("--version", action="version", version=f"infertune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = command_modules()
    wanted = None if argv is None else _command_named(argv)
    for name in [m for m in modules if m.rsplit(".", 1)[-1] == wanted] or modules:
        importlib.import_module(name).register(sub)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command `argv` runs: its first word that is not a flag (the top level takes no flag with a value).
    None when the top level's help comes first (`infertune -h plan` lists every command)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _missing_lab_command(argv: Sequence[str]) -> str | None:
    """The lab command asked for when the lab is not installed (the operator's image)."""
    wanted = _command_named(argv)
    present = {name.rsplit(".", 1)[-1] for name in command_modules()}
    return wanted if wanted in LAB_COMMANDS and wanted not in present else None


def main(argv: Sequence[str] | None = None) -> int:
    missing = _missing_lab_command(sys.argv[1:] if argv is None else argv)
    if missing is not None:
        print(f"infertune {missing}: error: this command is part of the lab; install it with "
              f"`pip install infertune-lab` (the operator's image does not carry it)", file=sys.stderr)
        return 2
    try:
        args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    except SystemExit as exc:  # argparse answered (a bad flag in one line, or --help): its exit code
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.func(args) or 0)
    except InfertuneError as exc:
        print(f"infertune {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path the user named: missing, unreadable, not writable, disk full
        if isinstance(exc, BrokenPipeError):  # `infertune plan ... | head` closed the pipe early: not an error
            sys.stderr.close()
            return 0
        detail = f"{exc.filename or ''} {exc.strerror or exc}"
        print(f"infertune {args.command}: error: {_one_line(detail)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line for the user, the traceback only when asked for
        if os.environ.get(TRACEBACK_ENV):
            raise
        print(f"infertune {args.command}: internal error: {type(exc).__name__}: {_one_line(str(exc))} (a bug; "
              f"rerun with "
              f"{TRACEBACK_ENV}=1 for the traceback, and please report it)", file=sys.stderr)
        return 1


def _one_line(message: str) -> str:
    """A message as one line, whatever a file or a value it quotes held (a newline, a tab)."""
    return " ".join(message.split()) if message else message


if __name__ == "__main__":
    sys.exit(main())
