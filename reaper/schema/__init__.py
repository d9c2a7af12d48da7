"""The schema: the reaper's tables as ordered migrations, applied online.

The schema (SPEC §3, §10): the reaper's tables as ordered migrations, and ``reaper db
migrate``, which applies them online to a host's live tables. A pass never migrates.

- :mod:`~reaper.schema.steps`: each migration's statements as steps, each with the catalog
  check that says whether it is needed; the SQL in ``sql/``;
- :mod:`~reaper.schema.catalog`: what the database holds, read once without a lock on a table;
- :mod:`~reaper.schema.plan`: what is still needed (pure), and the dry run's script;
- :mod:`~reaper.schema.migrations`: the run, over the job queue's driver seam
  (:mod:`reaper.jobqueue.database`), and :mod:`~reaper.schema.blockers`: who blocks a lock.
"""
