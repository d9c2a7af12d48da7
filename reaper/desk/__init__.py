"""The desk: where a person answers the gates a pass raised (SPEC §1). Answering is a person's
act, not the pass's, so it has a room of its own beside the job queue's.

- :mod:`~reaper.desk.port`: the :class:`GateDesk` Protocol its callers depend on;
- :mod:`~reaper.desk.postgres`: :class:`PostgresDesk`, over the job queue's database, its
  answers in :mod:`~reaper.desk.answers` and :mod:`~reaper.desk.dead_letters`, what any desk
  does with an answer in :mod:`~reaper.desk.rules`, its SQL in ``sql/``.

It reads the job queue's low-level pieces (the driver seam, the ledger, its rows and rules);
the job queue never imports it."""
