"""`infertune`: the command line. Each subcommand lives in its own module under `commands/`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from infertune import __version__, commands


# Every public module under `commands/` exposes `register(subparsers)`, which adds its parser and
# sets `func(args) -> int`; discovering them means a new command never edits this file.
def command_modules() -> tuple[str, ...]:
    return tuple(f"{commands.__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(commands.__path__),
                                                                   key=lambda m: m.name)
                 if not m.name.startswith("_"))


class UserError(Exception):
    """Bad input from the user: printed as one clear line, exit code 2, never a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infertune", description=__doc__)
    parser.add_argument("--version", action="version", version=f"infertune {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, FileNotFoundError) as exc:
        print(f"infertune {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `infertune plan ... | head` closed the pipe early: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
