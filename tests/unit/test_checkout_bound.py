"""Nothing the tests, the benchmarks, the demo or CI need lies outside the checkout: a clone in
any folder passes ``make test`` (the services ``scripts/services`` installs and starts apart).

Each file under ``tests/``, ``bench/``, ``scripts/``, ``.ci/``, ``reaper/`` and the Makefile is
read line by line for a path that leaves the repository: ``shared/`` (where the recordings used
to be read from), ``..`` in a path relative to the working directory (the commands run from the
root), more ``..`` after the file's own directory (``$HERE``, ``dirname``, ``__file__``) than the
file lies deep, and ``Path(__file__).parents[N]`` or ``.parent`` chains that climb above the root.
A failure names the file and the line. The recorded broker answers in ``tests/data/`` are data,
kept byte for byte as recorded, and are checked against their digests instead.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "bench", "scripts", ".ci", "reaper", "Makefile")
#: Recorded broker answers (data, never edited) and this file, whose patterns name what it seeks.
NOT_SCANNED = (ROOT / "tests" / "data", Path(__file__).resolve())
SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".sql", ".md", ""}

_SHARED = re.compile(r"(?<![\w.-])shared/|/\s*[\"']shared[\"']")
#: A run of ``..`` segments and what stands just before it.
_UP = re.compile(r"(?P<before>[^\s\"'=(:,]*?)(?<![.\w])(?P<ups>\.\.(?:/\.\.)*)(?=/|[\"')`;]|$)")
#: What ties a path to the file's own directory rather than to the working directory.
_ANCHORS = ("HERE", "dirname", "BASH_SOURCE", "__file__", "$0", "SCRIPT_DIR", "REPO")
_PARENTS = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
_PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent)+)(?!s)")


def escapes(relative: str, line: str) -> str | None:
    """Why ``line`` of the file at ``relative`` (from the root) reaches outside the checkout,
    or None."""
    depth = len(Path(relative).parts) - 1
    if _SHARED.search(line):
        return "names shared/, which lies outside the checkout"
    if "os.pardir" in line:
        return "climbs with os.pardir"
    for match in _PARENTS.finditer(line):
        if int(match[1]) > depth:  # parents[depth] is the root
            return f"Path(__file__).parents[{match[1]}] is above the root ({depth} deep)"
    for match in _PARENT_CHAIN.finditer(line):
        ups = match[1].count(".parent")
        if ups > depth + 1:  # the first .parent is the file's own directory
            return f"{ups} .parent steps from a file {depth} deep climb above the root"
    for match in _UP.finditer(line):
        ups = match["ups"].count("..")
        anchored = any(a in line[: match.start("ups")] for a in _ANCHORS) and match[
            "before"
        ].endswith("/")
        allowed = depth if anchored else 0
        if ups > allowed:
            where = "the file's directory" if anchored else "the working directory (the root)"
            return f"{match['ups']} from {where} leaves the checkout"
    return None


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in candidates:
            if any(path == n or n in path.parents for n in NOT_SCANNED):
                continue
            if "__pycache__" in path.parts or path.suffix not in SUFFIXES:
                continue
            files.append(path)
    return files


def test_no_file_reaches_outside_the_checkout() -> None:
    files = scanned_files()
    assert len(files) > 100, f"the walk found only {len(files)} files under {SCANNED}"
    found = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            reason = escapes(relative, line)
            if reason:
                found.append(f"{relative}:{number}: {reason}: {line.strip()}")
    assert not found, "paths outside the checkout:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("relative", "line"),
    [
        ("tests/support/x.py", '    root = _ROOT.parent / "shared" / "recorded"'),
        ("tests/unit/x.py", 'DATA = Path("../shared/recorded/lavinmq-2.9.1")'),
        ("bench/x.py", 'seeds = Path("..") / "seeds"'),
        ("scripts/x", 'cat "$HERE/../../etc/passwd"'),
        ("tests/support/x.py", "ROOT = Path(__file__).resolve().parents[3]"),
        ("tests/x.py", "ROOT = Path(__file__).parent.parent.parent"),
        ("Makefile", "\tcp ../shared/x build/"),
        ("bench/x.py", "os.path.join(here, os.pardir, os.pardir)"),
    ],
)
def test_the_walk_finds_each_way_out(relative: str, line: str) -> None:
    assert escapes(relative, line), f"{relative}: {line!r} was not caught"


@pytest.mark.parametrize(
    ("relative", "line"),
    [
        ("tests/support/x.py", "IN_TREE = Path(__file__).resolve().parents[1] / 'data'"),
        ("tests/unit/x.py", "ROOT = Path(__file__).resolve().parents[2]"),
        ("scripts/services", 'REPO=$(cd "$HERE/.." && pwd)'),
        (".ci/run", 'cd "$(dirname "${BASH_SOURCE[0]}")/.."'),
        ("tests/x.py", "# the reapers shared the work between them, and so on.."),
        ("reaper/x.py", "range(1..5) is not Python"),
        ("reaper/x.py", "    async def close(self) -> None: ..."),
        ("reaper/x.py", "-- INSERT ... ON CONFLICT DO UPDATE ... RETURNING"),
    ],
)
def test_the_walk_lets_the_checkout_be(relative: str, line: str) -> None:
    assert escapes(relative, line) is None


def test_the_recordings_are_as_recorded() -> None:
    """The LavinMQ answers are real broker responses: kept byte for byte, never edited."""
    data = ROOT / "tests" / "data"
    listed = (data / "lavinmq-2.9.1.sha256").read_text(encoding="utf-8").splitlines()
    sums = dict(reversed(line.split(maxsplit=1)) for line in listed)
    present = {p.relative_to(data).as_posix() for p in (data / "lavinmq-2.9.1").iterdir()}
    assert set(sums) == present
    assert len(present) == 34, "33 recorded responses and their README"
    for name, digest in sums.items():
        assert hashlib.sha256((data / name).read_bytes()).hexdigest() == digest, name
