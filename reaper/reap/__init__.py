"""The pass: ``run_pass`` over opened sources, ``reap_once`` from the configuration.

- :mod:`~reaper.reap.run`: the order of the steps;
- :mod:`~reaper.reap.pass_config`: what a pass takes of the configuration, derived once;
- :mod:`~reaper.reap.measure`, :mod:`~reaper.reap.observe`, :mod:`~reaper.reap.leases`,
  :mod:`~reaper.reap.policies`, :mod:`~reaper.reap.dead_letters`,
  :mod:`~reaper.reap.sightings`: the steps, each returning its outcome;
- :mod:`~reaper.reap.progress` and :mod:`~reaper.reap.result`: what a pass found and did;
- :mod:`~reaper.reap.sources`: opening PostgreSQL and the broker from the configuration.
"""
