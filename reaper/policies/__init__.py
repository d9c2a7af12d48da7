"""The declared broker policies: rendered for the broker at hand, reconciled and verified.

The declared broker policies (SPEC §4): reviewed files in ``policies/``, rendered for the
broker at hand, reconciled and verified on every owned queue.

- :mod:`~reaper.policies.declarations`: the reviewed files and their placeholders;
- :mod:`~reaper.policies.render`: what this broker can hold, and what holds instead (pure);
- :mod:`~reaper.policies.verify`: whether each declared bound is in force on each queue (pure);
- :mod:`~reaper.policies.reconcile`: read, write a real difference, read back, verify; plan;
- :mod:`~reaper.policies.outcome`: one policy's outcome, its reason and its detail (pure);
- :mod:`~reaper.policies.report`: the plan as text and JSON.
"""
