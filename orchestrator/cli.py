"""The `turntaker` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _diagrams(args: argparse.Namespace) -> int:
    from statecharts.diagrams import write_all

    for path in write_all(Path(args.out)):
        print(path)
    return 0


def _triton(args: argparse.Namespace) -> int:
    from orchestrator.triton.cli import run_server

    return run_server(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="turntaker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    diagrams = sub.add_parser("diagrams", help="write Mermaid and SVG for every statechart")
    diagrams.add_argument("--out", default="docs/statecharts", help="output folder")
    diagrams.set_defaults(func=_diagrams)
    triton = sub.add_parser("triton", help="serve model_repository/ with the bundled tritonserver")
    from orchestrator.triton.cli import add_arguments

    add_arguments(triton)
    triton.set_defaults(func=_triton)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
