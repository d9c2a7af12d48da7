"""``reaper gates answer`` over a selection, answered only once confirmed.

``reaper gates answer`` over a selection (SPEC §12): the open gates a ``--kind``,
``--project``, ``--older-than``, ``--queue`` or ``--all`` selects, shown with their count, then
answered only once confirmed (``--yes``, or the count typed at a terminal). Each is answered as
a single answer is (:func:`reaper.gates.answering.answer_gate`): its own transaction and its own
``GateAnswered`` event, the gate row locked, so a person answering one of them at the same time
gives one answer per gate. ``--dry-run`` shows the selection and writes nothing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from reaper.config import LoadedConfig
from reaper.core.dead_letters import quote_untrusted
from reaper.edges.options import add_project, default_answerer
from reaper.errors import GateError, ReaperError
from reaper.gates.answering import answer_gate
from reaper.gates.ids import argument, gate_kind, short_id
from reaper.gates.selection import Selection, select
from reaper.gates.views import GateView, format_age, parse_duration
from reaper.gates.wording import answered_line
from reaper.reap.sources import Sources, store_sources

__all__ = ["add_selection", "answer_selection", "has_selection"]

_EXIT_OK, _EXIT_NOT_OK, _EXIT_USAGE = 0, 1, 2

#: The options that select gates, as a person types them.
_SELECTORS = ("--kind", "--project", "--older-than", "--since", "--queue", "--all")


def add_selection(answer: argparse.ArgumentParser, kinds: tuple[str, ...]) -> None:
    """The selection options of ``gates answer``, beside its GATE."""
    pick = answer.add_argument_group(
        "answering many gates", "every open gate the options select (together: all of them)"
    )
    pick.add_argument(
        "--kind",
        type=argument(gate_kind),
        metavar="KIND",
        help=f"only gates of this kind: {' or '.join(kinds)} (poison and dead_letter as the "
        "report says them)",
    )
    add_project(pick, "only this project's (id, prefix or fleet)")
    pick.add_argument("--older-than", metavar="AGE", help="only gates raised before AGE (1h)")
    pick.add_argument(
        "--since", metavar="AGE|ISO", help="only gates raised at or after: 1h, or an ISO time"
    )
    pick.add_argument(
        "--queue", metavar="QUEUE", help="only dead letters read from or dead on QUEUE"
    )
    pick.add_argument("--all", action="store_true", help="every open gate")
    pick.add_argument(
        "--yes", action="store_true", help="answer the selection without asking (scripts)"
    )


def has_selection(args: argparse.Namespace) -> bool:
    return any(
        getattr(args, flag[2:].replace("-", "_"), None) not in (None, False) for flag in _SELECTORS
    )


@dataclass(frozen=True)
class _Selected:
    take: list[GateView]
    #: Gates selected that cannot take the answer, each with why.
    left: list[tuple[GateView, str]]


async def answer_selection(
    loaded: LoadedConfig,
    args: argparse.Namespace,
    ask: Callable[[str], str] | None = None,
) -> int:
    """Show the selection and its count; with ``--yes`` (or the count typed back at a
    terminal, through ``ask``) answer each; the exit code (SPEC §5)."""
    if args.gate is not None:
        print("reaper: name one GATE or select gates with options, not both", file=sys.stderr)
        return _EXIT_USAGE
    older = parse_duration(args.older_than) if args.older_than else None
    async with store_sources(loaded.settings, "answer", broker=not args.dry_run) as (
        sources,
        store,
    ):
        chosen = Selection(True, args.kind, args.project, older, args.since, args.queue)
        selected = _split(await select(store, loaded.settings, chosen), args.choice)
        print(_show(selected, args.choice, _words(args)))
        if args.dry_run or not selected.take:
            if args.dry_run:
                print("dry run: nothing was written or sent")
            return _EXIT_OK
        if not _confirmed(len(selected.take), args.yes, ask):
            return _EXIT_USAGE
        return await _answer_each(sources, loaded, args, selected.take)


def _split(views: list[GateView], choice: str) -> _Selected:
    """The views that can take ``choice``, and the rest, each with why not."""
    take: list[GateView] = []
    left: list[tuple[GateView, str]] = []
    for view in views:
        if choice in view.choices:
            take.append(view)
        else:
            left.append((view, "; ".join(view.withheld) or f"it offers {'/'.join(view.choices)}"))
    return _Selected(take, left)


def _words(args: argparse.Namespace) -> str:
    chosen = [
        f"{flag} {value}" if value is not True else flag
        for flag in _SELECTORS
        if (value := getattr(args, flag[2:].replace("-", "_"))) not in (None, False)
    ]
    return ", ".join(chosen)


def _line(view: GateView) -> str:
    gate = view.gate
    what = f"job {quote_untrusted(gate.job_kind)}" if gate.job_kind else "job -"
    if view.parked is not None:
        what += f" from {quote_untrusted(view.parked.letter.queue)}"
    return (
        f"  {view.short}  {format_age(view.age_seconds):>6}  {gate.kind:<18} "
        f"project {str(gate.project_id)[:8]}  {what}"
    )


def _show(selected: _Selected, choice: str, words: str) -> str:
    """The gates the answer would take, their count, and the ones it leaves and why."""
    n = len(selected.take)
    lines = [f"{n} open gate{'' if n == 1 else 's'} would be answered {choice!r} ({words}):"]
    lines += [_line(v) for v in selected.take]
    if selected.left:
        lines.append(f"{len(selected.left)} selected gate(s) left open, not answerable {choice!r}:")
        lines += [f"{_line(v)}: {why}" for v, why in selected.left]
    return "\n".join(lines)


def _confirmed(count: int, yes: bool, ask: Callable[[str], str] | None) -> bool:
    """``--yes``, or the count typed back at a terminal; otherwise nothing is answered."""
    if yes:
        return True
    if ask is None and sys.stdin.isatty():
        ask = input
    if ask is None:
        print(
            f"reaper: nothing answered: add --yes to answer these {count} gate(s)",
            file=sys.stderr,
        )
        return False
    try:
        typed = ask(f"type {count} to answer these {count} gate(s), anything else to stop: ")
    except EOFError:
        typed = ""
    if typed.strip() == str(count):
        return True
    print("reaper: nothing answered", file=sys.stderr)
    return False


async def _answer_each(
    sources: Sources, loaded: LoadedConfig, args: argparse.Namespace, views: list[GateView]
) -> int:
    """Each gate answered in its own transaction; one refused (answered meanwhile, say) is
    named and the rest go on; a source that fails stops, naming what was not tried."""
    answered, refused = 0, 0
    by = args.by or default_answerer()
    for i, view in enumerate(views):
        try:
            answer = await answer_gate(
                sources, loaded.settings, view.gate.id, args.choice, answered_by=by,
                reason=args.reason,
            )  # fmt: skip
        except GateError as exc:
            refused += 1
            print(f"gate {short_id(view.gate.id)}: not answered: {exc}")
            continue
        except ReaperError as exc:
            print(
                f"reaper: stopped at gate {short_id(view.gate.id)}: {exc}; {answered} answered, "
                f"{len(views) - i} not tried: run the same command again to answer them",
                file=sys.stderr,
            )
            return _EXIT_NOT_OK
        answered += 1
        print(answered_line(answer))
    print(
        f"{answered} of {len(views)} gate(s) answered {args.choice!r}, each with its own "
        f"GateAnswered event" + (f"; {refused} not answered (above)" if refused else "")
    )
    return _EXIT_OK if not refused else _EXIT_NOT_OK
