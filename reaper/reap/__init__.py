"""The pass (SPEC §5): :func:`run_pass` over opened sources, :func:`reap_once` from the
configuration, and the :class:`PassResult` they return.

- :mod:`~reaper.reap.run`: the order of the steps;
- :mod:`~reaper.reap.measure`, :mod:`~reaper.reap.leases`, :mod:`~reaper.reap.policies`,
  :mod:`~reaper.reap.dead_letters`: the steps;
- :mod:`~reaper.reap.progress` and :mod:`~reaper.reap.result`: what a pass found and did;
- :mod:`~reaper.reap.sources`: opening PostgreSQL and the broker from the configuration.
"""
