"""Shell completion for bash, zsh and fish, generated from the parser itself.

Shell completion for bash, zsh and fish, generated from the parser itself, so that every
command, option and choice the parser knows completes and nothing it does not.

Each script carries the same table: for every command path (``reaper gates answer``), the
words that may follow it (its actions and options), and for every option that takes a value,
what completes it (its choices, a file, a directory, or nothing to offer). A small walker in
the shell's own language finds the path the line has reached and offers from the table;
``_reaper_candidates`` (``__reaper_candidates`` in fish) prints the candidates for a line, so
the scripts are tested by running them, not by reading them.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["SHELLS", "script"]

SHELLS: Final = ("bash", "zsh", "fish")


@dataclass(frozen=True)
class Level:
    """One command path: the actions below it, its options, and what each option's value is."""

    path: str
    actions: tuple[str, ...]
    options: tuple[str, ...]
    values: dict[str, str]  # option -> "file", "dir", or the choices separated by spaces


def levels(parser: argparse.ArgumentParser, path: str = "reaper") -> Iterator[Level]:
    """Every command path of ``parser``, the top first, each with what may follow it."""
    actions: list[str] = []
    options: list[str] = []
    values: dict[str, str] = {}
    below: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                actions.append(name)
                below.append((name, sub))
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not action.option_strings:  # a positional: its choices complete in its place
            actions += [str(c) for c in action.choices or ()]
            continue
        options += action.option_strings
        value = _value(action)
        if value is not None:
            values.update(dict.fromkeys(action.option_strings, value))
    yield Level(path, tuple(actions), tuple(dict.fromkeys(options)), values)
    for name, sub in below:
        yield from levels(sub, f"{path} {name}")


def _value(action: argparse.Action) -> str | None:
    """What completes an option's value; None for a flag that takes none."""
    if action.nargs == 0:
        return None
    if action.choices is not None:
        return " ".join(str(c) for c in action.choices)
    if action.type is Path:
        return "dir" if "dir" in action.dest else "file"
    return ""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    table = list(levels(parser))
    if shell in _POSIX_SHELLS:
        return _posix(table, _POSIX_SHELLS[shell])
    if shell == "fish":
        return _fish(table)
    raise ValueError(f"no completion for {shell!r}: one of {', '.join(SHELLS)}")


def _q(text: str) -> str:
    """``text`` single-quoted for bash and zsh, which read nothing inside."""
    return "'" + text.replace("'", "'\\''") + "'"


