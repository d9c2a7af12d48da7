"""The job queue: the host's PostgreSQL record and the ledger, as a pass and a person use them.

- :mod:`~reaper.jobqueue.port`: the :class:`JobQueue` Protocol the pass and the gate commands
  depend on, and its typed results;
- :mod:`~reaper.jobqueue.postgres`: :class:`PostgresStore`, the real one, its methods written
  once in one class per concern (leases, sightings, dead letters, gates read and answered, the
  ledger, what the fleet keeps across passes), its SQL in ``sql/``, and the only import of the
  driver in :mod:`~reaper.jobqueue.database`.

Its in-memory double is :mod:`reaper.testing`'s; the schema, :mod:`reaper.schema`'s.
"""
