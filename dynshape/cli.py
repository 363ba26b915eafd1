"""The command-line interface: ``python -m dynshape`` or ``dynshape``.

Errors of ours (bad files, bad programs, bad arguments) are reported in one line with a non-zero
exit status, never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import ir
from dynshape_errors import DynShapeError

from .demo import run_demo


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dynshape", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="show the seed program through the compiler")
    show = sub.add_parser("compile", help="parse a program and print it after a stage")
    show.add_argument("file", help="a program in the text format")
    show.add_argument("--emit", choices=["parsed"], default="parsed", help="the stage to print")
    show.add_argument("-o", "--output", help="write here instead of standard output")
    return parser


def _compile(args: argparse.Namespace) -> int:
    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise DynShapeError(f"cannot read {args.file}: {e.strerror}") from None
    module = ir.parse(text, source_name=args.file)
    printed = str(module) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(printed)
    else:
        sys.stdout.write(printed)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    args = _build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo(sys.stdout)
        return _compile(args)
    except DynShapeError as e:
        print(f"dynshape: error: {e}", file=sys.stderr)
        return 1
