"""A request to end a pass early, by a signal.

A request to end a pass early (SPEC §11 "A pass cut short"): SIGTERM or SIGINT to
``reaper reap``. The pass does not stop in the middle of a write: the lease reap finishes the
page of moves in flight (each batch commits or rolls back), the steps after it do not run, and
the pass returns its result, which names what stopped it and what remains."""

from __future__ import annotations

__all__ = ["StopRequest"]


class StopRequest:
    """Set once, by a signal handler; read by the pass between its steps and pages."""

    def __init__(self) -> None:
        #: What asked the pass to stop (``SIGTERM``), None until something did.
        self.by: str | None = None

    def request(self, by: str) -> None:
        if self.by is None:
            self.by = by

    def __call__(self) -> bool:
        """Whether the pass has been asked to stop."""
        return self.by is not None
