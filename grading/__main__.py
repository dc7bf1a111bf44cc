"""``python -m grading``: build the release, refresh outputs, grade (see ``--help``)."""

from __future__ import annotations

import argparse
import sys

from grading import build


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grading", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    publish = commands.add_parser("release", help="regenerate notebooks/ from solutions/")
    publish.add_argument("chapters", nargs="*", help="chapter folders (default: all)")
    run = commands.add_parser("outputs", help="re-execute solutions/ in place and clean them")
    run.add_argument("chapters", nargs="*", help="chapter folders, e.g. 01_flops (default: all)")
    args = parser.parse_args(argv)
    if args.command == "release":
        for path in build.release(args.chapters or None):
            print(path.relative_to(build.ROOT))
    elif args.command == "outputs":
        for path in build.outputs(args.chapters or None):
            print(path.relative_to(build.ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
