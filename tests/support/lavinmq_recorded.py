"""Real LavinMQ 2.9.1 responses, recorded from a broker built from its source and kept in
the repository as test data (``tests/data/lavinmq-2.9.1``, byte for byte as recorded: its README
says which request produced each file and in which broker state), and a transport that answers
the reaper's requests from them.

``$QR_RECORDED_DIR/lavinmq-2.9.1`` is read instead when that variable is set (a newer
recording, tried before it is copied in). A missing directory fails the tests that need it,
loudly: they are never skipped.

The transport serves the full recordings cut to the ``columns=`` asked, by the rule the
recordings themselves show LavinMQ follows (a column is kept when it names a top-level key;
a dotted one names none); ``test_lavinmq_recorded.py`` holds that rule to every projected
answer recorded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

import httpx
import pytest

#: Where to read another recording from instead of the one in the repository.
RECORDED_ENV: Final = "QR_RECORDED_DIR"
BROKER: Final = "lavinmq-2.9.1"
VHOST: Final = "vibey"

#: The recordings kept in the repository.
IN_TREE: Final = Path(__file__).resolve().parents[1] / "data"


def recorded_dir() -> Path:
    """The recordings' directory; fails the test (never skips it) when it is not there."""
    base = os.environ.get(RECORDED_ENV)
    path = (Path(base) if base else IN_TREE) / BROKER
    if not (path / "README.md").is_file():
        where = f"{RECORDED_ENV}={base}" if base else "the repository's tests/data/"
        pytest.fail(
            f"the LavinMQ recordings are missing: no {path}/README.md (read from {where}; "
            f"unset {RECORDED_ENV} to use the copy kept in the repository)",
            pytrace=False,
        )
    return path


def load(name: str) -> Any:
    """One recorded response body, as parsed JSON."""
    path = recorded_dir() / name
    if not path.is_file():
        pytest.fail(f"recorded response {path} is missing", pytrace=False)
    return json.loads(path.read_text(encoding="utf-8"))


def project(item: Any, columns: str | None) -> Any:
    """``item`` as LavinMQ answers it for ``columns=``: only top-level keys named."""
    if columns is None or not isinstance(item, Mapping):
        return item
    wanted = set(columns.split(","))
    return {k: v for k, v in item.items() if k in wanted}


def _listing(body: Any, columns: str | None) -> Any:
    if isinstance(body, list):
        return [project(i, columns) for i in body]
    return {**body, "items": [project(i, columns) for i in body["items"]]}


class RecordedLavinMQ(httpx.AsyncBaseTransport):
    """Answers the management API's reads for vhost ``vibey`` from the recordings (state A
    of their README); any other request fails the test. ``queues`` keeps only the queues
    named (a vhost holding just those), never edits one."""

    def __init__(self, queues: frozenset[str] | None = None) -> None:
        self.queues = queues
        self.requests: list[httpx.Request] = []

    def _kept(self, body: Any) -> Any:
        if self.queues is None:
            return body
        if isinstance(body, list):
            return [q for q in body if q.get("name") in self.queues]
        items = [q for q in body["items"] if q.get("name") in self.queues]
        return {**body, "items": items, "item_count": len(items), "filtered_count": len(items)}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = unquote(request.url.raw_path.decode().split("?", 1)[0])
        columns = request.url.params.get("columns")
        get = request.method == "GET"
        if get and path == "/api/overview":
            return _json(load("overview.json"))
        if get and path == "/api/nodes":
            return _json([project(n, columns) for n in load("nodes.json")])
        if get and path == f"/api/policies/{VHOST}":
            return _json(load("policies_empty.json"))
        if get and path == f"/api/queues/{VHOST}":
            paged = "page" in request.url.params
            body = load("queues_full_paged.json" if paged else "queues_full.json")
            return _json(_listing(self._kept(body), columns))
        if get and path.startswith(f"/api/queues/{VHOST}/"):
            name = path.removeprefix(f"/api/queues/{VHOST}/")
            file = recorded_dir() / f"queue_single_{name}.json"
            if not file.is_file() or (self.queues is not None and name not in self.queues):
                return _json({"error": "not_found", "reason": "Not Found"}, 404)
            return _json(project(load(file.name), columns))
        if get and path == f"/api/consumers/{VHOST}":
            kept = load("consumers_full.json")
            if self.queues is not None:
                kept = [c for c in kept if c["queue"]["name"] in self.queues]
            return _json(_listing(kept, columns))
        if get and path == f"/api/vhosts/{VHOST}/channels":
            return _json(_listing(load("channels_full.json"), columns))
        if request.method == "POST" and path == f"/api/queues/{VHOST}/vibey.jobs.dead/get":
            asked = json.loads(request.content)
            assert asked["ackmode"] == "reject_requeue_true", asked
            truncated = asked.get("truncate") == 0
            return _json(load("get_truncate0.json" if truncated else "get_full.json"))
        pytest.fail(f"no recorded LavinMQ answer for {request.method} {request.url}")


def _json(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)
