"""The desk's SQL: one file of named queries (``queries.sql``), what only answering a gate
runs and what only a person reads (:mod:`reaper.desk.reading`), loaded by the job queue's
loader (:func:`reaper.jobqueue.sql.load_queries`) into :data:`QUERIES`. A job made ready again
starts its dispatch episode with the job queue's own ``dispatch_jobs``."""

from __future__ import annotations

from reaper.jobqueue.sql import load_queries

QUERIES: dict[str, str] = load_queries(__name__)

__all__ = ["QUERIES"]
