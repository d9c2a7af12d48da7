"""``reaper(1)``, the manual page, generated from the parser.

``reaper(1)``, the manual page, generated from the parser: every command with its
description and options, so the page and ``--help`` never disagree. ``reaper man | man -l -``
reads it; a package installs the output as ``reaper.1``."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterator

from reaper.version import __version__

__all__ = ["manpage"]


def _roff(text: str) -> str:
    """``text`` as roff reads it literally: backslashes and hyphens escaped, and no line that
    begins with a control character."""
    lines = []
    for line in text.replace("\\", "\\e").replace("-", "\\-").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _commands(
    parser: argparse.ArgumentParser, path: str = "reaper"
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every command below ``parser``: its path, its one-line help, its parser."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {c.dest: c.help or "" for c in action._choices_actions}
        for name, sub in dict(action.choices).items():
            yield f"{path} {name}", helps.get(name, ""), sub
            yield from _commands(sub, f"{path} {name}")


def _options(parser: argparse.ArgumentParser, *, top: bool) -> list[str]:
    """The options of ``parser`` as ``.TP`` paragraphs. The global options, which every
    command takes too, are the top's alone."""
    out: list[str] = []
    for group in parser._action_groups:
        if group.title == "global options" and not top:
            continue
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(
                action, argparse._SubParsersAction | argparse._HelpAction
            ):
                continue
            metavar = action.metavar if isinstance(action.metavar, str) else None
            names = ", ".join(action.option_strings) or metavar or action.dest
            if action.option_strings and action.nargs != 0:
                names += f" {metavar or action.dest.upper()}"
            help_text = (action.help or "").replace("%(default)s", str(action.default))
            out += [".TP", f"\\fB{_roff(str(names))}\\fR", _roff(help_text)]
    return out


def manpage(parser: argparse.ArgumentParser, today: datetime.date | None = None) -> str:
    """The whole page in roff (``man 7 man``)."""
    day = (today or datetime.date.today()).isoformat()
    description, _, configuration = (parser.description or "").partition("\n\n")
    lines = [
        f'.TH REAPER 1 "{day}" "queue-reaper {__version__}" "queue-reaper manual"',
        ".SH NAME",
        "reaper \\- measure, reap and park what a PostgreSQL and RabbitMQ job queue holds",
        ".SH SYNOPSIS",
        "\\fBreaper\\fR [\\fIglobal options\\fR] \\fICOMMAND\\fR [\\fIoptions\\fR]",
        ".SH DESCRIPTION",
        _roff(description),
        ".PP",
        _roff(configuration),
        ".SH OPTIONS",
        "The global options are taken before or after the command.",
        *_options(parser, top=True),
        ".SH COMMANDS",
    ]
    for path, help_text, sub in _commands(parser):
        lines += [f'.SS "{_roff(path)}"', _roff(sub.description or help_text)]
        lines += _options(sub, top=False)
        if sub.epilog:
            lines += [".PP", ".nf", _roff(sub.epilog), ".fi"]
    lines += [".SH EXAMPLES AND EXIT STATUS", ".nf", _roff(parser.epilog or ""), ".fi"]
    lines += [
        ".SH FILES",
        ".TP",
        "\\fI./conf.d/*.toml\\fR, \\fI/etc/queue\\-reaper/conf.d/*.toml\\fR",
        "The declared thresholds and connections, read in lexical order.",
        ".SH SEE ALSO",
        "The README and docs/ of queue\\-reaper; \\fBrabbitmqctl\\fR(8).",
    ]
    return "\n".join(lines) + "\n"