def _qf(text: str) -> str:
    """``text`` single-quoted for fish, which reads ``\\\\`` and ``\\'`` inside."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class _PosixShell:
    """What bash or zsh says in its own words around the walker both share."""

    #: The comment (and any setup) before the walker.
    head: str
    #: The body of ``_reaper_files dir|file CURRENT``: the directories or files to offer.
    files: str
    #: The lines of ``_reaper``: a line's words given to the walker, its candidates offered.
    complete: tuple[str, ...]
    #: The line that makes ``_reaper`` complete ``reaper``.
    register: str


_POSIX_SHELLS: Final = {
    "bash": _PosixShell(
        head="# bash completion for reaper: source it, or put it in /etc/bash_completion.d/reaper",
        files='if [[ $1 == dir ]]; then compgen -d -- "$2"; else compgen -f -- "$2"; fi',
        complete=(
            "local IFS=$'\\n'",
            'COMPREPLY=($(_reaper_candidates "${COMP_WORDS[@]:1:COMP_CWORD}"))',
        ),
        register="complete -o filenames -F _reaper reaper",
    ),
    "zsh": _PosixShell(
        head="#compdef reaper\n# zsh completion for reaper: put it on $fpath as _reaper, or "
        "source it after compinit\nautoload -U +X bashcompinit && bashcompinit",
        files="if [[ $1 == dir ]]; then print -rl -- $2*(N-/); else print -rl -- $2*(N); fi",
        complete=(
            "local -a found",
            'found=("${(@f)$(_reaper_candidates "${(@)words[2,CURRENT]}")}")',
            'compadd -f -- "${(@)found:#}"',
        ),
        register="compdef _reaper reaper",
    ),
}


def _posix(table: list[Level], shell: _PosixShell) -> str:
    """The script of bash or zsh: the walker both share, with the table's case arms (a known
    path, its words, an option's value), and the shell's own words around it."""
    paths = "|".join(_q(f"{lv.path} {a}") for lv in table for a in lv.actions)
    words = "\n".join(
        f"        {_q(lv.path)}) printf '%s\\n' {' '.join(map(_q, lv.actions + lv.options))} ;;"
        for lv in table
    )
    arms = []
    for lv in table:
        for option, value in lv.values.items():
            kind = value if value in ("file", "dir") else "words"
            arms.append(f"        {_q(lv.path + '|' + option)}) echo {_q(kind + ':' + value)} ;;")
    return _POSIX_SCRIPT.format(
        head=shell.head,
        paths=paths,
        words=words,
        values="\n".join(arms),
        files=shell.files,
        complete="\n".join(f"    {line}" for line in shell.complete),
        register=shell.register,
    )


_POSIX_SCRIPT = """\
{head}
# The command path a line has reached, and the candidates that may follow it.
_reaper_path() {{
    local path=reaper w
    for w in "$@"; do
        case "$path $w" in
            {paths}) path="$path $w" ;;
        esac
    done
    printf '%s\\n' "$path"
}}
_reaper_value() {{
    case "$1|$2" in
{values}
        *) return 1 ;;
    esac
}}
_reaper_words() {{
    case "$1" in
{words}
    esac
}}
# _reaper_candidates WORD... CURRENT: what completes CURRENT after the words before it.
_reaper_candidates() {{
    local n=$# cur previous path value
    cur=${{@:$n:1}}
    previous=${{@:$((n - 1)):1}}
    path=$(_reaper_path "${{@:1:$((n - 1))}}")
    if value=$(_reaper_value "$path" "$previous"); then
        case "$value" in
            file:* | dir:*) _reaper_files "${{value%%:*}}" "$cur" ;;
            words:?*) compgen -W "${{value#words:}}" -- "$cur" ;;
        esac
        return
    fi
    compgen -W "$(_reaper_words "$path")" -- "$cur"
}}
_reaper_files() {{
    {files}
}}
_reaper() {{
{complete}
}}
{register}
"""


def _fish(table: list[Level]) -> str:
    paths = " ".join(_qf(f"{lv.path} {a}") for lv in table for a in lv.actions)
    lines = [
        "# fish completion for reaper: put it in ~/.config/fish/completions/reaper.fish",
        "function __reaper_path",
        "    set -l path reaper",
        "    for w in (commandline -opc)[2..-1]",
        f'        if contains -- "$path $w" {paths}',
        '            set path "$path $w"',
        "        end",
        "    end",
        "    echo $path",
        "end",
        "function __reaper_at",
        '    test (__reaper_path) = "$argv"',
        "end",
        "complete -c reaper -f",
    ]
    for lv in table:
        when = f"-n {_qf('__reaper_at ' + lv.path)}"
        if lv.actions:
            lines.append(f"complete -c reaper {when} -a {_qf(' '.join(lv.actions))}")
        for option in lv.options:
            spec = f"-l {_qf(option[2:])}" if option.startswith("--") else f"-s {_qf(option[1:])}"
            value = lv.values.get(option)
            if value is None:
                extra = ""
            elif value == "file":
                extra = " -r -F"
            elif value == "dir":
                extra = " -r -a '(__fish_complete_directories)'"
            elif value:
                extra = f" -r -x -a {_qf(value)}"
            else:
                extra = " -r -x"
            lines.append(f"complete -c reaper {when} {spec}{extra}")
    return "\n".join(lines) + "\n"
