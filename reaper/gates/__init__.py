"""Gates: what waits for a person, returned as values the CLI and the status page print.

- :mod:`~reaper.gates.ids`: a gate (and a project, a job) found by its id or a prefix of it;
- :mod:`~reaper.gates.answering`: an answer checked and taken on the store, a dead letter
  replayed through the broker port first, or previewed (``--dry-run``);
- :mod:`~reaper.gates.wording`: what an answer did, or would do, in one line;
- :mod:`~reaper.gates.views`, :mod:`~reaper.gates.selection`: a gate as a person sees it,
  listed or shown whole, and which gates a person's options select;
- :mod:`~reaper.gates.board`: the open gates at a glance, the dead-letter queues safe to clear.

The store raises and answers gates (:mod:`reaper.jobqueue`); nothing here opens a source."""
