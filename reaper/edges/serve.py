"""``reaper serve``: a pass every interval, ``/metrics``, ``/healthz`` and a status page.

``reaper serve``: a pass every ``interval_seconds``, ``/metrics``, ``/healthz`` and a read-only
status page at ``/`` on a port.

``/healthz`` is liveness: 200 while the loop completed a pass (or checked the fleet's turn)
within two intervals, else 503. The HTTP side is the standard library's WSGI server in a thread
of its own, so a scrape is answered even while a pass is busy on the event loop; SIGTERM or
SIGINT lets the pass in flight run to its end. ``docs/behaviour.md`` ("``reaper serve``") has
the rest: the fleet's turn, the gates read after each pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from reaper.edges.metrics import ReaperMetrics
from reaper.edges.status_page import PageTarget, PassLine, pass_line, render_page
from reaper.errors import ReaperError, scrub
from reaper.gates.board import GateBoard
from reaper.reap.result import PassResult

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment


__all__ = ["DEFAULT_LISTEN", "STALE_AFTER_INTERVALS", "ListenError", "parse_listen", "serve"]

DEFAULT_LISTEN = "127.0.0.1:9464"

#: ``/healthz`` turns 503 when the last completed pass is older than this many intervals.
STALE_AFTER_INTERVALS = 2
#: The passes the status page lists.
PASSES_SHOWN = 10

_log = logging.getLogger("reaper.serve")


class ListenError(ReaperError):
    """``--listen`` is not ``HOST:PORT``, or nothing can listen there."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as a host and a port; a bad value raises
    :class:`ListenError` naming the expected form."""
    text = listen.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text:
        raise ListenError(f"--listen {listen!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ListenError(
            f"--listen {listen!r}: write an IPv6 address in brackets, e.g. [::1]:9464"
        )
    if not host or any(c.isspace() for c in host):
        raise ListenError(f"--listen {listen!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenError(f"--listen {listen!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


@dataclass
class _Health:
    """What ``/healthz`` answers from; written by the loop, read by the HTTP thread."""

    interval_seconds: float
    completed_at: float | None = None  # time.monotonic() of the last completed pass
    last_ok: bool | None = None
    passes: int = 0
    errors: int = 0
    #: time.monotonic() of the last turn another reaper had, and how many there were.
    elsewhere_at: float | None = None
    turns_elsewhere: int = 0

    #: The open gates read after the last pass, or why they could not be.
    board: GateBoard | None = None
    board_error: str | None = None
    #: The last passes, oldest first, as the status page lists them.
    recent: deque[PassLine] = field(default_factory=lambda: deque(maxlen=PASSES_SHOWN))

    def last_pass(self) -> str:
        """What the last pass was, in words: never "ok" about one that was not."""
        if self.last_ok is None:
            return "none yet"
        return "ok" if self.last_ok else "not ok"

    def answer(self) -> tuple[int, dict[str, Any]]:
        last_ok = self.last_ok
        completed_at = max(
            (t for t in (self.completed_at, self.elsewhere_at) if t is not None), default=None
        )
        if completed_at is None:
            return 503, {
                "status": "starting",
                "last_pass": self.last_pass(),
                "last_pass_ok": last_ok,
                "last_pass_age_seconds": None,
            }
        age = round(time.monotonic() - completed_at, 3)
        stale = age > STALE_AFTER_INTERVALS * self.interval_seconds
        body = {
            # liveness only: "alive" says the loop runs, last_pass says how the pass went
            "status": "stale" if stale else "alive",
            "last_pass": self.last_pass(),
            "last_pass_ok": last_ok,
            "last_pass_age_seconds": age,
            "interval_seconds": self.interval_seconds,
            "passes": self.passes,
            "errors": self.errors,
            "turns_elsewhere": self.turns_elsewhere,
            "last_turn": "elsewhere"
            if self.elsewhere_at is not None and self.elsewhere_at == completed_at
            else "mine",
        }
        return (503 if stale else 200), body


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("http: " + format, *args)


def _app(
    metrics: ReaperMetrics, health: _Health, target: PageTarget | None = None
) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(metrics.registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            code, body = health.answer()
            status = "200 OK" if code == 200 else "503 Service Unavailable"
            payload = (json.dumps(body) + "\n").encode()
            start_response(status, [("Content-Type", "application/json")])
            return [payload]
        if path == "/" and target is not None:
            page = render_page(
                metrics.last_result,
                health.board,
                target,
                board_error=health.board_error,
                passes=tuple(health.recent),
                refresh_seconds=health.interval_seconds,
            )
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [page.encode("utf-8")]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"queue-reaper: /metrics /healthz\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


def _bind(host: str, port: int, app: Callable[..., Iterable[bytes]], listen: str) -> _Server:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ListenError(
            f"--listen {listen!r}: cannot resolve {host!r}: {exc.strerror or exc}"
        ) from None
    family = infos[0][0]

    class Server(_Server):
        address_family = family

    try:
        server = make_server(host, port, app, server_class=Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise ListenError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    return server


def _install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> list[int]:
    installed: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or not a Unix loop: the caller sets ``stop``
        installed.append(sig)
    return installed


async def serve(
    listen: str,
    interval_seconds: float,
    run_once: Callable[[], Awaitable[PassResult | None]],
    metrics: ReaperMetrics,
    *,
    stop: asyncio.Event | None = None,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] = _log,
    on_listening: Callable[[str, int], None] | None = None,
    next_in: Callable[[], float] | None = None,
    gates: Callable[[], Awaitable[GateBoard]] | None = None,
    target: PageTarget | None = None,
) -> int:
    """Serve ``/metrics`` and ``/healthz`` on ``listen`` and run a pass every
    ``interval_seconds`` (the first at once, start to start) until ``stop`` is set or the
    process gets SIGTERM/SIGINT. Returns 0 once the pass in flight has finished and the server
    is closed. ``on_listening(host, port)`` is told the bound address (port 0 picks one).

    ``run_once`` answers None when another reaper had the fleet's turn; ``next_in`` then says
    how long until it is free (by default the rest of the interval). A pass that left expired
    leases is followed by the next at once. ``gates`` reads the open gates after each pass;
    ``target`` is what the page names (without it, ``/`` only lists the endpoints). A pass
    that raises is logged and counted (``reaper_last_pass_ok`` 0); the loop goes on.
    """
    if interval_seconds <= 0:
        raise ListenError(f"interval_seconds must be positive, got {interval_seconds}")
    host, port = parse_listen(listen)
    stop = stop if stop is not None else asyncio.Event()
    health = _Health(interval_seconds=interval_seconds)
    server = _bind(host, port, _app(metrics, health, target), listen)
    bound_host, bound_port = server.server_address[:2]
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="reaper-http", daemon=True
    )
    thread.start()
    loop = asyncio.get_running_loop()
    signals = _install_signals(loop, stop)
    log.info(
        "serving /metrics and /healthz on %s:%s, a pass every %ss",
        bound_host,
        bound_port,
        interval_seconds,
    )
    if on_listening is not None:
        on_listening(str(bound_host), int(bound_port))
    try:
        while not stop.is_set():
            started = loop.time()
            result = await _one_pass(run_once, metrics, health, log)
            if result is not None and result.gates.board is not None:
                _keep_board(result.gates.board, metrics, health)  # the pass read it already
            elif gates is not None:  # no pass this interval, or it could not read the board
                await _read_gates(gates, metrics, health, log)
            remaining = (
                next_in() if next_in is not None else interval_seconds - (loop.time() - started)
            )
            if result is not None and result.leases.remaining:
                remaining = 0  # expired leases left by the budget: the next turn comes at once
            if remaining > 0 and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=remaining)
        log.info("stop requested: the pass in flight has finished, closing the server")
        return 0
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await asyncio.to_thread(server.shutdown)
        server.server_close()
        thread.join(timeout=5)


async def _one_pass(
    run_once: Callable[[], Awaitable[PassResult | None]],
    metrics: ReaperMetrics,
    health: _Health,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> PassResult | None:
    """One turn: the pass's result, or None (another reaper's turn, or the pass failed)."""
    # Shielded: a stop (or a cancelled serve) never abandons a pass half-way through its writes.
    task = asyncio.ensure_future(run_once())
    try:
        result = await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what propagates
        raise
    except Exception as exc:
        metrics.observe_failure()
        health.errors += 1
        health.last_ok = False
        why = scrub(f"{type(exc).__name__}: {exc}")
        health.recent.append(PassLine(datetime.now(UTC), f"failed: {why}", False, None))
        log.error("pass failed (the loop goes on): %s", why)
        log.debug("pass failure", exc_info=True)
        return None
    if result is None:
        health.turns_elsewhere += 1
        health.elsewhere_at = time.monotonic()
        log.info("another reaper had the fleet's turn: no pass this interval")
        return None
    metrics.observe(result)
    health.recent.append(pass_line(result))
    health.passes += 1
    health.last_ok = result.ok
    health.completed_at = time.monotonic()
    if result.ok:
        log.info("pass ok in %.2fs: %d verdict(s)", result.duration_seconds, result.verdict_count)
    else:
        problems = [p.line() for p in result.problems()]
        log.warning(
            "pass not ok in %.2fs: %s",
            result.duration_seconds,
            "; ".join(problems) or "see `reaper reap` for the report",
        )
    return result


async def _read_gates(
    gates: Callable[[], Awaitable[GateBoard]],
    metrics: ReaperMetrics,
    health: _Health,
    log: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> None:
    # the gauges keep the last board read; the page says why a read failed
    try:
        board = await gates()
    except ReaperError as exc:
        health.board_error = scrub(str(exc))
        log.warning("open gates not read: %s", health.board_error)
        return
    _keep_board(board, metrics, health)


def _keep_board(board: GateBoard, metrics: ReaperMetrics, health: _Health) -> None:
    metrics.observe_gates(board)
    health.board, health.board_error = board, None
