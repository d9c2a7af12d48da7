"""A bench's own vhost on a live broker, deleted on any exit the process can see.

A vhost of tens of thousands of queues left behind keeps the broker busy deleting it long after
(a later CI run found RabbitMQ 4.0 slow to report statistics while it deleted one). So: a vhost
is named ``<prefix><hex>`` and its description names the process that made it; leftovers of the
same prefix whose process is gone are deleted before a run starts; SIGTERM exits through the
same ``finally`` as SIGINT does; a deletion waits, bounded, until the broker no longer lists the
vhost, and says what to do when it gives up. ``scripts/services`` deletes any ``qr-bench-*``
leftover as well, for the exits nothing sees (SIGKILL, a host reboot).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from types import FrameType
from urllib.parse import quote

import httpx

#: How long a deletion may take before the bench gives up on it and says so (on 2 shared
#: cores 10,000 queues took 91 s on RabbitMQ 4.3, about 19,000 took 595 s).
DELETE_SECONDS = 1800.0
_OWNER = re.compile(r"pid (\d+) on (\S+)$")


def _path(vhost: str) -> str:
    return f"/api/vhosts/{quote(vhost, safe='')}"


def _alive(description: str) -> int | None:
    """The pid named by ``description`` when it is a live process of this host, else None."""
    match = _OWNER.search(description or "")
    if match is None or match.group(2) != socket.gethostname():
        return None
    pid = int(match.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _terminate(signum: int, _frame: FrameType | None) -> None:
    print(f"  stopped by {signal.Signals(signum).name}: removing what this run made", flush=True)
    raise SystemExit(128 + signum)


def exit_on_signals() -> None:
    """SIGINT and SIGTERM raise SystemExit where the process is, so every ``finally`` runs
    (asyncio's own SIGINT handler would only cancel the main task at its next ``await``, which
    a blocking wait may not reach for minutes)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _terminate)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the duration: a cleanup is not cut short by a second
    Ctrl-C (it is bounded on its own)."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class ScratchVhosts:
    """The vhosts one bench run makes on one broker (``admin``: its management API)."""

    def __init__(self, admin: httpx.Client, prefix: str, user: str, label: str) -> None:
        self.admin, self.prefix, self.user, self.label = admin, prefix, user, label
        self.made: list[str] = []

    def create(self) -> str:
        vhost = f"{self.prefix}{uuid.uuid4().hex[:8]}"
        self.made.append(vhost)
        owner = f"{self.label}, pid {os.getpid()} on {socket.gethostname()}"
        self.admin.put(_path(vhost), json={"description": owner}).raise_for_status()
        self.admin.put(
            f"/api/permissions/{quote(vhost, safe='')}/{quote(self.user, safe='')}",
            json={"configure": ".*", "write": ".*", "read": ".*"},
        ).raise_for_status()
        return vhost

    def sweep(self) -> None:
        """Delete leftovers of this prefix whose process is gone (one still running is left)."""
        listed = self.admin.get("/api/vhosts", params={"columns": "name,description"}).json()
        for v in listed:
            name, description = str(v.get("name", "")), str(v.get("description") or "")
            if not name.startswith(self.prefix):
                continue
            pid = _alive(description)
            if pid is not None:
                print(f"  vhost {name} belongs to running pid {pid}: left alone")
                continue
            print(f"  deleting leftover vhost {name} ({description or 'no description'})")
            self.delete(name)

    def delete(self, vhost: str, seconds: float = DELETE_SECONDS) -> bool:
        """Delete ``vhost`` and wait until the broker no longer lists it, at most ``seconds``.
        True when it is gone; False after saying what is left and what to do.

        RabbitMQ deletes a vhost's queues one by one inside the DELETE request and stops when
        it closes the request (after 60 s on 4.0 and 4.3), leaving the vhost with the queues
        not reached yet: the DELETE is asked again until the vhost is gone. SIGINT and SIGTERM
        are ignored meanwhile (the wait is bounded; SIGKILL abandons the vhost)."""
        started = time.monotonic()
        deadline = started + seconds
        asked = 0
        with signals_held():
            while True:
                if self._gone(vhost):
                    if vhost in self.made:
                        self.made.remove(vhost)
                    waited = time.monotonic() - started
                    if waited > 5:
                        print(f"  vhost {vhost} deleted in {waited:.0f} s ({asked} DELETE asked)")
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                asked += 1
                try:
                    answer = self.admin.delete(_path(vhost), timeout=left)
                except httpx.HTTPError as e:
                    print(f"  DELETE {_path(vhost)} stopped ({type(e).__name__}): asking again")
                    time.sleep(2)  # a broker that refuses connections is not asked in a loop
                    continue
                if answer.status_code not in (204, 404):
                    print(f"  DELETE {_path(vhost)} answered {answer.status_code}: asking again")
                    time.sleep(2)
        base = str(self.admin.base_url).rstrip("/")
        print(
            f"  vhost {vhost} still listed {seconds:.0f} s after its deletion began: the broker "
            f"is still deleting its queues. Check: curl -u USER:PASS {base}{_path(vhost)} ; "
            f"delete again: curl -X DELETE -u USER:PASS {base}{_path(vhost)} (repeat until 404), "
            "or run scripts/services, which does the same"
        )
        return False

    def _gone(self, vhost: str) -> bool:
        try:
            return self.admin.get(_path(vhost), timeout=60).status_code == 404
        except httpx.HTTPError:
            return False  # a broker busy deleting answers slowly: ask again

    def delete_all(self) -> bool:
        """Delete every vhost this run made and still holds."""
        return all([self.delete(v) for v in list(self.made)])
