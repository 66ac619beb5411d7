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


def _serve(args: argparse.Namespace) -> int:
    if args.workers != 1:
        # N processes behind nginx (orchestrator/supervisor/workers.py; it refuses N < 1).
        from orchestrator.supervisor.workers import run as run_workers

        return run_workers(args)
    from orchestrator.service.serve import run

    return run(args)


def _make_tiny_omni(args: argparse.Namespace) -> int:
    # Imported here: it pulls torch and transformers, which the other subcommands never need.
    from turntaker_models.omni.tiny import make_tiny_omni

    out = Path(args.dir)
    if out.exists():
        print(f"{out} exists; left as it is", file=sys.stderr)
        return 1
    print(make_tiny_omni(out, seed=args.seed))
    return 0


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
    tiny = sub.add_parser(
        "make-tiny-omni",
        help="write tiny random Qwen3-Omni weights (real classes, local tokenizer) to DIR",
    )
    tiny.add_argument("dir", metavar="DIR", help="output folder (must not exist)")
    tiny.add_argument("--seed", default=0, type=int, help="weights seed (default 0)")
    tiny.set_defaults(func=_make_tiny_omni)
    serve = sub.add_parser("serve", help="the realtime server (starts a local Triton)")
    from orchestrator.service.serve import add_arguments as add_serve_arguments

    add_serve_arguments(serve)
    serve.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
