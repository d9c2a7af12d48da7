"""Doubles for the tests of what sits above the store, in this project and a host's own.

Doubles for the tests of what sits above the store (the pass, the hook, the commands), in
this project and in a host's own: :class:`~reaper.testing.memory.MemoryJobQueue`, the job
queue and ledger in memory (its tables in :mod:`~reaper.testing.memory_records`), held to the
same contract tests as :class:`~reaper.jobqueue.postgres.PostgresStore` (``tests/contract/``).
No pass imports this room.
"""
