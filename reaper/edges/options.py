"""The options several commands share: the output form, the project, who answers.

The options several commands share: the output form (``-o/--output`` with the forms the
command offers, ``--json`` for ``-o json``), ``--project``, and who answers a gate when
``--by`` is not given."""

from __future__ import annotations

import argparse
import getpass
import socket
from collections.abc import Sequence

from reaper.gates.ids import argument, project_text

__all__ = ["add_output", "add_project", "default_answerer", "output_of"]

#: A command's parser, or a group of its options.
Options = argparse.ArgumentParser | argparse._ArgumentGroup

JSON_HELP = "the same as -o json"


def add_output(
    parser: Options,
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


def add_project(parser: Options, help: str) -> None:
    """Give ``parser`` ``--project``: a project's id, a prefix the outputs print, or fleet."""
    parser.add_argument("--project", type=argument(project_text), metavar="PROJECT", help=help)


def output_of(args: argparse.Namespace) -> str:
    """The form asked for: ``json`` under ``--json``, else ``-o``'s."""
    return "json" if args.json else str(args.output)


def default_answerer() -> str:
    """Who answers when ``--by`` is not given: the OS user and host, ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
