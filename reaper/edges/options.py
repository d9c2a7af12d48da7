"""The options several commands share: the output form, the project, who answers.

The options several commands share: the output form (``-o/--output`` with the forms the
command offers, ``--json`` for ``-o json``), ``--project``, and who answers a gate when
``--by`` is not given; and the parser's table of commands, with the one way a command made of
actions (``reaper db migrate``) is added to it (:mod:`reaper.edges.arguments` adds them all)."""

from __future__ import annotations

import argparse
import getpass
import socket
from collections.abc import Sequence
from typing import TypeAlias

from reaper.gates.ids import argument, project_text

__all__ = ["Commands", "add_actions", "add_output", "add_project", "default_answerer", "output_of"]

#: A command's parser, or a group of its options.
Options = argparse.ArgumentParser | argparse._ArgumentGroup

#: The parser's table of commands (or of one command's actions).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

JSON_HELP = "the same as -o json"


def add_actions(
    commands: Commands, name: str, *, help: str, description: str, required: bool = True
) -> Commands:
    """Add the command ``name``, made of actions (``reaper NAME ACTION``), and return its table
    of actions; the action given is ``args.<name>_command`` (None when not ``required``)."""
    command = commands.add_parser(name, help=help, description=description)
    return command.add_subparsers(dest=f"{name}_command", required=required, metavar="ACTION")


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
