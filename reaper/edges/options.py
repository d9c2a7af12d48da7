"""The output option of the commands that print a listing or a report: ``-o/--output`` with
the forms the command offers, and ``--json`` for ``-o json``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["add_output", "output_of"]

JSON_HELP = "the same as -o json"


def add_output(
    parser: argparse.ArgumentParser,
    choices: Sequence[str],
    help: str,
    *,
    json_help: str = JSON_HELP,
    json_first: bool = False,
) -> None:
    """Give ``parser`` ``-o/--output`` (``text`` by default; ``help`` says what each form
    shows) and ``--json``; ``json_first`` lists ``--json`` first in the usage line."""

    def add_json() -> None:
        parser.add_argument("--json", action="store_true", help=json_help)

    if json_first:
        add_json()
    parser.add_argument("-o", "--output", choices=tuple(choices), default="text", help=help)
    if not json_first:
        add_json()


def output_of(args: argparse.Namespace) -> str:
    """The form asked for: ``json`` under ``--json``, else ``-o``'s."""
    return "json" if args.json else str(args.output)
