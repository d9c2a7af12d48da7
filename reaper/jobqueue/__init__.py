"""The job queue (SPEC §3): the host's PostgreSQL record and the ledger, as a pass reads and
writes them.

- :mod:`~reaper.jobqueue.port`: the :class:`JobQueue` Protocol the pass depends on, and its
  typed results;
- :mod:`~reaper.jobqueue.postgres`: :class:`PostgresStore`, the real one, one module per
  concern beside it (leases, sightings, gates, dead letters, ledger, the fleet's turn), its
  SQL in ``sql/``, and the only import of the driver in :mod:`~reaper.jobqueue.database`.

Its in-memory double is :mod:`reaper.testing`'s; a gate's answer, :mod:`reaper.desk`'s (which
reads this room, never the reverse); the schema and ``reaper db migrate``, :mod:`reaper.schema`'s.
"""
