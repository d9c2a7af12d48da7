"""The job queue (SPEC §3): the host's PostgreSQL record and the ledger.

- :mod:`~reaper.jobqueue.port`: the :class:`JobQueue` Protocol the pass depends on, and its
  typed results;
- :mod:`~reaper.jobqueue.postgres`: :class:`PostgresStore`, the real one, one module per
  concern beside it (leases, sightings, gates, dead letters, ledger, the fleet's turn), its
  SQL in ``sql/``, and the only import of the driver in :mod:`~reaper.jobqueue.database`.

Its in-memory double, held to the same contract tests, is :mod:`reaper.testing`'s.

The schema these tables come from, and ``reaper db migrate``, are :mod:`reaper.schema`'s.
"""
