"""The broker (SPEC §4): RabbitMQ's management HTTP API.

- :mod:`~reaper.broker.port`: the :class:`Broker` Protocol the pass depends on;
- :mod:`~reaper.broker.client`: :class:`ManagementClient`, the real one, over the one seam in
  :mod:`~reaper.broker.http` (the only import of httpx), whose failures are worded in
  :mod:`~reaper.broker.failures`;
- :mod:`~reaper.broker.records`: the API's answers read into the reaper's values;
- :mod:`~reaper.broker.capabilities` and :mod:`~reaper.broker.evidence`: what a version
  accepts, and the broker-wide consumer timeout with its evidence.
"""
